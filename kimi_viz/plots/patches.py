"""One image on its patch grid: the 14-px lattice, the 2x2 merge groups, padding and row numbers.

Everything is drawn with a handful of fast artists whatever the grid size (up to 512 patches a
side): one ``imshow`` of the image (downsampled to the Axes' pixel size first), one LineCollection
for the lattice (``(h+1)+(w+1)`` full-length lines, ``gid="patch-lattice"``), one for the merge
groups (``gid="merge-lines"``), one ``imshow`` of an RGBA padding overlay (``gid="padding-overlay"``),
and one PolyCollection for highlighted patches (``gid="highlight"``). Coordinates are image pixels,
``y`` pointing down, so patch ``(y, x)`` covers ``[14x, 14x+14) × [14y, 14y+14)``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MultipleLocator
from PIL import Image

from ..layout import BatchLayout, ImageSpan, LayoutLookupError, layout_of, source_label
from ..records import PATCH_FULLY_PADDING, PATCH_PARTLY_PADDING, ImageRecord, ProcessorOutput
from .palette import (
    HIGHLIGHT_COLOR,
    LATTICE_COLOR,
    LINK_COLOR,
    MERGE_COLOR,
    PAD_FULL_RGBA,
    PAD_PARTIAL_RGBA,
    color_for,
)
from .rows import LINE_HEIGHT_EM, text_size_px as _text_size, draw_row_track, plan_labels

PATCH = 14                  # pixels per patch side
MERGE = 2                   # patches per merge group side
OVERLAY_SUBPIXELS = 4       # padding overlay resolution: texture cells per patch side
BLANK_GRAY = 235
NICE_STEPS = (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128)


def record_of(record_or_output: ImageRecord | ProcessorOutput, index: int = 0) -> ImageRecord:
    """Return the :class:`ImageRecord` to draw: ``record_or_output`` itself, or its ``index``-th record."""
    if isinstance(record_or_output, ImageRecord):
        return record_or_output
    if isinstance(record_or_output, ProcessorOutput):
        n = len(record_or_output.records)
        if not 0 <= index < n:
            raise LayoutLookupError(f"image index {index} is outside the output's {n} images; pass 0..{n - 1}")
        return record_or_output.records[index]
    raise TypeError(
        f"expected an ImageRecord or a ProcessorOutput, got {type(record_or_output).__name__}; "
        "pass the output of Processor.preprocess() or one of its records"
    )


def record_label(record: ImageRecord) -> str:
    """Return a short name for a record's image (its file name when it came from a path)."""
    return source_label(record.source, record.index)


def _new_axes(width_px: float, height_px: float, *, width_in: float = 8.0, top_in: float = 0.85,
              bottom_in: float = 1.0) -> Axes:
    """Return a fresh Axes whose plot box has the aspect of a ``width_px`` × ``height_px`` picture."""
    left_in, right_in = 0.75, 0.25
    plot_w = width_in - left_in - right_in
    plot_h = float(np.clip(plot_w * height_px / max(width_px, 1.0), 1.2, 9.0))
    height_in = plot_h + top_in + bottom_in
    fig = Figure(figsize=(width_in, height_in))
    fig.subplots_adjust(left=left_in / width_in, right=1 - right_in / width_in,
                        bottom=bottom_in / height_in, top=1 - top_in / height_in)
    return fig.add_subplot()


