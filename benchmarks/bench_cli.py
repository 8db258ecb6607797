"""Measure the on-call commands' wall time as a ratio to a bare interpreter started in the same run.

    python benchmarks/bench_cli.py
    python benchmarks/bench_cli.py --runs 9 --markdown --strict
    python benchmarks/bench_cli.py --old-path --json build/bench_cli.json

Each command runs as a fresh process, ``python -c "from kimi_viz.cli import main; ..."``. The on-call
commands have a target, within 6x a bare interpreter (``python -c pass``):

* ``kimi-viz whatif IMAGE`` in shapes mode: the transparent palette sample on SGLang 0.5.18 at
  attention-TP 2; clean alone, so its under-load pair hint replays pairs too;
* ``kimi-viz whatif A B --together``: chelsea and the 20x5 sample prefilled together on the same
  deployment (the hint's own check: SGLang raises);
* ``kimi-viz explain LINE``;
* ``kimi-viz triage --json`` of a shapes (redacted) capture: 16 sample photos (``SAMPLE_PHOTOS`` twice,
  gpu and cpu backends alternating) at attention-TP 8, every rank replayed, SGLang 0.5.23.

Measured with no target: ``kimi-viz --help``; ``triage --json --out DIR`` of the shapes capture (the
report, summary, trace and issue); ``triage --json`` of the pixel capture the shapes one is redacted
from, which needs torch either way. ``--old-path`` adds, for the triage cases, the code path the lazy
imports replaced: the same command after the imports the CLI used to make before it ran anything
(torch and Pillow, jsonschema and its validator), and the speed-up ``old / new``.

Runs are interleaved: every round starts the bare interpreter and then each command once, the order
rotating from round to round; the first round warms the file and bytecode caches and is not timed.
For each command the table gives the min and the median over ``--runs`` rounds, each also as a ratio
to the bare interpreter's min and median; a command passes when its median ratio is within its
target. The table goes to stdout (``--markdown`` prints it as markdown too), ``--json PATH`` writes
the figures; the exit status is 0 unless ``--strict`` is given and a command fails its target.
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
from pathlib import Path
from typing import Any

from figures import write_figures

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, no install needed

TARGET_X = 6.0  # an on-call command's median, in bare-interpreter medians
IMAGES = ROOT / "data" / "images"
DEPLOYMENT = ["--sglang-version", "0.5.18", "--tp", "2"]
EXPLAIN_LINE = "ValueError: Kimi-K3 deferred feature length does not match image grids"
OLD_IMPORTS = "import torch, PIL.Image; from kimi_viz.manifest.schema import _validator; _validator()"


def build_captures(folder: Path) -> tuple[Path, Path]:
    """Write the pixel capture (16 photos, TP 8) and its redacted copy under ``folder``; return both paths."""
    from kimi_viz.data import SAMPLE_PHOTOS
    from kimi_viz.manifest import write_manifest
    from kimi_viz.preprocess.config import get_config
    from kimi_viz.releases import PathSource
    from kimi_viz.request import deferred_item
    from kimi_viz.split.batch import Batch

    names = [SAMPLE_PHOTOS[i % len(SAMPLE_PHOTOS)] for i in range(16)]
    batch = Batch(
        items=[deferred_item(name, "gpu" if i % 2 else "cpu") for i, name in enumerate(names)],
        processor=get_config("kimi-k3").to_media_proc_cfg(),
        attn_tp_size=8,
        sglang_version="0.5.23",
        code_path="post-fix",
        code_path_source=PathSource.DETECTED,
        created_by="benchmarks/bench_cli.py",
    )
    return write_manifest(batch, folder / "pixels-16-tp8"), write_manifest(batch, folder / "shapes-16-tp8", redact=True)


def cases(pixels: Path, shapes: Path, out: Path) -> list[dict[str, Any]]:
    """Return the cases: name, argv (``{run}`` is replaced per run), target ratio or None, exit status, old path."""
    transparent = str(IMAGES / "coffee_palette_transparent.png")
    pair = [str(IMAGES / "chelsea.png"), str(IMAGES / "astronaut_tiny_20x5.png")]
    return [
        {
            "name": "whatif IMAGE (shapes, with the under-load hint)",
            "argv": ["whatif", transparent, *DEPLOYMENT],
            "target_x": TARGET_X,
            "exit": 0,
            "expect": "under load: clean alone",
        },
        {
            "name": "whatif A B --together",
            "argv": ["whatif", *pair, "--together", *DEPLOYMENT],
            "target_x": TARGET_X,
            "exit": 1,
        },
        {"name": "explain LINE", "argv": ["explain", EXPLAIN_LINE], "target_x": TARGET_X, "exit": 0},
        {
            "name": "triage --json (shapes, 16 photos, TP 8)",
            "argv": ["triage", "--json", str(shapes)],
            "target_x": TARGET_X,
            "old": True,
        },
        {"name": "--help", "argv": ["--help"], "target_x": None, "exit": 0},
        {
            "name": "triage --json --out DIR (shapes)",
            "argv": ["triage", "--json", str(shapes), "--out", str(out / "{run}")],
            "target_x": None,
            "old": True,
        },
        {
            "name": "triage --json (pixels, 16 photos, TP 8)",
            "argv": ["triage", "--json", str(pixels)],
            "target_x": None,
            "old": True,
        },
    ]


def command(argv: list[str] | None, prelude: str = "") -> list[str]:
    """Return the interpreter command line: ``python -c pass``, or the CLI on ``argv`` after ``prelude``."""
    if argv is None:
        return [sys.executable, "-c", "pass"]
    code = f"{prelude}\nfrom kimi_viz.cli import main\nraise SystemExit(main({argv!r}))"
    return [sys.executable, "-c", code]


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Return (seconds, exit status, stdout) of one run of ``cmd``."""
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1, 3, 4, 5):
        raise RuntimeError(f"{cmd[-1]!r} failed with exit status {result.returncode}:\n{result.stderr}")
    return elapsed, result.returncode, result.stdout


