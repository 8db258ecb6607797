"""Benchmark the deferred-split replay against naive replays measured in the same run.

    python benchmarks/bench_deferred.py
    python benchmarks/bench_deferred.py --json build/bench_deferred.json

Workloads:

* ``shapes-256-tp8`` — shape-only replay (a redacted capture) of 256 deferred images of random
  sizes, half gpu and half cpu backend, at attention-TP size 8 (target: under 50 ms).
  Baseline: one ``replay(..., rank=r)`` call per rank — each rank replayed on its own, so the grid
  collection, the assignment and the divergence analysis are redone eight times.
* ``pixels-8-photos-tp2`` — pixel replay of the eight sample photos (``SAMPLE_PHOTOS``, gpu and
  cpu backends alternating) at attention-TP size 2 (target: under 2 s). Baseline: the naive
  approach without the deferred split, every rank materializing every image (one full
  attention-TP-1 replay per rank).

Each row gives the median wall time of several runs after a warm-up, the baseline's, their ratio
(baseline / kit) and whether the kit met its target. Markdown goes to stdout; ``--json PATH``
writes the same figures as JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install needed

from figures import write_figures

from kimi_viz.data import SAMPLE_PHOTOS
from kimi_viz.preprocess.config import get_config
from kimi_viz.preprocess.resize import resize_config
from kimi_viz.request import deferred_config, deferred_item
from kimi_viz.split._replay import replay
from kimi_viz.split.batch import Batch, Feature, Item

K3 = "kimi-k3"


def shape_only_batch(n: int = 256, tp: int = 8, seed: int = 0) -> Batch:
    """Return ``n`` redacted deferred items of random sizes (half gpu, half cpu) at attention-TP ``tp``."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        width, height = rng.randint(64, 4000), rng.randint(64, 3000)
        resize = resize_config(width, height, K3)
        backend = "gpu" if i % 2 else "cpu"
        feature = (
            Feature.shape_only("chw", (3, height, width), "uint8")
            if backend == "gpu"
            else Feature.shape_only("image", (height, width, 3), "uint8")
        )
        items.append(
            Item(
                grids={"grid_thws": [list(resize.grid)]},
                feature=feature,
                deferred=deferred_config(backend, resize, K3),
                original_size=(width, height),
                label=f"image {i}",
            )
        )
    return Batch(items=items, processor=get_config(K3).to_media_proc_cfg(), attn_tp_size=tp)


def photos_batch(tp: int = 2) -> Batch:
    """Return the eight sample photos as deferred items (gpu and cpu backends alternating)."""
    items = [deferred_item(name, "gpu" if i % 2 else "cpu") for i, name in enumerate(SAMPLE_PHOTOS)]
    return Batch(items=items, processor=get_config(K3).to_media_proc_cfg(), attn_tp_size=tp)


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


def bench_shapes(runs: int) -> dict[str, Any]:
    """Return the ``shapes-256-tp8`` row: the full shape replay against one ``replay(rank=r)`` per rank."""
    batch = shape_only_batch()
    tp = batch.attn_tp_size
    kit, trace = timed(lambda: replay(batch, mode="shapes"), runs)
    base, per_rank = timed(lambda: [replay(batch, rank=r, mode="shapes") for r in range(tp)], runs)
    assert trace.outcome == "ok" and all(t.outcome == "ok" for t in per_rank)
    assert [r.image_indices for r in trace.ranks] == [t.ranks[0].image_indices for t in per_rank]
    return {
        "name": "shapes-256-tp8",
        "images": len(batch),
        "tp_size": tp,
        "target_s": 0.050,
        "kit_s": kit,
        "baseline_s": base,
        "baseline": "one replay(rank=r) per rank",
        "rows": sum(sum(row.produced_rows or 0 for row in r.images) for r in trace.ranks),
    }


def bench_pixels(runs: int) -> dict[str, Any]:
    """Return the ``pixels-8-photos-tp2`` row: the split pixel replay against every rank doing every image."""
    batch = photos_batch()
    tp = batch.attn_tp_size
    kit, trace = timed(lambda: replay(batch, mode="pixels"), runs)
    base, naive = timed(lambda: [replay(batch, tp_size=1, mode="pixels") for _ in range(tp)], runs)
    assert trace.outcome == "ok" and all(t.outcome == "ok" for t in naive)
    rows = sum(r.pixel_values.shape[0] for r in trace.ranks)
    assert rows == naive[0].ranks[0].pixel_values.shape[0] == sum(t * h * w for t, h, w in trace.grid_thws_host)
    return {
        "name": "pixels-8-photos-tp2",
        "images": len(batch),
        "tp_size": tp,
        "target_s": 2.0,
        "kit_s": kit,
        "baseline_s": base,
        "baseline": "every rank materializes every image",
        "rows": rows,
    }


def markdown(results: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    """Return the results as a markdown table under a one-line machine summary."""
    lines = [
        f"deferred-split replay on {machine['cpus']} CPU(s), {machine['python']}, torch {machine['torch']}",
        "",
        "| workload | images | TP | rows | kit (ms) | baseline (ms) | baseline | speed-up | target (ms) | met |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|:---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['images']} | {r['tp_size']} | {r['rows']} | {r['kit_s'] * 1e3:.1f} | "
            f"{r['baseline_s'] * 1e3:.1f} | {r['baseline']} | {r['baseline_s'] / r['kit_s']:.2f}× | "
            f"{r['target_s'] * 1e3:.0f} | {'yes' if r['kit_s'] < r['target_s'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both workloads; return 0 when every target is met, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--runs", type=int, default=0, help="timed runs per workload (default: 20 shapes, 3 pixels)")
    args = parser.parse_args(argv)
    import torch

    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    results = [bench_shapes(args.runs or 20), bench_pixels(args.runs or 3)]
    for r in results:
        r["speedup"] = r["baseline_s"] / r["kit_s"]
        r["met_target"] = r["kit_s"] < r["target_s"]
    print(markdown(results, machine))
    write_figures(args.json, {"machine": machine, "results": results})
    return 0 if all(r["met_target"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
