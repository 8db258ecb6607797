"""Benchmark the pairs sweep under load against one full workload what-if per cell, measured in the same run.

    python benchmarks/bench_load.py
    python benchmarks/bench_load.py --json build/bench_load.json

Workload: 16 sample images, every unordered pair (120) as two single-image requests arriving together,
on every release group a workload's sweep forms (0.5.17, 0.5.18, 0.5.19–0.5.21, 0.5.22, 0.5.23) ×
attention-TP 1, 2, 4, 8 — 2400 forward passes, in shapes mode; target under 3 s.

Kit: :func:`kimi_viz.sweep_pairs` — image headers read once, each image's items built once per release,
every cell one forward-pass replay without a fix search. Baseline: what a script calling the public API
once per cell does — ``whatif(together([a, b]), ...)`` for every pair, release and TP size (image
headers probed per call, items built per call, the fix search on failures). Both must give the same
status, error and failing ranks in every cell. The kit's time is the median of several runs after a
warm-up, and its first (cold) run is reported too; the baseline runs once.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install needed

from figures import write_figures

from kimi_viz import sample_images, sweep_pairs, together, whatif
from kimi_viz._whatif.ask import SWEEP_TP_SIZES, release_groups
from kimi_viz._whatif.questions import WorkloadQuestion
from kimi_viz.request.settings import ServerSettings

TARGET_S = 3.0
IMAGES = 16

Cell = tuple[str, str, str, int, str, Any, tuple[int, ...]]


def kit(images: list[Path]) -> list[Cell]:
    """Return every cell from one :func:`sweep_pairs`."""
    swept = sweep_pairs(images)
    return [
        (
            swept.images[a].label,
            swept.images[b].label,
            c.releases[0].version,
            c.tp_size,
            c.status.value,
            c.error,
            tuple(c.answer.failing_ranks) if c.answer is not None else (),
        )
        for (a, b), pair in zip(swept.pairs, swept.sweeps)
        for c in pair.cells
    ]


def groups(images: list[Path]) -> list[str]:
    """Return the first release of every group a workload's sweep forms (the same for every pair)."""
    question = WorkloadQuestion(together(images[:2]), ServerSettings())
    return [group[0].version for group in release_groups(question)]


def baseline(images: list[Path]) -> list[Cell]:
    """Return the same cells from one full :func:`whatif` per pair, release and TP size."""
    cells = []
    for release in groups(images):
        for a, b in itertools.combinations(images, 2):
            for tp in SWEEP_TP_SIZES:
                answer = whatif(together([a, b]), sglang_version=release, tp_size=tp)
                workload = answer.replay.workload
                cells.append(
                    (
                        workload.requests[0].images[0].label,
                        workload.requests[1].images[0].label,
                        release,
                        tp,
                        answer.status.value,
                        answer.error,
                        tuple(answer.failing_ranks),
                    )
                )
    return cells


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0 when the target is met, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of the pairs sweep (default 5)")
    args = parser.parse_args(argv)
    images = sample_images()[:IMAGES]
    start = time.perf_counter()
    ours = kit(images)  # cold: the first sweep in this process (torch loads for odd channel counts)
    cold_s = time.perf_counter() - start
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        ours = kit(images)
        times.append(time.perf_counter() - start)
    kit_s = statistics.median(times)
    start = time.perf_counter()
    theirs = baseline(images)
    base_s = time.perf_counter() - start
    assert sorted(ours) == sorted(theirs), "the pairs sweep and the per-cell what-ifs disagree"
    result = {
        "images": len(images),
        "pairs": len(images) * (len(images) - 1) // 2,
        "releases": groups(images),
        "tp_sizes": list(SWEEP_TP_SIZES),
        "cells": len(ours),
        "failing_cells": sum(1 for c in ours if c[5] is not None),
        "kit_s": kit_s,
        "kit_cold_s": cold_s,
        "baseline_s": base_s,
        "speedup": base_s / kit_s,
        "target_s": TARGET_S,
        "met_target": max(kit_s, cold_s) < TARGET_S,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    print(
        f"pairs sweep under load on {result['machine']['cpus']} CPU(s), Python {result['machine']['python']}\n\n"
        "| images | pairs | cells | failing | kit (ms) | kit, cold (ms) | baseline (ms) | speed-up | target (ms) "
        "| met |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n"
        f"| {result['images']} | {result['pairs']} | {result['cells']} | {result['failing_cells']} | "
        f"{kit_s * 1e3:.0f} | {cold_s * 1e3:.0f} | {base_s * 1e3:.0f} | {base_s / kit_s:.2f}× | "
        f"{TARGET_S * 1e3:.0f} | {'yes' if result['met_target'] else 'NO'} |\n\n"
        "baseline: per cell a full whatif(together([a, b])) (headers probed, items built, fix search)"
    )
    write_figures(args.json, result)
    return 0 if result["met_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
