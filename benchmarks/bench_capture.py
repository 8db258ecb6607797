"""Measure what capture costs a server when nothing fails: the wrapper per call, the import hook, start-up.

Cases, each against its baseline measured in the same run:

* ``get_image_feature`` wrapped by :func:`kimi_viz.capture.wrap_method` (record-on-failure, the
  default) against the same method unwrapped, on a passing call that does almost nothing (so the
  wrapper's own cost is what is measured). Target: under 1 µs per call.
* ``get_embedding_and_mask`` wrapped by :func:`kimi_viz.capture.wrap_forward_function` (it keeps the
  forward context while it runs) against the same function unwrapped, called with SGLang's eight
  keyword arguments. Target: under 5 µs per call (one call per prefill forward with images).
* the ``sys.meta_path`` hook's ``find_spec`` for an import that is not ``kimi_k3`` (every import in
  the process pays it once) against an empty finder.
* the start-up of ``python -c pass`` with the ``sitecustomize`` shim on ``PYTHONPATH`` and capture on,
  against plain start-up.

    python benchmarks/bench_capture.py [--calls 200000] [--starts 20] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kimi_viz import capture

TARGET_WRAPPER_NS = 1000.0
# One get_embedding_and_mask call per prefill forward with images (milliseconds of work); most of the
# wrapper's cost is passing SGLang's eight keyword arguments through a generic (*args, **kwargs) wrapper.
TARGET_FORWARD_NS = 5000.0


class Model:
    """A stand-in model: the method returns at once, so only the call overhead is timed."""

    def get_image_feature(self, items):
        return items


class EmptyFinder:
    def find_spec(self, fullname, path, target=None):
        return None


def per_call_ns(statement, number: int, repeat: int = 7) -> float:
    """Return the best time per call in ns over ``repeat`` runs of ``number`` calls."""
    return min(timeit.repeat(statement, number=number, repeat=repeat)) / number * 1e9


def bench_wrapper(calls: int, out_dir: Path) -> dict:
    plain = Model()
    items = [object()]
    baseline = per_call_ns(lambda: plain.get_image_feature(items), calls)

    class Wrapped(Model):
        get_image_feature = Model.get_image_feature

    capture.wrap_method(Wrapped, out_dir)
    wrapped = Wrapped()
    ours = per_call_ns(lambda: wrapped.get_image_feature(items), calls)
    assert not any(out_dir.iterdir()), "a passing call must not write anything"
    return {
        "case": "get_image_feature wrapper (passing call)",
        "unit": "ns/call",
        "ours": ours,
        "baseline": baseline,
        "overhead": ours - baseline,
        "target": f"< {TARGET_WRAPPER_NS:.0f} ns overhead",
        "ok": ours - baseline < TARGET_WRAPPER_NS,
    }


def bench_forward(calls: int) -> dict:
    """The forward path's ``get_embedding_and_mask`` wrapper (one call per prefill forward with images)."""
    from types import ModuleType

    def get_embedding_and_mask(**kwargs):
        return kwargs

    plain, wrapped = ModuleType("plain"), ModuleType("wrapped")
    plain.get_embedding_and_mask = wrapped.get_embedding_and_mask = get_embedding_and_mask  # type: ignore[attr-defined]
    capture.wrap_forward_function(wrapped)
    args = dict.fromkeys(capture.hook.FORWARD_PARAMETERS)
    baseline = per_call_ns(lambda: plain.get_embedding_and_mask(**args), calls)
    ours = per_call_ns(lambda: wrapped.get_embedding_and_mask(**args), calls)
    assert capture.running_forward() is None, "the wrapper leaves nothing behind"
    return {
        "case": "get_embedding_and_mask wrapper (per prefill forward)",
        "unit": "ns/call",
        "ours": ours,
        "baseline": baseline,
        "overhead": ours - baseline,
        "target": f"< {TARGET_FORWARD_NS:.0f} ns overhead",
        "ok": ours - baseline < TARGET_FORWARD_NS,
    }


def bench_hook(calls: int) -> dict:
    hook = capture.KimiK3ImportHook(lambda module: None)
    empty = EmptyFinder()
    baseline = per_call_ns(lambda: empty.find_spec("json.decoder", None), calls)
    ours = per_call_ns(lambda: hook.find_spec("json.decoder", None), calls)
    return {
        "case": "import hook find_spec (other module)",
        "unit": "ns/import",
        "ours": ours,
        "baseline": baseline,
        "overhead": ours - baseline,
        "target": "-",
        "ok": True,
    }


def bench_startup(starts: int, out_dir: Path) -> dict:
    def start_ms(env: dict) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        return (time.perf_counter() - t0) * 1e3

    plain = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_VIZ_CAPTURE")}
    shimmed = capture.capture_environment(out_dir, base=plain)
    start_ms(plain), start_ms(shimmed)  # warm the file and bytecode caches
    baseline, ours = [], []
    for _ in range(starts):  # interleaved, so load changes hit both alike
        baseline.append(start_ms(plain))
        ours.append(start_ms(shimmed))
    b, o = statistics.median(baseline), statistics.median(ours)
    return {
        "case": "python -c pass start-up with the shim",
        "unit": "ms/start",
        "ours": o,
        "baseline": b,
        "overhead": o - b,
        "target": "-",
        "ok": True,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200_000, help="calls per timing run")
    parser.add_argument("--starts", type=int, default=20, help="interpreter starts per start-up measurement")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            bench_wrapper(args.calls, Path(tmp)),
            bench_forward(args.calls),
            bench_hook(args.calls),
            bench_startup(args.starts, Path(tmp)),
        ]
    print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs\n")
    print("| case | unit | ours | baseline | overhead | ratio | target |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        r["ratio"] = r["ours"] / r["baseline"] if r["baseline"] else float("nan")
        print(
            f"| {r['case']} | {r['unit']} | {r['ours']:.1f} | {r['baseline']:.1f} | {r['overhead']:+.1f} | "
            f"{r['ratio']:.2f}x | {r['target']}{'' if r['ok'] else ' MISSED'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"python": platform.python_version(), "results": rows}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
