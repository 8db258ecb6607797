"""SGLang's scheduler loop (``managers/scheduler.py``), step by step: the prefill passes it forms.

:func:`schedule` runs the loop ``tests/parity/scheduler/real_scheduler.py`` runs on SGLang's own code
(``docs/scheduler-notes.md`` §1, the non-overlap order), on the kit's model: each step, the requests
due arrive; the chunked request's last window goes into the tree (:mod:`.tree`) and it continues
from that window's end; the adder (:mod:`.policy`) forms a pass from it and the waiting queue in the
policy's order, every waiting request starting from its tree match; if it admits anyone the pass
runs (with ``--enable-mixed-chunk`` the running requests decode a token in it), else the running
requests decode one token. After a pass each request that is not a middle chunk emits a token; an
unfinished one puts its prompt in the tree, a finished one its prompt and outputs but the last token
(``kv_committed_len``). Memory and request slots never run short.

Each :class:`Pass` carries the :class:`SchedulerStep` that formed it: the policy, every waiting
request's :class:`~.tree.PrefixMatch` and the adder's :class:`~.policy.PassForm` (its budgets, every
offer, the cut), which the forward pass's report shows before the pass's own steps.
"""

from __future__ import annotations

from dataclasses import field

from .._records import frozen
from ..errors import WhatIfError
from ..releases import SchedulerRules
from .flags import LoadSettings
from .policy import PassForm, active_policy, form_pass, mixed_decode_rows, policy_order, start_budget
from .req import Req, Window
from .tree import PrefixMatch, RadixTree, padded_ids, prefix_match


@frozen
class SchedulerStep:
    """What the scheduler did in the step that formed one pass: the policy it ran, the rows the decoding requests
    took from the budgets, each waiting request's radix match (by rid, in the policy's order) and the adder's walk."""

    step: int
    policy: str
    rules: SchedulerRules
    mixed_rows: int
    matches: tuple[tuple[str, PrefixMatch], ...]
    form: PassForm

    def match_of(self, rid: str) -> PrefixMatch | None:
        """Return request ``rid``'s radix match in this step, or None (the chunked request is not matched again)."""
        return next((m for r, m in self.matches if r == rid), None)


@frozen
class Pass:
    """One prefill (or mixed) forward: its windows in batch order, the request left chunked, the decoding rows,
    and what formed it (the kit's model only: SGLang's own scheduler reports the rest)."""

    step: int
    windows: tuple[Window, ...]
    chunked: str | None = None  # the request cut by this pass (continued first in the next one)
    decoding: tuple[str, ...] = ()  # requests decoding one token inside this pass (--enable-mixed-chunk)
    finished: tuple[str, ...] = ()  # requests that finished at the end of this pass
    release: str = ""  # the SGLang release that produced it
    formed: SchedulerStep | None = field(default=None, compare=False, repr=False)


def _due(req: Req, step: int, finish_step: dict[str, int]) -> bool:
    """Whether ``req`` joins the queue at ``step`` (its arrival reached, the turn it follows finished before)."""
    return req.arrival <= step and (req.after is None or finish_step.get(req.after, step) < step)


