"""Benchmark the sweep of a conversation under load against one full workload what-if per cell, in the same run.

    python benchmarks/bench_conversation_sweep.py
    python benchmarks/bench_conversation_sweep.py --json build/bench_conversation_sweep.json

Workload (:data:`WORKLOAD`, the JSON ``kimi-viz whatif --requests FILE`` reads): a 4-turn conversation
(every turn re-sends the conversation's images; turns 1, 2 and 4 add sample images, turn 3 only text;
outputs of 24 to 48 tokens) and 3 other requests arriving at steps 1, 3 and 6, all five prompts
sharing one 64-token system prompt. Swept over every release group (releases that see a workload
alike, as :func:`kimi_viz.sweep` groups them) × attention-TP 1, 2, 4, 8 × ``--page-size`` 1, 16, 64,
in shapes mode; target: within 3 s.

Kit: what :func:`kimi_viz.sweep` does, over page sizes too — the workload read once, each release
group's requests built once (:meth:`WorkloadQuestion.prepare`), then every TP size and page size
asked on those items. Baseline: what a script calling the public API once per cell does — read the
workload (image headers probed) and run a full ``whatif(...)`` (requests built, every pass replayed,
the fix search on failures). Both must give the same status, error and passes (each pass's step and
windows) in every cell. The kit's time is the median of several runs after a warm-up, and its first
(cold) run is reported too; the baseline runs once.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install needed

from figures import write_figures

from kimi_viz import whatif
from kimi_viz._whatif.ask import SWEEP_TP_SIZES
from kimi_viz._whatif.questions import WorkloadQuestion
from kimi_viz.answer import Answer
from kimi_viz.errors import SettingNotInReleaseError
from kimi_viz.releases import RELEASES
from kimi_viz.request.settings import ServerSettings
from kimi_viz.request.workload import Workload, parse_workload
from kimi_viz.scheduler.flags import PAGE_SIZES, LoadSettings

TARGET_S = 3.0
SYSTEM = 64  # tokens of the system prompt every request shares
WORKLOAD: dict[str, Any] = {
    "requests": [
        {"id": "t1", "images": ["astronaut.png", "chelsea.png"], "output": 40, "system": SYSTEM},
        {"id": "o1", "images": ["coffee.png"], "output": 24, "system": SYSTEM, "arrival": 1},
        {"id": "t2", "images": ["rocket.jpg"], "continues": "t1", "output": 32, "text": {"before": 24}},
        {"id": "o2", "images": ["horse.png"], "output": 16, "system": SYSTEM, "arrival": 3},
        {"id": "t3", "continues": "t2", "output": 48, "text": {"before": 40, "after": 16}},
        {"id": "o3", "images": ["camera.png", "coffee.png"], "output": 20, "system": SYSTEM, "arrival": 6},
        {"id": "t4", "images": ["hubble_deep_field.jpg"], "continues": "t3", "output": 30},
    ]
}

Cell = tuple[str, int, int, str, str, tuple[tuple[int, tuple[tuple[int, int, int], ...]], ...]]


def groups(question: WorkloadQuestion) -> list[tuple[str, ...]]:
    """Return the release groups :func:`kimi_viz.sweep` forms for ``question``, each as its versions."""
    return [tuple(r.version for r in g) for _, g in itertools.groupby(RELEASES.values(), key=question.sees)]


def cell(group: tuple[str, ...], tp: int, page: int, answer: Answer | None, reason: str = "") -> Cell:
    """Return one cell's answer as comparable values: status, error and each pass's step and windows."""
    if answer is None:
        return (group[0], tp, page, "not-applicable", reason, ())
    result = answer.workload
    assert result is not None
    passes = tuple(
        (p.step, tuple((result.index(w.rid), w.prefix_len, w.extend_input_len) for w in p.windows))
        for p in result.plans
    )
    return (group[0], tp, page, answer.status.value, str(answer.error), passes)


def kit(data: dict[str, Any]) -> list[Cell]:
    """Return every cell the way the kit sweeps: each release group's requests built once for every TP and page."""
    question = WorkloadQuestion(parse_workload(data), ServerSettings())
    cells = []
    for group in groups(question):
        release = RELEASES[group[0]]
        try:
            prepared = question.prepare(release, "shapes")
        except SettingNotInReleaseError as exc:
            cells += [cell(group, tp, p, None, str(exc)) for p in PAGE_SIZES for tp in SWEEP_TP_SIZES]
            continue
        for page in PAGE_SIZES:  # the items built once, the passes planned once per page size
            asked = replace(prepared, question=question.with_load(LoadSettings(page_size=page)), planned=None)
            for tp in SWEEP_TP_SIZES:
                cells.append(cell(group, tp, page, asked.ask(tp, mode="shapes", device="cpu")))
    return cells


