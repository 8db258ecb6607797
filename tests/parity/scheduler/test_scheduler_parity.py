"""The kit's model of Kimi-K3's scheduler against SGLang's own, pass by pass, on seeded random workloads.

For each workload (:func:`.random_workloads.random_workload`) SGLang's own hybrid tree
(``UnifiedRadixCache`` with FULL and MAMBA components, its pools, ``Req`` mamba tracking,
``ScheduleBatch``, ``PrefillAdder`` and result processing, in the order of ``event_loop_overlap`` /
``event_loop_normal``: ``real_scheduler.py``) and the kit's :func:`kimi_viz.scheduler.event_loop.schedule`
must agree on every prefill pass (step, windows in batch order, the request left chunked, the mixed
decode rows, the requests its result finished), every admitted request's match (the FULL walk, the
prefix after the cut back to a saved state, the branching point) and every state the tree took in.
The server flags the kit resolves for Kimi-K3 (attention backend, page size, mamba strategy, overlap
schedule, or SGLang's refusal) must be the release's own, on every GPU family. Planted bugs show each
comparison can fail: the plain rule (no cut back), decode saves ignored, inserts not cut, the
overlap delay dropped, budgets charged without the page ceiling, pad values blind to the image hash.

Memory pressure (``memory_workload``, pages 1, 16 and 64 on the release's own token and paged allocators) and
0.5.22+'s refresh of the waiting prefixes (``recency_workloads``) are held to the same comparisons, with the
pools after every step; their planted bugs are in ``memory_plants.py`` and below.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from kimi_viz.errors import SettingNotInReleaseError
from kimi_viz.releases import RELEASES
from kimi_viz.scheduler import batch, event_loop, policy, prefix, radix_cache
from kimi_viz.scheduler.event_loop import REFRESH_EVERY, REFRESH_FIRST
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.server_config import resolve_server

from ..lane import record
from .memory_plants import MEMORY_PLANTS
from .random_workloads import memory_workload, random_workload
from .recency_workloads import recency_workloads
from .workload import View, Workload, kit_schedule, kit_view, real_payload, real_view

SEEDS = range(160)
MEMORY_SEEDS = range(120)
PAGED_SEEDS = {16: range(50), 64: range(50)}  # memory workloads at the pages Blackwell backends force


def _real(workloads: list[Workload], release: str) -> list[tuple[Workload, View]]:
    from .real_scheduler import run_workload

    return [(w, real_view(run_workload(real_payload(w, release)))) for w in workloads]


@pytest.fixture(scope="module")
def real_runs(release) -> list[tuple[Workload, View]]:
    """Every workload with what this venv's SGLang does with it (computed once per run)."""
    return _real([random_workload(seed) for seed in SEEDS], release)


@pytest.fixture(scope="module")
def memory_runs(release) -> list[tuple[Workload, View]]:
    """Every memory workload with what this venv's SGLang does with it, on its own pools (computed once)."""
    paged = [memory_workload(seed, page) for page, seeds in PAGED_SEEDS.items() for seed in seeds]
    return _real([memory_workload(seed) for seed in MEMORY_SEEDS] + paged, release)


def disagreements(runs: list[tuple[Workload, View]], release: str) -> list[str]:
    """Return one line per workload whose kit schedule differs from the real one (the first difference)."""
    found = []
    for seed, (workload, real) in enumerate(runs):
        kit = kit_view(kit_schedule(workload, release))
        for name, mine, theirs in zip(("pass", "match", "save", "memory"), kit, real):
            if mine != theirs:
                k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
                a = mine[k] if k < len(mine) else None
                b = theirs[k] if k < len(theirs) else None
                found.append(f"seed {seed} {workload.settings.flags()}: {name} {k}: kit {a} != SGLang {b}")
                break
    return found


