"""Benchmark the Kimi-K3 vision encoder against a plain one-SDPA-call-per-image baseline.

    python benchmarks/bench_encoder.py                       # CUDA, kimi-k3, bf16, random weights
    python benchmarks/bench_encoder.py --checks --json out.json
    python benchmarks/bench_encoder.py --device cpu --preset tiny --quick      # smoke test, seconds

Workloads (kimi-k3 grids): one 640×480 image (36×46 = 1656 patches), one 1920×1080 image
(78×138 = 10764), eight sample photos (32416 patches in all) and one 256×256 grid (65536).
Variants, all with the same weights in the same run:

* ``baseline``  — one plain ``scaled_dot_product_attention`` call per image per layer, eager (how
  SGLang runs this tower on H100/H200);
* ``packed``    — one variable-length FlashAttention call over all images per layer (CUDA);
* ``cudnn``     — per-image attention with cuDNN attention preferred by SDPA (Hopper and newer);
* ``kimi-viz``  — the encoder's defaults: per-image SDPA, replayed from a CUDA graph for batches
  of up to 16384 patches (``attn_impl="auto"``, ``cuda_graphs="auto"``).

Reported per row: median ms (CUDA events, after warm-up), model TFLOP/s (matmul FLOPs: patch
embed, qkv, attention QKᵀ and PV per image, wo, MLP, projector), the fraction of a bf16 matmul
ceiling measured in the same run (8192³), the speed ratio against the baseline, and peak GPU memory.
``--checks`` first runs correctness checks (RMSNorm eps, bf16 vs fp32, CUDA vs CPU in fp32, packed
vs per-image, graph replay vs eager, independence of images). Everything goes to stdout as markdown;
``--json PATH`` writes it all as JSON too.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install needed

import torch

from kimi_viz.devices import resolve_device
from kimi_viz.encoder import ENCODER_PRESETS, VisionEncoder, matmul_flops, resolve_dtype
from kimi_viz.encoder.model import RMSNorm

# Grids of the sample photos under the kimi-k3 processor (tests compare them with the pixel goldens).
PHOTO_GRIDS = {
    "astronaut.png": (1, 38, 38),
    "camera.png": (1, 38, 38),
    "coffee.png": (1, 30, 44),
    "coffee_cmyk.jpg": (1, 30, 44),
    "hubble_deep_field.jpg": (1, 64, 72),
    "retina.jpg": (1, 102, 102),
    "rocket.jpg": (1, 32, 46),
}
MIXED_PHOTOS = (
    "astronaut.png",
    "camera.png",
    "coffee.png",
    "coffee_cmyk.jpg",
    "hubble_deep_field.jpg",
    "retina.jpg",
    "retina.jpg",
    "rocket.jpg",
)

WORKLOADS: dict[str, list[tuple[int, int, int]]] = {
    "640×480": [(1, 36, 46)],
    "1920×1080": [(1, 78, 138)],
    "8 photos": [PHOTO_GRIDS[name] for name in MIXED_PHOTOS],
    "65536 patches": [(1, 256, 256)],
}
QUICK_WORKLOADS: dict[str, list[tuple[int, int, int]]] = {
    "small": [(1, 4, 6)],
    "3 images": [(1, 4, 6), (1, 8, 8), (1, 2, 2)],
    "large": [(1, 16, 16)],
}
LARGEST = "65536 patches"
SMALLEST = "640×480"
GIB = 1024**3

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {"attn_impl": "per_image", "cuda_graphs": False},
    "packed": {"attn_impl": "packed", "cuda_graphs": False},
    "graphs": {"attn_impl": "per_image", "cuda_graphs": "auto"},
    "cudnn": {"attn_impl": "per_image", "cuda_graphs": False, "cudnn": True},
    "kimi-viz": {"attn_impl": "auto", "cuda_graphs": "auto"},
}


# --- timing ---------------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], Any], device: torch.device, *, warmup: int, repeats: int) -> list[float]:
    """Return the wall time (ms) of each of ``repeats`` calls after ``warmup`` calls (CUDA events on GPU)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn()
            times.append((time.perf_counter() - begin) * 1e3)
    return times


