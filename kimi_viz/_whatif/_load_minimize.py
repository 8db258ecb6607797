"""The smallest set of requests and images of a failing workload that still fails the same way.

:func:`minimize_load` runs ``ddmin`` (:func:`~._minimize.ddmin`) over the workload's images, each
named by its request and its position there: a candidate keeps those images in their requests (a
request left with none is dropped; ids, text lengths, arrivals, stale artifacts and cache seeds stay
with what is kept), and "still fails" when SGLang raises the same exception type and message as the
full workload did, on the same release, attention-TP size and settings. The result is 1-minimal:
dropping any one kept image makes that failure go away.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..report.tables import Table
from ..request.settings import ServerSettings
from ..schedule.workload_replay import LoadSettings
from ..schedule.workload import Workload
from ._minimize import ddmin
from .load import LoadAnswer, whatif_load, with_fix

Unit = tuple[int, int]  # (request, image) in the original workload


def subset(workload: Workload, units: list[Unit]) -> Workload:
    """Return ``workload`` keeping only ``units`` (request, image); requests left empty are dropped."""
    keep: dict[int, list[int]] = {}
    for r, i in units:
        keep.setdefault(r, []).append(i)
    requests = []
    for r, request in enumerate(workload.requests):
        kept = sorted(keep.get(r, []))
        if not kept:
            continue
        stale = tuple((kept.index(k), image) for k, image in request.stale if k in kept)
        gaps = tuple(sum(request.gaps[a:b]) for a, b in zip(kept, kept[1:])) if request.gaps else ()
        requests.append(replace(request, images=tuple(request.images[k] for k in kept), stale=stale, gaps=gaps))
    return Workload(tuple(requests), workload.cache)


@dataclass
class LoadMinimized:
    """A failing workload shrunk to the requests and images it needs."""

    workload: Workload
    target: tuple[str, str] | None  # the (type, message) kept; None when the workload does not fail
    kept: list[Unit]
    answer: LoadAnswer  # the minimal workload's answer (the full one's when nothing fails)
    tests: int = 0

    @property
    def minimal(self) -> Workload:
        """Return the minimal workload."""
        return subset(self.workload, self.kept) if self.target is not None else self.workload

    def table(self) -> Table:
        """Return one row per original image: its request, kept or dropped."""
        kept = set(self.kept)
        rows = [
            [request.rid, i, image.label, f"{image.width}×{image.height}", "kept" if (r, i) in kept else "dropped"]
            for r, request in enumerate(self.workload.requests)
            for i, image in enumerate(request.images)
        ]
        caption = "no failure to shrink" if self.target is None else f"keeps {self.target[0]}: {self.target[1]}"
        return Table(["request", "image", "file", "size", "minimal set"], rows, caption=caption)

    def text(self) -> str:
        """Return the result as ``kimi-viz whatif --requests FILE --minimize`` prints it."""
        where = f"SGLang {self.answer.release.version} at attention-TP {self.answer.tp_size}"
        if self.target is None:
            return f"the workload passes on {where}: there is no failure to shrink"
        minimal = self.minimal
        names = "; ".join(f"{r.rid}: {', '.join(i.label for i in r.images)}" for r in minimal.requests)
        lines = [
            f"== minimal failing workload on {where} ==",
            f"keeps the failure {self.target[0]}: {self.target[1]}",
            f"minimal set: {len(minimal.requests)} request(s), {minimal.images} of {self.workload.images} images: "
            + names,
            f"search: {self.tests} workload replays (ddmin over images, each in its request); "
            "every kept image is needed",
            repr(self.table()),
            f"why: {self.answer.why}",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Return the minimal set as JSON: the error kept, the kept (request, image) pairs, the minimal workload."""
        return {
            "sglang_version": self.answer.release.version,
            "tp_size": self.answer.tp_size,
            "error": None if self.target is None else {"type": self.target[0], "message": self.target[1]},
            "kept": [{"request": self.workload.requests[r].rid, "image": i} for r, i in self.kept],
            "workload": self.minimal.to_json(),
            "tests": self.tests,
            "answer": self.answer.to_json(),
        }


def minimize_load(
    workload: Workload,
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
) -> LoadMinimized:
    """Return the :class:`LoadMinimized` workload: the fewest images (in their requests) failing the same way."""
    full = whatif_load(
        workload, sglang_version=sglang_version, tp_size=tp_size, settings=settings, load=load, find_fix=False
    )
    target = full.error_key()
    units = [(r, i) for r, request in enumerate(workload.requests) for i in range(len(request.images))]
    if target is None:
        return LoadMinimized(workload, None, units, with_fix(full, settings, load), 1)
    answers: dict[tuple[Unit, ...], LoadAnswer] = {tuple(units): full}

    def run(kept: list[Unit]) -> LoadAnswer:
        key = tuple(kept)
        if key not in answers:
            answers[key] = whatif_load(
                subset(workload, kept),
                sglang_version=sglang_version,
                tp_size=tp_size,
                settings=settings,
                load=load,
                find_fix=False,
            )
        return answers[key]

    def fails(kept: list[int]) -> bool:
        return target in run([units[k] for k in kept]).errors()

    kept = [units[k] for k in ddmin(list(range(len(units))), fails)]
    # The fix search replays later releases: run it once, on the minimal workload only.
    return LoadMinimized(workload, target, kept, with_fix(run(kept), settings, load), len(answers))


__all__ = ["LoadMinimized", "subset", "minimize_load"]
