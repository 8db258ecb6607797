"""A node of Kimi-K3's radix tree (``UnifiedTreeNode``): its run of ids, its children, its KV and maybe a saved state.

:mod:`.radix_cache` builds, matches, locks and evicts them; a request (:class:`~.req.Req`) holds the node its
prefix ends at. A node's ids are ``source[lo:hi]`` of the ids it was inserted from (a request's
:class:`~.req.FillIds` view, read on demand: the tree holds no copy of a long answer's ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class Node:
    """One node: its run of ids, its children (by their first id or page), its KV and maybe a saved state."""

    source: Sequence[int]  # the ids it was inserted from; its own are source[lo:hi], at depths lo .. hi
    lo: int
    hi: int
    parent: Node | None
    child_key: object = None  # its key under its parent: its first id (page 1) or first page
    last_access: float = 0.0
    children: dict[object, Node] = field(default_factory=dict)
    state: bool = False
    lock: int = 0  # FULL lock_ref
    mamba_lock: int = 0

    @property
    def depth(self) -> int:
        """Return the tokens from the root to the end of this node."""
        return self.hi

    @property
    def size(self) -> int:
        """Return the node's own tokens (its KV)."""
        return self.hi - self.lo

    @property
    def key(self) -> tuple[int, ...]:
        """Return the node's own ids."""
        return tuple(self.source[self.lo : self.hi])


__all__ = ["Node"]
