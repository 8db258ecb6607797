"""Benchmark the what-if sweep against one independent what-if replay per cell, measured in the same run.

    python benchmarks/bench_whatif.py
    python benchmarks/bench_whatif.py --json build/bench_whatif.json

Workloads: the eight sample photos (``SAMPLE_PHOTOS``) swept over the four release rows × attention-TP
1, 2, 4, 8 (16 cells), in shapes mode, target under 2 s:

* ``sweep-8-photos-default`` — default serving settings (0.5.18 and later defer every photo to the
  gpu backend; 0.5.18 fails at TP ≥ 2);
* ``sweep-8-photos-epd-cpu`` — the EPD encoder's cpu backend (each rank replays its own batch, with
  its own images preprocessed on the encoder).

Kit: :func:`kimi_viz.sweep` — image headers read once, the items built once per release row,
each cell replayed without a fix search. Baseline: what a script calling the public API once per cell
does — for every cell decode every image (``load_image``) and run a full ``whatif(...)`` (header probe,
item build, replay on every rank, fix search). Both must give the same status and per-rank errors in
every cell. Median wall time of several runs after a warm-up; markdown to stdout, ``--json PATH``
writes the same figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install needed

from figures import write_figures

from kimi_viz import sweep, whatif
from kimi_viz._whatif.ask import SWEEP_TP_SIZES
from kimi_viz.data import SAMPLE_PHOTOS, sample_path
from kimi_viz.preprocess.images import load_image
from kimi_viz.releases import REQUEST_SIDES
from kimi_viz.request.settings import ServerSettings

TARGET_S = 2.0
WORKLOADS = {
    "sweep-8-photos-default": ServerSettings(),
    "sweep-8-photos-epd-cpu": ServerSettings(serving="epd-encoder"),
}


def timed(fn: Callable[[], Any], runs: int, warmup: int = 1) -> tuple[float, Any]:
    """Return (median seconds over ``runs``, last result) after ``warmup`` untimed runs."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def baseline(images: list[Path], settings: ServerSettings, decode: bool = True) -> list[tuple[str, int, str, list]]:
    """Return each cell's ``(release, tp, status, per-rank errors)`` from one independent what-if per cell."""
    cells = []
    for side in REQUEST_SIDES.values():
        for tp in SWEEP_TP_SIZES:
            for path in images if decode else ():  # a per-cell script reads each image's size by decoding it
                load_image(path)
            answer = whatif(images, sglang_version=side.releases[0], tp_size=tp, settings=settings, mode="shapes")
            errors = [(r.rank, str(r.error)) for r in answer.verdict.ranks if r.error] if answer.verdict else []
            cells.append((side.releases[0], tp, answer.status, errors))
    return cells


def kit(images: list[Path], settings: ServerSettings) -> list[tuple[str, int, str, list]]:
    """Return the same cells from one :func:`sweep`."""
    result = sweep(images, settings=settings)  # always shapes mode
    cells = []
    for cell in result.cells:
        verdict = cell.answer.verdict if cell.answer is not None else None
        errors = [(r.rank, str(r.error)) for r in verdict.ranks if r.error] if verdict else []
        cells.append((cell.releases[0].version, cell.tp_size, cell.status, errors))
    return cells


def bench(name: str, settings: ServerSettings, runs: int) -> dict[str, Any]:
    """Return one workload's row: the sweep against one what-if per cell."""
    images = [sample_path(n) for n in SAMPLE_PHOTOS]
    kit_s, ours = timed(lambda: kit(images, settings), runs)
    base_s, theirs = timed(lambda: baseline(images, settings), max(1, runs // 3))
    plain_s, plain = timed(lambda: baseline(images, settings, decode=False), max(1, runs // 3))
    assert ours == theirs == plain, f"{name}: the sweep and the per-cell what-ifs disagree"
    return {
        "name": name,
        "images": len(images),
        "cells": len(ours),
        "failing_cells": sum(1 for c in ours if c[3]),
        "settings": settings.sglang_flags(),
        "target_s": TARGET_S,
        "kit_s": kit_s,
        "baseline_s": base_s,
        "baseline_no_decode_s": plain_s,
        "baseline": "per cell: decode every image, then a full whatif() with the fix search",
    }


def markdown(results: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    """Return the results as a markdown table under a one-line machine summary."""
    lines = [
        f"what-if sweep on {machine['cpus']} CPU(s), {machine['python']}, torch {machine['torch']}",
        "",
        "| workload | images | cells | failing | kit (ms) | baseline (ms) | speed-up | baseline, no decode (ms) "
        "| speed-up | target (ms) | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['images']} | {r['cells']} | {r['failing_cells']} | {r['kit_s'] * 1e3:.1f} | "
            f"{r['baseline_s'] * 1e3:.1f} | {r['baseline_s'] / r['kit_s']:.2f}× | "
            f"{r['baseline_no_decode_s'] * 1e3:.1f} | "
            f"{r['baseline_no_decode_s'] / r['kit_s']:.2f}× | {r['target_s'] * 1e3:.0f} | "
            f"{'yes' if r['kit_s'] < r['target_s'] else 'NO'} |"
        )
    lines += ["", f"baseline: {results[0]['baseline']}; no decode: the same without decoding the images"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every workload; return 0 when every target is met, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--runs", type=int, default=9, help="timed runs of the sweep per workload (default 9)")
    args = parser.parse_args(argv)
    import torch

    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    results = [bench(name, settings, args.runs) for name, settings in WORKLOADS.items()]
    for r in results:
        r["speedup"] = r["baseline_s"] / r["kit_s"]
        r["met_target"] = r["kit_s"] < r["target_s"]
    print(markdown(results, machine))
    write_figures(args.json, {"machine": machine, "results": results})
    return 0 if all(r["met_target"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