def check_output(case: dict[str, Any], argv: list[str], code: int, stdout: str) -> None:
    """Raise when a run did not do what the case measures (wrong exit status, no verdict, no hint)."""
    if "exit" in case and code != case["exit"]:
        raise RuntimeError(f"{case['name']}: exit status {code}, expected {case['exit']}:\n{stdout}")
    if "--json" in argv:
        json.loads(stdout)  # a verdict, not a traceback
    if "expect" in case and case["expect"] not in stdout:
        raise RuntimeError(f"{case['name']}: {case['expect']!r} not in the output:\n{stdout}")


def bench(all_cases: list[dict[str, Any]], runs: int, env: dict[str, str], old_path: bool) -> dict[str, Any]:
    """Return every run's seconds per series (``bare``, each case, each case's old path), interleaved."""
    series: list[tuple[str, dict[str, Any] | None, str]] = [("bare", None, "")]
    for case in all_cases:
        series.append((case["name"], case, ""))
        if old_path and case.get("old"):
            series.append((case["name"] + " [old path]", case, OLD_IMPORTS))
    times: dict[str, list[float]] = {name: [] for name, _, _ in series}
    codes: dict[str, set[int]] = {name: set() for name, _, _ in series}
    for run in range(runs + 1):  # run 0 warms the file and bytecode caches
        shift = run % len(series)
        for name, timed, prelude in series[shift:] + series[:shift]:
            if timed is None:
                elapsed, _, _ = run_once(command(None), env)
            else:
                argv = [a.replace("{run}", f"{run}-{time.monotonic_ns()}") for a in timed["argv"]]
                elapsed, code, stdout = run_once(command(argv, prelude), env)
                check_output(timed, argv, code, stdout)
                codes[name].add(code)
            if run:
                times[name].append(elapsed)
    for case in all_cases:
        old = case["name"] + " [old path]"
        if old in codes and codes[old] != codes[case["name"]]:
            raise RuntimeError(f"{case['name']}: exit status {codes[case['name']]} now, {codes[old]} on the old path")
    return {"times": times, "codes": codes}