def _display_image(record: ImageRecord, ax: Axes, *, oversample: float = 1.5) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Return the picture to show (box-downsampled to about the Axes' pixel size) and its extent."""
    t, h, w = record.grid_thw
    if record.resized is None:
        return np.full((1, 1, 3), BLANK_GRAY, dtype=np.uint8), (0.0, w * PATCH, h * PATCH, 0.0)
    picture = np.asarray(record.resized)
    if picture.ndim == 2:
        picture = np.repeat(picture[:, :, None], 3, axis=2)
    height, width = picture.shape[:2]
    target_w = max(ax.bbox.width * oversample, 1.0)
    target_h = max(ax.bbox.height * oversample, 1.0)
    factor = int(min(width / target_w, height / target_h))
    if factor >= 2:
        picture = np.asarray(Image.fromarray(np.ascontiguousarray(picture, dtype=np.uint8)).reduce(factor))
    return picture, (0.0, float(width), float(height), 0.0)


def _full_length_lines(ys: np.ndarray, xs: np.ndarray, height: float, width: float) -> np.ndarray:
    """Return ``[k, 2, 2]`` segments: a horizontal line across ``width`` at each ``ys``, then a
    vertical line down ``height`` at each ``xs``."""
    ys, xs = np.asarray(ys, dtype=float), np.asarray(xs, dtype=float)
    horizontal = np.stack([np.stack([np.zeros_like(ys), ys], 1), np.stack([np.full_like(ys, width), ys], 1)], 1)
    vertical = np.stack([np.stack([xs, np.zeros_like(xs)], 1), np.stack([xs, np.full_like(xs, height)], 1)], 1)
    return np.concatenate([horizontal, vertical])


def lattice_segments(h: int, w: int, step: int = 1, size: float = PATCH) -> np.ndarray:
    """Return full-length grid lines every ``step`` patches: ``[k, 2, 2]`` segments, horizontal lines first.

    With ``step == 1`` there are exactly ``(h + 1) + (w + 1)`` segments. The outer border is
    always included.
    """
    ys = np.unique(np.append(np.arange(0, h + 1, step), h)) * size
    xs = np.unique(np.append(np.arange(0, w + 1, step), w)) * size
    return _full_length_lines(ys, xs, h * size, w * size)


def merge_segments(h: int, w: int, merge: int = MERGE, size: float = PATCH) -> np.ndarray:
    """Return the merge-group outlines: full-length lines every ``merge`` patches (``h//merge+1 + w//merge+1``)."""
    return _full_length_lines(np.arange(0, h + 1, merge) * size, np.arange(0, w + 1, merge) * size, h * size, w * size)


def padding_overlay(pad_mask: np.ndarray, cells: int = OVERLAY_SUBPIXELS) -> np.ndarray:
    """Return an RGBA uint8 image (``cells`` texels per patch side) shading the padding patches.

    Fully padded patches get a uniform dark wash; partly padded patches a lighter tint with a
    diagonal stripe texture, so the two differ in texture as well as colour.
    """
    mask = np.asarray(pad_mask)
    h, w = mask.shape
    full = np.round(np.asarray(PAD_FULL_RGBA) * 255).astype(np.uint8)
    tint = np.round(np.asarray(PAD_PARTIAL_RGBA) * 255).astype(np.uint8)
    faint = tint.copy()
    faint[3] = int(round(tint[3] * 0.4))
    yy, xx = np.indices((cells, cells))
    stripes = np.where((((yy + xx) % cells) < cells // 2)[..., None], tint, faint)     # [cells, cells, 4]
    overlay = np.zeros((h, w, cells, cells, 4), dtype=np.uint8)
    overlay[mask == PATCH_FULLY_PADDING] = full
    overlay[mask == PATCH_PARTLY_PADDING] = stripes
    return overlay.transpose(0, 2, 1, 3, 4).reshape(h * cells, w * cells, 4)


def row_label_positions(h: int, w: int, max_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the patch rows and columns that get a row number: an even spread of at most
    ``max_labels`` patches that always includes the first and the last patch."""
    if max_labels < 2:
        return np.array([0]), np.array([0])
    ny = int(np.clip(round(np.sqrt(max_labels * h / w)), 1, h))
    nx = int(np.clip(max_labels // ny, 1, w))
    while ny * nx > max_labels and ny > 1:
        ny -= 1
    if ny == 1 and h > 1 and nx > 1:      # keep the last patch: use two label rows when possible
        ny, nx = 2, max(1, min(w, max_labels // 2))
    ys = np.unique(np.round(np.linspace(0, h - 1, ny)).astype(int)) if ny > 1 else np.array([0, h - 1])
    xs = np.unique(np.round(np.linspace(0, w - 1, nx)).astype(int)) if nx > 1 else np.array([0, w - 1])
    return np.unique(ys), np.unique(xs)


def _patch_ticks(ax: Axes, h: int, w: int) -> None:
    """Label the axes in patch units (every ``k`` patches, about eight ticks a side)."""
    wanted = max(h, w) / 8
    step = next((s for s in NICE_STEPS if s >= wanted), NICE_STEPS[-1])
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MultipleLocator(step * PATCH))
        axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value / PATCH:g}"))
    ax.set_xlabel("x (patch column, 14 px)")
    ax.set_ylabel("y (patch row)")


def _patch_px(ax: Axes, w: int) -> float:
    """Return the on-screen width of one patch in pixels (at the figure's dpi)."""
    return ax.bbox.width / max(w, 1)


def draw_image_with_lattice(ax: Axes, record: ImageRecord, *, lattice_step: int = 1, merge_lines: bool = True,
                            padding: bool = True, oversample: float = 1.5) -> dict[str, object]:
    """Draw the record's picture, its lattice (every ``lattice_step`` patches), merge groups and padding.

    Returns the artists by name: ``image``, ``lattice``, ``merge`` (or None), ``padding`` (or None).
    """
    t, h, w = record.grid_thw
    ax.set_xlim(0, w * PATCH)
    ax.set_ylim(h * PATCH, 0)
    ax.set_aspect("equal")
    picture, extent = _display_image(record, ax, oversample=oversample)
    image = ax.imshow(picture, extent=extent, interpolation="nearest", zorder=0, gid="image")
    ax.set_xlim(0, w * PATCH)
    ax.set_ylim(h * PATCH, 0)
    patch_px = _patch_px(ax, w) * lattice_step
    lattice_width = float(np.clip(0.08 * patch_px * 72.0 / ax.figure.dpi, 0.1, 0.7))
    lattice = LineCollection(lattice_segments(h, w, lattice_step), colors=LATTICE_COLOR, linewidths=lattice_width,
                             alpha=float(np.clip(patch_px / 10.0, 0.25, 0.7)), zorder=2, gid="patch-lattice")
    ax.add_collection(lattice, autolim=False)
    merge = None
    if merge_lines:
        merge = LineCollection(merge_segments(h, w), colors=MERGE_COLOR, linewidths=min(2.0, lattice_width * 2.2),
                               alpha=0.9, zorder=3, gid="merge-lines")
        ax.add_collection(merge, autolim=False)
    overlay = None
    if padding and record.pad_mask is not None and np.any(np.asarray(record.pad_mask) > 0):
        overlay = ax.imshow(padding_overlay(record.pad_mask), extent=(0, w * PATCH, h * PATCH, 0),
                            interpolation="nearest", zorder=1, gid="padding-overlay")
    return {"image": image, "lattice": lattice, "merge": merge, "padding": overlay}


def _whole_numbers(values: np.ndarray) -> bool:
    """Return whether ``values`` holds integers only (an integer dtype, or floats without a fraction)."""
    if values.dtype.kind in "iu" or values.size == 0:
        return True
    return values.dtype.kind == "f" and bool(np.all(np.mod(values, 1) == 0))


def _rows_to_patches(record: ImageRecord, rows: Iterable[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (rows, t, y, x) arrays for global rows (one int or an iterable) that must lie in this record's span."""
    t, h, w = record.grid_thw
    start, end = record.rows
    values = np.asarray([rows] if isinstance(rows, (int, np.integer)) else list(rows))
    if not _whole_numbers(values):
        raise LayoutLookupError(
            f"rows must be integers, got {values.dtype} values; pass global row "
            f"indices of image {record.index} ({record_label(record)}), inside [{start}, {end})")
    rows = values.astype(np.int64).reshape(-1)
    outside = (rows < start) | (rows >= end)
    if outside.any():
        raise LayoutLookupError(
            f"row {int(rows[outside][0])} is not a row of image {record.index} ({record_label(record)}), "
            f"whose rows are [{start}, {end}); pass rows inside that span"
        )
    frame, within = np.divmod(rows - start, h * w)
    y, x = np.divmod(within, w)
    return rows, frame, y, x


def _patches_to_rows(record: ImageRecord, patches: Iterable[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (rows, t, y, x) arrays for ``(y, x)`` patches of frame 0 (a list of pairs, or one pair)."""
    t, h, w = record.grid_thw
    expected = (f"pass patches of image {record.index} ({record_label(record)}) as (y, x) integer pairs, "
                "e.g. [(0, 0), (1, 2)]")
    try:
        yx = np.asarray(list(patches))
    except ValueError as exc:                    # ragged: pairs of different lengths
        raise LayoutLookupError(f"patches have different lengths; {expected}") from exc
    if yx.shape == (2,):                         # one (y, x) pair given on its own
        yx = yx[None]
    if yx.size == 0 and yx.ndim == 1:
        yx = yx.reshape(0, 2)
    if yx.ndim != 2 or yx.shape[1] != 2 or not _whole_numbers(yx):
        raise LayoutLookupError(f"patches form an array of shape {yx.shape} ({yx.dtype}); {expected}")
    yx = yx.astype(np.int64)
    bad = (yx[:, 0] < 0) | (yx[:, 0] >= h) | (yx[:, 1] < 0) | (yx[:, 1] >= w)
    if bad.any():
        y, x = (int(v) for v in yx[bad][0])
        raise LayoutLookupError(
            f"patch (y={y}, x={x}) is outside image {record.index} ({record_label(record)}) with grid "
            f"{t}×{h}×{w}; expected 0 <= y < {h} and 0 <= x < {w}"
        )
    rows = record.rows[0] + yx[:, 0] * w + yx[:, 1]
    return rows, np.zeros(len(yx), dtype=np.int64), yx[:, 0], yx[:, 1]


def patch_squares(y: np.ndarray, x: np.ndarray, *, inset: float = 0.0) -> np.ndarray:
    """Return ``[k, 4, 2]`` square polygons (pixel coordinates) of patches ``(y, x)``."""
    y0 = np.asarray(y, dtype=float) * PATCH + inset
    x0 = np.asarray(x, dtype=float) * PATCH + inset
    size = PATCH - 2 * inset
    verts = np.empty((len(y0), 4, 2))
    verts[:, 0] = np.stack([x0, y0], 1)
    verts[:, 1] = np.stack([x0 + size, y0], 1)
    verts[:, 2] = np.stack([x0 + size, y0 + size], 1)
    verts[:, 3] = np.stack([x0, y0 + size], 1)
    return verts


def draw_patch_grid(
    record_or_output: ImageRecord | ProcessorOutput,
    index: int = 0,
    *,
    ax: Axes | None = None,
    highlight_rows: Iterable[int] | None = None,
    highlight_patches: Iterable[Sequence[int]] | None = None,
    show_row_numbers: bool = True,
    max_labels: int = 48,
    max_highlight_labels: int = 24,
) -> Axes:
    """Return an Axes with one image on its patch grid.

    Shows the resized, padded image (a blank canvas when the record holds no pixels), the 14-px
    patch lattice, the 2x2 merge groups, the padding (fully padded patches dark, partly padded
    ones striped, counted in the legend), the global ``pixel_values`` row number on at most
    ``max_labels`` patches (always the first and the last), and highlighted patches — given as
    global rows (``highlight_rows``) or as ``(y, x)`` patches — labelled ``"row r → (y, x)"``.
    """
    record = record_of(record_or_output, index)
    t, h, w = record.grid_thw
    if ax is None:
        ax = _new_axes(w * PATCH, h * PATCH)
    draw_image_with_lattice(ax, record)
    start, end = record.rows

    if show_row_numbers:
        ys, xs = row_label_positions(h, w, max_labels)
        patch_px = _patch_px(ax, w)
        fontsize = float(np.clip(patch_px * 0.9, 6.0, 7.5))
        box = dict(boxstyle="round,pad=0.12", facecolor="white", edgecolor="none", alpha=0.75)
        for y in ys:
            for x in xs:
                row = start + int(y) * w + int(x)
                ax.text((x + 0.5) * PATCH, (y + 0.5) * PATCH, str(row), ha="center", va="center",
                        fontsize=fontsize, bbox=box, zorder=6, gid=f"row-label-{row}")

    chosen = []
    if highlight_rows is not None:
        chosen.append(_rows_to_patches(record, highlight_rows))
    if highlight_patches is not None:
        chosen.append(_patches_to_rows(record, highlight_patches))
    if chosen:
        rows, frames, ys_h, xs_h = (np.concatenate(parts) for parts in zip(*chosen))
        ax.add_collection(PolyCollection(patch_squares(ys_h, xs_h), facecolors=HIGHLIGHT_COLOR, alpha=0.55,
                                         edgecolors="#000000", linewidths=1.2, zorder=7, gid="highlight"),
                          autolim=False)
        box = dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=HIGHLIGHT_COLOR, alpha=0.9)
        ax.apply_aspect()
        anchors_px = ax.transData.transform(np.stack([(xs_h + 0.5) * PATCH, (ys_h + 0.5) * PATCH], 1))
        placed: list[tuple[float, float, float, float]] = []        # label boxes in display pixels
        px_per_pt = ax.figure.dpi / 72.0
        for k in range(min(len(rows), max_highlight_labels)):
            where = f"({frames[k]}, {ys_h[k]}, {xs_h[k]})" if t > 1 else f"({ys_h[k]}, {xs_h[k]})"
            text = f"row {rows[k]} → {where}"
            right_half = xs_h[k] > w / 2
            top_half = ys_h[k] < h / 2          # labels point away from the nearest top/bottom edge
            width, height = (v + 4 for v in _text_size(text, 7.5, ax.figure.dpi))
            dx, dy = (-10 if right_half else 10), (-10 if top_half else 10)
            for _ in range(max_highlight_labels):  # step away from the edge until the box is free
                x0 = anchors_px[k, 0] + dx * px_per_pt - (width if right_half else 0)
                y0 = anchors_px[k, 1] + dy * px_per_pt - (height if top_half else 0)
                box_px = (x0, y0, x0 + width, y0 + height)
                if not any(box_px[0] < b[2] and b[0] < box_px[2] and box_px[1] < b[3] and b[1] < box_px[3]
                           for b in placed):
                    break
                dy += (-1 if top_half else 1) * (height / px_per_pt + 2)
            placed.append(box_px)
            ax.annotate(text, xy=((xs_h[k] + 0.5) * PATCH, (ys_h[k] + 0.5) * PATCH),
                        xytext=(dx, dy), textcoords="offset points",
                        ha="right" if right_half else "left", va="top" if top_half else "bottom",
                        fontsize=7.5, bbox=box, zorder=8,
                        arrowprops=dict(arrowstyle="-", color="#000000", linewidth=0.7),
                        gid=f"highlight-label-{rows[k]}")
        if len(rows) > max_highlight_labels:
            ax.text(0.0, 1.0, f"{len(rows)} highlighted patches, first {max_highlight_labels} labelled",
                    transform=ax.transAxes, ha="left", va="bottom", fontsize=7)

    pad = np.asarray(record.pad_mask) if record.pad_mask is not None else np.zeros((h, w), np.int8)
    handles = [
        Line2D([], [], color="0.4", linewidth=0.8, label="patch 14 px"),
        Line2D([], [], color=MERGE_COLOR, linewidth=1.8, label="merge group 2×2 (one token)"),
        Patch(facecolor=PAD_FULL_RGBA, edgecolor="0.3",
              label=f"fully padding: {int((pad == PATCH_FULLY_PADDING).sum())} patches"),
        Patch(facecolor=PAD_PARTIAL_RGBA, edgecolor="0.3",
              label=f"partly padding (striped): {int((pad == PATCH_PARTLY_PADDING).sum())} patches"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=7, frameon=False)
    _patch_ticks(ax, h, w)
    frames_note = f", frame 0 of {t}" if t > 1 else ""
    resize = record.resize or {}
    size_note = ""
    if "new_width" in resize and "new_height" in resize:
        size_note = (f"\nresized {resize['new_width']}×{resize['new_height']} px"
                     f" + pad {resize.get('pad_width', 0)}×{resize.get('pad_height', 0)}"
                     f" (source {record.source_size[0]}×{record.source_size[1]})")
    ax.set_title(f"{record_label(record)}: grid {t}×{h}×{w}, rows [{start}, {end}) — {end - start} patches, "
                 f"{record.tokens} tokens{frames_note}{size_note}", fontsize=9)
    return ax


def _default_link_patches(h: int, w: int) -> list[tuple[int, int]]:
    """Return a few telling patches: the corners, the start of the second patch row, the centre."""
    chosen = [(0, 0), (0, w - 1), (min(1, h - 1), 0), (h // 2, w // 2), (h - 1, 0), (h - 1, w - 1)]
    return list(dict.fromkeys(chosen))


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
    image's own rows ``[start, end)`` (row-major: ``row = start + y*w + x``), and below that the
    whole batch's row track with this image's span zoomed out of it. Each chosen row (global row
    numbers, default: corners, second patch row and centre) is linked from its patch to its
    position on the track by one LineCollection (``gid="row-links"``). Given a lone record and no
    layout, the batch track shows only where that record's rows sit.
    """
    record = record_of(record_or_output, index)
    if layout is None:
        layout = record_or_output if isinstance(record_or_output, ProcessorOutput) else None
    if layout is None:      # a lone record: the batch track shows where its own rows sit
        batch = BatchLayout([ImageSpan(record.index, record_label(record), tuple(record.grid_thw),
                                       tuple(record.rows), tuple(record.token_span))])
    else:
        batch = layout_of(layout)
        if not 0 <= record.index < len(batch):
            raise LayoutLookupError(
                f"image {record.index} ({record_label(record)}) is outside the layout's {len(batch)} images; "
                "pass the layout of the batch this record came from")
        span = batch.spans[record.index]
        if span.grid != tuple(record.grid_thw) or span.rows != tuple(record.rows):
            raise LayoutLookupError(
                f"image {record.index} ({record_label(record)}) has grid {'×'.join(map(str, record.grid_thw))} and "
                f"rows {list(record.rows)}, but the layout's image {record.index} has grid {span.grid_text} and "
                f"rows {list(span.rows)}; pass the layout of the batch this record came from"
            )
    t, h, w = record.grid_thw
    start, end = (int(v) for v in record.rows)
    width, height = w * PATCH, h * PATCH
    if rows is None:
        rows_arr, frames, ys, xs = _patches_to_rows(record, _default_link_patches(h, w))
    else:
        rows_arr, frames, ys, xs = _rows_to_patches(record, rows)
    gap = 0.14 * max(height, width * 0.35)
    track_h = 0.06 * max(height, width * 0.35)
    units_per_pt = 1.04 * width / (7.0 * 72.0)      # when the figure is width-bound (wide images)
    label_room = max(gap, (4 * (LINE_HEIGHT_EM * 6.5 + 2) + 6) * units_per_pt)
    track_y = height + gap
    batch_y = track_y + track_h + label_room
    bottom = batch_y + track_h * 0.7 + 12 * units_per_pt

    if ax is None:
        ax = _new_axes(1.04 * width, bottom + 0.25 * gap + 0.02 * height, top_in=0.5, bottom_in=0.6)
    # Fix the frame first so the image is downsampled for the final on-screen size.
    ax.set_xlim(-0.02 * width, 1.02 * width)
    ax.set_ylim(bottom + 0.25 * gap, -0.02 * height)
    ax.set_aspect("equal")
    draw_image_with_lattice(ax, record, merge_lines=max(h, w) <= 128)
    ax.set_xlim(-0.02 * width, 1.02 * width)
    ax.set_ylim(bottom + 0.25 * gap, -0.02 * height)

    # The image's own rows, then the batch.
    patches = end - start
    draw_row_track(ax, [(0, patches)], y=track_y, height=track_h, style_indices=[record.index],
                   x_scale=width / max(patches, 1), gid_prefix="image-rows")
    ax.text(width / 2, track_y + track_h / 2, f"rows [{start}, {end}) of image {record.index} · row = {start} + y·{w} + x",
            ha="center", va="center", fontsize=7.5,
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85), zorder=4)
    total = max(batch.total_rows, 1)
    draw_row_track(ax, [s.rows for s in batch.spans], y=batch_y, height=track_h * 0.7,
                   style_indices=[s.index for s in batch.spans], x_scale=width / total, gid_prefix="batch-rows")
    zoom = np.array([[(start * width / total, batch_y), (0.0, track_y + track_h)],
                     [(end * width / total, batch_y), (width, track_y + track_h)]])
    ax.add_collection(LineCollection(zoom, colors="0.35", linewidths=0.8, linestyles="dotted", gid="zoom-lines"),
                      autolim=False)
    batch_text = (f"whole batch: {len(batch)} images, rows [0, {batch.total_rows})" if layout is not None
                  else f"the batch: rows [0, {end}) or more; only image {record.index} is known here")
    ax.text(width / 2, bottom + 0.05 * gap, batch_text, ha="center", va="top", fontsize=7.5)

    # Links: patch centre → row position on the image's track.
    centres = np.stack([(xs + 0.5) * PATCH, (ys + 0.5) * PATCH], 1)
    positions = (rows_arr - start + 0.5) * width / max(patches, 1)
    targets = np.stack([positions, np.full(len(positions), track_y)], 1)
    ax.add_collection(LineCollection(np.stack([centres, targets], 1), colors=LINK_COLOR, linewidths=1.1,
                                     zorder=6, gid="row-links"), autolim=False)
    ticks = np.stack([np.stack([positions, np.full(len(positions), track_y)], 1),
                      np.stack([positions, np.full(len(positions), track_y + track_h)], 1)], 1)
    ax.add_collection(LineCollection(ticks, colors=LINK_COLOR, linewidths=1.6, zorder=6, gid="row-ticks"),
                      autolim=False)
    ax.add_collection(PolyCollection(patch_squares(ys, xs), facecolors=color_for(4), alpha=0.6,
                                     edgecolors="#000000", linewidths=0.9, zorder=7, gid="linked-patches"),
                      autolim=False)
    texts = [f"row {rows_arr[k]} ← ({frames[k]}, {ys[k]}, {xs[k]})" if t > 1 else f"row {rows_arr[k]} ← ({ys[k]}, {xs[k]})"
             for k in range(len(rows_arr))]
    x0, x1 = ax.get_xlim()
    placements, _ = plan_labels([(p, p) for p in positions], texts,
                                x_to_px=lambda v: (v - x0) / (x1 - x0) * ax.bbox.width,
                                axes_width_px=ax.bbox.width, track_height_px=0.0, fontsize=6.5, dpi=ax.figure.dpi)
    for k, place in enumerate(placements):
        ax.annotate(place.text, xy=(positions[k], track_y + track_h), ha=place.ha, va="top",
                    xytext=(place.dx_pt, -2 - place.level * (LINE_HEIGHT_EM * 6.5 + 2)), textcoords="offset points",
                    fontsize=6.5, color=LINK_COLOR, zorder=8, gid=f"link-label-{rows_arr[k]}")
    _patch_ticks(ax, h, w)
    ax.set_yticks([t_ for t_ in ax.get_yticks() if 0 <= t_ <= height])
    ax.set_title(f"{record_label(record)}: grid {t}×{h}×{w} → rows [{start}, {end}) of pixel_values", fontsize=9)
    return ax
