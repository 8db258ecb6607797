"""Measure the on-call path's latency: ``kimi-viz --help``, ``explain`` and ``triage``, each a fresh process.

    python benchmarks/bench_cli.py
    python benchmarks/bench_cli.py --runs 9 --markdown --check

Cases (targets on the 2-core reference machine, where a bare interpreter starts in 0.05 s):

* ``--help`` and ``explain LINE`` — 0.3 s each.
* ``triage --json`` of a redacted (shape-only) capture — 0.5 s; the same with ``--out DIR``
  (``report.html``, ``summary.png``, ``trace.json``) — 2.5 s.
* ``triage --json`` of a pixel capture — 5 s.

Both captures are built here, in a temporary folder: 16 sample photos (``SAMPLE_PHOTOS`` twice, gpu and
cpu backends alternating) at attention-TP 8, every rank replayed, SGLang 0.5.23; the shapes one is its
redacted copy (``write_manifest(..., redact=True)``).

Every case runs ``--runs`` times as ``python -c "from kimi_viz.cli import main; ..."``, interleaved
with the two baselines measured in the same run, and the median is reported:

* a bare interpreter, ``python -c pass``: the ``x bare`` column;
* the code path the lazy imports replace: the same command after the imports the CLI used to make
  before it ran anything (torch and Pillow with the batch model, jsonschema and its validator for
  every manifest): the ``old path`` column and the speed-up ``old / new``. ``--help`` and
  ``explain`` never made those imports, so they have no old path.

A target is met when the median is within ``target x max(1, bare / 0.05 s)``: on a slower (or
busier) machine the limit grows with its bare start-up, never below the stated seconds. The table
goes to stdout (``--markdown`` prints it as markdown too); ``--json PATH`` writes the figures;
``--check`` exits 1 when a target is missed.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, no install needed

REFERENCE_BARE_S = 0.05
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
    """Return the cases: name, argv (``{run}`` is replaced per run), target seconds, whether an old path exists."""
    return [
        {"name": "kimi-viz --help", "argv": ["--help"], "target_s": 0.3, "old": False},
        {"name": "kimi-viz explain LINE", "argv": ["explain", EXPLAIN_LINE], "target_s": 0.3, "old": False},
        {"name": "triage --json (shapes)", "argv": ["triage", "--json", str(shapes)], "target_s": 0.5, "old": True},
        {
            "name": "triage --json --out (shapes)",
            "argv": ["triage", "--json", str(shapes), "--out", str(out / "{run}")],
            "target_s": 2.5,
            "old": True,
        },
        {
            "name": "triage --json (pixels, 16 photos, TP 8)",
            "argv": ["triage", "--json", str(pixels)],
            "target_s": 5.0,
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
    """Return (seconds, exit code, stdout) of one run of ``cmd``."""
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1, 3, 4, 5):
        raise RuntimeError(f"{cmd[-1]!r} failed with exit status {result.returncode}:\n{result.stderr}")
    return elapsed, result.returncode, result.stdout


def bench_case(case: dict[str, Any], runs: int, env: dict[str, str]) -> dict[str, Any]:
    """Return the case's medians (new, old path, bare), measured interleaved over ``runs`` runs after a warm-up."""
    times: dict[str, list[float]] = {"new": [], "old": [], "bare": []}
    codes: dict[str, set[int]] = {"new": set(), "old": set()}
    for run in range(runs + 1):  # run 0 warms the file and bytecode caches
        argv = [a.replace("{run}", f"{run}-{time.monotonic_ns()}") for a in case["argv"]]
        kinds = ["bare", "new"] + (["old"] if case["old"] else [])
        for kind in kinds:
            cmd = command(None) if kind == "bare" else command(argv, OLD_IMPORTS if kind == "old" else "")
            elapsed, code, stdout = run_once(cmd, env)
            if run:
                times[kind].append(elapsed)
            if kind != "bare":
                codes[kind].add(code)
                if "--json" in argv:
                    json.loads(stdout)  # a verdict, not a traceback
    if case["old"] and codes["new"] != codes["old"]:
        raise RuntimeError(f"{case['name']}: exit status {codes['new']} now, {codes['old']} on the old path")
    bare = statistics.median(times["bare"])
    new = statistics.median(times["new"])
    old = statistics.median(times["old"]) if times["old"] else None
    limit = case["target_s"] * max(1.0, bare / REFERENCE_BARE_S)
    return {
        "case": case["name"],
        "median_s": new,
        "target_s": case["target_s"],
        "limit_s": limit,
        "bare_s": bare,
        "x_bare": new / bare,
        "old_s": old,
        "speedup": None if old is None else old / new,
        "exit_status": sorted(codes["new"]),
        "ok": new <= limit,
    }


def table(rows: list[dict[str, Any]], *, markdown: bool) -> str:
    """Return the results as a plain or a markdown table."""
    head = ["case", "median (s)", "target (s)", "limit (s)", "x bare", "old path (s)", "old / new", "result"]
    body = [
        [
            r["case"],
            f"{r['median_s']:.2f}",
            f"{r['target_s']:.1f}",
            f"{r['limit_s']:.2f}",
            f"{r['x_bare']:.1f}x",
            "-" if r["old_s"] is None else f"{r['old_s']:.2f}",
            "-" if r["speedup"] is None else f"{r['speedup']:.1f}x",
            "PASS" if r["ok"] else "FAIL",
        ]
        for r in rows
    ]
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
    """Run every case; return 1 with ``--check`` when a target is missed, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per case and baseline (default 5)")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench_cli-") as tmp:
        folder = Path(tmp)
        pixels, shapes = build_captures(folder)
        rows = [bench_case(case, max(1, args.runs), env) for case in cases(pixels, shapes, folder / "out")]
    machine = f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, {args.runs} runs"
    print(f"{machine}; bare interpreter {statistics.median(r['bare_s'] for r in rows):.3f} s\n")
    print(table(rows, markdown=False))
    if args.markdown:
        print()
        print(table(rows, markdown=True))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine": machine, "results": rows}, indent=2) + "\n")
    return 1 if args.check and not all(r["ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
