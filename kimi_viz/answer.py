"""The kit's one answer, whatever was asked: what SGLang does with a question on one deployment.

A question is one request (its images), a workload (requests prefilled together), a client's chat
request, or a captured batch. Every one gets an :class:`Answer`: its :class:`~kimi_viz.split.verdict.Status`
(badge, word, colour and exit code from the one table, ``STATUS_STYLES``), the errors SGLang raises,
the verdict of the ``get_image_feature`` call that decides it, why, and the first release that runs it
clean. What differs per question is only the replay behind the answer (:data:`Replay`): a tagged union
whose ``kind`` the :class:`Answer` reads in one place (:attr:`Answer.request`, :attr:`Answer.chat`,
:attr:`Answer.workload`), so every presenter asks the answer what it holds. A sweep over releases ×
attention-TP sizes is a :class:`Sweep` of answers, a shrunk failure a :class:`Minimized`. These are
records: text, JSON, ``issue.md`` and the report are presenters that import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, TypeAlias

from ._records import frozen
from .release_changes.fix_search import FixRelease, FixSearch
from .releases import Release, release_span
from .server_args.sources import ServerReport
from .split.cause import ErrorInfo
from .split.trace import Trace
from .split.verdict import Status, StatusStyle, Verdict, build_verdict

if TYPE_CHECKING:  # pragma: no cover - the request side loads Pillow: a captured batch's answer needs none of it
    from .forward.call import ModelCall
    from .forward.workload_replay import LoadResult
    from .request.checks import RequestOutcome
    from .request.images import RequestImage
    from .request.sides import BuiltRequest

QuestionKind = Literal["request", "workload", "chat", "batch"]


@frozen
class RequestReplay:
    """One request: the items the release's request side built, the model's call, and its replay (None: no call)."""

    built: BuiltRequest
    call: ModelCall
    trace: Trace | None
    kind: ClassVar[Literal["request"]] = "request"

    def deciding_trace(self) -> Trace | None:
        """Return the replay of the request's get_image_feature call (None: nothing reaches it)."""
        return self.trace

    def culprit(self, verdict: Verdict | None) -> int | None:
        """Return the request position of the first diverging image (the one to look at), or None."""
        if verdict is None or verdict.divergence.first_image is None:
            return None
        g = verdict.divergence.first_image
        return self.call.positions[g] if 0 <= g < len(self.call.positions) else None


@frozen
class ChatReplay:
    """A client's request: the request side's checks and prompt, then its workload replay (None when refused or no
    image reaches the model)."""

    outcome: RequestOutcome
    load: LoadResult | None
    kind: ClassVar[Literal["chat"]] = "chat"

    def deciding_trace(self) -> Trace | None:
        """Return the replay of the call that decides the workload's answer (None when refused or none decides)."""
        return None if self.load is None else self.load.deciding_trace()


# What was replayed: a request, a workload, a chat request, a captured batch; each class's ``kind`` tags it.
Replay: TypeAlias = "RequestReplay | LoadResult | ChatReplay | Trace"


@frozen
class PairHint:
    """A request clean alone that fails once prefilled with another: the smallest such partner and their answer."""

    partner: RequestImage
    answer: Answer  # the pair's answer, with its fixing release
    tried: int  # candidate partners tried
    command: str  # the command that replays the pair, runnable from the folder the kit ran in


@frozen
class FlagChange:
    """One scheduler flag changed from the deployment's, and the status the same workload gets with it."""

    flag: str  # as SGLang spells it, e.g. "--disable-radix-cache", "--page-size 16", "SGLANG_VLM_CACHE_SIZE_MB=0"
    status: Status


@frozen
class FlagSearch:
    """Every single-flag change tried on a workload, and those that change its status."""

    tried: tuple[str, ...]
    changes: tuple[FlagChange, ...]


