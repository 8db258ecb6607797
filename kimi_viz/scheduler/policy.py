"""SGLang's ``managers/schedule_policy.py``: the policy's order of the waiting queue and ``PrefillAdder``.

``SchedulePolicy.calc_priority`` (:func:`policy_order`: ``fcfs`` keeps the queue, ``lpm`` sorts by
cached prefix with the in-batch deprioritisation) and :class:`PrefillAdder`, driven by
``managers/scheduler.py`` ``_get_new_batch_prefill_raw`` (``docs/scheduler-notes.md`` §1, §2, §4 and
§6 hold the rules and the runs that checked them). An adder owns one pass's budgets
(``rem_input_tokens``, ``rem_chunk_tokens``, and with a bounded KV pool ``rem_total_tokens`` /
``cur_rem_tokens``: :class:`~.memory.KVBudget`) and walks:

* the **chunked request first** (:meth:`PrefillAdder.add_chunked_req`): ``min(remaining,
  rem_chunk_tokens, rem_total_tokens)`` tokens from where its last window ended, not floored to the page;
* then the **waiting queue** in the policy's order, each through :meth:`PrefillAdder.add_one_req`:
  refused with ``NO_TOKEN`` when its window, remaining outputs (at most 4096) and a page do not fit the
  KV budget left while its prefix is locked; admitted whole when chunking is off or its *page-ceiled*
  extend fits the chunk budget, else cut at the budget floored to the page; with chunking off a later
  request is refused once its page-ceiled extend reaches ``rem_input_tokens`` (the first is always
  admitted whole);
* every admission **charges** the budgets its page-ceiled extend (:func:`charged_tokens`, plus its
  outputs and a page to ``rem_total_tokens``); any :class:`AddReqResult` other than ``CONTINUE``
  (:meth:`PrefillAdder.budget_state`) ends the walk, as does running out of request rows.

What differs between releases is the release's :class:`~kimi_viz.releases.SchedulerRules`: 0.5.23
also checks ``budget_state()`` *before* each waiting candidate, so a spent ``--max-prefill-tokens``
stops the walk even where chunk budget is left (0.5.18 still admits one more request within the chunk
budget); from 0.5.20 the KV test runs under the prefix lock first. With every pool unbounded memory never
refuses anyone (``docs/memory-notes.md`` §2).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import field
from enum import Enum
from operator import attrgetter
from typing import Literal, Protocol

from .._records import frozen
from ..scheduler_rules import SchedulerRules
from .memory import CLIP_MAX_NEW_TOKENS, KVBudget
from .prefix import PlainTree, page_ceil, page_floor
from .radix_cache import RadixCache
from .req import Req, Window
from .server_config import ServerConfig

_RID = attrgetter("rid")

IN_BATCH_CHECK_THRESHOLD = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
IN_BATCH_DEPRIORITIZE_THRESHOLD = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD
LPM_MAX_WAITING = 128  # above this many waiting requests lpm falls back to fcfs
ROWS: Literal["rows"] = "rows"  # the walk stopped: get_num_allocatable_reqs left no request row


class AddReqResult(str, Enum):
    """``AddReqResult``: what an offer leaves the walk (anything but ``CONTINUE`` ends it)."""

    CONTINUE = "continue"
    NO_TOKEN = "no_token"  # the KV pool cannot take the request (or the KV budgets are spent)
    OTHER = "other"  # the input or chunk budget is spent

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@frozen
class Budget:
    """The adder's token budgets at one moment (``rem_chunk`` None: chunking off)."""

    page_size: int
    rem_input: int  # rem_input_tokens
    rem_chunk: int | None  # rem_chunk_tokens


@frozen
class Admission:
    """What one offer to the adder did: the window (None: refused), whether it was cut, and what is left."""

    window: Window | None
    cut: bool
    result: AddReqResult
    budget: Budget


@frozen
class Offer:
    """One request offered to the adder while it formed a pass: its fill length and the prefix it started from
    then, whether it is the chunked request continued first, what the offer did, and the tokens it charged the
    budgets (its window page-ceiled; 0: refused)."""

    rid: str
    length: int  # len(fill_ids): the prompt (and any output ids)
    prefix_len: int  # the tree match (a waiting request) or the last window's end (the chunked one)
    chunked: bool
    admission: Admission
    charged: int


@frozen
class PassForm:
    """One pass as the adder formed it: the windows in batch order and the request left cut (None: none), the
    budgets it started from and ended with, every offer in order, and the waiting requests never offered (the walk
    stopped before them: kept as the requests, their ids read on demand, so that a pass formed before a long queue
    costs no more than its offers)."""

    windows: tuple[Window, ...]
    chunked: str | None
    budget: Budget
    start: Budget
    offers: tuple[Offer, ...]
    never_offered: tuple[Req, ...] = field(default=(), compare=False, repr=False)
    stop: AddReqResult | Literal["rows"] | None = None  # why the walk stopped early (None: the queue ran out)
    rem_total: float | None = None  # rem_total_tokens when the walk ended (None: the KV pool is unbounded)

    @property
    def unoffered(self) -> tuple[str, ...]:
        """Return the ids of the waiting requests never offered, in queue order."""
        return tuple(map(_RID, self.never_offered))


