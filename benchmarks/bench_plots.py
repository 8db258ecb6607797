"""Time draw_patch_grid + PNG save on the largest Kimi-K3 grids against a one-Rectangle-per-patch baseline.

Cases (one run measures both, ours and the baseline):

* ``rocket_4200x3150.jpg`` through the checkpoint processor: grid 1×222×296 (65,712 patches);
* a synthetic 3584×3570 picture padded to 3584×3584: grid 1×256×256 (65,536 patches, last patch row
  fully padding).

"Ours" is ``draw_patch_grid(record)`` followed by ``savefig`` to PNG in memory. The baseline draws
the same picture (at full resolution, as a naive implementation would), one ``Rectangle`` per patch
for the lattice, one filled ``Rectangle`` per padding patch and the same row-number labels, into a
figure of the same size, saved at the same dpi. Targets: ours under 1.5 s and at least 20× faster.

    python benchmarks/bench_plots.py [--repeat 3] [--dpi 100] [--json results.json]
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kimi_viz.plots.axes import PATCH
from kimi_viz.plots.patches import (
    ROW_FONT_MIN,
    draw_patch_grid,
    row_label_positions,
)
from kimi_viz.preprocess.records import PATCH_CONTENT, PATCH_FULLY_PADDING, ImageRecord, image_span
from kimi_viz.preprocess.resize import ResizeConfig

TARGET_MS = 1500.0
TARGET_SPEEDUP = 20.0


def rocket_record() -> ImageRecord:
    """Return the checkpoint processor's record of the 4200×3150 sample (grid 1×222×296)."""
    from kimi_viz.data import sample_path
    from kimi_viz.preprocess.processor import Processor

    return Processor("kimi-k3").preprocess([sample_path("rocket_4200x3150.jpg")]).records[0]


def synthetic_record(side: int = 256) -> ImageRecord:
    """Return a record of a 3584×3570 gradient picture padded to a ``side``×``side`` grid."""
    height_px = side * PATCH - PATCH  # last patch row is padding
    width_px = side * PATCH
    yy, xx = np.mgrid[0 : side * PATCH, 0:width_px]
    picture = np.stack(
        [(xx * 255 // width_px), (yy * 255 // height_px).clip(0, 255), ((xx + yy) % 256)], axis=2
    ).astype(np.uint8)
    picture[height_px:] = 0
    mask = np.full((side, side), PATCH_CONTENT, dtype=np.int8)
    mask[-1] = PATCH_FULLY_PADDING
    resize = {
        "new_width": width_px,
        "new_height": height_px,
        "pad_width": 0,
        "pad_height": PATCH,
        "num_tokens": side * side // 4,
        "grid_thw": (1, side, side),
    }
    return ImageRecord(
        0,
        f"<synthetic {width_px}x{height_px}>",
        (width_px, height_px),
        "RGB",
        {},
        ResizeConfig.from_sglang(resize),
        image_span(0, "<synthetic>", (1, side, side), (0, side * side), (0, side * side // 4), mask),
        picture,
    )


def ours(record: ImageRecord, dpi: int) -> tuple[float, tuple[float, float]]:
    """Return (seconds, figure size) for draw_patch_grid + a PNG save."""
    start = time.perf_counter()
    ax = draw_patch_grid(record)
    buffer = io.BytesIO()
    ax.figure.savefig(buffer, format="png", dpi=dpi)
    return time.perf_counter() - start, tuple(ax.figure.get_size_inches())


def baseline(record: ImageRecord, dpi: int, figsize: tuple[float, float]) -> float:
    """Return seconds for the naive figure: one Rectangle per patch (lattice and padding), same labels."""
    start = time.perf_counter()
    fig = Figure(figsize=figsize)
    ax = fig.add_subplot()
    t, h, w = record.grid_thw
    ax.imshow(record.resized, extent=(0, w * PATCH, h * PATCH, 0))
    for y in range(h):
        for x in range(w):
            ax.add_patch(Rectangle((x * PATCH, y * PATCH), PATCH, PATCH, fill=False, edgecolor="white", linewidth=0.1))
            if record.pad_mask[y, x]:
                ax.add_patch(
                    Rectangle((x * PATCH, y * PATCH), PATCH, PATCH, facecolor="black", alpha=0.5, edgecolor="none")
                )
    ys, xs = row_label_positions(h, w, 48)
    for y in ys:
        for x in xs:
            ax.text(
                (x + 0.5) * PATCH,
                (y + 0.5) * PATCH,
                str(record.rows[0] + y * w + x),
                fontsize=ROW_FONT_MIN,
                ha="center",
                va="center",
            )
    ax.set_xlim(0, w * PATCH)
    ax.set_ylim(h * PATCH, 0)
    fig.savefig(io.BytesIO(), format="png", dpi=dpi)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Run both cases; return 0 when every case meets its targets, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of ours per case (best is reported)")
    parser.add_argument("--dpi", type=int, default=100)
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)

    cases = [("rocket_4200x3150.jpg", rocket_record()), ("synthetic 3584×3584", synthetic_record())]
    results = []
    for name, record in cases:
        ours(record, args.dpi)  # warm-up: font cache, first-use imports
        runs = [ours(record, args.dpi) for _ in range(args.repeat)]
        times = [r[0] for r in runs]
        base = baseline(record, args.dpi, runs[0][1])
        best = min(times)
        results.append(
            {
                "case": name,
                "grid_thw": list(record.grid_thw),
                "patches": record.patches,
                "ours_ms_best": round(best * 1000, 1),
                "ours_ms_median": round(statistics.median(times) * 1000, 1),
                "baseline_ms": round(base * 1000, 1),
                "speedup": round(base / best, 1),
                "meets_target": best * 1000 < TARGET_MS and base / best >= TARGET_SPEEDUP,
            }
        )

    print(f"draw_patch_grid + PNG save at {args.dpi} dpi (best of {args.repeat}); baseline: one Rectangle per patch\n")
    print("| case | grid | patches | ours (ms) | baseline (ms) | speedup | target met |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        grid = "×".join(map(str, r["grid_thw"]))
        print(
            f"| {r['case']} | {grid} | {r['patches']} | {r['ours_ms_best']:.0f} | {r['baseline_ms']:.0f} | "
            f"{r['speedup']:.1f}× | {'yes' if r['meets_target'] else 'no'} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "bench_plots",
                    "dpi": args.dpi,
                    "repeat": args.repeat,
                    "targets": {"ours_ms_below": TARGET_MS, "speedup_at_least": TARGET_SPEEDUP},
                    "machine": {
                        "python": platform.python_version(),
                        "matplotlib": matplotlib.__version__,
                        "processor": platform.processor() or platform.machine(),
                    },
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if all(r["meets_target"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
