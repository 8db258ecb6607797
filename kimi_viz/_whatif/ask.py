"""Ask any question on a deployment, across every release, or shrink a failure: each written once.

:func:`whatif` answers a question (images, a :class:`~kimi_viz.request.workload.Workload`, a client's
:class:`~kimi_viz.request.chat.ChatRequest` or a captured :class:`~kimi_viz.split.batch.Batch`) on one
release and attention-TP size, and a failure names the first later release that runs it clean
(:func:`~.fix.with_fix`, the one fix search).
:func:`sweep` asks it in every release group × TP size, :func:`minimize` keeps the fewest images that
fail with the same error (Zeller's ``ddmin``; for a lone request every order of them too).
"""

from __future__ import annotations

import gc
import itertools
import sys
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..answer import Answer, Cell, Minimized, Sweep
from ..devices import DeviceLike
from ..errors import SettingNotInReleaseError, WhatIfError
from ..forward.workload_replay import check_workload_settings
from ..releases import RELEASES, Release, release_for, release_span
from ..request.images import probe_images
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.workload import Workload
from ..scheduler.flags import LoadSettings
from ..server_args.sources import ServerReport
from ..split.batch import Batch
from ..split.ranks import check_tp_size
from ..split.verdict import Status
from .fix import answer_on, with_fix
from .flags import flag_search
from .hint import pair_hint
from .protocol import BatchQuestion, Prepared, Question
from .questions import RequestQuestion, WorkloadQuestion

if TYPE_CHECKING:  # pragma: no cover - the chat template loads only for a client's request
    from ..request.chat import Renderer
    from ..request.model_folder import ModelFolder

SWEEP_TP_SIZES = (1, 2, 4, 8)
K25 = "kimi-k25"
K25_LIMITS_NOTE = (
    "--producer-config / --consumer-config kimi-k25: this replays Kimi-K3's code (models/kimi_k3.py, its deferred "
    "split) with Kimi-K2.5's image limits; a Kimi-K2.5 or K2.7 server runs models/kimi_k25.py, its own processor "
    "and no deferred split, which the kit does not replay"
)
MAX_ORDERS = 120  # every order of up to 5 kept images


def as_question(
    subject: Any,
    *,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    renderer: Renderer | None = None,
    beside: Workload | None = None,
    model: ModelFolder | None = None,
) -> Question:
    """Return the question ``subject`` asks: images (paths, bytes, PIL images), a Workload, a ChatRequest (with the
    requests ``beside`` it; tokenized by ``model``'s tokenizer when a checkpoint folder is given), a Batch."""
    settings = settings if settings is not None else ServerSettings()
    load = load if load is not None else LoadSettings()
    if isinstance(subject, Workload):
        return WorkloadQuestion(subject, check_workload_settings(settings), load)
    chat = sys.modules.get("kimi_viz.request.chat")  # a ChatRequest exists only once its module is loaded
    if chat is not None and isinstance(subject, chat.ChatRequest):
        from .chat import ChatQuestion  # the chat template and the request side's checks: only for a chat request

        return ChatQuestion(subject, check_workload_settings(settings), load, renderer, beside, model)
    if isinstance(subject, Batch):
        return BatchQuestion(subject)
    if isinstance(subject, Question):
        return subject
    probed = tuple(probe_images(subject))
    return RequestQuestion(probed, settings.check_images(len(probed)))


