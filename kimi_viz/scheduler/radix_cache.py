"""Kimi-K3's radix cache as SGLang keeps it: nodes, saved states, locks, recency and eviction.

``mem_cache/unified_radix_cache.py`` with a FULL and a MAMBA component (``docs/hybrid-tree-notes.md``
§2, ``docs/memory-notes.md`` §3), on the Python tree core's rules (0.5.23's Rust core gives the same
results). A node (:class:`~.node.Node`) holds a run of token ids (its FULL KV: one pool token per id, in
whole pages; the ids read from the request they were inserted from, not copied) and maybe a saved
linear-attention state (one mamba slot). What this module keeps, as SGLang does:

* **the match** (:meth:`RadixCache.match_prefix`): the key walked page by page; a match ending inside
  a node splits it (the new parent holds no state); the request starts from the deepest node on the
  walk that holds a state (the root when none). The matched node and its ancestors are touched (their
  ``last_access_time``: a counter, each ancestor a hair older) and the matched state becomes the
  most recent in the MAMBA LRU;
* **the insert** (:meth:`RadixCache.insert`): every node walked is touched; a new leaf takes the rest
  of the key; the state goes on the last node (or refreshes the one there);
* **locks** (:meth:`RadixCache.lock`): FULL on the node and every ancestor, MAMBA on the node only; a
  locked node's KV is protected, not evictable;
* **eviction**: FULL (:meth:`RadixCache.evict_tokens`) deletes unlocked leaves, least recently used
  first (a leaf's state goes with it; its parent may then become a leaf); MAMBA
  (:meth:`RadixCache.evict_states`) walks the states from the least recently used, skipping locked
  ones: a leaf's whole node goes, an inner node's state is dropped alone (its KV stays).

Where the releases differ (a split's recency, from 0.5.20) is the release's
:class:`~kimi_viz.scheduler_rules.SchedulerRules`. Disabled (``--disable-radix-cache``): nothing matches,
nothing is kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._records import frozen
from .node import Node
from .prefix import common_prefix, page_floor
from .req import same_ids

ANCESTOR_STEP = 0.00001  # each ancestor of a matched node is this much older (_match_post_processor)


@dataclass
class Evicted:
    """What one eviction freed: KV tokens and saved states."""

    tokens: int = 0
    states: int = 0


Segment = tuple[Sequence[int], int, int]  # ids[lo:hi] of the ids a node was inserted from


@frozen
class Lost:
    """One piece of the tree an eviction took: a node's tokens ``[start, end)`` (``kind`` "kv", its state with
    it) or only the state saved at ``end`` ("state"), and the token path from the root to ``end`` (its nodes' ids,
    read where they were inserted from: no copy), so a request's own prefix can be recognised (:func:`lost_on`)."""

    kind: Literal["kv", "state"]
    start: int
    end: int
    path: tuple[Segment, ...] = field(default=(), compare=False, repr=False)


def lost_on(ids: Sequence[int], lost: Iterable[Lost]) -> list[Lost]:
    """Return the pieces of ``lost`` that lay on the path of ``ids`` (a request's fill ids): the same ids from the
    root to the piece's end (read at once where both are the same request's ids)."""
    return [
        piece
        for piece in lost
        if piece.end <= len(ids)
        and all(same_ids(source, ids) or _same_span(source, ids, lo, hi) for source, lo, hi in piece.path)
    ]


def _same_span(a: Sequence[int], b: Sequence[int], lo: int, hi: int, chunk: int = 256) -> bool:
    """Return True when ``a[lo:hi] == b[lo:hi]``, read a chunk at a time (two requests' ids part early: a long
    answer is never copied whole to learn that)."""
    return all(tuple(a[k : min(k + chunk, hi)]) == tuple(b[k : min(k + chunk, hi)]) for k in range(lo, hi, chunk))


@dataclass(eq=False)
class MatchResult:
    """A match: the FULL walk's length, the node the request starts from (the deepest with a state), its depth,
    and the depths of every saved state on the walk."""

    full: int
    node: Node
    depth: int
    states: tuple[int, ...]
    shared: int  # the ids shared with the tree before the last node's match was floored to the page