class Walk(Protocol):
    """What the scheduler lends the adder's walk beyond the budgets: the live KV budgets (None: unbounded), the
    tree match of a candidate, the request-row check, and what admitting or refusing a candidate does."""

    kv: KVBudget | None

    def match(self, req: Req) -> None:
        """``init_next_round_input``: set the candidate's prefix (and its node) from the tree."""

    def has_room(self, admitted: int, held: int) -> bool:
        """Return False when ``get_num_allocatable_reqs`` leaves no row for another request."""

    def admitted(self, req: Req) -> None:
        """The candidate got a window: it keeps a lock on its prefix."""

    def refused(self, req: Req) -> None:
        """The candidate was refused: the state slot its match took goes back."""


def mixed_decode_rows(settings: ServerConfig, running: int) -> int:
    """Return the decode rows a pass carries with ``running`` requests decoding (0 without mixed chunk)."""
    return running if settings.mixed_chunk else 0


def start_budget(settings: ServerConfig, mixed_rows: int = 0) -> Budget:
    """Return the budgets a pass starts with: both less the mixed decode rows."""
    chunk = settings.chunked_prefill_size
    return Budget(
        settings.page_size,
        settings.max_prefill_tokens - mixed_rows,
        None if chunk is None else chunk - mixed_rows,
    )


def charged_tokens(extend: int, page_size: int) -> int:
    """Return what an admitted window of ``extend`` tokens costs the budgets: ``extend`` ceiled to the page."""
    return page_ceil(extend, page_size)


def _max_new(req: Req) -> int:
    """The outputs an admitted request reserves: ``min(max_new_tokens, 4096)``."""
    return min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)


class PrefillAdder:
    """``PrefillAdder``: one pass's budgets and the walk that spends them (the chunked request first, then the
    waiting queue). Without a ``walk`` the candidates' prefixes are taken as set and nothing is locked."""

    def __init__(self, budget: Budget, rules: SchedulerRules, walk: Walk | None = None) -> None:
        self.start = budget
        self.budget = budget  # rem_input_tokens, rem_chunk_tokens, as charged so far
        self.rules = rules
        self.walk = walk
        self.kv: KVBudget | None = None if walk is None else walk.kv  # rem_total_tokens, cur_rem_tokens
        self.can_run_list: list[Window] = []
        self.offers: list[Offer] = []
        self.new_chunked_req: str | None = None

    def budget_state(self) -> AddReqResult:
        """Return ``NO_TOKEN`` when the KV budgets are spent, ``OTHER`` when the input or the chunk budget is, else
        ``CONTINUE``."""
        budget = self.budget
        if self.kv is not None and self.kv.no_token():
            return AddReqResult.NO_TOKEN
        if budget.rem_input <= 0 or (budget.rem_chunk is not None and budget.rem_chunk <= 0):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _charge(self, extend: int) -> None:
        """``_update_prefill_budget``'s input and chunk part: the window page-ceiled."""
        budget = self.budget
        cost = charged_tokens(extend, budget.page_size)
        rem_chunk = None if budget.rem_chunk is None else budget.rem_chunk - cost
        self.budget = Budget(budget.page_size, budget.rem_input - cost, rem_chunk)

    def _offered(self, req: Req, chunked: bool, admission: Admission, before: Budget) -> Admission:
        charged = before.rem_input - admission.budget.rem_input
        self.offers.append(Offer(req.rid, req.fill_len, req.prefix_len, chunked, admission, charged))
        if admission.window is not None:
            self.can_run_list.append(admission.window)
            if admission.cut:
                assert self.new_chunked_req is None, "at most one request is cut per pass"
                self.new_chunked_req = req.rid
        return admission

    def add_chunked_req(self, req: Req) -> Admission:
        """Return the chunked request's next window (``add_chunked_req``): the chunk budget's worth (at most the KV
        budget, unless that is spent), unfloored."""
        before = self.budget
        assert before.rem_chunk is not None, "a chunked request needs chunking on"
        remaining = req.fill_len - req.prefix_len
        room = before.rem_chunk
        if self.kv is not None:
            room = min(room, int(self.kv.rem_total()))
            if room <= 0:
                room = before.rem_chunk
        extend = min(remaining, room)
        if self.kv is not None:
            self.kv.charge(page_ceil(extend, before.page_size), 0 if remaining > extend else _max_new(req))
        self._charge(extend)
        admission = Admission(
            Window(req.rid, req.prefix_len, extend), remaining > extend, AddReqResult.CONTINUE, self.budget
        )
        return self._offered(req, True, admission, before)

    def add_one_req(self, req: Req) -> Admission:
        """Return what ``add_one_req`` does with a waiting request (with a bounded KV pool: refused with
        ``NO_TOKEN`` when its window, remaining outputs and a page do not fit the budget left while its prefix is
        locked)."""
        before = self.budget
        return self._offered(req, False, self._admit(req), before)

    def _admit(self, req: Req) -> Admission:
        budget, kv = self.budget, self.kv
        extend = req.fill_len - req.prefix_len
        paged = page_ceil(extend, budget.page_size)
        total = extend + min(max(req.max_new_tokens - req.output_len, 0), CLIP_MAX_NEW_TOKENS) + budget.page_size
        locked_first = self.rules.locked_token_check_first
        if kv is not None and not locked_first and total >= kv.rem_total():
            return Admission(None, False, AddReqResult.NO_TOKEN, budget)
        input_spent = budget.rem_chunk is None and bool(self.can_run_list) and paged >= budget.rem_input
        if input_spent and not (kv is not None and locked_first):
            return Admission(None, False, AddReqResult.OTHER, budget)
        with kv.locked(req.last_node) if kv is not None and req.last_node is not None else nullcontext():
            if kv is not None and total >= kv.rem_total():
                return Admission(None, False, AddReqResult.NO_TOKEN, budget)
            if input_spent:
                return Admission(None, False, AddReqResult.OTHER, budget)
            if budget.rem_chunk is None or paged <= budget.rem_chunk:
                window, cut = Window(req.rid, req.prefix_len, extend), False
            else:
                trunc = page_floor(budget.rem_chunk, budget.page_size)
                trunc = page_floor(req.prefix_len + trunc, budget.page_size) - req.prefix_len
                if trunc <= 0:
                    return Admission(None, False, AddReqResult.OTHER, budget)
                window, cut = Window(req.rid, req.prefix_len, trunc), True
            if self.walk is not None:
                self.walk.admitted(req)  # its lock, taken before the budgets are read again (_req_inc_lock_ref)
            if kv is not None:
                kv.charge(page_ceil(window.extend_input_len, budget.page_size), 0 if cut else _max_new(req))
            self._charge(window.extend_input_len)
        return Admission(window, cut, self.budget_state(), self.budget)

    def form(self, chunked: Req | None, waiting: Sequence[Req]) -> PassForm:
        """Return the pass the adder forms: the chunked request's window first, then the waiting ones in order (each
        matched in the tree when it is reached, with a walk)."""
        walk, rules = self.walk, self.rules
        stop: AddReqResult | Literal["rows"] | None = None
        if chunked is not None:
            self.add_chunked_req(chunked)
        reached = 0  # every candidate reached is offered (add_one_req): the rest are the waiting ones past them
        for req in waiting:
            if rules.budget_state_before_candidate and self.budget_state() == AddReqResult.OTHER:
                stop = AddReqResult.OTHER
                break
            held = int(chunked is not None and rules.counts_held_rows)
            if walk is not None and not walk.has_room(len(self.can_run_list), held):
                stop = ROWS
                break
            if walk is not None:
                walk.match(req)
            reached += 1
            outcome = self.add_one_req(req)
            if outcome.window is None and walk is not None:
                walk.refused(req)
            if outcome.result != AddReqResult.CONTINUE:
                stop = outcome.result
                break
        never_offered = tuple(waiting[reached:])
        kv = self.kv
        rem_total = None if kv is None or kv.pools.config.kv_pool is None else kv.rem_total()
        windows = tuple(self.can_run_list)
        return PassForm(
            windows, self.new_chunked_req, self.budget, self.start, tuple(self.offers), never_offered, stop, rem_total
        )


