"""Row tracks: the packed ``pixel_values`` rows (and merged tokens) drawn as labelled horizontal spans.

:func:`draw_row_track` is the reusable primitive: one horizontal track of ``[start, end)`` spans in
an existing Axes, every span filled from the Okabe–Ito palette, odd spans hatched with dashed edges
(so colour is never the only signal), each with a text label — inside the span when it fits, else
above it on staggered levels with a leader line. :func:`draw_row_spans` stacks the tracks of a
:class:`~kimi_viz.preprocess.layout.BatchLayout`: expected rows, optionally produced rows with the first
divergence marked, and merged tokens.

Artists carry ``gid`` values so code (and tests) can find them: ``"<prefix>-label-<i>"`` for span
labels, ``"<prefix>-fills-even"`` / ``"<prefix>-fills-odd"`` for fills, ``"divergence-marker"`` and
``"divergence-label"`` for the first divergence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.text import Text

from ..preprocess.layout import BatchLayout, LayoutComparison, compare_layouts, layout_of
from ..preprocess.records import ImageSpan
from .palette import DIVERGENCE_COLOR, color_for, edge_style_for, hatch_for

if TYPE_CHECKING:
    from ..preprocess.records import ProcessorOutput

CHAR_WIDTH_EM = 0.62  # a generous average glyph width of DejaVu Sans (digits are 0.636 em)
LINE_HEIGHT_EM = 1.25
LABEL_GAP_PT = 4.0  # between a track's top edge and its first level of outside labels
LABEL_PAD_PX = 4.0
LABEL_FONT = 8.5  # span labels (pt); track names are 1 pt larger, the title 3 pt


@dataclass
class LabelPlacement:
    """Where one span label goes: ``inside`` the span, or outside on staggered ``level``.

    An outside label starts at the span's middle and runs away from the nearer Axes edge
    (``ha`` "left" in the left half, "right" in the right half), shifted by ``dx_pt`` only when it
    would leave the Axes.
    """

    inside: bool
    level: int = 0
    dx_pt: float = 0.0
    text: str = ""
    ha: str = "center"


@dataclass
class TrackArtists:
    """The artists :func:`draw_row_track` added, and how its labels were placed."""

    fills: list[PolyCollection]
    labels: list[Text | None]
    placements: list[LabelPlacement | None]
    levels: int  # staggered outside-label levels used (0: all inside)
    level_height_pt: float


def text_size_px(text: str, fontsize: float, dpi: float) -> tuple[float, float]:
    """Return an estimate of (width, height) in pixels of ``text`` in DejaVu Sans."""
    lines = text.split("\n")
    em = fontsize * dpi / 72.0
    return max(len(line) for line in lines) * CHAR_WIDTH_EM * em, len(lines) * LINE_HEIGHT_EM * em


def clip_text(text: str, limit: int) -> str:
    """Return ``text``, cut to ``limit`` characters with an ellipsis when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plan_labels(
    spans: Sequence[tuple[float, float]],
    labels: Sequence[str | None],
    *,
    x_to_px,
    axes_width_px: float,
    track_height_px: float,
    fontsize: float,
    dpi: float,
    reserved: Sequence[tuple[float, float]] = (),
) -> tuple[list[LabelPlacement | None], int]:
    """Return a placement per label and the number of outside levels used.

    ``reserved`` are pixel intervals already taken on the first outside level (a track's name written
    there): no label is placed over them.

    A label goes inside its span when its estimated box fits the span's on-screen width and the
    track's height. Otherwise it goes outside on one line, on the lowest level where it does not
    overlap another outside label. Labels in the left half are placed right to left (so the
    leftmost span gets the highest level) and those in the right half left to right: every leader
    line then runs straight to its label without crossing a nearer one.
    """
    placements: list[LabelPlacement | None] = [None] * len(labels)
    outside: list[tuple[int, float, float, str]] = []  # (index, middle px, width px, one-line text)
    for i, ((start, end), text) in enumerate(zip(spans, labels)):
        if text is None:
            continue
        left, right = x_to_px(start), x_to_px(end)
        width, height = text_size_px(text, fontsize, dpi)
        if width + 2 * LABEL_PAD_PX <= right - left and height + LABEL_PAD_PX <= track_height_px:
            placements[i] = LabelPlacement(True, text=text)
            continue
        line = "  ".join(text.split("\n"))
        outside.append((i, (left + right) / 2, text_size_px(line, fontsize, dpi)[0], line))

    half = axes_width_px / 2
    left_group = sorted((o for o in outside if o[1] < half), key=lambda o: -o[1])
    right_group = sorted((o for o in outside if o[1] >= half), key=lambda o: o[1])
    levels: list[list[tuple[float, float]]] = [list(reserved)] if reserved else []  # occupied px per level
    for group, ha in ((left_group, "left"), (right_group, "right")):
        for i, middle, width, line in group:
            lo = middle if ha == "left" else middle - width
            shift = min(0.0, axes_width_px - (lo + width)) if ha == "left" else max(0.0, -lo)
            lo += shift
            hi = lo + width
            level = next(
                (
                    k
                    for k, used in enumerate(levels)
                    if all(hi + LABEL_PAD_PX <= a or lo >= b + LABEL_PAD_PX for a, b in used)
                ),
                len(levels),
            )
            if level == len(levels):
                levels.append([])
            levels[level].append((lo, hi))
            placements[i] = LabelPlacement(False, level, shift * 72.0 / dpi, line, ha)
    return placements, sum(1 for used in levels if any(u not in reserved for u in used))


