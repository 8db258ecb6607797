"""The verdict of a replay: one status, told the same way in the CLI, JSON, the report, figures and notebooks.

A replay ends in exactly one :class:`Status`:

================================  ====  ==========================================================
status                            exit  meaning
================================  ====  ==========================================================
``clean``                         0     SGLang raises nothing and every image's rows match its grid
``error-reproduced``              1     the replay raises SGLang's error (the one recorded, if any)
``silent-mismatch``               3     nothing is raised, but an image is encoded wrongly (S4, S10, S12 …)
``not-reproduced``                4     the capture recorded an error; this replay is clean — look again
``recorded-ok-replay-fails``      5     the capture recorded success; this replay raises
================================  ====  ==========================================================

(Exit 2 is bad input.) :data:`STATUS_STYLES` gives each status its badge text, symbol, colour and
one-line wording; every view uses them. :func:`build_verdict` makes a :class:`Verdict` from a
:class:`~kimi_viz.split.trace.Trace`, :func:`verdict_schema` is its JSON Schema (``verdict-v3.schema.json``, version
:data:`VERDICT_VERSION`, see ``docs/outputs.md``), :func:`format_verdict` writes it for a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

from .._records import frozen
from ..errors import ConfigError
from ..release_changes.fix_search import FixSearch
from ..releases import NEWEST, ReleaseChoice
from .batch import Batch, RecordedOutcome
from .divergence import Divergence
from .trace import ErrorInfo, Outcome, Trace

VERDICT_VERSION = 3
Fixes = Mapping[str, FixSearch]  # an answer's fix search, by the code path its verdict replayed


class Status(str, Enum):
    """How a replay ended, against what the capture recorded."""

    CLEAN = "clean"
    ERROR_REPRODUCED = "error-reproduced"
    SILENT_MISMATCH = "silent-mismatch"
    NOT_REPRODUCED = "not-reproduced"
    RECORDED_OK_REPLAY_FAILS = "recorded-ok-replay-fails"
    NO_CALL = "no-call"  # a what-if: every image was a cache hit or a duplicate, get_image_feature is never called
    NOT_APPLICABLE = "not-applicable"  # a sweep's cell: the release refuses one of the settings

    @property
    def style(self) -> StatusStyle:
        """Return how every view shows this status (badge, symbol, colours, words, exit code)."""
        return STATUS_STYLES[self]

    @property
    def failed(self) -> bool:
        """Return True when SGLang raises (an error reproduced, or a replay failing where the capture did not)."""
        return self in (Status.ERROR_REPRODUCED, Status.RECORDED_OK_REPLAY_FAILS)


@frozen
class StatusStyle:
    """How every view shows a status: badge text, a symbol (so colour is never the only signal), colours, words."""

    badge: str
    symbol: str
    color: str  # the badge's background (Okabe–Ito palette, colour-blind safe)
    text_color: str  # the badge's text, readable on ``color``
    wording: str
    exit_code: int
    word: str  # the status in a sweep's cell or a table, after the symbol

    @property
    def mark(self) -> str:
        """Return the symbol and the word, e.g. ``"≠ silent"``: how a table's cell shows the status."""
        return f"{self.symbol} {self.word}"


STATUS_STYLES: dict[Status, StatusStyle] = {
    Status.CLEAN: StatusStyle(
        "CLEAN REPLAY",
        "✓",
        "#009E73",
        "#ffffff",
        "SGLang raises nothing in get_image_feature and every image's rows match its grid.",
        0,
        "clean",
    ),
    Status.ERROR_REPRODUCED: StatusStyle(
        "ERROR REPRODUCED", "✗", "#D55E00", "#ffffff", "The replay raises SGLang's error.", 1, "error"
    ),
    Status.SILENT_MISMATCH: StatusStyle(
        "SILENT MISMATCH",
        "≠",
        "#CC79A7",
        "#000000",
        "SGLang raises nothing, but an image is encoded wrongly: its rows or its "
        "resolution are not what the consumer's grid says.",
        3,
        "silent",
    ),
    Status.NOT_REPRODUCED: StatusStyle(
        "NOT REPRODUCED",
        "?",
        "#E69F00",
        "#000000",
        "The capture recorded an error, but this replay is clean: the release, "
        "attention-TP size or rank replayed is not the one that failed.",
        4,
        "not reproduced",
    ),
    Status.RECORDED_OK_REPLAY_FAILS: StatusStyle(
        "REPLAY FAILS, CAPTURE DID NOT",
        "!",
        "#0072B2",
        "#ffffff",
        "The capture recorded success, but this replay raises: the "
        "release or settings replayed differ from the server's.",
        5,
        "replay fails",
    ),
    Status.NO_CALL: StatusStyle(
        "NO CALL",
        "∅",
        "#56B4E9",
        "#000000",
        "Nothing reaches get_image_feature: every image was a cache hit or a duplicate.",
        0,
        "no call",
    ),
    Status.NOT_APPLICABLE: StatusStyle(
        "NOT APPLICABLE",
        "–",
        "#BBBBBB",
        "#000000",
        "The release refuses one of the settings, so the question does not arise there.",
        0,
        "n/a",
    ),
}


