"""What every stage of the replay shares: the call's context, one rank's bookkeeping, and how SGLang raises.

:class:`SGLangRaise` is the replay's internal signal that SGLang raises at this point (it is caught
by :mod:`kimi_viz.split._replay` and recorded in the trace, never raised to the caller). The feature
helpers answer what SGLang's ``isinstance`` and shape checks see for a :class:`~kimi_viz.split.batch.Feature`,
including a shape-only (redacted) one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..devices import DeviceLike
from ..preprocess.config import ProcessorConfig
from ..releases import CodePath
from .batch import Batch, Feature
from .trace import Cause, CauseKind, ErrorInfo, ImageRow, Step

if TYPE_CHECKING:  # pragma: no cover - torch loads only where pixels are materialized
    import torch

PIL_CLASS = "<class 'PIL.Image.Image'>"

#: ``(rows, trailing shape, tensor or None)`` of a feature as it enters ``materialize_multimodal_features``.
Materialized = tuple[int | None, tuple[int, ...], "torch.Tensor | None"]


class SGLangRaise(Exception):
    """Internal: SGLang raises here. Carries the exception SGLang raises and its :class:`Cause`."""

    def __init__(self, type_name: str, message: str, cause: Cause | None = None):
        super().__init__(message)
        self.info = ErrorInfo(type_name, message)
        self.cause = cause


def raises(type_name: str, message: str, kind: CauseKind, image: int | None = None, **facts: Any) -> SGLangRaise:
    """Return the :class:`SGLangRaise` for SGLang's ``type_name(message)`` with its cause."""
    return SGLangRaise(type_name, message, Cause(kind, image, **facts))


def outcome_of(raised: SGLangRaise | None) -> tuple[ErrorInfo | None, Cause | None]:
    """Return ``(error, cause)`` of the step where SGLang raises ``raised``; ``(None, None)`` where it does not."""
    return (None, None) if raised is None else (raised.info, raised.cause)


def probe_torch(fn: Callable[[], Any], kind: CauseKind, image: int | None = None, **facts: Any) -> SGLangRaise | None:
    """Run a tiny torch operation; return what it raises (type and text, verbatim) as an SGLangRaise, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - we report whatever torch raises, verbatim
        return SGLangRaise(type(exc).__name__, str(exc), Cause(kind, image, **facts))
    return None


@dataclass
class ReplayContext:
    """The facts of one call that every rank's replay reads."""

    batch: Batch
    code_path: CodePath  # post-fix, pre-fix or no-split
    mode: str  # pixels or shapes
    device: DeviceLike
    tp_size: int
    consumer: ProcessorConfig | None  # the cpu backend's checkpoint-processor config
    patch_size: int
    processor_output: str  # how the checkpoint processor returns pixel_values
    grid_thws_host: list[list[int]]

    @property
    def index_mapping(self) -> str:
        """Return how this code reads grid_thws_host for a group: ``global_indices`` or ``indices``."""
        return "global_indices" if self.code_path == "post-fix" else "indices"


class RankState:
    """One rank's bookkeeping: which image sits where, what the checks expect, and what was produced."""

    def __init__(self, ctx: ReplayContext, rank: int, image_indices: list[int]):
        self.ctx = ctx
        self.rank = rank
        self.image_indices = list(image_indices)
        self.rows: list[ImageRow] = [
            ImageRow(k, g, ctx.batch.items[g].label, list(ctx.grid_thws_host[g]), list(ctx.grid_thws_host[g]), g)
            for k, g in enumerate(image_indices)
        ]
        self.features: list[Materialized | None] = [None] * len(image_indices)
        self.pixel_values: torch.Tensor | None = None

    def tracks(self) -> list[ImageRow]:
        """Return a snapshot of the image rows (a step keeps them as they stood)."""
        return [r.copy() for r in self.rows]

    def add_step(self, steps: list[Step], step: Step, problem: SGLangRaise | None) -> None:
        """Append ``step`` (the rows as they stand, ``problem``'s error and cause), then raise ``problem`` if any."""
        error, cause = outcome_of(problem)
        steps.append(replace(step, error=error, cause=cause, rows=self.tracks()))
        if problem is not None:
            raise problem

    def grid_rows_read(self, indices: list[int]) -> list[int]:
        """Return the rows of grid_thws_host the checks read for these local positions (the S1 bug pre-fix)."""
        if self.ctx.code_path == "post-fix":
            return [self.image_indices[k] for k in indices]
        return list(indices)


# --- what SGLang sees of a feature -------------------------------------------------------------------
def is_tensor(feature: Feature) -> bool:
    """Return True when SGLang sees a ``torch.Tensor`` (a tensor, or a redacted one)."""
    return feature.kind == "tensor" or (feature.kind == "shape_only" and feature.layout != "image")


def type_text(feature: Feature) -> str:
    """Return ``str(type(feature))`` as SGLang formats it into its TypeError."""
    if is_tensor(feature):
        return "<class 'torch.Tensor'>"
    if feature.image is not None:
        return str(type(feature.image))
    return PIL_CLASS


def feature_json(feature: Feature) -> dict[str, Any]:
    """Return ``{"kind", "layout", "shape", "dtype"}`` of a feature."""
    return {
        "kind": feature.kind,
        "layout": feature.layout,
        "shape": [int(s) for s in feature.shape],
        "dtype": feature.dtype,
    }


def image_size(feature: Feature) -> tuple[int, int, int]:
    """Return ``(width, height, bands)`` of an image feature (loaded or shape-only)."""
    if feature.image is not None:
        return feature.image.width, feature.image.height, len(feature.image.getbands())
    height, width = int(feature.shape[0]), int(feature.shape[1])
    bands = int(feature.shape[2]) if len(feature.shape) > 2 else 3
    return width, height, bands


def keeps_alpha(feature: Feature) -> bool:
    """Return True when SGLang's ``to_chw_uint8`` keeps an alpha channel for this image (RGBA)."""
    image = feature.image
    if image is not None:
        from ..preprocess.images import has_alpha

        return image.mode != "RGB" and has_alpha(image)
    bands = int(feature.shape[2]) if len(feature.shape) > 2 else 3
    return bands in (2, 4)


def torch_dtype_text(dtype: str) -> str:
    """Return ``torch.<dtype>`` as torch prints a dtype."""
    return f"torch.{dtype}"


def size_text(shape: tuple[int, ...] | list[int]) -> str:
    """Return ``torch.Size([...])`` as torch prints a shape."""
    return f"torch.Size({[int(s) for s in shape]!r})"