def fit_labels(
    spans: Sequence[tuple[float, float]],
    labels: Sequence[str | None],
    *,
    max_levels: int,
    **geometry,
) -> tuple[list[str | None], int]:
    """Return labels thinned so their outside levels fit ``max_levels``, and the levels used.

    Labels that fit inside their span are kept whole. When the outside ones need more than
    ``max_levels`` levels they become the image number alone (the text before the first ``:``), and
    if that is still too many, only every k-th outside label is kept (the first and last always).
    ``geometry`` is passed to :func:`plan_labels`.
    """
    labels = list(labels)
    placements, levels = plan_labels(spans, labels, **geometry)
    if levels <= max_levels:
        return labels, levels
    short = [
        text if text is None or place is None or place.inside else text.split(":", 1)[0].split("\n", 1)[0]
        for text, place in zip(labels, placements)
    ]
    placements, levels = plan_labels(spans, short, **geometry)
    outside = [i for i, place in enumerate(placements) if place is not None and not place.inside]
    final, step = short, 1
    while levels > max_levels and step < len(outside):
        step += 1
        dropped = set(outside) - set(outside[::step]) - {outside[-1]}
        final = [None if i in dropped else text for i, text in enumerate(short)]
        _, levels = plan_labels(spans, final, **geometry)
    return final, levels


def _x_to_px(ax: Axes, x_scale: float, x_offset: float):
    """Return a function mapping a data x (before scaling) to pixels from the Axes' left edge."""
    x0, x1 = ax.get_xlim()
    width = ax.bbox.width

    def convert(x: float) -> float:
        return (x * x_scale + x_offset - x0) / (x1 - x0) * width

    return convert


def _track_height_px(ax: Axes, height: float) -> float:
    y0, y1 = ax.get_ylim()
    return abs(height / (y1 - y0)) * ax.bbox.height


