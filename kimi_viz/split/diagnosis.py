"""What the divergence analysis concludes about a replay: the per-image table and the report.

The data of :mod:`kimi_viz.split.divergence` (which holds the analysis itself), kept below the
trace so that a :class:`~kimi_viz.split.trace.Trace` can carry its :class:`Divergence` without an
import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .cause import CauseKind
from .classes import ScenarioClass
from .findings import Finding


@dataclass
class ImageOutcome:
    """One replayed image (global index): where it ran, the grid read for it, and what was produced.

    ``expected_grid`` and ``expected_rows`` are what the consumer expects for the image: the grid
    SGLang read, except for an image a silent mismatch names, whose expectation is the consumer's own
    (S4: its processor config's grid). ``silent`` flags that image: SGLang raised nothing, yet it is
    encoded wrongly.
    """

    image: int
    label: str
    rank: int
    backend: str | None
    grid_source: str | None
    declared_grid: list[int]
    grid_index_read: int
    expected_grid: list[int]
    expected_rows: int
    produced_grid: list[int] | None
    produced_rows: int | None
    match: bool | None
    silent: bool = False

    @property
    def flagged(self) -> bool:
        """Return True when the row is wrong: its counts differ, or a silent mismatch names it."""
        return self.match is False or self.silent

    def match_text(self) -> str:
        """Return the match column as every table writes it: yes, NO or not checked, a silent mismatch flagged."""
        if self.silent:
            return "NO (silent: SGLang raised nothing)" if self.match is False else "yes, but mis-encoded (silent)"
        return {True: "yes", False: "NO", None: "not checked"}[self.match]

    def to_json(self) -> dict[str, Any]:
        """Return the row as plain JSON data."""
        return dict(self.__dict__)


@dataclass
class Divergence:
    """Where and why a replay's counts part (or that nothing diverges)."""

    scenario_class: ScenarioClass = ScenarioClass.NONE
    silent: bool = False  # SGLang raises nothing, yet rows or resolution are wrong
    cause: CauseKind | None = None  # the replay's cause of the exception, when one is raised
    first_image: int | None = None  # global index of the first diverging image
    label: str | None = None
    rank: int | None = None  # the rank where it diverges
    expected_rows: int | None = None  # rows its grid (as SGLang read it) holds
    produced_rows: int | None = None  # rows preprocessing produced for it
    expected_grid: list[int] | None = None
    produced_grid: list[int] | None = None
    expected_total: int | None = None  # the two counts of the failing check on that rank
    produced_total: int | None = None
    grid_source: str | None = None  # image_grid_thw or grid_thws
    grid_read_from: int | None = None  # the image whose grid was read for first_image (S1), else None
    index_mapping: str = "global_indices"  # global_indices (post-fix) or indices (shard-local) before the fix
    wrong_expectation: str | None = None  # which grid key or index mapping produced the wrong expectation
    explanation: str = ""
    fix: str | None = None
    images: list[ImageOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the report as plain JSON data (the verdict's ``divergence``)."""
        data = {k: v for k, v in self.__dict__.items() if k not in ("images", "findings", "cause", "scenario_class")}
        data["scenario_class"] = self.scenario_class.value
        data["cause"] = None if self.cause is None else self.cause.value
        data["images"] = [row.to_json() for row in self.images]
        data["findings"] = [f.to_json() for f in self.findings]
        return data


__all__ = ["ImageOutcome", "Divergence"]
