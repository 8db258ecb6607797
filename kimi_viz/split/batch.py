"""A batch of Kimi-K3 multimodal items as ``get_image_feature`` sees them.

These mirror the fields of SGLang's ``MultimodalDataItem`` that decide the row counts:
both grid keys, the ``kimi_k3_deferred_preprocessing`` config, the
``encoder_local_preprocessed`` flag and the feature itself. Manifests (:mod:`kimi_viz.manifest`)
read and write exactly this model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from .._records import frozen
from ..errors import ConfigError
from ..releases import CodePath, PathSource
from .cause import ErrorInfo

if TYPE_CHECKING:  # pragma: no cover - a batch of shapes alone needs neither torch nor Pillow
    import torch
    from PIL import Image

    from .forward_context import ForwardContext

#: How a scenario's batch says who made it in ``created_by`` (and so in its manifest): this, then its name.
SCENARIO_CREATOR = "kimi-viz scenario "

GRID_KEYS = ("image_grid_thw", "grid_thws")  # image_grid_thw wins when both are present
DEFERRED_KEY = "kimi_k3_deferred_preprocessing"

FeatureKind = Literal["image", "tensor", "shape_only"]

#: How the checkpoint processor returns ``pixel_values``: one concatenation (what SGLang expects), a
#: stacked ``[B, N, 3, 14, 14]`` tensor or a per-image list (the S6 shapes).
ProcessorOutputForm = Literal["concatenated", "stacked", "list"]
PROCESSOR_OUTPUTS: tuple[ProcessorOutputForm, ...] = get_args(ProcessorOutputForm)


def prod(values: Any) -> int:
    """Return the product of a grid's entries as an int."""
    return math.prod(int(v) for v in values)


@dataclass
class Feature:
    """An item's feature: a raw image, a tensor (CHW/HWC uint8 or eager patches), or only its shape.

    ``layout`` is ``"image"`` for a PIL image, ``"chw"``/``"hwc"`` for a raw uint8 tensor and
    ``"patches"`` for an eager ``[h*w, 3, 14, 14]`` feature; ``"stacked"`` marks a ``[B, N, 3, 14, 14]``
    tensor (the S6 shape bug).
    """

    kind: FeatureKind
    layout: str
    shape: tuple[int, ...]
    dtype: str
    image: Image.Image | None = None
    tensor: torch.Tensor | None = None

    @classmethod
    def from_image(cls, image: Image.Image) -> Feature:
        """Return a raw-image feature (shape is ``(height, width, bands)``)."""
        return cls("image", "image", (image.height, image.width, len(image.getbands())), "uint8", image=image)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, layout: str) -> Feature:
        """Return a tensor feature with the given layout (``chw``, ``hwc``, ``patches`` or ``stacked``)."""
        dtype = str(tensor.dtype).replace("torch.", "")
        return cls("tensor", layout, tuple(int(s) for s in tensor.shape), dtype, tensor=tensor)

    @classmethod
    def shape_only(cls, layout: str, shape: tuple[int, ...], dtype: str) -> Feature:
        """Return a feature that carries only its shape (a redacted capture)."""
        return cls("shape_only", layout, tuple(int(s) for s in shape), dtype)

    def redacted(self) -> Feature:
        """Return the shape-only copy of this feature."""
        return Feature.shape_only(self.layout, self.shape, self.dtype)

    def describe(self) -> str:
        """Return how every table names this feature: ``"PIL image 451×300 RGB"``, ``"tensor chw [3, 300, 451] uint8"``,
        ``"eager rows [748, 3, 14, 14] float32"`` or ``"shape only: image 451×300×3 uint8"``."""
        if self.kind == "image":
            height, width = self.shape[:2]
            mode = self.image.mode if self.image is not None else f"{self.shape[2]} bands"
            return f"PIL image {width}×{height} {mode}"
        what = "eager rows" if self.layout == "patches" else f"{self.layout} tensor" if self.kind == "tensor" else ""
        if self.kind == "shape_only":
            if self.layout == "image" and len(self.shape) == 3:
                return f"shape only: image {self.shape[1]}×{self.shape[0]}×{self.shape[2]} {self.dtype}"
            return f"shape only: {self.layout} {list(self.shape)} {self.dtype}"
        return f"{what} {list(self.shape)} {self.dtype}"


