"""Planted memory bugs: the kit's model of the pools made wrong on purpose, which the lane's comparisons must notice.

Each entry of :data:`MEMORY_PLANTS` is ``(class, attribute, replacement)`` for ``monkeypatch.setattr``.
"""

from __future__ import annotations

from kimi_viz.scheduler import batch, radix_cache


def _mru_first(self, tokens, freed=None):
    """Evict the most recently used leaves first (the order reversed)."""
    freed = freed if freed is not None else radix_cache.Evicted()
    while freed.tokens < tokens:
        leaves = [n for n in self.nodes if self._evictable_leaf(n)]
        if not leaves:
            break
        self._delete(max(leaves, key=lambda n: n.last_access), freed)
    return freed


def _no_reserve(self, running, mixed):
    return _KV_BUDGET(self, [], mixed)  # the running requests' reserved outputs left out of the budget


def _token_per_row(self, rows):
    return len(rows)  # the page-1 rule at every page: a decode step needs one token per row


_KV_BUDGET = batch.ScheduleState.kv_budget
MEMORY_PLANTS = {
    "eviction order reversed": (radix_cache.RadixCache, "evict_tokens", _mru_first),
    "the running requests' reserved outputs ignored": (batch.ScheduleState, "kv_budget", _no_reserve),
    "a decode step needs a token per row, not a page per row on a page boundary": (
        batch.ScheduleState,
        "decode_need",
        _token_per_row,
    ),
}
#: The plants that only a page above 1 can show: the conversation lane runs its memory workloads at page 1, the
#: scheduler lane's memory suite at pages 1, 16 and 64 catches them.
PAGED_PLANTS = ("a decode step needs a token per row, not a page per row on a page boundary",)
