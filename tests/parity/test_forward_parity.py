"""The kit's forward pass (``replay_forward``) against SGLang's REAL ``get_embedding_and_mask`` on the CPU.

Runs in the real-SGLang lane (``tests/parity/conftest.py``: skipped where ``import sglang`` fails, a
failure under ``KIMI_VIZ_REQUIRE_SGLANG=1``). Seeded random workloads: 1–4 requests of 1–4 sample
images (the same image sometimes in two requests), each request's items built by the installed
release's request side (``build_request``) and its prompt rendered as the kit renders it; prefill
passes planned by the kit's scheduler with chunk sizes and radix-cache prefixes that cut images; an
embedding cache seeded with entries of the right length (hits) or another one (stale), sometimes too
small for every entry; sometimes two images under one hash (a collision) or an item with a stale
``image_grid_thw``; attention-TP 1–8; the CUDA/CPU per-image path or the HIP per-request path. Every
pass runs through the real ``embed_mm_inputs`` (which calls the real ``get_embedding_and_mask`` and
writes its rows onto the pad tokens) and through the kit's ``replay_forward``, one embedding cache
carried from pass to pass on each side, up to the first pass that raises. They must agree on the items
of every ``get_image_feature`` call in order (an item is known by its request and image), every
attention-TP rank's outcome and message in that call, the warnings SGLang logs, the exception (type
and message), and for every pad token of the windows which image's which feature row lands on it.

What runs for real: ``embed_mm_inputs``, ``get_embedding_and_mask`` and everything below it (the
embedding cache ``MultiModalStaticCache`` included), ``MultimodalDataItem`` (pad values from its
hash) and ``KimiK3ForConditionalGeneration.get_image_feature`` with every rank's loader. Stand-ins:
the DP runner (``run_dp_sharded_mrope_vision_model``: each rank's loader is called with its share from
SGLang's own load balancing, and the output holds ``h·w/4`` rows per image whose values name the
request, the image and the row), the vision tower and projector (``lane.real_model``), the published
schedule config (``get_schedule().chunked_prefill_size``), and the items' hashes: one number per image
digest, given to the real item with ``set_hash`` and to the kit's item as its key in decimal (as SGLang
prints it); equal bytes give equal hashes, and the request side's own hashing is compared in
``test_request_side.py``.

``_adjust_embedding_length`` keeps the last rows when there are more rows than pad tokens. On 0.5.18+
the pass never takes that branch with Kimi-K3's tensor output (each item's rows are cut from its own
run, so never more than the offsets count), so the function is also compared on its own, on seeded
row runs and counts.
"""

from __future__ import annotations

import logging
import random
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import cache
from types import SimpleNamespace
from typing import NamedTuple
from unittest import mock

from kimi_viz.data import sample_path
from kimi_viz.forward import embedding as kit_forward
from kimi_viz.forward.cache import EmbeddingCache
from kimi_viz.forward.embedding import call_encoder, replay_forward
from kimi_viz.forward.rows import RowRun, Rows, Source
from kimi_viz.forward.trace import ForwardItem, ForwardRequest, ForwardTrace
from kimi_viz.forward.workload_replay import _forward_items, _tokens
from kimi_viz.preprocess.resize import resize_config
from kimi_viz.releases import RELEASES
from kimi_viz.request.images import RequestImage, probe_image
from kimi_viz.request.prompt import Prompt, render_prompt
from kimi_viz.request.settings import ServerSettings
from kimi_viz.request.sides import BuiltRequest, build_request
from kimi_viz.request.workload import Request, Workload
from kimi_viz.scheduler.flags import LoadSettings, Platform
from kimi_viz.split.batch import Batch

from .lane import assignment, module, real_items, real_model, record, release_patches
from .scheduler.workload import Workload as SchedulerWorkload
from .scheduler.workload import kit_passes as kit_schedule
from .scheduler.workload import text_requests