def _track_polygons(
    spans: Sequence[tuple[float, float]], *, y: float, height: float, x_scale: float, x_offset: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the spans' on-screen starts and ends (data units) and their ``[n, 4, 2]`` rectangles."""
    n = len(spans)
    bounds = np.asarray(spans, dtype=float).reshape(n, 2)
    starts = bounds[:, 0] * x_scale + x_offset
    ends = bounds[:, 1] * x_scale + x_offset
    verts = np.empty((n, 4, 2))
    verts[:, 0, 0] = verts[:, 3, 0] = starts
    verts[:, 1, 0] = verts[:, 2, 0] = ends
    verts[:, :2, 1] = y
    verts[:, 2:, 1] = y + height
    return starts, ends, verts


def _draw_track_fills(
    ax: Axes, verts: np.ndarray, styles: list[int], fills: list[str], *, zorder: float, gid_prefix: str
) -> list[PolyCollection]:
    """Draw the span rectangles as two PolyCollections (even and odd style index); return those drawn."""
    collections = []
    for parity in (0, 1):
        chosen = [i for i in range(len(styles)) if styles[i] % 2 == parity]
        if not chosen:
            continue
        collection = PolyCollection(
            cast(Sequence[np.ndarray], verts[chosen]),  # stubs: a Sequence; arrays work
            facecolors=[fills[i] for i in chosen],
            edgecolors="#000000",
            linewidths=0.8,
            linestyles=edge_style_for(parity),
            hatch=hatch_for(parity) or None,
            zorder=zorder,
            gid=f"{gid_prefix}-fills-{'even' if parity == 0 else 'odd'}",
        )
        ax.add_collection(collection, autolim=False)
        collections.append(collection)
    return collections


def _draw_track_label(
    ax: Axes,
    place: LabelPlacement,
    middle: float,
    *,
    y: float,
    height: float,
    fontsize: float,
    level_height_pt: float,
    zorder: float,
    gid: str,
) -> Text:
    """Draw one span's label, inside the span or above the track with a leader line; return its Text."""
    box = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85)
    if place.inside:
        return ax.text(
            middle,
            y + height / 2,
            place.text,
            ha="center",
            va="center",
            fontsize=fontsize,
            bbox=box,
            zorder=zorder + 1,
            gid=gid,
        )
    return ax.annotate(
        place.text,
        xy=(middle, y + height),
        xytext=(place.dx_pt, LABEL_GAP_PT + place.level * level_height_pt),
        textcoords="offset points",
        ha=place.ha,
        va="bottom",
        fontsize=fontsize,
        bbox=box,
        arrowprops=dict(
            arrowstyle="-",
            color="0.25",
            linewidth=0.6,
            shrinkA=0,
            shrinkB=0,
            relpos=(0.0, 0.0) if place.ha == "left" else (1.0, 0.0),
        ),
        zorder=zorder + 1,
        annotation_clip=False,
        gid=gid,
    )


def draw_row_track(
    ax: Axes,
    spans: Sequence[tuple[float, float]],
    *,
    y: float,
    height: float,
    labels: Sequence[str | None] | None = None,
    style_indices: Sequence[int] | None = None,
    colors: Sequence[str] | None = None,
    x_scale: float = 1.0,
    x_offset: float = 0.0,
    fontsize: float = LABEL_FONT,
    gid_prefix: str = "span",
    zorder: float = 2.0,
    name_px: float = 0.0,
) -> TrackArtists:
    """Draw one horizontal track of ``[start, end)`` spans into ``ax`` and return its artists.

    Parameters
    ----------
    spans: ``(start, end)`` per span, in row (or token) units; drawn at ``x = value * x_scale + x_offset``.
    y, height: the track's bottom edge and height, in data units.
    labels: one text per span (``None`` for no label); multi-line texts are allowed.
    style_indices: the palette index of each span (default ``0..n-1``): fill colour, and the
        alternation of hatch (none / ``///``) and edge style (solid / dashed).
    colors: explicit fill colours, overriding the palette.

    Set the Axes' x and y limits *before* calling: a label goes inside its span only when it fits
    the span's on-screen size, otherwise above the track on staggered levels with a leader line.
    The fills are two PolyCollections (even and odd style index); labels get
    ``gid=f"{gid_prefix}-label-{i}"``. ``name_px`` is the width of a track name written from ``x = 0`` on
    the first outside level: no label covers it.
    """
    n = len(spans)
    starts, ends, verts = _track_polygons(spans, y=y, height=height, x_scale=x_scale, x_offset=x_offset)
    styles = list(range(n)) if style_indices is None else [int(v) for v in style_indices]
    fills = [colors[i] if colors is not None else color_for(styles[i]) for i in range(n)]
    collections = _draw_track_fills(ax, verts, styles, fills, zorder=zorder, gid_prefix=gid_prefix)

    texts: list[Text | None] = [None] * n
    label_list = list(labels) if labels is not None else [None] * n
    placements, levels = plan_labels(
        [tuple(b) for b in np.asarray(spans, dtype=float).reshape(n, 2)],
        label_list,
        x_to_px=_x_to_px(ax, x_scale, x_offset),
        axes_width_px=ax.bbox.width,
        track_height_px=_track_height_px(ax, height),
        fontsize=fontsize,
        dpi=ax.figure.dpi,
        reserved=[(_x_to_px(ax, 1.0, 0.0)(0.0), _x_to_px(ax, 1.0, 0.0)(0.0) + name_px)] if name_px else (),
    )
    level_height_pt = LINE_HEIGHT_EM * fontsize + 3.0
    for i, place in enumerate(placements):
        if place is not None:
            texts[i] = _draw_track_label(
                ax,
                place,
                (starts[i] + ends[i]) / 2,
                y=y,
                height=height,
                fontsize=fontsize,
                level_height_pt=level_height_pt,
                zorder=zorder,
                gid=f"{gid_prefix}-label-{i}",
            )
    return TrackArtists(collections, texts, placements, levels, level_height_pt)


