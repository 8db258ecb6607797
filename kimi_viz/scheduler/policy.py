"""SGLang's ``managers/schedule_policy.py``: the policy's order of the waiting queue and ``PrefillAdder``.

``SchedulePolicy.calc_priority`` (:func:`policy_order`: ``fcfs`` keeps the queue, ``lpm`` sorts by
cached prefix with the in-batch deprioritisation) and ``PrefillAdder``, driven by
``managers/scheduler.py`` ``_get_new_batch_prefill_raw`` (``docs/scheduler-notes.md`` §1, §2, §4 and
§6 hold the rules and the runs that checked them):

* the **chunked request first** (:func:`continue_chunked`): ``min(remaining, rem_chunk_tokens)`` tokens
  from where its last window ended, not floored to the page;
* then the **waiting queue** in the policy's order, each through :func:`add_waiting`: admitted whole
  when chunking is off or its *page-ceiled* extend fits the chunk budget, else cut at the budget
  floored to the page; with chunking off a later request is refused once its page-ceiled extend
  reaches ``rem_input_tokens`` (the first is always admitted whole);
* every admission **charges** the chunk and input budgets its page-ceiled extend
  (:func:`charged_tokens`); any result other than ``continue`` (:func:`budget_state`) ends the walk.

What differs between releases is the release's :class:`~kimi_viz.releases.SchedulerRules`: 0.5.23
also checks ``budget_state()`` *before* each waiting candidate, so a spent ``--max-prefill-tokens``
stops the walk even where chunk budget is left (0.5.18 still admits one more request within the chunk
budget). The KV budgets (``rem_total_tokens``, ``cur_rem_tokens``) are taken as ample: memory never
refuses anyone, nothing is evicted or retracted.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Protocol

from .._records import frozen
from ..scheduler_rules import SchedulerRules
from .memory import CLIP_MAX_NEW_TOKENS, KVBudget
from .prefix import PlainTree, page_ceil, page_floor
from .radix_cache import RadixCache
from .req import Req, Window
from .server_config import ServerConfig

CONTINUE = "continue"  # AddReqResult.CONTINUE
OTHER = "other"  # AddReqResult.OTHER: a budget is spent, the walk stops
NO_TOKEN = "no_token"  # AddReqResult.NO_TOKEN: the KV pool cannot take the request (or the budgets are spent)
IN_BATCH_CHECK_THRESHOLD = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
IN_BATCH_DEPRIORITIZE_THRESHOLD = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD
LPM_MAX_WAITING = 128  # above this many waiting requests lpm falls back to fcfs


@frozen
class Budget:
    """The adder's token budgets (``rem_chunk`` None: chunking off)."""

    page_size: int
    rem_input: int  # rem_input_tokens
    rem_chunk: int | None  # rem_chunk_tokens