@frozen
class Answer:
    """What SGLang does with one question on one release at one attention-TP size, with why and what fixes it."""

    release: Release
    tp_size: int
    replay: Replay
    status: Status
    verdict: Verdict | None  # of the get_image_feature call that decides the status (None: no call decides it)
    errors: tuple[ErrorInfo, ...]  # every error raised; the first is the one SGLang raises first
    why: str
    fix: FixSearch | None = None  # what the one fix search found (None: not searched)
    notes: tuple[str, ...] = ()
    stage: str | None = None  # where on the path it fails: "request side", "encode server", "forward pass", "call"
    under_load: PairHint | None = None  # clean alone, but fails when prefilled with this partner
    flags: FlagSearch | None = None  # a workload's scheduler flags, each changed alone (None: not searched)
    server: ServerReport | None = None  # the server replayed: each value and where it came from (None: not said)

    @property
    def style(self) -> StatusStyle:
        """Return the status's badge, symbol, colours, words and exit code."""
        return self.status.style

    @property
    def fixed_in(self) -> FixRelease | None:
        """Return the first later release that runs the question clean (None: none found, or not searched)."""
        return None if self.fix is None else self.fix.found

    @property
    def fixes(self) -> dict[str, FixSearch]:
        """Return the fix search by the code path its verdict replayed, as the verdict's presenters take it."""
        return {} if self.fix is None or self.verdict is None else {self.verdict.release.code_path: self.fix}

    @property
    def error(self) -> ErrorInfo | None:
        """Return what SGLang raises first, or None."""
        return self.errors[0] if self.errors else None

    @property
    def failed(self) -> bool:
        """Return True when SGLang raises somewhere on the path."""
        return bool(self.errors)

    @property
    def exit_code(self) -> int:
        """Return the status's exit code (0 clean or no call, 1 an error, 3 a silent mismatch, 4, 5 for a capture)."""
        return self.style.exit_code

    @property
    def failing_ranks(self) -> list[int]:
        """Return the ranks that raise in the deciding call (empty when none does)."""
        return [] if self.verdict is None else self.verdict.failing_ranks

    @property
    def kind(self) -> QuestionKind:
        """Return what was asked: ``request``, ``workload``, ``chat`` or ``batch`` (a captured batch)."""
        return self.replay.kind

    @property
    def request(self) -> RequestReplay | None:
        """Return a lone request's replay, or None for another question."""
        return self.replay if isinstance(self.replay, RequestReplay) else None

    @property
    def chat(self) -> ChatReplay | None:
        """Return a client's request's replay, or None for another question."""
        return self.replay if isinstance(self.replay, ChatReplay) else None

    @property
    def workload(self) -> LoadResult | None:
        """Return the workload replayed (a chat request's, once it reached the model), or None."""
        replay = self.replay
        if isinstance(replay, ChatReplay):
            return replay.load
        # a workload's LoadResult is known by its tag, not imported: the request side it needs loads Pillow
        return replay if replay.kind == "workload" else None

    @property
    def call_trace(self) -> Trace | None:
        """Return the replay of the get_image_feature call that decides the answer, or None."""
        return self.replay.deciding_trace()


def distinct_errors(first: ErrorInfo | None, others: Sequence[ErrorInfo]) -> tuple[ErrorInfo, ...]:
    """Return every error raised, the first one first, each once."""
    return tuple(dict.fromkeys([*([first] if first is not None else []), *others]))


def batch_answer(
    trace: Trace, release: Release, verdict: Verdict | None = None, fix: FixSearch | None = None
) -> Answer:
    """Return the answer of a replayed batch (a captured one, or one call); ``verdict`` reuses one already built,
    ``fix`` is the fix search already run for it."""
    verdict = verdict if verdict is not None else build_verdict(trace)
    errors = distinct_errors(verdict.error, [r.error for r in verdict.ranks if r.error is not None])
    stage = "call" if errors else None
    why = verdict.divergence.explanation
    return Answer(release, trace.tp_size, trace, verdict.status, verdict, errors, why, fix, stage=stage)


@frozen
class Cell:
    """One sweep cell: a group of releases that see the question alike, at one attention-TP size."""

    releases: tuple[Release, ...]
    tp_size: int
    answer: Answer | None  # None when the releases refuse one of the settings
    reason: str = ""  # why the cell does not apply

    @property
    def status(self) -> Status:
        """Return the answer's status, or ``not-applicable``."""
        return Status.NOT_APPLICABLE if self.answer is None else self.answer.status

    @property
    def error(self) -> ErrorInfo | None:
        """Return what SGLang raises first in this cell, or None."""
        return None if self.answer is None else self.answer.error

    @property
    def label(self) -> str:
        """Return the releases as a row label: ``0.5.18`` or ``0.5.19–0.5.22`` (:func:`release_span`)."""
        return release_span(r.version for r in self.releases)