WORKLOADS = 60
ADJUST_CASES = 200
HIDDEN = 4  # a feature row holds (request, image, row, 1); a text row (-2, -2, token id, 0)
ROW_BYTES = HIDDEN * 4  # float32: what an entry costs in the real cache, per row
VOCAB = 64
CACHE_BYTES = 100 << 20  # SGLANG_VLM_CACHE_SIZE_MB's default
SMALL = ("microaneurysms.png", "astronaut_tiny_20x5.png", "text.png", "horse.png", "chelsea.png")
LARGER = (
    "coffee.png",
    "astronaut.png",
    "rocket.jpg",
    "camera_vignette_la.png",
    "coffee_palette_transparent.png",
    "chelsea_exif_orientation6.jpg",
)

Owner = tuple[int, int, int] | None  # (request, image, row) of the feature row on a pad token; -1: a seeded entry


class Span(NamedTuple):
    """One request's window of a pass, by its index in the workload: tokens ``[prefix, prefix + extend)``."""

    request: int
    prefix: int
    extend: int


@cache
def _image(name: str) -> RequestImage:
    return probe_image(sample_path(name))


@dataclass
class Case:
    """One seeded workload and everything both sides are given."""

    seed: int
    release: str
    tp: int
    platform: Platform  # "cpu" (the per-image path, as on CUDA) or "hip" (one call per request)
    settings: ServerSettings
    workload: Workload
    built: list[BuiltRequest]  # the request side's items (shapes), one per request
    prompts: list[Prompt]
    passes: list[list[Span]]  # each pass's windows, absolute positions
    chunk: int  # chunked_prefill_size as SGLang reads it (-1: chunking off)
    cache_bytes: int
    seeds: list[tuple[str, int]]  # embedding-cache entries before the first pass: (key, rows)
    keys: dict[str, str]  # an image's digest -> its item hash, in decimal (a collision gives two images one hash)
    stale_grid: dict[tuple[int, int], list[int]]  # (request, image) -> the image_grid_thw it carries instead
    description: str

    def key(self, request: int, image: int) -> str:
        return self.keys[self.workload.requests[request].images[image].digest[:16]]


def _pick(rng: random.Random) -> RequestImage:
    return _image(rng.choice(SMALL) if rng.random() < 0.75 else rng.choice(LARGER))


def _stale_grid_row(rng: random.Random, image: RequestImage) -> list[int] | None:
    for _ in range(10):
        width = max(1, image.width + rng.randint(-200, 200))
        height = max(1, image.height + rng.randint(-200, 200))
        row = [int(v) for v in resize_config(width, height, "kimi-k3").grid]
        if row != [int(v) for v in resize_config(image.width, image.height, "kimi-k3").grid]:
            return row
    return None


def _with_stale_grid(case_grid: dict[tuple[int, int], list[int]], k: int, built: BuiltRequest) -> BuiltRequest:
    items = list(built.items)
    for (request, image), row in case_grid.items():
        if request == k and items[image].deferred is not None:
            items[image] = replace(items[image], grids={**items[image].grids, "image_grid_thw": [row]})
    return replace(built, items=items)


