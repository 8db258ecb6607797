"""Tables and verdicts for notebooks: HTML in Jupyter, aligned plain text everywhere else.

:class:`Table` is a small value with ``_repr_html_`` and a text ``repr`` (numbers rounded, long
lists shortened), so a notebook cell ends with a table instead of a 40-line dict. The ``*_table``
functions build the tables the notebooks show from the kit's typed data; :class:`VerdictView`
shows a :class:`~kimi_viz.split.verdict.Verdict` the way ``report.html`` does (status badge,
"N of M ranks fail", the amber banner of a not-reproduced capture) and as the CLI text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..split.verdict import Fixes, Verdict, format_verdict, image_sentence
from .html import verdict_html
from .page import verdict_css
from .rows import image_lines
from .text_table import Table

if TYPE_CHECKING:  # pragma: no cover
    from ..split.batch import Batch
    from ..split.trace import Trace


def ranks_table(verdict: Verdict) -> Table:
    """Return one row per rank, failing ranks first: images, outcome and SGLang's exact error."""
    ordered = sorted(verdict.ranks, key=lambda r: (r.outcome != "error", r.rank))
    return Table(
        ["rank", "image_indices", "outcome", "SGLang raises"],
        [
            [
                r.rank,
                r.image_indices,
                "FAIL" if r.outcome == "error" else "ok",
                None if r.error is None else str(r.error),
            ]
            for r in ordered
        ],
        caption=verdict.rank_summary,
        highlight=[r.outcome == "error" for r in ordered],
    )


def images_table(verdict: Verdict) -> Table:
    """Return one row per image: its identity, rank, the grid row read, expected and produced rows, match."""
    lines = image_lines(verdict)
    rows = [
        [
            line.image,
            line.who.label,
            line.who.details,
            None if line.row is None else line.row.rank,
            line.grid_read if not line.read_elsewhere else line.read_text,
            None if line.row is None else line.row.expected_rows,
            None if line.row is None else line.row.produced_rows,
            line.match_text,
        ]
        for line in lines
    ]
    return Table(
        ["image", "file / label", "source", "rank", "grid row read", "expected rows", "produced rows", "match"],
        rows,
        highlight=[line.flagged for line in lines],
    )


def divergence_table(verdict: Verdict) -> Table:
    """Return the divergence's key facts as two columns: what, and its value."""
    div = verdict.divergence
    facts = [
        ("status", f"{verdict.style.badge} (exit {verdict.exit_code})"),
        ("scenario class", div.scenario_class),
        ("first diverging image", image_sentence(verdict, div.first_image)),
        ("on rank", div.rank),
        ("expected grid", div.expected_grid),
        ("produced grid", div.produced_grid),
        ("expected rows", div.expected_rows),
        ("produced rows", div.produced_rows),
        ("batch: expected", div.expected_total),
        ("batch: produced", div.produced_total),
        ("grid read from", None if div.grid_read_from is None else f"image {div.grid_read_from}"),
        ("wrong expectation from", div.wrong_expectation),
        ("fix", div.fix),
    ]
    return Table(["", ""], [[k, v] for k, v in facts if v is not None])


def batch_table(batch: Batch) -> Table:
    """Return one row per item of a batch: label, backend, the grid keys it carries and its feature."""
    return Table(
        ["image", "label", "backend", "grids", "feature"],
        [
            [
                i,
                item.label,
                item.backend or "eager",
                "; ".join(f"{k}={v}" for k, v in item.grids.items()) or "(none)",
                item.feature.describe(),
            ]
            for i, item in enumerate(batch.items)
        ],
    )


def assignment_table(trace: Trace) -> Table:
    """Return one row per image: its patch count and the rank the load balancing gave it."""
    grids = trace.grid_thws_host or []
    owner = {g: r for r, images in enumerate(trace.assignment or []) for g in images}
    return Table(
        ["image", "label", "grid", "patches", "rank"],
        [
            [g, trace.batch.items[g].label, grid, grid[0] * grid[1] * grid[2], owner.get(g)]
            for g, grid in enumerate(grids)
        ],
    )


class VerdictView:
    """A verdict as a notebook shows it: the report's verdict block in HTML, the CLI's text otherwise."""

    def __init__(self, verdict: Verdict, *, heading: str = "Verdict", fixes: Fixes | None = None):
        self.verdict = verdict
        self.heading = heading
        self.fixes = fixes  # the answer's fix search, by code path (kimi_viz.Answer.fixes)

    def _repr_html_(self) -> str:
        return f"<style>{verdict_css()}</style>" + verdict_html(self.verdict, heading=self.heading, fixes=self.fixes)

    def __repr__(self) -> str:
        return format_verdict(self.verdict, fixes=self.fixes)


__all__ = [
    "ranks_table",
    "images_table",
    "divergence_table",
    "batch_table",
    "assignment_table",
    "VerdictView",
]
