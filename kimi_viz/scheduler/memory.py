"""A Kimi-K3 server's memory as its scheduler sees it: the pools' sizes and ``new_token_ratio``.

``docs/memory-notes.md`` §1 (read from each release's ``mem_cache/kv_cache_configurator.py`` and
``managers/scheduler_components/new_token_ratio_tracker.py``):

* **the KV pool** (``--max-total-tokens``): the tokens of MLA KV the server holds, printed at start-up
  as ``max_total_num_tokens=`` (``managers/scheduler.py``, TP rank 0); unset, the kit keeps it unbounded
  (a real server sizes it from the GPU's free memory);
* **request rows** (``max_running_requests``): ``--max-running-requests`` (0.5.23: at least 1), else the
  estimate ``clamp(pool / context_len · 512, 2048, 4096)``; at most half the pool; for Kimi-K3's mamba
  tree at most the mamba pool over the slots a running request takes (3, plus 2 ping-pong slots with
  ``extra_buffer`` and the overlap schedule, 1 without it; 1 with the radix cache off);
* **the mamba state pool** (``--max-mamba-cache-size``): saved linear-attention states and running
  requests' state slots; unset, the kit keeps it unbounded (a real server gives it ``0.9 / 1.9`` of the
  memory left after the weights: read it from the start-up line ``max_mamba_cache_size:``);
* **new_token_ratio** (``--schedule-conservativeness`` ``c``): starts at ``min(0.7·c, 1)``, decays by
  ``(init − min) / 600`` per decode step to ``min = init · 0.14``, is re-estimated after a retraction
  (``min(1, (Σ outputs + 20·n) / (Σ max_new_tokens + 1))`` over the requests kept) and reset when the
  server is idle.

The context length only enters the request-row estimate, which never binds a workload of at most 1000
requests (it is 2048 up to a pool of four context lengths); a workload's outputs are held to it
(:class:`~kimi_viz.request.workload.Workload`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import sub

from .._records import frozen
from .node import Node
from .radix_cache import Evicted, RadixCache

UNBOUNDED_KV = 1 << 40  # the KV pool the row estimate reads when none is given (its estimate is then 4096)
CONTEXT_LEN = 262_144  # Kimi-K3's context length as the row estimate reads it (2048 rows below 4x this)
INIT_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
MAMBA_SLOTS_PER_REQ = 3  # MAMBA_STATE_PER_REQ_PREFIX_CACHE / MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO


def counted(n: int, noun: str) -> str:
    """Return ``n`` with ``noun``, plural unless ``n`` is 1: ``1 request row``, ``0 tokens``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@frozen
class MemoryConfig:
    """The pools a server runs with (None: unbounded) and its ``new_token_ratio`` schedule."""

    kv_pool: int | None  # max_total_num_tokens
    request_rows: int | None  # max_running_requests (and the micro-batch size)
    mamba_pool: int | None  # max_mamba_cache_size
    ratio_init: float
    ratio_min: float
    ratio_decay: float

    @property
    def bounded(self) -> bool:
        """Return True when a pool is finite: the scheduler then budgets, evicts and retracts."""
        return self.kv_pool is not None or self.request_rows is not None or self.mamba_pool is not None

    def describe(self) -> str:
        """Return one line: each pool's size, or that it is unbounded."""
        if not self.bounded:
            return "memory unbounded (no --max-total-tokens, --max-running-requests or --max-mamba-cache-size)"
        kv = "unbounded" if self.kv_pool is None else counted(self.kv_pool, "token")
        mamba = "unbounded" if self.mamba_pool is None else counted(self.mamba_pool, "slot")
        rows = "unbounded request rows" if self.request_rows is None else counted(self.request_rows, "request row")
        return f"KV pool {kv}, {rows}, mamba state pool {mamba}"

    def to_json(self) -> dict[str, object]:
        """Return ``{"kv_pool", "request_rows", "mamba_pool", "new_token_ratio"}`` (None: unbounded)."""
        return {
            "kv_pool": self.kv_pool,
            "request_rows": self.request_rows,
            "mamba_pool": self.mamba_pool,
            "new_token_ratio": {"init": self.ratio_init, "min": self.ratio_min, "decay": self.ratio_decay},
        }


