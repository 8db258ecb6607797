"""One image on its patch grid: the 14-px lattice, the 2x2 merge groups, padding and row numbers
(:func:`draw_patch_grid`; the shared drawing helpers are used by grid_rows.py and output.py too).

Everything is drawn with a handful of fast artists whatever the grid size (up to 512 patches a
side): one ``imshow`` of the image (downsampled to the Axes' pixel size first), one LineCollection
for the lattice (``(h+1)+(w+1)`` full-length lines, ``gid="patch-lattice"``), one for the merge
groups (``gid="merge-lines"``), one ``imshow`` of an RGBA padding overlay (``gid="padding-overlay"``),
and one PolyCollection for highlighted patches (``gid="highlight"``). Coordinates are image pixels,
``y`` pointing down, so patch ``(y, x)`` covers ``[14x, 14x+14) × [14y, 14y+14)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy
from PIL import Image

from ..preprocess.config import get_config
from ..preprocess.layout import LayoutLookupError
from ..preprocess.records import (
    PATCH_FULLY_PADDING,
    PATCH_PARTLY_PADDING,
    ImageRecord,
    ProcessorOutput,
    source_label,
)
from .axes import PATCH, patch_ticks, picture_axes
from .palette import (
    HIGHLIGHT_COLOR,
    LATTICE_COLOR,
    MERGE_COLOR,
    PAD_FULL_RGBA,
    PAD_PARTIAL_RGBA,
)
from .rows import text_size_px

MERGE = get_config().merge_kernel_size  # patches per merge group side, the default processor config's
OVERLAY_SUBPIXELS = 4  # padding overlay resolution: texture cells per patch side
BLANK_GRAY = 235
LABEL_FONT = 8.5  # highlight labels, legend and notes of draw_patch_grid
ROW_FONT_MIN, ROW_FONT_MAX = 8.0, 9.0  # row numbers on patches: bigger on bigger patches
LEGEND_DROP_PT = 36.0  # the legend hangs this far below the Axes, under the tick labels and x label


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


def _display_image(
    record: ImageRecord, ax: Axes, *, oversample: float = 1.5
) -> tuple[np.ndarray, tuple[float, float, float, float]]:
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
    stripes = np.where((((yy + xx) % cells) < cells // 2)[..., None], tint, faint)  # [cells, cells, 4]
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
    if ny == 1 and h > 1 and nx > 1:  # keep the last patch: use two label rows when possible
        ny, nx = 2, max(1, min(w, max_labels // 2))
    ys = np.unique(np.round(np.linspace(0, h - 1, ny)).astype(int)) if ny > 1 else np.array([0, h - 1])
    xs = np.unique(np.round(np.linspace(0, w - 1, nx)).astype(int)) if nx > 1 else np.array([0, w - 1])
    return np.unique(ys), np.unique(xs)


def _boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Return whether two ``(x0, y0, x1, y1)`` boxes overlap."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _separated_labels(
    ax: Axes, start: int, w: int, ys: np.ndarray, xs: np.ndarray, fontsize: float
) -> tuple[list[tuple[int, int]], list[tuple[float, float, float, float]]]:
    """Return the ``(y, x)`` patches of the grid ``ys × xs`` whose row numbers get drawn, and their
    label boxes in display pixels: the first and the last patch always (listed first), then every
    other one (in raster order) whose box would not touch a box already kept, so row numbers never
    overlap however small the patches are."""
    dpi = ax.figure.dpi
    candidates = [(int(y), int(x)) for y in ys for x in xs]
    first, last = candidates[0], candidates[-1]
    ordered = [first] + ([last] if last != first else []) + list(candidates[1:-1])
    centres = ax.transData.transform([((x + 0.5) * PATCH, (y + 0.5) * PATCH) for y, x in ordered])
    kept: list[tuple[int, int]] = []
    boxes: list[tuple[float, float, float, float]] = []
    pad = 0.25 * fontsize * dpi / 72.0  # the text box's padding, on each side
    for k, (y, x) in enumerate(ordered):
        width, height = text_size_px(str(start + y * w + x), fontsize, dpi)
        cx, cy = centres[k]
        box = (cx - width / 2 - pad, cy - height / 2 - pad, cx + width / 2 + pad, cy + height / 2 + pad)
        if k < 2 or not any(_boxes_overlap(box, b) for b in boxes):
            kept.append((y, x))
            boxes.append(box)
    return kept, boxes


def _patch_px(ax: Axes, w: int) -> float:
    """Return the on-screen width of one patch in pixels (at the figure's dpi)."""
    return ax.bbox.width / max(w, 1)


def draw_image_with_lattice(
    ax: Axes,
    record: ImageRecord,
    *,
    lattice_step: int = 1,
    merge_lines: bool = True,
    padding: bool = True,
    oversample: float = 1.5,
) -> dict[str, object]:
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
    lattice = LineCollection(
        cast(Sequence[np.ndarray], lattice_segments(h, w, lattice_step)),  # stubs: a Sequence; arrays work
        colors=LATTICE_COLOR,
        linewidths=lattice_width,
        alpha=float(np.clip(patch_px / 10.0, 0.25, 0.7)),
        zorder=2,
        gid="patch-lattice",
    )
    ax.add_collection(lattice, autolim=False)
    merge = None
    if merge_lines:
        merge = LineCollection(
            cast(Sequence[np.ndarray], merge_segments(h, w)),
            colors=MERGE_COLOR,
            linewidths=min(2.0, lattice_width * 2.2),
            alpha=0.9,
            zorder=3,
            gid="merge-lines",
        )
        ax.add_collection(merge, autolim=False)
    overlay = None
    if padding and record.pad_mask is not None and np.any(np.asarray(record.pad_mask) > 0):
        overlay = ax.imshow(
            padding_overlay(record.pad_mask),
            extent=(0, w * PATCH, h * PATCH, 0),
            interpolation="nearest",
            zorder=1,
            gid="padding-overlay",
        )
    return {"image": image, "lattice": lattice, "merge": merge, "padding": overlay}


def _whole_numbers(values: np.ndarray) -> bool:
    """Return whether ``values`` holds integers only (an integer dtype, or floats without a fraction)."""
    if values.dtype.kind in "iu" or values.size == 0:
        return True
    return values.dtype.kind == "f" and bool(np.all(np.mod(values, 1) == 0))


def rows_to_patches(record: ImageRecord, rows: Iterable[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (rows, t, y, x) arrays for global rows (one int or an iterable) that must lie in this record's span."""
    t, h, w = record.grid_thw
    start, end = record.rows
    values = np.asarray([rows] if isinstance(rows, (int, np.integer)) else list(rows))
    if not _whole_numbers(values):
        raise LayoutLookupError(
            f"rows must be integers, got {values.dtype} values; pass global row "
            f"indices of image {record.index} ({record_label(record)}), inside [{start}, {end})"
        )
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


def patches_to_rows(
    record: ImageRecord, patches: Iterable[Sequence[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (rows, t, y, x) arrays for ``(y, x)`` patches of frame 0 (a list of pairs, or one pair)."""
    t, h, w = record.grid_thw
    expected = (
        f"pass patches of image {record.index} ({record_label(record)}) as (y, x) integer pairs, e.g. [(0, 0), (1, 2)]"
    )
    try:
        yx = np.asarray(list(patches))
    except ValueError as exc:  # ragged: pairs of different lengths
        raise LayoutLookupError(f"patches have different lengths; {expected}") from exc
    if yx.shape == (2,):  # one (y, x) pair given on its own
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
    corner_xs = np.stack([x0, x0 + size, x0 + size, x0], 1)
    corner_ys = np.stack([y0, y0, y0 + size, y0 + size], 1)
    return np.stack([corner_xs, corner_ys], 2)


def _free_label_spot(
    anchor: np.ndarray,
    width: float,
    height: float,
    *,
    right_first: bool,
    top_first: bool,
    taken: Sequence[tuple[float, float, float, float]],
    frame: Sequence[float],
    px_per_pt: float,
    steps: int,
) -> tuple[bool, bool, float, float, tuple[float, float, float, float]]:
    """Return ``(right_half, top_half, dx_pt, dy_pt, box_px)`` for a highlight label of ``width`` ×
    ``height`` px pointing at ``anchor`` (display px): first away from the nearest left/right and
    top/bottom edges, then stepping further along either way and trying the other side, until its
    box is inside ``frame`` and clear of every ``taken`` box (else the first choice)."""
    first: tuple[bool, bool, float, float, tuple[float, float, float, float]] | None = None
    for step in range(steps):
        for right_half in (right_first, not right_first):
            for top_half in (top_first, not top_first):
                dx = -10.0 if right_half else 10.0
                dy = (-10.0 if top_half else 10.0) + (-1 if top_half else 1) * step * (height / px_per_pt + 2)
                x0 = anchor[0] + dx * px_per_pt - (width if right_half else 0)
                y0 = anchor[1] + dy * px_per_pt - (height if top_half else 0)
                box = (x0, y0, x0 + width, y0 + height)
                spot = (right_half, top_half, dx, dy, box)
                first = first or spot
                inside = box[0] >= frame[0] and box[2] <= frame[2] and box[1] >= frame[1] and box[3] <= frame[3]
                if inside and not any(_boxes_overlap(box, b) for b in taken):
                    return spot
    assert first is not None, "steps must be at least 1"
    return first


def _chosen_patches(
    record: ImageRecord, highlight_rows: Iterable[int] | None, highlight_patches: Iterable[Sequence[int]] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Return the (rows, t, y, x) arrays of the highlighted patches (rows first, then patches), or None."""
    chosen = []
    if highlight_rows is not None:
        chosen.append(rows_to_patches(record, highlight_rows))
    if highlight_patches is not None:
        chosen.append(patches_to_rows(record, highlight_patches))
    if not chosen:
        return None
    rows, frames, ys, xs = (np.concatenate(parts) for parts in zip(*chosen))
    return rows, frames, ys, xs


def _draw_highlight_labels(
    ax: Axes,
    record: ImageRecord,
    chosen: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    row_boxes: list[tuple[float, float, float, float]],
    max_highlight_labels: int,
) -> list[tuple[float, float, float, float]]:
    """Draw the first ``max_highlight_labels`` highlight labels; return their boxes in display pixels.

    The labels avoid each other and the first and last row numbers (always shown).
    """
    t, h, w = record.grid_thw
    rows, frames, ys_h, xs_h = chosen
    box = dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=HIGHLIGHT_COLOR, alpha=0.9)
    anchors_px = ax.transData.transform(np.stack([(xs_h + 0.5) * PATCH, (ys_h + 0.5) * PATCH], 1))
    placed: list[tuple[float, float, float, float]] = list(row_boxes[:2])  # label boxes in display pixels
    px_per_pt = ax.figure.dpi / 72.0
    for k in range(min(len(rows), max_highlight_labels)):
        where = f"({frames[k]}, {ys_h[k]}, {xs_h[k]})" if t > 1 else f"({ys_h[k]}, {xs_h[k]})"
        text = f"row {rows[k]} → {where}"
        width, height = (v + 6 for v in text_size_px(text, LABEL_FONT, ax.figure.dpi))
        right_half, top_half, dx, dy, box_px = _free_label_spot(
            anchors_px[k],
            width,
            height,
            right_first=xs_h[k] > w / 2,
            top_first=ys_h[k] < h / 2,
            taken=placed,
            frame=ax.bbox.extents,
            px_per_pt=px_per_pt,
            steps=2 * max_highlight_labels,
        )
        placed.append(box_px)
        ax.annotate(
            text,
            xy=((xs_h[k] + 0.5) * PATCH, (ys_h[k] + 0.5) * PATCH),
            xytext=(dx, dy),
            textcoords="offset points",
            ha="right" if right_half else "left",
            va="top" if top_half else "bottom",
            fontsize=LABEL_FONT,
            bbox=box,
            zorder=8,
            arrowprops=dict(arrowstyle="-", color="#000000", linewidth=0.7),
            gid=f"highlight-label-{rows[k]}",
        )
    return placed[len(row_boxes[:2]) :]


def _draw_highlights(
    ax: Axes,
    record: ImageRecord,
    chosen: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    row_labels: list[tuple[int, int]],
    row_boxes: list[tuple[float, float, float, float]],
    max_highlight_labels: int,
) -> tuple[list[tuple[int, int]], str]:
    """Draw the highlighted patches and their labels; return the row-number patches that stay clear of
    the labels (the first and last always stay) and the title's note on unlabelled highlights."""
    rows, _frames, ys_h, xs_h = chosen
    ax.add_collection(
        PolyCollection(
            cast(Sequence[np.ndarray], patch_squares(ys_h, xs_h)),
            facecolors=HIGHLIGHT_COLOR,
            alpha=0.55,
            edgecolors="#000000",
            linewidths=1.2,
            zorder=7,
            gid="highlight",
        ),
        autolim=False,
    )
    # The other row numbers make way for the highlight labels.
    highlight_boxes = _draw_highlight_labels(ax, record, chosen, row_boxes, max_highlight_labels)
    keep = [k for k, b in enumerate(row_boxes) if k < 2 or not any(_boxes_overlap(b, o) for o in highlight_boxes)]
    note = ""
    if len(rows) > max_highlight_labels:
        note = f"\n{len(rows)} highlighted patches, first {max_highlight_labels} labelled"
    return [row_labels[k] for k in keep], note


def _draw_row_numbers(ax: Axes, row_labels: list[tuple[int, int]], start: int, w: int, row_font: float) -> None:
    """Draw the global row number on each patch ``(y, x)`` of ``row_labels``; returns nothing."""
    text_box = dict(boxstyle="round,pad=0.12", facecolor="white", edgecolor="none", alpha=0.75)
    for y, x in sorted(row_labels):
        row = start + int(y) * w + int(x)
        ax.text(
            (x + 0.5) * PATCH,
            (y + 0.5) * PATCH,
            str(row),
            ha="center",
            va="center",
            fontsize=row_font,
            bbox=text_box,
            zorder=6,
            gid=f"row-label-{row}",
        )


def _draw_patch_legend(ax: Axes, record: ImageRecord) -> None:
    """Draw the legend of lattice, merge groups and padding counts under the x label; returns nothing."""
    t, h, w = record.grid_thw
    pad = np.asarray(record.pad_mask) if record.pad_mask is not None else np.zeros((h, w), np.int8)
    handles = [
        Line2D([], [], color="0.4", linewidth=0.8, label=f"patch {PATCH} px"),
        Line2D([], [], color=MERGE_COLOR, linewidth=1.8, label=f"merge group {MERGE}×{MERGE} (one token)"),
        Patch(
            facecolor=PAD_FULL_RGBA,
            edgecolor="0.3",
            label=f"fully padding: {int((pad == PATCH_FULLY_PADDING).sum())} patches",
        ),
        Patch(
            facecolor=PAD_PARTIAL_RGBA,
            edgecolor="0.3",
            label=f"partly padding (striped): {int((pad == PATCH_PARTLY_PADDING).sum())} patches",
        ),
    ]
    # Under the x label. offset_copy reads only fig.dpi_scale_trans, which a SubFigure has too; its stub
    # asks for a Figure.
    below = offset_copy(ax.transAxes, fig=ax.figure, y=-LEGEND_DROP_PT, units="points")  # type: ignore[arg-type]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=below,
        ncol=2,
        fontsize=LABEL_FONT,
        frameon=False,
    )


def _patch_grid_title(record: ImageRecord, note: str) -> str:
    """Return the title of draw_patch_grid: grid, rows, patches, tokens, frames, resize and ``note``."""
    t, h, w = record.grid_thw
    start, end = record.rows
    frames_note = f", frame 0 of {t}" if t > 1 else ""
    resize = record.resize
    size_note = (
        f"\nresized {resize.new_width}×{resize.new_height} px + pad {resize.pad_width}×{resize.pad_height}"
        f" (source {record.source_size[0]}×{record.source_size[1]})"
    )
    return (
        f"{record_label(record)}: grid {t}×{h}×{w}, rows [{start}, {end}) — {end - start} patches, "
        f"{record.num_tokens} tokens{frames_note}{size_note}{note}"
    )


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
        ax = picture_axes(w * PATCH, h * PATCH, bottom_in=1.15)
    draw_image_with_lattice(ax, record)
    start, end = record.rows

    ax.apply_aspect()
    row_labels: list[tuple[int, int]] = []  # (y, x) of the patches that show their row number
    row_boxes: list[tuple[float, float, float, float]] = []
    row_font = float(np.clip(_patch_px(ax, w) * 0.9, ROW_FONT_MIN, ROW_FONT_MAX))
    if show_row_numbers:
        ys, xs = row_label_positions(h, w, max_labels)
        row_labels, row_boxes = _separated_labels(ax, start, w, ys, xs, row_font)

    chosen = _chosen_patches(record, highlight_rows, highlight_patches)
    note = ""
    if chosen is not None:
        row_labels, note = _draw_highlights(ax, record, chosen, row_labels, row_boxes, max_highlight_labels)
    _draw_row_numbers(ax, row_labels, start, w, row_font)
    _draw_patch_legend(ax, record)
    patch_ticks(ax, h, w)
    ax.set_title(_patch_grid_title(record, note), fontsize=9, pad=12)
    return ax
