"""SGLang's deferred split, replayed: the batch model, the releases, the trace, the replay and its verdict.

Read in pipeline order: :mod:`.batch` (the items), :mod:`.releases` (which release runs which code
path), :mod:`.trace` (what the replay records), :mod:`.grids` → :mod:`.ranks` → :mod:`.gpu_group` /
:mod:`.cpu_group` → :mod:`.length_check` (SGLang's own seams, driven by :mod:`.split`), then
:mod:`.divergence` (why) and :mod:`.verdict` (the status), and :mod:`.scenarios` (the catalogue).
Names are imported lazily.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_EXPORTS = {
    "Batch": "batch",
    "Item": "batch",
    "Feature": "batch",
    "RecordedOutcome": "batch",
    "RELEASES": "releases",
    "Release": "releases",
    "ReleaseChoice": "releases",
    "choose_release": "releases",
    "Trace": "trace",
    "RankTrace": "trace",
    "Step": "trace",
    "ImageRow": "trace",
    "Cause": "trace",
    "CauseKind": "trace",
    "ErrorInfo": "trace",
    "assign_ranks": "ranks",
    "replay": "split",
    "Divergence": "divergence",
    "analyse": "divergence",
    "Verdict": "verdict",
    "Status": "verdict",
    "build_verdict": "verdict",
    "format_verdict": "verdict",
    "SCENARIOS": "scenarios",
    "get_scenario": "scenarios",
    "run_scenario": "scenarios",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_viz.replay' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


class _CallablePackage(types.ModuleType):
    """This package, callable as :func:`kimi_viz.replay.split.replay`.

    ``kimi_viz.replay`` names both this package and the function ``kimi_viz`` exports: importing any
    module of the package makes ``kimi_viz.replay`` the package, so calling the package calls the
    function, and ``kimi_viz.replay(batch, tp_size=2)`` works whatever was imported first.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .split import replay

        return replay(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
