"""Releases × attention-TP sizes: one request's verdict in every cell, so a regression and its fix read as one table.

Rows are the four request-side versions (0.5.17, 0.5.18, 0.5.19–0.5.22, 0.5.23: each row's releases
share both the request side and the ``get_image_feature`` code path), columns the attention-TP sizes
1, 2, 4, 8. The items are built once per row (they do not depend on the TP size) and every cell is
replayed in shapes mode without a fix search, so a sweep costs little more than one replay per cell.
A setting a release refuses (``cuda_vmm`` on 0.5.17, a preprocessing-cache size before 0.5.18) makes
its row "n/a" with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SettingNotInReleaseError, WhatIfError
from ..releases import REQUEST_SIDES, RequestSide
from ..report.tables import Table
from ..request.images import RequestImage, probe_images
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import build_request
from ..split.ranks import check_tp_size
from .run import WhatIf, evaluate
from .status import WhatIfStatus

SWEEP_TP_SIZES = (1, 2, 4, 8)
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class SweepCell:
    """One release row at one attention-TP size: its status and the what-if behind it."""

    side: RequestSide
    tp_size: int
    status: WhatIfStatus
    result: WhatIf | None  # None when the release refuses a setting
    reason: str = ""  # why the cell is not applicable

    @property
    def failing_ranks(self) -> list[int]:
        """Return the ranks that raise."""
        return [] if self.result is None or self.result.verdict is None else self.result.verdict.failing_ranks

    @property
    def error(self) -> tuple[str, str] | None:
        """Return ``(type, message)`` of the first failing rank's error, or None."""
        return None if self.result is None else self.result.error_key()

    def to_json(self) -> dict[str, Any]:
        """Return the cell as one JSON object: release row, TP size, status, error, ranks, culprit and why."""
        result = self.result
        verdict = None if result is None else result.verdict
        error = self.error
        return {
            "release": self.side.releases[0],
            "releases": list(self.side.releases),
            "request_side": self.side.version,
            "code_path": None if result is None else result.release.code_path,
            "tp_size": self.tp_size,
            "status": self.status.value,
            "error": None if error is None else {"type": error[0], "message": error[1]},
            "failing_ranks": self.failing_ranks,
            "ranks": None if verdict is None else [r.to_json() for r in verdict.ranks],
            "scenario_class": None if verdict is None else verdict.divergence.scenario_class,
            "culprit": None if result is None else result.culprit(),
            "headline": None if verdict is None else verdict.headline(),
            "why": self.reason if result is None else result.why,
        }


