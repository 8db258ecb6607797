"""The kit's model of the prefill scheduler against SGLang's own, pass by pass, on seeded random workloads.

For each workload (:func:`.random_workloads.random_workload`) the real ``PrefillAdder``, policy and
radix tree (``real_scheduler.py``) and the kit's :func:`kimi_viz.scheduler.event_loop.schedule` must
form the same passes: the same step, the same windows in batch order (rid, prefix_len,
extend_input_len), the same request left chunked, the same mixed decode rows and finishes. ``releases_part``
counts the workloads where the kit's 0.5.18 and 0.5.23 passes differ (the budget check). Two
planted bugs show the comparison can fail: budgets charged without the page ceiling, and pad values
that ignore the image hash (so different images share a prefix).
"""

from __future__ import annotations

import pytest

from kimi_viz.scheduler import policy, tree
from kimi_viz.scheduler.event_loop import Pass

from ..lane import record
from .random_workloads import random_workload
from .workload import Workload, kit_passes

SEEDS = range(72)


@pytest.fixture(scope="module")
def real_runs() -> list[tuple[Workload, list[Pass]]]:
    """Every workload with the passes this venv's SGLang forms for it (computed once per run)."""
    from .real_scheduler import run_workload

    workloads = [random_workload(seed) for seed in SEEDS]
    return [(w, run_workload(w)) for w in workloads]


def _shape(p: Pass) -> tuple:
    return p.step, p.windows, p.chunked, p.decoding, p.finished


def disagreements(runs: list[tuple[Workload, list[Pass]]], release: str) -> list[str]:
    """Return one line per workload whose kit passes differ from the real ones (the first differing pass)."""
    found = []
    for seed, (workload, real) in zip(SEEDS, runs):
        kit = kit_passes(workload, release)
        if [_shape(p) for p in kit] == [_shape(p) for p in real]:
            continue
        k = next((i for i, (a, b) in enumerate(zip(kit, real)) if _shape(a) != _shape(b)), min(len(kit), len(real)))
        mine = _shape(kit[k]) if k < len(kit) else None
        theirs = _shape(real[k]) if k < len(real) else None
        found.append(f"seed {seed} {workload.settings}: pass {k}: kit {mine} != real {theirs}")
    return found


def _counts(runs: list[tuple[Workload, list[Pass]]]) -> dict[str, int]:
    passes = windows = hits = cut = 0
    for _workload, real in runs:
        seen: set[str] = set()
        for p in real:
            passes += 1
            windows += len(p.windows)
            for w in p.windows:
                hits += w.rid not in seen and w.prefix_len > 0
                seen.add(w.rid)
        cut += len({p.chunked for p in real if p.chunked})
    return {"workloads": len(runs), "passes": passes, "windows": windows, "prefix_hits": hits, "cut_requests": cut}


def test_the_kit_forms_the_passes_sglang_forms(real_runs, release):
    found = disagreements(real_runs, release)
    counts = _counts(real_runs)
    split = sum(
        list(map(_shape, kit_passes(w, "0.5.18"))) != list(map(_shape, kit_passes(w, "0.5.23"))) for w, _ in real_runs
    )
    record("scheduler", **counts, releases_part=split, disagreements=len(found))
    assert counts["prefix_hits"] > 0 and counts["cut_requests"] > 0  # the workloads exercise both
    assert found == [], "\n".join(found[:10])


def test_a_budget_charged_without_the_page_ceiling_is_caught(real_runs, release, monkeypatch):
    monkeypatch.setattr(policy, "charged_tokens", lambda extend, page_size: extend)
    found = disagreements(real_runs, release)
    record("planted-bug", plant="budget charge not page-ceiled", disagreements=len(found))
    assert len(found) > 0


def test_pad_values_blind_to_the_image_hash_are_caught(real_runs, release, monkeypatch):
    monkeypatch.setattr(tree, "pad_values", lambda image_hash, wide: (tree.PAD_SHIFT,))
    found = disagreements(real_runs, release)
    record("planted-bug", plant="pad values ignore the image hash", disagreements=len(found))
    assert len(found) > 0