def span_label(span: ImageSpan) -> str:
    """Return the three-line label of an image's row span: its number and name, ``[start, end)``,
    grid and patch count."""
    return f"{span.number}: {span.label}\n[{span.rows[0]}, {span.rows[1]})\n{span.grid_text} · {span.patches} patches"


def token_label(span: ImageSpan) -> str:
    """Return the two-line label of an image's merged-token span (led by the image's number)."""
    return f"{span.number}: [{span.token_span[0]}, {span.token_span[1]})\n{span.num_tokens} tokens"


ROW_TRACK_PT = 42.0
TOKEN_TRACK_PT = 28.0
TRACK_GAP_PT = 14.0


@dataclass
class _RowSpansPlan:
    tracks: list[tuple[str, str, float, BatchLayout]]  # (kind, gid prefix, height pt, layout)
    labels: list[list[str | None]]
    rooms: list[float]  # outside-label room above each track (pt)
    token_scale: float
    comparison: LayoutComparison | None
    needed_pt: float

    def inputs(self, kind: str, source: BatchLayout):
        if kind == "tokens":
            return [s.token_span for s in source.spans], self.token_scale
        return [s.rows for s in source.spans], 1.0


def _plan_row_spans(
    layout: BatchLayout, produced: BatchLayout | None, ax: Axes, fontsize: float, max_label_levels: int
) -> _RowSpansPlan:
    """Set the x limits and settle every track's labels and the height (points) the figure needs."""
    fig = ax.figure
    comparison = compare_layouts(layout, produced) if produced is not None else None
    x_max = max(layout.total_rows, produced.total_rows if produced is not None else 0, 1)
    ax.set_xlim(-0.01 * x_max, 1.01 * x_max)
    token_scale = layout.total_rows / layout.total_tokens if layout.total_tokens else 1.0
    tracks = [("expected", "span", ROW_TRACK_PT, layout)]
    if produced is not None:
        tracks.append(("produced", "produced", ROW_TRACK_PT, produced))
    tracks.append(("tokens", "token", TOKEN_TRACK_PT, layout))
    plan = _RowSpansPlan(tracks, [], [], token_scale, comparison, 0.0)
    level_height_pt = LINE_HEIGHT_EM * fontsize + 3.0
    for kind, _, height_pt, source in tracks:
        spans, scale = plan.inputs(kind, source)
        labels = [token_label(s) if kind == "tokens" else span_label(s) for s in source.spans]
        fitted, levels = fit_labels(
            spans,
            labels,
            x_to_px=_x_to_px(ax, scale, 0.0),
            axes_width_px=ax.bbox.width,
            track_height_px=height_pt * fig.dpi / 72.0,
            fontsize=fontsize,
            dpi=fig.dpi,
            max_levels=max_label_levels,
        )
        plan.labels.append(fitted)
        plan.rooms.append(0.0 if levels == 0 else LABEL_GAP_PT + levels * level_height_pt)
    divergence_room = 3 * LINE_HEIGHT_EM * fontsize + 8.0 if comparison is not None and not comparison.equal else 0.0
    plan.needed_pt = (
        sum(h for _, _, h, _ in tracks) + sum(plan.rooms) + TRACK_GAP_PT * len(tracks) + divergence_room + 4.0
    )
    return plan


