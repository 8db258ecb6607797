"""One step of a deferred-split replay: the rank's row tracks as they stand after that step.

:func:`draw_step` shows step ``k`` of one rank of a :class:`~kimi_viz.split.trace.Trace`: two row
tracks — the rows the checks *expect* for this rank's images (``prod(grid_thws_host[...])`` at the
row the code reads, labelled with the image it was read from when that is another image) and the
rows preprocessing *produced* so far — with the first divergence marked. Spans are numbered and
coloured by global image. With ``text=True`` (the default) a text panel above the tracks holds the
step's title, note, check and key variables (:func:`step_lines`); the stepper shows those as HTML
beside the figure instead (``text=False``). Artists carry gids: ``expected-label-<i>``,
``produced-label-<i>``, ``divergence-marker``, ``divergence-label``, ``step-text``.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..errors import ConfigError
from ..split.trace import prod
from .palette import DIVERGENCE_COLOR
from .rows import draw_row_track
from .tracks import spans_of

if TYPE_CHECKING:  # pragma: no cover
    from ..split.trace import RankTrace, Step, Trace

TEXT_FONT = 9.0
MAX_LIST = 12


def resolve_rank(trace: Trace, rank: int | None) -> RankTrace:
    """Return the rank to show: ``rank`` when given, else the first failing rank, else the first replayed."""
    if rank is not None:
        return trace.rank_trace(rank)
    failing = trace.failing_rank
    if failing is not None:
        return failing
    if not trace.ranks:
        raise ConfigError("the trace holds no replayed rank")
    return trace.ranks[0]


def short(value: Any, limit: int = MAX_LIST) -> str:
    """Return a compact text of a variable (long lists cut with an ellipsis and their length)."""
    if isinstance(value, list):
        if len(value) > limit:
            head = ", ".join(short(v, limit) for v in value[:limit])
            return f"[{head}, … ({len(value)} in all)]"
        return "[" + ", ".join(short(v, limit) for v in value) + "]"
    if isinstance(value, dict):
        parts = [f"{k}: {short(v, limit)}" for k, v in list(value.items())[:limit]]
        return "{" + ", ".join(parts) + ("" if len(value) <= limit else ", …") + "}"
    return str(value)


def step_title(trace: Trace, rank: RankTrace, k: int) -> str:
    """Return ``"Step k of n · §6.x Title — rank r of TP t, SGLang 0.5.x (path), mode"`` (k counted from 1)."""
    step = rank.steps[k]
    return (
        f"Step {k + 1} of {len(rank.steps)} · {step.spec_ref} {step.title} — rank {rank.rank} of TP "
        f"{trace.tp_size}, {trace.release.label}, {trace.mode} mode"
    )


def key_variables(step: Step) -> list[tuple[str, str]]:
    """Return the step's key variables as ``(name, compact value)`` pairs (and where SGLang raised).

    Which variables a step kind shows is its record's :meth:`~kimi_viz.split.step_records.StepRecord.key_variables`;
    those that are None (not reached, or not asked on this code path) are left out.
    """
    out = [(name, short(value)) for name, value in step.variables.key_variables() if value is not None]
    if step.cause is not None:
        where = {k: v for k, v in step.cause.to_json().items() if v is not None}
        out.append(("raised_at", short(where)))
    return out


def step_lines(trace: Trace, rank: RankTrace, k: int) -> list[tuple[str, str]]:
    """Return the text panel of step ``k`` as ``(kind, text)`` lines: kind is title/note/check/var/error."""
    k = k % len(rank.steps)
    step = rank.steps[k]
    lines: list[tuple[str, str]] = [("title", step_title(trace, rank, k))]
    lines += [("note", chunk) for chunk in textwrap.wrap(step.note, 130)]
    if step.check is not None:
        verdict = "PASS" if step.check.passed else "FAIL"
        expected, actual = short(step.check.expected), short(step.check.actual)
        lines.append(("check", f"check [{verdict}] {step.check.name}: expected {expected}, actual {actual}"))
    lines += [("var", f"{key} = {value}") for key, value in key_variables(step)]
    if step.error is not None:
        lines.append(("error", f"SGLang raises {step.error.type}: {step.error.message}"))
    return lines


@dataclass
class _TrackRow:
    image: int
    label: str
    grids: list[list[int]]  # the grid rows shown as expected (several for an S9 item)
    read_from: int  # the image whose grid_thws_host row was read
    produced_grid: list[int] | None
    produced_rows: int | None


def _tracks(trace: Trace, rank: RankTrace, step: Step) -> tuple[list[_TrackRow], bool]:
    """Return the per-image rows to draw and whether they are this rank's (else the whole batch's)."""
    if step.rows is not None:
        return [
            _TrackRow(r.image, r.label, [r.expected_grid], r.grid_index_read, r.produced_grid, r.produced_rows)
            for r in step.rows
        ], True
    rows = []
    for g, item in enumerate(trace.batch.items):
        if trace.grid_thws_host is not None:
            grids = [trace.grid_thws_host[g]]
        else:  # SGLang raised while collecting the grids: show what each item carries
            source = item.grid_source()
            grids = [[int(v) for v in row] for row in item.grids.get(source, [])] if source else []
        rows.append(_TrackRow(g, item.label, grids, g, None, None))
    return rows, False


def step_drawing_key(trace: Trace, k: int, *, rank: int | None = None) -> tuple:
    """Return a hashable key of everything ``draw_step(trace, k, rank=rank, text=False)`` draws.

    Two steps with the same key give the same picture (the tracks, their labels, the divergence
    marker), so a caller can render it once; the step's title, note and variables are not part of it.
    """
    shown = resolve_rank(trace, rank)
    rows, own = _tracks(trace, shown, shown.steps[k % len(shown.steps)])
    drawn = tuple(
        (
            r.image,
            r.label,
            tuple(tuple(int(v) for v in g) for g in r.grids),
            r.read_from,
            None if r.produced_grid is None else tuple(int(v) for v in r.produced_grid),
            r.produced_rows,
        )
        for r in rows
    )
    return (own, shown.rank, tuple(shown.image_indices or ()), drawn)


def draw_step(trace: Trace, k: int, *, rank: int | None = None, ax: Axes | None = None, text: bool = True) -> Axes:
    """Return an Axes with step ``k`` (negative counts from the end) of ``rank`` of ``trace``.

    ``rank`` defaults to the first failing rank, else the first replayed one. The row tracks go
    into ``ax`` (a new Figure when None); with ``text`` the step's title, note, check and variables
    go into a text panel above them (a separate Axes of the new Figure, or an inset above ``ax``).
    """
    shown = resolve_rank(trace, rank)
    n = len(shown.steps)
    if isinstance(k, bool) or not isinstance(k, int) or not -n <= k < n:
        raise ConfigError(f"step {k!r} does not exist; rank {shown.rank} has steps 0..{n - 1} (or -{n}..-1)")
    k = k % n
    step = shown.steps[k]
    lines = step_lines(trace, shown, k) if text else []
    if ax is None:
        if text:
            fig = Figure(figsize=(11.0, 2.9 + 0.22 * len(lines)))
            grid = fig.add_gridspec(
                2,
                1,
                height_ratios=[0.22 * len(lines) + 0.3, 2.2],
                hspace=0.25,
                left=0.12,
                right=0.98,
                top=0.98,
                bottom=0.14,
            )
            text_ax = fig.add_subplot(grid[0])
            ax = fig.add_subplot(grid[1])
        else:
            fig = Figure(figsize=(9.5, 2.8))
            fig.subplots_adjust(left=0.15, right=0.98, top=0.8, bottom=0.2)
            ax = fig.add_subplot()
            text_ax = None
    else:
        text_ax = ax.inset_axes((0.0, 1.08, 1.0, 0.12 * len(lines) + 0.1)) if text else None
    if text_ax is not None:
        _draw_text(text_ax, lines)
    _draw_tracks(ax, trace, shown, step)
    return ax


def _draw_text(ax: Axes, lines: list[tuple[str, str]]) -> None:
    ax.set_axis_off()
    styles: dict[str, dict[str, Any]] = {
        "title": dict(fontweight="bold", fontsize=TEXT_FONT + 1.5),
        "note": dict(style="italic"),
        "check": dict(family="monospace"),
        "var": dict(family="monospace"),
        "error": dict(color=DIVERGENCE_COLOR, fontweight="bold"),
    }
    n = len(lines)
    for i, (kind, text) in enumerate(lines):
        style = {"fontsize": TEXT_FONT, **styles.get(kind, {})}
        if kind == "check" and "[FAIL]" in text:
            style["color"] = DIVERGENCE_COLOR
        ax.text(
            0.0,
            1.0 - (i + 0.5) / n,
            text,
            transform=ax.transAxes,
            ha="left",
            va="center",
            gid="step-text" if i == 0 else f"step-text-{i}",
            **style,
        )


def _draw_tracks(ax: Axes, trace: Trace, rank: RankTrace, step: Step) -> None:
    rows, own = _tracks(trace, rank, step)
    expected = [sum(prod(grid) for grid in r.grids) for r in rows]
    known = [r.produced_rows is not None for r in rows]
    produced = [r.produced_rows if r.produced_rows is not None else e for r, e in zip(rows, expected)]
    x_max = max(sum(expected), sum(produced), 1)
    ax.set_xlim(-0.01 * x_max, 1.01 * x_max)
    ax.set_ylim(0.0, 100.0)
    labels_e: list[str | None] = []
    labels_p: list[str | None] = []
    for r, e, p, seen in zip(rows, expected, produced, known):
        if len(r.grids) != 1:
            labels_e.append(f"{r.image}: {len(r.grids)} grid rows\n{e} rows")
            labels_p.append(None)
            continue
        grid = "×".join(str(v) for v in r.grids[0])
        where = f" (grid of image {r.read_from})" if r.read_from != r.image else ""
        labels_e.append(f"{r.image}: {grid}{where}\n{e} rows")
        if not own:
            labels_p.append(None)
        elif seen:
            pgrid = "×".join(str(v) for v in r.produced_grid) if r.produced_grid else "eager"
            labels_p.append(f"{r.image}: {pgrid}\n{p} rows")
        else:
            labels_p.append(f"{r.image}: not yet")
    styles = [r.image for r in rows]
    draw_row_track(
        ax,
        spans_of(expected),
        y=58.0,
        height=24.0,
        labels=labels_e,
        style_indices=styles,
        gid_prefix="expected",
        fontsize=TEXT_FONT,
    )
    yticks = [70.0]
    names = ["expected rows\n(grids read)" if own else "declared rows\n(every image)"]
    if own:
        draw_row_track(
            ax,
            spans_of(produced),
            y=14.0,
            height=24.0,
            labels=labels_p,
            style_indices=styles,
            gid_prefix="produced",
            fontsize=TEXT_FONT,
        )
        yticks.insert(0, 26.0)
        names.insert(0, "produced rows")
        _mark_first_divergence(ax, rows, expected, produced, known)
    elif rank.image_indices:
        ax.text(
            0.0,
            30.0,
            f"rank {rank.rank} materializes images {rank.image_indices}",
            fontsize=TEXT_FONT,
            gid="rank-images",
        )
    ax.set_yticks(yticks, names, fontsize=TEXT_FONT)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=TEXT_FONT)
    ax.set_xlabel(
        "pixel_values rows on this rank" if own else "pixel_values rows of the whole batch", fontsize=TEXT_FONT
    )
    ax.spines[["left", "right", "top"]].set_visible(False)


def _mark_first_divergence(
    ax: Axes, rows: list[_TrackRow], expected: list[int], produced: list[int], known: list[bool]
) -> None:
    start = 0
    for r, e, p, seen in zip(rows, expected, produced, known):
        grid_differs = seen and r.produced_grid not in (None, r.grids[0] if len(r.grids) == 1 else None)
        if seen and (e != p or grid_differs):
            ax.axvline(
                start, color=DIVERGENCE_COLOR, linewidth=2.0, linestyle=(0, (4, 2)), zorder=5, gid="divergence-marker"
            )
            x0, x1 = ax.get_xlim()
            right = (start - x0) / (x1 - x0) > 0.55
            ax.annotate(
                f"first divergence: image {r.image} ({r.label})\nexpected {e} rows, produced {p}",
                xy=(start, 92.0),
                xytext=(-6 if right else 6, 0),
                textcoords="offset points",
                ha="right" if right else "left",
                va="center",
                fontsize=TEXT_FONT,
                color=DIVERGENCE_COLOR,
                fontweight="bold",
                gid="divergence-label",
                bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=DIVERGENCE_COLOR),
            )
            return
        start += p


__all__ = ["draw_step", "step_drawing_key", "step_lines", "step_title", "key_variables", "resolve_rank", "short"]
