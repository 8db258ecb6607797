"""``summary.png``: the verdict banner, then what diverges — failing ranks first, healthy ranks summarised.

Each panel is one of :mod:`kimi_viz.plots.summary`'s figures rendered on its own and stacked top to
bottom, so each keeps the height its labels need: the banner (status, headline, "N of M ranks
fail", the release); for a silent mismatch the producer's grid against the consumer's; the failing
ranks (at most :data:`MAX_FAILING_PANELS`); the healthy ranks, drawn when there are few and
summarised in one line otherwise.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from .page import figure_png

if TYPE_CHECKING:  # pragma: no cover
    from ..split.trace import Trace
    from ..split.verdict import Verdict

MAX_FAILING_PANELS = 4
MAX_HEALTHY_PANELS = 2
DPI = 100


def summary_panels(trace: Trace, verdict: Verdict) -> list[bytes]:
    """Return the PNG of every panel of ``summary.png``, top to bottom."""
    from matplotlib.figure import Figure

    from ..plots.summary import draw_grid_mismatch, draw_rank_rows, draw_verdict_banner

    pngs = [figure_png(draw_verdict_banner(verdict).figure, dpi=DPI)]
    if verdict.divergence.silent:
        pngs.append(figure_png(draw_grid_mismatch(verdict).figure, dpi=DPI))
    failing = [r for r in trace.ranks if r.outcome == "error"]
    healthy = [r for r in trace.ranks if r.outcome != "error"]
    # The verdict's expectation for an image a silent mismatch names (the consumer's grid), in every panel.
    expected = {row.image: row.expected_grid for row in verdict.divergence.images if row.silent}
    shown_healthy = healthy[:MAX_HEALTHY_PANELS] if (not failing or len(healthy) <= MAX_HEALTHY_PANELS) else []
    for rank in failing[:MAX_FAILING_PANELS] + shown_healthy:
        pngs.append(figure_png(draw_rank_rows(trace, rank, expected_grids=expected).figure, dpi=DPI))
    rest = [r.rank for r in healthy if r not in shown_healthy]
    more_failing = [r.rank for r in failing[MAX_FAILING_PANELS:]]
    lines = []
    if more_failing:
        lines.append(f"{len(more_failing)} more failing ranks not drawn: {_numbers(more_failing)} (see report.html)")
    if rest:
        lines.append(
            f"{len(rest)} healthy rank{'s' if len(rest) != 1 else ''} not drawn: {_numbers(rest)} "
            "— every image there matches its grid"
        )
    if lines:
        figure = Figure(figsize=(11.0, 0.35 + 0.3 * len(lines)))
        ax = figure.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        for i, line in enumerate(lines):
            ax.text(0.01, 1 - (i + 0.6) / len(lines), line, fontsize=10, va="center", transform=ax.transAxes)
        pngs.append(figure_png(figure, dpi=DPI))
    return pngs


def _numbers(ranks: list[int]) -> str:
    text = ", ".join(str(r) for r in ranks[:20])
    return text + (" …" if len(ranks) > 20 else "")


def summary_png(trace: Trace, verdict: Verdict) -> bytes:
    """Return ``summary.png``: the panels of :func:`summary_panels` stacked on a white sheet."""
    from PIL import Image

    pictures = [Image.open(io.BytesIO(png)) for png in summary_panels(trace, verdict)]
    width = max(p.width for p in pictures)
    sheet = Image.new("RGB", (width, sum(p.height for p in pictures)), "white")
    y = 0
    for picture in pictures:
        sheet.paste(picture.convert("RGB"), (0, y))
        y += picture.height
    buffer = io.BytesIO()
    sheet.save(buffer, format="PNG", optimize=False, compress_level=1)
    return buffer.getvalue()


__all__ = ["summary_png", "summary_panels", "MAX_FAILING_PANELS"]
