"""Print the real prefill passes of three example workloads (run with an SGLang venv's python).

    $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python tests/parity/scheduler/try_it.py
    $HOME/.cache/kimi-viz/sglang-envs/0.5.18/bin/python tests/parity/scheduler/try_it.py

A script, not a test: it prints what SGLang's own scheduler does with the workloads of
``examples.py`` (described there) so the notes can quote it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: makes parity.scheduler importable
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))  # the repository root: kimi_viz (the workload records)

from parity.scheduler.examples import chat, long_chunked, prefill_budget_below_chunk, shared_prompt
from parity.scheduler.real_scheduler import RELEASE, run_workload
from parity.scheduler.workload import Workload


def show(title: str, workload: Workload) -> None:
    s = workload.settings
    print(
        f"## {title}  [page_size={s.page_size} policy={s.schedule_policy} chunk={s.chunked_prefill_size} "
        f"max_prefill={s.max_prefill_tokens} mixed={s.enable_mixed_chunk} no_radix={s.disable_radix_cache}]"
    )
    print("   lengths: " + ", ".join(f"{r.rid}={r.length}" for r in workload.requests))
    for p in run_workload(workload):
        windows = " ".join(f"{w.rid}[{w.prefix_len}+{w.extend_input_len}]" for w in p.windows)
        extra = f"  chunked={p.chunked}" if p.chunked else ""
        extra += f"  decoding={','.join(p.decoding)}" if p.decoding else ""
        extra += f"  finished={','.join(p.finished)}" if p.finished else ""
        print(f"   step {p.step:3d}: {windows}{extra}")


def main() -> None:
    print(f"# SGLang {RELEASE}: real prefill passes (rid[prefix_len+extend_input_len])")
    for page in (1, 16):
        show(f"two-turn chat re-sending an image, page {page}", chat(page))
    for policy in ("fcfs", "lpm"):
        show(f"three requests sharing a system prompt, {policy}", shared_prompt(policy))
    for page in (1, 16):
        show(f"one long request cut by chunk 256, page {page}", long_chunked(page))
    show("--max-prefill-tokens 100 below the chunk size", prefill_budget_below_chunk())


if __name__ == "__main__":
    main()