@dataclass
class Item:
    """One ``MultimodalDataItem`` (one image)."""

    grids: dict[str, list[list[int]]]  # only the keys the item carries, each a list of [t, h, w]
    feature: Feature
    deferred: dict[str, Any] | None = None  # the kimi_k3_deferred_preprocessing config, None when eager
    local_preprocessed: bool = False
    original_size: tuple[int, int] | None = None  # (width, height) of the upload
    label: str = ""  # a human name, e.g. the sample file

    @property
    def backend(self) -> str | None:
        """Return ``"gpu"``/``"cpu"`` for a deferred item, ``None`` for an eager one."""
        return None if self.deferred is None else self.deferred.get("backend")

    def grid_source(self) -> str | None:
        """Return which grid key SGLang reads for this item (``image_grid_thw`` wins), or None."""
        for key in GRID_KEYS:
            if key in self.grids:
                return key
        return None


@frozen
class RecordedOutcome:
    """What the captured call itself did: ``"ok"``, or ``"error"`` with the exception SGLang raised."""

    outcome: Literal["ok", "error"]
    error: ErrorInfo | None = None

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RecordedOutcome:
        """Return the outcome :meth:`to_json` wrote (``"error"`` absent or null: none recorded)."""
        error = value.get("error")
        return cls(value["outcome"], None if error is None else ErrorInfo(error["type"], error["message"]))

    def to_json(self) -> dict[str, Any]:
        """Return ``{"outcome", "error": {"type", "message"} | null}``."""
        return {"outcome": self.outcome, "error": None if self.error is None else self.error.to_json()}


@dataclass
class Batch:
    """The items of one ``get_image_feature`` call plus the runtime facts that shape the split."""

    items: list[Item]
    processor: dict[str, Any] | None = None  # media_proc_cfg used by the cpu backend
    attn_tp_size: int = 1
    attn_tp_rank: int | None = None
    image_indices: list[int] | None = None  # what the failing rank was asked to materialize, if known
    sglang_version: str | None = None
    code_path: CodePath = "post-fix"  # the code path: "post-fix", "pre-fix" or "no-split" (0.5.17)
    code_path_source: PathSource = PathSource.ASSUMED  # detected, scenario, recorded or assumed
    recorded: RecordedOutcome | None = None  # what the captured call did (None: not recorded)
    note: str = ""
    created_by: str = ""
    scenario: str | None = None  # the catalogue scenario that built this batch (its created_by names it too)
    processor_output: ProcessorOutputForm = "concatenated"  # the manifest's extra.processor_output
    extra: dict[str, Any] = field(default_factory=dict)  # the manifest's other extra facts
    forward_context: ForwardContext | None = None  # the forward pass around the call, when a capture recorded it

    def __len__(self) -> int:
        return len(self.items)

    def manifest_extra(self) -> dict[str, Any]:
        """Return the manifest's ``extra`` object: ``processor_output`` (unless the default) first, then ``extra``."""
        if self.processor_output == "concatenated":
            return dict(self.extra)
        return {"processor_output": self.processor_output, **self.extra}


def check_processor_output(batch: Batch) -> ProcessorOutputForm:
    """Return ``batch.processor_output`` when it is one of :data:`PROCESSOR_OUTPUTS`; raise ConfigError otherwise."""
    output = batch.processor_output
    if output not in PROCESSOR_OUTPUTS:
        raise ConfigError(f"batch.processor_output: expected one of {list(PROCESSOR_OUTPUTS)}, got {output!r}")
    return output


def scenario_named_by(created_by: str) -> str | None:
    """Return the scenario a ``created_by`` text names (``"kimi-viz scenario NAME"``), or None."""
    if not created_by.startswith(SCENARIO_CREATOR):
        return None
    return created_by.removeprefix(SCENARIO_CREATOR).strip() or None