@cache
def forward_case(seed: int, release: str) -> Case:
    """Return the workload of ``seed`` for ``release`` (the same on every machine)."""
    rng = random.Random(seed)
    tp = rng.randint(1, 8)
    platform: Platform = "hip" if rng.random() < 0.15 else "cpu"
    settings = ServerSettings(defer="off") if rng.random() < 0.2 else ServerSettings()
    requests, seen, notes = [], [], []
    for k in range(rng.randint(1, 4)):
        images = []
        for _ in range(rng.randint(1, 4)):
            image = rng.choice(seen) if seen and rng.random() < 0.3 else _pick(rng)
            images.append(image)
        seen += images
        requests.append(
            Request(
                f"r{k + 1}",
                tuple(images),
                before=rng.randint(0, 40),
                between=rng.randint(0, 12),
                after=rng.randint(0, 40),
            )
        )
    workload = Workload(tuple(requests))
    keys = {image.digest[:16]: str(int(image.digest[:16], 16) >> 2) for image in seen}
    distinct = list(dict.fromkeys(image.digest[:16] for image in seen))
    tokens = {image.digest[:16]: resize_config(image.width, image.height, "kimi-k3").tokens for image in seen}
    labels = {image.digest[:16]: image.label.rsplit("/", 1)[-1] for image in seen}
    if len(distinct) >= 2 and rng.random() < 0.2:  # a hash collision: image b's items carry image a's hash
        a, b = rng.sample(distinct, 2)
        keys[b] = keys[a]
        notes.append(f"{labels[b]} hashes like {labels[a]}")
    stale_grid: dict[tuple[int, int], list[int]] = {}
    if settings.defer == "auto" and rng.random() < 0.12:
        k = rng.randrange(len(requests))
        i = rng.randrange(len(requests[k].images))
        row = _stale_grid_row(rng, requests[k].images[i])
        if row is not None:
            stale_grid[(k, i)] = row
            notes.append(f"r{k + 1} image {i} carries image_grid_thw {row}")
    built = [
        _with_stale_grid(stale_grid, k, build_request(list(r.images), settings, release, mode="shapes"))
        for k, r in enumerate(requests)
    ]
    prompts = [
        render_prompt(_tokens(b), [im.size for im in b.images], before=r.before, between=r.between, after=r.after)
        for r, b in zip(requests, built)
    ]
    seeds = []
    if rng.random() < 0.45:
        for _ in range(rng.randint(1, 2)):
            digest = rng.choice(distinct)
            right = tokens[digest]
            if rng.random() < 0.5:
                rows = right
            else:
                rows = rng.choice([rng.randint(1, right), right + rng.randint(1, 60)])
                rows = rows if rows != right else right + 1
            seeds.append((keys[digest], rows))
            notes.append(f"cached {labels[digest]}: {rows} rows for {right} tokens")
    cache_bytes = CACHE_BYTES if rng.random() < 0.8 else rng.randint(0, 800) * ROW_BYTES
    starts = [rng.randint(1, p.length - 1) if rng.random() < 0.25 else 0 for p in prompts]
    total = sum(p.length - s for p, s in zip(prompts, starts))
    planned = rng.choice([None, 8192, 0, 0])
    if planned == 0:
        planned = rng.randint(max(16, total // 6), max(17, total))
    arrivals = [rng.randint(0, 1) for _ in requests]
    lengths = [p.length - s for p, s in zip(prompts, starts)]
    texts = SchedulerWorkload(LoadSettings(chunked_prefill_size=planned), tuple(text_requests(lengths, arrivals)))
    plans = kit_schedule(texts, release)
    index = {f"r{k}": k for k in range(len(lengths))}
    passes = [
        [Span(index[w.rid], w.prefix_len + starts[index[w.rid]], w.extend_input_len) for w in plan.windows]
        for plan in plans
    ]
    chunk = planned if planned else -1
    shown = "; ".join(
        f"r{k + 1} [{', '.join(im.label.rsplit('/', 1)[-1] for im in r.images)}] pads {p.pad_runs} from {s}"
        for k, (r, p, s) in enumerate(zip(requests, prompts, starts))
    )
    description = (
        f"seed {seed}, TP {tp}, {platform}, defer {settings.defer}, chunk {chunk}, cache {cache_bytes} B: {shown}"
        + (f" ({'; '.join(notes)})" if notes else "")
    )
    return Case(
        seed,
        release,
        tp,
        platform,
        settings,
        workload,
        built,
        prompts,
        passes,
        chunk,
        cache_bytes,
        seeds,
        keys,
        stale_grid,
        description,
    )


@dataclass
class PassView:
    """What one pass did: its calls (items, per-rank outcomes), warnings, error, and the owner of every pad token."""

    calls: list[tuple[tuple[tuple[int, int], ...], tuple]]
    warnings: list[str]
    error: tuple[str, str] | None
    owners: dict[tuple[int, int], Owner]  # (request, position) -> the feature row written there
    text_hits: list[tuple[int, int]]  # (request, position) of text tokens that received a feature row


def _pads(prompt: Prompt, window: Span) -> list[int]:
    stop = window.prefix + window.extend
    return [p for s, e in prompt.pad_runs for p in range(max(s, window.prefix), min(e + 1, stop))]


# --- the kit ----------------------------------------------------------------------------------------------
def _kit_items(case: Case) -> list[tuple[ForwardItem, ...]]:
    items = _forward_items(list(case.workload.requests), case.built, case.prompts)
    return [tuple(replace(item, key=case.key(k, i)) for i, item in enumerate(row)) for k, row in enumerate(items)]


def kit_passes(case: Case) -> list[PassView]:
    """Return every pass as the kit replays it (the release looked up now, so a planted rule is seen)."""
    release = RELEASES[case.release]
    cache_ = EmbeddingCache(
        case.cache_bytes, row_bytes=ROW_BYTES, rejects_oversized=release.forward.rejects_oversized_cache_entry
    )
    for j, (key, rows) in enumerate(case.seeds):
        cache_.set(key, Rows.of(Source(-1, j, "earlier", "cached", key), rows))
    items = _kit_items(case)
    processor = case.built[0].consumer.to_media_proc_cfg()
    encode = call_encoder(release=release, tp_size=case.tp, processor=processor, mode="shapes")
    views = []
    for windows in case.passes:
        batch = [
            ForwardRequest(
                index=w.request,
                rid=case.workload.requests[w.request].rid,
                items=items[w.request],
                prefix=w.prefix,
                extend=w.extend,
                length=case.prompts[w.request].length,
            )
            for w in windows
        ]
        trace = replay_forward(
            batch,
            release=release,
            tp_size=case.tp,
            cache=cache_,
            encode=encode,
            platform=case.platform,
            chunked_prefill_size=case.chunk,
        )
        views.append(kit_view(trace, windows, case.prompts))
        if views[-1].error is not None:
            break
    return views


def kit_view(trace: ForwardTrace, windows: list[Span], prompts: list[Prompt]) -> PassView:
    """Return what the kit's replay of one pass did, in the terms the real pass is read in."""
    calls = [
        (
            tuple((i.source.request, i.source.image) for i in c.items),
            tuple((r.rank, r.outcome, r.error and r.error.type, r.error and r.error.message) for r in c.trace.ranks)
            if c.trace is not None
            else (),
        )
        for c in trace.calls
    ]
    owners: dict[tuple[int, int], Owner] = {}
    if trace.error is None:
        for w in windows:
            for p in _pads(prompts[w.request], w):
                found = trace.token_owner(w.request, p)
                owners[(w.request, p)] = None if found is None else (found[0].request, found[0].image, found[1])
    error = None if trace.error is None else (trace.error.type, trace.error.message)
    return PassView(calls, list(trace.warnings), error, owners, [])


# --- the real code ----------------------------------------------------------------------------------------
def _rows(request: int, image: int, start: int, count: int):
    import torch

    rows = torch.zeros(count, HIDDEN)
    rows[:, 0] = request
    rows[:, 1] = image
    rows[:, 2] = torch.arange(start, start + count, dtype=torch.float32)
    rows[:, 3] = 1.0
    return rows


def _hash(key: str) -> int:
    return int(key)


@contextmanager
def _warnings(logger: logging.Logger):
    """Collect what ``logger`` logs at WARNING and above."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Collect(logging.WARNING)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@cache
def _recording(cls: type) -> type:
    """Return the real model class with get_image_feature noting each call's items (the class name is kept)."""

    class KimiK3ForConditionalGeneration(cls):
        def get_image_feature(self, items):
            lane = self.__dict__["_lane"]
            call = {"items": tuple(lane.tags[id(item)] for item in items), "ranks": None}
            lane.calls.append(call)
            try:
                return super().get_image_feature(items)
            except Exception as exc:
                if call["ranks"] is None:
                    call["ranks"] = tuple((r, "error", type(exc).__name__, str(exc)) for r in range(lane.tp))
                raise

    return KimiK3ForConditionalGeneration


class RealLane:
    """The state of one real workload: which item is which image, and every get_image_feature call."""

    def __init__(self, tp: int):
        self.tp = tp
        self.tags: dict[int, tuple[int, int]] = {}
        self.calls: list[dict] = []

    def dp_runner(self, vision_model, pixel_values, grid_thw_list, **kwargs):
        """Stand in for SGLang's DP runner: every rank's loader on its share, then h·w/4 named rows per image."""
        import torch

        loader = kwargs["load_local_pixel_values"]
        call = self.calls[-1]
        ranks, raised = [], None
        for rank, indices in enumerate(assignment(grid_thw_list, self.tp)):
            if not indices:
                ranks.append((rank, "ok", None, None))
                continue
            try:
                loader(indices)
                ranks.append((rank, "ok", None, None))
            except Exception as exc:  # noqa: BLE001 - SGLang's own exception, compared verbatim
                ranks.append((rank, "error", type(exc).__name__, str(exc)))
                raised = raised or exc
        call["ranks"] = tuple(ranks)
        if raised is not None:
            raise raised
        return torch.cat(
            [_rows(request, image, 0, h * w // 4) for (request, image), (_, h, w) in zip(call["items"], grid_thw_list)]
        )


@cache
def real_passes(seed: int, release: str) -> list[PassView]:
    """Return every pass of workload ``seed`` as SGLang's own embed_mm_inputs / get_embedding_and_mask runs it."""
    return real_forward(forward_case(seed, release))


def real_forward(case: Case) -> list[PassView]:
    """Return every pass of ``case`` (its prompts, items, windows, cache) as SGLang's own embed_mm_inputs runs it.

    The installed release runs it; ``case.release`` names the request side that builds the items."""
    import torch

    mm_schedule = module("sglang.srt.managers.mm_schedule")
    mm_utils = module("sglang.srt.managers.mm_utils")
    schedule_batch = module("sglang.srt.managers.schedule_batch")
    multimodal_cache = module("sglang.srt.mem_cache.multimodal_cache")

    built = [
        _with_stale_grid(case.stale_grid, k, build_request(list(r.images), case.settings, case.release, mode="pixels"))
        for k, r in enumerate(case.workload.requests)
    ]
    batch = Batch(items=[item for b in built for item in b.items], processor=built[0].consumer.to_media_proc_cfg())
    flat = iter(real_items(batch))
    lane = RealLane(case.tp)
    items, full = [], []
    # a request retracted after decoding is prefilled again with its outputs (text) after its prompt
    reach = [prompt.length for prompt in case.prompts]
    for windows in case.passes:
        for w in windows:
            reach[w.request] = max(reach[w.request], w.prefix + w.extend)
    for k, prompt in enumerate(case.prompts):
        mine = []
        ids = [1 + p % 50 for p in range(reach[k])]
        for i, run in enumerate(prompt.pad_runs):
            item = next(flat)
            item.offsets = [tuple(run)]
            item.set_hash(_hash(case.key(k, i)))
            lane.tags[id(item)] = (k, i)
            n = run[1] - run[0] + 1
            pads = item.padding_sequence(n) if hasattr(item, "padding_sequence") else [item.pad_value] * n
            ids[run[0] : run[1] + 1] = list(pads)
            mine.append(item)
        items.append(mine)
        full.append(ids)

    model = real_model(batch)
    model.__class__ = _recording(type(model))
    model.__dict__["_lane"] = lane
    text = torch.nn.Embedding(VOCAB, HIDDEN)
    with torch.no_grad():
        text.weight[:, 0] = -2.0
        text.weight[:, 1] = -2.0
        text.weight[:, 2] = torch.arange(VOCAB, dtype=torch.float32)
        text.weight[:, 3] = 0.0

    mm_schedule.init_mm_embedding_cache(case.cache_bytes)
    for j, (key, rows) in enumerate(case.seeds):
        mm_schedule.embedding_cache.set(_hash(key), multimodal_cache.EmbeddingResult(embedding=_rows(-1, j, 0, rows)))
    views = []
    with ExitStack() as stack:
        release_patches(stack, case.tp)
        schedule = SimpleNamespace(chunked_prefill_size=case.chunk)
        stack.enter_context(mock.patch.object(mm_schedule, "get_schedule", lambda: schedule))
        if hasattr(mm_schedule, "get_parallel"):
            parallel = SimpleNamespace(attn_tp_rank=0, tp_size=case.tp, attn_tp_size=case.tp)
            stack.enter_context(mock.patch.object(mm_schedule, "get_parallel", lambda: parallel))
        stack.enter_context(mock.patch.object(mm_schedule, "_is_hip", case.platform == "hip"))
        stack.enter_context(
            mock.patch("sglang.srt.multimodal.mm_utils.run_dp_sharded_mrope_vision_model", new=lane.dp_runner)
        )
        for windows in case.passes:
            ids = [t for w in windows for t in full[w.request][w.prefix : w.prefix + w.extend]]
            before = len(lane.calls)
            with _warnings(mm_schedule.logger) as logged:
                try:
                    with torch.no_grad():
                        out, _ = mm_utils.embed_mm_inputs(
                            mm_inputs_list=[SimpleNamespace(mm_items=items[w.request]) for w in windows],
                            extend_prefix_lens=[w.prefix for w in windows],
                            extend_seq_lens=[w.extend for w in windows],
                            input_ids=torch.tensor(ids, dtype=torch.int64),
                            input_embedding=text,
                            data_embedding_func_mapping={schedule_batch.Modality.IMAGE: model.get_image_feature},
                        )
                    error = None
                except Exception as exc:  # noqa: BLE001 - SGLang's own exception, compared verbatim
                    out, error = None, (type(exc).__name__, str(exc))
            owners: dict[tuple[int, int], Owner] = {}
            text_hits = []
            if out is not None:
                rows = out.tolist()
                offset = 0
                for w in windows:
                    pads = set(_pads(case.prompts[w.request], w))
                    for p in range(w.prefix, w.prefix + w.extend):
                        row = rows[offset + p - w.prefix]
                        owner = (int(row[0]), int(row[1]), int(row[2])) if row[3] == 1.0 else None
                        if p in pads:
                            owners[(w.request, p)] = owner
                        elif owner is not None:
                            text_hits.append((w.request, p))
                    offset += w.extend
            calls = [(c["items"], c["ranks"] or ()) for c in lane.calls[before:]]
            views.append(PassView(calls, list(logged), error, owners, text_hits))
            if error is not None:
                break
    return views


# --- the comparison ---------------------------------------------------------------------------------------
def compare(case: Case, ours: list[PassView], real: list[PassView]) -> list[str]:
    """Return one line per thing the kit and the real code disagree on, pass by pass."""
    name = case.description
    found = []
    if len(ours) != len(real):
        found.append(f"{name}: the kit replays {len(ours)} pass(es), SGLang ran {len(real)}")
    for n, (o, r) in enumerate(zip(ours, real)):
        where = f"{name}: pass {n}"
        o_items, r_items = [c[0] for c in o.calls], [c[0] for c in r.calls]
        if o_items != r_items:
            found.append(f"{where}: call items kit {o_items} != SGLang {r_items}")
        else:
            for c, (oc, rc) in enumerate(zip(o.calls, r.calls)):
                if oc[1] != rc[1]:
                    found.append(f"{where}: call {c}: ranks kit {oc[1]} != SGLang {rc[1]}")
        if o.warnings != r.warnings:
            found.append(f"{where}: warnings kit {o.warnings} != SGLang {r.warnings}")
        if o.error != r.error:
            found.append(f"{where}: error kit {o.error} != SGLang {r.error}")
        wrong = [
            (key, o.owners.get(key), r.owners.get(key))
            for key in sorted(set(o.owners) | set(r.owners))
            if o.owners.get(key) != r.owners.get(key)
        ]
        if wrong:
            found.append(
                f"{where}: {len(wrong)} pad token(s) differ, e.g. ((request, position), kit, SGLang) {wrong[:3]}"
            )
        if r.text_hits:
            found.append(f"{where}: SGLang wrote feature rows on text tokens {r.text_hits[:3]}")
    return found


def workload_disagreements(release: str, seeds: range) -> tuple[list[str], dict[str, int]]:
    found: list[str] = []
    counts = dict.fromkeys(("passes", "calls", "items", "ranks", "pad_tokens", "errors", "warnings"), 0)
    for seed in seeds:
        case = forward_case(seed, release)
        real = real_passes(seed, release)
        found += compare(case, kit_passes(case), real)
        for view in real:
            counts["passes"] += 1
            counts["calls"] += len(view.calls)
            counts["items"] += sum(len(items) for items, _ in view.calls)
            counts["ranks"] += sum(len(ranks) for _, ranks in view.calls)
            counts["pad_tokens"] += len(view.owners)
            counts["errors"] += view.error is not None
            counts["warnings"] += len(view.warnings)
    return found, counts


def adjust_disagreements(cases: int) -> list[str]:
    """Return where the kit's adjust_embedding_length and SGLang's _adjust_embedding_length disagree."""
    import torch

    mm_schedule = module("sglang.srt.managers.mm_schedule")
    found = []
    for seed in range(cases):
        rng = random.Random(seed)
        runs = tuple(
            RowRun(Source(rng.randint(0, 3), rng.randint(0, 3), "r", "image"), rng.randint(0, 20), rng.randint(1, 30))
            for _ in range(rng.randint(1, 4))
        )
        rows = Rows(runs)
        total = len(rows)
        count = rng.choice([total, 0, rng.randint(0, total), total + rng.randint(1, 5)])
        chunk = rng.choice([8192, -1])
        tensor = torch.cat([_rows(r.source.request, r.source.image, r.start, r.count) for r in runs])
        schedule = SimpleNamespace(chunked_prefill_size=chunk)
        with (
            mock.patch.object(mm_schedule, "get_schedule", lambda schedule=schedule: schedule),
            _warnings(mm_schedule.logger) as logged,
        ):
            try:
                out = mm_schedule._adjust_embedding_length(tensor, count, mm_schedule.logger)
                real = ([tuple(int(v) for v in row[:3]) for row in out.tolist()], None)
            except Exception as exc:  # noqa: BLE001 - SGLang's own exception, compared verbatim
                real = (None, (type(exc).__name__, str(exc)))
        kept, warnings, error = kit_forward.adjust_embedding_length(rows, count, chunk)
        ours = (
            [(s.request, s.image, r) for s, r in kept] if error is None else None,
            None if error is None else (error.type, error.message),
        )
        if ours != real or warnings != logged:
            found.append(
                f"adjust seed {seed}: {total} rows for {count} tokens (chunk {chunk}): "
                f"kit {ours[1] or len(ours[0] or [])} {warnings} != SGLang {real[1] or len(real[0] or [])} {logged}"
                + ("" if ours[0] is None or real[0] is None else f" (kit rows {ours[0][:2]}, SGLang {real[0][:2]})")
            )
    return found


# --- the lane ---------------------------------------------------------------------------------------------
def test_random_workloads_agree_with_the_real_forward_pass(release):
    found, counts = workload_disagreements(release, range(WORKLOADS))
    record("forward", workloads=WORKLOADS, **counts, disagreements=len(found))
    assert found == [], "\n".join(found[:10])
    assert counts["calls"] > 0 and counts["pad_tokens"] > 0
    assert counts["errors"] > 0 and counts["warnings"] > 0  # the workloads reach the failing and warning paths


def test_adjust_embedding_length_agrees_with_the_real_function(release):
    found = adjust_disagreements(ADJUST_CASES)
    record("adjust", cases=ADJUST_CASES, disagreements=len(found))
    assert found == [], "\n".join(found[:10])


# --- planted bugs: the same comparisons must notice a wrong kit ---------------------------------------------
def test_a_planted_dedupe_rule_is_caught(release, monkeypatch):
    """On 0.5.19+ plant the 0.5.18 rule (misses deduped by item.hash alone); on 0.5.18 plant (hash, tokens)."""
    real = RELEASES[release]
    flipped = replace(real.forward, dedupe_by_tokens=not real.forward.dedupe_by_tokens)
    monkeypatch.setitem(RELEASES, release, replace(real, forward=flipped))
    found, _ = workload_disagreements(release, range(WORKLOADS))
    plant = "forward: dedupe by " + ("(hash, tokens)" if flipped.dedupe_by_tokens else "item.hash alone")
    record("planted-bug", plant=plant, disagreements=len(found))
    assert found, "the lane did not notice a wrong dedupe key"


def test_planted_first_rows_in_adjust_embedding_length_are_caught(release, monkeypatch):
    """Keep the first rows instead of the last when there are more rows than pad tokens."""
    original = kit_forward.adjust_embedding_length

    def first_rows(embedding, count, chunked_prefill_size=8192):
        kept, warnings, error = original(embedding, count, chunked_prefill_size)
        if error is None and 0 < count < len(embedding):
            kept = embedding.slice(0, count)
        return kept, warnings, error

    monkeypatch.setattr(kit_forward, "adjust_embedding_length", first_rows)
    found, _ = workload_disagreements(release, range(WORKLOADS))
    found += adjust_disagreements(ADJUST_CASES)
    record("planted-bug", plant="forward: first rows kept", disagreements=len(found))
    assert found, "the lane did not notice the first rows kept"
