"""The processor's packed output at a glance: every image on its grid, above the packed row track."""

from __future__ import annotations

import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure
from matplotlib.gridspec import GridSpecBase

from .._records import frozen
from ..errors import KimiVizError
from ..preprocess.layout import BatchLayout
from ..preprocess.records import ImageRecord, ImageSpan, ProcessorOutput
from .palette import color_for, edge_style_for
from .patches import draw_image_with_lattice, record_label
from .rows import draw_row_spans, row_spans_height_pt

THUMB_MAX_LINES = 24  # lattice lines per side in a thumbnail; bigger grids show every k-th line


@frozen
class _Panels:
    """Where draw_processor_output's panels go: the figure (or subfigure), its grid, and the row-track Axes."""

    canvas: Figure | SubFigure
    grid: GridSpecBase
    track_ax: Axes


# Sizes of a draw_processor_output figure, in inches.
_WIDTH_IN = 12.0
_TITLE_IN, _TOP_IN, _BOTTOM_IN = 0.75, 0.55, 0.6


def _panels_in_subplot(ax: Axes, rows: int, columns: int, thumb_in: float) -> _Panels:
    """Return the panels splitting ``ax``'s grid cell: ``rows`` of thumbnails above ``ax`` as the row track."""
    spec = ax.get_subplotspec()
    if spec is None:
        raise KimiVizError("draw_processor_output needs ax to be a subplot (made with add_subplot); pass fig= instead")
    track_in = 2.4
    grid = spec.subgridspec(rows + 1, columns, height_ratios=[thumb_in] * rows + [track_in], hspace=0.75)
    ax.set_subplotspec(grid[-1, :])
    return _Panels(ax.figure, grid, ax)


def _panels_in_figure(
    fig: Figure | None,
    layout: BatchLayout,
    produced: BatchLayout | None,
    rows: int,
    columns: int,
    thumb_in: float,
) -> _Panels:
    """Return the panels filling ``fig``, or a new Figure sized so the row track gets the height its labels need."""
    own = fig is None
    if fig is None:
        fig = Figure(figsize=(_WIDTH_IN, rows * (thumb_in + _TITLE_IN) + 3.0 + _TOP_IN + _BOTTOM_IN))
    height_in = fig.get_figheight()
    figure_grid = fig.add_gridspec(
        rows + 1,
        columns,
        height_ratios=[thumb_in] * rows + [2.4],
        hspace=0.75,
        left=0.1,
        right=0.98,
        top=1 - _TOP_IN / height_in,
        bottom=_BOTTOM_IN / height_in,
    )
    track_ax = fig.add_subplot(figure_grid[-1, :])
    if own:  # size the figure so the row track gets the height its labels need
        track_in = row_spans_height_pt(layout, ax=track_ax, produced=produced) / 72.0
        height_in = rows * (thumb_in + _TITLE_IN) + track_in + _TOP_IN + _BOTTOM_IN
        fig.set_size_inches(_WIDTH_IN, height_in)
        mean_in = (rows * thumb_in + track_in) / (rows + 1)
        figure_grid.set_height_ratios([thumb_in] * rows + [track_in])
        figure_grid.update(top=1 - _TOP_IN / height_in, bottom=_BOTTOM_IN / height_in, hspace=_TITLE_IN / mean_in)
        track_spec = track_ax.get_subplotspec()
        assert track_spec is not None  # made by add_subplot
        track_ax.set_position(track_spec.get_position(fig))
    return _Panels(fig, figure_grid, track_ax)


def _draw_thumbnail(thumb: Axes, record: ImageRecord, span: ImageSpan) -> None:
    """Draw one image's thumbnail: picture, sparse lattice, a frame in its track style, its title; returns nothing."""
    t, h, w = record.grid_thw
    step = max(1, math.ceil(max(h, w) / THUMB_MAX_LINES))
    draw_image_with_lattice(thumb, record, lattice_step=step, merge_lines=False, oversample=1.0)
    thumb.set_xticks([])
    thumb.set_yticks([])
    for spine in thumb.spines.values():
        spine.set_edgecolor(color_for(span.shown_number))  # the colour of its span on the row track
        spine.set_linewidth(2.5)
        spine.set_linestyle(edge_style_for(span.shown_number))
    thumb.set_title(
        f"{span.number}: {record_label(record)}\n{t}×{h}×{w} · {record.patches} patches\n"
        f"rows [{record.rows[0]}, {record.rows[1]})",
        fontsize=8.5,
    )
    thumb.set_xlabel(f"lattice: every {step} patches" if step > 1 else "lattice: every patch", fontsize=8)


def draw_processor_output(
    output: ProcessorOutput,
    *,
    fig: Figure | None = None,
    ax: Axes | None = None,
    max_columns: int = 6,
    produced: BatchLayout | None = None,
) -> Axes:
    """Return the row-track Axes of a small-multiples figure of the batch; ``.figure`` holds every panel.

    Above: one thumbnail per image (its picture, a lattice of every ``k``-th patch line so big grids
    stay legible, the padding, a frame in the image's track colour and line style, and a title with
    index, name, grid and row span). Below: :func:`~kimi_viz.plots.rows.draw_row_spans` of the batch
    (with ``produced`` compared when given). With ``fig`` the panels fill that figure; with ``ax``
    (a subplot) they fill that subplot's grid cell and ``ax`` becomes the row track; with neither a
    new Figure is made.
    """
    n = len(output.records)
    layout = BatchLayout.from_output(output)
    columns = max(1, min(n, max_columns))
    rows = max(1, math.ceil(n / columns))
    thumb_in = _WIDTH_IN / columns * 0.72
    if ax is not None:
        panels = _panels_in_subplot(ax, rows, columns, thumb_in)
    else:
        panels = _panels_in_figure(fig, layout, produced, rows, columns, thumb_in)
    for i, (record, span) in enumerate(zip(output.records, layout.spans)):
        thumb = panels.canvas.add_subplot(panels.grid[i // columns, i % columns])
        _draw_thumbnail(thumb, record, span)
        thumb.set_gid(f"thumbnail-{i}")
    draw_row_spans(layout, produced=produced, ax=panels.track_ax)
    return panels.track_ax
