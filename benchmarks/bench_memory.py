"""Benchmark one answer for a 20-request workload that runs short of memory, against SGLang's own scheduler.

    python benchmarks/bench_memory.py
    python benchmarks/bench_memory.py --json build/bench_memory.json

Workload (:data:`WORKLOAD`): 20 single-image requests of sample images (a 64-token system prompt each,
outputs of 500 to 900 tokens) arriving over 800 steps, on a KV pool of 2500 tokens (``--max-total-tokens``)
at page 1, SGLang 0.5.23 at attention-TP 2, in shapes mode: the adder refuses requests (``NO_TOKEN``), the
tree evicts and decode steps retract. Target: the whole answer (``whatif``: the scheduler's passes with
their memory, every pass's forward replay, the fix search and the flag search) within 1 s.

Baseline, measured in the same run where the lane's 0.5.23 venv is there
(``$HOME/.cache/kimi-viz/sglang-envs/0.5.23``, or ``KIMI_VIZ_SGLANG_ENV``): SGLang's own scheduler on the same
requests and pools (``tests/parity/scheduler/real_scheduler.py``: the real allocator, tree, adder,
``retract_decode`` and loop, no forward), whose passes the kit's must equal; the ratio is the kit's
scheduler time against it. Without the venv only the kit is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, no install needed
sys.path.insert(0, str(ROOT / "tests"))

from figures import write_figures

from kimi_viz import whatif
from kimi_viz.request.token_ids import scheduled_requests
from kimi_viz.request.workload import parse_workload
from kimi_viz.scheduler.flags import LoadSettings

TARGET_S = 1.0
RELEASE, TP = "0.5.23", 2
LOAD = LoadSettings(max_total_tokens=2500, page_size=1)
IMAGES = ["rocket.jpg", "astronaut.png", "chelsea.png", "coffee.png", "camera.png", "horse.png", "text.png"]
WORKLOAD: dict[str, Any] = {
    "requests": [
        {
            "id": f"r{k}",
            "images": [IMAGES[k % len(IMAGES)]],
            "system": 64,
            "output": 500 + (k * 37) % 400,
            "arrival": (k * 53) % 800,
        }
        for k in range(20)
    ]
}


def _venv() -> Path | None:
    env = Path(os.environ.get("KIMI_VIZ_SGLANG_ENV", Path.home() / ".cache/kimi-viz/sglang-envs" / RELEASE))
    python = env / "bin" / "python"
    return python if python.exists() else None


def real_scheduler_seconds(payload: dict[str, Any], runs: int) -> tuple[float, list] | None:
    """Return the median seconds of SGLang's own scheduler on ``payload`` (in its venv) and its passes, or None."""
    python = _venv()
    if python is None:
        return None
    script = (
        "import json, sys, time\n"
        "from parity.scheduler.real_scheduler import run_workload\n"
        "data = json.load(sys.stdin)\n"
        "run_workload(data)\n"  # warm-up
        "times = []\n"
        f"for _ in range({runs}):\n"
        "    t = time.perf_counter(); out = run_workload(data); times.append(time.perf_counter() - t)\n"
        "json.dump({'times': times, 'passes': out['passes'], 'retractions': out['retractions']}, sys.stdout)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}"}
    done = subprocess.run(
        [str(python), "-c", script], input=json.dumps(payload), capture_output=True, text=True, env=env, check=True
    )
    out = json.loads(done.stdout)
    return statistics.median(out["times"]), out["passes"]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0 when the target is met, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--runs", type=int, default=5, help="timed runs (default 5)")
    args = parser.parse_args(argv)
    workload = parse_workload(WORKLOAD)
    start = time.perf_counter()
    answer = whatif(workload, sglang_version=RELEASE, tp_size=TP, load=LOAD)
    cold_s = time.perf_counter() - start
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        answer = whatif(parse_workload(WORKLOAD), sglang_version=RELEASE, tp_size=TP, load=LOAD)
        times.append(time.perf_counter() - start)
    answer_s = statistics.median(times)
    replay = answer.replay
    planned = replay.schedule
    assert planned.retractions and planned.no_token and planned.evictions, "the workload must run short of memory"
    # the kit's scheduler alone, against SGLang's own on the same requests
    from parity.scheduler.workload import Workload, kit_schedule, real_payload

    reqs = scheduled_requests(workload, replay.prompts, [list(b.images) for b in replay.built])
    lane = Workload(LOAD, tuple(reqs), max_steps=40_000)
    sched_times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        kit_schedule(lane, RELEASE)
        sched_times.append(time.perf_counter() - start)
    kit_sched_s = statistics.median(sched_times)
    real = real_scheduler_seconds(real_payload(lane, RELEASE), args.runs)
    base_s = None
    if real is not None:
        base_s, real_passes = real
        mine = [(p.step, [(w.rid, w.prefix_len, w.extend_input_len) for w in p.windows]) for p in planned.passes]
        theirs = [
            (p["step"], [(w["rid"], w["prefix_len"], w["extend_input_len"]) for w in p["windows"]]) for p in real_passes
        ]
        assert mine == theirs, "the kit's passes differ from SGLang's own"
    result: dict[str, Any] = {
        "requests": len(workload.requests),
        "kv_pool": LOAD.max_total_tokens,
        "passes": len(planned.passes),
        "retractions": len(planned.retractions),
        "no_token_steps": len(planned.no_token),
        "evicting_steps": len(planned.evictions),
        "status": answer.status.value,
        "answer_s": answer_s,
        "answer_cold_s": cold_s,
        "answer_runs_s": times,
        "kit_scheduler_s": kit_sched_s,
        "sglang_scheduler_s": base_s,
        "scheduler_ratio": None if base_s is None else base_s / kit_sched_s,
        "target_s": TARGET_S,
        "met_target": max(answer_s, cold_s) <= TARGET_S,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    baseline = "—" if base_s is None else f"{base_s * 1e3:.0f}"
    ratio = "—" if base_s is None else f"{base_s / kit_sched_s:.1f}×"
    print(
        f"memory-short workload on {result['machine']['cpus']} CPU(s), Python {result['machine']['python']}\n\n"
        "| requests | KV pool | passes | retractions | NO_TOKEN steps | evicting steps | answer (ms) "
        "| answer, cold (ms) | kit scheduler (ms) | SGLang scheduler (ms) | ratio | target (ms) | met |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n"
        f"| {result['requests']} | {LOAD.max_total_tokens} | {result['passes']} | {result['retractions']} | "
        f"{result['no_token_steps']} | {result['evicting_steps']} | {answer_s * 1e3:.0f} | {cold_s * 1e3:.0f} | "
        f"{kit_sched_s * 1e3:.0f} | {baseline} | {ratio} | {TARGET_S * 1e3:.0f} | "
        f"{'yes' if result['met_target'] else 'NO'} |\n\n"
        "answer: whatif() — the passes with their memory, every pass replayed, the fix and flag searches; "
        "ratio: SGLang's own scheduler over the kit's\n"
        f"{'PASS' if result['met_target'] else 'FAIL'}: the answer in {max(answer_s, cold_s):.2f} s "
        f"(median {answer_s:.2f} s, cold {cold_s:.2f} s), limit {TARGET_S:.0f} s"
    )
    write_figures(args.json, result)
    return 0 if result["met_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
