"""The processor's output: packed ``pixel_values`` plus one bookkeeping record per image.

Every other part of the kit (layout, plots, deferred replay, reports) reads these two types, so
they hold plain data only: no PIL objects, no processing code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._records import frozen
from .resize import ResizeConfig

if TYPE_CHECKING:  # pragma: no cover - records and layouts of shapes alone need no torch
    import torch

# Values of ``ImageRecord.pad_mask``: how much of each 14x14 patch lies in the zero padding.
PATCH_CONTENT = 0
PATCH_PARTLY_PADDING = 1
PATCH_FULLY_PADDING = 2


@frozen
class ImageSpan:
    """One image's place in the batch: rows ``[start, end)`` of ``pixel_values`` and its merged tokens.

    ``index`` is the image's position in this layout; ``number`` the number it is shown with
    (default: ``index``). Figures label and colour a span by its ``number``, so an image keeps
    its number and colour when a figure shows only some images of a batch.
    """

    index: int
    label: str
    grid_thw: tuple[int, int, int]
    rows: tuple[int, int]
    token_span: tuple[int, int]
    padding_full: int | None = None  # patches entirely in the zero padding (None: unknown)
    padding_partial: int | None = None  # patches partly in the padding (None: unknown)
    pad_mask: np.ndarray | None = field(default=None, repr=False, compare=False)
    number: int | None = None  # the number shown in figures; None: index (set on construction)

    def __post_init__(self) -> None:
        if self.number is None:
            object.__setattr__(self, "number", self.index)

    @property
    def shown_number(self) -> int:
        """Return ``number`` as an int: the number figures show (``index`` unless one was given)."""
        return self.index if self.number is None else self.number

    @property
    def patches(self) -> int:
        """Return the number of rows (patches) of this image: ``t*h*w``."""
        t, h, w = self.grid_thw
        return t * h * w

    @property
    def num_tokens(self) -> int:
        """Return the number of merged tokens of this image."""
        return self.token_span[1] - self.token_span[0]

    @property
    def grid_text(self) -> str:
        """Return the grid written ``t×h×w``."""
        return "×".join(str(v) for v in self.grid_thw)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict of this span (no pad mask)."""
        return {
            "index": self.index,
            "label": self.label,
            "grid_thw": list(self.grid_thw),
            "rows": list(self.rows),
            "patches": self.patches,
            "token_span": list(self.token_span),
            "tokens": self.num_tokens,
            "padding_patches": {"full": self.padding_full, "partial": self.padding_partial},
        }


def padding_counts(pad_mask: np.ndarray | None) -> tuple[int | None, int | None]:
    """Return (full, partial) padding patch counts of a pad mask, or (None, None)."""
    if pad_mask is None:
        return None, None
    mask = np.asarray(pad_mask)
    return int((mask == PATCH_FULLY_PADDING).sum()), int((mask == PATCH_PARTLY_PADDING).sum())


def source_label(source: str | None, index: int) -> str:
    """Return a short name for image ``index``: the file name of its ``source`` when that is a path
    (POSIX or Windows separators), else ``"image <index>"`` (for ``"<bytes>"``, ``"<numpy>"``, ...)."""
    if source and not source.startswith("<"):
        return source.replace("\\", "/").rsplit("/", 1)[-1]
    return f"image {index}"


def image_span(
    index: int,
    source: str | None,
    grid: tuple[int, int, int],
    rows: tuple[int, int],
    tokens: tuple[int, int],
    pad_mask: np.ndarray | None,
) -> ImageSpan:
    """Return the :class:`ImageSpan` of an image read from ``source``: labelled by its file, padding counted."""
    full, partial = padding_counts(pad_mask)
    return ImageSpan(index, source_label(source, index), grid, rows, tokens, full, partial, pad_mask)


@dataclass
class ImageRecord:
    """What the processor did with one image, and where its rows landed (its :class:`ImageSpan`).

    ``rows`` and ``token_span`` are half-open ``[start, end)`` ranges into the packed
    ``pixel_values`` and into the merged-token (``<|media_pad|>``) sequence of the batch.
    """

    index: int
    source: str  # a path, or "<bytes>", "<PIL.Image>", "<numpy>", "<torch>"
    source_size: tuple[int, int]  # (width, height) after the loader policy
    source_mode: str  # PIL mode after loading ("RGB", "RGBA", "P", "L", "LA", "CMYK", ...)
    loader: dict[str, Any]  # {"exif_transpose": bool, "alpha": "keep"|"discard", "exif_orientation": int|None}
    resize: ResizeConfig
    span: ImageSpan  # its place in the batch: grid, rows, tokens and padding (the one type for that idea)
    resized: np.ndarray | None = None  # uint8 HWC RGB image after resize, fill and padding (for figures)

    @property
    def grid_thw(self) -> tuple[int, int, int]:
        """Return the image's grid ``(t, h, w)`` (its span's)."""
        return self.span.grid_thw

    @property
    def rows(self) -> tuple[int, int]:
        """Return the image's rows ``[start, end)`` of ``pixel_values`` (its span's)."""
        return self.span.rows

    @property
    def token_span(self) -> tuple[int, int]:
        """Return the image's merged tokens ``[start, end)`` (its span's)."""
        return self.span.token_span

    @property
    def pad_mask(self) -> np.ndarray:
        """Return the int8 ``[h, w]`` mask: PATCH_CONTENT, PATCH_PARTLY_PADDING or PATCH_FULLY_PADDING per patch."""
        assert self.span.pad_mask is not None, "a processor record always carries its pad mask"
        return self.span.pad_mask

    @property
    def patches(self) -> int:
        """Return the number of patches (rows) of this image: t*h*w."""
        return self.span.patches

    @property
    def num_tokens(self) -> int:
        """Return the number of merged tokens (``<|media_pad|>`` positions) of this image."""
        return self.span.num_tokens

    def padding_patches(self, *, partly: bool = True) -> np.ndarray:
        """Return ``[k, 2]`` (y, x) of patches that are fully padding (and partly, unless ``partly=False``)."""
        wanted = self.pad_mask >= (PATCH_PARTLY_PADDING if partly else PATCH_FULLY_PADDING)
        return np.argwhere(wanted)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready summary of this record (no pixels)."""
        return {
            "index": self.index,
            "source": self.source,
            "source_size": list(self.source_size),
            "source_mode": self.source_mode,
            "loader": dict(self.loader),
            "resize": self.resize.to_json(),
            "grid_thw": list(self.grid_thw),
            "patches": self.patches,
            "tokens": self.num_tokens,
            "rows": list(self.rows),
            "token_span": list(self.token_span),
            "padding_patches": {
                "full": int((self.pad_mask == PATCH_FULLY_PADDING).sum()),
                "partial": int((self.pad_mask == PATCH_PARTLY_PADDING).sum()),
            },
        }


@dataclass
class ProcessorOutput:
    """``pixel_values`` float32 ``[N, 3, 14, 14]``, ``grid_thws`` int64 ``[n, 3]`` and one record per image."""

    pixel_values: torch.Tensor
    grid_thws: torch.Tensor
    records: list[ImageRecord]
    backend: str  # "checkpoint" or "torch" (or the name of a foreign processor)
    config: Any = None  # the kimi_viz.preprocess.config.ProcessorConfig used
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def image_rows(self, index: int) -> torch.Tensor:
        """Return the ``pixel_values`` rows of image ``index``."""
        start, end = self.records[index].rows
        return self.pixel_values[start:end]
