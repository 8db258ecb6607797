"""Workloads across releases × attention-TP sizes, and every pair of images prefilled together.

:func:`sweep_load` answers one workload in every cell: rows are the release groups whose request
side, ``get_image_feature`` code path and forward pass are the same (0.5.17, 0.5.18, 0.5.19–0.5.21,
0.5.22, 0.5.23), columns the attention-TP sizes 1, 2, 4, 8. :func:`sweep_pairs` asks the load question
for a set of images: for every unordered pair, two single-image requests arriving together, on each
release and TP size. Each image's items are built once per request side, and every cell is replayed
in shapes mode without a fix search, so a cell costs one forward-pass replay.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SettingNotInReleaseError, WhatIfError
from ..releases import RELEASES, Release
from ..report.tables import Table
from ..request.images import RequestImage, probe_images
from ..request.settings import ServerSettings
from ..request.sides import BuiltRequest
from ..schedule.workload_replay import LoadSettings, build_workload_request, replay_workload
from ..schedule.workload import Request, Workload
from ..split.ranks import check_tp_size
from ._sweep import SWEEP_TP_SIZES
from .load import LoadAnswer
from .status import WhatIfStatus

PAIR_RELEASES = ("0.5.17", "0.5.18", "0.5.19", "0.5.23")  # one release per request side
MAX_PAIR_IMAGES = 64  # 2016 pairs


def release_groups() -> list[tuple[Release, ...]]:
    """Return the releases grouped by what a workload sees: request side, code path and forward rules alike."""
    same = itertools.groupby(RELEASES.values(), key=lambda r: (r.request_side, r.code_path, r.forward))
    return [tuple(group) for _, group in same]


def _label(group: Sequence[Release]) -> str:
    return group[0].version if len(group) == 1 else f"{group[0].version}–{group[-1].version}"


@dataclass
class LoadCell:
    """One release group at one attention-TP size: the workload's answer there (None when a setting is refused)."""

    releases: tuple[Release, ...]
    tp_size: int
    answer: LoadAnswer | None
    reason: str = ""

    @property
    def status(self) -> WhatIfStatus:
        """Return the cell's status (``not-applicable`` when the release refuses a setting)."""
        return WhatIfStatus.NOT_APPLICABLE if self.answer is None else self.answer.status

    @property
    def error(self) -> tuple[str, str] | None:
        """Return ``(type, message)`` of what SGLang raises, or None."""
        return None if self.answer is None else self.answer.error_key()

    def to_json(self) -> dict[str, Any]:
        """Return the cell: releases, TP size, status, error, failing ranks, why."""
        answer = self.answer
        error = self.error
        return {
            "release": self.releases[0].version,
            "releases": [r.version for r in self.releases],
            "tp_size": self.tp_size,
            "status": self.status.value,
            "error": None if error is None else {"type": error[0], "message": error[1]},
            "failing_ranks": [] if answer is None else answer.failing_ranks,
            "failing_pass": None if answer is None else answer.result.failing_pass,
            "why": self.reason if answer is None else answer.why,
        }


_MARK = {
    WhatIfStatus.CLEAN: "✓ clean",
    WhatIfStatus.ERROR_REPRODUCED: "✗ error",
    WhatIfStatus.SILENT_MISMATCH: "⚠ silent",
    WhatIfStatus.NOT_APPLICABLE: "n/a",
}


@dataclass
class LoadSweep:
    """A workload in every release group × attention-TP size."""

    workload: Workload
    tp_sizes: tuple[int, ...]
    cells: list[LoadCell]

    def table(self) -> Table:
        """Return the grid: one row per release group, one column per TP size (status and failing pass)."""
        rows = []
        groups = list(dict.fromkeys(c.releases for c in self.cells))
        for group in groups:
            row: list[Any] = [_label(group)]
            for tp in self.tp_sizes:
                cell = next(c for c in self.cells if c.releases == group and c.tp_size == tp)
                mark = _MARK[cell.status]
                if cell.answer is not None and cell.answer.failed:
                    mark += f" (pass {(cell.answer.result.failing_pass or 0) + 1})"
                row.append(mark)
            rows.append(row)
        return Table(
            ["SGLang", *(f"TP {tp}" for tp in self.tp_sizes)],
            rows,
            caption=f"{len(self.workload.requests)} request(s), {self.workload.images} image(s) in every release "
            "group × attention-TP size",
        )

    def text(self) -> str:
        """Return what ``kimi-viz whatif --requests FILE --sweep`` prints: the grid and each distinct error."""
        lines = [repr(self.table())]
        seen: dict[tuple[str, str], list[str]] = {}
        for cell in self.cells:
            if cell.error is not None:
                seen.setdefault(cell.error, []).append(f"{_label(cell.releases)} TP {cell.tp_size}")
        for (kind, message), where in seen.items():
            lines.append(f"{kind}: {message} — in {', '.join(where)}")
        refused = {c.reason for c in self.cells if c.answer is None}
        lines += [f"n/a: {reason}" for reason in sorted(refused)]
        return "\n".join(lines)

    def to_json(self) -> list[dict[str, Any]]:
        """Return one JSON object per cell."""
        return [cell.to_json() for cell in self.cells]


