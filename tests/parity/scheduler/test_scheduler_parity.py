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
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from kimi_viz.errors import SettingNotInReleaseError
from kimi_viz.releases import RELEASES
from kimi_viz.scheduler import event_loop, policy, tree
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.server_args import resolve_server

from ..lane import record
from .random_workloads import random_workload
from .workload import View, Workload, kit_schedule, kit_view, real_payload, real_view

SEEDS = range(160)


@pytest.fixture(scope="module")
def real_runs(release) -> list[tuple[Workload, View]]:
    """Every workload with what this venv's SGLang does with it (computed once per run)."""
    from .real_scheduler import run_workload

    workloads = [random_workload(seed) for seed in SEEDS]
    return [(w, real_view(run_workload(real_payload(w, release)))) for w in workloads]


def disagreements(runs: list[tuple[Workload, View]], release: str) -> list[str]:
    """Return one line per workload whose kit schedule differs from the real one (the first difference)."""
    found = []
    for seed, (workload, real) in zip(SEEDS, runs):
        kit = kit_view(kit_schedule(workload, release))
        for name, mine, theirs in zip(("pass", "match", "save"), kit, real):
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
    for workload, (passes, matches, saves) in runs:
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
    """Every GPU family × attention backend × page given × strategy × overlap: the backend, page, strategy and
    overlap the release settles on, or its refusal in its own words."""
    from .real_scheduler import resolve_kimi_k3

    rules = RELEASES[release].scheduler
    found, rows = [], 0
    for gpu, backend, page, strategy, no_overlap in itertools.product(
        GPU, (None, *rules.attention_backends), (None, 1, 32, 64), ("auto", "extra_buffer", "no_buffer"), (False, True)
    ):
        load = LoadSettings(
            gpu=gpu,
            attention_backend=backend,
            page_size=page,
            mamba_radix_cache_strategy=strategy,
            disable_overlap_schedule=no_overlap,
            chunked_prefill_size=None,
        )
        real = _real_resolution(
            resolve_kimi_k3(
                GPU[gpu],
                attention_backend=backend,
                page_size=page,
                disable_overlap_schedule=no_overlap,
                mamba_radix_cache_strategy=strategy,
            )
        )
        kit = _kit_resolution(load, release)
        rows += 1
        agree = kit == real or (kit[0] == real[0] == "refused" and (real[1] in kit[1] or "without a message" in kit[1]))
        if not agree:
            found.append(f"{gpu} {backend} page {page} {strategy} overlap {not no_overlap}: kit {kit} != SGLang {real}")
    record("resolution", rows=rows, disagreements=len(found))
    assert found == [], "\n".join(found[:10])


# --- planted bugs: the comparison must notice a wrong kit ------------------------------------------------------
def _resolve_with(**changes):
    real = event_loop.resolve_server
    return lambda load, release: replace(real(load, release), **changes)


PLANTS = {
    "the plain rule (no cut back to a saved state)": (tree.RadixTree, "state_depth", lambda self, ids, limit: limit),
    "decode saves ignored": (event_loop, "resolve_server", _resolve_with(decode_grid=1 << 40)),
    "the overlap delay dropped": (event_loop, "resolve_server", _resolve_with(overlap=False)),
    "budget charge not page-ceiled": (policy, "charged_tokens", lambda extend, page_size: extend),
    "pad values ignore the image hash": (tree, "pad_values", lambda image_hash, wide: (tree.PAD_SHIFT,)),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_planted_bug_is_caught(real_runs, release, monkeypatch, plant):
    target, name, value = PLANTS[plant]
    monkeypatch.setattr(target, name, value)
    found = disagreements(real_runs, release)
    record("planted-bug", plant=plant, disagreements=len(found))
    assert len(found) > 0


def test_inserts_not_cut_to_the_saved_state_are_caught(real_runs, release, monkeypatch):
    real_insert = event_loop._Scheduler._insert

    def uncut(self, req, length, *, finished):
        req.mamba_last_track_seqlen = length  # every insert whole, its state at its end
        real_insert(self, req, length, finished=finished)

    monkeypatch.setattr(event_loop._Scheduler, "_insert", uncut)
    found = disagreements(real_runs, release)
    record("planted-bug", plant="inserts not cut to the saved state", disagreements=len(found))
    assert len(found) > 0