def decide_status(outcome: Outcome, silent: bool, recorded: RecordedOutcome | None) -> Status:
    """Return the status of a replay that ended in ``outcome`` (``silent`` divergence), against the recording."""
    if outcome == "error":
        if recorded is not None and recorded.outcome == "ok":
            return Status.RECORDED_OK_REPLAY_FAILS
        return Status.ERROR_REPRODUCED
    if recorded is not None and recorded.outcome == "error":
        return Status.NOT_REPRODUCED
    return Status.SILENT_MISMATCH if silent else Status.CLEAN


@frozen
class ImageIdentity:
    """One image as every view names it: the global index, its file or label, source size, mode and backend."""

    image: int
    label: str
    size: tuple[int, int] | None  # (width, height) of the upload, when known
    mode: str | None  # PIL mode, or the raw tensor's layout
    backend: str | None  # gpu, cpu, or None for an eager item

    @property
    def name(self) -> str:
        """Return ``"image 1 (chelsea.png)"``: the one way the kit names an image."""
        return f"image {self.image}" + (
            f" ({self.label})" if self.label and self.label != f"image {self.image}" else ""
        )

    @property
    def details(self) -> str:
        """Return e.g. ``"451×300 RGB, cpu backend"``."""
        parts = []
        if self.size is not None:
            parts.append(f"{self.size[0]}×{self.size[1]}" + (f" {self.mode}" if self.mode else ""))
        elif self.mode:
            parts.append(self.mode)
        parts.append(f"{self.backend} backend" if self.backend else "eager")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """Return ``{"image", "label", "size", "mode", "backend"}``."""
        return {
            "image": self.image,
            "label": self.label,
            "size": None if self.size is None else list(self.size),
            "mode": self.mode,
            "backend": self.backend,
        }


def identities(batch: Batch) -> list[ImageIdentity]:
    """Return the :class:`ImageIdentity` of every item of ``batch``, in global order."""
    out = []
    for i, item in enumerate(batch.items):
        feature = item.feature
        if feature.image is not None:
            mode: str | None = feature.image.mode
            size: tuple[int, int] | None = (feature.image.width, feature.image.height)
        else:
            mode = None if feature.layout == "image" else f"{feature.layout} {feature.dtype} tensor"
            size = None
        if item.original_size is not None:
            size = (int(item.original_size[0]), int(item.original_size[1]))
        out.append(ImageIdentity(i, item.label or f"image {i}", size, mode, item.backend))
    return out


@frozen
class RankVerdict:
    """One rank's outcome."""

    rank: int
    image_indices: list[int] | None
    outcome: Outcome
    error: ErrorInfo | None

    def to_json(self) -> dict[str, Any]:
        """Return ``{"rank", "image_indices", "outcome", "error"}``."""
        return {
            "rank": self.rank,
            "image_indices": self.image_indices,
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
        }


