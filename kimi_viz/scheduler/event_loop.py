"""SGLang's scheduler loop (``managers/scheduler.py``), step by step: the prefill passes it forms for Kimi-K3.

:func:`schedule` runs each release's loop on the kit's model of its parts, in SGLang's order
(``docs/scheduler-notes.md`` §1, ``docs/hybrid-tree-notes.md`` §5). One step is one iteration:

1. the requests due arrive (a chat's next turn the step after its earlier turn's finish was processed);
2. ``get_next_batch_to_run``: the chunked request's last window goes into the tree (the stash); the
   last prefill batch's unfinished rows join the running batch (0.5.23 also drops the finished ones
   before the adder counts them); the adder (:mod:`.policy`) forms a pass from the chunked request
   and the waiting queue in the policy's order, each waiting request starting from its match in the
   hybrid tree (:mod:`.tree`); with ``--enable-mixed-chunk`` the running rows decode inside it; with
   no pass the running rows decode alone (``update_running_batch``);
3. the forward runs; its result — first tokens, finishes, the tree's inserts — is processed in the same
   step by ``event_loop_normal`` (``--disable-overlap-schedule``), or by ``event_loop_overlap`` (the
   default) only after the *next* step's batch was formed: a request arriving right after a prefill
   misses its insert, a row its queued result will finish is decoded once more (0.5.18) or left out
   (0.5.23).

The tree saves linear-attention states where the server's strategy says (``extra_buffer``: a prefill
window's start plus multiples of the checkpoint grid, its branching point instead when that lies inside
the window, and decode lengths on the decode grid; ``no_buffer``: every insert), and every insert stops
at the request's saved state. Memory and request slots never run short.

Each :class:`Pass` carries the :class:`SchedulerStep` that formed it: the policy, every waiting
request's :class:`~.tree.PrefixMatch` (with what a plain radix tree would have matched) and the
adder's :class:`~.policy.PassForm` (its budgets, every offer, the cut), and the depths the tree took a
state at while the pass's result was processed (``saves``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from .._records import frozen
from ..errors import WhatIfError
from ..releases import Release
from ..scheduler_rules import SchedulerRules
from .flags import LoadSettings
from .policy import PassForm, active_policy, form_pass, mixed_decode_rows, policy_order, start_budget
from .req import Req, Window
from .server_args import ServerConfig, resolve_server
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
    server: ServerConfig

    def match_of(self, rid: str) -> PrefixMatch | None:
        """Return request ``rid``'s radix match in this step, or None (the chunked request is not matched again)."""
        return next((m for r, m in self.matches if r == rid), None)


@frozen
class Save:
    """A linear-attention state the tree took in: the step that inserted it, whose, and at which depth."""

    step: int
    rid: str
    depth: int


@frozen
class Pass:
    """One prefill (or mixed) forward: its windows in batch order, the request left chunked, the decoding rows,
    the requests its processed result finished, and what formed it (the kit's model only)."""

    step: int
    windows: tuple[Window, ...]
    chunked: str | None = None  # the request cut by this pass (continued first in the next one)
    decoding: tuple[str, ...] = ()  # requests decoding one token inside this pass (--enable-mixed-chunk)
    finished: tuple[str, ...] = ()  # requests its result finished (processed a step later with overlap)
    release: str = ""  # the SGLang release that produced it
    formed: SchedulerStep | None = field(default=None, compare=False, repr=False)


@dataclass(eq=False)
class _Batch:
    """A forward batch (``ScheduleBatch``): a prefill (maybe mixed) or a decode, its rows and its record."""

    extend: bool
    reqs: list[Req]
    chunked: Req | None = None
    decoding: list[Req] = field(default_factory=list)  # mixed decode rows
    formed: Pass | None = None  # the pass it forms; its finishes are filled in when its result is processed
    tracked: dict[int, int] = field(default_factory=dict)  # id(row) -> the length a decode save is due at


def _due(req: Req, step: int, finish_step: dict[str, int]) -> bool:
    """Whether ``req`` joins the queue at ``step`` (its arrival reached, the turn it follows finished before)."""
    return req.arrival <= step and (req.after is None or finish_step.get(req.after, step) < step)