def row_spans_height_pt(
    layout: BatchLayout | ProcessorOutput | Sequence[Any],
    *,
    ax: Axes,
    produced: BatchLayout | ProcessorOutput | Sequence[Any] | None = None,
    fontsize: float = LABEL_FONT,
    max_label_levels: int = 10,
) -> float:
    """Return the Axes height in points that :func:`draw_row_spans` needs at ``ax``'s current width.

    Use it to size a figure region before drawing; it sets ``ax``'s x limits and draws nothing.
    """
    produced = None if produced is None else layout_of(produced)
    return _plan_row_spans(layout_of(layout), produced, ax, fontsize, max_label_levels).needed_pt


def draw_row_spans(
    layout: BatchLayout | ProcessorOutput | Sequence[Any],
    *,
    produced: BatchLayout | ProcessorOutput | Sequence[Any] | None = None,
    ax: Axes | None = None,
    fontsize: float = LABEL_FONT,
    max_label_levels: int = 10,
) -> Axes:
    """Return an Axes showing the packed ``pixel_values`` rows of ``layout`` as labelled spans.

    ``layout`` and ``produced`` are :class:`~kimi_viz.preprocess.layout.BatchLayout` objects, processor
    outputs or lists of ``(t, h, w)`` grids (see :func:`~kimi_viz.preprocess.layout.layout_of`).

    Tracks, top to bottom: expected rows (one span per image, labelled ``[start, end)``, grid and
    patch count; label gids ``span-label-<i>``); given ``produced``, the produced rows
    (``produced-label-<i>``) with the first divergence marked by a vertical line
    (``gid="divergence-marker"``) at the first differing image's start, annotated with both counts
    (``gid="divergence-label"``) and the differing spans outlined; then the merged tokens
    (``token-label-<i>``), drawn to the same width as the rows. Labels lead with each image's
    ``ImageSpan.number`` and fills follow it (colour, hatch, edge style), so an image keeps its
    number and colour when the layout holds only some images of a batch (``from_grids(numbers=...)``).

    Every span gets its full label while the outside labels of a track fit in
    ``max_label_levels`` staggered levels; in a crowded batch (hundreds of images) spans too narrow
    for their label are labelled by image number only, then only every k-th of them
    (see :func:`fit_labels`). The full numbers stay in ``layout.to_json()``.

    The rows are laid out in points: a new figure is sized to fit them; a given ``ax`` shorter
    than :func:`row_spans_height_pt` is filled at a compressed scale.
    """
    layout = layout_of(layout)
    produced = None if produced is None else layout_of(produced)
    own_figure: Figure | None = None
    if ax is None:
        own_figure = Figure(figsize=(11.0, 3.0))
        ax = own_figure.add_subplot()
    plan = _plan_row_spans(layout, produced, ax, fontsize, max_label_levels)
    comparison = plan.comparison
    if own_figure is not None:
        _fit_figure_height(own_figure, plan.needed_pt)
    axes_height_pt = ax.bbox.height * 72.0 / ax.figure.dpi
    ax.set_ylim(0.0, max(plan.needed_pt, axes_height_pt))
    drawn = _draw_row_span_tracks(ax, plan, fontsize)
    if comparison is not None and not comparison.equal:
        assert produced is not None  # there is a comparison only with produced
        _mark_divergence(ax, layout, produced, comparison, drawn.placed, drawn.top, fontsize)

    ax.set_yticks(drawn.centres, drawn.names, fontsize=fontsize + 1)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("row of pixel_values (merged tokens drawn to the same width)")
    ax.spines[["left", "right", "top"]].set_visible(False)
    ax.set_title(_row_spans_title(layout, produced, comparison), fontsize=fontsize + 3)
    return ax


def _fit_figure_height(figure: Figure, needed_pt: float) -> None:
    """Size an 11-inch-wide figure so its Axes is ``needed_pt`` points tall between fixed margins; returns nothing."""
    top_in, bottom_in = 0.45, 0.55
    height_in = needed_pt / 72.0 + top_in + bottom_in
    figure.set_size_inches(11.0, height_in)
    figure.subplots_adjust(left=0.11, right=0.98, bottom=bottom_in / height_in, top=1 - top_in / height_in)


