"""A client's chat (or ``/generate``) request as a question: the request side's own checks, then its workload.

:class:`ChatQuestion` renders the body as the release's request side renders it and runs its checks in
SGLang's order (:mod:`kimi_viz.request.checks`). A body whose messages hold earlier turns (a user
message answered by an assistant message, then more) is a conversation: every earlier turn is the
request the client sent then (the messages up to that answer, with the generation prompt), checked the
same way, and the turns become one workload (:func:`chat_workload`), each turn continuing the one
before (its prompt the earlier prompt, the answer's tokens, then its own), so the radix cache can
hand the last turn its matched prefix. Requests given ``beside`` the chat arrive with the last turn.
The workload is replayed as :class:`~.questions.WorkloadQuestion` replays any workload.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import field, replace

from .._records import frozen
from ..answer import Answer, ChatReplay, Unit
from ..devices import DeviceLike
from ..errors import WhatIfError
from ..releases import Release
from ..request.chat import ChatRequest, Rendered, Renderer, rendered_from_ids, text_tokens
from ..request.chat_encoding import RenderedChat
from ..request.chat_server import encode_chat_request
from ..request.checks import RequestOutcome, check_request
from ..request.model_folder import ModelFolder
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import build_request
from ..request.workload import Request, Workload
from ..scheduler.flags import LoadSettings
from ..scheduler.prefix import common_prefix
from ..split.verdict import Status
from .protocol import workload_sees
from .questions import PreparedWorkload, WorkloadQuestion, load_answer

ANSWER_END_TOKENS = 1  # <|im_end|>: the model generates it after the answer's text


def _sliced(request: ChatRequest, messages: int) -> ChatRequest:
    """Return the body the client sent with only its first ``messages`` messages (and their images)."""
    earlier = request.messages[:messages]
    images = sum(1 for msg in earlier for part in msg.parts if part.kind == "image")
    body = None if request.body is None else {**request.body, "messages": list(request.body["messages"][:messages])}
    return replace(request, messages=earlier, images=request.images[:images], body=body)


def chat_turns(request: ChatRequest) -> list[tuple[ChatRequest, int]]:
    """Return every turn of a chat body as the body the client sent then, with the tokens its answer took
    (the assistant message's text and its end token, counted); the last turn is the body itself, generating 1."""
    turns: list[tuple[ChatRequest, int]] = []
    if request.entry == "chat":
        for m, message in enumerate(request.messages):
            if m and message.role == "assistant" and request.messages[m - 1].role != "assistant":
                answer = sum(text_tokens(part.text) for part in message.parts if part.kind == "text")
                turns.append((_sliced(request, m), answer + ANSWER_END_TOKENS))
    return [*turns, (request, 1)]


def tokenized_turns(
    request: ChatRequest, model: ModelFolder, release: Release
) -> tuple[list[tuple[ChatRequest, int]], list[RenderedChat]]:
    """Return every turn of a chat body with the tokens its answer took, and each turn's ids, as ``release`` hands
    the body to the checkpoint's tokenizer: an answer's tokens are what the next turn holds after this turn's
    prompt, up to where it starts its own (the ids the body through that answer shares with the next turn).
    Raise WhatIfError when a later turn does not start with an earlier turn's ids (the kit replays a later turn
    that repeats its earlier turn id for id, as the radix tree would then match)."""
    counted = chat_turns(request)
    bodies = [body for body, _ in counted]
    encode = lambda body: encode_chat_request(
        model.tokenizer, body.body, release=release.version, source=request.source
    )
    renderings = [encode(body) for body in bodies]
    turns: list[tuple[ChatRequest, int]] = []
    for k, body in enumerate(bodies[:-1]):
        prompt, following = renderings[k].input_ids, renderings[k + 1].input_ids
        if following[: len(prompt)] != prompt:
            parted = common_prefix(prompt, following)
            raise WhatIfError(
                f"--chat with --model-path: turn {k + 2}'s ids do not start with turn {k + 1}'s (they part at token "
                f"{parted} of {len(prompt)}: the checkpoint's renderer writes the earlier turn "
                "otherwise); the kit replays a later turn that repeats the earlier one id for id: send the last turn "
                "alone, or drop --model-path to count"
            )
        through_answer = encode(_sliced(request, len(body.messages) + 1)).input_ids
        turns.append((body, max(1, common_prefix(through_answer, following) - len(prompt))))
    return [*turns, (request, 1)], renderings


def chat_workload(
    outcomes: Sequence[RequestOutcome], outputs: Sequence[int] = (), beside: Workload | None = None
) -> Workload:
    """Return the workload of accepted turns (ids ``turn1``, ``turn2``, ...; a lone body is ``r1``): each turn
    continues the one before with its own text and images, then the requests ``beside`` (arriving with the last)."""
    outputs = list(outputs) or [1] * len(outcomes)
    turns: list[Request] = []
    done_text, done_images = 0, 0  # text tokens and images of the previous turn's prompt, plus its output
    for k, (outcome, output) in enumerate(zip(outcomes, outputs)):
        before, gaps, after = outcome.workload_text()
        images = outcome.request.images
        rid = "r1" if len(outcomes) == 1 else f"turn{k + 1}"
        own_images = images[done_images:]
        if own_images:
            start = before + sum(gaps[:done_images])  # text before the first new image
            own = (start - done_text, gaps[done_images:], after)
        else:
            own = (before + sum(gaps) + after - done_text, [], 0)
        if own[0] < 0:
            raise WhatIfError(f"the chat's turn {k + 1} does not start with turn {k}'s prompt and answer")
        gaps_own = tuple(own[1]) if len(own_images) > 1 else ()
        previous = turns[-1].rid if turns else None
        turns.append(
            Request(
                rid, tuple(own_images), before=own[0], after=own[2], gaps=gaps_own, continues=previous, output=output
            )
        )
        done_text, done_images = before + sum(gaps) + after + output, len(images)
    others: list[Request] = []
    if beside is not None:
        taken = {t.rid for t in turns}
        clash = next((r.rid for r in beside.requests if r.rid in taken), None)
        if clash is not None:
            raise WhatIfError(f"--requests: the id {clash!r} names a turn of the chat; rename that request")
        last = turns[-2].rid if len(turns) > 1 else None
        others = [
            r if r.waits_for or r.continues or last is None else replace(r, waits_for=last) for r in beside.requests
        ]
    return Workload((*turns, *others), () if beside is None else beside.cache)


@frozen
class ChatQuestion:
    """A client's request body (``--chat FILE``): the request side's own checks on every turn, then the workload."""

    request: ChatRequest
    settings: ServerSettings
    load: LoadSettings = field(default_factory=LoadSettings)
    renderer: Renderer | None = None
    beside: Workload | None = None  # other requests, arriving with the chat's last turn
    model: ModelFolder | None = None  # a checkpoint folder: its tokenizer renders every turn (else text is counted)
    permutable = False

    @property
    def subject(self) -> str:
        """Return the request's summary."""
        return self.request.summary()

    def sees(self, release: Release) -> Hashable:
        """Return the request side, the code path, the forward pass and the scheduler's rules that can change the
        passes under the workload's flags."""
        return workload_sees(release, self.load)

    @property
    def load_settings(self) -> LoadSettings:
        """Return the server flags the chat's workload runs under."""
        return self.load

    def with_load(self, load: LoadSettings) -> ChatQuestion:
        """Return the chat under other server flags."""
        return replace(self, load=load)

    def prepare(self, release: Release, mode: Mode) -> PreparedChat:
        """Return the request side's outcome (the first turn it refuses, else the last) and, when it accepts
        every turn's images, the workload with its items."""
        if not self.settings.epd:  # a flag or value the release refuses is refused first, as for any request
            build_request([], self.settings, release.request_side)
        renderings: list[Rendered | None]
        if self.model is None or self.request.entry != "chat" or self.request.body is None:
            turns = chat_turns(self.request)
            renderings = [None] * len(turns)
        else:
            turns, chats = tokenized_turns(self.request, self.model, release)
            by = f"tokenized by {self.model.asked}"
            renderings = [
                rendered_from_ids(
                    c.input_ids,
                    origin="apply_chat_template ids",
                    by=by,
                    tokens=c.tokens,
                    notes=c.notes,
                    placeholder=self.model.placeholder.resolved,
                )
                for c in chats
            ]
        outcomes = []
        for (body, _), rendered in zip(turns, renderings):
            outcome = check_request(body, release, renderer=self.renderer, settings=self.settings, rendered=rendered)
            if outcome.error is not None:
                return PreparedChat(release, outcome, None)
            outcomes.append(outcome)
        last = outcomes[-1]
        if not last.processed or not self.request.images:
            return PreparedChat(release, last, None)
        workload = chat_workload(outcomes, [output for _, output in turns], self.beside)
        return PreparedChat(release, last, WorkloadQuestion(workload, self.settings, self.load).prepare(release, mode))

    def units(self) -> tuple[Unit, ...]:
        """Refuse: a client's request is replayed as it is."""
        raise WhatIfError("--chat with --minimize: a client's request is replayed as it is; drop --minimize")

    def subset(self, kept: Sequence[int]) -> ChatQuestion:
        """Refuse, like :meth:`units`."""
        raise WhatIfError("--chat with --minimize: a client's request is replayed as it is; drop --minimize")


@frozen
class PreparedChat:
    """A client's request checked by one release's request side: its outcome and, when it reaches the model, the
    workload of its turns with their items."""

    release: Release
    outcome: RequestOutcome
    workload: PreparedWorkload | None

    def ask(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Answer:
        """Return the request side's refusal, ``no-call``, or the workload's answer."""
        outcome, release = self.outcome, self.release
        if self.workload is None:
            error = outcome.error_info()
            errors = () if error is None else (error,)
            status = Status.ERROR_REPRODUCED if errors else Status.NO_CALL
            stage = "request side" if errors else None
            return Answer(release, tp_size, ChatReplay(outcome, None), status, None, errors, outcome.why(), stage=stage)
        result = self.workload.replay(tp_size, mode=mode, device=device)
        return replace(load_answer(result), replay=ChatReplay(outcome, result))

    def status(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Status:
        """Return the answer's status at ``tp_size`` (the workload's replay alone, no why)."""
        if self.workload is None:
            return self.ask(tp_size, mode=mode, device=device).status
        return self.workload.status(tp_size, mode=mode, device=device)


__all__ = ["ChatQuestion", "PreparedChat", "chat_turns", "chat_workload", "tokenized_turns"]
