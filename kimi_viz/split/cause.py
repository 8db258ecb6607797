"""What SGLang raises in the replay, and why: the exception, the kind of cause, and its facts.

The lowest layer of :mod:`kimi_viz.split`: the trace records these, the divergence analysis reads
them, and nothing here imports another module of the replay.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from .._records import frozen
from ..release_changes.rules import releases_where
from ..releases import PATH_INTRODUCED, release_span


@frozen
class ErrorInfo:
    """An exception SGLang raises: its type name and ``str(exception)``."""

    type: str
    message: str

    def to_json(self) -> dict[str, str]:
        """Return ``{"type", "message"}``."""
        return {"type": self.type, "message": self.message}

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


class CauseKind(str, Enum):
    """Every reason the replay records for an exception (the value is the name used in ``trace.json``)."""

    MISSING_GRID = "missing_grid"  # an item carries neither grid key
    GRID_ROWS = "grid_rows"  # an item carries several grid rows
    GRID_CONCAT = "grid_concat"  # the grids cannot be concatenated into grid_thws_host
    MIXED_LOCAL = "mixed_local"  # local preprocessed and deferred items on one rank
    FEATURE_TYPE = "feature_type"  # a feature that is no tensor where one is needed
    MISSING_BACKEND = "missing_backend"  # a deferred config without "backend"
    DEFERRED_CONFIG = "deferred_config"  # a deferred config without mean, std or resize keys
    UNSUPPORTED_BACKEND = "unsupported_backend"  # a backend other than gpu / cpu
    DTYPE = "dtype"  # a raw image tensor that is not uint8
    SHAPE = "shape"  # a raw image tensor that is neither 2-D nor 3-D
    EMPTY_IMAGE = "empty_image"  # a zero width or height
    CHANNELS = "channels"  # a channel count SGLang cannot handle
    BACKGROUND = "background"  # an unknown transparent-background pattern
    GPU_GRIDS = "gpu_grids"  # the gpu group's grids differ from those read
    CPU_GRIDS = "cpu_grids"  # the checkpoint processor's grids differ from grid_thws
    MISSING_GRID_THWS = "missing_grid_thws"  # a cpu item without grid_thws
    PROCESSOR_OUTPUT = "processor_output"  # pixel_values came back as a list
    LENGTH = "length"  # sum(patch_counts) != pixel_values.shape[0]
    FEATURE_SHAPE = "feature_shape"  # a 0-d feature
    TRAILING_SHAPE = "trailing_shape"  # features whose trailing shapes differ


@frozen
class CauseText:
    """What a cause kind means and what fixes it, when no scenario class of §7 says more."""

    explanation: str
    fix: str


CAUSES: dict[CauseKind, CauseText] = {
    CauseKind.MISSING_GRID: CauseText(
        "the item carries neither image_grid_thw nor grid_thws, so SGLang's grid loop raises KeyError",
        "Write grid_thws (one [t, h, w] row) into every item's model_specific_data on the producer.",
    ),
    CauseKind.GRID_ROWS: CauseText(
        "the item carries several grid rows: several images were aggregated into one MultimodalDataItem",
        "Split aggregated encoder inputs into one MultimodalDataItem per image before get_image_feature().",
    ),
    CauseKind.GRID_CONCAT: CauseText(
        "the items' grids cannot be concatenated into grid_thws_host (a grid that is not [t, h, w])",
        "Give every item a grid of exactly three integers [t, h, w].",
    ),
    CauseKind.MIXED_LOCAL: CauseText(
        "some of this rank's images were preprocessed on the encoder and others are deferred",
        "Preprocess all or none of a request's images on the encoder, with the model's own owner assignment.",
    ),
    CauseKind.FEATURE_TYPE: CauseText(
        "an item's feature is not a torch.Tensor where SGLang needs one (an eager or local item, or any item on "
        f"{release_span(releases_where('code_path', lambda path: path == 'no-split'))}'s code)",
        "Send eager items as [h*w, 3, 14, 14] tensors, and deferred items only to a consumer with the deferred split.",
    ),
    CauseKind.MISSING_BACKEND: CauseText(
        "a deferred config lacks 'backend': the producer is older (or newer) than the consumer",
        "Run the same SGLang release on the producer (tokenizer / encoder) and the consumer.",
    ),
    CauseKind.DEFERRED_CONFIG: CauseText(
        "a deferred config lacks a key the gpu path reads (image_mean, image_std or a resize_config key): the "
        "producer is older (or newer) than the consumer",
        "Run the same SGLang release on the producer (tokenizer / encoder) and the consumer.",
    ),
    CauseKind.UNSUPPORTED_BACKEND: CauseText(
        "a deferred config names a backend SGLang does not know (only gpu and cpu)",
        "Set kimi_k3_deferred_preprocessing.backend to 'gpu' or 'cpu' on the producer.",
    ),
    CauseKind.DTYPE: CauseText(
        "a raw image tensor is not uint8: deferred preprocessing expects raw 8-bit pixels",
        "Send raw images as uint8 CHW tensors (or PIL images), not normalised floats.",
    ),
    CauseKind.SHAPE: CauseText(
        "a raw image tensor is neither 2-D nor 3-D, so SGLang's resize cannot take it",
        "Send one image per item as a [C, H, W] (or [H, W]) uint8 tensor.",
    ),
    CauseKind.EMPTY_IMAGE: CauseText(
        "an image has a zero width or height; the resize divides by it",
        "Reject empty (zero-width or zero-height) images at the API boundary before they reach the encoder.",
    ),
    CauseKind.CHANNELS: CauseText(
        "an image reaches preprocessing with a channel count SGLang cannot handle (it takes 1, 3 or 4)",
        "Send images as 1-, 3- or 4-channel data (convert LA or two-channel arrays to RGBA or L first).",
    ),
    CauseKind.BACKGROUND: CauseText(
        "the transparent-background config names an unknown pattern",
        "Use one of white, black, gray or chessboard in transparent_bg_config.pattern.",
    ),
    CauseKind.GPU_GRIDS: CauseText(
        "the gpu group's images were resized to grids that differ from the grids SGLang read for them",
        "Make every item's grid agree with its resize_config (and read it at global_indices: SGLang "
        f"{PATH_INTRODUCED['post-fix'][0]} or later).",
    ),
    CauseKind.CPU_GRIDS: CauseText(
        "the consumer's checkpoint processor computed grids that differ from the items' grid_thws",
        "Use the same preprocessor_config.json on the producer and the consumer, and keep grid_thws current.",
    ),
    CauseKind.MISSING_GRID_THWS: CauseText(
        "a cpu-backend item carries image_grid_thw but no grid_thws, which the checkpoint path compares against",
        "Write grid_thws on every deferred item (the producer of this SGLang release does).",
    ),
    CauseKind.PROCESSOR_OUTPUT: CauseText(
        "the checkpoint processor returned pixel_values as a per-image list; SGLang reads pixel_values.shape[0]",
        "Return one concatenated [sum(t*h*w), 3, 14, 14] tensor from preprocessing (torch.cat over images).",
    ),
    CauseKind.LENGTH: CauseText(
        "the rows preprocessing produced differ from the sum of the patch counts of the grids SGLang read",
        "Find the grid that was read for the wrong image or went stale (the divergence names it) and fix its source.",
    ),
    CauseKind.FEATURE_SHAPE: CauseText(
        "a feature has no leading dimension (a 0-d tensor)",
        "Send every feature as a tensor whose first axis counts rows.",
    ),
    CauseKind.TRAILING_SHAPE: CauseText(
        "the rank's features cannot be concatenated: their trailing shapes differ",
        "Send every eager feature as [rows, 3, 14, 14], concatenated over images, never stacked.",
    ),
}


@dataclass
class Cause:
    """Why a step raised: the kind, the global image at fault, and the facts that kind carries."""

    kind: CauseKind
    image: int | None = None
    rows: int | None = None  # GRID_ROWS: how many grid rows the item carries
    key: str | None = None  # DEFERRED_CONFIG / MISSING_BACKEND: the missing key
    backend: str | None = None  # UNSUPPORTED_BACKEND
    dtype: str | None = None  # DTYPE
    channels: int | None = None  # CHANNELS
    size: list[int] | None = None  # EMPTY_IMAGE: [width, height]
    expected: Any = None  # GPU_GRIDS / CPU_GRIDS: the grid expected
    produced: list[int] | None = None  # GPU_GRIDS / CPU_GRIDS: the grid produced
    expected_total: int | None = None  # LENGTH: sum(patch_counts)
    produced_total: int | None = None  # LENGTH: pixel_values.shape[0]
    output: str | None = None  # LENGTH / PROCESSOR_OUTPUT: how pixel_values came back
    shape: list[int] | None = None  # TRAILING_SHAPE: the odd feature's shape
    expected_trailing: list[int] | None = None  # TRAILING_SHAPE
    local: list[int] | None = None  # MIXED_LOCAL: the locally preprocessed images
    deferred: list[int] | None = None  # MIXED_LOCAL: the deferred images

    @property
    def text(self) -> CauseText:
        """Return the kind's explanation and fix."""
        return CAUSES[self.kind]

    def to_json(self) -> dict[str, Any]:
        """Return ``{"kind", "image", ...}`` with the facts this cause carries (unset ones left out)."""
        data: dict[str, Any] = {"kind": self.kind.value, "image": self.image}
        for f in fields(self):
            if f.name not in ("kind", "image") and getattr(self, f.name) is not None:
                data[f.name] = getattr(self, f.name)
        return data


__all__ = ["ErrorInfo", "CauseKind", "CauseText", "CAUSES", "Cause"]