def rows(all_cases: list[dict[str, Any]], measured: dict[str, Any]) -> list[dict[str, Any]]:
    """Return one row of figures per case: min and median seconds, their ratios to bare, the result."""
    times = measured["times"]
    bare_min, bare_median = min(times["bare"]), statistics.median(times["bare"])
    out = []
    for case in all_cases:
        mine = times[case["name"]]
        old = times.get(case["name"] + " [old path]")
        median = statistics.median(mine)
        target = case["target_x"]
        out.append(
            {
                "case": case["name"],
                "min_s": min(mine),
                "median_s": median,
                "x_bare_min": min(mine) / bare_min,
                "x_bare_median": median / bare_median,
                "target_x": target,
                "old_median_s": statistics.median(old) if old else None,
                "speedup": statistics.median(old) / median if old else None,
                "exit_status": sorted(measured["codes"][case["name"]]),
                "ok": None if target is None else median / bare_median <= target,
            }
        )
    return out


def table(results: list[dict[str, Any]], *, markdown: bool) -> str:
    """Return the results as a plain or a markdown table."""
    with_old = any(r["old_median_s"] is not None for r in results)
    head = ["command", "min (s)", "median (s)", "min x bare", "median x bare", "target", "result"]
    if with_old:
        head[-1:-1] = ["old path (s)", "old / new"]
    body = []
    for r in results:
        cells = [
            r["case"],
            f"{r['min_s']:.3f}",
            f"{r['median_s']:.3f}",
            f"{r['x_bare_min']:.1f}x",
            f"{r['x_bare_median']:.1f}x",
            "-" if r["target_x"] is None else f"within {r['target_x']:g}x",
            "-" if r["ok"] is None else "PASS" if r["ok"] else "FAIL",
        ]
        if with_old:
            cells[-1:-1] = [
                "-" if r["old_median_s"] is None else f"{r['old_median_s']:.2f}",
                "-" if r["speedup"] is None else f"{r['speedup']:.1f}x",
            ]
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + ":---:|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    widths = [max(len(str(cells[i])) for cells in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        for cells in [head, *body]
    )


def main(argv: list[str] | None = None) -> int:
    """Run every case; return 1 with ``--strict`` when an on-call command misses its target, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    parser.add_argument("--old-path", action="store_true", help="also time the triage cases on the eager-import path")
    parser.add_argument("--strict", "--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND")}
    env["PYTHONPATH"] = str(ROOT)
    runs = max(1, args.runs)
    with tempfile.TemporaryDirectory(prefix="bench_cli-") as tmp:
        folder = Path(tmp)
        pixels, shapes = build_captures(folder)
        all_cases = cases(pixels, shapes, folder / "out")
        measured = bench(all_cases, runs, env, args.old_path)
    results = rows(all_cases, measured)
    bare = measured["times"]["bare"]
    machine = f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, {runs} rounds"
    bare_text = f"min {min(bare):.3f} s, median {statistics.median(bare):.3f} s"
    print(f"{machine}; bare interpreter (python -c pass): {bare_text}")
    print(f"target: each on-call command's median within {TARGET_X:g}x the bare interpreter's median\n")
    print(table(results, markdown=False))
    if args.markdown:
        print()
        print(table(results, markdown=True))
    failed = [r["case"] for r in results if r["ok"] is False]
    print(f"\n{'FAIL: ' + ', '.join(failed) if failed else 'PASS: every on-call command within its target'}")
    write_figures(args.json, {"machine": machine, "bare_s": bare, "target_x": TARGET_X, "results": results})
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
