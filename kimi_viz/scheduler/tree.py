"""The radix tree as SGLang keys and matches it: padded ids, what the tree holds, the longest cached match.

The scheduler never sees ``<|media_pad|>``: the model's ``pad_input_ids`` (``managers/mm_utils.py``)
replaces each image's run by pad values derived from the image's hash, so the radix tree compares
images by hash. How the values are derived is the release's rule
(:attr:`~kimi_viz.releases.SchedulerRules.wide_pads`):

* up to 0.5.22 one value, ``1_000_000 + hash % 2**30`` (``managers/schedule_batch.py``
  ``_compute_pad_value``), repeated over the run;
* from 0.5.23 four 62-bit sentinels, ``1_000_000 + (8 bytes of sha256(b"sglang-mm-wide-pad-v1" +
  hash as 8 big-endian bytes)) & (2**62 - 1)`` (``_compute_pad_values``), cycled over the run
  (``MultimodalDataItem.padding_sequence``).

:class:`RadixTree` holds what the scheduler inserted (``mem_cache/radix_cache.py`` ``RadixCache``:
keys floored to the page size, matched page by page). Its FULL match of a request is the longest
common prefix with any inserted key, floored to the page, over a key capped at ``len - 1`` (so a
request always extends at least one token: ``Req.init_next_round_input``). Kimi-K3's tree is hybrid
(``UnifiedRadixCache`` with a MAMBA component, ``docs/hybrid-tree-notes.md`` §2): it also holds the
depths where a linear-attention state was saved, and a request starts only from the deepest of those
on its FULL match (:func:`prefix_match`); when the FULL match reaches a checkpoint-grid point deeper
than that, the request saves its own state there (its *branching point*). With the tree disabled
(``--disable-radix-cache``) nothing matches and nothing is kept. Memory is taken as ample: nothing is
ever evicted. ``docs/scheduler-notes.md`` §3 and §5 give the plain tree's rules.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

from .._records import frozen
from ..scheduler_rules import SchedulerRules
from .req import Image, Req

PAD_SHIFT = 1_000_000  # MM_PAD_SHIFT_VALUE
WIDE_PAD_TAG = b"sglang-mm-wide-pad-v1"
WIDE_PAD_MASK = (1 << 62) - 1
WIDE_PAD_VALUES = 4  # _MM_IDENTITY_BYTES (32) / 8


@functools.lru_cache(maxsize=4096)
def pad_values(image_hash: int, wide: bool) -> tuple[int, ...]:
    """Return the pad values a release derives from an image's hash: one value, or (``wide``) four cycled."""
    if not wide:
        return (PAD_SHIFT + image_hash % (1 << 30),)
    digest = hashlib.sha256(WIDE_PAD_TAG + image_hash.to_bytes(8, byteorder="big")).digest()
    return tuple(
        PAD_SHIFT + (int.from_bytes(digest[i : i + 8], byteorder="big") & WIDE_PAD_MASK)
        for i in range(0, 8 * WIDE_PAD_VALUES, 8)
    )


