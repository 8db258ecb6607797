"""Conversations end to end: the kit's ``replay_workload`` against SGLang's own scheduler, then its real forward pass.

Runs in the real-SGLang lane (``tests/parity/conftest.py``). Seeded random KIT workloads
(:func:`conversation_case`): chats of 2–4 turns (each later turn ``continues`` the one before, re-sends
its images and output, and adds text, sometimes images: new ones or ones the chat already sent),
other users' one-shot requests opening with the same ``system`` prompt, arrivals over several steps,
``output`` 1–40 tokens; page size 1, 16 or 64, chunk size 256–8192 (a multiple of the page) or off,
fcfs or lpm, sometimes ``--enable-mixed-chunk``, ``--disable-radix-cache`` or a small
``--max-prefill-tokens``; Kimi-K3's hybrid tree at the default flags (``extra_buffer`` with the overlap
schedule), ``no_buffer`` (no overlap schedule, page 1) or ``extra_buffer`` without the overlap schedule,
track intervals 64–256; attention-TP 1–8, the CUDA or the HIP path, sometimes a small embedding cache
or eager items. Images are small samples, among them two different images of one upload size
(``chelsea.png`` and its EXIF-rotated copy: the same ``image 451x300`` caption, other pad values).
Some chats end a turn right after an image, so the next turn's radix prefix (the turn before's deepest
saved state, or its page-floored KV with ``no_buffer``) ends inside that image's pad run:
``prefix_in_image`` counts those windows.

For each workload:

1. The kit: ``replay_workload`` gives the prompts, the items, the passes (``plans``) and each pass's
   replay (``passes``).
2. The scheduler: the same whole requests (``scheduled_requests`` of the LoadResult's prompts, each
   image's digest as its hash, each image's size for its caption) go through SGLang's own scheduler for
   Kimi-K3: its server-argument resolution, ``UnifiedRadixCache`` with FULL and MAMBA components
   (``ChunkCache`` with ``--disable-radix-cache`` where the release builds one), ``PrefillAdder``,
   policy, ``ScheduleBatch`` mamba tracking and the overlap or normal loop, with real ``Req`` objects
   (``scheduler/real_scheduler.py``). Every pass must
   match the kit's: the same step, the same windows in batch order (request, prefix_len,
   extend_input_len) and the same mixed decode rows.
3. The forward pass: each REAL pass's windows run through SGLang's real ``embed_mm_inputs`` /
   ``get_embedding_and_mask`` (``test_forward_parity.real_forward``: real items from the release's
   request side, real pad values from the items' hashes, one embedding cache carried from pass to
   pass) and must match the kit's ``ForwardTrace`` of that pass (``test_forward_parity.compare``: the
   items of every ``get_image_feature`` call, every rank's outcome, the warnings, the error, and the
   feature row on every pad token of the windows).

Memory pressure end to end (:func:`memory_case`): 40 more of these workloads with outputs of 20–400
tokens at page 1 on a KV pool a little larger than the longest request, sometimes with 2–5 request rows,
a small mamba state pool or another ``--schedule-conservativeness``. SGLang's own allocators and pools
run them (``real_scheduler.py``'s memory mode); besides every pass, the kit's NO_TOKEN walks,
retractions, memory after each step and each step's evictions must be SGLang's, and every real pass
(re-prefilled retracted requests included, their outputs as text after the prompt) goes through the
real forward.

Planted bugs show both comparisons can fail: budgets charged without the page ceiling, pad values
blind to the image hash (a request matches another's different image of the same size), and the memory
plants of ``scheduler/memory_plants.py`` (eviction order reversed, reserved outputs ignored).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from functools import cache

import pytest

from kimi_viz.data import sample_path
from kimi_viz.errors import SettingNotInReleaseError
from kimi_viz.forward.cache import EmbeddingCache
from kimi_viz.forward.workload_replay import LoadResult, replay_workload, whole_requests
from kimi_viz.releases import RELEASES, parse_version
from kimi_viz.request.images import RequestImage, probe_image
from kimi_viz.request.settings import ServerSettings
from kimi_viz.request.token_ids import scheduled_requests
from kimi_viz.request.workload import Request, Workload
from kimi_viz.scenarios import LOAD_SCENARIOS
from kimi_viz.scheduler import policy, prefix
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Req
from kimi_viz.scheduler.server_config import resolve_server

from .lane import record
from .scheduler.memory_plants import MEMORY_PLANTS, PAGED_PLANTS
from .scheduler.workload import Workload as SchedulerWorkload
from .scheduler.workload import kit_pressure, real_payload, real_pressure
from .test_forward_parity import CACHE_BYTES, ROW_BYTES, Case, PassView, Span, compare, kit_view, real_forward
from .test_request_side import sglang_accessors_restored

WORKLOADS = 64
SMALL = (
    "microaneurysms.png",  # 16 tokens
    "text.png",  # 112
    "horse.png",  # 180
    "chelsea.png",  # 187, 451x300
    "chelsea_exif_orientation6.jpg",  # 187, 451x300: the same caption, another image
    "astronaut_tiny_20x5.png",  # 1
)
TWINS = ("chelsea.png", "chelsea_exif_orientation6.jpg")
TINY = ("microaneurysms.png", "astronaut_tiny_20x5.png", "text.png")
CHUNKS = (256, 256, 512, 512, 1024, 2048, 4096, 8192)


@cache
def _image(name: str) -> RequestImage:
    return probe_image(sample_path(name))


@dataclass
class Conversation:
    """One seeded workload and the deployment it runs on."""

    seed: int
    release: str
    workload: Workload
    load: LoadSettings
    tp: int
    settings: ServerSettings
    cache_bytes: int
    description: str


def _pick(rng: random.Random, seen: list[RequestImage]) -> RequestImage:
    if seen and rng.random() < 0.3:
        return rng.choice(seen)
    return _image(rng.choice(SMALL))


def _load(rng: random.Random) -> LoadSettings:
    page = rng.choice((1, 16, 64))
    draw = rng.random()
    if draw < 0.45:
        chunk: int | None = rng.choice(CHUNKS)
    elif draw < 0.8:
        chunk = rng.randrange(256, 8193, page) if page > 1 else rng.randint(256, 8192)
        chunk = -(-chunk // page) * page
    else:
        chunk = rng.choice((None, -1))
    chunking = chunk is not None and chunk > 0
    # Kimi-K3's hybrid tree: the default (auto with the overlap schedule: extra_buffer), no_buffer (auto without it,
    # page 1), or extra_buffer without the overlap schedule; a track interval the page divides
    tree = rng.choice(
        ("default", "default", "no-overlap", "extra-no-overlap") if page == 1 else ("default", "no-overlap")
    )
    return LoadSettings(
        mamba_radix_cache_strategy="extra_buffer" if tree == "extra-no-overlap" else "auto",
        disable_overlap_schedule=tree != "default",
        mamba_track_interval=rng.choice((256, 256, 64, 128)),
        chunked_prefill_size=chunk,
        page_size=page,
        schedule_policy=rng.choice(("fcfs", "lpm")),
        enable_mixed_chunk=chunking and rng.random() < 0.3,
        disable_radix_cache=rng.random() < 0.15,
        max_prefill_tokens=rng.choice((300, 600, 1500)) if rng.random() < 0.15 else 16384,
        cache_mb=100,
        platform="hip" if rng.random() < 0.15 else "cuda",
    )


def _chat(rng: random.Random, name: str, system: int, seen: list[RequestImage], start: int) -> list[Request]:
    """A chat of 2–4 turns; some turns end right after an image (the next turn's prefix may end in its pads)."""
    turns: list[Request] = []
    arrival = start
    for k in range(rng.randint(2, 4)):
        images: tuple[RequestImage, ...] = ()
        if k == 0 or rng.random() < 0.5:
            images = tuple(_pick(rng, seen) for _ in range(rng.randint(1, 2)))
            seen += images
        tight = images and rng.random() < 0.5  # the turn ends at its last image: a page may end inside it
        turns.append(
            Request(
                f"{name}t{k}",
                images,
                before=rng.choice((0, 0, rng.randint(1, 30))),
                between=rng.randint(0, 12),
                after=rng.randint(0, 3) if tight else rng.randint(0, 40),
                arrival=arrival,
                continues=turns[-1].rid if turns else None,
                output=rng.randint(1, 8) if tight else rng.randint(1, 40),
                system=system if k == 0 else 0,
            )
        )
        arrival += rng.randint(0, 3)
    return turns


@cache
def conversation_case(seed: int, release: str) -> Conversation:
    """Return workload ``seed`` (the same on every machine)."""
    rng = random.Random(10_000 + seed)
    load = _load(rng)
    while True:  # a combination the release refuses for Kimi-K3 (0.5.18: a disabled tree without chunking at
        try:  # page > 1) is drawn again
            resolve_server(load, RELEASES[release])
            break
        except SettingNotInReleaseError:
            load = _load(rng)
    systems = [rng.randint(16, 200) for _ in range(2)]
    seen: list[RequestImage] = []
    requests: list[Request] = []
    for c in range(rng.randint(1, 3)):
        system = rng.choice(systems) if rng.random() < 0.85 else 0
        requests += _chat(rng, f"c{c}", system, seen, rng.randint(0, 4))
    for s in range(rng.randint(1, 4)):  # other users: the same system prompt, then an image right away (often)
        images = tuple(_pick(rng, seen) for _ in range(rng.randint(1, 2)))
        seen += images
        requests.append(
            Request(
                f"u{s}",
                images,
                before=rng.choice((0, 0, rng.randint(1, 10))),
                between=rng.randint(0, 8),
                after=rng.randint(1, 100),
                arrival=rng.randint(0, 8),
                output=rng.randint(1, 40),
                system=rng.choice(systems) if rng.random() < 0.8 else 0,
            )
        )
    if rng.random() < 0.5:  # a burst of short requests arriving together: the budgets pack them, pages and all
        step = rng.randint(0, 8)
        for b in range(rng.randint(3, 6)):
            requests.append(
                Request(
                    f"b{b}",
                    (_image(rng.choice(TINY)),),
                    before=rng.randint(0, 20),
                    after=rng.randint(1, 90),
                    arrival=step,
                    output=rng.randint(1, 10),
                    system=rng.choice(systems) if rng.random() < 0.7 else 0,
                )
            )
    if rng.random() < 0.4:  # two images of one size, each right after the same system prompt, a step or more apart
        system, step = rng.choice(systems), rng.randint(0, 6)
        for j, name in enumerate(rng.sample(TWINS, 2)):
            requests.append(
                Request(
                    f"w{j}",
                    (_image(name),),
                    before=0,
                    after=rng.randint(1, 30),
                    arrival=step + j * rng.randint(1, 3),
                    output=rng.randint(1, 20),
                    system=system,
                )
            )
    requests.sort(key=lambda r: r.arrival)  # stable: a chat's turns keep their order
    tp = rng.randint(1, 8)
    settings = ServerSettings(defer="off") if rng.random() < 0.2 else ServerSettings()
    cache_bytes = CACHE_BYTES if rng.random() < 0.85 else rng.randint(0, 800) * ROW_BYTES
    description = f"seed {seed}, TP {tp}, defer {settings.defer}, cache {cache_bytes} B, {load.flags()}: "
    description += _shown(requests)
    return Conversation(seed, release, Workload(tuple(requests)), load, tp, settings, cache_bytes, description)


def _shown(requests: list[Request] | tuple[Request, ...]) -> str:
    return "; ".join(
        f"{r.rid}{'<' + r.continues if r.continues else ''}@{r.arrival} "
        f"[{', '.join(im.label.rsplit('/', 1)[-1] for im in r.images)}] sys {r.system} out {r.output}"
        for r in requests
    )


# --- the kit ----------------------------------------------------------------------------------------------
def kit_result(case: Conversation) -> LoadResult:
    """Return the kit's replay of the workload (the kit's rules looked up now, so a planted one is seen)."""
    rejects = RELEASES[case.release].forward.rejects_oversized_cache_entry
    return replay_workload(
        case.workload,
        sglang_version=case.release,
        tp_size=case.tp,
        settings=case.settings,
        load=case.load,
        cache=EmbeddingCache(case.cache_bytes, row_bytes=ROW_BYTES, rejects_oversized=rejects),
    )


def scheduler_requests(case: Conversation, result: LoadResult) -> list[Req]:
    """Return the whole requests as both schedulers read them (ids, image runs by hash, arrivals, outputs)."""
    return scheduled_requests(case.workload, result.prompts, [list(b.images) for b in result.built])


# --- the real code ----------------------------------------------------------------------------------------
@dataclass
class RealRun:
    """What SGLang's own code did with one workload: its passes, windows by request index, and each forward."""

    passes: list[tuple[int, tuple[Span, ...], tuple[int, ...]]]  # (step, windows, decoding)
    chunked: int  # requests cut by a pass
    forward: list[PassView]
    hashes: dict[str, str]  # the real item hash in decimal -> the kit's key (digest[:16])
    pressure: list[tuple]  # retractions, NO_TOKEN steps, memory after each step, evictions (bounded memory only)


@cache
def real_run(seed: int, release: str) -> RealRun:
    """Return the real scheduler's passes of workload ``seed`` and each real pass through the real forward."""
    return run_real(conversation_case(seed, release))


def run_real(case: Conversation) -> RealRun:
    """Return the real scheduler's passes of ``case`` and each real pass through the real forward."""
    from .scheduler.real_scheduler import run_workload

    seed, release = case.seed, case.release
    result = kit_result(case)
    requests = scheduler_requests(case, result)
    index = {r.rid: k for k, r in enumerate(requests)}
    with sglang_accessors_restored():  # the request side's lane swaps the published context's accessors
        raw = run_workload(real_payload(SchedulerWorkload(case.load, tuple(requests), max_steps=40_000), release))
    real = raw["passes"]
    passes = [
        (
            p["step"],
            tuple(Span(index[w["rid"]], w["prefix_len"], w["extend_input_len"]) for w in p["windows"]),
            tuple(index[rid] for rid in p["decoding"]),
        )
        for p in real
    ]
    whole = whole_requests(case.workload)
    digests = {image.digest[:16] for r in whole for image in r.images}
    keys = {d: str(int(d, 16) >> 2) for d in digests}  # one item hash per image, as SGLang prints it
    forward_case = Case(
        seed,
        release,
        case.tp,
        "hip" if case.load.platform == "hip" else "cpu",
        case.settings,
        Workload(tuple(whole)),
        result.built,
        result.prompts,
        [list(windows) for _, windows, _ in passes],
        case.load.chunked_prefill_size or -1,
        case.cache_bytes,
        [],
        keys,
        {},
        case.description,
    )
    chunked = len({p["chunked"] for p in real if p["chunked"]})
    return RealRun(passes, chunked, real_forward(forward_case), {v: k for k, v in keys.items()}, real_pressure(raw))


def _in_kit_terms(view: PassView, hashes: dict[str, str]) -> PassView:
    """Return ``view`` with every item hash SGLang printed written as the kit's key."""

    def spell(text: str) -> str:
        for number, key in hashes.items():
            text = text.replace(number, key)
        return text

    error = None if view.error is None else (view.error[0], spell(view.error[1]))
    return PassView(view.calls, [spell(w) for w in view.warnings], error, view.owners, view.text_hits)


# --- the comparison ---------------------------------------------------------------------------------------
def _plans(result: LoadResult) -> list[tuple[int, tuple[Span, ...], tuple[int, ...]]]:
    return [
        (
            p.step,
            tuple(Span(result.index(w.rid), w.prefix_len, w.extend_input_len) for w in p.windows),
            tuple(result.index(rid) for rid in p.decoding),
        )
        for p in result.plans
    ]


def disagreements(case: Conversation, result: LoadResult, real: RealRun) -> list[str]:
    """Return one line per pass where the kit's scheduler or forward pass differs from SGLang's."""
    kit = _plans(result)
    if kit != real.passes:
        k = next((i for i, (a, b) in enumerate(zip(kit, real.passes)) if a != b), min(len(kit), len(real.passes)))
        mine = kit[k] if k < len(kit) else None
        theirs = real.passes[k] if k < len(real.passes) else None
        return [
            f"{case.description}: {len(kit)} vs {len(real.passes)} passes; pass {k} (step, windows, decoding): "
            f"kit {mine} != SGLang {theirs}"
        ]
    ours_pressure = kit_pressure(result.schedule)
    if ours_pressure != real.pressure:
        k = next((i for i, (a, b) in enumerate(zip(ours_pressure, real.pressure)) if a != b), None)
        if k is None:
            k = min(len(ours_pressure), len(real.pressure))
        mine = ours_pressure[k] if k < len(ours_pressure) else None
        theirs = real.pressure[k] if k < len(real.pressure) else None
        return [f"{case.description}: memory event {k}: kit {mine} != SGLang {theirs}"]
    ours = [kit_view(trace, list(windows), result.prompts) for trace, (_, windows, _) in zip(result.passes, kit)]
    forward_case = Case(
        case.seed,
        case.release,
        case.tp,
        "cpu",
        case.settings,
        case.workload,
        result.built,
        result.prompts,
        [],
        -1,
        case.cache_bytes,
        [],
        {},
        {},
        case.description,
    )
    return compare(forward_case, ours, [_in_kit_terms(v, real.hashes) for v in real.forward])


def _inside_image(result: LoadResult, window: Span) -> bool:
    return any(start < window.prefix <= end for start, end in result.prompts[window.request].pad_runs)


def lane_disagreements(release: str, seeds: range) -> tuple[list[str], dict[str, int]]:
    found: list[str] = []
    counts = dict.fromkeys(
        (
            "workloads",
            "passes",
            "windows",
            "prefix_hits",
            "prefix_in_image",
            "workloads_prefix_in_image",
            "cut_requests",
            "mixed_decode_rows",
            "forward_passes",
            "calls",
            "items",
            "pad_tokens",
            "errors",
            "warnings",
            "page_64",
            "chunking_off",
            "lpm",
            "mixed_chunk",
            "radix_off",
        ),
        0,
    )
    for seed in seeds:
        case = conversation_case(seed, release)
        result = kit_result(case)
        real = real_run(seed, release)
        found += disagreements(case, result, real)
        counts["workloads"] += 1
        load = case.load
        counts["page_64"] += load.page_size == 64
        counts["chunking_off"] += load.chunked_prefill_size is None
        counts["lpm"] += load.schedule_policy == "lpm"
        counts["mixed_chunk"] += load.enable_mixed_chunk
        counts["radix_off"] += load.disable_radix_cache
        seen: set[int] = set()
        inside = 0
        for _, windows, decoding in real.passes:
            counts["passes"] += 1
            counts["windows"] += len(windows)
            counts["mixed_decode_rows"] += len(decoding)
            for w in windows:
                if w.request not in seen and w.prefix > 0:
                    counts["prefix_hits"] += 1
                    inside += _inside_image(result, w)
                seen.add(w.request)
        counts["prefix_in_image"] += inside
        counts["workloads_prefix_in_image"] += inside > 0
        counts["cut_requests"] += real.chunked
        counts["forward_passes"] += len(real.forward)  # up to the first pass that raises
        for view in real.forward:
            counts["calls"] += len(view.calls)
            counts["items"] += sum(len(items) for items, _ in view.calls)
            counts["pad_tokens"] += len(view.owners)
            counts["errors"] += view.error is not None
            counts["warnings"] += len(view.warnings)
    return found, counts


# --- the lane ---------------------------------------------------------------------------------------------
def test_conversations_agree_with_the_real_scheduler_and_forward_pass(release):
    found, counts = lane_disagreements(release, range(WORKLOADS))
    record("conversation", **counts, disagreements=len(found))
    assert found == [], "\n".join(found[:10])
    assert counts["workloads"] >= 60
    assert counts["prefix_hits"] > 0 and counts["prefix_in_image"] > 0 and counts["cut_requests"] > 0
    assert counts["calls"] > 0 and counts["pad_tokens"] > 0


# --- memory pressure end to end: small pools, then every real pass through the real forward ---------------------
MEMORY_WORKLOADS = 40


@cache
def memory_case(seed: int, release: str) -> Conversation:
    """Return memory workload ``seed``: conversation ``500 + seed``'s requests with long outputs, at page 1 (where
    the kit bounds memory), on a KV pool a little larger than its longest request, sometimes with few request
    rows, a small mamba state pool or another ``--schedule-conservativeness``."""
    base = conversation_case(500 + seed, release)
    rng = random.Random(20_000 + seed)
    requests = tuple(replace(r, output=rng.randint(20, 400)) for r in base.workload.requests)
    page_one = replace(base.load, page_size=1)
    ample = kit_result(replace(base, workload=Workload(requests), load=page_one))
    longest = max(p.length + r.output for p, r in zip(ample.prompts, requests))
    load = replace(
        page_one,
        max_total_tokens=rng.randint(longest + 10, longest + 1200),
        max_running_requests=rng.randint(2, 5) if rng.random() < 0.25 else None,
        max_mamba_cache_size=rng.randint(12, 40) if rng.random() < 0.25 else None,
        schedule_conservativeness=rng.choice((0.3, 2.0)) if rng.random() < 0.2 else 1.0,
    )
    return replace(
        base,
        seed=500 + seed,
        workload=Workload(requests),
        load=load,
        description=f"memory {seed}, TP {base.tp}, defer {base.settings.defer}, cache {base.cache_bytes} B, "
        f"{load.flags()}: {_shown(requests)}",
    )


@cache
def memory_real_run(seed: int, release: str) -> RealRun:
    """Return what SGLang's own scheduler and forward pass did with memory workload ``seed`` (computed once)."""
    return run_real(memory_case(seed, release))


def memory_disagreements(release: str) -> tuple[list[str], dict[str, int]]:
    """Return the memory workloads' disagreements and what SGLang's own code did with them."""
    found: list[str] = []
    counts = dict.fromkeys(
        ("workloads", "passes", "no_token", "retractions", "evicting_steps", "evicted_tokens", "evicted_states",
         "readmitted_windows", "readmitted_images", "forward_passes", "calls", "items", "pad_tokens", "errors"),
        0,
    )  # fmt: skip
    for seed in range(MEMORY_WORKLOADS):
        case = memory_case(seed, release)
        result = kit_result(case)
        real = memory_real_run(seed, release)
        found += disagreements(case, result, real)
        counts["workloads"] += 1
        counts["passes"] += len(real.passes)
        counts["no_token"] += sum(1 for p in real.pressure if p[0] == "no_token")
        retracted = {(step, result.index(rid)) for kind, step, rid in (p for p in real.pressure if p[0] == "retract")}
        counts["retractions"] += len(retracted)
        evictions = [p for p in real.pressure if p[0] == "evicted"]
        counts["evicting_steps"] += len(evictions)
        counts["evicted_tokens"] += sum(p[2] for p in evictions)
        counts["evicted_states"] += sum(p[3] for p in evictions)
        for step, windows, _ in real.passes:  # a retracted request prefilled again: its images back in a call
            for w in windows:
                if any(k == w.request and at < step for at, k in retracted):
                    counts["readmitted_windows"] += 1
                    counts["readmitted_images"] += _images_in(result, w)
        counts["forward_passes"] += len(real.forward)
        for view in real.forward:
            counts["calls"] += len(view.calls)
            counts["items"] += sum(len(items) for items, _ in view.calls)
            counts["pad_tokens"] += len(view.owners)
            counts["errors"] += view.error is not None
    return found, counts


def _images_in(result: LoadResult, window: Span) -> int:
    """Return how many of the request's images have pad tokens inside ``window``."""
    end = window.prefix + window.extend
    return sum(1 for a, b in result.prompts[window.request].pad_runs if window.prefix <= b and a < end)


def test_memory_pressure_agrees_with_the_real_scheduler_and_forward_pass(release):
    """Small pools on SGLang's own allocators: every pass, NO_TOKEN walk, eviction and retraction as the real
    scheduler runs them, then every real pass (re-prefilled retracted requests included) through the real forward."""
    found, counts = memory_disagreements(release)
    record("conversation-memory", **counts, disagreements=len(found))
    assert found == [], "\n".join(found[:10])
    assert counts["retractions"] > 0 and counts["readmitted_images"] > 0
    assert counts["no_token"] > 0 and counts["evicting_steps"] > 0 and counts["calls"] > 0


@pytest.mark.parametrize("plant", [plant for plant in MEMORY_PLANTS if plant not in PAGED_PLANTS])
def test_a_planted_memory_bug_is_caught_end_to_end(release, monkeypatch, plant):
    target, name, value = MEMORY_PLANTS[plant]
    monkeypatch.setattr(target, name, value)
    found, _ = memory_disagreements(release)
    record("planted-bug", plant=f"conversations: memory: {plant}", disagreements=len(found))
    assert found, f"the lane did not notice: {plant}"


# --- planted bugs: the same comparisons must notice a wrong kit ---------------------------------------------
def test_a_budget_charged_without_the_page_ceiling_is_caught(release, monkeypatch):
    monkeypatch.setattr(policy, "charged_tokens", lambda extend, page_size: extend)
    found, _ = lane_disagreements(release, range(WORKLOADS))
    record("planted-bug", plant="conversations: budget charge not page-ceiled", disagreements=len(found))
    assert found, "the lane did not notice budgets charged without the page ceiling"


def test_matching_across_two_different_images_is_caught(release, monkeypatch):
    monkeypatch.setattr(prefix, "pad_values", lambda image_hash, wide: (prefix.PAD_SHIFT,))
    found, _ = lane_disagreements(release, range(WORKLOADS))
    record("planted-bug", plant="conversations: pad values ignore the image hash", disagreements=len(found))
    assert found, "the lane did not notice a prefix matched across two different images"


# --- the load scenarios that are plain workloads: their outcome is the real code's -----------------------------
PLAIN_LOAD_SCENARIOS = (
    "s14-two-requests-one-call",
    "s15-straddling-image",
    "s18-prefix-reopens-image",
    "s19-saved-state-reopens-image",
    "s20-retraction-meets-requests",
    "s20-evicted-turn-meets-request",
)


@pytest.mark.parametrize("name", PLAIN_LOAD_SCENARIOS)
def test_a_load_scenario_is_what_the_real_scheduler_and_forward_pass_do(release, name):
    """The scenario's workload on its own deployment, but on the lane's release: SGLang's own scheduler and
    get_embedding_and_mask agree with the kit pass by pass, and on the scenario's release raise what it states."""
    scenario = LOAD_SCENARIOS[name]
    workload = scenario.build()
    assert not workload.cache and not any(r.stale for r in workload.requests) and scenario.settings.epd is False
    cache_bytes = CACHE_BYTES if scenario.load.cache_mb else 0
    case = Conversation(
        -1, release, workload, scenario.load, scenario.tp_size, scenario.settings, cache_bytes, f"scenario {name}"
    )
    result = kit_result(case)
    real = run_real(case)
    found = disagreements(case, result, real)
    record("conversation-scenarios", scenario=name, passes=len(real.passes), disagreements=len(found))
    assert found == [], "\n".join(found)
    raised = next((view.error for view in real.forward if view.error is not None), None)
    if release == scenario.sglang_version:
        expected = scenario.expected.error
        assert raised == (None if expected is None else (expected.type, expected.message))
        assert len(real.passes) == scenario.expected.passes or scenario.expected.passes is None
    elif scenario.expected.fixed_in is not None and parse_version(release) >= parse_version(scenario.expected.fixed_in):
        assert raised is None
