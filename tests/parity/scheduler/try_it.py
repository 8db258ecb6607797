"""Print what SGLang's own scheduler does with the example workloads (run with an SGLang venv's python).

    $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python -m tests.parity.scheduler.try_it
    $HOME/.cache/kimi-viz/sglang-envs/0.5.18/bin/python -m tests.parity.scheduler.try_it

A script, not a test: each pass is ``step: rid[prefix_len+extend_input_len]``; ``matches`` gives
``rid@step: full F -> P (branch B)`` for the admitted requests with a FULL match (``F`` the FULL-only
walk, ``P`` the prefix after the cut back to a saved state, ``B`` the branching point); ``saves``
``rid@step:depth`` for every state the tree took in. ``docs/hybrid-tree-notes.md`` §11 quotes it, and
``tests/data/scheduler_runs/`` holds it for each release (``tests/test_admission.py`` holds the kit's
model to those runs).
"""

from __future__ import annotations

from .examples import examples
from .real_scheduler import RELEASE, run_workload
from .workload import real_payload, real_view, view_lines


def main() -> None:
    print(f"# SGLang {RELEASE}: real prefill passes with the hybrid tree (rid[prefix_len+extend_input_len])")
    for title, workload in examples():
        print("\n".join(view_lines(title, workload, real_view(run_workload(real_payload(workload, RELEASE))))))


if __name__ == "__main__":
    main()
