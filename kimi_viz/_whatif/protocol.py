"""What every question is — :class:`Question`, prepared for one release as a :class:`Prepared` — and the lightest
one: a captured batch (:class:`BatchQuestion`, what ``kimi-viz triage`` asks).

Each question says what of a release it sees (:meth:`Question.sees`: releases that look alike give the
same answer, so a sweep's row and the fix search group them), prepares what a release builds once for
every attention-TP size (:meth:`Question.prepare`, a :class:`Prepared` question that answers on one TP
size with :meth:`Prepared.ask`), says the workload's server flags it carries
(:attr:`Question.load_settings`, :meth:`Question.with_load`: the flag search changes them), and lists
the images a minimization may drop (:meth:`Question.units`, :meth:`Question.subset`). The other
questions — a request, a workload, a client's chat request — are in :mod:`.questions` and :mod:`.chat`;
this module stays light, so that a triage loads neither the request side nor the forward pass.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Protocol, runtime_checkable

from .._records import frozen
from ..answer import Answer, Unit, batch_answer
from ..devices import DeviceLike
from ..releases import Release
from ..request.settings import Mode
from ..scheduler.flags import LoadSettings
from ..split._replay import replay
from ..split.batch import Batch
from ..split.verdict import Status


def workload_sees(release: Release, load: LoadSettings) -> Hashable:
    """Return what of ``release`` a workload under ``load`` meets: its request side, code path, forward pass and
    the scheduler rules that can change its passes (memory rules only with a pool given, the attention backends
    only with one given)."""
    rules = release.scheduler.seen_under(
        memory_bounded=load.memory_given, backend_given=load.attention_backend is not None
    )
    return release.request_side, release.code_path, release.forward, rules


class Prepared(Protocol):
    """A question with what one release builds for it: answered at any attention-TP size."""

    def ask(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Answer:
        """Return the answer at ``tp_size`` (no fix search)."""
        ...

    def status(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Status:
        """Return only the answer's status at ``tp_size`` (what the flag search compares; no why)."""
        ...


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

    def prepare(self, release: Release, mode: Mode) -> Prepared:
        """Return the question with what ``release`` builds once for every TP size; raise SettingNotInReleaseError
        if the release refuses a setting."""
        ...

    @property
    def load_settings(self) -> LoadSettings | None:
        """Return the server flags of the question's workload (None: a question without one)."""
        ...

    def with_load(self, load: LoadSettings) -> Question:
        """Return the question under other server flags (only asked when :attr:`load_settings` is not None)."""
        ...

    def units(self) -> tuple[Unit, ...]:
        """Return the images a minimization may drop, in order."""
        ...

    def subset(self, kept: Sequence[int]) -> Question:
        """Return the question keeping only the units at ``kept``."""
        ...


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

    load_settings = None

    def prepare(self, release: Release, mode: Mode) -> PreparedBatch:
        """Return the batch with the release: nothing to build."""
        return PreparedBatch(self, release)

    def with_load(self, load: LoadSettings) -> BatchQuestion:
        """Return the question as it is: a captured batch has no workload flags."""
        return self

    def units(self) -> tuple[Unit, ...]:
        """Return one unit per item."""
        return tuple(Unit(None, k, None, item.label or f"image {k}") for k, item in enumerate(self.batch.items))

    def subset(self, kept: Sequence[int]) -> BatchQuestion:
        """Return the batch with only the items at ``kept`` (no forward context: the call changed)."""
        items = [self.batch.items[k] for k in kept]
        return replace(self, batch=replace(self.batch, items=items, forward_context=None))


@frozen
class PreparedBatch:
    """A captured batch and the release whose code path replays it."""

    question: BatchQuestion
    release: Release

    def status(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Status:
        """Return the answer's status at ``tp_size``."""
        return self.ask(tp_size, mode=mode, device=device).status

    def ask(self, tp_size: int, *, mode: Mode, device: DeviceLike) -> Answer:
        """Return the answer: the batch replayed with the release's code path."""
        batch, release = self.question.batch, self.release
        trace = replay(
            batch,
            tp_size=tp_size,
            rank=self.question.rank,
            sglang_version=release.version,
            code_path=release.code_path,
            mode=mode,
            device=device,
        )
        return batch_answer(trace, release)


__all__ = ["BatchQuestion", "Prepared", "PreparedBatch", "Question", "workload_sees"]
