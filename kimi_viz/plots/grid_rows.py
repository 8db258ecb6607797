"""One image's patches linked to their rows of ``pixel_values``: :func:`draw_grid_to_rows`.

One Axes in image-pixel coordinates, top to bottom: the image on its patch grid; the image's own
row track ``[start, end)`` with its caption and the link labels underneath; the whole batch's row
track with this image's span zoomed out of it. Links (``gid="row-links"``) run from chosen patches
to their row on the image's track; zoom lines (``gid="zoom-lines"``) run down the outer edges of
the label band, so no line ever crosses a label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection

from .._records import frozen
from ..preprocess.layout import BatchLayout, LayoutLookupError, layout_of
from ..preprocess.records import ImageRecord, ImageSpan, ProcessorOutput
from .axes import PATCH, patch_ticks, picture_axes
from .palette import LINK_COLOR, color_for
from .patches import (
    draw_image_with_lattice,
    patch_squares,
    patches_to_rows,
    record_label,
    record_of,
    rows_to_patches,
)
from .rows import LINE_HEIGHT_EM, draw_row_track, plan_labels, text_size_px


def _default_link_patches(h: int, w: int) -> list[tuple[int, int]]:
    """Return a few telling patches: the corners, the start of the second patch row, the centre."""
    chosen = [(0, 0), (0, w - 1), (min(1, h - 1), 0), (h // 2, w // 2), (h - 1, 0), (h - 1, w - 1)]
    return list(dict.fromkeys(chosen))


LINK_FONT = 8.5  # link labels and captions of draw_grid_to_rows


@dataclass
class _GridToRowsFrame:
    """Where draw_grid_to_rows puts things, in data units (image pixels, ``y`` down)."""

    x0: float  # x limits
    x1: float
    y1: float  # bottom y limit (the top is -0.02 * image height)
    track_y: float  # the image's own row track: [track_y, band_top)
    band_top: float  # the label band below it: caption, then link labels
    band_bottom: float
    batch_y: float  # the batch track: [batch_y, batch_y + batch_h)
    batch_h: float
    bottom: float  # where the batch caption hangs
    label_left: float  # link labels and the caption stay inside [label_left, label_right]
    label_right: float
    zoom_left: float  # the zoom lines run down x = zoom_left and x = zoom_right in the band
    zoom_right: float
    levels: int
    placements: list


def _grid_to_rows_frame(
    width: float, height: float, positions: np.ndarray, texts: list[str], caption: str, units_per_pt: float, dpi: float
) -> _GridToRowsFrame:
    """Return the frame of a draw_grid_to_rows figure drawn at ``units_per_pt`` data units per point.

    The link labels and the track caption sit in a band below the image's track, inside
    ``[label_left, label_right]``; the zoom lines from the image's track to its span on the
    batch track run down the band's outer edges, beyond that range, and only turn towards the
    batch span below the band, so no line crosses a label.
    """
    u = units_per_pt
    line_pt = LINE_HEIGHT_EM * LINK_FONT
    level_pt = line_pt + 2.0
    widest_px = max([text_size_px(t, LINK_FONT, dpi)[0] for t in texts] + [text_size_px(caption, LINK_FONT, dpi)[0]])
    extra = max(0.0, (widest_px * 72.0 / dpi * u - width) / 2)  # widen the label range for narrow images
    label_left, label_right = -extra, width + extra
    margin = max(0.01 * width, 4.0 * u)
    zoom_left, zoom_right = label_left - margin, label_right + margin
    px_per_unit = dpi / 72.0 / u
    placements, levels = plan_labels(
        [(p, p) for p in positions],
        texts,
        x_to_px=lambda v: (v - label_left) * px_per_unit,
        axes_width_px=(label_right - label_left) * px_per_unit,
        track_height_px=0.0,
        fontsize=LINK_FONT,
        dpi=dpi,
    )
    caption_lines = caption.count("\n") + 1
    band_pt = 3.0 + caption_lines * line_pt + 3.0 + levels * level_pt + 4.0
    gap = 0.14 * max(height, width * 0.35)
    track_h = 0.06 * max(height, width * 0.35)
    track_y = height + gap
    band_top = track_y + track_h
    band_bottom = band_top + band_pt * u
    batch_y = band_bottom + max(0.5 * gap, 12.0 * u)
    batch_h = track_h * 0.7
    bottom = batch_y + batch_h + 3.0 * u
    y1 = bottom + (line_pt + 8.0) * u
    return _GridToRowsFrame(
        zoom_left - margin,
        zoom_right + margin,
        y1,
        track_y,
        band_top,
        band_bottom,
        batch_y,
        batch_h,
        bottom,
        label_left,
        label_right,
        zoom_left,
        zoom_right,
        levels,
        placements,
    )


def _units_per_pt(ax: Axes, frame: _GridToRowsFrame, height: float) -> float:
    """Return the data units per point ``ax`` shows ``frame`` at (equal aspect)."""
    ax.set_xlim(frame.x0, frame.x1)
    ax.set_ylim(frame.y1, -0.02 * height)
    ax.set_aspect("equal")
    ax.apply_aspect()
    return (frame.x1 - frame.x0) / (ax.bbox.width * 72.0 / ax.figure.dpi)


@frozen
class _ImageInBatch:
    """The batch a draw_grid_to_rows figure shows, the image's own span in it, and whether a layout was given."""

    batch: BatchLayout
    own_span: ImageSpan
    layout_given: bool


