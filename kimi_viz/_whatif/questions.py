"""What can be asked: a request, a workload, a client's chat request, a captured batch — one protocol.

Each question says what of a release it sees (:meth:`Question.sees`: releases that look alike give the
same answer, so a sweep's row and the fix search group them), prepares what a release builds once for
every attention-TP size (:meth:`Question.prepare`), answers on one release and TP size
(:meth:`Question.ask`), and lists the images a minimization may drop (:meth:`Question.units`,
:meth:`Question.subset`). :mod:`.ask` asks any of them; nothing here knows about sweeps or fixes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from .._records import frozen
from ..answer import Answer, RequestReplay, Unit, batch_answer, distinct_errors
from ..releases import Release
from ..request.images import RequestImage
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import BuiltRequest, build_request
from ..schedule.call import model_call, replay_call
from ..schedule.workload import Workload
from ..schedule.workload_replay import (
    LoadResult,
    LoadSettings,
    build_workload_request,
    replay_workload,
    whole_requests,
)
from ..split._replay import replay
from ..split.batch import Batch
from ..split.verdict import Status, build_verdict
from .why import load_why, request_why


@runtime_checkable
class Question(Protocol):
    """Something the kit answers on a deployment."""

    @property
    def subject(self) -> str:
        """Return the question in a few words, for a sweep's caption."""
        ...

    @property
    def permutable(self) -> bool:
        """Return True when a minimization also tries every order of the kept images (a lone request)."""
        ...

    def sees(self, release: Release) -> Hashable:
        """Return what of ``release`` changes the answer (releases alike answer alike)."""
        ...

    def prepare(self, release: Release, mode: Mode) -> Any:
        """Return what ``release`` builds once for every TP size; raise SettingNotInReleaseError if it refuses."""
        ...

    def ask(self, release: Release, tp_size: int, prepared: Any, *, mode: Mode, device: Any) -> Answer:
        """Return the answer on ``release`` at ``tp_size`` (no fix search)."""
        ...

    def units(self) -> tuple[Unit, ...]:
        """Return the images a minimization may drop, in order."""
        ...

    def subset(self, kept: Sequence[int]) -> Question:
        """Return the question keeping only the units at ``kept``."""
        ...


@frozen
class RequestQuestion:
    """One request carrying these images, on its own (``kimi-viz whatif IMAGE ...``)."""

    images: tuple[RequestImage, ...]
    settings: ServerSettings
    permutable = True

    @property
    def subject(self) -> str:
        """Return e.g. ``"2 image(s), --tp-size N"``."""
        return f"{len(self.images)} image(s), {self.settings.sglang_flags()}"

    def sees(self, release: Release) -> Hashable:
        """Return the request side and the code path: a lone request never meets the forward pass's rules."""
        return release.request_side, release.code_path

    def prepare(self, release: Release, mode: Mode) -> BuiltRequest:
        """Return the items the release's request side builds."""
        return build_request(list(self.images), self.settings, release.request_side, mode=mode)

    def ask(self, release: Release, tp_size: int, prepared: BuiltRequest, *, mode: Mode, device: Any) -> Answer:
        """Return the answer: the model's call at ``tp_size``, replayed on every rank."""
        call = model_call(prepared, tp_size, release.version)
        trace = replay_call(call, release.version, mode=mode, device=device)
        replayed = RequestReplay(prepared, call, trace)
        if trace is None:
            why = request_why(replayed, None, release, call.tp_size)
            return Answer(release, call.tp_size, replayed, Status.NO_CALL, None, (), why)
        answer = batch_answer(trace, release)
        why = request_why(replayed, answer.verdict, release, call.tp_size)
        return replace(answer, replay=replayed, why=why)

    def units(self) -> tuple[Unit, ...]:
        """Return one unit per image."""
        return tuple(Unit(None, p, image, image.label) for p, image in enumerate(self.images))

    def subset(self, kept: Sequence[int]) -> RequestQuestion:
        """Return the request with the images at ``kept`` (cache hits stay with their images)."""
        return RequestQuestion(tuple(self.images[p] for p in kept), self.settings.for_subset(list(kept)))


def load_answer(result: LoadResult) -> Answer:
    """Return the answer of a replayed workload: its status, the deciding call's verdict, every error, why."""
    run = result.encoder_error
    trace = result.deciding_trace()
    verdict = None if trace is None else build_verdict(trace)
    ranks = [] if verdict is None else [r.error for r in verdict.ranks if r.error is not None]
    errors = distinct_errors(result.error, ranks if run is None else [])
    stage = None if not errors else ("encode server" if run is not None else "forward pass")
    return Answer(
        result.release,
        result.tp_size,
        result,
        Status(result.status),
        verdict,
        errors,
        load_why(result),
        notes=tuple(result.notes),
        stage=stage,
    )