def padded_ids(req: Req, rules: SchedulerRules) -> tuple[int, ...]:
    """Return the request's prompt as the scheduler sees it: each image run replaced by its pad values."""
    ids: list[int] = []
    for part in req.parts:
        if isinstance(part, Image):
            values = pad_values(part.image_hash, rules.wide_pads)
            ids.extend((values * (part.length // len(values) + 1))[: part.length])  # cycled over the run
        else:
            ids.append(int(part))
    return tuple(ids)


def page_floor(tokens: int, page_size: int) -> int:
    """Return ``tokens`` floored to a multiple of ``page_size``."""
    return tokens // page_size * page_size


def page_ceil(tokens: int, page_size: int) -> int:
    """Return ``tokens`` ceiled to a multiple of ``page_size`` (``PrefillAdder.ceil_paged_tokens``)."""
    return -(-tokens // page_size) * page_size


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Return how many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixTree:
    """What the radix tree holds (the page-floored keys inserted so far, and in a hybrid tree the prefixes that
    end at a saved linear-attention state) and how it matches a key."""

    def __init__(self, page_size: int, disabled: bool = False, hybrid: bool = False) -> None:
        self.page_size = page_size
        self.disabled = disabled
        self.hybrid = hybrid
        self.keys: list[tuple[int, ...]] = []
        self.states: dict[int, set[tuple[int, ...]]] = {}  # depth -> the prefixes holding a state there

    def shared(self, ids: Sequence[int]) -> int:
        """Return the most leading tokens any inserted key shares with ``ids`` floored to the page (0 when disabled),
        before the match is floored to the page itself."""
        if self.disabled:
            return 0
        key = tuple(ids[: page_floor(len(ids), self.page_size)])
        return max((common_prefix(key, stored) for stored in self.keys), default=0)

    def match(self, ids: Sequence[int]) -> int:
        """Return the longest cached prefix of ``ids`` (``match_prefix``: page-floored key and match; in a hybrid
        tree cut back to the deepest saved state on it)."""
        full = page_floor(self.shared(ids), self.page_size)
        return self.state_depth(ids, full) if self.hybrid else full

    def state_depth(self, ids: Sequence[int], limit: int) -> int:
        """Return the deepest saved state on ``ids``'s path at most ``limit`` tokens deep (0: the root)."""
        for depth in sorted((d for d in self.states if 0 < d <= limit), reverse=True):
            if tuple(ids[:depth]) in self.states[depth]:
                return depth
        return 0

    def states_on(self, ids: Sequence[int], limit: int) -> tuple[int, ...]:
        """Return the depths of every saved state on ``ids``'s path at most ``limit`` tokens deep, shallowest first."""
        return tuple(d for d in sorted(self.states) if 0 < d <= limit and tuple(ids[:d]) in self.states[d])

    def insert(self, ids: Sequence[int], *, state: bool = False) -> int:
        """Insert ``ids`` floored to the page (a key already covered by a longer one adds no KV), with a saved state
        at its end when ``state``; return the depth of a state the tree did not hold yet (0: none taken in)."""
        if self.disabled:
            return 0
        key = tuple(ids[: page_floor(len(ids), self.page_size)])
        if not key:
            return 0
        if not any(stored[: len(key)] == key for stored in self.keys):
            self.keys = [stored for stored in self.keys if key[: len(stored)] != stored]
            self.keys.append(key)
        held = self.states.setdefault(len(key), set())
        if not (state and self.hybrid) or key in held:
            return 0
        held.add(key)
        return len(key)


@frozen
class PrefixMatch:
    """How a waiting request's padded ids matched the tree: their length, the key compared (capped at ``len - 1``,
    floored to the page), the tokens the longest inserted key shares with it, that floored to the page (``full``:
    the FULL match), and the ``prefix_len`` it starts from (``matched``: tokens ``[0, matched)`` come from the cache
    and are never prefilled) — in a hybrid tree the deepest saved state on the FULL match, where a deeper
    checkpoint-grid point is its ``branching`` point; ``states`` are the saved states on the path. ``plain`` is what a
    plain ``RadixCache`` given every insert whole would have matched, when the scheduler kept one beside it."""

    length: int
    key: int
    shared: int
    matched: int
    full: int = 0
    branching: int | None = None
    plain: int | None = None
    states: tuple[int, ...] = ()  # every saved state on the FULL match's path (hybrid tree), shallowest first

    @property
    def cut_back(self) -> bool:
        """Return True when the request starts short of what the plain tree would match (the hybrid tree's cut)."""
        return self.plain is not None and self.plain > self.matched


def prefix_match(tree: RadixTree, fill_ids: Sequence[int], grid: int = 64) -> PrefixMatch:
    """Return the :class:`PrefixMatch` of a waiting request's padded ``fill_ids`` in ``tree`` (``grid``: the hybrid
    tree's checkpoint grid, for the branching point)."""
    capped = fill_ids[: max(len(fill_ids) - 1, 0)]
    shared = tree.shared(capped)
    key = 0 if tree.disabled else page_floor(len(capped), tree.page_size)
    full = page_floor(shared, tree.page_size)
    if not tree.hybrid:
        return PrefixMatch(len(fill_ids), key, shared, full, full)
    states = tree.states_on(capped, full)
    matched = states[-1] if states else 0
    branch = page_floor(full, grid)
    return PrefixMatch(len(fill_ids), key, shared, matched, full, branch if branch > matched else None, states=states)


__all__ = [
    "PrefixMatch",
    "RadixTree",
    "common_prefix",
    "pad_values",
    "padded_ids",
    "page_ceil",
    "page_floor",
    "prefix_match",
]