def _image_in_batch(
    record: ImageRecord, record_or_output: ImageRecord | ProcessorOutput, layout: BatchLayout | ProcessorOutput | None
) -> _ImageInBatch:
    """Return the batch and ``record``'s span in it; LayoutLookupError when the layout does not hold the record."""
    if layout is None:
        layout = record_or_output if isinstance(record_or_output, ProcessorOutput) else None
    if layout is None:  # a lone record: the batch track shows where its own rows sit
        batch = BatchLayout([record.span])
        return _ImageInBatch(batch, batch.spans[0], False)
    batch = layout_of(layout)
    if not 0 <= record.index < len(batch):
        raise LayoutLookupError(
            f"image {record.index} ({record_label(record)}) is outside the layout's {len(batch)} images; "
            "pass the layout of the batch this record came from"
        )
    own_span = batch.spans[record.index]
    if own_span.grid_thw != tuple(record.grid_thw) or own_span.rows != tuple(record.rows):
        raise LayoutLookupError(
            f"image {record.index} ({record_label(record)}) has grid {'×'.join(map(str, record.grid_thw))} and "
            f"rows {list(record.rows)}, but the layout's image {record.index} has grid {own_span.grid_text} and "
            f"rows {list(own_span.rows)}; pass the layout of the batch this record came from"
        )
    return _ImageInBatch(batch, own_span, True)


@frozen
class _RowLinks:
    """The linked rows of draw_grid_to_rows: global rows, their (t, y, x) patches, track positions and labels."""

    rows: np.ndarray
    frames: np.ndarray
    ys: np.ndarray
    xs: np.ndarray
    positions: np.ndarray  # x of each row on the image's track, in image pixels
    texts: list[str]


def _row_links(record: ImageRecord, rows: Iterable[int] | None, width: float) -> _RowLinks:
    """Return the rows to link (``rows``, or the default patches') with their patches, positions and labels."""
    t, h, w = record.grid_thw
    start, end = (int(v) for v in record.rows)
    patches = end - start
    if rows is None:
        rows_arr, frames, ys, xs = patches_to_rows(record, _default_link_patches(h, w))
    else:
        rows_arr, frames, ys, xs = rows_to_patches(record, rows)
    positions = (rows_arr - start + 0.5) * width / max(patches, 1)
    texts = [
        f"row {rows_arr[k]} ← ({frames[k]}, {ys[k]}, {xs[k]})" if t > 1 else f"row {rows_arr[k]} ← ({ys[k]}, {xs[k]})"
        for k in range(len(rows_arr))
    ]
    return _RowLinks(rows_arr, frames, ys, xs, positions, texts)


