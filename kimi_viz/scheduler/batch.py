"""SGLang's ``managers/schedule_batch.py`` and ``mem_cache/common.py`` for Kimi-K3: what a batch takes and gives back.

:class:`ScheduleState` holds what the event loop (:mod:`.event_loop`) runs on — the hybrid tree
(:class:`~.radix_cache.RadixCache`), a plain tree beside it for the what-if, the pools
(:class:`~.memory.Pools`) and ``new_token_ratio`` — and does, as each release does, what a batch does to
them (``docs/hybrid-tree-notes.md`` §3, ``docs/memory-notes.md`` §3–§4):

* **the match** of a waiting request (``init_next_round_input``): its prefix is the deepest saved state on
  its FULL match; it copies that state into a slot of its own (evicting one state when no slot is free);
* **prepare_for_extend**: the new rows' request rows and state slots (``alloc_req_slots``: evicting
  states when short: 0.5.18 three per request less the free ones, 0.5.22+ exactly those missing), their
  windows' KV in whole pages (the shortfall of the tokens plus a page per request evicted from the tree's
  least recently used leaves first), the extra-buffer save point of each window;
* **prepare_for_decode**: one more KV token per row, a new page for a row on a page boundary (the
  shortfall of a page per row evicted), the decode save points; ``check_decode_mem`` (a page for every row
  on a page boundary must fit after evicting) and ``retract_decode`` (the rows with the fewest outputs,
  then the longest prompts, go back to the waiting queue, their KV freed and not inserted; the last row
  is kept, or aborted when even it does not fit);
* **the inserts** (``cache_unfinished_req`` / ``cache_finished_req``): the key cut to the saved state
  (``extra_buffer``), the KV the tree lacks moved into it, the request's other KV past its protected
  prefix freed at a finish; a state slot donated to the new state (a fresh one replacing it while the
  request runs on); the request's lock moved to the inserted node.

With every pool unbounded (:class:`~.memory.MemoryConfig`) nothing is short, nothing is evicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .._records import frozen
from ..releases import Release
from .memory import CLIP_MAX_NEW_TOKENS, MAMBA_SLOTS_PER_REQ, KVBudget, NewTokenRatio, Pools
from .node import Node
from .prefix import PlainTree, PrefixMatch, page_ceil, page_floor, prefix_match
from .radix_cache import Lost, RadixCache
from .req import Req, Window
from .server_config import ServerConfig

RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS: tokens per kept row evicted after a retraction


@frozen
class Save:
    """A linear-attention state the tree took in: the step that inserted it, whose, and at which depth."""

    step: int
    rid: str
    depth: int


@frozen
class Retraction:
    """A running request ``retract_decode`` sent back to the waiting queue (``aborted``: out of memory even alone,
    finished with an error) at a decode step: its KV freed, not inserted."""

    step: int
    rid: str
    outputs: int  # the tokens it had generated (kept: it prefills them again)
    aborted: bool = False


class MemoryStep(NamedTuple):
    """The pools after one step (bounded memory only): free KV tokens and the tree's evictable ones, free state
    slots (``inf``: unbounded), what the tree evicted in the step, and ``new_token_ratio``. A named tuple: one
    is kept per step."""

    step: int
    kv_available: float
    evictable: int
    mamba_available: float
    evicted_tokens: int
    evicted_states: int
    ratio: float
    lost: tuple[Lost, ...] = ()  # the pieces of the tree those evictions took


@dataclass(eq=False)
class Batch:
    """A forward batch (``ScheduleBatch``): a prefill (maybe mixed) or a decode, its rows, the request it leaves
    chunked, its mixed decode rows and the decode save points due."""

    extend: bool
    reqs: list[Req]
    chunked: Req | None = None
    decoding: list[Req] = field(default_factory=list)  # mixed decode rows
    tracked: dict[int, int] = field(default_factory=dict)  # id(row) -> the length a decode save is due at


class ScheduleState:
    """The tree, the pools and the ratio a scheduler runs on, and what its batches do to them."""

    def __init__(self, server: ServerConfig, release: Release) -> None:
        self.server = server
        self.rules = release.scheduler
        self.release = release.version
        self.tree = RadixCache(server.page_size, server.disable_radix_cache, self.rules.split_keeps_recency)
        self.plain = PlainTree(server.page_size, server.disable_radix_cache)  # every insert whole: what-if only
        self.pools = Pools(server.memory, self.tree)
        self.ratio = NewTokenRatio.of(server.memory)
        self.saves: list[Save] = []
        self.retractions: list[Retraction] = []
        self.memory: list[MemoryStep] = []
        self.step_no = 0
        self.group_free = True  # alloc_group_begin took a slot for every waiting request's match

    @property
    def extra_buffer(self) -> bool:
        return self.server.strategy == "extra_buffer"

    def _tracking_slots(self) -> int:
        """The track slots a running request holds (``extra_buffer``: 2 with the overlap schedule, 1 without)."""
        return (2 if self.server.overlap else 1) if self.extra_buffer else 0

    # --- the adder's budgets and the match ----------------------------------------------------------------------
    def kv_budget(self, running: list[Req], mixed: int) -> KVBudget | None:
        """Return the adder's KV budgets for a pass (None: the KV pool is unbounded): the running requests'
        remaining outputs (at most 4096 each) times ``new_token_ratio``, and the mixed decode rows."""
        if self.server.memory.kv_pool is None:
            return None
        reserve = sum(min(r.max_new_tokens - r.output_len, CLIP_MAX_NEW_TOKENS) * self.ratio.current for r in running)
        return KVBudget(self.pools, self.server.page_size, mixed + reserve, mixed)

    def match_waiting(self, req: Req, group_free: bool) -> PrefixMatch:
        """``init_next_round_input(tree)``: the request starts from the deepest saved state on its match and copies
        it into a working slot (evicting one state, its prefix locked, when no slot is free and the walk's group
        took none); a branching point is kept. Return the match, with what a plain tree would have matched."""
        fill = req.fill_view(req.fill_len)  # read as the walks go: no copy of a long request's ids
        capped = req.fill_view(max(req.fill_len - 1, 0))
        found = self.tree.match_prefix(capped)
        req.prefix_len = req.protected = found.depth
        req.last_node = found.node
        grid = self.server.checkpoint_grid
        branch = page_floor(found.full, grid)
        req.mamba_branching_seqlen = branch if branch > found.depth else None
        if found.node.state and not req.working_slot:
            if not group_free:
                self.pools.take_slot(lock=found.node)
            req.working_slot = True
            self.pools.slots += 1
        key = 0 if self.tree.disabled else page_floor(len(capped), self.server.page_size)
        plain: int | None = prefix_match(self.plain, fill).matched
        if plain is not None and plain > found.full and self.tree.kv_lost:
            plain = None  # the plain tree beside never evicts: what one would hold after evictions is not known
        return PrefixMatch(
            len(fill), key, found.shared, found.depth, found.full, req.mamba_branching_seqlen, plain, found.states
        )

    def lock_prefix(self, req: Req, node: Node) -> None:
        """An admitted request keeps its prefix locked until it finishes, is retracted or inserts further."""
        req.lock = (node, self.tree.lock(node))

    def _unlock(self, req: Req) -> None:
        if req.lock is not None:
            node, mamba = req.lock
            self.tree.unlock(node, mamba)
            req.lock = None

    def drop_cow_slot(self, req: Req) -> None:
        """A refused candidate gives back the working slot its match took."""
        if req.working_slot:
            req.working_slot = False
            self.pools.slots -= 1

    # --- prepare_for_extend / prepare_for_decode -----------------------------------------------------------------
    def _alloc_req_slots(self, reqs: list[Req]) -> None:
        """``alloc_req_slots``: evict the states the new rows' slots lack, then take rows and slots."""
        if not self.tree.disabled:
            if self.rules.exact_mamba_need:
                tracking = self._tracking_slots()
                need = sum(int(not r.working_slot) + (0 if r.ping_pong else tracking) for r in reqs)
            else:
                need = len(reqs) * MAMBA_SLOTS_PER_REQ
            short = need - self.pools.mamba_available()
            if short > 0:
                self.pools.evict_states(int(short))
        for req in reqs:
            if not req.has_row:
                req.has_row = True
                self.pools.rows += 1
            if not req.working_slot:
                req.working_slot = True
                self.pools.slots += 1
            if not req.ping_pong and self._tracking_slots():
                req.ping_pong = self._tracking_slots()
                self.pools.slots += req.ping_pong

    def _take_kv(self, req: Req, tokens: int) -> None:
        """The request takes ``tokens`` KV tokens (whole pages) from the pool."""
        req.owned += tokens
        self.pools.owned += tokens

    def prepare_for_extend(self, reqs: list[Req], windows: list[Window]) -> Batch:
        """Return the prefill batch: rows, slots and KV taken, each window's end and save point set. The KV comes in
        whole pages (``alloc_extend``: a window ``[prefix, end)`` takes ``ceil(end/P) - ceil(prefix/P)`` pages, its
        last one maybe partial); the tree first evicts the shortfall of the tokens asked plus a page per request
        (``alloc_paged_token_slots_extend``'s over-estimate; page 1: the tokens alone)."""
        self._alloc_req_slots(reqs)
        page = self.server.page_size
        extend = sum(w.extend_input_len for w in windows)
        self.pools.evict_for(extend + (len(reqs) * page if page > 1 else 0))
        for req, window in zip(reqs, windows):
            self._take_kv(req, page_ceil(window.end, page) - page_ceil(window.prefix_len, page))
            req.extend_end = window.end
            req.kv_committed_len = window.end
            req.retracted = False
            self._track_prefill(req, window)
        return Batch(True, list(reqs))

    def _track_prefill(self, req: Req, window: Window) -> None:
        """``prepare_for_extend``'s extra-buffer save point: the window's start plus whole grids, or its branching
        point when that lies inside the window (``_mamba_radix_cache_v2_req_prepare_for_extend``)."""
        server = self.server
        grid = server.checkpoint_grid
        if not self.extra_buffer or window.extend_input_len < grid:
            return
        start, end = window.prefix_len, window.end
        save = start + window.extend_input_len // grid * grid
        on_state_chunk = start + window.extend_input_len // server.state_chunk * server.state_chunk
        read_to = end if on_state_chunk == save else save + 1
        branch = req.mamba_branching_seqlen
        if branch is not None and start < branch < read_to and (branch - start) % server.cache_chunk == 0:
            save = branch
        req.mamba_last_track_seqlen = save

    def _decode_rows(self, rows: list[Req], tracked: dict[int, int]) -> None:
        """``prepare_for_decode``: one more KV token per row — a new page for a row whose length is on a page
        boundary, after the tree evicted the shortfall of a page per row (``alloc_paged_token_slots_decode``'s
        over-estimate; page 1: a token per row) — and the decode save points due."""
        page = self.server.page_size
        self.pools.evict_for(len(rows) * page)
        for req in rows:
            if req.kv_committed_len % page == 0:
                self._take_kv(req, page)
            req.kv_committed_len += 1
            if self.extra_buffer and req.kv_committed_len % self.server.decode_grid == 0:
                tracked[id(req)] = req.kv_committed_len  # a save due at this length, set by the result

    def prepare_for_decode(self, rows: list[Req]) -> Batch:
        """Return a decode batch of ``rows``, their next tokens' KV taken."""
        batch = Batch(False, rows)
        self._decode_rows(rows, batch.tracked)
        return batch

    def mix_decode(self, prefill: Batch, rows: list[Req]) -> None:
        """``mix_with_running``: ``rows`` decode inside the prefill batch (their save points are not tracked)."""
        self._decode_rows(rows, {})
        prefill.reqs += rows
        prefill.decoding = rows

    # --- decode memory and retraction ---------------------------------------------------------------------------
    def decode_need(self, rows: list[Req]) -> int:
        """Return ``new_tokens_required_next_decode``: a page for every row whose length is on a page boundary."""
        page = self.server.page_size
        return page * sum(1 for r in rows if r.kv_committed_len % page == 0)

    def check_decode_mem(self, rows: list[Req]) -> bool:
        """``check_decode_mem``: evict the shortfall of the next decode step's pages; return whether they fit."""
        need = self.decode_need(rows)
        self.pools.evict_for(need)
        return self.pools.kv_available() >= need

    def retract_decode(self, rows: list[Req]) -> tuple[list[Req], list[Req], list[Req]]:
        """``retract_decode``: release rows from the end of the keep order (most outputs, then shortest prompt,
        first) until the rest fit, keeping at least one (aborted when even it does not fit); return the rows kept,
        the rows retracted (in that order) and the rows aborted."""
        order = sorted(
            range(len(rows)), key=lambda i: (rows[i].output_len, -len(rows[i].origin_input_ids)), reverse=True
        )
        retracted: list[Req] = []
        first = True
        while first or not self.check_decode_mem([rows[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            req = rows[order.pop()]
            retracted.append(req)
            self._retract(req, len(order))
        aborted: list[Req] = []
        if len(order) <= 1 and not self.check_decode_mem([rows[i] for i in order]):
            req = rows[order.pop()]
            aborted.append(req)
            self._retract(req, 0, aborted=True)
        kept = rows if len(order) == len(rows) else [rows[i] for i in order]  # filter_batch keeps the keep order
        return kept, retracted, aborted

    def _retract(self, req: Req, remaining: int, aborted: bool = False) -> None:
        """``release_req``: free the request's KV without inserting it, its row and slots; evict 20 tokens per row
        still decoding; the request starts over (its outputs kept) from the waiting queue."""
        self.retractions.append(Retraction(self.step_no, req.rid, req.output_len, aborted))
        self.pools.owned -= req.owned
        req.owned = 0
        self._unlock(req)
        self._free_row_and_slots(req)
        self.pools.evict_for(remaining * RETRACT_DECODE_STEPS)
        req.prefix_len = req.protected = 0
        req.last_node = None
        req.retracted = True
        req.retractions += 1
        req.inflight_middle_chunks = 0
        req.mamba_last_track_seqlen = None
        req.mamba_branching_seqlen = None

    def _free_row_and_slots(self, req: Req) -> None:
        if req.has_row:
            req.has_row = False
            self.pools.rows -= 1
        self.pools.slots -= int(req.working_slot) + req.ping_pong
        req.working_slot, req.ping_pong = False, 0

    # --- the tree's inserts (cache_unfinished_req, cache_finished_req) -----------------------------------------
    def insert(self, req: Req, length: int, *, finished: bool) -> None:
        """Put ``req``'s first ``length`` fill ids in the tree, cut to its saved state under ``extra_buffer``. The
        tree takes the KV it lacks; an unfinished request's lock moves to the inserted node and it keeps the rest of
        its KV; at a finish the rest is freed (see the module doc)."""
        self.plain.insert(req.fill_view(length))
        if self.tree.disabled:  # nothing is kept: a finish frees all the request's KV
            req.mamba_last_track_seqlen = None
            if finished:
                self.pools.owned -= req.owned
                req.owned = 0
            return
        cut = min(length, req.mamba_last_track_seqlen or 0) if self.extra_buffer else length
        key = req.fill_view(page_floor(min(cut, length), self.server.page_size))
        if not finished:
            req.mamba_last_track_seqlen = None
            if not key:
                return
            self.pools.take_slot()  # the replacement (extra_buffer) or the copy (no_buffer) of its state
        new_state = False
        if key:
            _, added, new_state = self.tree.insert(key, state=True)
            self.pools.owned -= added  # those tokens are the tree's now (tree.total took them)
            req.owned -= added
        if new_state:
            self.saves.append(Save(self.step_no, req.rid, len(key)))
        if finished:
            self.pools.owned -= req.owned  # duplicates and the tail past the cut are freed
            req.owned = 0
            self._unlock(req)
            if new_state:  # the kept track slot (or the working slot) is the new state's
                self.pools.slots -= 1
                if req.ping_pong:
                    req.ping_pong -= 1
                else:
                    req.working_slot = False
            return
        duplicates = max(len(key) - req.protected, 0) - added  # its KV the tree already had past its prefix: freed
        self.pools.owned -= duplicates
        req.owned -= duplicates
        match = self.tree.match_prefix(key)  # the rematch: the request's prefix is now the inserted key
        self._unlock(req)
        self.lock_prefix(req, match.node)
        req.protected = match.depth
        req.last_node = match.node

    def release_req(self, req: Req) -> None:
        """``release_kv_cache`` at a finish: insert the prompt and every output but the last (``kv_committed_len``)
        cut to the saved state, free the rest, the row and the slots."""
        self.insert(req, req.kv_committed_len, finished=True)
        self._free_row_and_slots(req)

    def record_memory(self) -> None:
        """Record the pools after the step and what it evicted (bounded memory only)."""
        memory = self.server.memory
        if memory.kv_pool is None and memory.mamba_pool is None:
            return
        evicted = self.pools.evicted
        self.memory.append(
            MemoryStep(
                self.step_no,
                self.pools.kv_available(),
                self.tree.evictable,
                self.pools.mamba_available(),
                evicted.tokens,
                evicted.states,
                self.ratio.current,
                tuple(self.tree.lost),
            )
        )
        evicted.tokens = evicted.states = 0
        self.tree.lost.clear()


__all__ = ["Batch", "MemoryStep", "Retraction", "Save", "ScheduleState"]
