"""Tables and verdicts for notebooks: HTML in Jupyter, aligned plain text everywhere else.

:class:`Table` is a small value with ``_repr_html_`` and a text ``repr`` (numbers rounded, long
lists shortened), so a notebook cell ends with a table instead of a 40-line dict. The ``*_table``
functions build the tables the notebooks show from the kit's typed data; :class:`VerdictView`
shows a :class:`~kimi_viz.split.verdict.Verdict` the way ``report.html`` does (status badge,
"N of M ranks fail", the amber banner of a not-reproduced capture) and as the CLI text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..split.verdict import Verdict, format_verdict, image_sentence
from .html import verdict_html
from .page import escape, verdict_css
from .rows import image_lines

if TYPE_CHECKING:  # pragma: no cover
    from ..split.batch import Batch
    from ..split.trace import Trace


def cell_text(value: Any, *, digits: int = 1, limit: int = 12) -> str:
    """Return a value as table text: floats rounded to ``digits``, lists longer than ``limit`` shortened."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, (list, tuple)):
        items = [cell_text(v, digits=digits, limit=limit) for v in value[:limit]]
        more = f", … ({len(value)} in all)" if len(value) > limit else ""
        return "[" + ", ".join(items) + more + "]"
    return str(value)


@dataclass
class Table:
    """Rows under named columns; shown as HTML in Jupyter and as aligned text in a terminal."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""
    digits: int = 1
    highlight: Sequence[bool] = field(default_factory=list)  # rows to mark (e.g. the failing ones)

    def text_rows(self) -> list[list[str]]:
        """Return every cell as the text shown."""
        return [[cell_text(v, digits=self.digits) for v in row] for row in self.rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape(c)}</th>" for c in self.columns)
        body = []
        for i, row in enumerate(self.text_rows()):
            marked = i < len(self.highlight) and self.highlight[i]
            style = ' style="background:#fbe3d6"' if marked else ""
            body.append(f"<tr{style}>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>")
        caption = f"<caption style='text-align:left'>{escape(self.caption)}</caption>" if self.caption else ""
        return (
            f'<table class="kv-table" style="border-collapse:collapse">{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
        )

    def __repr__(self) -> str:
        rows = self.text_rows()
        widths = [max([len(str(c))] + [len(r[k]) for r in rows]) for k, c in enumerate(self.columns)]
        lines = [self.caption] if self.caption else []
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(self.columns, widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        # No padding after the last column: a terminal would wrap a wide table on spaces alone.
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines)


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

    def __init__(self, verdict: Verdict, *, heading: str = "Verdict"):
        self.verdict = verdict
        self.heading = heading

    def _repr_html_(self) -> str:
        return f"<style>{verdict_css()}</style>" + verdict_html(self.verdict, heading=self.heading)

    def __repr__(self) -> str:
        return format_verdict(self.verdict)


__all__ = [
    "Table",
    "cell_text",
    "ranks_table",
    "images_table",
    "divergence_table",
    "batch_table",
    "assignment_table",
    "VerdictView",
]