def _settled_frame(
    ax: Axes | None, width: float, height: float, links: _RowLinks, caption: str
) -> tuple[Axes, _GridToRowsFrame]:
    """Return the Axes (``ax``, or a new one sized for the frame) and the frame drawn at its settled scale.

    The label band is sized in points, the picture in pixels: the scale (data units per point) is
    settled by fixed-point iteration; with equal aspect it converges in a few steps.
    """
    own_figure = ax is None
    units_per_pt = 1.04 * width / (7.0 * 72.0)  # a width-bound 7-inch plot, to start
    for _ in range(8):
        dpi = ax.figure.dpi if ax is not None else 100.0
        frame = _grid_to_rows_frame(width, height, links.positions, links.texts, caption, units_per_pt, dpi)
        if own_figure:
            ax = picture_axes(frame.x1 - frame.x0, frame.y1 + 0.02 * height, top_in=0.5, bottom_in=0.6)
        assert ax is not None  # given, or made just above
        measured = _units_per_pt(ax, frame, height)
        settled = abs(measured - units_per_pt) <= 1e-3 * units_per_pt
        units_per_pt = measured
        if settled:
            break
    assert ax is not None  # the loop ran at least once
    frame = _grid_to_rows_frame(width, height, links.positions, links.texts, caption, units_per_pt, ax.figure.dpi)
    _units_per_pt(ax, frame, height)
    return ax, frame


def _draw_image_track(
    ax: Axes, frame: _GridToRowsFrame, own_span: ImageSpan, width: float, patches: int, caption: str
) -> None:
    """Draw the image's own row track and its caption below it; returns nothing."""
    draw_row_track(
        ax,
        [(0, patches)],
        y=frame.track_y,
        height=frame.band_top - frame.track_y,
        style_indices=[own_span.shown_number],
        x_scale=width / max(patches, 1),
        gid_prefix="image-rows",
    )
    ax.annotate(
        caption,
        xy=(width / 2, frame.band_top),
        xytext=(0, -3),
        textcoords="offset points",
        ha="center",
        va="top",
        fontsize=LINK_FONT,
        zorder=4,
        annotation_clip=False,
        gid="image-rows-caption",
    )


def _draw_batch_track(
    ax: Axes, frame: _GridToRowsFrame, shown: _ImageInBatch, own_rows: tuple[int, int], width: float
) -> None:
    """Draw the whole batch's row track, the zoom lines to the image's rows ``own_rows`` and the batch caption;
    returns nothing."""
    batch = shown.batch
    start, end = own_rows
    total = max(batch.total_rows, 1)
    draw_row_track(
        ax,
        [s.rows for s in batch.spans],
        y=frame.batch_y,
        height=frame.batch_h,
        style_indices=[s.shown_number for s in batch.spans],
        x_scale=width / total,
        gid_prefix="batch-rows",
    )
    # Zoom lines: out along the track's lower edge, down past the labels, then to the batch span.
    zoom = [
        np.array(
            [
                (0.0, frame.band_top),
                (frame.zoom_left, frame.band_top),
                (frame.zoom_left, frame.band_bottom),
                (start * width / total, frame.batch_y),
            ]
        ),
        np.array(
            [
                (width, frame.band_top),
                (frame.zoom_right, frame.band_top),
                (frame.zoom_right, frame.band_bottom),
                (end * width / total, frame.batch_y),
            ]
        ),
    ]
    ax.add_collection(
        LineCollection(zoom, colors="0.35", linewidths=0.8, linestyles="dotted", gid="zoom-lines"), autolim=False
    )
    batch_text = (
        f"whole batch: {len(batch)} images, rows [0, {batch.total_rows})"
        if shown.layout_given
        else f"the batch: rows [0, {end}) or more; only image {shown.own_span.number} is known here"
    )
    ax.annotate(
        batch_text,
        xy=(width / 2, frame.batch_y + frame.batch_h),
        xytext=(0, -4),
        textcoords="offset points",
        ha="center",
        va="top",
        fontsize=LINK_FONT,
        annotation_clip=False,
        gid="batch-rows-caption",
    )