def sweep_load(
    workload: Workload,
    *,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    tp_sizes: Sequence[int] = SWEEP_TP_SIZES,
) -> LoadSweep:
    """Return the :class:`LoadSweep` of ``workload``: every release group × attention-TP size, shapes mode."""
    settings = settings if settings is not None else ServerSettings()
    tps = tuple(check_tp_size(tp, "tp") for tp in tp_sizes)
    cells = []
    for group in release_groups():
        release = group[0]
        try:
            built = [build_workload_request(r, settings, release) for r in workload.requests]
        except SettingNotInReleaseError as exc:
            cells += [LoadCell(group, tp, None, str(exc)) for tp in tps]
            continue
        for tp in tps:
            result = replay_workload(
                workload, sglang_version=release.version, tp_size=tp, settings=settings, load=load, built=built
            )
            cells.append(LoadCell(group, tp, LoadAnswer(result)))
    return LoadSweep(workload, tps, cells)


@dataclass(frozen=True)
class PairCell:
    """Two images as two requests arriving together, on one release at one TP size."""

    first: int
    second: int
    release: str
    tp_size: int
    status: WhatIfStatus
    error: tuple[str, str] | None
    failing_ranks: tuple[int, ...]


@dataclass
class PairSweep:
    """Every unordered pair of images, prefilled together, on each release × attention-TP size."""

    images: list[RequestImage]
    releases: tuple[str, ...]
    tp_sizes: tuple[int, ...]
    cells: list[PairCell]

    @property
    def pairs(self) -> int:
        """Return the number of pairs swept."""
        return len(self.images) * (len(self.images) - 1) // 2

    def failing(self) -> list[PairCell]:
        """Return the cells where SGLang raises."""
        return [c for c in self.cells if c.error is not None]

    def table(self) -> Table:
        """Return one row per pair that fails somewhere: the two images and where each error is raised."""
        rows = []
        by_pair: dict[tuple[int, int], list[PairCell]] = {}
        for cell in self.failing():
            by_pair.setdefault((cell.first, cell.second), []).append(cell)
        for (a, b), cells in by_pair.items():
            rows.append(
                [
                    self.images[a].label,
                    self.images[b].label,
                    ", ".join(f"{c.release} TP {c.tp_size}" for c in cells),
                    cells[0].error[0] if cells[0].error else "",
                ]
            )
        return Table(
            ["request r1", "request r2", "fails on", "error"],
            rows,
            caption=f"{len(by_pair)} of {self.pairs} pairs fail when the two requests are prefilled together",
        )

    def to_json(self) -> list[dict[str, Any]]:
        """Return one JSON object per cell."""
        return [
            {
                "r1": self.images[c.first].label,
                "r2": self.images[c.second].label,
                "release": c.release,
                "tp_size": c.tp_size,
                "status": c.status.value,
                "error": None if c.error is None else {"type": c.error[0], "message": c.error[1]},
                "failing_ranks": list(c.failing_ranks),
            }
            for c in self.cells
        ]


def sweep_pairs(
    images: Sequence[Any],
    *,
    releases: Sequence[str] = PAIR_RELEASES,
    tp_sizes: Sequence[int] = SWEEP_TP_SIZES,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
) -> PairSweep:
    """Return the :class:`PairSweep`: each pair of ``images`` as two requests arriving together, in every cell."""
    probed = probe_images(images)
    if not 2 <= len(probed) <= MAX_PAIR_IMAGES:
        raise WhatIfError(f"images: a pairs sweep needs 2 to {MAX_PAIR_IMAGES} images, got {len(probed)}")
    settings = settings if settings is not None else ServerSettings()
    tps = tuple(check_tp_size(tp, "tp") for tp in tp_sizes)
    chosen = []
    for version in releases:
        if version not in RELEASES:
            raise WhatIfError(f"releases: {version!r} is not a known release; expected one of {', '.join(RELEASES)}")
        chosen.append(RELEASES[version])
    cells = []
    for release in chosen:
        built: dict[int, BuiltRequest] = {}
        for k, image in enumerate(probed):
            built[k] = build_workload_request(Request("r", (image,)), settings, release)
        for a, b in itertools.combinations(range(len(probed)), 2):
            workload = Workload((Request("r1", (probed[a],)), Request("r2", (probed[b],))))
            for tp in tps:
                result = replay_workload(
                    workload,
                    sglang_version=release.version,
                    tp_size=tp,
                    settings=settings,
                    load=load,
                    built=[built[a], built[b]],
                )
                answer = LoadAnswer(result)
                error = answer.error_key()
                cells.append(PairCell(a, b, release.version, tp, answer.status, error, tuple(answer.failing_ranks)))
    return PairSweep(probed, tuple(r.version for r in chosen), tps, cells)


__all__ = [
    "PAIR_RELEASES",
    "release_groups",
    "LoadCell",
    "LoadSweep",
    "sweep_load",
    "PairCell",
    "PairSweep",
    "sweep_pairs",
]