class _Scheduler:
    """The scheduler's state between steps (``Scheduler``: its queues, tree and chunked request)."""

    def __init__(self, settings: LoadSettings, reqs: list[Req], rules: SchedulerRules, release: str) -> None:
        self.settings = settings
        self.rules = rules
        self.release = release
        self.tree = RadixTree(settings.page_size, disabled=settings.disable_radix_cache)
        self.pending = [req.given() for req in reqs]
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.finish_step: dict[str, int] = {}
        self.passes: list[Pass] = []
        self.forming: SchedulerStep | None = None

    def arrive(self, step: int) -> None:
        due = [r for r in self.pending if _due(r, step, self.finish_step)]
        for req in due:
            req.origin_input_ids = padded_ids(req, self.rules)
        self.waiting += due
        self.pending = [r for r in self.pending if r not in due]

    def stash_chunked(self) -> None:
        req = self.chunked
        if req is not None and req.extend_end > req.prefix_len:
            self.tree.insert(req.fill_ids()[: req.extend_end])
            req.prefix_len = req.extend_end

    def form(self, step: int) -> list[Req]:
        """Return the requests of this step's pass in batch order (empty: no pass), their windows set; what formed
        it is left in ``forming``."""
        if not self.waiting and self.chunked is None:
            return []
        settings = self.settings
        order = policy_order(settings.schedule_policy, [r.fill_ids() for r in self.waiting], self.tree)
        self.waiting = [self.waiting[k] for k in order]
        matches = []
        for req in self.waiting:
            match = prefix_match(self.tree, req.fill_ids())
            req.prefix_len = match.matched
            matches.append((req.rid, match))
        mixed = mixed_decode_rows(settings, len(self.running))
        formed = form_pass(start_budget(settings, mixed), self.chunked, self.waiting, self.rules)
        policy = active_policy(settings.schedule_policy, self.tree)
        self.forming = SchedulerStep(step, policy, self.rules, mixed, tuple(matches), formed)
        by_rid = {r.rid: r for r in self.waiting}
        if self.chunked is not None:
            by_rid[self.chunked.rid] = self.chunked
        batch = [by_rid[window.rid] for window in formed.windows]
        for req, window in zip(batch, formed.windows):
            req.extend_end = window.end
        admitted = {req.rid for req in batch}
        self.waiting = [r for r in self.waiting if r.rid not in admitted]
        self.chunked = None if formed.chunked is None else by_rid[formed.chunked]
        return batch

    def finish(self, req: Req, step: int, finished: list[str]) -> None:
        self.tree.insert(req.fill_ids()[: req.kv_committed_len])
        self.finish_step[req.rid] = step
        finished.append(req.rid)

    def decode_one(self, req: Req) -> None:
        req.kv_committed_len += 1
        req.emit()

    def run_pass(self, step: int, batch: list[Req]) -> None:
        windows = tuple(Window(r.rid, r.prefix_len, r.extend_end - r.prefix_len) for r in batch)
        for req in batch:
            req.kv_committed_len = req.extend_end
        decoding = list(self.running) if self.settings.mixed_chunk else []
        finished: list[str] = []
        for req in decoding:
            self.decode_one(req)
        for req in batch:
            if req is self.chunked:  # a middle chunk: no token, stashed at the next step
                continue
            req.emit()
            if req.finished:
                self.finish(req, step, finished)
            else:
                self.tree.insert(req.fill_ids()[: req.extend_end])
        for req in decoding:
            if req.finished:
                self.finish(req, step, finished)
        self.running = [r for r in self.running if not r.finished]
        self.running += [r for r in batch if not r.finished and r is not self.chunked]
        chunked = None if self.chunked is None else self.chunked.rid
        assert self.forming is not None and self.forming.step == step
        decoding_rids = tuple(r.rid for r in decoding)
        formed = Pass(step, windows, chunked, decoding_rids, tuple(finished), self.release, self.forming)
        self.passes.append(formed)

    def decode_step(self, step: int) -> None:
        finished: list[str] = []
        for req in self.running:
            self.decode_one(req)
            if req.finished:
                self.finish(req, step, finished)
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


def schedule(
    reqs: list[Req], settings: LoadSettings, rules: SchedulerRules, release: str, max_steps: int | None = None
) -> list[Pass]:
    """Return the prefill passes the kit's model of a release's scheduler (``rules``; ``release`` names it in each
    pass) forms for ``reqs`` under ``settings``, each with the :class:`SchedulerStep` that formed it. The requests
    given are not changed. ``max_steps`` defaults to enough for every prompt and output token."""
    limit = max_steps if max_steps is not None else 1000 + sum(r.max_new_tokens + r.length for r in reqs)
    scheduler = _Scheduler(settings, reqs, rules, release)
    for step in range(limit):
        scheduler.step(step)
        if scheduler.done:
            return scheduler.passes
    raise WhatIfError(f"the workload did not finish in {limit} scheduler steps")


def radix_prefixes(passes: list[Pass]) -> dict[str, int]:
    """Return each scheduled request's radix prefix: where its first window starts (tokens never prefilled)."""
    prefixes: dict[str, int] = {}
    for formed in passes:
        for window in formed.windows:
            prefixes.setdefault(window.rid, window.prefix_len)
    return prefixes


__all__ = ["Pass", "SchedulerStep", "radix_prefixes", "schedule"]