@dataclass
class Verdict:
    """The verdict of one replay: status, the exact error per rank, the release, the images and the divergence."""

    status: Status
    outcome: Outcome
    error: ErrorInfo | None
    ranks: list[RankVerdict]
    divergence: Divergence
    release: ReleaseChoice
    recorded: RecordedOutcome | None
    images: list[ImageIdentity]
    code_paths: dict[str, Verdict] = field(default_factory=dict)  # the other code paths replayed (--code-path both)

    @property
    def style(self) -> StatusStyle:
        """Return the status's badge, colour and wording."""
        return STATUS_STYLES[self.status]

    @property
    def exit_code(self) -> int:
        """Return the documented exit code of the status."""
        return self.style.exit_code

    @property
    def failing_ranks(self) -> list[int]:
        """Return the numbers of the ranks that raise."""
        return [r.rank for r in self.ranks if r.outcome == "error"]

    @property
    def rank_summary(self) -> str:
        """Return e.g. ``"3 of 4 ranks fail"`` (or ``"every rank passes"``)."""
        n, failing = len(self.ranks), len(self.failing_ranks)
        if failing == 0:
            return "the replayed rank passes" if n == 1 else f"all {n} ranks pass"
        if n == 1:
            return f"rank {self.ranks[0].rank} fails"
        return f"{failing} of {n} ranks fail"

    @property
    def recorded_differs(self) -> bool:
        """Return True when the capture recorded an error other than the one this replay raises."""
        rec = self.recorded
        return rec is not None and rec.outcome == "error" and self.error is not None and rec.error != self.error

    def identity(self, image: int | None) -> ImageIdentity | None:
        """Return the identity of global image ``image`` (None when out of range)."""
        return self.images[image] if image is not None and 0 <= image < len(self.images) else None

    def headline(self) -> str:
        """Return the one sentence every view opens with: badge, what happened, where and which image."""
        style = self.style
        parts = [f"{style.symbol} {style.badge}"]
        div = self.divergence
        who = self.identity(div.first_image)
        if self.status in (Status.ERROR_REPRODUCED, Status.RECORDED_OK_REPLAY_FAILS) and self.error is not None:
            parts.append(f"{self.error.type}: {self.error.message}")
            parts.append(self.rank_summary)
        elif self.status is Status.NOT_REPRODUCED and self.recorded is not None:
            parts.append(f"the capture recorded {self.recorded.error}; this replay raises nothing")
        elif self.status is Status.SILENT_MISMATCH:
            parts.append(f"{div.scenario_class}: nothing raised, but the rows or resolution are wrong")
        if who is not None and self.status is not Status.CLEAN:
            parts.append(f"first diverging: {who.name}")
        return " — ".join(parts)

    def to_json(self, fixes: Fixes | None = None) -> dict[str, Any]:
        """Return the verdict in the schema :func:`verdict_schema` (version :data:`VERDICT_VERSION`); ``fixes`` are
        the fix searches the answer ran, by code path (``release.fixed_in``: the release found, else null)."""
        fixes = fixes or {}
        fix = fixes.get(self.release.code_path)
        data: dict[str, Any] = {
            "verdict_version": VERDICT_VERSION,
            "status": self.status.value,
            "status_text": self.style.wording,
            "headline": self.headline(),
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "recorded": None if self.recorded is None else self.recorded.to_json(),
            "release": {**self.release.to_json(), "fixed_in": None if fix is None else fix.to_json()},
            "rank_summary": self.rank_summary,
            "failing_ranks": self.failing_ranks,
            "ranks": [r.to_json() for r in self.ranks],
            "images": [i.to_json() for i in self.images],
            "divergence": self.divergence.to_json(),
        }
        if self.code_paths:  # every code path replayed, this one included (its entry without "code_paths")
            data["code_paths"] = {
                self.release.code_path: dict(data),
                **{name: v.to_json(fixes) for name, v in self.code_paths.items()},
            }
        return data


def build_verdict(
    trace: Trace, *, recorded: RecordedOutcome | None = None, others: dict[str, Trace] | None = None
) -> Verdict:
    """Return the :class:`Verdict` of ``trace``; ``recorded`` defaults to what the batch's capture recorded.

    ``others`` are traces of the same batch on other code paths (``--code-path both``): their verdicts
    go in :attr:`Verdict.code_paths`. A :class:`~kimi_viz.split.trace.Replayed` without its divergence
    analysis is refused: a verdict is never built on a replay nobody analysed.
    """
    if not isinstance(trace, Trace):
        raise ConfigError(
            f"build_verdict: expected a Trace (a replay with its divergence analysis), got {type(trace).__name__}; "
            "replay the batch with kimi_viz.replay() or analyse it with Trace.analysed()"
        )
    recorded = trace.batch.recorded if recorded is None else recorded
    divergence = trace.divergence
    status = decide_status(trace.outcome, divergence.silent, recorded)
    ranks = [RankVerdict(r.rank, r.image_indices, r.outcome, r.error) for r in trace.ranks]
    return Verdict(
        status,
        trace.outcome,
        trace.error,
        ranks,
        divergence,
        trace.release,
        recorded,
        identities(trace.batch),
        {name: build_verdict(other, recorded=recorded) for name, other in (others or {}).items()},
    )


def trace_document(trace: Trace, verdict: Verdict | None = None, fixes: Fixes | None = None) -> dict[str, Any]:
    """Return ``trace.json``: the verdict (with the answer's ``fixes``) and the step-by-step trace (``"trace"``)."""
    data = (verdict or build_verdict(trace)).to_json(fixes)
    data["trace"] = trace.to_json()
    return data


def verdict_schema_path() -> Path:
    """Return the path of the shipped JSON Schema (draft 2020-12) of the verdict, version :data:`VERDICT_VERSION`."""
    return Path(__file__).resolve().parent / f"verdict-v{VERDICT_VERSION}.schema.json"


@lru_cache(maxsize=1)
def verdict_schema() -> dict[str, Any]:
    """Return the verdict's JSON Schema (read once from :func:`verdict_schema_path`)."""
    return json.loads(verdict_schema_path().read_text(encoding="utf-8"))


