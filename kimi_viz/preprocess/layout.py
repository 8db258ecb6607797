"""Where every image of a batch sits in the packed ``pixel_values`` rows and in the merged tokens.

A :class:`BatchLayout` answers "which rows belong to which patch of which image": per image the
row span ``[start, end)``, the merged-token span, the grid ``(t, h, w)`` and its padding patches,
plus vectorised lookups between rows, patches and merged tokens. :func:`compare_layouts` names the
first image whose rows differ between an expected and a produced layout.

Row order inside one image (the checkpoint processor's patchify)::

    row = start + t_index * h * w + y * w + x

Merged tokens (the vision tower's 2x2 merge): per image, tokens are ordered ``(h/2, w/2)``; token
``(ty, tx)`` groups the patches ``(2ty, 2tx), (2ty, 2tx+1), (2ty+1, 2tx), (2ty+1, 2tx+1)`` of every
frame, and the ``t`` frames are averaged into one token, so an image has ``(h/2)*(w/2)`` tokens
whatever its ``t``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LayoutLookupError, RowCountError
from .records import ImageSpan, ProcessorOutput, padding_counts, source_label


def spans_of(counts: Iterable[int]) -> list[tuple[int, int]]:
    """Return the consecutive ``[start, end)`` spans of blocks of these sizes, starting at 0."""
    spans, start = [], 0
    for n in counts:
        spans.append((start, start + n))
        start += n
    return spans


def _grid_tuple(value: Any, index: int) -> tuple[int, int, int]:
    """Return ``value`` as a validated ``(t, h, w)`` of positive ints."""
    try:
        grid = tuple(int(v) for v in (value.tolist() if hasattr(value, "tolist") else value))
    except (TypeError, ValueError):
        grid = ()
    if len(grid) != 3 or min(grid) < 1:
        raise RowCountError(
            f"grid of image {index} is {value!r}; expected three positive integers (t, h, w) — "
            "pass grids as a list of (t, h, w) or an int tensor of shape [n, 3]"
        )
    return grid


class BatchLayout:
    """The row and token spans of every image of one batch, with lookups between them.

    Build it with :meth:`from_output` (from a processor's records) or :meth:`from_grids` (from bare
    grids, e.g. the ``grid_thws`` a consumer expects).
    """

    def __init__(self, spans: Sequence[ImageSpan], *, merge: int = 2):
        self.spans: list[ImageSpan] = list(spans)
        self.merge = int(merge)
        n = len(self.spans)
        self._grids = np.array([s.grid_thw for s in self.spans], dtype=np.int64).reshape(n, 3)
        self._row_start = np.array([s.rows[0] for s in self.spans], dtype=np.int64)
        self._row_end = np.array([s.rows[1] for s in self.spans], dtype=np.int64)
        self._token_start = np.array([s.token_span[0] for s in self.spans], dtype=np.int64)
        self._token_end = np.array([s.token_span[1] for s in self.spans], dtype=np.int64)

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_grids(
        cls,
        grids: Any,
        *,
        merge: int = 2,
        pad_masks: Sequence[np.ndarray | None] | None = None,
        labels: Sequence[str] | None = None,
        numbers: Sequence[int] | None = None,
    ) -> BatchLayout:
        """Return the packed layout of images with these ``(t, h, w)`` grids, in order.

        ``labels`` names each image (default ``"image <i>"``); ``numbers`` is the number each
        span is shown with, labelled and coloured by in figures (default: its position), e.g. the
        images' numbers in the whole batch when these grids are some of its images.
        """
        if hasattr(grids, "tolist"):
            grids = grids.tolist()
        grids = list(grids)
        if pad_masks is not None and len(pad_masks) != len(grids):
            raise RowCountError(
                f"pad_masks has {len(pad_masks)} entries for {len(grids)} grids; pass one mask (or None) per grid"
            )
        if labels is not None and len(labels) != len(grids):
            raise RowCountError(f"labels has {len(labels)} entries for {len(grids)} grids; pass one label per grid")
        if numbers is not None and len(numbers) != len(grids):
            raise RowCountError(f"numbers has {len(numbers)} entries for {len(grids)} grids; pass one number per grid")
        spans = []
        row = token = 0
        for i, value in enumerate(grids):
            t, h, w = _grid_tuple(value, i)
            patches = t * h * w
            tokens = (h // merge) * (w // merge)
            mask = None if pad_masks is None else pad_masks[i]
            full, partial = padding_counts(mask)
            label = labels[i] if labels is not None else f"image {i}"
            number = int(numbers[i]) if numbers is not None else i
            spans.append(
                ImageSpan(
                    i, label, (t, h, w), (row, row + patches), (token, token + tokens), full, partial, mask, number
                )
            )
            row += patches
            token += tokens
        return cls(spans, merge=merge)

    @classmethod
    def from_output(cls, output: ProcessorOutput) -> BatchLayout:
        """Return the layout recorded by a processor (checked against its grids and ``pixel_values``)."""
        merge = int(getattr(output.config, "merge_kernel_size", 2))  # ProcessorConfig holds it as an int
        spans = []
        row = 0
        for i, record in enumerate(output.records):
            grid = _grid_tuple(record.grid_thw, i)
            label = source_label(record.source, i)
            start, end = (int(v) for v in record.rows)
            if (start, end) != (row, row + grid[0] * grid[1] * grid[2]):
                raise RowCountError(
                    f"image {i} ({label}) records rows [{start}, {end}) but its grid "
                    f"{'×'.join(map(str, grid))} packed after the previous images needs "
                    f"[{row}, {row + grid[0] * grid[1] * grid[2]}); rebuild the output with the processor"
                )
            spans.append(record.span)
            row = end
        rows_present = int(output.pixel_values.shape[0]) if output.pixel_values is not None else row
        if rows_present != row:
            raise RowCountError(
                f"pixel_values has {rows_present} rows but the records' grids add up to {row}; "
                "expected one row per patch — rebuild the output with the processor"
            )
        return cls(spans, merge=merge)

    # --- totals ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.spans)

    def __repr__(self) -> str:
        return f"BatchLayout({len(self)} images, {self.total_rows} rows, {self.total_tokens} tokens)"

    @property
    def total_rows(self) -> int:
        """Return the number of ``pixel_values`` rows of the whole batch."""
        return int(self._row_end[-1]) if len(self.spans) else 0

    @property
    def total_tokens(self) -> int:
        """Return the number of merged tokens of the whole batch."""
        return int(self._token_end[-1]) if len(self.spans) else 0

    @property
    def grids(self) -> list[tuple[int, int, int]]:
        """Return every image's ``(t, h, w)``."""
        return [s.grid_thw for s in self.spans]

    # --- lookups ---------------------------------------------------------------------------------
    def _rows_array(self, row: Any) -> np.ndarray:
        rows = np.asarray(row)
        if rows.dtype.kind not in "iu":
            if rows.dtype.kind == "f" and np.all(np.mod(rows, 1) == 0):
                rows = rows.astype(np.int64)
            else:
                raise LayoutLookupError(f"row {row!r} is not an integer; pass a row index or an integer array")
        rows = rows.astype(np.int64, copy=False)
        bad = (rows < 0) | (rows >= self.total_rows)
        if bad.any():
            first = int(rows[bad].flat[0])
            raise LayoutLookupError(
                f"row {first} is outside the batch's {self.total_rows} rows [0, {self.total_rows}); "
                "pass a row inside that range"
            )
        return rows

    def image_of_row(self, row: Any) -> Any:
        """Return the image index holding ``row`` (an int, or an int array for an array of rows)."""
        rows = self._rows_array(row)
        images = np.searchsorted(self._row_end, rows, side="right")
        return int(images) if images.ndim == 0 else images

    def row_to_patch(self, row: Any) -> tuple[Any, Any, Any, Any]:
        """Return ``(image, t, y, x)`` of a row; for an array of rows, four int64 arrays."""
        rows = self._rows_array(row)
        image = np.searchsorted(self._row_end, rows, side="right")
        h = self._grids[image, 1]
        w = self._grids[image, 2]
        local = rows - self._row_start[image]
        frame, within = np.divmod(local, h * w)
        y, x = np.divmod(within, w)
        if rows.ndim == 0:
            return int(image), int(frame), int(y), int(x)
        return image, frame, y, x

    def row_to_token(self, row: Any) -> Any:
        """Return the global merged-token index of a row (int or int64 array).

        Rows of an image whose ``h`` or ``w`` is not a multiple of the merge size have no token
        when they fall outside the last full merge group; they map to ``-1``.
        """
        image, _, y, x = (np.asarray(v) for v in self.row_to_patch(row))
        m = self.merge
        h = self._grids[image, 1]
        w = self._grids[image, 2]
        ty, tx = y // m, x // m
        token = self._token_start[image] + ty * (w // m) + tx
        token = np.where((ty < h // m) & (tx < w // m), token, -1)
        return int(token) if token.ndim == 0 else token

    def token_to_rows(self, token: int) -> np.ndarray:
        """Return the rows merged into one token: ``merge²`` rows per frame, frame-major, each frame in
        the order ``(y, x), (y, x+1), (y+1, x), (y+1, x+1)``."""
        if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
            raise LayoutLookupError(f"token {token!r} is not an integer; pass one merged-token index")
        token = int(token)
        if not 0 <= token < self.total_tokens:
            raise LayoutLookupError(
                f"token {token} is outside the batch's {self.total_tokens} merged tokens "
                f"[0, {self.total_tokens}); pass a token inside that range"
            )
        image = int(np.searchsorted(self._token_end, token, side="right"))
        t, h, w = self.spans[image].grid_thw
        m = self.merge
        ty, tx = divmod(token - int(self._token_start[image]), w // m)
        dy, dx = np.divmod(np.arange(m * m), m)
        frames = np.arange(t)[:, None]
        rows = int(self._row_start[image]) + frames * h * w + (m * ty + dy) * w + (m * tx + dx)
        return rows.reshape(-1).astype(np.int64)

    def patch_to_row(self, image: int, y: Any, x: Any, t: Any = 0) -> Any:
        """Return the row of patch ``(y, x)`` of frame ``t`` of ``image`` (int, or array for array input)."""
        if isinstance(image, (bool, np.bool_)) or not isinstance(image, (int, np.integer)):
            raise LayoutLookupError(f"image {image!r} is not an integer; pass one image index")
        if not 0 <= int(image) < len(self.spans):
            raise LayoutLookupError(
                f"image {image} is outside the batch's {len(self.spans)} images; pass 0..{len(self.spans) - 1}"
            )
        span = self.spans[int(image)]
        frames, h, w = span.grid_thw
        ya, xa, ta = np.asarray(y, dtype=np.int64), np.asarray(x, dtype=np.int64), np.asarray(t, dtype=np.int64)
        for name, values, limit in (("y", ya, h), ("x", xa, w), ("t", ta, frames)):
            bad = (values < 0) | (values >= limit)
            if bad.any():
                raise LayoutLookupError(
                    f"{name}={int(values[bad].flat[0])} is outside image {image} ({span.label}, grid "
                    f"{span.grid_text}); expected 0 <= {name} < {limit}"
                )
        rows = span.rows[0] + ta * h * w + ya * w + xa
        return int(rows) if rows.ndim == 0 else rows

    # --- export ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict: merge size, totals and every image's span."""
        return {
            "merge": self.merge,
            "images": len(self.spans),
            "total_rows": self.total_rows,
            "total_tokens": self.total_tokens,
            "spans": [s.to_json() for s in self.spans],
        }


@dataclass
class LayoutComparison:
    """Expected against produced rows: where they first stop agreeing, with both counts."""

    equal: bool
    first_divergent_image: int | None
    expected_rows: int | None  # rows of the first divergent image (None: no such image)
    produced_rows: int | None
    expected_total: int
    produced_total: int
    table: list[dict[str, Any]]  # per image: index, label, expected/produced span and grid
    message: str

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict of the comparison."""
        return {
            "equal": self.equal,
            "first_divergent_image": self.first_divergent_image,
            "expected_rows": self.expected_rows,
            "produced_rows": self.produced_rows,
            "expected_total": self.expected_total,
            "produced_total": self.produced_total,
            "table": self.table,
            "message": self.message,
        }


def _span_text(span: ImageSpan | None) -> str:
    return "none" if span is None else f"{span.patches} rows [{span.rows[0]}, {span.rows[1]})"


def compare_layouts(expected: BatchLayout, produced: BatchLayout) -> LayoutComparison:
    """Return where ``produced`` first differs from ``expected`` (rows or grid), with both counts."""
    n = max(len(expected), len(produced))
    table: list[dict[str, Any]] = []
    first: int | None = None
    for i in range(n):
        e = expected.spans[i] if i < len(expected) else None
        p = produced.spans[i] if i < len(produced) else None
        same = e is not None and p is not None and e.rows == p.rows and e.grid_thw == p.grid_thw
        table.append(
            {
                "index": i,
                "label": (e or p).label,  # type: ignore[union-attr]
                "expected_rows": None if e is None else list(e.rows),
                "produced_rows": None if p is None else list(p.rows),
                "expected_grid": None if e is None else list(e.grid_thw),
                "produced_grid": None if p is None else list(p.grid_thw),
                "equal": same,
            }
        )
        if not same and first is None:
            first = i
    totals = f"expected {expected.total_rows} rows in all, produced {produced.total_rows}"
    if first is None:
        return LayoutComparison(
            True,
            None,
            None,
            None,
            expected.total_rows,
            produced.total_rows,
            table,
            f"layouts agree: {len(expected)} images, {expected.total_rows} rows",
        )
    e = expected.spans[first] if first < len(expected) else None
    p = produced.spans[first] if first < len(produced) else None
    label = (e or p).label  # type: ignore[union-attr]
    if e is not None and p is not None and e.rows == p.rows:
        detail = (
            f"expected grid {e.grid_text}, produced grid {p.grid_text}, "
            f"both {e.patches} rows [{e.rows[0]}, {e.rows[1]})"
        )
    elif p is None:
        detail = (
            f"expected {_span_text(e)}, produced none (the produced layout has {len(produced)} "
            f"images, expected {len(expected)})"
        )
    elif e is None:
        detail = f"expected none (the expected layout has {len(expected)} images), produced {_span_text(p)}"
    else:
        detail = f"expected {_span_text(e)}, produced {_span_text(p)}"
    message = f"image {first} ({label}): {detail}; {totals}"
    return LayoutComparison(
        False,
        first,
        None if e is None else e.patches,
        None if p is None else p.patches,
        expected.total_rows,
        produced.total_rows,
        table,
        message,
    )


def layout_of(data: BatchLayout | ProcessorOutput | Iterable[Any]) -> BatchLayout:
    """Return ``data`` as a :class:`BatchLayout` (a layout, a processor output, or a list of grids)."""
    if isinstance(data, BatchLayout):
        return data
    if isinstance(data, ProcessorOutput):
        return BatchLayout.from_output(data)
    return BatchLayout.from_grids(data)
