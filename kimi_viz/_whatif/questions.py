"""What can be asked of a release's request side and forward pass: a lone request, or a workload.

Both follow :class:`~.protocol.Question` (a client's chat request is :mod:`.chat`'s, a captured batch
:mod:`.protocol`'s own). :mod:`.ask` asks any of them; nothing here knows about sweeps or fixes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

from .._records import frozen
from ..answer import Answer, RequestReplay, Unit, batch_answer, distinct_errors
from ..devices import DeviceLike
from ..forward.call import model_call, replay_call
from ..forward.workload_replay import LoadResult, build_workload_request, replay_workload, whole_requests
from ..releases import Release
from ..request.images import RequestImage
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import BuiltRequest, build_request
from ..request.workload import Workload
from ..scheduler.event_loop import Schedule
from ..scheduler.flags import LoadSettings
from ..split.verdict import Status, build_verdict
from .protocol import workload_sees
from .why import load_why, request_why


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

    load_settings = None

    def prepare(self, release: Release, mode: Mode) -> PreparedRequest:
        """Return the request with the items the release's request side builds."""
        return PreparedRequest(
            release, build_request(list(self.images), self.settings, release.request_side, mode=mode)
        )

    def with_load(self, load: LoadSettings) -> RequestQuestion:
        """Return the question as it is: a lone request has no workload flags."""
        return self

    def units(self) -> tuple[Unit, ...]:
        """Return one unit per image."""
        return tuple(Unit(None, p, image, image.label) for p, image in enumerate(self.images))

    def subset(self, kept: Sequence[int]) -> RequestQuestion:
        """Return the request with the images at ``kept`` (cache hits stay with their images)."""
        return RequestQuestion(tuple(self.images[p] for p in kept), self.settings.for_subset(list(kept)))


@frozen
class PreparedRequest:
    """A lone request with the items one release's request side built."""

    release: Release
    built: BuiltRequest

    def status(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Status:
        """Return the answer's status at ``tp_size``."""
        return self.ask(tp_size, mode=mode, device=device).status

    def ask(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Answer:
        """Return the answer: the model's call at ``tp_size``, replayed on every rank."""
        release = self.release
        call = model_call(self.built, tp_size, release)
        trace = replay_call(call, release, mode=mode, device=device)
        replayed = RequestReplay(self.built, call, trace)
        if trace is None:
            why = request_why(replayed, None, release, call.tp_size)
            return Answer(release, call.tp_size, replayed, Status.NO_CALL, None, (), why)
        answer = batch_answer(trace, release)
        why = request_why(replayed, answer.verdict, release, call.tp_size)
        return replace(answer, replay=replayed, why=why)


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
    talking = {r.continues for r in workload.requests} | {r.rid for r in workload.requests if r.continues is not None}
    for request in workload.requests:
        if request.rid in talking:  # a conversation's turn: never offered as units, kept as it is
            requests.append(request)
            continue
        kept = sorted(keep.get(request.rid, []))
        if not kept:
            continue
        stale = tuple((kept.index(k), image) for k, image in request.stale if k in kept)
        gaps = tuple(sum(request.gaps[a:b]) for a, b in zip(kept, kept[1:])) if request.gaps else ()
        requests.append(replace(request, images=tuple(request.images[k] for k in kept), stale=stale, gaps=gaps))
    return Workload(tuple(requests), workload.cache)


@dataclass
class PreparedWorkload:
    """A workload built for one release: each request's items, and its passes once planned (shared by every TP
    size)."""

    question: WorkloadQuestion
    release: Release
    built: list[BuiltRequest]
    planned: Schedule | None = field(default=None, repr=False)

    def ask(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Answer:
        """Return the answer: every prefill pass replayed (planned on the first ask)."""
        return load_answer(self.replay(tp_size, mode=mode, device=device))

    def status(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Status:
        """Return the replay's status at ``tp_size`` (no why, no scheduler steps)."""
        return Status(self.replay(tp_size, mode=mode, device=device, explain=False).status)

    def replay(self, tp_size: int, *, mode: Mode, device: DeviceLike, explain: bool = True) -> LoadResult:
        """Return the workload replayed at ``tp_size`` (its passes planned on the first call; ``explain=False``: its
        traces without the scheduler steps that formed them)."""
        question = self.question
        result = replay_workload(
            question.workload,
            sglang_version=self.release.version,
            tp_size=tp_size,
            settings=question.settings,
            load=question.load_settings,
            mode=mode,
            device=device,
            built=self.built,
            planned=self.planned,
            release=self.release,
            explain=explain,
        )
        self.planned = result.schedule
        return result


@frozen
class WorkloadQuestion:
    """Several requests reaching the scheduler (``--together``, ``--requests FILE``): every prefill pass."""

    workload: Workload
    settings: ServerSettings
    load: LoadSettings = field(default_factory=LoadSettings)
    permutable = False

    @property
    def subject(self) -> str:
        """Return e.g. ``"2 request(s), 3 image(s)"``."""
        return f"{len(self.workload.requests)} request(s), {self.workload.images} image(s)"

    def sees(self, release: Release) -> Hashable:
        """Return the request side, the code path, the forward pass and the scheduler's rules that can change the
        passes under the workload's flags."""
        return workload_sees(release, self.load)

    @property
    def load_settings(self) -> LoadSettings:
        """Return the workload's server flags."""
        return self.load

    def with_load(self, load: LoadSettings) -> WorkloadQuestion:
        """Return the workload under other server flags."""
        return replace(self, load=load)

    def prepare(self, release: Release, mode: Mode) -> PreparedWorkload:
        """Return each request's items as the release builds them (a chat's later turn re-sends earlier images)."""
        built = [build_workload_request(r, self.settings, release, mode) for r in whole_requests(self.workload)]
        return PreparedWorkload(self, release, built)

    def units(self) -> tuple[Unit, ...]:
        """Return one unit per image, named by its request."""
        talking = {r.continues for r in self.workload.requests} | {
            r.rid for r in self.workload.requests if r.continues is not None
        }
        return tuple(
            Unit(r.rid, i, image, image.label)
            for r in self.workload.requests
            if r.rid not in talking  # a conversation's turns are kept whole: each turn re-sends the earlier images
            for i, image in enumerate(r.images)
        )

    def subset(self, kept: Sequence[int]) -> WorkloadQuestion:
        """Return the workload with only the images at ``kept``, each in its request."""
        units = self.units()
        return replace(self, workload=subset_workload(self.workload, [units[k] for k in kept]))


__all__ = [
    "PreparedRequest",
    "RequestQuestion",
    "WorkloadQuestion",
    "PreparedWorkload",
    "load_answer",
    "subset_workload",
]