def validate_verdict(verdict: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless the verdict JSON follows :func:`verdict_schema`."""
    import jsonschema

    jsonschema.validate(verdict, verdict_schema())


def release_lines(verdict: Verdict, fixes: Fixes | None = None) -> list[str]:
    """Return the lines that say which release was replayed and, for a failure the answer's fix search looked at
    (``fixes``, by code path), which later release fixes it or that none does."""
    release = verdict.release
    lines = [f"replayed: {release.label} — {release.note}"]
    fix = (fixes or {}).get(release.code_path)
    if fix is not None and fix.found is not None:
        found = fix.found
        lines.append(f"{found.text} (its {found.code_path} path replays this batch clean)")
    elif fix is not None and verdict.outcome == "error":
        newest = release.code_path == "post-fix"
        lines.append(
            "not fixed by upgrading: "
            + (
                f"SGLang {NEWEST} runs this same code path"
                if newest
                else "no later release's code replays this batch clean"
            )
            + "; the fix is in the batch (see fix)"
        )
    return lines


def image_sentence(verdict: Verdict, image: int | None) -> str:
    """Return ``"image 1 (chelsea.png; 451×300 RGB, cpu backend)"`` for a global image index."""
    who = verdict.identity(image)
    if who is None:
        return "—" if image is None else f"image {image}"
    return f"{who.name[:-1]}; {who.details})" if who.name.endswith(")") else f"{who.name} ({who.details})"


def format_verdict(verdict: Verdict, *, title: str | None = None, fixes: Fixes | None = None) -> str:
    """Return the verdict as plain text for a terminal: status first, failing ranks first (the fixing release
    from the answer's ``fixes``, by code path)."""
    lines = [title] if title else []
    lines.append(verdict.headline())
    lines.append(f"status: {verdict.status.value} (exit {verdict.exit_code}) — {verdict.style.wording}")
    lines += release_lines(verdict, fixes)
    if verdict.recorded is not None:
        rec = verdict.recorded
        lines.append(
            "recorded by the capture: "
            + ("ok" if rec.outcome == "ok" else str(rec.error))
            + (" (differs from this replay's error)" if verdict.recorded_differs else "")
        )
    error = verdict.error
    lines.append(
        "outcome: ok (SGLang raises nothing in get_image_feature)"
        if error is None
        else f"outcome: error — {error.type}: {error.message}"
    )
    lines.append(f"ranks: {verdict.rank_summary}")
    ordered = sorted(verdict.ranks, key=lambda r: (r.outcome != "error", r.rank))
    shown = ordered if len(ordered) <= 16 else [r for r in ordered if r.outcome == "error"][:16]
    for rank in shown:
        what = "ok" if rank.error is None else str(rank.error)
        images = "(none yet: raised before the assignment)" if rank.image_indices is None else rank.image_indices
        lines.append(f"  rank {rank.rank}: images {images} -> {what}")
    if len(shown) < len(ordered):
        lines.append(f"  ... {len(ordered) - len(shown)} more ranks (see --json)")
    div = verdict.divergence
    if div.scenario_class != "none" or div.first_image is not None:
        silent = " (silent)" if div.silent else ""
        lines.append(f"scenario class: {div.scenario_class}{silent}")
        if div.first_image is not None:
            counts = (
                ""
                if div.expected_rows is None and div.produced_rows is None
                else f": expected {div.expected_rows} rows, produced {div.produced_rows}"
            )
            lines.append(
                f"first diverging image: {image_sentence(verdict, div.first_image)} on rank {div.rank}" + counts
            )
            if div.grid_read_from is not None:
                lines.append(
                    f"grid read from another image: the grid of image {div.grid_read_from}, read for image "
                    f"{div.first_image}"
                )
        if div.expected_total is not None or div.produced_total is not None:
            lines.append(f"counts: expected {div.expected_total}, produced {div.produced_total}")
        if div.wrong_expectation:
            lines.append(f"wrong expectation from: {div.wrong_expectation}")
    if div.explanation:
        lines.append(f"why: {div.explanation}")
    if div.fix:
        lines.append(f"fix: {div.fix}")
    return "\n".join(lines)


__all__ = [
    "VERDICT_VERSION",
    "Status",
    "StatusStyle",
    "STATUS_STYLES",
    "decide_status",
    "ImageIdentity",
    "identities",
    "RankVerdict",
    "Verdict",
    "build_verdict",
    "trace_document",
    "verdict_schema",
    "verdict_schema_path",
    "validate_verdict",
    "release_lines",
    "image_sentence",
    "format_verdict",
]
