"""A table as a terminal and a notebook show it: rows under named columns, nothing else loaded.

:class:`Table` is the value every table view of the kit returns (HTML in Jupyter, aligned text in a
terminal); it lives apart from the verdict's tables so that a what-if's text needs none of the pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .page import escape


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


__all__ = ["Table", "cell_text"]
