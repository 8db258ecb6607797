"""The pages and views of a verdict and an answer: ``report.html``, ``summary.png``, ``issue.md``, the stepper,
notebook tables, the gallery, and any question's answer as terminal text and tables (:mod:`.answer_views`) and
as JSON (:mod:`.answer_documents`).

Names are imported lazily so ``import kimi_viz.report`` stays fast.
"""

from __future__ import annotations

from .._lazy import lazy_exports

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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
