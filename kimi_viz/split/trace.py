"""The replay's data: what SGLang did on each rank, step by step, and why a step raised.

Everything the replay records is typed here, and every other module (the divergence analysis,
the verdict, the figures, the stepper, the report) reads these classes, never dict keys:

- :class:`Trace` — one ``get_image_feature`` call: the ranks replayed, ``grid_thws_host``, the rank
  assignment, the release replayed, and the :class:`~kimi_viz.split.diagnosis.Divergence`;
- :class:`RankTrace` — one attention-TP rank: its ``image_indices``, its :class:`Step` s, how it
  ended (``ok`` or an :class:`ErrorInfo`), the :class:`ImageRow` of each of its images and the
  :class:`Cause` of the exception;
- :class:`Step` — one step, complete when built: SGLang's variables there (a typed record of
  :mod:`kimi_viz.split.step_records`), its :class:`Check`, where SGLang raises, and the image rows as
  they stood after it;
- :class:`CauseKind` — every reason the replay can give for an exception, each with an explanation
  and a fix in :data:`CAUSES` (the divergence analysis refines them where §7 names a scenario);
  these and :class:`ErrorInfo` live in :mod:`kimi_viz.split.cause` and are re-exported here.

The step names are the constants below; the replay, the figures and the stepper share them.
``to_json`` methods give the shape of ``trace.json`` (``docs/outputs.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._records import frozen
from ..errors import ConfigError
from .batch import Batch, prod
from .cause import CAUSES, Cause, CauseKind, CauseText, ErrorInfo
from .step_records import StepRecord

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..releases import CodePath, ReleaseChoice
    from .diagnosis import Divergence

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


@frozen
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


@frozen
class Step:
    """One step of ``get_image_feature`` on one rank, built once its outcome is known, never changed after.

    ``variables`` is the step kind's record of SGLang's variables there (:mod:`.step_records`);
    ``rows`` are this rank's image rows as they stood after the step (None before the rank has any:
    the grid collection and the assignment are the whole batch's).
    """

    name: str
    title: str
    spec_ref: str
    variables: StepRecord
    note: str = ""
    check: Check | None = None
    error: ErrorInfo | None = None  # set on the step where SGLang raises
    cause: Cause | None = None  # why it raises there
    rows: list[ImageRow] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the step as plain JSON data (its rows under ``variables.row_tracks``)."""
        variables = self.variables.to_json()
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
    """The replay of one ``get_image_feature`` call: every replayed rank, the release and the divergence."""

    divergence: Divergence = field(repr=False)
    kind: ClassVar[Literal["batch"]] = "batch"  # an answer's replay of a captured batch (kimi_viz.answer.Replay)

    def deciding_trace(self) -> Trace:
        """Return this replay: a captured batch's answer is decided by its one call."""
        return self


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