class RadixCache:
    """The radix tree of one scheduler (hybrid: with saved states), with its locks, recency and eviction."""

    def __init__(self, page_size: int, disabled: bool = False, split_keeps_recency: bool = False):
        self.page_size = page_size
        self.disabled = disabled
        self.split_keeps_recency = split_keeps_recency  # 0.5.20+: a split leaves the lower state's LRU place
        self._clock = 0.0
        self.root = Node((), 0, 0, None)
        self.root.lock = 1  # the root is never evicted
        self.total = 0  # KV tokens the tree holds
        self.protected = 0  # of them, under a FULL lock
        self.mamba_lru: dict[Node, None] = {}  # nodes holding a state, least recently used first
        self.nodes: set[Node] = set()
        self.lost: list[Lost] = []  # what evictions took since the scheduler last drained it (every step)
        self.lost_since_pass: list[Lost] = []  # the same since the last prefill pass was formed
        self.kv_lost = False  # whether an eviction ever took a node (KV), not only a saved state

    # --- sizes ---------------------------------------------------------------------------------------
    @property
    def evictable(self) -> int:
        """Return ``full_evictable_size()``: KV tokens of unlocked nodes."""
        return self.total - self.protected

    @property
    def states(self) -> int:
        """Return the saved states the tree holds (each a mamba slot)."""
        return len(self.mamba_lru)

    # --- helpers -------------------------------------------------------------------------------------
    def _tick(self) -> float:
        now = self._clock
        self._clock += 1.0
        return now

    def _child_key_at(self, ids: Sequence[int], pos: int) -> object:
        """The child key of ``ids[pos:]``: its first id (page 1) or first page."""
        return ids[pos] if self.page_size == 1 else tuple(ids[pos : pos + self.page_size])

    @staticmethod
    def _shared_with(child: Node, ids: Sequence[int], pos: int, length: int) -> int:
        """How many of ``child``'s ids ``ids[pos:length]`` share: counted at once when both read the same request's
        ids at the same offset, else compared."""
        size = min(child.size, length - pos)
        if child.lo == pos and same_ids(child.source, ids):
            return size
        return common_prefix(tuple(child.source[child.lo : child.lo + size]), tuple(ids[pos : pos + size]))

    def _new_node(self, source: Sequence[int], lo: int, hi: int, parent: Node) -> Node:
        node = Node(source, lo, hi, parent, self._child_key_at(source, lo))
        node.last_access = self._tick()
        self._tick()  # creation_time
        self.nodes.add(node)
        return node

    def _split(self, child: Node, at: int) -> Node:
        """Split ``child`` after ``at`` ids: the new parent takes them, holds no state and no MAMBA lock."""
        parent = child.parent
        assert parent is not None
        upper = self._new_node(child.source, child.lo, child.lo + at, parent)
        upper.lock = child.lock
        parent.children[upper.child_key] = upper
        child.lo += at
        child.child_key = self._child_key_at(child.source, child.lo)
        child.parent = upper
        upper.children[child.child_key] = child
        if child.state and not self.split_keeps_recency:  # 0.5.18-0.5.19: the lower state becomes the most recent
            self.mamba_lru.pop(child)
            self.mamba_lru[child] = None
        child.last_access = self._tick()
        return upper

    def _set_state(self, node: Node) -> None:
        node.state = True
        self.mamba_lru.pop(node, None)
        self.mamba_lru[node] = None

    def _drop_state(self, node: Node) -> None:
        node.state = False
        self.mamba_lru.pop(node, None)

    def _log_loss(self, node: Node, kind: Literal["kv", "state"]) -> None:
        path: list[Segment] = []
        walk: Node | None = node
        while walk is not None and walk is not self.root:
            path.append((walk.source, walk.lo, walk.hi))
            walk = walk.parent
        piece = Lost(kind, node.lo, node.hi, tuple(reversed(path)))
        self.lost.append(piece)
        self.lost_since_pass.append(piece)

    # --- match and insert ----------------------------------------------------------------------------
    def match_prefix(self, ids: Sequence[int]) -> MatchResult:
        """Return the match of ``ids`` (a request's key: its fill ids capped at ``len - 1``), splitting and touching
        as SGLang does."""
        length = page_floor(len(ids), self.page_size)
        if self.disabled or not length:
            return MatchResult(0, self.root, 0, (), 0)
        node, best, full, raw = self.root, self.root, 0, 0
        states: list[int] = []
        while full < length:
            child = node.children.get(self._child_key_at(ids, full))
            if child is None:
                break
            common = self._shared_with(child, ids, full, length)
            shared = page_floor(common, self.page_size)
            raw = full + common
            full += shared
            if shared < child.size:
                if shared:
                    node = self._split(child, shared)  # holds no state: never the best
                break
            node = child
            if node.state:
                best = node
                states.append(node.depth)
        if best.state:
            self.mamba_lru.pop(best)
            self.mamba_lru[best] = None
        now = self._tick()
        walk: Node | None = best
        while walk is not None:
            walk.last_access = now
            now -= ANCESTOR_STEP
            walk = walk.parent
        return MatchResult(full, best, best.depth, tuple(states), max(raw, full))

    def insert(self, ids: Sequence[int], *, state: bool) -> tuple[Node, int, bool]:
        """Insert ``ids`` floored to the page, with a saved state at its end when ``state``; return the node it ends
        at, the KV tokens the tree took in (the rest were already there) and whether the state is new."""
        length = page_floor(len(ids), self.page_size)
        node, pos = self.root, 0
        while pos < length:
            child = node.children.get(self._child_key_at(ids, pos))
            if child is None:
                break
            child.last_access = self._tick()
            shared = page_floor(self._shared_with(child, ids, pos, length), self.page_size)
            if shared < child.size:
                child = self._split(child, shared)
            node = child
            pos += shared
        added = 0
        if pos < length:
            leaf = self._new_node(ids, pos, length, node)
            node.children[leaf.child_key] = leaf
            self.total += leaf.size
            added = leaf.size
            node = leaf
            if state:
                self._set_state(node)
            return node, added, state
        if not state or node is self.root:
            return node, 0, False
        new_state = not node.state
        self._set_state(node)
        node.last_access = self._tick()
        return node, 0, new_state

    # --- locks ---------------------------------------------------------------------------------------
    def lock(self, node: Node) -> bool:
        """Lock ``node`` (``inc_lock_ref``): FULL on its path, MAMBA on it when it holds a state; return the latter."""
        walk: Node | None = node
        while walk is not None and walk is not self.root:
            if walk.lock == 0:
                self.protected += walk.size
            walk.lock += 1
            walk = walk.parent
        if node.state:
            node.mamba_lock += 1
            return True
        return False

    def unlock(self, node: Node, mamba: bool) -> None:
        """Undo :meth:`lock` (``dec_lock_ref``)."""
        walk: Node | None = node
        while walk is not None and walk is not self.root:
            walk.lock -= 1
            if walk.lock == 0:
                self.protected -= walk.size
            walk = walk.parent
        if mamba:
            node.mamba_lock -= 1

    # --- eviction ------------------------------------------------------------------------------------
    def _evictable_leaf(self, node: Node) -> bool:
        return node.parent is not None and not node.children and node.lock == 0 and node.mamba_lock == 0

    def _delete(self, node: Node, freed: Evicted) -> None:
        parent = node.parent
        assert parent is not None
        self._log_loss(node, "kv")
        self.kv_lost = True
        del parent.children[node.child_key]
        self.nodes.discard(node)
        self.total -= node.size
        freed.tokens += node.size
        if node.state:
            self._drop_state(node)
            freed.states += 1

    def evict_tokens(self, tokens: int, freed: Evicted | None = None) -> Evicted:
        """Evict unlocked leaves, least recently used first, until ``tokens`` KV tokens are freed (or none is left)."""
        freed = freed if freed is not None else Evicted()
        if self.disabled or freed.tokens >= tokens:
            return freed
        heap = [(n.last_access, id(n), n) for n in self.nodes if self._evictable_leaf(n)]
        heapq.heapify(heap)
        while freed.tokens < tokens and heap:
            _, _, node = heapq.heappop(heap)
            if node not in self.nodes or not self._evictable_leaf(node):
                continue
            parent = node.parent
            self._delete(node, freed)
            if parent is not None and self._evictable_leaf(parent):
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return freed

    def evict_states(self, states: int, freed: Evicted | None = None) -> Evicted:
        """Evict saved states from the least recently used, skipping locked ones, until ``states`` are freed: a leaf
        goes whole, an inner node loses its state only."""
        freed = freed if freed is not None else Evicted()
        if self.disabled:
            return freed
        order = [n for n in self.mamba_lru if n.mamba_lock == 0]
        for node in order:
            if freed.states >= states:
                break
            if node not in self.mamba_lru or node.mamba_lock:
                continue
            if self._evictable_leaf(node):
                self._delete(node, freed)
            else:
                self._log_loss(node, "state")
                self._drop_state(node)
                freed.states += 1
        return freed

    def evict(self, tokens: int = 0, states: int = 0) -> Evicted:
        """``UnifiedRadixCache.evict``: FULL first (its leaves' states count), then MAMBA for what is still wanted."""
        freed = self.evict_tokens(tokens) if tokens > 0 else Evicted()
        if freed.states < states:
            self.evict_states(states, freed)
        return freed


__all__ = ["Evicted", "Lost", "MatchResult", "RadixCache", "lost_on"]
