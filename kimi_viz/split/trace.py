"""The replay's data: what SGLang did on each rank, step by step, and why a step raised.

Everything the replay records is typed here, and every other module (the divergence analysis,
the verdict, the figures, the stepper, the report) reads these classes, never dict keys:

- :class:`Trace` — one ``get_image_feature`` call: the ranks replayed, ``grid_thws_host``, the rank
  assignment, the release replayed, and the :class:`~kimi_viz.split.divergence.Divergence`;
- :class:`RankTrace` — one attention-TP rank: its ``image_indices``, its :class:`Step` s, how it
  ended (``ok`` or an :class:`ErrorInfo`), the :class:`ImageRow` of each of its images and the
  :class:`Cause` of the exception;
- :class:`Step` — one step with a JSON snapshot of SGLang's variables, its :class:`Check` and the
  image rows as they stood after it;
- :class:`CauseKind` — every reason the replay can give for an exception, each with an explanation
  and a fix in :data:`CAUSES` (the divergence analysis refines them where §7 names a scenario).

The step names are the constants below; the replay, the figures and the stepper share them.
``to_json`` methods give the shape of ``trace.json`` (``docs/outputs.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..releases import CodePath, FixRelease, ReleaseChoice
    from .batch import Batch
    from .divergence import Divergence

Outcome = Literal["ok", "error"]

# --- step names -----------------------------------------------------------------------------------
COLLECT_GRIDS = "collect_grids"  # §6.1 one grid per item, grid_thws_host
ASSIGN_RANKS = "assign_ranks"  # §6.2 the DP runner's load balancing
SELECT_ITEMS = "select_items"  # §6.3 this rank's items, local preprocessed all or none
GROUP_BACKENDS = "group_backends"  # §6.4 deferred items grouped by backend
PREPROCESS_GPU = "preprocess_gpu"  # §6.5 SGLang's torch path
PREPROCESS_CPU = "preprocess_cpu"  # §6.5 the checkpoint processor
LENGTH_CHECK_GPU = "length_check_gpu"  # §6.6 sum(patch_counts) == pixel_values.shape[0]
LENGTH_CHECK_CPU = "length_check_cpu"
CONCATENATE = "concatenate"  # §6.7 materialize_multimodal_features
STEP_NAMES = (
    COLLECT_GRIDS,
    ASSIGN_RANKS,
    SELECT_ITEMS,
    GROUP_BACKENDS,
    PREPROCESS_GPU,
    PREPROCESS_CPU,
    LENGTH_CHECK_GPU,
    LENGTH_CHECK_CPU,
    CONCATENATE,
)


def preprocess_step(backend: str) -> str:
    """Return the name of the step that preprocesses a backend group (``preprocess_<backend>``)."""
    return f"preprocess_{backend}"


def length_check_step(backend: str) -> str:
    """Return the name of a backend group's length check (``length_check_<backend>``)."""
    return f"length_check_{backend}"


def is_preprocess_step(name: str) -> bool:
    """Return True for a backend group's preprocessing step (any backend)."""
    return name.startswith("preprocess_")


def is_length_check(name: str) -> bool:
    """Return True for a backend group's length check (any backend)."""
    return name.startswith("length_check_")


def prod(values: Any) -> int:
    """Return the product of a grid's entries as an int."""
    return math.prod(int(v) for v in values)


# --- what SGLang raises, and why ------------------------------------------------------------------
@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
        "0.5.17's code)",
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
        "Make every item's grid agree with its resize_config (and read it at global_indices: SGLang 0.5.19 or later).",
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


@dataclass
class Check:
    """A comparison SGLang makes at a step: what it expects, what it finds, and whether they agree."""

    name: str
    expected: Any
    actual: Any
    passed: bool

    def to_json(self) -> dict[str, Any]:
        """Return ``{"name", "expected", "actual", "passed"}``."""
        return {"name": self.name, "expected": self.expected, "actual": self.actual, "passed": self.passed}


@dataclass
class ImageRow:
    """One image on one rank: the grid it declares, the grid SGLang read for it, and what was produced.

    ``image`` is the global image index (its position in the call's items); ``local`` its position
    in this rank's ``image_indices``; ``grid_index_read`` the row of ``grid_thws_host`` the checks
    read for it (the image itself, except on the pre-fix code).
    """

    local: int
    image: int
    label: str
    declared_grid: list[int]
    expected_grid: list[int]
    grid_index_read: int
    produced_grid: list[int] | None = None
    produced_rows: int | None = None

    @property
    def expected_rows(self) -> int:
        """Return ``prod(expected_grid)``: the rows the checks expect for this image."""
        return prod(self.expected_grid)

    @property
    def match(self) -> bool | None:
        """Return whether the produced rows and grid equal the expectation (None: not produced yet)."""
        if self.produced_rows is None:
            return None
        return self.produced_rows == self.expected_rows and self.produced_grid in (None, self.expected_grid)

    @property
    def read_elsewhere(self) -> bool:
        """Return True when SGLang read another image's grid row for this image."""
        return self.grid_index_read != self.image

    def copy(self) -> ImageRow:
        """Return an independent copy (steps keep the rows as they stood)."""
        return ImageRow(
            self.local,
            self.image,
            self.label,
            list(self.declared_grid),
            list(self.expected_grid),
            self.grid_index_read,
            None if self.produced_grid is None else list(self.produced_grid),
            self.produced_rows,
        )

    def to_json(self, *, final: bool = False) -> dict[str, Any]:
        """Return the row as JSON; ``final`` adds ``expected_rows`` and ``match`` (the rank's image table)."""
        data = {
            "local": self.local,
            "image": self.image,
            "label": self.label,
            "declared_grid": self.declared_grid,
            "expected_grid": self.expected_grid,
            "grid_index_read": self.grid_index_read,
            "produced_grid": self.produced_grid,
            "produced_rows": self.produced_rows,
        }
        if final:
            data["expected_rows"] = self.expected_rows
            data["match"] = self.match
        return data


