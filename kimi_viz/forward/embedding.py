"""One forward pass replayed: SGLang's ``get_embedding_and_mask`` from a batch of requests to features on pad tokens.

The model's forward embeds the images of **every** request in the prefill batch together
(``managers/mm_schedule.py``; ``managers/mm_utils.py`` in 0.5.17; ``docs/pipeline.md`` §10):

1. **Precomputed path** (the EPD language side): when every item carries ``precomputed_embeddings``,
   each request's rows for its window are cut with ``get_embedding_chunk`` (the first rows: surplus
   rows are dropped silently) and nothing is encoded.
2. **Per-image path** (CUDA and CPU): per request, the items whose ``<|media_pad|>`` run overlaps the
   window ``[prefix, prefix + extend)`` are looked up in the embedding cache; a hit whose row count
   is not the run's is discarded with a warning (0.5.19+; before, it is used as it is); the misses
   of all requests, deduplicated by ``item.hash`` (0.5.17–0.5.18) or ``(item.hash, tokens)``
   (0.5.19+), go to **one** ``get_image_feature`` call — the call :func:`~kimi_viz.split.replay`
   replays on every attention-TP rank. Its rows (``h·w/4`` per image, the 2×2 merge) are split back
   by each item's token count (``torch.split``: its own error when they do not add up), cached, and
   each request's part for the window is sliced (``_slice_item_chunk``).
   HIP, NPU and XPU (``ForwardRules.by_item_platforms``) call the encoder once per request instead.
3. ``_count_mm_tokens_in_extend`` counts the window's pad tokens (0.5.17: the ids' mask does);
   ``_adjust_embedding_length`` keeps the last rows when there are too many (with its warning) or
   raises ``Insufficient multimodal embedding length`` when too few; then the rows are written onto
   the pad tokens in order (``masked_scatter_``, ``index_copy_`` from 0.5.19).

:func:`replay_forward` replays one pass and returns a :class:`ForwardTrace`: every step with its
variables, the call (which request and image each item is) and its split trace, the warnings SGLang
logs, the exception it raises and where, and for every pad token which image's feature row lands on
it. Only the bookkeeping is replayed; a row is known by its provenance (:class:`~.rows.Rows`), not its
values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..devices import DeviceLike
from ..message_catalogue.messages import (
    MSG_ASYNC_ASSERT,
    MSG_DISCARD,
    MSG_INDEX_COPY,
    MSG_INSUFFICIENT,
    MSG_MASKED_SCATTER,
    MSG_ONLY_SOME_PRECOMPUTED,
    MSG_RAISE_CHUNK,
    MSG_SCATTER_INDEX,
    MSG_SPLIT_SIZES,
    MSG_TOKEN_MISMATCH,
)
from ..preprocess.config import get_config
from ..releases import PathSource, Release
from ..scheduler.flags import FLAG_OF, Platform
from ..split._replay import replay
from ..split.batch import Batch, Item
from ..split.trace import Check, ErrorInfo, Step, Trace
from .cache import EmbeddingCache
from .rows import Rows
from .step_records import (
    CacheLookups,
    ChunkSlices,
    EncodeCall,
    ForwardBatch,
    LengthFit,
    PathChoice,
    Scatter,
    SplitBack,
    TokenCount,
)
from .trace import (
    ADJUST_LENGTH,
    CACHE_LOOKUP,
    CHOOSE_PATH,
    COUNT_TOKENS,
    ENCODE_CALL,
    FORWARD_BATCH,
    SCATTER,
    SLICE_CHUNKS,
    SPLIT_BACK,
    CallItem,
    CallRecord,
    ForwardItem,
    ForwardRequest,
    ForwardTrace,
    Lookup,
    PathName,
    Placement,
    Stage,
)


class _Raised(Exception):
    """SGLang raises here: carries the error and the stage."""

    def __init__(self, error: ErrorInfo, stage: Stage):
        super().__init__(str(error))
        self.error = error
        self.stage = stage


Encoder = Callable[[list[ForwardItem]], tuple[Rows | None, CallRecord]]

# Patches per merged-token side when no processor config is given: the default config's.
DEFAULT_MERGE_KERNEL_SIZE = get_config().merge_kernel_size


def produced_tokens(
    trace: Trace, items: Sequence[Item], *, merge_kernel_size: int = DEFAULT_MERGE_KERNEL_SIZE
) -> list[int]:
    """Return the merged tokens each item of a clean call yields: its produced rows (or, used as it is, its
    eager feature's rows) over ``merge_kernel_size**2``, the merge (2x2 by default)."""
    produced = {row.image: row.produced_rows for rank in trace.ranks for row in rank.images}
    patches_per_token = merge_kernel_size**2
    tokens = []
    for g, item in enumerate(items):
        rows = produced.get(g)
        if rows is None:  # used as it is (eager): the feature's own rows
            rows = int(item.feature.shape[0]) if item.feature.shape else 0
        tokens.append(rows // patches_per_token)
    return tokens


def call_encoder(
    *,
    release: Release,
    tp_size: int,
    processor: dict[str, Any] | None,
    mode: str = "shapes",
    device: DeviceLike = "auto",
) -> Encoder:
    """Return the encoder of a pass: one ``get_image_feature`` call replayed on every rank, rows ``h·w/4`` per image.

    The call's items are the misses in order; its output holds each image's merged tokens (its produced
    rows over the processor's ``merge_kernel_size**2``), in the order of the items (the DP runner gathers
    every rank's images back into place).
    """
    merge_kernel_size = DEFAULT_MERGE_KERNEL_SIZE if processor is None else get_config(processor).merge_kernel_size

    def encode(items: list[ForwardItem]) -> tuple[Rows | None, CallRecord]:
        batch = Batch(
            items=[i.item for i in items if i.item is not None],
            processor=processor,
            attn_tp_size=tp_size,
            sglang_version=release.version,
            code_path=release.code_path,
            code_path_source=PathSource.RECORDED,  # the release the kit replays the pass on
            created_by="kimi-viz forward pass",
        )
        version, path = release.version, release.code_path  # a release the fix search changed replays as built
        trace = replay(batch, tp_size=tp_size, sglang_version=version, code_path=path, mode=mode, device=device)
        record = CallRecord([CallItem(i.source, i.key, i.tokens) for i in items], trace)
        if trace.error is not None:
            return None, record
        tokens = record.produced = produced_tokens(trace, batch.items, merge_kernel_size=merge_kernel_size)
        return Rows.cat(Rows.of(i.rows_source, n) for i, n in zip(items, tokens)), record

    return encode


def _chunk(rows: Rows, prefix: int, extend: int, offsets: list[tuple[int, int]]) -> Rows:
    """Return ``get_embedding_chunk``: rows ``[T(prefix), T(prefix + extend))``, runs laid out in ``offsets`` order."""

    def covered(x: int) -> int:
        return sum(max(0, min(e + 1, x) - s) for s, e in offsets)

    return rows.slice(covered(prefix), covered(prefix + extend))


def _slice_item(rows: Rows, item: ForwardItem, prefix: int, extend: int) -> Rows:
    """Return ``_slice_item_chunk``: the item's rows for the window (row r is position ``start + r``)."""
    start, end = item.offsets
    return rows.slice(max(start, prefix) - start, min(end + 1, prefix + extend) - start)


class _Pass:
    """The mutable state of one pass while it is replayed."""

    def __init__(self, release: Release, cache: EmbeddingCache, encode: Encoder):
        self.rules = release.forward
        self.cache = cache
        self.encode = encode
        self.steps: list[Step] = []
        self.calls: list[CallRecord] = []
        self.warnings: list[str] = []
        self.lookups: list[Lookup] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def add_step(self, step: Step, stage: Stage) -> None:
        """Append ``step``; where it carries SGLang's error, the pass raises there (at ``stage``)."""
        self.steps.append(step)
        if step.error is not None:
            raise _Raised(step.error, stage)

    def call(self, items: list[ForwardItem]) -> Rows:
        rows, record = self.encode(items)
        self.calls.append(record)
        error = None if record.trace is None else record.trace.error
        if error is None and rows is None:
            error = ErrorInfo("RuntimeError", "get_image_feature returned nothing")
        self.steps.append(
            Step(
                ENCODE_CALL,
                "Encode the misses in one get_image_feature call",
                "§10.3",
                EncodeCall(
                    [
                        {"request": i.source.rid, "image": i.source.image, "label": i.source.label, "tokens": i.tokens}
                        for i in items
                    ],
                    list(record.produced),
                ),
                f"{len(items)} item(s) from {len({i.source.request for i in items})} request(s) in one call: "
                "get_image_feature's deferred split runs on every attention-TP rank for these items.",
                error=error,
            )
        )
        if error is not None or rows is None:
            raise _Raised(error or ErrorInfo("RuntimeError", "get_image_feature returned nothing"), "call")
        return rows

    def split_back(self, rows: Rows, items: list[ForwardItem]) -> list[Rows]:
        counts = [i.tokens for i in items]
        passed = len(rows) == sum(counts)
        error = None if passed else ErrorInfo("RuntimeError", MSG_SPLIT_SIZES.format(len(rows), counts))
        step = Step(
            SPLIT_BACK,
            "Split the call's rows back by each item's pad tokens",
            "§10.3",
            SplitBack(len(rows), counts),
            "torch.split(embedding, token_counts): each item's rows must be exactly its <|media_pad|> run.",
            Check("rows == sum(token counts)", sum(counts), len(rows), passed),
            error=error,
        )
        self.add_step(step, "split-back")
        return rows.split(counts)

    def store(self, key: str, tokens: int, rows: Rows) -> Rows:
        stored = self.cache.set(key, rows)
        if stored and self.rules.prefers_cached_after_set:
            cached = self.cache.get(key)
            if cached is not None and len(cached) == tokens:
                return cached  # the entry already there under this hash, when its length fits
        return rows


def _look_up(
    state: _Pass, item: ForwardItem, key: Any, found: dict[Any, Rows], misses: dict[Any, ForwardItem]
) -> tuple[str, Lookup]:
    """Look one overlapping item up (``found`` and ``misses`` are updated); return what happened, in words
    and as a :class:`Lookup`."""
    rules = state.rules
    if key in found:
        return "already found in this pass", Lookup(item.source, "found")
    cached = state.cache.get(item.key)
    if cached is not None and rules.discards_stale_cache and len(cached) != item.tokens:
        state.warn(MSG_DISCARD.format(item.key, item.tokens, len(cached)))
        state.cache.free(item.key)
        misses[key] = item
        what = f"stale cache entry ({len(cached)} rows for {item.tokens} tokens): discarded, a miss"
        return what, Lookup(item.source, "discarded", len(cached))
    if cached is not None:
        found[key] = cached
        what = "cache hit" + ("" if len(cached) == item.tokens else f" ({len(cached)} rows, used as is)")
        return what, Lookup(item.source, "hit" if len(cached) == item.tokens else "stale-hit", len(cached))
    if key in misses:
        return f"a duplicate of {misses[key].source.name}: encoded once", Lookup(item.source, "duplicate")
    misses[key] = item
    return "miss", Lookup(item.source, "miss")


def _slice_chunks(
    state: _Pass,
    requests: list[ForwardRequest],
    overlapping: dict[int, list[tuple[ForwardItem, Any]]],
    found: dict[Any, Rows],
) -> list[Rows]:
    """Return each request's part of its overlapping images for its window, in request order (with its step)."""
    chunks: list[Rows] = []
    sliced = []
    for request in requests:
        for item, key in overlapping[request.index]:
            part = _slice_item(found[key], item, request.prefix, request.extend)
            chunks.append(part)
            sliced.append({"request": request.rid, "image": item.source.image, "rows": len(part)})
    state.steps.append(
        Step(
            SLICE_CHUNKS,
            "Cut each request's part of its images for this window",
            "§10.3",
            ChunkSlices(sliced),
            "_slice_item_chunk keeps rows max(start, prefix) - start .. min(end + 1, prefix + extend) - start.",
        )
    )
    return chunks


def _per_image(state: _Pass, requests: list[ForwardRequest]) -> list[Rows]:
    """Replay ``_batch_encode_per_image_misses`` and ``_assemble_per_image_chunk``: one call for every request."""
    rules = state.rules
    found: dict[Any, Rows] = {}
    misses: dict[Any, ForwardItem] = {}
    overlapping: dict[int, list[tuple[ForwardItem, Any]]] = {}  # each request's items in the window, with their key
    lookups = []
    for request in requests:
        overlapping[request.index] = [
            (item, (item.key, item.tokens) if rules.dedupe_by_tokens else item.key) for item in request.touched()
        ]
        for item, key in overlapping[request.index]:
            what, lookup = _look_up(state, item, key, found, misses)
            state.lookups.append(lookup)
            lookups.append(
                {
                    "request": request.rid,
                    "image": item.source.image,
                    "label": item.source.label,
                    "hash": item.key,
                    "tokens": item.tokens,
                    "lookup": what,
                }
            )
    state.steps.append(
        Step(
            CACHE_LOOKUP,
            "Look every overlapping item up in the embedding cache",
            "§10.3",
            CacheLookups(lookups, "(item.hash, tokens)" if rules.dedupe_by_tokens else "item.hash"),
            "Misses of every request in the batch are collected once per key for one call.",
        )
    )
    if misses:
        keys = list(misses)
        items = [misses[k] for k in keys]
        rows = state.call(items)
        parts = state.split_back(rows, items)
        for k, item, part in zip(keys, items, parts):
            found[k] = state.store(item.key, item.tokens, part)
    return _slice_chunks(state, requests, overlapping, found)


def _by_item(state: _Pass, request: ForwardRequest) -> list[Rows]:
    """Replay ``_get_chunked_embedding_by_item`` (HIP/NPU/XPU): one call for this request's misses."""
    rules = state.rules
    touched = request.touched()
    found: dict[int, Rows] = {}
    misses: list[tuple[int, ForwardItem]] = []
    for k, item in enumerate(touched):
        cached = state.cache.get(item.key)
        if cached is not None and rules.discards_stale_cache and len(cached) != item.tokens:
            state.warn(MSG_DISCARD.format(item.key, item.tokens, len(cached)))
            state.cache.free(item.key)
            misses.append((k, item))
            state.lookups.append(Lookup(item.source, "discarded", len(cached)))
        elif cached is not None:
            found[k] = cached
            state.lookups.append(Lookup(item.source, "hit" if len(cached) == item.tokens else "stale-hit", len(cached)))
        else:
            misses.append((k, item))
            state.lookups.append(Lookup(item.source, "miss"))
    if misses:
        items = [i for _, i in misses]
        parts = state.split_back(state.call(items), items)
        for (k, item), part in zip(misses, parts):
            found[k] = state.store(item.key, item.tokens, part)
    return [_slice_item(found[k], item, request.prefix, request.extend) for k, item in enumerate(touched)]


def _precomputed(state: _Pass, requests: list[ForwardRequest]) -> Rows | None:
    """Replay ``_get_precomputed_embedding``: None when the batch goes to the encoder path."""
    chunks: list[Rows | None] = []
    for request in requests:
        if not request.items:
            continue
        if any(i.precomputed is None for i in request.items):
            chunk = None
        elif state.rules.precomputed_per_item:
            chunk = Rows.cat(
                _chunk(i.precomputed, request.prefix, request.extend, [i.offsets])  # type: ignore[arg-type]
                for i in request.items
            )
        else:
            whole = Rows.cat(i.precomputed for i in request.items if i.precomputed is not None)
            chunk = _chunk(whole, request.prefix, request.extend, [i.offsets for i in request.items])
        if chunk is None and len(request.items) > 1:
            return None
        chunks.append(chunk)
    if any(c is not None for c in chunks):
        if not all(c is not None for c in chunks):
            raise _Raised(ErrorInfo("NotImplementedError", MSG_ONLY_SOME_PRECOMPUTED), "precomputed")
        return Rows.cat(c for c in chunks if c is not None)
    return None


def _batch_step(batch: list[ForwardRequest], error: ErrorInfo | None = None) -> Step:
    """Return the pass's first step: every request's items and window (``error``: SGLang raises before the path)."""
    return Step(
        FORWARD_BATCH,
        "The forward batch: every request's items and window",
        "§10",
        ForwardBatch(
            [
                {
                    "rid": r.rid,
                    "window": list(r.window),
                    "items": [{"image": i.source.image, "offsets": list(i.offsets), "hash": i.key} for i in r.items],
                }
                for r in batch
            ]
        ),
        "get_embedding_and_mask receives the items of every request in the batch at once.",
        error=error,
    )


def _choose_path(
    state: _Pass, batch: list[ForwardRequest], requests: list[ForwardRequest], platform: Platform
) -> tuple[PathName, Rows | None]:
    """Return the pass's path and, on the precomputed path, its rows (the batch and the choice recorded as steps).

    Only some items precomputed raises before the choice: the batch step, the last one, carries that error.
    """
    try:
        embedding = _precomputed(state, requests)
    except _Raised as raised:
        state.steps.append(_batch_step(batch, raised.error))
        raise
    state.steps.append(_batch_step(batch))
    path: PathName
    if embedding is not None:
        path = "precomputed"
    else:
        path = "by-item" if platform in state.rules.by_item_platforms else "per-image"
    state.steps.append(
        Step(
            CHOOSE_PATH,
            "Precomputed rows, or the encoder",
            "§10.1",
            PathChoice(path, platform),
            "Every item carries precomputed_embeddings (EPD): they are cut per window; otherwise the encoder runs."
            if path == "precomputed"
            else f"On {platform} the per-{'request' if path == 'by-item' else 'image'} path encodes the misses.",
        )
    )
    return path, embedding


def _place_rows(
    state: _Pass,
    requests: list[ForwardRequest],
    embedding: Rows,
    count: int,
    chunked_prefill_size: int,
    async_assert: bool,
) -> list[Placement]:
    """Count the window's ``count`` pad tokens, fit the rows to them and write them on; return where each run landed."""
    rules = state.rules
    mask_count = count  # the request side writes one pad value per <|media_pad|> of the run
    expected = count if rules.count_from_offsets else mask_count
    error = None
    if async_assert and rules.async_assert and mask_count != expected:
        error = ErrorInfo("RuntimeError", MSG_ASYNC_ASSERT)
    step = Step(
        COUNT_TOKENS,
        "Count the window's pad tokens",
        "§10.4",
        TokenCount("offsets" if rules.count_from_offsets else "the input ids' mask", expected, len(embedding)),
        "_count_mm_tokens_in_extend counts every run's overlap with its request's window.",
        error=error,
    )
    state.add_step(step, "adjust")
    embedding = _adjust(state, embedding, expected, chunked_prefill_size)
    return _scatter(state, requests, embedding, mask_count, rules.index_copy_scatter)


def replay_forward(
    batch: list[ForwardRequest],
    *,
    release: Release,
    tp_size: int,
    cache: EmbeddingCache,
    encode: Encoder,
    platform: Platform = "cuda",
    chunked_prefill_size: int = FLAG_OF["chunked_prefill_size"].default,
    async_assert: bool = False,
    formed_by: Sequence[Step] = (),
) -> ForwardTrace:
    """Return the :class:`ForwardTrace` of one forward pass of ``batch`` on ``release`` (``cache`` is updated).

    ``encode`` runs one ``get_image_feature`` call (:func:`call_encoder`); ``platform`` picks the
    per-image path (cuda, cpu) or the per-request one (hip, npu, xpu); ``chunked_prefill_size`` -1 means
    chunked prefill is off (it only changes a warning); ``async_assert`` is ``SGLANG_ENABLE_ASYNC_ASSERT``.
    ``formed_by`` are the steps that formed the pass (the scheduler's radix prefix match and admission,
    :func:`~.scheduled.scheduler_steps`): the trace's steps open with them.
    """
    state = _Pass(release, cache, encode)
    state.steps.extend(formed_by)
    requests = [r for r in batch if r.items]
    path: PathName = "none"
    embedding: Rows | None = None
    error: ErrorInfo | None = None
    stage: Stage | None = None
    placements: list[Placement] = []
    count = sum(hi - lo for r in requests for lo, hi in r.pad_positions())
    try:
        path, embedding = _choose_path(state, batch, requests, platform)
        if path != "precomputed":
            embedding = _encoder_path(state, requests, platform)
        if embedding is not None:
            placements = _place_rows(state, requests, embedding, count, chunked_prefill_size, async_assert)
    except _Raised as raised:  # the step where SGLang raises already carries the error
        error, stage = raised.error, raised.stage
    return ForwardTrace(
        tuple(batch),
        release,
        tp_size,
        path,
        state.steps,
        state.calls,
        state.warnings,
        error,
        stage,
        placements,
        state.lookups,
    )


def _encoder_path(state: _Pass, requests: list[ForwardRequest], platform: Platform) -> Rows | None:
    """Replay ``_get_chunked_prefill_embedding``: per-image (one call for all) or per-request, request order."""
    active = [r for r in requests if r.extend > 0]
    if platform in state.rules.by_item_platforms:  # one call per request
        chunks = [part for request in active for part in _by_item(state, request)]
    else:  # one call for every request (no steps at all when none extends)
        chunks = _per_image(state, active) if active else []
    return Rows.cat(chunks) if chunks else None


def adjust_embedding_length(
    embedding: Rows, count: int, chunked_prefill_size: int = FLAG_OF["chunked_prefill_size"].default
) -> tuple[Rows, list[str], ErrorInfo | None]:
    """Return ``_adjust_embedding_length``'s ``(rows kept, warnings, error)`` for ``count`` pad tokens.

    Equal: unchanged. More rows: the warning (and the chunked-prefill hint unless chunking is off, -1)
    and the **last** ``count`` rows (all of them when ``count`` is 0, as ``emb[-0:]`` is). Fewer: the
    warning and SGLang's ``RuntimeError``.
    """
    rows = len(embedding)
    if rows == count:
        return embedding, [], None
    warnings = [MSG_TOKEN_MISMATCH.format(count, rows)]
    if count < rows:
        if chunked_prefill_size != -1:
            warnings.append(MSG_RAISE_CHUNK)
        return embedding.tail(count), warnings, None
    return embedding, warnings, ErrorInfo("RuntimeError", MSG_INSUFFICIENT.format(count, rows))


def _adjust(state: _Pass, embedding: Rows, count: int, chunked_prefill_size: int) -> Rows:
    """Replay ``_adjust_embedding_length``: equal is fine, more rows keep the last ones, fewer raise."""
    kept, warnings, error = adjust_embedding_length(embedding, count, chunked_prefill_size)
    for text in warnings:
        state.warn(text)
    rows = len(embedding)
    step = Step(
        ADJUST_LENGTH,
        "Fit the rows to the pad tokens",
        "§10.4",
        LengthFit(count, rows, len(kept) if error is None else None),
        "More rows than pad tokens: the last ones are kept (with a warning); fewer: SGLang raises.",
        Check("rows == pad tokens", count, rows, rows == count),
        error=error,
    )
    state.add_step(step, "adjust")
    return kept


def _scatter(
    state: _Pass, requests: list[ForwardRequest], embedding: Rows, mask_count: int, index_copy: bool
) -> list[Placement]:
    """Write the rows onto the masked positions in order; return where each run of rows landed."""
    positions = [(r.index, lo, hi) for r in requests for lo, hi in r.pad_positions()]
    rows = len(embedding)
    error = None
    if index_copy:
        if mask_count >= rows + 2:
            error = ErrorInfo("RuntimeError", MSG_SCATTER_INDEX.format(rows + 1, rows + 1))
        elif mask_count < rows:
            total = sum(r.extend for r in requests)
            error = ErrorInfo("IndexError", MSG_INDEX_COPY.format(total, total))
    elif mask_count > rows:
        error = ErrorInfo("RuntimeError", MSG_MASKED_SCATTER)
    placements: list[Placement] = []
    if error is None:
        placements = _placements(positions, embedding)
    step = Step(
        SCATTER,
        "Write the rows onto the pad tokens",
        "§10.2",
        Scatter(mask_count, rows, "index_copy_" if index_copy else "masked_scatter_"),
        "Row k lands on the k-th <|media_pad|> of the batch, requests in order.",
        Check("pad tokens == rows", rows, mask_count, mask_count == rows),
        error=error,
    )
    state.add_step(step, "scatter")
    return placements


def _placements(positions: list[tuple[int, int, int]], embedding: Rows) -> list[Placement]:
    """Return the runs of rows each ``[lo, hi)`` run of pad positions receives, rows taken in order."""
    out: list[Placement] = []
    taken = 0
    for request, lo, hi in positions:
        part = embedding.slice(taken, taken + (hi - lo))
        taken += hi - lo
        start = lo
        for run in part.runs:
            out.append(Placement(request, start, run))
            start += run.count
    return out


__all__ = ["call_encoder", "adjust_embedding_length", "produced_tokens", "replay_forward"]
