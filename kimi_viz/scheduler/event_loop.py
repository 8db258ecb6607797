"""SGLang's scheduler loop (``managers/scheduler.py``), step by step: the prefill passes it forms for Kimi-K3.

:func:`schedule` runs each release's loop on the kit's model of its parts, in SGLang's order
(``docs/scheduler-notes.md`` §1, ``docs/hybrid-tree-notes.md`` §5). One step is one iteration:

1. the requests due arrive (a chat's next turn the step after its earlier turn's finish was processed);
2. ``get_next_batch_to_run``: the chunked request's last window goes into the tree (the stash); the
   last prefill batch's unfinished rows join the running batch (0.5.23 also drops the finished ones
   before the adder counts them); the adder (:mod:`.policy`) forms a pass from the chunked request
   and the waiting queue in the policy's order, each waiting request starting from its match in the
   hybrid tree (:mod:`.radix_cache`); with ``--enable-mixed-chunk`` the running rows decode inside it; with
   no pass the running rows decode alone (``update_running_batch``);
3. the forward runs; its result — first tokens, finishes, the tree's inserts — is processed in the same
   step by ``event_loop_normal`` (``--disable-overlap-schedule``), or by ``event_loop_overlap`` (the
   default) only after the *next* step's batch was formed: a request arriving right after a prefill
   misses its insert, a row its queued result will finish is decoded once more (0.5.18) or left out
   (0.5.23).

The tree saves linear-attention states where the server's strategy says (``extra_buffer``: a prefill
window's start plus multiples of the checkpoint grid, its branching point instead when that lies inside
the window, and decode lengths on the decode grid; ``no_buffer``: every insert), and every insert stops
at the request's saved state.

Memory (``docs/memory-notes.md``; :mod:`.memory`) is unbounded unless a pool is given. With
``--max-total-tokens`` the KV pool is finite: the adder's KV budgets can refuse a request (``NO_TOKEN``,
which also stops prefill until a running request leaves), every allocation evicts the tree's least
recently used unlocked leaves when the pool is short, and a decode step that does not fit retracts the
running requests with the fewest outputs (their KV freed, not inserted) back to the waiting queue; with
``--max-running-requests`` the request rows bound a pass; with ``--max-mamba-cache-size`` the state slots
are finite and the tree's saved states are evicted, least recently used first.

Between events (an arrival, a finish, a prefill attempt, an eviction, a retraction) the loop only decodes;
:class:`Scheduler` jumps over such runs at once (:mod:`.decode_run`, exactly as stepping one by one;
``schedule(..., stepwise=True)`` steps every one). Each :class:`Pass` carries the :class:`SchedulerStep`
that formed it: the policy, every waiting request's :class:`~.prefix.PrefixMatch` (with what a plain radix
tree would have matched) and the adder's :class:`~.policy.PassForm` (its budgets, every offer, the cut),
and the depths the tree took a state at while the pass's result was processed (``saves``); a
:class:`Schedule` also holds every retraction and, with bounded memory, each step's pools and evictions
(:class:`MemoryStep`, the jumped steps as :class:`~.decode_run.DecodeRun`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from .._records import frozen
from ..errors import WhatIfError
from ..releases import Release
from ..scheduler_rules import SchedulerRules
from .arrivals import Arrivals
from .batch import Batch, MemoryStep, Retraction, Save, ScheduleState
from .decode_run import DecodeRun, advance_rows, quiet_decode_steps
from .flags import LoadSettings
from .memory import KVBudget, NewTokenRatio
from .policy import (
    LPM_MAX_WAITING,
    AddReqResult,
    PassForm,
    PrefillAdder,
    active_policy,
    mixed_decode_rows,
    policy_order,
    start_budget,
)
from .prefix import PrefixMatch, padded_ids
from .radix_cache import lost_on
from .req import Req, Window
from .server_config import ServerConfig, resolve_server

REFRESH_EVERY = 32  # WAITING_PREFIX_REFRESH_INTERVAL: fcfs refreshes waiting prefixes every 32nd pass (0.5.22+)
REFRESH_FIRST = 128  # WAITING_QUEUE_PREFIX_MATCH_MAX


@frozen
class Pressure:
    """What memory did before a pass (bounded memory): the requests retracted since the previous pass (step, rid),
    what the tree evicted since then (through this pass's own allocations), the steps whose walk stopped on
    ``NO_TOKEN`` without forming a pass, and the requests of the pass whose own cached prefix those evictions
    took (part of their prompt's path: they start short of it)."""

    retracted: tuple[tuple[int, str], ...]
    evicted_tokens: int
    evicted_states: int
    refused_steps: tuple[int, ...]
    prefix_evicted: tuple[str, ...] = ()  # requests matched for this pass that would have matched more

    @property
    def quiet(self) -> bool:
        """Return True when memory did nothing before the pass."""
        return not (self.retracted or self.evicted_tokens or self.evicted_states or self.refused_steps)


@frozen
class SchedulerStep:
    """What the scheduler did in the step that formed one pass: the policy it ran, the rows the decoding requests
    took from the budgets, each waiting request's radix match (by rid, in the policy's order), the adder's walk and
    what memory did since the previous pass (None: memory unbounded)."""

    step: int
    policy: str
    rules: SchedulerRules
    mixed_rows: int
    matches: tuple[tuple[str, PrefixMatch], ...]
    form: PassForm
    server: ServerConfig
    pressure: Pressure | None = None

    def match_of(self, rid: str) -> PrefixMatch | None:
        """Return request ``rid``'s radix match in this step, or None (the chunked request is not matched again)."""
        return next((m for r, m in self.matches if r == rid), None)


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
class _Queued:
    """A batch in flight and the pass it forms (None for a decode); its finishes are filled in when processed."""

    batch: Batch
    formed: Pass | None


class Scheduler:
    """``Scheduler`` between steps: its queues, running batch, chunked request and the batch in flight, and the batch
    state it runs on (:class:`~.batch.ScheduleState`: the tree, the pools and their bookkeeping)."""

    def __init__(self, server: ServerConfig, reqs: list[Req], release: Release) -> None:
        self.server = server
        self.rules = release.scheduler
        self.release = release.version
        self.state = ScheduleState(server, release)
        self.arrivals = Arrivals([req.given() for req in reqs])
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.batch_is_full = False
        self.chunked: Req | None = None
        self.last: Batch | None = None
        self.queued: deque[_Queued] = deque()
        self.passes: list[Pass] = []
        self.no_token_steps: list[int] = []
        self.decode_runs: list[DecodeRun] = []
        self.refreshes = 0
        self.kv: KVBudget | None = None  # the adder's KV budgets while a pass is formed
        self.matched: dict[str, PrefixMatch] = {}  # the waiting requests matched while a pass is formed
        self.formed_pass: Pass | None = None
        self._retracted_from = 0  # the retractions and NO_TOKEN steps already told with an earlier pass
        self._refused_from = 0

    def finished(self, req: Req) -> None:
        """A request left for good (its finish, or an abort): the requests following it are due next step."""
        self.arrivals.finished(req.rid, self.state.step_no)

    # --- arrivals and the merge (process_input_requests, get_next_batch_to_run) --------------------------------
    def _arrive(self) -> None:
        for req in self.arrivals.due(self.state.step_no):
            req.origin_input_ids = padded_ids(req, self.rules)
            self.waiting.append(req)

    def _stash(self) -> None:
        """``stash_chunked_request``: the chunk just computed goes into the tree; it continues from its end."""
        req = self.chunked
        if req is not None and req.extend_end > req.prefix_len:
            self.state.insert(req, req.extend_end, finished=False)
            req.prefix_len = req.extend_end

    def _next_batch(self) -> Batch | None:
        """``get_next_batch_to_run``: merge the last prefill's rows, form a prefill pass, else decode the running."""
        self._stash()
        last = self.last
        if last is not None and last.extend:
            exclude = {id(self.chunked), id(last.chunked)}
            merged = [r for r in last.reqs if not r.finished and not r.retracted and id(r) not in exclude]
            if len(merged) < len(last.reqs):
                self.batch_is_full = False
            if merged and not self.running:  # the prefill batch becomes the running batch, its flag unset
                self.batch_is_full = False
            self.running += merged
        if self.rules.filters_running_every_step:
            kept = [r for r in self.running if not r.finished]
            if len(kept) < len(self.running):
                self.batch_is_full = False
            self.running = kept
        batch = self._prefill()
        if batch is not None:
            return batch
        return self._update_running_batch()

    def _finishing_inflight(self, rows: list[Req]) -> set[int]:
        """0.5.22+ ``_reqs_finishing_inflight``: rows the queued result will finish by length (overlap only)."""
        if not (self.rules.skips_finishing_inflight and self.server.overlap and self.queued):
            return set()
        near = [r for r in rows if r.output_len + 1 >= r.max_new_tokens]
        if not near:
            return set()
        queued = {id(r) for r in self.queued[0].batch.reqs}
        return {id(r) for r in near if id(r) in queued}

    def _update_running_batch(self) -> Batch | None:
        """``update_running_batch``: the decode memory check, retraction or the ratio's decay, then one token each."""
        if not self.running:
            return None
        state = self.state
        initial = len(self.running)
        gone = self._finishing_inflight(self.running)
        self.running = [r for r in self.running if not r.finished and id(r) not in gone]
        if not self.running:
            self.batch_is_full = False
            return None
        short = not state.check_decode_mem(self.running)
        if short and gone:  # the queued result frees them this step: decode the rest next step
            self.batch_is_full = False
            return None
        if short:
            kept, retracted, aborted = state.retract_decode(self.running)
            self.running = kept
            state.ratio.current = NewTokenRatio.after_retract(
                [r.output_len for r in kept], [r.max_new_tokens for r in kept]
            )
            for req in aborted:
                self.finished(req)
            self.waiting += retracted
        else:
            state.ratio.decay_step()
        if len(self.running) < initial:
            self.batch_is_full = False
        if not self.running:
            return None
        return state.prepare_for_decode(list(self.running))

    # --- forming a prefill pass (_get_new_batch_prefill_raw) --------------------------------------------------
    def _allocatable(self, running: int, held: int) -> float:
        """``get_num_allocatable_reqs``: the micro-batch room and the free request rows."""
        rows = self.server.memory.request_rows
        if rows is None:
            return float("inf")
        return min(rows - running, self.state.pools.rows_available() + held)

    # the Walk the adder calls back
    def match(self, req: Req) -> None:
        """``init_next_round_input(tree)``: the request starts from its match (copying the matched state into a
        slot of its own); a branching point is kept."""
        self.matched[req.rid] = self.state.match_waiting(req, self.state.group_free)

    def has_room(self, admitted: int, held: int) -> bool:
        """Return False (the batch is full) when no request row is left for another candidate."""
        if admitted >= self._allocatable(len(self.running), held):
            self.batch_is_full = True
            return False
        return True

    def admitted(self, req: Req) -> None:
        """The candidate got a window: it keeps its prefix locked."""
        if req.last_node is not None:
            self.state.lock_prefix(req, req.last_node)

    def refused(self, req: Req) -> None:
        """The candidate was refused: the state slot its match took goes back."""
        self.state.drop_cow_slot(req)

    def _order(self) -> None:
        """``calc_priority``: the policy's order (lpm matches every waiting request, up to 128 of them; past that the
        queue keeps its order, as fcfs); 0.5.22+ with a cache-agnostic policy refreshes waiting prefixes."""
        server = self.server
        lpm = active_policy(server.schedule_policy, self.state.tree) == "lpm" and len(self.waiting) <= LPM_MAX_WAITING
        if lpm:
            fills = [r.fill_view(r.fill_len) for r in self.waiting]
            order = policy_order(server.schedule_policy, fills, self.state.tree)
            self.waiting = [self.waiting[k] for k in order]
        elif self.rules.touches_waiting_prefixes:
            self._touch_waiting_prefixes()

    def _touch_waiting_prefixes(self) -> None:
        """``SchedulePolicy._touch_waiting_prefixes``: with a waiting queue and the tree on, every 32nd call walks the
        first 128 waiting requests' prefixes, the head last (``touch_prefix``: each walk's end is refreshed in the
        MAMBA LRU, its path's recency renewed); the call count moves only when the queue is not empty."""
        tree = self.state.tree
        if not self.waiting or tree.disabled:
            return
        if self.refreshes % REFRESH_EVERY == 0:
            for req in reversed(self.waiting[:REFRESH_FIRST]):
                tree.match_prefix(req.fill_view(req.fill_len))
        self.refreshes += 1

    def _prefill(self) -> Batch | None:
        """``_get_new_batch_prefill_raw``: the adder's pass, its windows and save points set (None: no pass)."""
        rules, server, state = self.rules, self.server, self.state
        if rules.clears_full_when_empty and not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        if self._allocatable(len(self.running), 0) <= 0 and self.chunked is None:
            self.batch_is_full = True
            return None
        self._order()
        mixed = mixed_decode_rows(server, len(self.running))
        self.kv = state.kv_budget(self.running, mixed)
        self.matched = {}
        state.group_free = state.pools.mamba_available() >= len(self.waiting)  # alloc_group_begin pre-allocates
        formed = PrefillAdder(start_budget(server, mixed), rules, self).form(self.chunked, self.waiting)
        self.kv = None
        if formed.stop == AddReqResult.NO_TOKEN:
            self.no_token_steps.append(state.step_no)
            busy = bool(formed.windows) or bool(self.running)
            self.batch_is_full = busy if rules.no_token_fills_only_if_busy else True
        if not formed.windows:
            return None
        return self._launch(formed, mixed)

    def _launch(self, formed: PassForm, mixed: int) -> Batch:
        """The pass's requests leave the queue (one maybe cut), their batch is prepared, the running rows mix in."""
        server, state = self.server, self.state
        reached = len(self.waiting) - len(formed.never_offered)  # the adder offered the queue's head, in order
        head = self.waiting[:reached]
        by_rid = {r.rid: r for r in head}
        if self.chunked is not None:
            by_rid[self.chunked.rid] = self.chunked
        batch = [by_rid[window.rid] for window in formed.windows]
        offered = {o.rid for o in formed.offers}
        admitted = {id(r) for r in batch}
        self.waiting = [r for r in head if id(r) not in admitted] + self.waiting[reached:]
        self.chunked = None if formed.chunked is None else by_rid[formed.chunked]
        if self.chunked is not None:
            self.chunked.inflight_middle_chunks += 1
        prefill = state.prepare_for_extend(batch, list(formed.windows))
        decoding = self._mix(prefill) if server.mixed_chunk and self.running else []
        step = SchedulerStep(
            state.step_no,
            active_policy(server.schedule_policy, state.tree),
            self.rules,
            mixed,
            tuple((rid, m) for rid, m in self.matched.items() if rid in offered),
            formed,
            server,
            self._pressure([r for r in batch if r.rid in self.matched]),
        )
        decoded = tuple(r.rid for r in decoding)
        self.formed_pass = Pass(state.step_no, tuple(formed.windows), formed.chunked, decoded, (), self.release, step)
        prefill.chunked = self.chunked
        return prefill

    def _pressure(self, matched: list[Req]) -> Pressure | None:
        """Return what memory did since the previous pass (``matched``: the pass's requests matched by its walk), and
        start counting again (None: memory unbounded)."""
        if not self.server.memory.bounded:
            return None
        state = self.state
        since = state.pools.since_pass
        refused = tuple(step for step in self.no_token_steps[self._refused_from :] if step != state.step_no)
        lost = state.tree.lost_since_pass
        pressure = Pressure(
            tuple((r.step, r.rid) for r in state.retractions[self._retracted_from :]),
            since.tokens,
            since.states,
            refused,
            tuple(
                r.rid
                for r in matched
                if lost and any(p.end > r.prefix_len for p in lost_on(r.fill_view(r.fill_len), lost))
            ),
        )
        since.tokens = since.states = 0
        lost.clear()
        self._retracted_from, self._refused_from = len(state.retractions), len(self.no_token_steps)
        return pressure

    def _mix(self, prefill: Batch) -> list[Req]:
        """``mix_with_running``: the running rows decode inside the pass (never saving a state) and leave the
        running batch; 0.5.22+ first leaves out rows finishing in flight, and the rows sit out when their decode
        memory does not fit."""
        gone = self._finishing_inflight(self.running)
        if gone:
            self.batch_is_full = False
        rows = [r for r in self.running if not r.finished and id(r) not in gone]
        self.running = rows
        if not rows:
            return []
        if self.rules.mixed_checks_decode_mem and not self.state.check_decode_mem(rows):
            return []
        self.state.mix_decode(prefill, rows)
        self.running = []
        return rows

    # --- processing a result (process_batch_result) -----------------------------------------------------------
    def _process(self, queued: _Queued) -> None:
        """Commit the batch's tokens: finishes release into the tree, unfinished prompts are inserted."""
        batch = queued.batch
        finished: list[str] = []
        decoding = {id(r) for r in batch.decoding}
        for req in batch.reqs:
            if req.finished or req.retracted:
                continue
            if batch.extend and id(req) not in decoding and req.inflight_middle_chunks > 0:
                req.inflight_middle_chunks -= 1
                continue
            req.emit()
            if id(req) in batch.tracked:
                req.mamba_last_track_seqlen = batch.tracked[id(req)]
            if req.finished:
                self.state.release_req(req)
                self.finished(req)
                finished.append(req.rid)
            elif batch.extend and id(req) not in decoding:
                self.state.insert(req, req.extend_end, finished=False)
        if queued.formed is not None:
            self.passes.append(replace(queued.formed, finished=tuple(finished)))

    def step(self) -> None:
        """One iteration of ``event_loop_overlap`` (the default) or ``event_loop_normal``."""
        self._arrive()
        self.formed_pass = None
        batch = self._next_batch()
        queued = None if batch is None else _Queued(batch, self.formed_pass)
        if not self.server.overlap:
            if queued is not None:
                self._process(queued)
            else:
                self._on_idle()
        else:
            if queued is not None:
                self.queued.append(queued)
            if self.last is not None:
                self._process(self.queued.popleft())
            elif batch is None:
                self._on_idle()
        self.last = batch
        self.state.record_memory()
        self.state.step_no += 1

    def _on_idle(self) -> None:
        """``on_idle``: a fully idle server resets ``new_token_ratio``."""
        if not self.waiting and not self.running and self.chunked is None:
            self.state.ratio.reset()

    # --- runs of decode steps in which nothing can change (decode_run.py) ----------------------------------------
    def quiet_steps(self, limit: int) -> int:
        """Return how many steps from now only decode the running rows with nothing else happening (0: the next one
        may do more); at most ``limit``."""
        running, last, step = self.running, self.last, self.state.step_no
        if self.chunked is not None or not running or last is None or last.extend or last.decoding:
            return 0
        if not (self.batch_is_full or not self.waiting) or len(last.reqs) != len(running):
            return 0
        if any(a is not b for a, b in zip(last.reqs, running)):
            return 0
        in_flight = list(self.queued)
        steady = len(in_flight) == 1 and in_flight[0].batch is last and in_flight[0].formed is None
        if self.server.overlap and not steady:
            return 0
        bound = int(min(limit, self.arrivals.next_due() - step))
        pools = self.state.pools
        return quiet_decode_steps(running, self.server.page_size, pools.kv_available(), pools.tree.evictable, bound)

    def run_quiet(self, steps: int) -> None:
        """Take ``steps`` quiet decode steps at once (:func:`~.decode_run.advance_rows`), as one by one."""
        state, server = self.state, self.server
        rows = self.running
        pools = state.pools
        if server.memory.kv_pool is not None or server.memory.mamba_pool is not None:
            ratio = state.ratio
            self.decode_runs.append(
                DecodeRun(
                    state.step_no,
                    steps,
                    tuple(r.kv_committed_len for r in rows),
                    server.page_size,
                    pools.kv_available(),
                    state.tree.evictable,
                    pools.mamba_available(),
                    ratio.current,
                    ratio.low,
                    ratio.decay,
                )
            )
        owned = sum(r.owned for r in rows)
        grid = server.decode_grid if state.extra_buffer else None
        tracked = advance_rows(rows, steps, server.page_size, grid, 1 if server.overlap else 0)
        pools.owned += sum(r.owned for r in rows) - owned
        state.ratio.decay_steps(steps)
        batch = Batch(False, list(rows), tracked=tracked)
        if server.overlap:
            self.queued = deque([_Queued(batch, None)])
        self.last = batch
        self.formed_pass = None
        state.step_no += steps

    @property
    def done(self) -> bool:
        """Return True once every request has finished and nothing is in flight."""
        idle = not (self.arrivals or self.waiting or self.running or self.chunked or self.queued)
        return idle and (self.last is None or all(r.finished for r in self.last.reqs))


@frozen
class Schedule:
    """What a release's scheduler did with a workload: the server config it ran, every prefill pass in order of
    its step, every linear-attention state its tree took in, every retraction, the steps whose walk stopped on
    ``NO_TOKEN`` and, with bounded memory, the pools after each step it took one by one (``memory``) and the runs of
    decode steps it jumped over (``decode_runs``; :meth:`memory_after_each_step` has every step)."""

    server: ServerConfig
    passes: tuple[Pass, ...]
    saves: tuple[Save, ...]
    retractions: tuple[Retraction, ...] = ()
    no_token: tuple[int, ...] = ()
    memory: tuple[MemoryStep, ...] = ()
    decode_runs: tuple[DecodeRun, ...] = ()
    steps: int = 0  # the scheduler steps the workload took

    def saves_of(self, rid: str) -> list[int]:
        """Return the depths the tree took a state at from request ``rid``, in order."""
        return [s.depth for s in self.saves if s.rid == rid]

    @property
    def evictions(self) -> list[MemoryStep]:
        """Return the steps in which the tree evicted KV tokens or states (never a jumped one)."""
        return [m for m in self.memory if m.evicted_tokens or m.evicted_states]

    def memory_after_each_step(self) -> list[MemoryStep]:
        """Return the pools after every step, the jumped ones written out (bounded memory; else empty)."""
        steps = list(self.memory)
        for run in self.decode_runs:
            steps.extend(run.memory_steps())
        return sorted(steps, key=lambda m: m.step)


def _too_big(req: Req, need: int, load: LoadSettings, server: ServerConfig) -> str:
    """Return the refusal of a request the KV pool can never hold: its need, the pool, and the page (with the
    attention backend that sets it, where one does)."""
    page = server.page_size
    pool = server.memory.kv_pool
    held = f"--max-total-tokens is {pool}"
    if page > 1:
        forced = next((said for said in server.resolved if "sets the page" in said), None)
        why = f"{forced}" if forced is not None else f"--page-size {page}"
        held = f"the KV pool holds {pool} in whole pages of {page} (--max-total-tokens {load.max_total_tokens}; {why})"
    return (
        f"request {req.rid}: its {req.length} prompt tokens and {req.max_new_tokens} outputs need {need} KV tokens, "
        f"but {held}; give a larger pool (SGLang would cut its outputs short)"
    )


def schedule(
    reqs: list[Req], load: LoadSettings, release: Release, max_steps: int | None = None, *, stepwise: bool = False
) -> Schedule:
    """Return the :class:`Schedule` the kit's model of ``release``'s scheduler forms for ``reqs`` under ``load``:
    each prefill pass with the :class:`SchedulerStep` that formed it. The requests given are not changed.
    ``max_steps`` defaults to enough for every prompt and output token. Runs of decode steps in which nothing can
    change are jumped over (:mod:`.decode_run`); ``stepwise`` takes every step one by one instead (the same
    answer). Raises SettingNotInReleaseError for flags the release refuses for Kimi-K3
    (:func:`~.server_config.resolve_server`), WhatIfError for a request the KV pool could never hold."""
    server = resolve_server(load, release)
    pool = server.memory.kv_pool
    if pool is not None:
        for req in reqs:
            need = req.length + req.max_new_tokens + 2 * server.page_size
            if need >= pool:
                raise WhatIfError(_too_big(req, need, load, server))
    limit = max_steps if max_steps is not None else 1000 + 4 * sum(r.max_new_tokens + r.length for r in reqs)
    scheduler = Scheduler(server, reqs, release)
    state = scheduler.state
    while state.step_no < limit:
        quiet = 0 if stepwise else scheduler.quiet_steps(limit - state.step_no)
        if quiet > 0:
            scheduler.run_quiet(quiet)
        else:
            scheduler.step()
        if scheduler.done:
            return Schedule(
                server,
                tuple(sorted(scheduler.passes, key=lambda p: p.step)),
                tuple(state.saves),
                tuple(state.retractions),
                tuple(scheduler.no_token_steps),
                tuple(state.memory),
                tuple(scheduler.decode_runs),
                state.step_no,
            )
    raise WhatIfError(f"the workload did not finish in {limit} scheduler steps")


def radix_prefixes(passes: tuple[Pass, ...] | list[Pass]) -> dict[str, int]:
    """Return each scheduled request's radix prefix: where its first window starts (tokens never prefilled)."""
    prefixes: dict[str, int] = {}
    for formed in passes:
        for window in formed.windows:
            prefixes.setdefault(window.rid, window.prefix_len)
    return prefixes


__all__ = ["Pass", "Pressure", "Schedule", "Scheduler", "SchedulerStep", "radix_prefixes", "schedule"]