@dataclass
class Step:
    """One step of ``get_image_feature`` on one rank, with a JSON snapshot of SGLang's variables there.

    ``rows`` are this rank's image rows as they stood after the step (None before the rank has any:
    the grid collection and the assignment are the whole batch's).
    """

    name: str
    title: str
    spec_ref: str
    variables: dict[str, Any]
    note: str = ""
    check: Check | None = None
    error: ErrorInfo | None = None  # set on the step where SGLang raises
    cause: Cause | None = None  # why it raises there
    rows: list[ImageRow] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the step as plain JSON data (its rows under ``variables.row_tracks``)."""
        variables = dict(self.variables)
        if self.rows is not None:
            variables["row_tracks"] = [r.to_json() for r in self.rows]
        if self.cause is not None:
            variables["raised_at"] = self.cause.to_json()
        return {
            "name": self.name,
            "title": self.title,
            "spec_ref": self.spec_ref,
            "variables": variables,
            "check": None if self.check is None else self.check.to_json(),
            "note": self.note,
            "error": None if self.error is None else self.error.to_json(),
        }


@dataclass
class RankTrace:
    """What one attention-TP rank did: its images, its steps, and how it ended."""

    rank: int
    image_indices: list[int] | None
    steps: list[Step]
    outcome: Outcome
    error: ErrorInfo | None = None
    images: list[ImageRow] = field(default_factory=list)  # the final image rows, in rank order
    cause: Cause | None = None
    pixel_values: torch.Tensor | None = field(default=None, repr=False)

    @property
    def failing_step(self) -> int | None:
        """Return the index of the step where SGLang raises, or None."""
        return next((k for k, s in enumerate(self.steps) if s.error is not None), None)

    def to_json(self) -> dict[str, Any]:
        """Return the rank's full trace as plain JSON data (no pixels)."""
        return {
            "rank": self.rank,
            "image_indices": self.image_indices,
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "images": [r.to_json(final=True) for r in self.images],
            "cause": None if self.cause is None else self.cause.to_json(),
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass
class Replayed:
    """What the replay of one ``get_image_feature`` call found on every replayed rank, before any analysis.

    The divergence analysis reads this; a :class:`Trace` is this plus the analysis (and the fixing
    release), so a trace is complete when it is built.
    """

    batch: Batch = field(repr=False)
    tp_size: int
    code_path: CodePath  # the code path replayed: post-fix, pre-fix or no-split
    mode: str  # pixels or shapes
    ranks: list[RankTrace]
    grid_thws_host: list[list[int]] | None
    assignment: list[list[int]] | None
    release: ReleaseChoice

    @property
    def outcome(self) -> Outcome:
        """Return ``"error"`` when any replayed rank raises, else ``"ok"``."""
        return "error" if any(r.outcome == "error" for r in self.ranks) else "ok"

    @property
    def failing_ranks(self) -> list[RankTrace]:
        """Return the ranks that raise, lowest first."""
        return [r for r in self.ranks if r.outcome == "error"]

    @property
    def failing_rank(self) -> RankTrace | None:
        """Return the lowest-numbered rank that raises, or None."""
        failing = self.failing_ranks
        return failing[0] if failing else None

    @property
    def error(self) -> ErrorInfo | None:
        """Return the first failing rank's error, or None."""
        failing = self.failing_rank
        return None if failing is None else failing.error

    def rank_trace(self, rank: int) -> RankTrace:
        """Return the trace of ``rank`` (raises ConfigError naming the replayed ranks when absent)."""
        for trace in self.ranks:
            if trace.rank == rank:
                return trace
        raise ConfigError(f"rank {rank} was not replayed; replayed ranks: {[r.rank for r in self.ranks]}")

    def to_json(self) -> dict[str, Any]:
        """Return the step-by-step trace (``trace.json``'s ``"trace"``; the verdict module adds the verdict)."""
        return {
            "tp_size": self.tp_size,
            "code_path": self.code_path,
            "mode": self.mode,
            "grid_thws_host": self.grid_thws_host,
            "assignment": self.assignment,
            "ranks": [r.to_json() for r in self.ranks],
        }


@dataclass
class Trace(Replayed):
    """The replay of one ``get_image_feature`` call: every replayed rank, the release, the divergence and the fix."""

    divergence: Divergence = field(repr=False)
    fixed_in: FixRelease | None = None  # the first later release whose code replays this clean


__all__ = [
    "Outcome",
    "ErrorInfo",
    "CauseKind",
    "CauseText",
    "CAUSES",
    "Cause",
    "Check",
    "ImageRow",
    "Step",
    "RankTrace",
    "Replayed",
    "Trace",
    "STEP_NAMES",
    "COLLECT_GRIDS",
    "ASSIGN_RANKS",
    "SELECT_ITEMS",
    "GROUP_BACKENDS",
    "PREPROCESS_GPU",
    "PREPROCESS_CPU",
    "LENGTH_CHECK_GPU",
    "LENGTH_CHECK_CPU",
    "CONCATENATE",
    "preprocess_step",
    "length_check_step",
    "is_preprocess_step",
    "is_length_check",
    "prod",
]
