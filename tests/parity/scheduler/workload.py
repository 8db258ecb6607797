"""The scheduler workload records, re-exported for the real-SGLang driver (they live in the package).

:mod:`kimi_viz.schedule.prefill_workload` holds them so that the kit's own model of the scheduler
(:func:`kimi_viz.schedule.steps.schedule_steps`) and SGLang's (``real_scheduler.py``) read the same
workloads and write the same passes.
"""

from __future__ import annotations

from kimi_viz.schedule.prefill_workload import (
    MEDIA_PAD,
    OUTPUT_BASE,
    Image,
    Part,
    Pass,
    Request,
    Settings,
    Window,
    Workload,
    chat_turn,
    passes_from_json,
    passes_to_json,
    workload_from_json,
    workload_to_json,
)

__all__ = [
    "MEDIA_PAD",
    "OUTPUT_BASE",
    "Image",
    "Part",
    "Pass",
    "Request",
    "Settings",
    "Window",
    "Workload",
    "chat_turn",
    "passes_from_json",
    "passes_to_json",
    "workload_from_json",
    "workload_to_json",
]