class _Scheduler:
    """The scheduler's state between steps (``Scheduler``: its queues, running batch, tree and chunked request)."""

    def __init__(self, server: ServerConfig, reqs: list[Req], release: Release) -> None:
        self.server = server
        self.rules = release.scheduler
        self.release = release.version
        self.tree = RadixTree(server.page_size, server.disable_radix_cache, hybrid=server.hybrid)
        self.plain = RadixTree(server.page_size, server.disable_radix_cache)  # every insert whole: what-if only
        self.pending = [req.given() for req in reqs]
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.last: _Batch | None = None
        self.queued: deque[_Batch] = deque()
        self.finish_step: dict[str, int] = {}
        self.passes: list[Pass] = []
        self.saves: list[Save] = []
        self.step_no = 0

    # --- the tree's inserts (mem_cache/common.py, the MAMBA component's cut) -----------------------------------
    def _insert(self, req: Req, length: int, *, finished: bool) -> None:
        """Put ``req``'s first ``length`` fill ids in the tree, cut to its saved state under ``extra_buffer``."""
        ids = req.fill_ids()[:length]
        self.plain.insert(ids)
        if self.server.strategy == "extra_buffer":
            cut = min(length, req.mamba_last_track_seqlen or 0)
            depth = self.tree.insert(ids[:cut], state=True) if cut > 0 else 0
            if not finished:
                req.mamba_last_track_seqlen = None
        else:
            depth = self.tree.insert(ids, state=True)
        if depth:
            self.saves.append(Save(self.step_no, req.rid, depth))

    def _release(self, req: Req) -> None:
        """``release_kv_cache`` at a finish: the prompt and every output but the last (``kv_committed_len``)."""
        self._insert(req, req.kv_committed_len, finished=True)
        self.finish_step[req.rid] = self.step_no

    # --- forming a batch (get_next_batch_to_run) --------------------------------------------------------------
    def _arrive(self) -> None:
        due = [r for r in self.pending if _due(r, self.step_no, self.finish_step)]
        for req in due:
            req.origin_input_ids = padded_ids(req, self.rules)
        self.waiting += due
        self.pending = [r for r in self.pending if r not in due]

    def _stash(self) -> None:
        """``stash_chunked_request``: the chunk just computed goes into the tree; it continues from its end."""
        req = self.chunked
        if req is not None and req.extend_end > req.prefix_len:
            self._insert(req, req.extend_end, finished=False)
            req.prefix_len = req.extend_end

    def _next_batch(self) -> _Batch | None:
        """``get_next_batch_to_run``: merge the last prefill's rows, form a prefill pass, else decode the running."""
        self._stash()
        last = self.last
        if last is not None and last.extend:
            exclude = {id(self.chunked), id(last.chunked)}
            self.running += [r for r in last.reqs if not r.finished and id(r) not in exclude]
        if self.rules.filters_running_every_step:
            self.running = [r for r in self.running if not r.finished]
        batch = self._prefill()
        if batch is not None:
            return batch
        return self._decode_running()

    def _finishing_inflight(self, rows: list[Req]) -> set[int]:
        """0.5.23 ``_reqs_finishing_inflight``: rows the queued result will finish by length (overlap only)."""
        if not (self.rules.skips_finishing_inflight and self.server.overlap and self.queued):
            return set()
        queued = {id(r) for r in self.queued[0].reqs}
        return {id(r) for r in rows if id(r) in queued and len(r.output_ids) + 1 >= r.max_new_tokens}

    def _filter_running(self) -> None:
        """``filter_batch``: drop finished rows (0.5.23: and rows finishing in flight)."""
        gone = self._finishing_inflight(self.running)
        self.running = [r for r in self.running if not r.finished and id(r) not in gone]

    def _decode_running(self) -> _Batch | None:
        """``update_running_batch``: the running rows decode one token (none: nothing runs)."""
        if not self.running:
            return None
        self._filter_running()
        if not self.running:
            return None
        batch = _Batch(False, list(self.running))
        for req in self.running:
            req.kv_committed_len += 1  # prepare_for_decode: one more token of KV
            if self.server.strategy == "extra_buffer" and req.kv_committed_len % self.server.decode_grid == 0:
                batch.tracked[id(req)] = req.kv_committed_len  # a save due at this length, set by the result
        return batch

    def _match(self, req: Req) -> PrefixMatch:
        """``init_next_round_input(tree)``: the request starts from its match; a branching point is kept."""
        match = prefix_match(self.tree, req.fill_ids(), self.server.checkpoint_grid)
        plain = prefix_match(self.plain, req.fill_ids()).matched
        req.prefix_len = match.matched
        req.mamba_branching_seqlen = match.branching
        return replace(match, plain=plain)

    def _prefill(self) -> _Batch | None:
        """``_get_new_batch_prefill_raw``: the adder's pass, its windows and save points set (None: no pass)."""
        if not self.waiting and self.chunked is None:
            return None
        server = self.server
        order = policy_order(server.schedule_policy, [r.fill_ids() for r in self.waiting], self.tree)
        self.waiting = [self.waiting[k] for k in order]
        matches = [(req.rid, self._match(req)) for req in self.waiting]
        mixed = mixed_decode_rows(server, len(self.running))
        formed = form_pass(start_budget(server, mixed), self.chunked, self.waiting, self.rules)
        by_rid = {r.rid: r for r in self.waiting}
        if self.chunked is not None:
            by_rid[self.chunked.rid] = self.chunked
        batch = [by_rid[window.rid] for window in formed.windows]
        if not batch:
            return None
        offered = {o.rid for o in formed.offers}
        step = SchedulerStep(
            self.step_no,
            active_policy(server.schedule_policy, self.tree),
            self.rules,
            mixed,
            tuple((rid, m) for rid, m in matches if rid in offered),
            formed,
            server,
        )
        admitted = {id(r) for r in batch}
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        self.chunked = None if formed.chunked is None else by_rid[formed.chunked]
        if self.chunked is not None:
            self.chunked.inflight_middle_chunks += 1
        windows = tuple(formed.windows)
        for req, window in zip(batch, windows):
            req.extend_end = window.end
            req.kv_committed_len = window.end
            self._track_prefill(req, window)
        decoding = self._mix() if server.mixed_chunk and self.running else []
        record = Pass(self.step_no, windows, formed.chunked, tuple(r.rid for r in decoding), (), self.release, step)
        return _Batch(True, batch + decoding, self.chunked, decoding, record)

    def _track_prefill(self, req: Req, window: Window) -> None:
        """``prepare_for_extend``'s extra-buffer save point: the window's start plus whole grids, or its branching
        point when that lies inside the window (``_mamba_radix_cache_v2_req_prepare_for_extend``)."""
        server = self.server
        grid = server.checkpoint_grid
        if server.strategy != "extra_buffer" or window.extend_input_len < grid:
            return
        start, end = window.prefix_len, window.end
        save = start + window.extend_input_len // grid * grid
        on_state_chunk = start + window.extend_input_len // server.state_chunk * server.state_chunk
        read_to = end if on_state_chunk == save else save + 1
        branch = req.mamba_branching_seqlen
        if branch is not None and start < branch < read_to and (branch - start) % server.cache_chunk == 0:
            save = branch
        req.mamba_last_track_seqlen = save

    def _mix(self) -> list[Req]:
        """``mix_with_running``: the running rows decode inside the pass (never saving a state) and leave the
        running batch."""
        self._filter_running()
        rows, self.running = self.running, []
        for req in rows:
            req.kv_committed_len += 1
        return rows

    # --- processing a result (process_batch_result) -----------------------------------------------------------
    def _process(self, batch: _Batch) -> None:
        """Commit the batch's tokens: finishes release into the tree, unfinished prompts are inserted."""
        finished: list[str] = []
        decoding = {id(r) for r in batch.decoding}
        for req in batch.reqs:
            if req.finished:
                continue
            if batch.extend and id(req) not in decoding and req.inflight_middle_chunks > 0:
                req.inflight_middle_chunks -= 1
                continue
            req.emit()
            if id(req) in batch.tracked:
                req.mamba_last_track_seqlen = batch.tracked[id(req)]
            if req.finished:
                self._release(req)
                finished.append(req.rid)
            elif batch.extend and id(req) not in decoding:
                self._insert(req, req.extend_end, finished=False)
        if batch.formed is not None:
            self.passes.append(replace(batch.formed, finished=tuple(finished)))

    def step(self) -> None:
        """One iteration of ``event_loop_overlap`` (the default) or ``event_loop_normal``."""
        self._arrive()
        batch = self._next_batch()
        if not self.server.overlap:
            if batch is not None:
                self._process(batch)
        else:
            if batch is not None:
                self.queued.append(batch)
            if self.last is not None:
                self._process(self.queued.popleft())
        self.last = batch
        self.step_no += 1

    @property
    def done(self) -> bool:
        idle = not (self.pending or self.waiting or self.running or self.chunked or self.queued)
        return idle and (self.last is None or all(r.finished for r in self.last.reqs))


