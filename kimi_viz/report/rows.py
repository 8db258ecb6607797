"""One row per image, the same in every view: ``report.html``'s "every image" table, the notebook
table and ``issue.md``.

:func:`image_lines` joins each image's one identity (:class:`~kimi_viz.split.verdict.ImageIdentity`:
global index, file or label, source size, mode, backend) with what the replay made of it (the
divergence's :class:`~kimi_viz.split.divergence.ImageOutcome`: rank, the grid row read, expected and
produced grids and rows, the match). The views only format the fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._records import frozen

if TYPE_CHECKING:  # pragma: no cover
    from ..split.divergence import ImageOutcome
    from ..split.verdict import ImageIdentity, Verdict


@frozen
class ImageLine:
    """One image: its identity, and the replay's row for it (``None`` when no rank replayed it)."""

    who: ImageIdentity
    row: ImageOutcome | None

    @property
    def image(self) -> int:
        """Return the global image index."""
        return self.who.image

    @property
    def size_text(self) -> str:
        """Return ``"451×300"`` (the upload's width × height), or ``""`` when not known."""
        size = self.who.size
        return "" if size is None else f"{size[0]}×{size[1]}"

    @property
    def grid_read(self) -> int | None:
        """Return the row of ``grid_thws_host`` SGLang read for this image (None: not replayed)."""
        return None if self.row is None else self.row.grid_index_read

    @property
    def read_elsewhere(self) -> bool:
        """Return True when SGLang read another image's grid row for this image (S1)."""
        return self.row is not None and self.row.grid_index_read != self.who.image

    @property
    def read_text(self) -> str:
        """Return the grid row read: ``"1"``, or ``"0 (image 0's grid)"`` when it is another image's."""
        if self.row is None:
            return ""
        read = self.row.grid_index_read
        return f"{read}" + (f" (image {read}'s grid)" if self.read_elsewhere else "")

    @property
    def flagged(self) -> bool:
        """Return True when the row is wrong: its counts differ, or a silent mismatch names it."""
        return self.row is not None and self.row.flagged

    @property
    def match_text(self) -> str:
        """Return the match column: yes, NO, not checked, a silent mismatch flagged, or not replayed."""
        return "not replayed" if self.row is None else self.row.match_text()


def image_lines(verdict: Verdict) -> list[ImageLine]:
    """Return one :class:`ImageLine` per image of the verdict, in global order."""
    outcomes = {row.image: row for row in verdict.divergence.images}
    return [ImageLine(who, outcomes.get(who.image)) for who in verdict.images]


__all__ = ["ImageLine", "image_lines"]
