"""The requests not yet in the waiting queue (``process_input_requests``), by the step at which they join it.

A request joins at step ``arrival``, or — with ``after`` — at the first step not before ``arrival`` that follows
the step whose processed result finished request ``after`` (a chat's next turn). :class:`Arrivals` keeps them
in a heap by that step (workload order for ties), the ones still waiting for an unfinished request aside, so
that the scheduler finds the requests due, and the next step at which any is due, without walking all of them.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from .req import Req


class Arrivals:
    """The requests the scheduler has not received yet, each due at its step."""

    def __init__(self, reqs: list[Req]) -> None:
        self._heap: list[tuple[int, int, Req]] = []
        self._waiting_for: defaultdict[str, list[tuple[int, Req]]] = defaultdict(list)
        for k, req in enumerate(reqs):
            if req.after is None:
                self._heap.append((req.arrival, k, req))
            else:
                self._waiting_for[req.after].append((k, req))
        heapq.heapify(self._heap)
        self.left = len(reqs)

    def __bool__(self) -> bool:
        return self.left > 0

    def finished(self, rid: str, step: int) -> None:
        """Request ``rid`` finished at ``step``: the requests following it are due from the next step."""
        for k, req in self._waiting_for.pop(rid, ()):
            heapq.heappush(self._heap, (max(req.arrival, step + 1), k, req))

    def due(self, step: int) -> list[Req]:
        """Return the requests due at ``step`` (or before), in workload order, and take them out."""
        out = []
        while self._heap and self._heap[0][0] <= step:
            out.append(heapq.heappop(self._heap))
        self.left -= len(out)
        return [req for _, _, req in sorted(out, key=lambda entry: entry[1])]

    def next_due(self) -> float:
        """Return the step at which the next request is due (``inf``: none is, until a request finishes)."""
        return self._heap[0][0] if self._heap else float("inf")


__all__ = ["Arrivals"]