def _counts(runs: list[tuple[Workload, View]]) -> dict[str, int]:
    counts = dict.fromkeys(
        ("workloads", "passes", "windows", "prefix_hits", "cut_back", "branching", "saves", "decode_saves",
         "cut_requests", "mixed_decode_rows", "overlap", "no_buffer", "page_16", "page_64", "chunking_off"),
        0,
    )  # fmt: skip
    for workload, (passes, matches, saves, _) in runs:
        s = workload.settings
        lengths = {r.rid: r.length for r in workload.requests}
        counts["workloads"] += 1
        counts["passes"] += len(passes)
        counts["windows"] += sum(len(p[1]) for p in passes)
        counts["prefix_hits"] += sum(1 for m in matches if m[3] > 0)
        counts["cut_back"] += sum(1 for m in matches if m[2] > m[3])
        counts["branching"] += sum(1 for m in matches if m[4] is not None)
        counts["saves"] += len(saves)
        counts["decode_saves"] += sum(1 for _, rid, depth in saves if depth > lengths[rid])
        counts["cut_requests"] += len({p[2] for p in passes if p[2]})
        counts["mixed_decode_rows"] += sum(len(p[3]) for p in passes)
        counts["overlap"] += not s.disable_overlap_schedule
        counts["no_buffer"] += s.mamba_radix_cache_strategy == "no_buffer"
        page = resolve_server(s, RELEASES["0.5.23"]).page_size
        counts["page_16"] += page == 16
        counts["page_64"] += page == 64
        counts["chunking_off"] += s.chunked_prefill_size is None
    return counts


def test_the_kit_forms_the_passes_sglang_forms(real_runs, release):
    found = disagreements(real_runs, release)
    counts = _counts(real_runs)
    split = sum(kit_view(kit_schedule(w, "0.5.18"))[0] != kit_view(kit_schedule(w, "0.5.23"))[0] for w, _ in real_runs)
    record("scheduler", **counts, releases_part=split, disagreements=len(found))
    assert found == [], "\n".join(found[:10])
    for what in ("prefix_hits", "cut_back", "branching", "decode_saves", "cut_requests", "mixed_decode_rows"):
        assert counts[what] > 0, what  # the workloads exercise each rule
    assert 0 < counts["overlap"] < counts["workloads"] and counts["no_buffer"] > 0
    assert counts["page_16"] > 0 and counts["page_64"] > 0 and counts["chunking_off"] > 0


GPU = {"hopper": "sm90", "blackwell": "sm100", "rocm": "rocm"}


def _kit_resolution(load: LoadSettings, release: str) -> tuple:
    try:
        server = resolve_server(load, RELEASES[release])
    except SettingNotInReleaseError as exc:
        return ("refused", str(exc))
    return (server.attention_backend, server.page_size, server.strategy, server.overlap)


def _real_resolution(row: dict) -> tuple:
    if "error" in row:
        return ("refused", row["error"])
    if "tree_error" in row:
        return ("refused", row["tree_error"])
    return (row["attention_backend"], row["page_size"], row["strategy"], row["overlap"])


def test_the_flags_resolve_as_the_release_resolves_them_on_every_gpu(release):
    """Every GPU family × attention backend × page given × strategy × overlap × track interval (one the pages
    divide, one page 64 does not): the backend, page, strategy and overlap the release settles on, or its
    refusal in its own words."""
    from .real_scheduler import resolve_kimi_k3

    rules = RELEASES[release].scheduler
    found, rows = [], 0
    for gpu, backend, page, strategy, no_overlap, interval in itertools.product(
        GPU,
        (None, *rules.attention_backends),
        (None, 1, 32, 64),
        ("auto", "extra_buffer", "no_buffer"),
        (False, True),
        (256, 96),
    ):
        load = LoadSettings(
            gpu=gpu,
            attention_backend=backend,
            page_size=page,
            mamba_radix_cache_strategy=strategy,
            disable_overlap_schedule=no_overlap,
            mamba_track_interval=interval,
            chunked_prefill_size=None,
        )
        real = _real_resolution(
            resolve_kimi_k3(
                GPU[gpu],
                attention_backend=backend,
                page_size=page,
                disable_overlap_schedule=no_overlap,
                mamba_radix_cache_strategy=strategy,
                mamba_track_interval=interval,
            )
        )
        kit = _kit_resolution(load, release)
        rows += 1
        agree = kit == real or (kit[0] == real[0] == "refused" and (real[1] in kit[1] or "without a message" in kit[1]))
        if not agree:
            found.append(
                f"{gpu} {backend} page {page} {strategy} overlap {not no_overlap} interval {interval}: kit {kit} != "
                f"SGLang {real}"
            )
    record("resolution", rows=rows, disagreements=len(found))
    assert found == [], "\n".join(found[:10])


