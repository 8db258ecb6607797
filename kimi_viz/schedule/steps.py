"""A workload through the kit's model of SGLang's scheduler, step by step: the prefill passes it forms.

:func:`schedule_steps` runs the loop ``tests/parity/scheduler/real_scheduler.py`` runs on SGLang's own
code (``docs/scheduler-notes.md`` §1, the non-overlap order), on the kit's model: each step, the
requests due arrive; the chunked request's last window goes into the tree (:mod:`.prefix`) and it
continues from that window's end; the adder (:mod:`.admission`) forms a pass from it and the
waiting queue in the policy's order, every waiting request starting from its tree match; if it
admits anyone the pass runs (with ``--enable-mixed-chunk`` the running requests decode a token in
it), else the running requests decode one token. After a pass each request that is not a middle
chunk emits a token; an unfinished one puts its prompt in the tree, a finished one its prompt and
outputs but the last token (``kv_committed_len``). Memory and request slots never run short.

:func:`scheduled_passes` also returns, per pass, the :class:`SchedulerStep` that formed it: the policy,
every waiting request's :class:`~.prefix.PrefixMatch` and the adder's :class:`~.admission.PassForm`
(its budgets, every offer, the cut), which the forward pass's first steps show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._records import frozen
from ..errors import WhatIfError
from .admission import (
    AdmissionRules,
    Candidate,
    PassForm,
    admission_rules,
    check_policy,
    chunk_size,
    form_pass,
    mixed_decode_rows,
    policy_order,
    start_budget,
)
from .prefill_workload import Pass, Request, Window, Workload
from .prefix import PadRule, PrefixMatch, PrefixTree, pad_rule, padded_ids, prefix_match


@frozen
class SchedulerStep:
    """What the scheduler did in the step that formed one pass: the policy it ran, the rows the decoding requests
    took from the budgets, each waiting request's radix match (by rid, in the policy's order) and the adder's walk."""

    step: int
    policy: str
    rules: AdmissionRules
    mixed_rows: int
    matches: tuple[tuple[str, PrefixMatch], ...]
    form: PassForm

    def match_of(self, rid: str) -> PrefixMatch | None:
        """Return request ``rid``'s radix match in this step, or None (the chunked request is not matched again)."""
        return next((m for r, m in self.matches if r == rid), None)


@dataclass
class _Live:
    """A request inside the scheduler: its padded prompt, its outputs so far and its KV extent."""

    request: Request
    ids: tuple[int, ...]
    outputs: list[int] = field(default_factory=list)
    prefix_len: int = 0
    extend_end: int = 0
    committed: int = 0  # kv_committed_len

    @property
    def rid(self) -> str:
        return self.request.rid

    def fill_ids(self) -> tuple[int, ...]:
        return self.ids + tuple(self.outputs)

    def emit(self) -> None:
        self.outputs.append(self.request.outputs()[len(self.outputs)])

    @property
    def finished(self) -> bool:
        return len(self.outputs) >= self.request.max_new_tokens

    def candidate(self) -> Candidate:
        return Candidate(self.rid, len(self.fill_ids()), self.prefix_len)


def _due(request: Request, step: int, finish_step: dict[str, int]) -> bool:
    """Whether ``request`` joins the queue at ``step`` (its arrival reached, the turn it follows finished before)."""
    after = request.after
    return request.arrival <= step and (after is None or finish_step.get(after, step) < step)