def whatif(
    subject: Any,
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    renderer: Renderer | None = None,
    beside: Workload | None = None,
    mode: Mode = "shapes",
    device: DeviceLike = "auto",
    find_fix: bool = True,
    under_load: bool = True,
    try_flags: bool = True,
    server: ServerReport | None = None,
    model: ModelFolder | None = None,
) -> Answer:
    """Return the :class:`~kimi_viz.answer.Answer` to a question on SGLang ``sglang_version`` at attention-TP N.

    ``subject`` is the request's images (paths, bytes or PIL images), a ``Workload``, a client's
    ``ChatRequest`` or a captured ``Batch``; ``settings`` are the server settings (default SGLang's),
    ``load`` the scheduler's for a workload, ``beside`` other requests arriving with a chat's last turn.
    ``mode="shapes"`` reads only image headers, ``"pixels"`` materializes the pixels too. With ``find_fix``
    a failure names the first later release that runs it clean. With ``under_load`` a lone request clean
    alone is also prefilled beside each sample image (smallest first): ``Answer.under_load`` names the
    first partner that makes it fail. With ``try_flags`` a workload's scheduler flags are each changed
    alone: ``Answer.flags`` names those that change its status. ``server`` (what a launch command and a log said,
    :func:`~.deployment.read_deployment`) is carried on the answer as ``Answer.server``.
    """
    with collector_paused():  # every replay's records only grow the heap: rescanning it cost a third of an answer
        question = as_question(subject, settings=settings, load=load, renderer=renderer, beside=beside, model=model)
        release, sentence = release_for(sglang_version)
        try:
            answer = answer_on(question, release, tp_size, mode, device)
        except SettingNotInReleaseError as exc:
            if sglang_version.strip() == release.version:
                raise
            raise SettingNotInReleaseError(f"{exc} ({sentence})") from None
        if sglang_version.strip() != release.version:  # a build or a future release runs a known release's code: say so
            answer = replace(answer, notes=(sentence, *answer.notes))
        idle = [] if question.load_settings is None else question.load_settings.idle_flags()
        if idle:
            answer = replace(answer, notes=(*answer.notes, *idle))
        borrowed = [] if settings is None else [c for c in (settings.producer_config, settings.consumer) if c == K25]
        if borrowed:  # a K2.5 preset on a K3 replay: say which code runs
            answer = replace(answer, notes=(*answer.notes, K25_LIMITS_NOTE))
        if find_fix:
            answer = with_fix(question, answer)
        if try_flags:
            answer = replace(answer, flags=flag_search(question, answer, mode, device))
        if under_load and isinstance(question, RequestQuestion) and answer.status is Status.CLEAN:
            hint = pair_hint(question, release, answer.tp_size, paths=subject)
            answer = answer if hint is None else replace(answer, under_load=hint)
        return answer if server is None else replace(answer, server=server)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector while an answer is worked out or a sweep keeps every cell's answer: the
    replays' records only grow the heap, and rescanning it on every collection cost a third of an answer's time and
    half a sweep's. Restored after (nested pauses leave it to the outermost); what a replay left for it is
    collected then."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def release_groups(question: Question, refused: Mapping[str, str] | None = None) -> list[tuple[Release, ...]]:
    """Return the releases in groups that see ``question`` alike (:meth:`Question.sees`), oldest first: a sweep's
    rows; a release that refuses the server (``refused``) is a group with the others that refuse it alike."""
    refused = refused or {}

    def seen(release: Release) -> Hashable:
        reason = refused.get(release.version)
        return ("refused", reason.replace(release.version, "V")) if reason is not None else question.sees(release)

    return [tuple(g) for _, g in itertools.groupby(RELEASES.values(), key=seen)]


def sweep_row(
    question: Question,
    group: tuple[Release, ...],
    tps: tuple[int, ...],
    prepared: Prepared | None = None,
    refused: str | None = None,
) -> list[Cell]:
    """Return one release group's cells: the question prepared once (``prepared`` when the caller already did), then
    asked at every TP size in shapes mode, without a fix search; ``refused`` (why the group refuses the server's
    launch command) makes every cell n/a."""
    if refused is not None:
        return [Cell(group, tp, None, refused) for tp in tps]
    if prepared is None:
        try:
            prepared = question.prepare(group[0], "shapes")
        except SettingNotInReleaseError as exc:
            return [Cell(group, tp, None, str(exc)) for tp in tps]
    return [Cell(group, tp, prepared.ask(tp, mode="shapes", device="cpu")) for tp in tps]