@frozen
class Admission:
    """What one offer to the adder did: the window (None: refused), whether it was cut, and what is left."""

    window: Window | None
    cut: bool
    result: str  # CONTINUE or OTHER
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
    stopped before them)."""

    windows: tuple[Window, ...]
    chunked: str | None
    budget: Budget
    start: Budget
    offers: tuple[Offer, ...]
    unoffered: tuple[str, ...]
    stop: str | None = None  # why the walk stopped early: NO_TOKEN, OTHER, or "rows" (no request row left)
    rem_total: float | None = None  # rem_total_tokens when the walk ended (None: the KV pool is unbounded)


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


def charge(budget: Budget, extend: int) -> Budget:
    """Return ``budget`` after charging a window of ``extend`` tokens (``_update_prefill_budget``)."""
    cost = charged_tokens(extend, budget.page_size)
    rem_chunk = None if budget.rem_chunk is None else budget.rem_chunk - cost
    return Budget(budget.page_size, budget.rem_input - cost, rem_chunk)


def budget_state(budget: Budget, kv: KVBudget | None = None) -> str:
    """Return NO_TOKEN when the KV budgets are spent, OTHER when the input or the chunk budget is, else CONTINUE."""
    if kv is not None and kv.no_token():
        return NO_TOKEN
    if budget.rem_input <= 0 or (budget.rem_chunk is not None and budget.rem_chunk <= 0):
        return OTHER
    return CONTINUE


def _max_new(req: Req) -> int:
    """The outputs an admitted request reserves: ``min(max_new_tokens, 4096)``."""
    return min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)


def continue_chunked(budget: Budget, req: Req, kv: KVBudget | None = None) -> Admission:
    """Return the chunked request's next window (``add_chunked_req``): the chunk budget's worth (at most the KV
    budget, unless that is spent), unfloored."""
    assert budget.rem_chunk is not None, "a chunked request needs chunking on"
    remaining = len(req.fill_ids()) - req.prefix_len
    room = budget.rem_chunk
    if kv is not None:
        room = min(room, int(kv.rem_total()))
        if room <= 0:
            room = budget.rem_chunk
    extend = min(remaining, room)
    if kv is not None:
        kv.charge(page_ceil(extend, budget.page_size), 0 if remaining > extend else _max_new(req))
    window = Window(req.rid, req.prefix_len, extend)
    return Admission(window, remaining > extend, CONTINUE, charge(budget, extend))


def add_waiting(
    budget: Budget, req: Req, admitted: int, walk: Walk | None = None, rules: SchedulerRules | None = None
) -> Admission:
    """Return what ``add_one_req`` does with a waiting request when ``admitted`` windows are already in the pass
    (with a bounded KV pool, ``walk.kv``: refused with NO_TOKEN when its window, remaining outputs and a page do
    not fit the budget left while its prefix is locked)."""
    kv = None if walk is None else walk.kv
    extend = len(req.fill_ids()) - req.prefix_len
    paged = page_ceil(extend, budget.page_size)
    total = extend + min(max(req.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS) + budget.page_size
    locked_first = rules is not None and rules.locked_token_check_first
    if kv is not None and not locked_first and total >= kv.rem_total():
        return Admission(None, False, NO_TOKEN, budget)
    input_spent = budget.rem_chunk is None and admitted and paged >= budget.rem_input
    if input_spent and not (kv is not None and locked_first):
        return Admission(None, False, OTHER, budget)
    with kv.locked(req.last_node) if kv is not None and req.last_node is not None else nullcontext():
        if kv is not None and total >= kv.rem_total():
            return Admission(None, False, NO_TOKEN, budget)
        if input_spent:
            return Admission(None, False, OTHER, budget)
        if budget.rem_chunk is None or paged <= budget.rem_chunk:
            window, cut = Window(req.rid, req.prefix_len, extend), False
        else:
            trunc = page_floor(budget.rem_chunk, budget.page_size)
            trunc = page_floor(req.prefix_len + trunc, budget.page_size) - req.prefix_len
            if trunc <= 0:
                return Admission(None, False, OTHER, budget)
            window, cut = Window(req.rid, req.prefix_len, trunc), True
        if walk is not None:
            walk.admitted(req)
        if kv is not None:
            kv.charge(page_ceil(window.extend_input_len, budget.page_size), 0 if cut else _max_new(req))
        spent = charge(budget, window.extend_input_len)
    return Admission(window, cut, budget_state(spent, kv), spent)


def _offer(req: Req, chunked: bool, admission: Admission, before: Budget) -> Offer:
    charged = before.rem_input - admission.budget.rem_input
    return Offer(req.rid, len(req.fill_ids()), req.prefix_len, chunked, admission, charged)


def form_pass(
    budget: Budget, chunked: Req | None, waiting: Sequence[Req], rules: SchedulerRules, walk: Walk | None = None
) -> PassForm:
    """Return the pass the adder forms: the chunked request's window first, then the waiting ones in order (each
    matched in the tree when it is reached, with ``walk``; without it, their prefixes are taken as set)."""
    start = budget
    kv = None if walk is None else walk.kv
    windows: list[Window] = []
    offers: list[Offer] = []
    still_cut: str | None = None
    stop: str | None = None
    if chunked is not None:
        first = continue_chunked(budget, chunked, kv)
        assert first.window is not None
        windows.append(first.window)
        offers.append(_offer(chunked, True, first, budget))
        still_cut = chunked.rid if first.cut else None
        budget = first.budget
    for req in waiting:
        if rules.budget_state_before_candidate and budget_state(budget, kv) == OTHER:
            stop = OTHER
            break
        held = int(chunked is not None and rules.counts_held_rows)
        if walk is not None and not walk.has_room(len(windows), held):
            stop = "rows"
            break
        if walk is not None:
            walk.match(req)
        outcome = add_waiting(budget, req, len(windows), walk, rules)
        offers.append(_offer(req, False, outcome, budget))
        if outcome.window is not None:
            windows.append(outcome.window)
            if outcome.cut:
                assert still_cut is None, "at most one request is cut per pass"
                still_cut = req.rid
        elif walk is not None:
            walk.refused(req)
        budget = outcome.budget
        if outcome.result != CONTINUE:
            stop = outcome.result
            break
    offered = {o.rid for o in offers}
    unoffered = tuple(r.rid for r in waiting if r.rid not in offered)
    rem_total = None if kv is None or kv.pools.config.kv_pool is None else kv.rem_total()
    return PassForm(tuple(windows), still_cut, budget, start, tuple(offers), unoffered, stop, rem_total)


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
    "CONTINUE",
    "NO_TOKEN",
    "OTHER",
    "Admission",
    "Budget",
    "Offer",
    "PassForm",
    "Walk",
    "active_policy",
    "add_waiting",
    "budget_state",
    "charge",
    "charged_tokens",
    "continue_chunked",
    "form_pass",
    "mixed_decode_rows",
    "policy_order",
    "start_budget",
]
