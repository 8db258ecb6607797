"""SGLang's torch pixel path on a GPU against the same path on the CPU, for every sample image.

    python benchmarks/gpu_pixels.py [--device cuda] [--json PATH]

The kit's torch backend is bit-identical to SGLang's torch path on the CPU (the goldens and the
parity lane check that). On CUDA, ``F.interpolate`` and the affine map run other kernels, so the
rows may differ by float32 rounding; this reports, per image and preset, whether the grids agree,
how many rows are bit-identical, the largest absolute difference and the time on each device.
Exit status 1 when a grid differs or a difference exceeds one 8-bit level after normalisation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kimi_viz.data import sample_images
from kimi_viz.preprocess.images import load_image
from kimi_viz.preprocess.processor import Processor

ONE_LEVEL = 2.0 / 255.0 + 1e-6  # one 8-bit level, normalised with std 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="the device to compare with the CPU (default cuda)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    import torch

    rows, bad = [], 0
    for preset in ("kimi-k3", "kimi-k25"):
        cpu = Processor(preset, "torch", device="cpu", keep_images=False)
        other = Processor(preset, "torch", device=args.device, keep_images=False)
        for path in sample_images():
            loaded = load_image(path)
            start = time.perf_counter()
            a = cpu.preprocess(loaded)
            cpu_ms = (time.perf_counter() - start) * 1e3
            other.preprocess(loaded)  # warm the device's kernels
            if other.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            b = other.preprocess(loaded)
            if other.device.type == "cuda":
                torch.cuda.synchronize()
            other_ms = (time.perf_counter() - start) * 1e3
            pa, pb = a.pixel_values, b.pixel_values.cpu()
            same_grid = a.grid_thws.tolist() == b.grid_thws.tolist()
            equal_rows = (
                int((pa.view(pa.shape[0], -1) == pb.view(pb.shape[0], -1)).all(dim=1).sum()) if same_grid else 0
            )
            diff = float((pa - pb).abs().max()) if same_grid and pa.numel() else 0.0
            ok = same_grid and diff <= ONE_LEVEL
            bad += not ok
            rows.append(
                {
                    "preset": preset,
                    "image": path.name,
                    "grid_equal": same_grid,
                    "rows": int(pa.shape[0]),
                    "rows_bit_identical": equal_rows,
                    "max_abs_diff": diff,
                    "cpu_ms": round(cpu_ms, 2),
                    f"{other.device.type}_ms": round(other_ms, 2),
                    "ok": ok,
                }
            )
    print(f"| preset | image | grid equal | rows bit-identical | max abs diff | cpu ms | {args.device} ms | ok |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        device_ms = r[f"{Processor('kimi-k3', 'torch', device=args.device).device.type}_ms"]
        print(
            f"| {r['preset']} | {r['image']} | {'yes' if r['grid_equal'] else 'NO'} | "
            f"{r['rows_bit_identical']}/{r['rows']} | {r['max_abs_diff']:.2e} | {r['cpu_ms']} | {device_ms} | "
            f"{'yes' if r['ok'] else 'NO'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
