"""The processor's output: packed ``pixel_values`` plus one bookkeeping record per image.

Every other part of the kit (layout, plots, deferred replay, reports) reads these two types, so
they hold plain data only: no PIL objects, no processing code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .resize import ResizeConfig

if TYPE_CHECKING:  # pragma: no cover - records and layouts of shapes alone need no torch
    import torch

# Values of ``ImageRecord.pad_mask``: how much of each 14x14 patch lies in the zero padding.
PATCH_CONTENT = 0
PATCH_PARTLY_PADDING = 1
PATCH_FULLY_PADDING = 2


@dataclass
class ImageRecord:
    """What the processor did with one image, and where its rows landed.

    ``rows`` and ``token_span`` are half-open ``[start, end)`` ranges into the packed
    ``pixel_values`` and into the merged-token (``<|media_pad|>``) sequence of the batch.
    """

    index: int
    source: str  # a path, or "<bytes>", "<PIL.Image>", "<numpy>", "<torch>"
    source_size: tuple[int, int]  # (width, height) after the loader policy
    source_mode: str  # PIL mode after loading ("RGB", "RGBA", "P", "L", "LA", "CMYK", ...)
    loader: dict[str, Any]  # {"exif_transpose": bool, "alpha": "keep"|"discard", "exif_orientation": int|None}
    resize: ResizeConfig
    grid_thw: tuple[int, int, int]
    rows: tuple[int, int]
    token_span: tuple[int, int]
    pad_mask: np.ndarray  # int8 [h, w]: PATCH_CONTENT / PATCH_PARTLY_PADDING / PATCH_FULLY_PADDING
    resized: np.ndarray | None = None  # uint8 HWC RGB image after resize, fill and padding (for figures)

    @property
    def patches(self) -> int:
        """Return the number of patches (rows) of this image: t*h*w."""
        t, h, w = self.grid_thw
        return t * h * w

    @property
    def num_tokens(self) -> int:
        """Return the number of merged tokens (``<|media_pad|>`` positions) of this image."""
        return self.token_span[1] - self.token_span[0]

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