@dataclass
class _DrawnTracks:
    """What :func:`_draw_row_span_tracks` drew: the y-tick centres and names, each track's
    ``(y, height)`` by kind, and the y above the top track's labels."""

    centres: list[float]
    names: list[str]
    placed: dict[str, tuple[float, float]]
    top: float


def _draw_row_span_tracks(ax: Axes, plan: _RowSpansPlan, fontsize: float) -> _DrawnTracks:
    """Draw the planned tracks bottom-up, each above the previous track's labels; return where they went."""
    y = 4.0
    centres, names = [], []
    placed: dict[str, tuple[float, float]] = {}
    for (kind, prefix, height_pt, source), room, labels in reversed(list(zip(plan.tracks, plan.rooms, plan.labels))):
        spans, scale = plan.inputs(kind, source)
        draw_row_track(
            ax,
            spans,
            y=y,
            height=height_pt,
            labels=labels,
            x_scale=scale,
            style_indices=[s.shown_number for s in source.spans],
            fontsize=fontsize,
            gid_prefix=prefix,
        )
        placed[kind] = (y, height_pt)
        centres.append(y + height_pt / 2)
        if kind == "tokens":
            names.append(f"merged tokens\n{source.total_tokens} in all")
        else:
            names.append(f"{kind} rows\n{source.total_rows} in all")
        y += height_pt + room + TRACK_GAP_PT
    return _DrawnTracks(centres, names, placed, y)


def _row_spans_title(layout: BatchLayout, produced: BatchLayout | None, comparison: LayoutComparison | None) -> str:
    """Return the title of draw_row_spans: images, rows and tokens, and whether ``produced`` agrees."""
    images = f"{len(layout)} image{'s' if len(layout) != 1 else ''}"
    title = f"pixel_values rows: {images}, {layout.total_rows} rows, {layout.total_tokens} merged tokens"
    if comparison is not None and produced is not None:  # produced is given whenever there is a comparison
        title += " — produced " + ("agrees" if comparison.equal else f"{produced.total_rows} rows")
    return title


def _mark_divergence(
    ax: Axes, expected: BatchLayout, produced: BatchLayout, comparison, placed, top: float, fontsize: float
) -> None:
    """Draw the first-divergence marker, its annotation and outlines of the differing produced spans."""
    i = comparison.first_divergent_image
    span = expected.spans[i] if i < len(expected) else produced.spans[i]
    x = span.rows[0]
    ax.axvline(x, color=DIVERGENCE_COLOR, linewidth=2.0, linestyle=(0, (4, 2)), zorder=5, gid="divergence-marker")
    differing = [row["index"] for row in comparison.table if not row["equal"] and row["index"] < len(produced)]
    if differing and "produced" in placed:
        y, height = placed["produced"]
        spans = [produced.spans[k].rows for k in differing]
        verts = cast(Sequence[np.ndarray], _track_polygons(spans, y=y, height=height, x_scale=1.0, x_offset=0.0)[2])
        ax.add_collection(
            PolyCollection(
                verts, facecolors="none", edgecolors=DIVERGENCE_COLOR, linewidths=2.5, zorder=4, gid="divergent-spans"
            ),
            autolim=False,
        )
    exp_rows = "none" if comparison.expected_rows is None else f"{comparison.expected_rows} rows"
    prod_rows = "none" if comparison.produced_rows is None else f"{comparison.produced_rows}"
    text = (
        f"first divergence: image {span.number} ({span.label}) at row {x}\n"
        f"expected {exp_rows}, produced {prod_rows}\n"
        f"batch: expected {comparison.expected_total} rows, produced {comparison.produced_total}"
    )
    x0, x1 = ax.get_xlim()
    right_half = (x - x0) / (x1 - x0) > 0.55
    ax.annotate(
        text,
        xy=(x, top),
        xytext=(-6 if right_half else 6, 2),
        textcoords="offset points",
        ha="right" if right_half else "left",
        va="bottom",
        fontsize=fontsize + 0.5,
        color=DIVERGENCE_COLOR,
        fontweight="bold",
        annotation_clip=False,
        gid="divergence-label",
        bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=DIVERGENCE_COLOR, linewidth=0.8),
    )