@frozen
class Sweep:
    """A question in every release group × attention-TP size; a row per group of releases that see it alike."""

    subject: str  # the question in a few words, e.g. "2 image(s), --tp-size N" or "3 request(s), 4 image(s)"
    tp_sizes: tuple[int, ...]
    cells: tuple[Cell, ...]

    @property
    def rows(self) -> list[tuple[Release, ...]]:
        """Return the release groups, oldest first."""
        return list(dict.fromkeys(c.releases for c in self.cells))

    @property
    def legend(self) -> dict[ErrorInfo, str]:
        """Return a letter per distinct error, in the order the cells meet them."""
        letters: dict[ErrorInfo, str] = {}
        for cell in self.cells:
            if cell.error is not None and cell.error not in letters:
                letters[cell.error] = chr(ord("A") + len(letters) % 26)
        return letters

    @property
    def failed(self) -> bool:
        """Return True when SGLang raises in some cell."""
        return any(c.status.failed for c in self.cells)

    @property
    def exit_code(self) -> int:
        """Return 1 when some cell raises, else 3 when some cell is a silent mismatch, else 0."""
        if self.failed:
            return Status.ERROR_REPRODUCED.style.exit_code
        if any(c.status is Status.SILENT_MISMATCH for c in self.cells):
            return Status.SILENT_MISMATCH.style.exit_code
        return Status.CLEAN.style.exit_code

    def cell(self, release: str, tp_size: int) -> Cell | None:
        """Return the cell of the group holding ``release`` (e.g. ``"0.5.20"``) at ``tp_size``, or None."""
        return next(
            (c for c in self.cells if c.tp_size == tp_size and any(r.version == release for r in c.releases)), None
        )


@frozen
class PairSweep:
    """Every unordered pair of images as two single-image requests prefilled together: each pair's :class:`Sweep`."""

    images: tuple[RequestImage, ...]
    pairs: tuple[tuple[int, int], ...]  # image indexes of each pair, in the order of ``sweeps``
    sweeps: tuple[Sweep, ...]

    def failing(self) -> list[tuple[tuple[int, int], Cell]]:
        """Return ``(pair, cell)`` for every cell where SGLang raises."""
        return [(pair, c) for pair, swept in zip(self.pairs, self.sweeps) for c in swept.cells if c.error is not None]


@frozen
class Unit:
    """One image a minimization may drop: its request (None for a lone request), position there, the image, its name."""

    request: str | None
    position: int
    image: RequestImage | None  # None for a captured batch's item
    label: str


@frozen
class Minimized:
    """A failing question shrunk to the images it needs (1-minimal: dropping any one kept image loses the error)."""

    units: tuple[Unit, ...]  # every image of the full question
    kept: tuple[int, ...]  # indexes into ``units``, in question order
    target: ErrorInfo | None  # the error kept; None when the question does not fail
    answer: Answer  # the minimal question's answer (the full question's when nothing fails)
    tests: int  # answers the search asked for
    orders: tuple[tuple[tuple[int, ...], bool], ...] = ()  # each order of the kept images tried, and whether it fails

    @property
    def order_matters(self) -> bool | None:
        """Return True when some order of the kept images passes, None when orders were not tried."""
        return None if not self.orders else not all(fails for _, fails in self.orders)

    @property
    def exit_code(self) -> int:
        """Return 1 when the minimal question still fails, else 0."""
        return Status.CLEAN.style.exit_code if self.target is None else Status.ERROR_REPRODUCED.style.exit_code


__all__ = [
    "Answer",
    "Cell",
    "FlagChange",
    "FlagSearch",
    "ChatReplay",
    "Minimized",
    "PairHint",
    "PairSweep",
    "RequestReplay",
    "Sweep",
    "Unit",
    "batch_answer",
    "distinct_errors",
]
