"""Feature rows with their provenance: which request's image each row of an embedding came from.

The forward pass moves embeddings around whole (the call's output, split per item, cached, sliced per
chunk, concatenated, trimmed) and finally writes them onto ``<|media_pad|>`` tokens. :class:`Rows`
holds an embedding as runs of consecutive rows of one image's encoder output, so every operation
SGLang applies (``torch.split``, slicing with Python's clamping, ``cat``, ``emb[-n:]``) costs the number
of runs, not of rows, and the final mapping still says, for every pad token, which image's which row
landed there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .._records import frozen


@frozen
class Source:
    """Whose feature rows these are: a request of the workload and one of its images."""

    request: int  # the request's index in the workload
    image: int  # the image's index in its request
    rid: str  # the request's id
    label: str  # the image's file or label
    key: str = ""  # the content hash of the pixels the rows encode (equal images: equal rows)

    @property
    def name(self) -> str:
        """Return ``"request r1, image 0 (chelsea.png)"``."""
        return f"request {self.rid}, image {self.image}" + (f" ({self.label})" if self.label else "")


@frozen
class RowRun:
    """``count`` consecutive rows of one image's encoder output, from row ``start``."""

    source: Source
    start: int
    count: int


@frozen
class Rows:
    """An embedding's rows as runs, in order (what ``embedding.reshape(-1, hidden)`` holds)."""

    runs: tuple[RowRun, ...] = ()

    @classmethod
    def of(cls, source: Source, count: int) -> Rows:
        """Return the ``count`` rows an image's encoder output holds, rows ``0 .. count-1`` of ``source``."""
        return cls((RowRun(source, 0, count),) if count > 0 else ())

    @classmethod
    def cat(cls, parts: Iterable[Rows]) -> Rows:
        """Return ``torch.cat`` of ``parts``: their runs in order."""
        return cls(tuple(run for part in parts for run in part.runs))

    def __len__(self) -> int:
        return sum(run.count for run in self.runs)

    def slice(self, start: int, stop: int) -> Rows:
        """Return ``rows[start:stop]`` with Python's clamping (non-negative bounds)."""
        start, stop = max(0, start), max(0, stop)
        out: list[RowRun] = []
        position = 0
        for run in self.runs:
            lo, hi = max(start, position), min(stop, position + run.count)
            if lo < hi:
                out.append(RowRun(run.source, run.start + lo - position, hi - lo))
            position += run.count
            if position >= stop:
                break
        return Rows(tuple(out))

    def tail(self, count: int) -> Rows:
        """Return ``rows[-count:]``: the last ``count`` rows, or every row when ``count`` is 0 (as Python slices)."""
        return self if count == 0 else self.slice(len(self) - count, len(self))

    def split(self, sizes: list[int]) -> list[Rows]:
        """Return ``torch.split(rows, sizes)`` (the caller has checked that ``sizes`` add up to ``len(self)``)."""
        parts, position = [], 0
        for size in sizes:
            parts.append(self.slice(position, position + size))
            position += size
        return parts

    def sources(self) -> list[Source]:
        """Return every image whose rows appear, in order of first appearance."""
        return list(dict.fromkeys(run.source for run in self.runs))

    def __iter__(self) -> Iterator[tuple[Source, int]]:
        """Yield ``(source, row)`` for every row, in order (use sparingly: one step per row)."""
        for run in self.runs:
            for r in range(run.start, run.start + run.count):
                yield run.source, r


__all__ = ["Source", "RowRun", "Rows"]
