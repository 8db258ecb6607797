"""The pages and views of a verdict and an answer: ``report.html``, ``summary.png``, ``issue.md``, the stepper,
notebook tables, the gallery, and any question's answer as terminal text and tables (:mod:`.answer_views`) and
as JSON (:mod:`.answer_documents`).

Names are imported lazily so ``import kimi_viz.report`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Stepper": "stepper",
    "Table": "text_table",
    "VerdictView": "tables",
    "ranks_table": "tables",
    "images_table": "tables",
    "divergence_table": "tables",
    "batch_table": "tables",
    "assignment_table": "tables",
    "MarkdownView": "markdown",
    "issue_markdown": "markdown",
    "render_report": "html",
    "write_report": "html",
    "summary_png": "summary",
    "write_gallery": "gallery",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_viz.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
