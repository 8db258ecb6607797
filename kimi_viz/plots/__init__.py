"""Figures. Every function is ``draw_x(data, *, ax=None, ...) -> Axes``.

When ``ax`` is None a new :class:`matplotlib.figure.Figure` is made (no pyplot state), and nothing
here ever calls ``plt.show()``. Names are imported lazily from the modules below.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "draw_patch_grid": "patches",
    "draw_grid_to_rows": "grid_rows",
    "draw_row_spans": "rows",
    "draw_row_track": "rows",
    "row_spans_height_pt": "rows",
    "draw_pixel_diff": "diff",
    "draw_processor_output": "output",
    "draw_feature_map": "features",
    "draw_token_norms": "features",
    "draw_step": "steps",
    "draw_forward_pass": "forward",
    "draw_rank_rows": "summary",
    "draw_rank_bars": "summary",
    "draw_grid_mismatch": "summary",
    "draw_verdict_banner": "summary",
    "draw_call_requests": "call_requests",
    "draw_prompt": "prompt",
    "PALETTE": "palette",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
