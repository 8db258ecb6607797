"""Every pair of images as two requests arriving together, on each release × attention-TP size.

:func:`sweep_pairs` asks the load question for a set of images: for every unordered pair, two
single-image requests prefilled together. Each image's items are built once per release, and every
cell is one forward-pass replay in shapes mode, without a fix search.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._records import frozen
from ..errors import WhatIfError
from ..releases import RELEASES
from ..report.text_table import Table
from ..request.images import RequestImage, probe_images
from ..request.settings import ServerSettings
from ..request.sides import BuiltRequest
from ..schedule.workload import Request, Workload
from ..schedule.workload_replay import LoadResult, LoadSettings, build_workload_request, replay_workload
from ..split.cause import ErrorInfo
from ..split.ranks import check_tp_size
from ..split.verdict import Status
from .ask import SWEEP_TP_SIZES

PAIR_RELEASES = ("0.5.17", "0.5.18", "0.5.19", "0.5.23")  # one release per request side
MAX_PAIR_IMAGES = 64  # 2016 pairs


@frozen
class PairCell:
    """Two images as two requests arriving together, on one release at one TP size."""

    first: int
    second: int
    release: str
    tp_size: int
    status: Status
    error: ErrorInfo | None
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
                    cells[0].error.type if cells[0].error else "",
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
                "error": None if c.error is None else c.error.to_json(),
                "failing_ranks": list(c.failing_ranks),
            }
            for c in self.cells
        ]


def _ranks(result: LoadResult) -> tuple[int, ...]:
    """Return the ranks that raise in the workload's failing call (none when it raises elsewhere)."""
    call = result.failing_call()
    if call is None or call.trace is None or result.encoder_error is not None:
        return ()
    return tuple(r.rank for r in call.trace.ranks if r.outcome == "error")


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
                cells.append(PairCell(a, b, release.version, tp, Status(result.status), result.error, _ranks(result)))
    return PairSweep(probed, tuple(r.version for r in chosen), tps, cells)


__all__ = ["PAIR_RELEASES", "MAX_PAIR_IMAGES", "PairCell", "PairSweep", "sweep_pairs"]