def matmul_ceiling(device: torch.device, dtype: torch.dtype, quick: bool) -> dict[str, Any]:
    """Return the measured TFLOP/s of a square matmul (8192³ on CUDA, smaller on CPU)."""
    n = 8192 if device.type == "cuda" else (512 if quick else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = time_ms(lambda: torch.mm(a, b), device, warmup=3, repeats=5 if quick else 20)
    median = statistics.median(times)
    return {
        "n": n,
        "dtype": str(dtype).replace("torch.", ""),
        "median_ms": median,
        "tflops": 2 * n**3 / (median * 1e-3) / 1e12,
    }


def sdpa_preference(enabled: bool):
    """Return a context preferring cuDNN attention for SDPA (a no-op context when not asked or not available)."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    try:
        return sdpa_kernel(order, set_priority=True)
    except TypeError:  # older torch: no priority order, just the allowed set
        return sdpa_kernel(order)


# --- benchmark ------------------------------------------------------------------------------------
def bench(
    model: VisionEncoder, workloads: dict[str, list], variants: list[str], *, quick: bool, ceiling_tflops: float
) -> list[dict[str, Any]]:
    """Return one timing row per workload and variant (a row with ``error`` when a variant fails)."""
    device = model.device
    rows = []
    for name, grids in workloads.items():
        patches = sum(t * h * w for t, h, w in grids)
        flops = matmul_flops(grids, model.config)
        generator = torch.Generator().manual_seed(0)
        pixels = torch.randn(patches, 3, 14, 14, generator=generator).to(device=device, dtype=model.dtype)
        baseline_ms = None
        for variant in variants:
            settings = VARIANTS[variant]
            model.attn_impl = settings["attn_impl"]
            model.cuda_graphs = settings["cuda_graphs"]
            model.clear_cache()
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)

            def run(settings=settings, pixels=pixels, grids=grids) -> torch.Tensor:
                with sdpa_preference(settings.get("cudnn", False) and device.type == "cuda"):
                    return model.encode(pixels, grids).features

            try:
                first = time.perf_counter()
                run()
                synchronize(device)
                estimate = time.perf_counter() - first
                repeats = 3 if quick else max(3, min(30, int(2.0 / max(estimate, 1e-4))))
                warmup = 1 if quick or estimate > 0.25 else 3  # graphs are captured on the 2nd call
                times = time_ms(run, device, warmup=warmup, repeats=repeats)
            except Exception as exc:  # noqa: BLE001 - keep measuring the other variants; the row says what broke
                rows.append(
                    {
                        "workload": name,
                        "images": len(grids),
                        "patches": patches,
                        "variant": variant,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                )
                print(f"  {name:>14} {variant:>9}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            median = statistics.median(times)
            if variant == "baseline":
                baseline_ms = median
            tflops = flops / (median * 1e-3) / 1e12
            layout = model.layout(grids)
            rows.append(
                {
                    "workload": name,
                    "images": len(grids),
                    "patches": patches,
                    "variant": variant,
                    "attention": layout.attn_impl,
                    "cuda_graph": any(bool(entry) for entry in model._graphs.values()),
                    "median_ms": median,
                    "min_ms": min(times),
                    "repeats": repeats,
                    "tflops": tflops,
                    "ceiling_fraction": tflops / ceiling_tflops,
                    "speedup_vs_baseline": (baseline_ms / median) if baseline_ms else None,
                    "peak_gib": torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None,
                    "gflop": flops / 1e9,
                }
            )
            print(f"  {name:>14} {variant:>9}: {median:9.2f} ms", file=sys.stderr, flush=True)
        model.clear_cache()
    return rows


def evaluate_targets(rows: list[dict[str, Any]], device: torch.device, preset: str) -> list[dict[str, Any]]:
    """Return the performance targets, each with its measured value and pass/fail (kimi-k3 on CUDA only)."""
    if device.type != "cuda" or preset != "kimi-k3":
        return []
    by = {(r["workload"], r["variant"]): r for r in rows if "error" not in r}
    targets = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        ours, base = by.get((workload, "kimi-viz")), by.get((workload, "baseline"))
        if ours and base:
            ratio = ours["median_ms"] / base["median_ms"]
            targets.append(
                {
                    "target": f"{workload}: kimi-viz not slower than baseline (±2% noise)",
                    "value": f"{ratio:.3f}× baseline time",
                    "pass": ratio <= 1.02,
                }
            )
    if (LARGEST, "kimi-viz") in by:
        r = by[(LARGEST, "kimi-viz")]
        targets.append(
            {
                "target": f"{LARGEST}: ≥ 70% of the bf16 matmul ceiling",
                "value": f"{r['ceiling_fraction']:.1%}",
                "pass": r["ceiling_fraction"] >= 0.70,
            }
        )
        targets.append(
            {
                "target": f"{LARGEST}: peak GPU memory ≤ 6 GiB",
                "value": f"{r['peak_gib']:.2f} GiB",
                "pass": r["peak_gib"] <= 6.0,
            }
        )
    if (SMALLEST, "kimi-viz") in by:
        r = by[(SMALLEST, "kimi-viz")]
        targets.append(
            {"target": f"{SMALLEST}: ≤ 6 ms", "value": f"{r['median_ms']:.2f} ms", "pass": r["median_ms"] <= 6.0}
        )
    return targets


# --- correctness checks ---------------------------------------------------------------------------
def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """Return ‖a − b‖ / ‖b‖ in float64."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


def run_checks(preset: str, device: torch.device) -> list[dict[str, Any]]:
    """Return correctness checks on ``device`` (and against the CPU when the device is CUDA); an
    exception becomes a failed check instead of ending the run."""
    checks: list[dict[str, Any]] = []
    try:
        _checks(preset, device, checks)
    except Exception as exc:  # noqa: BLE001 - a check that crashes is reported as failed, the run goes on
        checks.append(
            {
                "check": "checks stopped by an exception",
                "value": float("nan"),
                "limit": "",
                "pass": False,
                "note": f"{type(exc).__name__}: {exc}",
            }
        )
        print(f"  checks stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    return checks


def _checks(preset: str, device: torch.device, checks: list[dict[str, Any]]) -> None:
    """Append each check to ``checks`` as it completes (so an exception keeps the earlier ones)."""

    def record(name: str, value: float, limit: float, note: str = "", *, above: bool = False) -> None:
        ok = value > limit if above else value <= limit
        checks.append(
            {
                "check": name,
                "value": value,
                "limit": (">" if above else "≤") + f" {limit:g}",
                "pass": bool(ok),
                "note": note,
            }
        )
        print(f"  check {name}: {value:.3g} ({'pass' if ok else 'FAIL'})", file=sys.stderr, flush=True)

    small = [(1, 8, 12), (1, 6, 4)]
    pixels = torch.randn(sum(t * h * w for t, h, w in small), 3, 14, 14, generator=torch.Generator().manual_seed(1))

    # nn.RMSNorm(dim) with eps=None, as SGLang builds the tower's norms, against the eps the encoder uses.
    x = (torch.randn(256, 1024, generator=torch.Generator().manual_seed(2)) * 3e-3).to(device)
    for dtype in (torch.bfloat16, torch.float32):
        with torch.no_grad():
            reference = torch.nn.RMSNorm(1024, device=device, dtype=dtype)(x.to(dtype))
            ours = RMSNorm(1024, ENCODER_PRESETS["kimi-k3"].norm_eps).to(device=device, dtype=dtype)(x.to(dtype))
            bf16_eps = RMSNorm(1024, 2.0**-7).to(device=device, dtype=dtype)(x.to(dtype))
        record(
            f"RMSNorm eps=2^-23 vs nn.RMSNorm default ({str(dtype)[6:]}, {device.type}), max abs diff",
            float((ours.float() - reference.float()).abs().max()),
            0.0,
            "0 means the same eps",
        )
        record(
            f"RMSNorm eps=2^-7 vs nn.RMSNorm default ({str(dtype)[6:]}, {device.type}), rel L2",
            rel_l2(bf16_eps, reference),
            0.01,
            "bf16's own eps is visibly different",
            above=True,
        )

    full = VisionEncoder.random(preset, seed=0, device=device, dtype=torch.float32)
    full.attn_impl = "per_image"
    reference = full.encode(pixels, small).features
    if device.type == "cuda":
        cpu = VisionEncoder._empty(full.config, torch.device("cpu"), torch.float32)
        cpu.load_state_dict({k: v.cpu() for k, v in full.state_dict().items()})
        record("CUDA fp32 vs CPU fp32 features, rel L2", rel_l2(reference, cpu.encode(pixels, small).features), 1e-4)
        del cpu
    half = copy.deepcopy(full).to(torch.bfloat16)
    half.clear_cache()
    record(
        f"bf16 vs fp32 features ({device.type}), rel L2",
        rel_l2(half.encode(pixels, small).features, reference),
        5e-2,
        f"{full.config.num_layers} layers of random weights",
    )
    del full
    for impl in ("per_image", "packed"):
        half.attn_impl = impl
        half.cuda_graphs = False
        together = half.encode(pixels, small).features
        first_rows = small[0][0] * small[0][1] * small[0][2]
        alone = torch.cat(
            [half.encode(pixels[:first_rows], small[:1]).features, half.encode(pixels[first_rows:], small[1:]).features]
        )
        record(
            f"two images together vs alone ({impl}, {half.layout(small).attn_impl}), rel L2",
            rel_l2(together, alone),
            1e-2,
        )
    half.attn_impl = "per_image"
    per_image = half.encode(pixels, small).features
    half.attn_impl = "packed"
    record(
        f"packed ({half.layout(small).attn_impl}) vs per-image attention, rel L2",
        rel_l2(half.encode(pixels, small).features, per_image),
        1e-2,
    )
    if device.type == "cuda":
        half.attn_impl, half.cuda_graphs = "auto", True
        half.clear_cache()
        graphed = half.encode(pixels.to(device), small).features
        graphed_again = half.encode(pixels.to(device), small).features
        half.cuda_graphs = False
        eager = half.encode(pixels.to(device), small).features
        record(
            "CUDA graph replay vs eager, max abs diff",
            float((graphed_again.float() - eager.float()).abs().max()),
            1e-2,
            f"first call exact: {bool(torch.equal(graphed, eager))}",
        )


# --- output ---------------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    """Return the results as markdown: a header line, the checks, the timings and the targets."""
    env = result["environment"]
    lines = [
        f"Vision encoder `{result['preset']}` in {result['dtype']} on {env['device_name']} "
        f"(torch {env['torch']}, CUDA {env['cuda']}); random weights, seed 0.",
        f"{result['ceiling']['dtype']} matmul ceiling ({result['ceiling']['n']}³, measured in this run): "
        f"{result['ceiling']['tflops']:.3g} TFLOP/s.",
        "",
    ]
    if result["checks"]:
        lines += ["| check | value | limit | pass |", "|---|---:|---|---|"]
        for c in result["checks"]:
            note = f" ({c['note']})" if c.get("note") else ""
            lines.append(
                f"| {c['check']}{note} | {c['value']:.3g} | {c['limit']} | {'yes' if c['pass'] else '**no**'} |"
            )
        lines.append("")
    lines += [
        "| workload | images | patches | variant | attention | ms (median) | TFLOP/s | % of ceiling | "
        "speed vs baseline | peak GiB |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        if "error" in r:
            lines.append(
                f"| {r['workload']} | {r['images']} | {r['patches']} | {r['variant']} | failed: "
                f"{r['error'][:80]} | — | — | — | — | — |"
            )
            continue
        speed = f"{r['speedup_vs_baseline']:.2f}×" if r["speedup_vs_baseline"] else "—"
        peak = f"{r['peak_gib']:.2f}" if r["peak_gib"] is not None else "—"
        attention = r["attention"] + (" + graph" if r["cuda_graph"] else "")
        lines.append(
            f"| {r['workload']} | {r['images']} | {r['patches']} | {r['variant']} | {attention} | "
            f"{r['median_ms']:.2f} | {r['tflops']:.3g} | {r['ceiling_fraction']:.1%} | {speed} | {peak} |"
        )
    if result["targets"]:
        lines += ["", "| target | measured | pass |", "|---|---|---|"]
        for t in result["targets"]:
            lines.append(f"| {t['target']} | {t['value']} | {'yes' if t['pass'] else '**no**'} |")
    return "\n".join(lines)


def environment(device: torch.device) -> dict[str, Any]:
    """Return torch, CUDA, Python and device facts for the report."""
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": platform.processor() or "CPU",
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["capability"] = list(torch.cuda.get_device_capability(device))
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401

        info["varlen_attn"] = True
    except ImportError:
        info["varlen_attn"] = False
    return info


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0, 1 when a check or a variant failed, 2 when no GPU is there for a full run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto, cuda or cpu (default auto)")
    parser.add_argument("--preset", default="kimi-k3", choices=sorted(ENCODER_PRESETS))
    parser.add_argument("--dtype", choices=("bf16", "fp32"), help="default bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--quick", action="store_true", help="small grids and few repeats (a smoke test)")
    parser.add_argument("--checks", action="store_true", help="run the correctness checks first")
    parser.add_argument("--variants", default=None, help="comma-separated subset of: " + ", ".join(VARIANTS))
    parser.add_argument("--workloads", default=None, help="comma-separated subset of the workload names")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    if device.type == "cpu" and args.preset != "tiny" and not args.quick:
        print(
            f"bench_encoder: the {args.preset} workloads (up to 65536 patches) need a GPU and CUDA is not "
            "available here; for a CPU smoke run use --device cpu --preset tiny --quick",
            file=sys.stderr,
        )
        return 2
    workloads = QUICK_WORKLOADS if args.quick else WORKLOADS
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",")]
        workloads = {k: v for k, v in workloads.items() if k in wanted}
    default_variants = (
        ["baseline", "packed", "cudnn", "kimi-viz"] if device.type == "cuda" else ["baseline", "packed", "kimi-viz"]
    )
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else default_variants
    if variants[0] != "baseline":
        variants = ["baseline"] + [v for v in variants if v != "baseline"]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; expected some of {list(VARIANTS)}")

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    result: dict[str, Any] = {
        "preset": args.preset,
        "dtype": str(dtype).replace("torch.", ""),
        "environment": environment(device),
        "checks": [],
        "targets": [],
    }
    if args.checks:
        print("correctness checks", file=sys.stderr, flush=True)
        result["checks"] = run_checks(args.preset if args.quick else "kimi-k3", device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result["ceiling"] = matmul_ceiling(device, dtype, args.quick)
    print(f"matmul ceiling: {result['ceiling']['tflops']:.1f} TFLOP/s", file=sys.stderr, flush=True)
    started = time.perf_counter()
    model = VisionEncoder.random(args.preset, seed=0, device=device, dtype=dtype)
    synchronize(device)
    result["init_s"] = time.perf_counter() - started
    result["parameters"] = model.num_parameters()
    if device.type == "cuda":
        result["weights_gib"] = torch.cuda.memory_allocated(device) / GIB
    result["rows"] = bench(model, workloads, variants, quick=args.quick, ceiling_tflops=result["ceiling"]["tflops"])
    result["targets"] = evaluate_targets(result["rows"], device, args.preset)
    text = markdown(result)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
        Path(args.json).with_suffix(".md").write_text(text + "\n")
    failed = [c for c in result["checks"] if not c["pass"]] + [r for r in result["rows"] if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
