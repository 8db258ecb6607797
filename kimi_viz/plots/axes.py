"""The Axes every figure of the kit draws on: new figures sized for what they show, and patch-unit ticks.

Each ``draw_x(..., ax=None)`` draws on the ``ax`` it is given, or on a new one from here; nothing
uses pyplot's global state.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MultipleLocator

from ..preprocess.config import get_config
from .rows import text_size_px

PATCH = get_config().patch_size  # pixels per patch side, the default processor config's
NICE_STEPS = (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128)


def sized_axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    """Return ``ax``, or a new Axes on a constrained-layout Figure of ``size`` inches when it is None."""
    if ax is not None:
        return ax
    return Figure(figsize=size, layout="constrained").add_subplot()


def picture_axes(
    width_px: float, height_px: float, *, width_in: float = 8.0, top_in: float = 0.85, bottom_in: float = 1.0
) -> Axes:
    """Return a fresh Axes whose plot box has the aspect of a ``width_px`` × ``height_px`` picture."""
    left_in, right_in = 0.75, 0.25
    plot_w = width_in - left_in - right_in
    plot_h = float(np.clip(plot_w * height_px / max(width_px, 1.0), 1.2, 9.0))
    height_in = plot_h + top_in + bottom_in
    fig = Figure(figsize=(width_in, height_in))
    fig.subplots_adjust(
        left=left_in / width_in, right=1 - right_in / width_in, bottom=bottom_in / height_in, top=1 - top_in / height_in
    )
    return fig.add_subplot()


def patch_ticks(ax: Axes, h: int, w: int) -> None:
    """Label the axes in patch units: every ``k`` patches, about eight ticks a side, and never closer
    on screen than a tick label's width (so they cannot overlap however small the Axes)."""
    ax.apply_aspect()
    x0, x1 = ax.get_xlim()
    patch_px = ax.bbox.width / max(abs(x1 - x0), 1e-9) * PATCH
    label_px = (
        text_size_px(
            str(max(h, w)),
            float(ax.xaxis.get_ticklabels()[0].get_fontsize()) if ax.xaxis.get_ticklabels() else 10.0,
            ax.figure.dpi,
        )[0]
        + 6.0
    )
    wanted = max(max(h, w) / 8, label_px / max(patch_px, 1e-9))
    step = next((s for s in NICE_STEPS if s >= wanted), NICE_STEPS[-1])
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MultipleLocator(step * PATCH))
        axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value / PATCH:g}"))
    ax.set_xlabel(f"x (patch column, {PATCH} px)")
    ax.set_ylabel("y (patch row)")


__all__ = ["PATCH", "NICE_STEPS", "sized_axes", "picture_axes", "patch_ticks"]
