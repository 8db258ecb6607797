"""The verdict's figures: each rank's expected against produced rows, and what diverges in a silent mismatch.

- :func:`draw_rank_rows` — one rank: the rows the checks expect for its images (the grids SGLang
  read) above the rows preprocessing produced, first divergence marked; spans are numbered and
  coloured by *global* image, so an image keeps its number and colour in every panel. A grid read
  from another image is labelled so ("grid of image 0, read for image 1").
- :func:`draw_rank_bars` — the same counts as bars, when a rank raised before any grid was valid.
- :func:`draw_grid_mismatch` — a silent mismatch (S4 …): the producer's grid against the consumer's,
  drawn to scale as patch rectangles, with both counts.
- :func:`draw_verdict_banner` — the status badge, headline and "N of M ranks fail" as one strip.

Every function is ``draw_x(data, *, ax=None, ...) -> Axes`` and uses no pyplot state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..preprocess.layout import BatchLayout
from ..split.verdict import Verdict, release_lines
from .palette import DIVERGENCE_COLOR, color_for, edge_style_for, hatch_for
from .rows import clip_text, draw_row_spans

if TYPE_CHECKING:  # pragma: no cover
    from ..split.trace import ImageRow, RankTrace, Trace

FONT = 10.0
TITLE_FONT = 11.5


def _valid_grid(grid: Any) -> bool:
    return (
        isinstance(grid, (list, tuple))
        and len(grid) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in grid)
    )


def rank_heading(trace: Trace, rank: RankTrace) -> str:
    """Return ``"rank 1 of attention-TP 2, SGLang 0.5.18 (pre-fix path): FAIL"`` and, on a second line for a
    failing rank, its ``"ValueError: ..."`` (clipped to fit the figure's width)."""
    head = f"rank {rank.rank} of attention-TP {trace.tp_size}, {trace.release.label}"
    if rank.error is None:
        return f"{head}: ok"
    return f"{head}: FAIL\n{clip_text(f'{rank.error.type}: {rank.error.message}', 110)}"


def row_label(row: ImageRow, *, produced: bool = False) -> str:
    """Return a span's name: the image's label, and where its expected grid was read from when elsewhere."""
    name = row.label or f"image {row.image}"
    if not produced and row.read_elsewhere:
        return f"{name}; grid of image {row.grid_index_read}, read for image {row.image}"
    return name


def draw_rank_rows(
    trace: Trace, rank: RankTrace, *, ax: Axes | None = None, expected_grids: dict[int, list[int]] | None = None
) -> Axes:
    """Return an Axes with ``rank``'s expected rows above its produced rows, numbered and coloured by global image.

    ``expected_grids`` replaces the expectation of the images it names (global index -> grid): a silent
    mismatch's image is expected at the consumer's grid, as the verdict says, not at the grid SGLang read.
    Falls back to :func:`draw_rank_bars` when a grid is not a valid ``[t, h, w]``.
    """
    rows = list(rank.images)
    expected = [(expected_grids or {}).get(r.image, r.expected_grid) for r in rows]
    produced = [r.produced_grid if r.produced_grid is not None else None for r in rows]
    heading = rank_heading(trace, rank)
    if not rows or not all(_valid_grid(g) for g in expected) or not all(_valid_grid(g) for g in produced):
        return draw_rank_bars(rows, heading=heading, failed=rank.error is not None, ax=ax)
    numbers = [r.image for r in rows]
    own_figure = ax is None
    ax = draw_row_spans(
        BatchLayout.from_grids(expected, labels=[row_label(r) for r in rows], numbers=numbers),
        produced=BatchLayout.from_grids(produced, labels=[row_label(r, produced=True) for r in rows], numbers=numbers),
        ax=ax,
        fontsize=FONT - 1,
    )
    layout_title = ax.get_title()
    ax.set_title("")  # one title, on the left: the rank's heading above the layout's counts
    title = f"{heading}\n{layout_title}"
    ax.set_title(title, fontsize=TITLE_FONT, loc="left", color=DIVERGENCE_COLOR if rank.error is not None else "black")
    if own_figure:  # make room above the axes for the extra title lines, keeping the axes' height
        _grow_top(ax, title.count("\n") * TITLE_FONT * 1.3 / 72.0)
    return ax


def _grow_top(ax: Axes, extra_in: float) -> None:
    figure = ax.get_figure(root=True)
    assert isinstance(figure, Figure)  # the panel's own figure, made by draw_row_spans
    width, height = figure.get_size_inches()
    box = ax.get_position()
    bottom_in, top_in = box.y0 * height, (1.0 - box.y1) * height
    new_height = height + extra_in
    figure.set_size_inches(width, new_height)
    figure.subplots_adjust(bottom=bottom_in / new_height, top=1.0 - (top_in + extra_in) / new_height)


def draw_rank_bars(rows: list[ImageRow], *, heading: str = "", failed: bool = False, ax: Axes | None = None) -> Axes:
    """Return an Axes of expected and produced rows per image as bars (for ranks without valid grids)."""
    if ax is None:
        figure = Figure(figsize=(11.0, 1.2 + 0.55 * max(1, len(rows))), layout="constrained")
        ax = figure.add_subplot()
    ax.set_title(heading, loc="left", fontsize=TITLE_FONT, color=DIVERGENCE_COLOR if failed else "black")
    if not rows:
        ax.text(
            0.5,
            0.5,
            "no image reached this rank's backend groups",
            ha="center",
            va="center",
            fontsize=FONT,
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return ax
    ys = list(range(len(rows)))
    expected = [r.expected_rows for r in rows]
    produced = [r.produced_rows for r in rows]
    for y, row, e, p in zip(ys, rows, expected, produced):
        ax.barh(y - 0.2, e, height=0.38, color=color_for(row.image), edgecolor="black", linewidth=0.8)
        ax.barh(
            y + 0.2,
            p or 0,
            height=0.38,
            color=color_for(row.image),
            hatch="//",
            edgecolor="black",
            linewidth=0.8,
            linestyle="dashed",
        )
        ax.text(e, y - 0.2, f" expected {e}", va="center", fontsize=FONT)
        ax.text(
            p or 0, y + 0.2, f" produced {p if p is not None else '— not materialized'}", va="center", fontsize=FONT
        )
    ax.set_yticks(ys, [f"image {r.image}: {row_label(r)}" for r in rows], fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlabel("pixel_values rows (solid: expected by the grid read; hatched: produced)", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    return ax


def draw_grid_mismatch(verdict: Verdict, *, ax: Axes | None = None) -> Axes:
    """Return an Axes with the producer's grid against the consumer's for a silent mismatch, drawn to scale.

    Uses the divergence's ``produced_grid`` (what the item was resized to) and ``expected_grid``
    (what the consumer's processor config gives); with no grids it draws the two row counts as bars.
    """
    div = verdict.divergence
    who = verdict.identity(div.first_image)
    name = who.name if who is not None else "the image"
    if ax is None:
        figure = Figure(figsize=(11.0, 4.2), layout="constrained")
        ax = figure.add_subplot()
    given, wanted = div.produced_grid, div.expected_grid
    title = f"{div.scenario_class} (silent): what {name} was encoded at, against what the consumer expects"
    ax.set_title(title, loc="left", fontsize=TITLE_FONT)
    if not (_valid_grid(given) and _valid_grid(wanted)) or given == wanted:
        rows = [("expected by the consumer", div.expected_rows or 0), ("produced", div.produced_rows or 0)]
        for y, (_label, value) in enumerate(rows):
            ax.barh(y, value, color=color_for(y), hatch=hatch_for(y), edgecolor="black")
            ax.text(value, y, f" {value} rows", va="center", fontsize=FONT)
        ax.set_yticks(range(2), [r[0] for r in rows], fontsize=FONT)
        ax.invert_yaxis()
        return ax
    assert given is not None and wanted is not None
    panels = [
        (f"left, solid: the producer's resize_config: grid {given[1]}×{given[2]}", div.produced_rows, given, 0),
        (
            f"right, dashed: the consumer's processor config: grid {wanted[1]}×{wanted[2]}",
            div.expected_rows,
            wanted,
            1,
        ),
    ]
    # One key line per grid above the drawing (never side by side, so the two can never overlap), and
    # each rectangle's own count inside it.
    for line, (text, count, _grid, k) in enumerate(panels):
        what = "what SGLang encodes" if k == 0 else "what the model expects"
        ax.text(
            0.0,
            0.97 - 0.075 * line,
            f"{text}, {count} patches: {what}",
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=FONT,
        )
    gap = 0.08 * max(given[2], wanted[2])
    x = 0.0
    for _text, count, grid, k in panels:
        h, w = grid[1], grid[2]
        ax.add_patch(
            Rectangle(
                (x, 0),
                w,
                h,
                facecolor=color_for(k),
                edgecolor="black",
                hatch=hatch_for(k),
                linestyle=edge_style_for(k),
                linewidth=1.2,
                gid=f"grid-{k}",
            )
        )
        ax.text(
            x + w / 2,
            h / 2,
            f"{h}×{w}\n{count} patches",
            ha="center",
            va="center",
            fontsize=FONT,
            bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="none", alpha=0.85),
        )
        x += w + gap
    ax.set_xlim(-gap / 2, x)
    ax.set_ylim(max(given[1], wanted[1]) * 1.02, -0.3 * max(given[1], wanted[1]))
    ax.set_aspect("equal")
    ax.set_axis_off()
    return ax


def draw_verdict_banner(verdict: Verdict, *, ax: Axes | None = None) -> Axes:
    """Return an Axes holding the status badge, the headline, the release line and the rank summary."""
    style = verdict.style
    if ax is None:
        figure = Figure(figsize=(11.0, 1.25))
        ax = figure.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.text(
        0.01,
        0.78,
        f" {style.symbol} {style.badge} ",
        transform=ax.transAxes,
        fontsize=TITLE_FONT + 2,
        fontweight="bold",
        color=style.text_color,
        va="center",
        gid="status-badge",
        bbox=dict(boxstyle="round,pad=0.3", facecolor=style.color, edgecolor="black"),
    )
    ax.text(
        0.27, 0.78, verdict.rank_summary, transform=ax.transAxes, fontsize=TITLE_FONT, va="center", fontweight="bold"
    )
    detail = verdict.headline().split(" — ", 1)[1] if " — " in verdict.headline() else style.wording
    ax.text(0.01, 0.45, clip_text(detail, 150), transform=ax.transAxes, fontsize=FONT, va="center")
    ax.text(
        0.01,
        0.15,
        clip_text(release_lines(verdict)[0], 150),
        transform=ax.transAxes,
        fontsize=FONT,
        va="center",
        color="#333333",
    )
    return ax


__all__ = ["draw_rank_rows", "draw_rank_bars", "draw_grid_mismatch", "draw_verdict_banner", "rank_heading", "row_label"]
