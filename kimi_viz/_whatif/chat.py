"""A client's chat (or ``/generate``) request as a question: the request side's own checks, then its workload.

:class:`ChatQuestion` renders the body as the release's request side renders it and runs its checks in
SGLang's order (:mod:`kimi_viz.request.checks`); a request they accept becomes a workload of one request
(:func:`chat_workload`) replayed as :class:`~.questions.WorkloadQuestion` replays any workload.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from .._records import frozen
from ..answer import Answer, ChatReplay, Unit
from ..errors import WhatIfError
from ..releases import Release
from ..request.chat import ChatRequest, Renderer
from ..request.checks import RequestOutcome, check_request
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import build_request
from ..schedule.steps import scheduler_rules
from ..schedule.workload import Request, Workload
from ..schedule.workload_replay import LoadResult, LoadSettings
from ..split.verdict import Status
from .questions import WorkloadQuestion


def chat_workload(outcome: RequestOutcome, rid: str = "r1") -> Workload:
    """Return the workload of one accepted request: its images and its prompt's text lengths."""
    before, gaps, after = outcome.workload_text()
    images = outcome.request.images
    return Workload((Request(rid, images, before=before, after=after, gaps=tuple(gaps) if len(images) > 1 else ()),))


@frozen
class ChatQuestion:
    """A client's request body (``--chat FILE``): the request side's own checks, then the workload replay."""

    request: ChatRequest
    settings: ServerSettings
    load: LoadSettings | None = None
    renderer: Renderer | None = None
    permutable = False

    @property
    def subject(self) -> str:
        """Return the request's summary."""
        return self.request.summary()

    def sees(self, release: Release) -> Hashable:
        """Return the request side, the code path, the forward pass and the scheduler's rules."""
        return release.request_side, release.code_path, release.forward, *scheduler_rules(release.version)

    def prepare(self, release: Release, mode: Mode) -> tuple[RequestOutcome, WorkloadQuestion | None, Any]:
        """Return the request side's outcome and, when it accepts images, the workload and its items."""
        if not self.settings.epd:  # a flag or value the release refuses is refused first, as for any request
            build_request([], self.settings, release.request_side)
        outcome = check_request(self.request, release.version, renderer=self.renderer, settings=self.settings)
        if outcome.error is not None or not outcome.processed or not self.request.images:
            return outcome, None, None
        question = WorkloadQuestion(chat_workload(outcome), self.settings, self.load)
        return outcome, question, question.prepare(release, mode)

    def ask(self, release: Release, tp_size: int, prepared: Any, *, mode: Mode, device: Any) -> Answer:
        """Return the request side's refusal, ``no-call``, or the workload's answer."""
        outcome, question, built = prepared
        if question is None:
            error = outcome.error_info()
            errors = () if error is None else (error,)
            status = Status.ERROR_REPRODUCED if errors else Status.NO_CALL
            stage = "request side" if errors else None
            return Answer(release, tp_size, ChatReplay(outcome, None), status, None, errors, outcome.why(), stage=stage)
        answer = question.ask(release, tp_size, built, mode=mode, device=device)
        assert isinstance(answer.replay, LoadResult)
        return replace(answer, replay=ChatReplay(outcome, answer.replay))

    def units(self) -> tuple[Unit, ...]:
        """Refuse: a client's request is replayed as it is."""
        raise WhatIfError("--chat with --minimize: a client's request is replayed as it is; drop --minimize")

    def subset(self, kept: Sequence[int]) -> ChatQuestion:
        """Refuse, like :meth:`units`."""
        raise WhatIfError("--chat with --minimize: a client's request is replayed as it is; drop --minimize")


__all__ = ["ChatQuestion", "chat_workload"]
