"""The load scenarios (S14 onward) asked as questions: each one's workload on its own deployment."""

from __future__ import annotations

from ..answer import Answer
from ..scenarios.under_load import get_load_scenario
from .ask import whatif


def run_load_scenario(name: str, *, sglang_version: str | None = None, tp_size: int | None = None) -> Answer:
    """Return the answer of load scenario ``name`` (S14 onward), on its own deployment by default."""
    scenario = get_load_scenario(name)
    return whatif(
        scenario.build(),
        sglang_version=sglang_version or scenario.sglang_version,
        tp_size=tp_size or scenario.tp_size,
        settings=scenario.settings,
        load=scenario.load,
    )


__all__ = ["run_load_scenario"]
