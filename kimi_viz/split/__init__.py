"""SGLang's deferred split in ``KimiK3ForConditionalGeneration.get_image_feature``, replayed on every rank.

Read in pipeline order: :mod:`.batch` (the items of one call; :mod:`.forward_context` the forward
pass around it, when captured), :mod:`.cause` (what SGLang raises, and why), :mod:`.trace` (what the
replay records; each step's variables are a typed record of :mod:`.step_records`), :mod:`.grids` →
:mod:`.ranks` → :mod:`.gpu_group` / :mod:`.cpu_group` → :mod:`.length_check` (SGLang's own seams,
driven by :mod:`._replay`, which holds :func:`replay`), then :mod:`.findings` and :mod:`.divergence`
(why, reported as :mod:`.diagnosis`) and :mod:`.verdict` (the status). Which release runs which code
path is :mod:`kimi_viz.releases`.
Names are imported lazily.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "Batch": "batch",
    "Item": "batch",
    "Feature": "batch",
    "RecordedOutcome": "batch",
    "ForwardContext": "forward_context",
    "ContextRequest": "forward_context",
    "ContextImage": "forward_context",
    "ContextItem": "forward_context",
    "Trace": "trace",
    "RankTrace": "trace",
    "Step": "trace",
    "StepRecord": "step_records",
    "ImageRow": "trace",
    "Cause": "cause",
    "CauseKind": "cause",
    "ErrorInfo": "cause",
    "Outcome": "trace",
    "assign_ranks": "ranks",
    "replay": "_replay",
    "Divergence": "divergence",
    "analyse": "divergence",
    "Verdict": "verdict",
    "RankVerdict": "verdict",
    "Status": "verdict",
    "build_verdict": "verdict",
    "format_verdict": "verdict",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