def mamba_slots_per_request(strategy: str | None, overlap: bool) -> int:
    """Return the state slots one running request counts for (``_calculate_mamba_ratio``)."""
    if strategy is None:
        return 1
    return MAMBA_SLOTS_PER_REQ + ((2 if overlap else 1) if strategy == "extra_buffer" else 0)


def resolve_memory(
    kv_pool: int | None,
    max_running_requests: int | None,
    mamba_pool: int | None,
    conservativeness: float,
    *,
    strategy: str | None,
    overlap: bool,
    at_least_one_row: bool,
    page_size: int = 1,
) -> MemoryConfig:
    """Return the :class:`MemoryConfig` a release derives (``resolve_max_num_reqs``, ``NewTokenRatioTracker``): the
    KV pool floored to whole pages (``calculate_pool_sizes_from_max_tokens``), the rows it allows, the ratio."""
    if kv_pool is not None:
        kv_pool = kv_pool // page_size * page_size
    init = min(INIT_RATIO * conservativeness, 1.0)
    low = min(init * MIN_RATIO_FACTOR, 1.0)
    decay = (init - low) / DECAY_STEPS
    rows: int | None = None
    if kv_pool is not None or max_running_requests is not None or mamba_pool is not None:
        capacity = kv_pool if kv_pool is not None else UNBOUNDED_KV
        estimated = max(min(int(capacity / CONTEXT_LEN * 512), 4096), 2048)
        if max_running_requests is not None:
            rows = max(1, max_running_requests) if at_least_one_row else max_running_requests
        else:
            rows = estimated
        if kv_pool is not None:  # at most half the pool (the unbounded stand-in caps nothing)
            rows = min(rows, kv_pool // 2)
        if mamba_pool is not None:
            rows = min(rows, mamba_pool // mamba_slots_per_request(strategy, overlap))
    return MemoryConfig(kv_pool, rows, mamba_pool, init, low, decay)


@dataclass
class NewTokenRatio:
    """``NewTokenRatioTracker``: the share of its remaining outputs a running request is assumed to still need."""

    init: float
    low: float
    decay: float
    current: float

    @classmethod
    def of(cls, config: MemoryConfig) -> NewTokenRatio:
        """Return the tracker at its initial value."""
        return cls(config.ratio_init, config.ratio_min, config.ratio_decay, config.ratio_init)

    def decay_step(self) -> None:
        """One decode step without retraction: decay towards the minimum."""
        self.current = max(self.current - self.decay, self.low)

    def decay_steps(self, steps: int) -> None:
        """``steps`` decode steps without retraction, each one's decay as :meth:`decay_step` computes it: the same
        floats, subtracted one by one (in C) until the minimum holds it — once a step's result falls below the
        minimum, every later one is the minimum."""
        current, decay, low = self.current, self.decay, self.low
        if current <= low or steps <= 0:
            self.current = max(current, low) if steps > 0 else current
            return
        if decay <= 0:  # the minimum is the initial value: nothing decays
            return
        reach = min(steps, int((current - low) / decay) + 2)  # past the minimum by a whole decay from here
        last = deque(accumulate(repeat(decay, reach), sub, initial=current), maxlen=1)[0]
        self.current = max(last, low)

    def reset(self) -> None:
        """The server is idle: back to the initial value."""
        self.current = self.init

    @staticmethod
    def after_retract(outputs: list[int], max_new: list[int]) -> float:
        """Return the ratio estimated from the requests kept (their outputs so far and their budgets)."""
        estimate = (sum(outputs) + RETRACT_DECODE_STEPS * len(outputs)) / (sum(max_new) + 1)
        return min(1.0, estimate)


@dataclass
class Pools:
    """What the pools hold while a workload runs: the KV pool's tokens outside the tree, the request rows taken,
    the mamba slots the running requests hold (the tree's states are counted by the tree), and every eviction
    (``evicted``: per step, what the tree gave back)."""

    config: MemoryConfig
    tree: RadixCache
    owned: int = 0  # KV tokens requests hold outside the tree
    rows: int = 0  # request rows taken
    slots: int = 0  # mamba slots requests hold (working and ping-pong)
    evicted: Evicted = field(default_factory=Evicted)  # in the current step
    since_pass: Evicted = field(default_factory=Evicted)  # since the last prefill pass was formed

    def kv_available(self) -> float:
        """Return the free KV tokens (``available_size()``; unbounded: infinite)."""
        if self.config.kv_pool is None:
            return float("inf")
        return self.config.kv_pool - self.tree.total - self.owned

    def mamba_available(self) -> float:
        """Return the free mamba slots (unbounded: infinite)."""
        if self.config.mamba_pool is None:
            return float("inf")
        return self.config.mamba_pool - self.tree.states - self.slots

    def rows_available(self) -> float:
        """Return the free request rows (unbounded: infinite)."""
        if self.config.request_rows is None:
            return float("inf")
        return self.config.request_rows - self.rows

    def _tally(self, freed: Evicted) -> None:
        for tally in (self.evicted, self.since_pass):
            tally.tokens += freed.tokens
            tally.states += freed.states

    def evict_for(self, tokens: int) -> None:
        """``evict_from_tree_cache``: evict the shortfall when fewer than ``tokens`` KV tokens are free."""
        short = tokens - self.kv_available()
        if short > 0:
            self._tally(self.tree.evict(tokens=int(short)))

    def evict_states(self, states: int) -> None:
        """``evict(mamba_num=states)``: free that many saved states (FULL first when the tree asks both)."""
        if states > 0:
            self._tally(self.tree.evict(states=states))

    def take_slot(self, lock: Node | None = None) -> None:
        """``_alloc_mamba_slot``: one mamba slot, evicting one saved state when none is free (``lock`` held)."""
        if self.mamba_available() < 1:
            mamba = self.tree.lock(lock) if lock is not None else False
            self.evict_states(1)
            if lock is not None:
                self.tree.unlock(lock, mamba)


@dataclass
class KVBudget:
    """The adder's KV budgets (``rem_total_tokens``, ``cur_rem_tokens``), read live from the pools: free plus
    evictable tokens, less what the pass reserves (the running requests' remaining outputs times the ratio, and
    every admitted window page-ceiled, with its outputs and a page)."""

    pools: Pools
    page_size: int
    total_offset: float
    cur_offset: int

    def rem_total(self) -> float:
        """Return ``rem_total_tokens``."""
        return self.pools.kv_available() + self.pools.tree.evictable - self.total_offset

    def cur_rem(self) -> float:
        """Return ``cur_rem_tokens``."""
        return self.pools.kv_available() + self.pools.tree.evictable - self.cur_offset

    def no_token(self) -> bool:
        """Return True when either budget is spent (``budget_state()`` is ``NO_TOKEN``)."""
        return self.rem_total() <= 0 or self.cur_rem() <= 0

    def charge(self, paged_extend: int, max_new: int) -> None:
        """``_update_prefill_budget``'s KV part: an admitted window (page-ceiled), its outputs and a page."""
        self.total_offset += paged_extend + max_new + self.page_size
        self.cur_offset += paged_extend + self.page_size

    @contextmanager
    def locked(self, node: Node) -> Iterator[None]:
        """``_lock_node``: the candidate's prefix locked (its KV leaves the evictable count) while tested."""
        mamba = self.pools.tree.lock(node)
        try:
            yield
        finally:
            self.pools.tree.unlock(node, mamba)


__all__ = [
    "CLIP_MAX_NEW_TOKENS",
    "CONTEXT_LEN",
    "KVBudget",
    "MemoryConfig",
    "NewTokenRatio",
    "Pools",
    "counted",
    "mamba_slots_per_request",
    "resolve_memory",
]
