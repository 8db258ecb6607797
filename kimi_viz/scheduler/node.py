"""A node of Kimi-K3's radix tree (``UnifiedTreeNode``): its run of ids, its children, its KV and maybe a saved state.

:mod:`.radix_cache` builds, matches, locks and evicts them; a request (:class:`~.req.Req`) holds the node its
prefix ends at.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Node:
    """One node: its run of ids, its children (by their first id or page), its KV and maybe a saved state."""

    key: tuple[int, ...]
    parent: Node | None
    depth: int  # tokens from the root to the end of this node
    last_access: float = 0.0
    children: dict[object, Node] = field(default_factory=dict)
    state: bool = False
    lock: int = 0  # FULL lock_ref
    mamba_lock: int = 0


__all__ = ["Node"]
