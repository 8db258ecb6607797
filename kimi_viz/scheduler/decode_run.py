"""Runs of decode steps in which nothing can change, jumped over in one go: cost grows with events, not decode steps.

Between two events — an arrival, a finish (or 0.5.22+'s finish in flight), a prefill attempt, an eviction, a
retraction — a scheduler that only decodes repeats the same step: every running row gets one more KV token (a
new page when its length is on a page boundary) and one more output, ``new_token_ratio`` decays, a decode save
point (``extra_buffer``) only moves where the row's next insert stops. :func:`quiet_decode_steps` computes, from
the state, how many steps from now are such steps; :func:`advance_rows` applies that many at once, exactly as
stepping one by one would (``tests/test_decode_jump.py`` compares both on every load scenario and on random
workloads at pages 1, 16 and 64). A save point needs no stop: it is folded in, the last one a row passed being
where its next insert stops.

The pools after each jumped step are not stored one by one: a :class:`DecodeRun` holds what they were at its
start, and :meth:`DecodeRun.memory_steps` writes each step's :class:`~.batch.MemoryStep` on demand (the lane
compares them step by step; an answer reads only the steps that evicted).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .._records import frozen
from .batch import MemoryStep
from .prefix import page_ceil
from .req import Req


@frozen
class DecodeRun:
    """Decode steps ``first .. first + steps - 1`` jumped over: the rows' committed lengths before the first (in batch
    order), the page, and the pools and ``new_token_ratio`` before it (``kv_available`` ``inf``: unbounded)."""

    first: int
    steps: int
    lengths: tuple[int, ...]
    page_size: int
    kv_available: float
    evictable: int
    mamba_available: float
    ratio: float  # new_token_ratio before the first step
    ratio_low: float
    ratio_decay: float

    def memory_steps(self) -> Iterator[MemoryStep]:
        """Yield the pools after each of the run's steps, as stepping one by one records them."""
        available, ratio = self.kv_available, self.ratio
        page = self.page_size
        for i in range(self.steps):
            available -= page * sum(1 for length in self.lengths if (length + i) % page == 0)
            ratio = max(ratio - self.ratio_decay, self.ratio_low)  # NewTokenRatio.decay_step
            yield MemoryStep(self.first + i, available, self.evictable, self.mamba_available, 0, 0, ratio)


def pages_opened(lengths: Sequence[int], steps: int, page: int) -> int:
    """Return the KV tokens ``steps`` decode steps take for rows of these committed lengths: a page for each step
    that starts a row on a page boundary."""
    up = page - 1  # page_ceil, written out: this runs in every jump's search
    return page * sum((length + steps + up) // page - (length + up) // page for length in lengths)


def quiet_decode_steps(rows: Sequence[Req], page: int, kv_available: float, evictable: int, limit: int) -> int:
    """Return how many of the next ``limit`` decode steps of ``rows`` (none finishing, nothing else happening) are
    quiet: no row's result finishes it, neither ``check_decode_mem`` nor the decode allocation evicts (the pool keeps
    the page per row SGLang's allocation over-estimates), and the check passes. With nothing evictable in the tree
    the over-estimate's eviction finds nothing to take: a step is quiet while its own pages fit."""
    steps = min([limit, *(r.max_new_tokens - r.output_len - 1 for r in rows)])
    if steps <= 0 or kv_available == float("inf"):
        return max(steps, 0)
    keep = len(rows) * page  # evict_for(bs * P) at the allocation; check_decode_mem's need is at most this
    if page == 1:  # a token per row each step: the over-estimate is the need, evictable or not
        return max(min(steps, int(kv_available // keep)), 0)
    lengths = [r.kv_committed_len for r in rows]

    def fits(i: int) -> bool:  # step i (from 0) evicts nothing and its check passes
        if evictable == 0:
            return kv_available - pages_opened(lengths, i + 1, page) >= 0
        return kv_available - pages_opened(lengths, i, page) >= keep

    if not fits(0):
        return 0
    lo, hi = 0, steps  # fits(lo); the answer is the largest quiet count in [1, steps]
    if fits(steps - 1):
        return steps
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo + 1


def advance_rows(rows: Sequence[Req], steps: int, page: int, grid: int | None, processed_last: int) -> dict[int, int]:
    """Apply ``steps`` quiet decode steps to ``rows`` and return the save points the last step's batch carries
    (``id(row) -> length``). Each row takes its pages and ``steps`` outputs; with a decode ``grid`` (``extra_buffer``)
    its next insert stops at the last save point a processed batch reached: the batches of all but the last
    ``processed_last`` steps (1 with the overlap schedule, whose last batch is still in flight; 0 without)."""
    tracked: dict[int, int] = {}
    for row in rows:
        start = row.kv_committed_len
        taken = page_ceil(start + steps, page) - page_ceil(start, page)
        row.owned += taken
        row.kv_committed_len = start + steps
        row.emit(steps)
        if grid is None:
            continue
        reached = (start + steps - processed_last) // grid * grid
        if reached >= start + 1 - processed_last:  # a processed batch's length (the one in flight at the start too)
            row.mamba_last_track_seqlen = reached
        if (start + steps) % grid == 0:
            tracked[id(row)] = start + steps
    return tracked


__all__ = ["DecodeRun", "advance_rows", "pages_opened", "quiet_decode_steps"]