@dataclass
class Sweep:
    """Every release row × attention-TP size for one request and one set of server settings."""

    images: list[RequestImage]
    settings: ServerSettings
    tp_sizes: tuple[int, ...]
    cells: list[SweepCell]
    seconds: float = 0.0
    legend: dict[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for cell in self.cells:
            if cell.error is not None and cell.error not in self.legend:
                self.legend[cell.error] = _LETTERS[len(self.legend) % len(_LETTERS)]

    @property
    def sides(self) -> list[RequestSide]:
        """Return the release rows, oldest first."""
        return list(dict.fromkeys(c.side for c in self.cells))

    def cell(self, release: str, tp_size: int) -> SweepCell:
        """Return the cell of the row holding ``release`` (e.g. ``"0.5.20"``) at ``tp_size``."""
        for c in self.cells:
            if release in c.side.releases and c.tp_size == tp_size:
                return c
        rows = ", ".join(side.label for side in self.sides)
        sizes = ", ".join(map(str, self.tp_sizes))
        raise WhatIfError(f"release {release} at TP {tp_size}: no such cell; the sweep holds {rows} at TP {sizes}")

    def cell_text(self, cell: SweepCell) -> str:
        """Return a cell as the table shows it: ``ok``, ``✗ A rank 1``, ``silent S4``, ``no call`` or ``n/a``."""
        if cell.status is WhatIfStatus.NOT_APPLICABLE:
            return "n/a"
        if cell.status is WhatIfStatus.NO_CALL:
            return "no call"
        if cell.status is WhatIfStatus.SILENT_MISMATCH:
            verdict = cell.result.verdict if cell.result is not None else None
            return "silent " + (verdict.divergence.scenario_class if verdict is not None else "")
        if cell.error is None:
            return "ok"
        ranks = cell.failing_ranks
        where = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {','.join(map(str, ranks))}"
        return f"✗ {self.legend[cell.error]} {where}"

    def table(self) -> Table:
        """Return the sweep as a :class:`~kimi_viz.report.Table`: one row per release, one column per TP size."""
        rows, marks = [], []
        for side in self.sides:
            cells = [c for c in self.cells if c.side is side]
            path = next((c.result.release.code_path for c in cells if c.result is not None), "—")
            rows.append([side.label, path] + [self.cell_text(c) for c in cells])
            marks.append(any(c.error is not None for c in cells))
        caption = f"{len(self.images)} image(s), {self.settings.sglang_flags()}"
        return Table(
            ["release", "code path"] + [f"TP {t}" for t in self.tp_sizes], rows, caption=caption, highlight=marks
        )

    def legend_lines(self) -> list[str]:
        """Return one line per distinct error: its letter, type and exact message."""
        return [f"{letter}: {kind}: {message}" for (kind, message), letter in self.legend.items()]

    def summary(self) -> str:
        """Return one sentence, e.g. ``"fails on 0.5.18 at TP ≥ 2 (A); clean from 0.5.19"``."""
        sides = self.sides
        parts, last_bad = [], -1
        for i, side in enumerate(sides):
            cells = [c for c in self.cells if c.side is side]
            failing = [c.tp_size for c in cells if c.error is not None]
            silent = [c.tp_size for c in cells if c.status is WhatIfStatus.SILENT_MISMATCH]
            if failing:
                letters = sorted({self.legend[c.error] for c in cells if c.error is not None})
                parts.append(f"fails on {side.label} at {_tp_text(failing, self.tp_sizes)} ({', '.join(letters)})")
                last_bad = i
            if silent:
                parts.append(f"silent mismatch on {side.label} at {_tp_text(silent, self.tp_sizes)}")
                last_bad = i
            if all(c.status is WhatIfStatus.NOT_APPLICABLE for c in cells):
                parts.append(f"{side.label} refuses these settings")
        if last_bad < 0:
            return "clean on every release and attention-TP size" + ("; " + "; ".join(parts) if parts else "")
        if last_bad + 1 < len(sides):
            parts.append(f"clean from {sides[last_bad + 1].releases[0]}")
        else:
            parts.append("not fixed in any release kimi-viz knows")
        return "; ".join(parts)

    def why_lines(self) -> list[str]:
        """Return one line per release row: why its first failing cell fails, or why its cells pass."""
        lines = []
        for side in self.sides:
            cells = [c for c in self.cells if c.side is side]
            pick = next((c for c in cells if c.status not in (WhatIfStatus.CLEAN, WhatIfStatus.NO_CALL)), cells[-1])
            text = pick.reason if pick.result is None else pick.result.why
            lines.append(f"{side.label} (TP {pick.tp_size}): {text}")
        return lines

    def why_table(self) -> Table:
        """Return one row per release: the legend of its errors, then why it fails or why it passes."""
        rows = [line.split(": ", 1) for line in self.why_lines()]
        return Table(
            ["release (TP)", "why"], rows, caption=f"summary: {self.summary()}; " + "; ".join(self.legend_lines())
        )

    def text(self) -> str:
        """Return the sweep as terminal text: the table, the error legend, the summary and the reasons."""
        lines = [repr(self.table())]
        lines += self.legend_lines()
        lines.append(f"summary: {self.summary()}")
        lines += [f"why: {line}" for line in self.why_lines()]
        return "\n".join(lines)

    def to_json(self) -> list[dict[str, Any]]:
        """Return one JSON object per cell, rows oldest first, TP sizes ascending."""
        return [c.to_json() for c in self.cells]


def _tp_text(failing: list[int], tp_sizes: Sequence[int]) -> str:
    low = min(failing)
    if [t for t in tp_sizes if t >= low] == sorted(failing) and len(failing) > 1:
        return f"TP ≥ {low}"
    return "TP " + ", ".join(map(str, sorted(failing)))


def sweep(
    images: Sequence[Any],
    *,
    settings: ServerSettings | None = None,
    tp_sizes: Sequence[int] = SWEEP_TP_SIZES,
    sides: Sequence[RequestSide] | None = None,
    mode: Mode = "shapes",
    device: Any = "auto",
) -> Sweep:
    """Return the :class:`Sweep` of a request over every release row and ``tp_sizes`` (default 1, 2, 4, 8).

    The items are built once per release row and replayed at every TP size without a fix search.
    """
    start = time.perf_counter()
    probed = probe_images(images)
    settings = settings if settings is not None else ServerSettings()
    settings.check_images(len(probed))
    tps = tuple(check_tp_size(t, "tp") for t in tp_sizes)
    cells = []
    for side in sides if sides is not None else REQUEST_SIDES.values():
        try:
            built = build_request(probed, settings, side, mode=mode)
        except SettingNotInReleaseError as exc:
            cells += [SweepCell(side, tp, WhatIfStatus.NOT_APPLICABLE, None, str(exc)) for tp in tps]
            continue
        for tp in tps:
            result = evaluate(probed, settings, side.releases[0], tp, mode=mode, device=device, built=built)
            cells.append(SweepCell(side, tp, result.status, result))
    return Sweep(probed, settings, tps, cells, time.perf_counter() - start)


__all__ = ["SWEEP_TP_SIZES", "SweepCell", "Sweep", "sweep"]