def baseline(data: dict[str, Any], releases: list[tuple[str, ...]]) -> list[Cell]:
    """Return the same cells from one full :func:`whatif` per cell, the workload read afresh each time."""
    cells = []
    for group in releases:
        for page in PAGE_SIZES:
            for tp in SWEEP_TP_SIZES:
                workload: Workload = parse_workload(data)
                try:
                    answer = whatif(workload, sglang_version=group[0], tp_size=tp, load=LoadSettings(page_size=page))
                except SettingNotInReleaseError as exc:
                    cells.append(cell(group, tp, page, None, str(exc)))
                    continue
                cells.append(cell(group, tp, page, answer))
    return cells


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0 when the target is met, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of the kit's sweep (default 5)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    ours = kit(WORKLOAD)  # cold: the first sweep in this process
    cold_s = time.perf_counter() - start
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        ours = kit(WORKLOAD)
        times.append(time.perf_counter() - start)
    kit_s = statistics.median(times)
    releases = groups(WorkloadQuestion(parse_workload(WORKLOAD), ServerSettings()))
    start = time.perf_counter()
    theirs = baseline(WORKLOAD, releases)
    base_s = time.perf_counter() - start
    assert len(ours) == len(theirs) == len(releases) * len(SWEEP_TP_SIZES) * len(PAGE_SIZES)
    for a, b in zip(ours, theirs):
        assert a == b, f"the sweep and the per-cell what-if disagree at {a[:3]}: {a[3:5]} vs {b[3:5]}"
    workload = parse_workload(WORKLOAD)
    result: dict[str, Any] = {
        "requests": len(workload.requests),
        "images": workload.images,
        "release_groups": [list(g) for g in releases],
        "tp_sizes": list(SWEEP_TP_SIZES),
        "page_sizes": list(PAGE_SIZES),
        "cells": len(ours),
        "failing_cells": sum(1 for c in ours if c[3] == "error-reproduced"),
        "passes": sum(len(c[5]) for c in ours),
        "kit_s": kit_s,
        "kit_cold_s": cold_s,
        "kit_runs_s": times,
        "baseline_s": base_s,
        "speedup": base_s / kit_s,
        "target_s": TARGET_S,
        "met_target": max(kit_s, cold_s) <= TARGET_S,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    print(
        f"conversation sweep under load on {result['machine']['cpus']} CPU(s), Python {result['machine']['python']}\n\n"
        "| requests | release groups | TP sizes | page sizes | cells | failing | passes | kit (ms) | kit, cold (ms) "
        "| baseline (ms) | speed-up | target (ms) | met |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n"
        f"| {result['requests']} | {len(releases)} | {len(SWEEP_TP_SIZES)} | {len(PAGE_SIZES)} | {result['cells']} | "
        f"{result['failing_cells']} | {result['passes']} | {kit_s * 1e3:.0f} | {cold_s * 1e3:.0f} | "
        f"{base_s * 1e3:.0f} | {base_s / kit_s:.2f}× | {TARGET_S * 1e3:.0f} | "
        f"{'yes' if result['met_target'] else 'NO'} |\n\n"
        "baseline: per cell the workload read (headers probed) and a full whatif() (items built, fix search)\n"
        f"{'PASS' if result['met_target'] else 'FAIL'}: the sweep in {max(kit_s, cold_s):.2f} s "
        f"(median {kit_s:.2f} s, cold {cold_s:.2f} s), limit {TARGET_S:.0f} s"
    )
    write_figures(args.json, result)
    return 0 if result["met_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