def subset_workload(workload: Workload, units: Sequence[Unit]) -> Workload:
    """Return ``workload`` keeping only ``units``; requests left empty are dropped, the rest keep ids and text."""
    keep: dict[str | None, list[int]] = {}
    for unit in units:
        keep.setdefault(unit.request, []).append(unit.position)
    requests = []
    for request in workload.requests:
        kept = sorted(keep.get(request.rid, []))
        if not kept:
            continue
        stale = tuple((kept.index(k), image) for k, image in request.stale if k in kept)
        gaps = tuple(sum(request.gaps[a:b]) for a, b in zip(kept, kept[1:])) if request.gaps else ()
        requests.append(replace(request, images=tuple(request.images[k] for k in kept), stale=stale, gaps=gaps))
    return Workload(tuple(requests), workload.cache)


@frozen
class WorkloadQuestion:
    """Several requests reaching the scheduler (``--together``, ``--requests FILE``): every prefill pass."""

    workload: Workload
    settings: ServerSettings
    load: LoadSettings | None = None
    permutable = False

    @property
    def subject(self) -> str:
        """Return e.g. ``"2 request(s), 3 image(s)"``."""
        return f"{len(self.workload.requests)} request(s), {self.workload.images} image(s)"

    def sees(self, release: Release) -> Hashable:
        """Return the request side, the code path and the forward pass."""
        return release.request_side, release.code_path, release.forward

    def prepare(self, release: Release, mode: Mode) -> list[BuiltRequest]:
        """Return each request's items as the release builds them: a chat's later turn re-sends every image of
        its conversation, so each request is built written out whole (:meth:`Workload.whole`)."""
        return [build_workload_request(r, self.settings, release, mode) for r in whole_requests(self.workload)]

    def ask(self, release: Release, tp_size: int, prepared: list[BuiltRequest], *, mode: Mode, device: Any) -> Answer:
        """Return the answer: every prefill pass replayed."""
        result = replay_workload(
            self.workload,
            sglang_version=release.version,
            tp_size=tp_size,
            settings=self.settings,
            load=self.load,
            mode=mode,
            device=device,
            built=prepared,
        )
        return load_answer(result)

    def units(self) -> tuple[Unit, ...]:
        """Return one unit per image, named by its request."""
        return tuple(
            Unit(r.rid, i, image, image.label) for r in self.workload.requests for i, image in enumerate(r.images)
        )

    def subset(self, kept: Sequence[int]) -> WorkloadQuestion:
        """Return the workload with only the images at ``kept``, each in its request."""
        units = self.units()
        return replace(self, workload=subset_workload(self.workload, [units[k] for k in kept]))


@frozen
class BatchQuestion:
    """A captured batch (``kimi-viz triage``): its items replayed through each release's get_image_feature."""

    batch: Batch
    rank: int | None = None  # replay one rank only (the one the capture recorded), or every rank
    permutable = False

    @property
    def subject(self) -> str:
        """Return e.g. ``"a captured batch of 3 items"``."""
        return f"a captured batch of {len(self.batch.items)} items"

    def sees(self, release: Release) -> Hashable:
        """Return the code path: a captured batch's items are already built."""
        return release.code_path

    def prepare(self, release: Release, mode: Mode) -> None:
        """Return None: nothing to build."""
        return None

    def ask(self, release: Release, tp_size: int, prepared: None, *, mode: Mode, device: Any) -> Answer:
        """Return the answer: the batch replayed with the release's code path."""
        trace = replay(
            self.batch,
            tp_size=tp_size,
            rank=self.rank,
            code_path=release.code_path,
            mode=mode,
            device=device,
            find_fix=False,
        )
        return batch_answer(trace, release)

    def units(self) -> tuple[Unit, ...]:
        """Return one unit per item."""
        return tuple(Unit(None, k, None, item.label or f"image {k}") for k, item in enumerate(self.batch.items))

    def subset(self, kept: Sequence[int]) -> BatchQuestion:
        """Return the batch with only the items at ``kept`` (no forward context: the call changed)."""
        items = [self.batch.items[k] for k in kept]
        return replace(self, batch=replace(self.batch, items=items, forward_context=None))


__all__ = [
    "Question",
    "RequestQuestion",
    "WorkloadQuestion",
    "BatchQuestion",
    "load_answer",
    "subset_workload",
]
