"""One backend group of a rank's deferred items, and what its preprocessing produced (shared by §6.5–6.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .batch import Item
from .step_records import GroupIndices

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class BackendGroup:
    """The deferred items of one backend on one rank: local positions, global indices and the grid rows read."""

    backend: str
    indices: list[int]  # local positions in the rank's image_indices
    global_indices: list[int]  # [image_indices[i] for i in indices]
    grid_rows_read: list[int]  # the rows of grid_thws_host the checks read (indices on the pre-fix code)
    items: list[Item]

    def indices_record(self) -> GroupIndices:
        """Return the group's :class:`GroupIndices` as SGLang names them, for its steps' records."""
        return GroupIndices(self.backend, self.indices, self.global_indices, self.grid_rows_read)


@dataclass
class Produced:
    """What a group's preprocessing returned: grids, rows per image, tensors (pixels mode) and ``shape[0]``."""

    grids: list[tuple[int, int, int]]
    rows: list[int]
    tensors: list[torch.Tensor] | None
    pixel_rows: int | None  # pixel_values.shape[0]; None for a per-image list
    output: str = "concatenated"


__all__ = ["BackendGroup", "Produced"]