def _draw_row_links(ax: Axes, frame: _GridToRowsFrame, links: _RowLinks) -> None:
    """Draw the links from patch centres to their rows, the row ticks and the linked patches; returns nothing."""
    centres = np.stack([(links.xs + 0.5) * PATCH, (links.ys + 0.5) * PATCH], 1)
    targets = np.stack([links.positions, np.full(len(links.positions), frame.track_y)], 1)
    ax.add_collection(
        LineCollection(
            cast(Sequence[np.ndarray], np.stack([centres, targets], 1)),  # stubs: a Sequence; arrays work
            colors=LINK_COLOR,
            linewidths=1.1,
            zorder=6,
            gid="row-links",
        ),
        autolim=False,
    )
    ticks = np.stack([targets, np.stack([links.positions, np.full(len(links.positions), frame.band_top)], 1)], 1)
    ax.add_collection(
        LineCollection(cast(Sequence[np.ndarray], ticks), colors=LINK_COLOR, linewidths=1.6, zorder=6, gid="row-ticks"),
        autolim=False,
    )
    ax.add_collection(
        PolyCollection(
            cast(Sequence[np.ndarray], patch_squares(links.ys, links.xs)),
            facecolors=color_for(4),
            alpha=0.6,
            edgecolors="#000000",
            linewidths=0.9,
            zorder=7,
            gid="linked-patches",
        ),
        autolim=False,
    )


def _draw_link_labels(ax: Axes, frame: _GridToRowsFrame, links: _RowLinks, caption: str) -> None:
    """Draw each link's label in the band under the image's track, below the caption; returns nothing."""
    line_pt = LINE_HEIGHT_EM * LINK_FONT
    first_pt = 3.0 + (caption.count("\n") + 1) * line_pt + 3.0
    for k, place in enumerate(frame.placements):
        ax.annotate(
            place.text,
            xy=(links.positions[k], frame.band_top),
            ha=place.ha,
            va="top",
            xytext=(place.dx_pt, -first_pt - place.level * (line_pt + 2.0)),
            textcoords="offset points",
            fontsize=LINK_FONT,
            color=LINK_COLOR,
            zorder=8,
            annotation_clip=False,
            gid=f"link-label-{links.rows[k]}",
        )


def draw_grid_to_rows(
    record_or_output: ImageRecord | ProcessorOutput,
    layout: BatchLayout | ProcessorOutput | None = None,
    rows: Iterable[int] | None = None,
    *,
    index: int = 0,
    ax: Axes | None = None,
) -> Axes:
    """Return an Axes linking chosen patches of an image to their rows of ``pixel_values``.

    One Axes in image-pixel coordinates holds the image's patch grid, below it a track of the
    image's own rows ``[start, end)`` (row-major: ``row = start + y*w + x``) with its caption and
    the link labels underneath, and below that the whole batch's row track with this image's
    span zoomed out of it (``gid="zoom-lines"``). Each chosen row (global row numbers, default:
    corners, second patch row and centre) is linked from its patch to its position on the track by
    one LineCollection (``gid="row-links"``). No line crosses a label. Given a lone record and no
    layout, the batch track shows only where that record's rows sit. Tracks are coloured by the
    images' numbers (``ImageSpan.number``).
    """
    record = record_of(record_or_output, index)
    t, h, w = record.grid_thw
    shown = _image_in_batch(record, record_or_output, layout)
    start, end = (int(v) for v in record.rows)
    width, height = w * PATCH, h * PATCH
    links = _row_links(record, rows, width)
    caption = f"rows [{start}, {end}) of image {shown.own_span.number} · row = {start} + y·{w} + x"
    ax, frame = _settled_frame(ax, width, height, links, caption)
    # The frame is fixed, so the image is downsampled for the final on-screen size.
    draw_image_with_lattice(ax, record, merge_lines=max(h, w) <= 128)
    ax.set_xlim(frame.x0, frame.x1)
    ax.set_ylim(frame.y1, -0.02 * height)
    _draw_image_track(ax, frame, shown.own_span, width, end - start, caption)
    _draw_batch_track(ax, frame, shown, (start, end), width)
    _draw_row_links(ax, frame, links)
    _draw_link_labels(ax, frame, links, caption)
    patch_ticks(ax, h, w)
    ax.set_xticks([t_ for t_ in ax.get_xticks() if 0 <= t_ <= width])
    ax.set_yticks([t_ for t_ in ax.get_yticks() if 0 <= t_ <= height])
    ax.set_title(f"{record_label(record)}: grid {t}×{h}×{w} → rows [{start}, {end}) of pixel_values", fontsize=9)
    return ax