@frozen
class Schedule:
    """What a release's scheduler did with a workload: the server config it ran, every prefill pass in order of
    its step, and every linear-attention state its tree took in."""

    server: ServerConfig
    passes: tuple[Pass, ...]
    saves: tuple[Save, ...]

    def saves_of(self, rid: str) -> list[int]:
        """Return the depths the tree took a state at from request ``rid``, in order."""
        return [s.depth for s in self.saves if s.rid == rid]


def schedule(reqs: list[Req], load: LoadSettings, release: Release, max_steps: int | None = None) -> Schedule:
    """Return the :class:`Schedule` the kit's model of ``release``'s scheduler forms for ``reqs`` under ``load``:
    each prefill pass with the :class:`SchedulerStep` that formed it. The requests given are not changed.
    ``max_steps`` defaults to enough for every prompt and output token. Raises SettingNotInReleaseError for flags
    the release refuses for Kimi-K3 (:func:`~.server_args.resolve_server`)."""
    server = resolve_server(load, release)
    limit = max_steps if max_steps is not None else 1000 + 2 * sum(r.max_new_tokens + r.length for r in reqs)
    scheduler = _Scheduler(server, reqs, release)
    while scheduler.step_no < limit:
        scheduler.step()
        if scheduler.done:
            return Schedule(server, tuple(sorted(scheduler.passes, key=lambda p: p.step)), tuple(scheduler.saves))
    raise WhatIfError(f"the workload did not finish in {limit} scheduler steps")


def radix_prefixes(passes: tuple[Pass, ...] | list[Pass]) -> dict[str, int]:
    """Return each scheduled request's radix prefix: where its first window starts (tokens never prefilled)."""
    prefixes: dict[str, int] = {}
    for formed in passes:
        for window in formed.windows:
            prefixes.setdefault(window.rid, window.prefix_len)
    return prefixes


__all__ = ["Pass", "Save", "Schedule", "SchedulerStep", "radix_prefixes", "schedule"]