def active_policy(policy: str, tree: RadixCache | PlainTree) -> str:
    """Return the policy the scheduler runs: ``lpm`` on a disabled tree is ``fcfs`` (``_validate_and_adjust``)."""
    return "fcfs" if tree.disabled else policy


def policy_order(policy: str, fill_ids: Sequence[Sequence[int]], tree: RadixCache) -> list[int]:
    """Return the waiting requests' indices in the order ``SchedulePolicy.calc_priority`` leaves them.

    ``lpm``: by the tree's match (capped at ``len - 1``), longest first, ties in queue order; a request
    whose tree match is at most 32 tokens and which shares 32 or more with an earlier one in the queue
    (page 1, ``waiting_queue_radix_tree``) goes last for this round. More than 128 waiting: queue order.
    """
    order = list(range(len(fill_ids)))
    if active_policy(policy, tree) == "fcfs" or len(fill_ids) > LPM_MAX_WAITING:
        return order
    in_batch = PlainTree(page_size=1)
    keys: list[float] = []
    for ids in fill_ids:
        matched = tree.match_prefix(ids).depth  # match_prefix_for_req: the whole fill ids, touched as matched
        key = -float(min(matched, max(len(ids) - 1, 0)))
        if matched <= IN_BATCH_CHECK_THRESHOLD:
            if in_batch.match(ids) >= IN_BATCH_DEPRIORITIZE_THRESHOLD:
                key = float("inf")
            else:
                in_batch.insert(ids)
        keys.append(key)
    return sorted(order, key=lambda k: keys[k])


__all__ = [
    "LPM_MAX_WAITING",
    "ROWS",
    "AddReqResult",
    "Admission",
    "Budget",
    "Offer",
    "PassForm",
    "PrefillAdder",
    "Walk",
    "active_policy",
    "charged_tokens",
    "mixed_decode_rows",
    "policy_order",
    "start_budget",
]