# --- planted bugs: the comparison must notice a wrong kit ------------------------------------------------------
def _resolve_with(**changes):
    real = event_loop.resolve_server
    return lambda load, release: replace(real(load, release), **changes)


def _plain_match(self, ids):
    found = _MATCH(self, ids)
    return replace(found, depth=found.full)  # no cut back to the deepest saved state


_MATCH = radix_cache.RadixCache.match_prefix
PLANTS = {
    "the plain rule (no cut back to a saved state)": (radix_cache.RadixCache, "match_prefix", _plain_match),
    "decode saves ignored": (event_loop, "resolve_server", _resolve_with(decode_grid=1 << 40)),
    "the overlap delay dropped": (event_loop, "resolve_server", _resolve_with(overlap=False)),
    "budget charge not page-ceiled": (policy, "charged_tokens", lambda extend, page_size: extend),
    "pad values ignore the image hash": (prefix, "pad_values", lambda image_hash, wide: (prefix.PAD_SHIFT,)),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_planted_bug_is_caught(real_runs, release, monkeypatch, plant):
    target, name, value = PLANTS[plant]
    monkeypatch.setattr(target, name, value)
    found = disagreements(real_runs, release)
    record("planted-bug", plant=plant, disagreements=len(found))
    assert len(found) > 0


def test_inserts_not_cut_to_the_saved_state_are_caught(real_runs, release, monkeypatch):
    real_insert = batch.ScheduleState.insert

    def uncut(self, req, length, *, finished):
        req.mamba_last_track_seqlen = length  # every insert whole, its state at its end
        real_insert(self, req, length, finished=finished)

    monkeypatch.setattr(batch.ScheduleState, "insert", uncut)
    found = disagreements(real_runs, release)
    record("planted-bug", plant="inserts not cut to the saved state", disagreements=len(found))
    assert len(found) > 0


# --- memory pressure: the real pools, eviction, NO_TOKEN and retraction ------------------------------------------
def _memory_counts(runs: list[tuple[Workload, View]], release: str) -> dict[str, int]:
    counts = dict.fromkeys(
        ("workloads", "passes", "no_token", "retractions", "evicting_steps", "evicted_tokens", "evicted_states",
         "rows_bound", "mamba_bound", "no_buffer", "overlap", "lpm", "mixed_chunk", "radix_off", "page_16",
         "page_64", "paged_evicting_steps"),
        0,
    )  # fmt: skip
    for workload, (passes, _, _, pressure) in runs:
        s = workload.settings
        counts["workloads"] += 1
        counts["passes"] += len(passes)
        counts["no_token"] += sum(1 for p in pressure if p[0] == "no_token")
        counts["retractions"] += sum(1 for p in pressure if p[0] == "retract")
        evictions = [p for p in pressure if p[0] == "evicted"]  # SGLang's, step by step
        counts["evicting_steps"] += len(evictions)
        counts["evicted_tokens"] += sum(tokens for _, _, tokens, _ in evictions)
        counts["evicted_states"] += sum(states for _, _, _, states in evictions)
        counts["rows_bound"] += s.max_running_requests is not None
        counts["mamba_bound"] += s.max_mamba_cache_size is not None
        counts["no_buffer"] += s.disable_overlap_schedule and s.mamba_radix_cache_strategy == "auto"
        counts["overlap"] += not s.disable_overlap_schedule
        counts["lpm"] += s.schedule_policy == "lpm"
        counts["mixed_chunk"] += s.enable_mixed_chunk
        counts["radix_off"] += s.disable_radix_cache
        counts["page_16"] += s.page_size == 16
        counts["page_64"] += s.page_size == 64
        counts["paged_evicting_steps"] += len(evictions) if s.page_size != 1 else 0
    return counts


def test_memory_pressure_gives_sglangs_passes_evictions_and_retractions(memory_runs, release):
    """Small pools on the real allocators (``TokenToKVPoolAllocator`` at page 1, ``PagedTokenToKVPoolAllocator`` at
    pages 16 and 64): every pass, match and save, every NO_TOKEN walk and retraction, and the free and evictable KV
    and free state slots after every step, as SGLang's own."""
    found = disagreements(memory_runs, release)
    counts = _memory_counts(memory_runs, release)
    record("memory", **counts, disagreements=len(found))
    assert found == [], "\n".join(found[:10])
    for what in (
        "no_token",
        "retractions",
        "evicting_steps",
        "evicted_states",
        "rows_bound",
        "mamba_bound",
        "page_16",
        "page_64",
        "paged_evicting_steps",
    ):
        assert counts[what] > 0, what


@pytest.mark.parametrize("plant", list(MEMORY_PLANTS))
def test_a_planted_memory_bug_is_caught(memory_runs, release, monkeypatch, plant):
    target, name, value = MEMORY_PLANTS[plant]
    monkeypatch.setattr(target, name, value)
    found = disagreements(memory_runs, release)
    record("planted-bug", plant=f"memory: {plant}", disagreements=len(found))
    assert len(found) > 0


# --- the waiting requests' prefixes refreshed (0.5.22+): the state a full mamba pool evicts -------------------------
@pytest.fixture(scope="module")
def recency_runs(release) -> list[tuple[Workload, View]]:
    """The recency workloads with what this venv's SGLang does with them (computed once)."""
    return _real(recency_workloads(), release)


def _no_refresh(self):
    return None  # the waiting prefixes never touched


def _counting_an_empty_queue(self):
    if self.refreshes % REFRESH_EVERY == 0:
        for req in reversed(self.waiting[:REFRESH_FIRST]):
            self.state.tree.match_prefix(req.fill_ids())
    self.refreshes += 1  # a call without a waiting request counted too (a chunk continued alone)


def test_the_waiting_prefix_refresh_decides_the_evictions_sglang_makes(recency_runs, release, monkeypatch):
    """Chunked prefills under a full mamba pool while the next turns wait: every pass, eviction and match as SGLang's
    own, where the refresh at the 32nd call decides which state the pool evicts (in 0.5.22+)."""
    found = disagreements(recency_runs, release)
    refreshes = RELEASES[release].scheduler.touches_waiting_prefixes
    with monkeypatch.context() as patch:
        patch.setattr(event_loop.Scheduler, "_touch_waiting_prefixes", _no_refresh)
        without = [kit_view(kit_schedule(w, release)) for w, _ in recency_runs]
    decided = sum(kit_view(kit_schedule(w, release)) != other for (w, _), other in zip(recency_runs, without))
    record("recency", workloads=len(recency_runs), refresh_decides=decided, disagreements=len(found))
    assert found == [], "\n".join(found[:10])
    assert decided == (8 if refreshes else 0)
    if not refreshes:
        return
    for plant, touch in (("no refresh", _no_refresh), ("an empty queue counted", _counting_an_empty_queue)):
        with monkeypatch.context() as patch:
            patch.setattr(event_loop.Scheduler, "_touch_waiting_prefixes", touch)
            caught = len(disagreements(recency_runs, release))
        record("planted-bug", plant=f"recency: {plant}", disagreements=caught)
        assert caught > 0, plant