def _refusal(refused: Mapping[str, str], group: tuple[Release, ...]) -> str | None:
    """Return why a group of releases refuses the server's launch command, said of the whole group."""
    reason = refused.get(group[0].version)
    if reason is None:
        return None
    span = release_span([r.version for r in group])
    return reason.replace(f"SGLang {group[0].version}", f"SGLang {span}")


def sweep(
    subject: Any,
    *,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    renderer: Renderer | None = None,
    beside: Workload | None = None,
    tp_sizes: Sequence[int] = SWEEP_TP_SIZES,
    refused: Mapping[str, str] | None = None,
    model: ModelFolder | None = None,
) -> Sweep:
    """Return the :class:`~kimi_viz.answer.Sweep` of a question over every release group × ``tp_sizes``.

    Releases that look alike to the question (:meth:`Question.sees`) share a row; each row builds its
    items once and replays every TP size in shapes mode, without a fix search. ``refused`` maps a release to why
    it refuses the server's launch command: its row is n/a.
    """
    question = as_question(subject, settings=settings, load=load, renderer=renderer, beside=beside, model=model)
    tps = tuple(check_tp_size(t, "tp") for t in tp_sizes)
    refused = refused or {}
    with collector_paused():
        cells = [
            cell
            for group in release_groups(question, refused)
            for cell in sweep_row(question, group, tps, refused=_refusal(refused, group))
        ]
    return Sweep(question.subject, tps, tuple(cells))


def ddmin(items: list[int], fails: Callable[[list[int]], bool]) -> list[int]:
    """Return a 1-minimal sublist of ``items`` (order kept) for which ``fails`` holds (Zeller's ddmin)."""
    n = 2
    while len(items) >= 2:
        size = len(items)
        chunks = [c for c in (items[size * i // n : size * (i + 1) // n] for i in range(n)) if c]
        for chunk in chunks:
            if fails(chunk):
                items, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [x for x in items if x not in chunk]
                if rest and fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


def minimize(
    subject: Any,
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    mode: Mode = "shapes",
) -> Minimized:
    """Return the :class:`~kimi_viz.answer.Minimized` question: the fewest images, in order, failing the same way.

    A candidate "still fails" when SGLang raises the same exception type and message as the full
    question did, on the same release, TP size and settings. For a lone request every order of the
    kept images (up to :data:`MAX_ORDERS`) is tried too, to say whether the order matters.
    """
    question = as_question(subject, settings=settings, load=load)
    units = question.units()
    release, _ = release_for(sglang_version)
    full = answer_on(question, release, tp_size, mode)
    if full.error is None:
        return Minimized(units, tuple(range(len(units))), None, with_fix(question, full), 1)
    target = full.error
    answers: dict[tuple[int, ...], Answer] = {tuple(range(len(units))): full}

    def run(kept: Sequence[int]) -> Answer:
        key = tuple(kept)
        if key not in answers:
            answers[key] = answer_on(question.subset(key), release, tp_size, mode)
        return answers[key]

    def fails(kept: list[int]) -> bool:
        try:
            return target in run(kept).errors
        except WhatIfError:  # no request left (a workload needs one image): not a failing question
            return False

    # what stays whole (a conversation's turns) may fail without any of the images that can go
    kept = [] if units and fails([]) else ddmin(list(range(len(units))), fails)
    orders: list[tuple[tuple[int, ...], bool]] = []
    if question.permutable and len(kept) > 1:
        for order in itertools.islice(itertools.permutations(kept), MAX_ORDERS):
            orders.append((order, fails(list(order))))
    minimal = with_fix(question.subset(kept), run(kept))
    return Minimized(units, tuple(kept), target, minimal, len(answers), tuple(orders))


__all__ = [
    "SWEEP_TP_SIZES",
    "MAX_ORDERS",
    "as_question",
    "release_groups",
    "sweep_row",
    "whatif",
    "sweep",
    "ddmin",
    "minimize",
]