class _Loop:
    """The scheduler's state between steps."""

    def __init__(self, workload: Workload, release: str) -> None:
        s = workload.settings
        self.workload = workload
        self.release = release
        self.rules = admission_rules(release)
        self.tree = PrefixTree(s.page_size, disabled=s.disable_radix_cache)
        self.pending = list(workload.requests)
        self.waiting: list[_Live] = []
        self.running: list[_Live] = []
        self.chunked: _Live | None = None
        self.finish_step: dict[str, int] = {}
        self.passes: list[Pass] = []
        self.formed: list[SchedulerStep] = []  # what formed each pass, in step with passes
        self.forming: SchedulerStep | None = None

    def arrive(self, step: int) -> None:
        due = [r for r in self.pending if _due(r, step, self.finish_step)]
        self.waiting += [_Live(r, padded_ids(r, self.release)) for r in due]
        self.pending = [r for r in self.pending if r not in due]

    def stash_chunked(self) -> None:
        live = self.chunked
        if live is not None and live.extend_end > live.prefix_len:
            self.tree.insert(live.fill_ids()[: live.extend_end])
            live.prefix_len = live.extend_end

    def form(self, step: int) -> list[_Live]:
        """Return the requests of this step's pass in batch order (empty: no pass), their windows set; what formed
        it is left in ``forming``."""
        if not self.waiting and self.chunked is None:
            return []
        settings = self.workload.settings
        order = policy_order(settings.schedule_policy, [w.fill_ids() for w in self.waiting], self.tree)
        self.waiting = [self.waiting[k] for k in order]
        matches = []
        for live in self.waiting:
            match = prefix_match(self.tree, live.fill_ids())
            live.prefix_len = match.matched
            matches.append((live.rid, match))
        mixed = mixed_decode_rows(settings, len(self.running))
        budget = start_budget(settings, mixed)
        chunked = None if self.chunked is None else self.chunked.candidate()
        formed = form_pass(budget, chunked, [w.candidate() for w in self.waiting], self.rules)
        policy = check_policy(settings.schedule_policy, self.tree)
        self.forming = SchedulerStep(step, policy, self.rules, mixed, tuple(matches), formed)
        by_rid = {w.rid: w for w in self.waiting}
        if self.chunked is not None:
            by_rid[self.chunked.rid] = self.chunked
        batch = [by_rid[window.rid] for window in formed.windows]
        for live, window in zip(batch, formed.windows):
            live.extend_end = window.prefix_len + window.extend_input_len
        admitted = {live.rid for live in batch}
        self.waiting = [w for w in self.waiting if w.rid not in admitted]
        self.chunked = None if formed.chunked is None else by_rid[formed.chunked]
        return batch

    def finish(self, live: _Live, step: int, finished: list[str]) -> None:
        self.tree.insert(live.fill_ids()[: live.committed])
        self.finish_step[live.rid] = step
        finished.append(live.rid)

    def decode_one(self, live: _Live) -> None:
        live.committed += 1
        live.emit()

    def run_pass(self, step: int, batch: list[_Live]) -> None:
        windows = tuple(Window(b.rid, b.prefix_len, b.extend_end - b.prefix_len) for b in batch)
        for live in batch:
            live.committed = live.extend_end
        mixed = chunk_size(self.workload.settings) is not None and self.workload.settings.enable_mixed_chunk
        decoding = list(self.running) if mixed else []
        finished: list[str] = []
        for live in decoding:
            self.decode_one(live)
        for live in batch:
            if live is self.chunked:  # a middle chunk: no token, stashed at the next step
                continue
            live.emit()
            if live.finished:
                self.finish(live, step, finished)
            else:
                self.tree.insert(live.fill_ids()[: live.extend_end])
        for live in decoding:
            if live.finished:
                self.finish(live, step, finished)
        self.running = [r for r in self.running if not r.finished]
        self.running += [b for b in batch if not b.finished and b is not self.chunked]
        chunked = None if self.chunked is None else self.chunked.rid
        self.passes.append(Pass(step, windows, chunked, tuple(d.rid for d in decoding), tuple(finished), self.release))
        assert self.forming is not None and self.forming.step == step
        self.formed.append(self.forming)

    def decode_step(self, step: int) -> None:
        finished: list[str] = []
        for live in self.running:
            self.decode_one(live)
            if live.finished:
                self.finish(live, step, finished)
        self.running = [r for r in self.running if not r.finished]

    def step(self, step: int) -> None:
        self.arrive(step)
        self.stash_chunked()
        batch = self.form(step)
        if batch:
            self.run_pass(step, batch)
        elif self.running:
            self.decode_step(step)

    @property
    def done(self) -> bool:
        return not (self.pending or self.waiting or self.running or self.chunked)


def scheduler_rules(release: str) -> tuple[PadRule, AdmissionRules]:
    """Return the rules ``release``'s scheduler runs: its pad values' rule and its admission rules."""
    return pad_rule(release), admission_rules(release)


def scheduled_passes(workload: Workload, release: str) -> list[tuple[Pass, SchedulerStep]]:
    """Return the prefill passes the kit's model of ``release``'s scheduler forms for ``workload``, each with the
    :class:`SchedulerStep` that formed it (radix matches, budgets, offers, the cut)."""
    loop = _Loop(workload, release)
    for step in range(workload.max_steps):
        loop.step(step)
        if loop.done:
            return list(zip(loop.passes, loop.formed))
    raise WhatIfError(f"the workload did not finish in {workload.max_steps} scheduler steps")


def schedule_steps(workload: Workload, release: str) -> list[Pass]:
    """Return the prefill passes the kit's model of ``release``'s scheduler forms for ``workload``."""
    return [formed for formed, _ in scheduled_passes(workload, release)]


__all__ = ["SchedulerStep", "scheduled_passes", "schedule_steps", "scheduler_rules"]
