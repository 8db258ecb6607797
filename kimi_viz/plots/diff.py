"""Per-patch pixel differences between two processor outputs for one image (e.g. checkpoint vs torch)."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..preprocess.layout import LayoutLookupError
from ..preprocess.records import ProcessorOutput
from .patches import record_label, record_of


def _level(output: ProcessorOutput) -> float:
    """Return one 8-bit level in normalised units (``1 / (255 * std)``; std 0.5 when unknown)."""
    std = getattr(output.config, "image_std", None) or (0.5,)
    return 1.0 / (255.0 * float(std[0]))


def patch_max_abs_diff(a: ProcessorOutput, b: ProcessorOutput, index: int = 0) -> np.ndarray:
    """Return float64 ``[h, w]``: per patch, the max |a - b| over channels, pixels and frames of image ``index``."""
    ra, rb = record_of(a, index), record_of(b, index)
    if tuple(ra.grid_thw) != tuple(rb.grid_thw):
        raise LayoutLookupError(
            f"image {index} has grid {'×'.join(map(str, ra.grid_thw))} in the first output and "
            f"{'×'.join(map(str, rb.grid_thw))} in the second; per-patch differences need equal grids"
        )
    t, h, w = ra.grid_thw
    rows_a = a.image_rows(index).detach().to("cpu", torch.float64)
    rows_b = b.image_rows(index).detach().to("cpu", torch.float64)
    if rows_a.shape != rows_b.shape or rows_a.shape[0] != t * h * w:
        raise LayoutLookupError(
            f"image {index} has {rows_a.shape[0]} rows in the first output and {rows_b.shape[0]} in the second; "
            f"its grid {t}×{h}×{w} needs {t * h * w} in both"
        )
    per_row = (rows_a - rows_b).abs().flatten(1).amax(dim=1).numpy()
    return per_row.reshape(t, h, w).max(axis=0)


def draw_pixel_diff(
    a: ProcessorOutput, b: ProcessorOutput, *, index: int = 0, ax: Axes | None = None, cmap: str = "viridis"
) -> Axes:
    """Return an Axes with the per-patch max |difference| of image ``index`` between two outputs.

    The map is one ``imshow`` over the patch grid (``gid="pixel-diff"``) with a colorbar, annotated
    (``gid="diff-summary"``) with the overall max (also in 8-bit levels), where it occurs, how many
    patches differ and whether the grids are equal. When the grids differ nothing is drawn but a
    statement of both grids: a per-patch comparison would be misleading.
    """
    ra, rb = record_of(a, index), record_of(b, index)
    name_a, name_b = a.backend or "first", b.backend or "second"
    if ax is None:
        t, h, w = ra.grid_thw
        aspect = h / max(w, 1)
        height_in = float(np.clip(5.6 * aspect + 1.9, 3.0, 9.0))
        fig = Figure(figsize=(7.5, height_in))
        fig.subplots_adjust(bottom=1.1 / height_in, top=1 - 0.5 / height_in, left=0.1, right=0.9)
        ax = fig.add_subplot()
    grid_a, grid_b = "×".join(map(str, ra.grid_thw)), "×".join(map(str, rb.grid_thw))
    if tuple(ra.grid_thw) != tuple(rb.grid_thw):
        ax.set_axis_off()
        ax.set_title(f"{record_label(ra)}: grids differ — {name_a} {grid_a} vs {name_b} {grid_b}", fontsize=9)
        ax.text(
            0.5,
            0.5,
            f"grids differ: {name_a} {grid_a} ({ra.patches} rows) vs {name_b} {grid_b} "
            f"({rb.patches} rows)\nno per-patch comparison is possible",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            gid="diff-summary",
        )
        return ax

    diff = patch_max_abs_diff(a, b, index)
    t, h, w = ra.grid_thw
    peak = float(diff.max()) if diff.size else 0.0
    y, x = (int(v) for v in np.unravel_index(int(np.argmax(diff)), diff.shape))
    differing = int((diff > 0).sum())
    image = ax.imshow(
        diff, extent=(0, w, h, 0), cmap=cmap, vmin=0.0, vmax=max(peak, 1e-12), interpolation="nearest", gid="pixel-diff"
    )
    colorbar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    colorbar.set_label(f"max |{name_a} − {name_b}| per patch", fontsize=8)
    ax.set_xlabel("x (patch column)")
    ax.set_ylabel("y (patch row)")
    row = ra.rows[0] + y * w + x
    summary = (
        f"max |Δ| = {peak:.6g} ({peak / _level(a):.2f} 8-bit levels) at patch (y={y}, x={x}), row {row}\n"
        f"{differing} of {h * w} patches differ; grids equal: {grid_a}"
    )
    if peak == 0.0:
        summary = f"identical: max |Δ| = 0 over all {h * w} patches; grids equal: {grid_a}"
    ax.annotate(
        summary,
        xy=(0.0, 0.0),
        xycoords="axes fraction",
        xytext=(0, -36),
        textcoords="offset points",
        ha="left",
        va="top",
        fontsize=8,
        gid="diff-summary",
    )
    ax.set_title(
        f"{record_label(ra)}: {name_a} vs {name_b}, grid {grid_a}, rows [{ra.rows[0]}, {ra.rows[1]})", fontsize=9
    )
    return ax
