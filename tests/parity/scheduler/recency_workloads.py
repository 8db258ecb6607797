"""Workloads where 0.5.22+'s refresh of the waiting prefixes decides which saved state a full mamba pool loses.

From 0.5.22 an fcfs scheduler touches the first 128 waiting requests' prefixes every 32nd ``calc_priority`` call
that finds a waiting queue (``SchedulePolicy._touch_waiting_prefixes`` -> ``touch_waiting_prefix`` ->
``UnifiedRadixCache.touch_prefix``: the tree walk, whose end refreshes the matched state in the MAMBA LRU and
the path's ``last_access_time``). :func:`recency_workload` builds one: two short requests ``a`` and ``b`` leave
their states in the tree, a long prompt is prefilled in chunks (every chunk's stash takes a state slot, so a full
pool evicts its least recently used unlocked state) while the next turns of ``a`` and ``b`` wait behind it; the
32nd call touches their prefixes, so the states the pool evicts next are the long prompt's older ones instead of
``b``'s (which ``w2`` then finds). Which call is the 32nd depends on counting only calls with a waiting queue: a
chunk continued while nothing waits does not count.
"""

from __future__ import annotations

import random

from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Req

from .workload import Workload, chat_turn

#: (chunk size, chunks of the long prompt, mamba pool slots, outputs of a and b, overlap schedule): the refresh
#: decides an eviction in the first eight (the kit without it evicts another state); the rest are the same build
#: where it decides none (too small a pool: a's and b's states are gone before the 32nd call; the overlap schedule).
RECENCY_CASES = (
    (64, 36, 34, 5, False),
    (64, 40, 37, 5, False),
    (64, 40, 43, 5, False),
    (128, 34, 34, 5, False),
    (128, 36, 37, 5, False),
    (128, 40, 40, 5, False),
    (64, 34, 37, 5, False),
    (128, 40, 43, 5, False),
    (64, 34, 32, 5, False),
    (64, 40, 32, 5, False),
    (64, 36, 34, 70, False),
    (64, 36, 34, 5, True),
    (128, 40, 40, 5, True),
)


def recency_workload(chunk: int, chunks: int, mamba: int, outputs: int, overlap: bool) -> Workload:
    """Return the workload of one :data:`RECENCY_CASES` row (the same every run)."""
    rng = random.Random(7)

    def text(n: int) -> list[int]:
        return [rng.randrange(1000, 150_000) for _ in range(n)]

    a = Req("a", tuple(text(50)), arrival=0, max_new_tokens=outputs)
    b = Req("b", tuple(text(50)), arrival=0, max_new_tokens=outputs)
    long = Req("long", tuple(text(chunk * chunks + 10)), arrival=12, max_new_tokens=3)
    w1 = chat_turn(a, a.outputs(), text(20), "w1", max_new_tokens=3, arrival=13)
    w2 = chat_turn(b, b.outputs(), text(20), "w2", max_new_tokens=3, arrival=13)
    load = LoadSettings(
        page_size=1,
        chunked_prefill_size=chunk,
        max_mamba_cache_size=mamba,
        schedule_policy="fcfs",
        disable_overlap_schedule=not overlap,
    )
    return Workload(load, (a, b, long, w1, w2), max_steps=5000)


def recency_workloads() -> list[Workload]:
    """Return every :data:`RECENCY_CASES` workload."""
    return [recency_workload(*case) for case in RECENCY_CASES]
