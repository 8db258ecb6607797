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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..messages import (
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
from ..releases import Release
from ..split.batch import Batch, Item
from ..split.trace import Check, ErrorInfo, Step, Trace
from .cache import EmbeddingCache
from .rows import RowRun, Rows, Source

# --- step names (the stepper shows them before and after get_image_feature's own) -------------------
FORWARD_BATCH = "forward_batch"
CHOOSE_PATH = "choose_path"
CACHE_LOOKUP = "cache_lookup"
ENCODE_CALL = "encode_call"
SPLIT_BACK = "split_back"
SLICE_CHUNKS = "slice_chunks"
COUNT_TOKENS = "count_tokens"
ADJUST_LENGTH = "adjust_length"
SCATTER = "scatter"
FORWARD_STEPS = (
    FORWARD_BATCH,
    CHOOSE_PATH,
    CACHE_LOOKUP,
    ENCODE_CALL,
    SPLIT_BACK,
    SLICE_CHUNKS,
    COUNT_TOKENS,
    ADJUST_LENGTH,
    SCATTER,
)

Platform = Literal["cuda", "cpu", "hip", "npu", "xpu"]
PLATFORMS: tuple[Platform, ...] = ("cuda", "cpu", "hip", "npu", "xpu")
Stage = Literal["precomputed", "call", "split-back", "adjust", "scatter"]
PathName = Literal["precomputed", "per-image", "by-item", "none"]
LookupOutcome = Literal["miss", "hit", "stale-hit", "discarded", "duplicate", "found"]


@dataclass(frozen=True)
class ForwardItem:
    """One ``MultimodalDataItem`` of a request in the forward batch: whose image, its hash, its pad run."""

    source: Source
    key: str  # item.hash: equal bytes give equal hashes
    offsets: tuple[int, int]  # the inclusive (start, end) of its <|media_pad|> run in the request's prompt
    item: Item | None  # what get_image_feature receives for it (None: it only carries precomputed rows)
    precomputed: Rows | None = None  # the EPD encoder's rows, on the language side
    origin: Source | None = None  # whose pixels its feature really holds, when not its own (a stale artifact)

    @property
    def rows_source(self) -> Source:
        """Return the image the encoder's rows for this item come from (its own, unless its feature is stale)."""
        return self.origin if self.origin is not None else self.source

    @property
    def tokens(self) -> int:
        """Return the run's length: the item's ``<|media_pad|>`` tokens (SGLang's ``end - start + 1``)."""
        return self.offsets[1] - self.offsets[0] + 1

    def overlaps(self, start: int, stop: int) -> bool:
        """Return whether the run touches the half-open window ``[start, stop)``."""
        return self.offsets[1] >= start and self.offsets[0] < stop


@dataclass(frozen=True)
class ForwardRequest:
    """One request of the forward batch: its items and the window this pass computes, ``[prefix, prefix+extend)``."""

    index: int
    rid: str
    items: tuple[ForwardItem, ...]
    prefix: int
    extend: int
    length: int  # the prompt's length

    @property
    def window(self) -> tuple[int, int]:
        """Return the half-open window ``(prefix, prefix + extend)``."""
        return self.prefix, self.prefix + self.extend

    def pad_positions(self) -> list[tuple[int, int]]:
        """Return the half-open ``[start, stop)`` pad positions inside the window, run by run."""
        start, stop = self.window
        out = []
        for item in self.items:
            lo, hi = max(item.offsets[0], start), min(item.offsets[1] + 1, stop)
            if lo < hi:
                out.append((lo, hi))
        return out


@dataclass(frozen=True)
class CallItem:
    """One item of the ``get_image_feature`` call: its image, hash, tokens and whether it stands for others."""

    source: Source
    key: str
    tokens: int


@dataclass
class CallRecord:
    """One ``get_image_feature`` call of the pass: its items in order and the replay of its deferred split."""

    items: list[CallItem]
    trace: Trace | None  # None when a caller gave no replay (e.g. an encoder function of its own)
    produced: list[int] = field(default_factory=list)  # feature rows (tokens) each item yields

    def to_json(self) -> dict[str, Any]:
        """Return ``{"items": [...], "produced_tokens": [...], "outcome", "error"}``."""
        error = None if self.trace is None or self.trace.error is None else self.trace.error.to_json()
        return {
            "items": [
                {"request": i.source.rid, "image": i.source.image, "label": i.source.label, "tokens": i.tokens}
                for i in self.items
            ],
            "produced_tokens": list(self.produced),
            "outcome": "error" if error else "ok",
            "error": error,
        }


@dataclass(frozen=True)
class Lookup:
    """One overlapping item looked up in the embedding cache: a miss (into the call), a hit, or a duplicate.

    ``stale-hit``: a cached entry of another length used as it is (before 0.5.19); ``discarded``: such
    an entry dropped with a warning and the item encoded (0.5.19+); ``found``: an equal key already
    found in this pass; ``duplicate``: an equal key already among this pass's misses (encoded once).
    """

    source: Source
    outcome: LookupOutcome
    rows: int | None = None  # the cached entry's rows, for hits and stale entries


@dataclass(frozen=True)
class Placement:
    """Feature rows written onto a request's pad tokens: positions ``[start, start + run.count)`` get ``run``."""

    request: int
    start: int
    run: RowRun


@dataclass
class ForwardTrace:
    """The replay of one forward pass: its steps, calls, warnings, error, and where every feature row lands."""

    batch: tuple[ForwardRequest, ...]
    release: Release
    tp_size: int
    path: PathName
    steps: list[Step]
    calls: list[CallRecord]
    warnings: list[str]
    error: ErrorInfo | None
    stage: Stage | None  # where it raised
    placements: list[Placement]
    cache_keys: list[str]  # the cache's keys after the pass, least recently used first
    lookups: list[Lookup] = field(default_factory=list)  # every overlapping item's cache lookup, in order

    @property
    def outcome(self) -> Literal["ok", "error"]:
        """Return ``"error"`` when the pass raises, else ``"ok"``."""
        return "error" if self.error is not None else "ok"

    def token_owner(self, request: int, position: int) -> tuple[Source, int] | None:
        """Return ``(source, row)`` of the feature row written on ``position`` of ``request``, or None."""
        for p in self.placements:
            if p.request == request and p.start <= position < p.start + p.run.count:
                return p.run.source, p.run.start + position - p.start
        return None

    def misplaced(self) -> list[tuple[ForwardRequest, ForwardItem, Placement]]:
        """Return every placement whose rows are not the rows the pad tokens' own image would give there."""
        out = []
        for p in self.placements:
            request = self.batch[[r.index for r in self.batch].index(p.request)]
            item = next(i for i in request.items if i.offsets[0] <= p.start <= i.offsets[1])
            own_row = p.start - item.offsets[0]
            same_pixels = p.run.source == item.source or (item.key and p.run.source.key == item.key)
            if not same_pixels or p.run.start != own_row:
                out.append((request, item, p))
        return out

    def to_json(self) -> dict[str, Any]:
        """Return the pass as JSON: requests and windows, path, calls, warnings, error and placements."""
        return {
            "requests": [
                {
                    "rid": r.rid,
                    "prefix_length": r.prefix,
                    "extend_length": r.extend,
                    "items": [
                        {"image": i.source.image, "label": i.source.label, "offsets": list(i.offsets), "hash": i.key}
                        for i in r.items
                    ],
                }
                for r in self.batch
            ],
            "sglang_version": self.release.version,
            "tp_size": self.tp_size,
            "path": self.path,
            "calls": [c.to_json() for c in self.calls],
            "warnings": list(self.warnings),
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "stage": self.stage,
            "lookups": [
                {"request": u.source.rid, "image": u.source.image, "outcome": u.outcome, "cached_rows": u.rows}
                for u in self.lookups
            ],
            "placements": [
                {
                    "request": self.batch[[r.index for r in self.batch].index(p.request)].rid,
                    "positions": [p.start, p.start + p.run.count],
                    "rows_of": {"request": p.run.source.rid, "image": p.run.source.image, "label": p.run.source.label},
                    "rows": [p.run.start, p.run.start + p.run.count],
                }
                for p in self.placements
            ],
            "steps": [s.to_json() for s in self.steps],
        }


class _Raised(Exception):
    """SGLang raises here: carries the error and the stage."""

    def __init__(self, error: ErrorInfo, stage: Stage):
        super().__init__(str(error))
        self.error = error
        self.stage = stage


Encoder = Callable[[list[ForwardItem]], tuple[Rows | None, CallRecord]]


def call_encoder(
    *, release: Release, tp_size: int, processor: dict[str, Any] | None, mode: str = "shapes", device: Any = "auto"
) -> Encoder:
    """Return the encoder of a pass: one ``get_image_feature`` call replayed on every rank, rows ``h·w/4`` per image.

    The call's items are the misses in order; its output holds each image's merged tokens (its produced
    rows / 4), in the order of the items (the DP runner gathers every rank's images back into place).
    """
    from ..split._replay import replay

    def encode(items: list[ForwardItem]) -> tuple[Rows | None, CallRecord]:
        batch = Batch(
            items=[i.item for i in items if i.item is not None],
            processor=processor,
            attn_tp_size=tp_size,
            sglang_version=release.version,
            created_by="kimi-viz forward pass",
        )
        trace = replay(batch, tp_size=tp_size, sglang_version=release.version, mode=mode, device=device, find_fix=False)
        record = CallRecord([CallItem(i.source, i.key, i.tokens) for i in items], trace)
        if trace.error is not None:
            return None, record
        produced = {row.image: row.produced_rows for rank in trace.ranks for row in rank.images}
        tokens = []
        for g, item in enumerate(batch.items):
            rows = produced.get(g)
            if rows is None:  # used as it is (eager): the feature's own rows
                rows = int(item.feature.shape[0]) if item.feature.shape else 0
            tokens.append(rows // 4)  # the 2x2 merge
        record.produced = tokens
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

    def call(self, items: list[ForwardItem]) -> Rows:
        rows, record = self.encode(items)
        self.calls.append(record)
        error = None if record.trace is None else record.trace.error
        self.steps.append(
            Step(
                ENCODE_CALL,
                "Encode the misses in one get_image_feature call",
                "§10.3",
                {
                    "call": [
                        {"request": i.source.rid, "image": i.source.image, "label": i.source.label, "tokens": i.tokens}
                        for i in items
                    ],
                    "produced_tokens": list(record.produced),
                },
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
        self.steps.append(
            Step(
                SPLIT_BACK,
                "Split the call's rows back by each item's pad tokens",
                "§10.3",
                {"rows": len(rows), "split_sizes": counts},
                "torch.split(embedding, token_counts): each item's rows must be exactly its <|media_pad|> run.",
                Check("rows == sum(token counts)", sum(counts), len(rows), passed),
                error=error,
            )
        )
        if error is not None:
            raise _Raised(error, "split-back")
        return rows.split(counts)

    def store(self, key: str, tokens: int, rows: Rows) -> Rows:
        stored = self.cache.set(key, rows)
        if stored and self.rules.prefers_cached_after_set:
            cached = self.cache.get(key)
            if cached is not None and len(cached) == tokens:
                return cached  # the entry already there under this hash, when its length fits
        return rows


def _per_image(state: _Pass, requests: list[ForwardRequest]) -> list[tuple[int, Rows]]:
    """Replay ``_batch_encode_per_image_misses`` and ``_assemble_per_image_chunk``: one call for every request."""
    rules = state.rules
    found: dict[Any, Rows] = {}
    misses: dict[Any, ForwardItem] = {}
    overlapping: dict[int, list[ForwardItem]] = {}
    lookups = []
    for request in requests:
        start, stop = request.window
        touched = [i for i in request.items if request.extend > 0 and i.overlaps(start, stop)]
        overlapping[request.index] = touched
        for item in touched:
            key: Any = (item.key, item.tokens) if rules.dedupe_by_tokens else item.key
            what = ""
            lookup: Lookup
            if key in found:
                what = "already found in this pass"
                lookup = Lookup(item.source, "found")
            else:
                cached = state.cache.get(item.key)
                if cached is not None and rules.discards_stale_cache and len(cached) != item.tokens:
                    state.warn(MSG_DISCARD.format(item.key, item.tokens, len(cached)))
                    state.cache.free(item.key)
                    misses[key] = item
                    what = f"stale cache entry ({len(cached)} rows for {item.tokens} tokens): discarded, a miss"
                    lookup = Lookup(item.source, "discarded", len(cached))
                elif cached is not None:
                    found[key] = cached
                    what = "cache hit" + ("" if len(cached) == item.tokens else f" ({len(cached)} rows, used as is)")
                    lookup = Lookup(item.source, "hit" if len(cached) == item.tokens else "stale-hit", len(cached))
                elif key in misses:
                    what = f"a duplicate of {misses[key].source.name}: encoded once"
                    lookup = Lookup(item.source, "duplicate")
                else:
                    misses[key] = item
                    what = "miss"
                    lookup = Lookup(item.source, "miss")
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
            {"items": lookups, "key": "(item.hash, tokens)" if rules.dedupe_by_tokens else "item.hash"},
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
    chunks: list[tuple[int, Rows]] = []
    sliced = []
    for request in requests:
        for item in overlapping[request.index]:
            key = (item.key, item.tokens) if rules.dedupe_by_tokens else item.key
            part = _slice_item(found[key], item, request.prefix, request.extend)
            chunks.append((request.index, part))
            sliced.append({"request": request.rid, "image": item.source.image, "rows": len(part)})
    state.steps.append(
        Step(
            SLICE_CHUNKS,
            "Cut each request's part of its images for this window",
            "§10.3",
            {"slices": sliced},
            "_slice_item_chunk keeps rows max(start, prefix) - start .. min(end + 1, prefix + extend) - start.",
        )
    )
    return chunks


def _by_item(state: _Pass, request: ForwardRequest) -> list[Rows]:
    """Replay ``_get_chunked_embedding_by_item`` (HIP/NPU/XPU): one call for this request's misses."""
    rules = state.rules
    start, stop = request.window
    touched = [i for i in request.items if request.extend > 0 and i.overlaps(start, stop)]
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


def replay_forward(
    batch: list[ForwardRequest],
    *,
    release: Release,
    tp_size: int,
    cache: EmbeddingCache,
    encode: Encoder,
    platform: Platform = "cuda",
    chunked_prefill_size: int = 8192,
    async_assert: bool = False,
) -> ForwardTrace:
    """Return the :class:`ForwardTrace` of one forward pass of ``batch`` on ``release`` (``cache`` is updated).

    ``encode`` runs one ``get_image_feature`` call (:func:`call_encoder`); ``platform`` picks the
    per-image path (cuda, cpu) or the per-request one (hip, npu, xpu); ``chunked_prefill_size`` -1 means
    chunked prefill is off (it only changes a warning); ``async_assert`` is ``SGLANG_ENABLE_ASYNC_ASSERT``.
    """
    state = _Pass(release, cache, encode)
    rules = release.forward
    requests = [r for r in batch if r.items]
    state.steps.append(
        Step(
            FORWARD_BATCH,
            "The forward batch: every request's items and window",
            "§10",
            {
                "requests": [
                    {
                        "rid": r.rid,
                        "window": list(r.window),
                        "items": [
                            {"image": i.source.image, "offsets": list(i.offsets), "hash": i.key} for i in r.items
                        ],
                    }
                    for r in batch
                ],
            },
            "get_embedding_and_mask receives the items of every request in the batch at once.",
        )
    )
    path: PathName = "none"
    embedding: Rows | None = None
    error: ErrorInfo | None = None
    stage: Stage | None = None
    placements: list[Placement] = []
    count = sum(hi - lo for r in requests for lo, hi in r.pad_positions())
    try:
        embedding = _precomputed(state, requests)
        if embedding is not None:
            path = "precomputed"
        else:
            path = "by-item" if platform in rules.by_item_platforms else "per-image"
        state.steps.append(
            Step(
                CHOOSE_PATH,
                "Precomputed rows, or the encoder",
                "§10.1",
                {"path": path, "platform": platform},
                "Every item carries precomputed_embeddings (EPD): they are cut per window; otherwise the encoder runs."
                if path == "precomputed"
                else f"On {platform} the per-{'request' if path == 'by-item' else 'image'} path encodes the misses.",
            )
        )
        if path != "precomputed":
            embedding = _encoder_path(state, requests, platform)
        if embedding is not None:
            mask_count = count  # the request side writes one pad value per <|media_pad|> of the run
            expected = count if rules.count_from_offsets else mask_count
            state.steps.append(
                Step(
                    COUNT_TOKENS,
                    "Count the window's pad tokens",
                    "§10.4",
                    {
                        "from": "offsets" if rules.count_from_offsets else "the input ids' mask",
                        "tokens": expected,
                        "rows": len(embedding),
                    },
                    "_count_mm_tokens_in_extend counts every run's overlap with its request's window.",
                )
            )
            if async_assert and rules.async_assert and mask_count != expected:
                raise _Raised(ErrorInfo("RuntimeError", MSG_ASYNC_ASSERT), "adjust")
            embedding = _adjust(state, embedding, expected, chunked_prefill_size)
            placements = _scatter(state, requests, embedding, mask_count, rules.index_copy_scatter)
    except _Raised as raised:
        error, stage = raised.error, raised.stage
        if state.steps and state.steps[-1].error is None:
            state.steps[-1].error = error
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
        cache.keys(),
        state.lookups,
    )


def _encoder_path(state: _Pass, requests: list[ForwardRequest], platform: Platform) -> Rows | None:
    """Replay ``_get_chunked_prefill_embedding``: per-image (one call for all) or per-request, request order."""
    chunks: list[tuple[int, Rows]] = []
    per_image = []
    for request in requests:
        if request.extend <= 0:
            continue
        if platform in state.rules.by_item_platforms:
            chunks += [(request.index, part) for part in _by_item(state, request)]
        else:
            per_image.append(request)
    if per_image:
        chunks += _per_image(state, per_image)
    chunks.sort(key=lambda pair: [r.index for r in requests].index(pair[0]))
    if not chunks:
        return None
    return Rows.cat(part for _, part in chunks)


def adjust_embedding_length(
    embedding: Rows, count: int, chunked_prefill_size: int = 8192
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
    state.steps.append(
        Step(
            ADJUST_LENGTH,
            "Fit the rows to the pad tokens",
            "§10.4",
            {"tokens_in_text": count, "rows_in_embedding": rows, "rows_kept": len(kept) if error is None else None},
            "More rows than pad tokens: the last ones are kept (with a warning); fewer: SGLang raises.",
            Check("rows == pad tokens", count, rows, rows == count),
            error=error,
        )
    )
    if error is not None:
        raise _Raised(error, "adjust")
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
    state.steps.append(
        Step(
            SCATTER,
            "Write the rows onto the pad tokens",
            "§10.2",
            {"pad_tokens": mask_count, "rows": rows, "scatter": "index_copy_" if index_copy else "masked_scatter_"},
            "Row k lands on the k-th <|media_pad|> of the batch, requests in order.",
            Check("pad tokens == rows", rows, mask_count, mask_count == rows),
            error=error,
        )
    )
    if error is not None:
        raise _Raised(error, "scatter")
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


__all__ = [
    "FORWARD_STEPS",
    "Platform",
    "PLATFORMS",
    "ForwardItem",
    "ForwardRequest",
    "CallItem",
    "CallRecord",
    "Lookup",
    "Placement",
    "ForwardTrace",
    "call_encoder",
    "adjust_embedding_length",
    "replay_forward",
]
