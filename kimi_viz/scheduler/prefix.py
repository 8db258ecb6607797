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

:func:`padded_ids` gives a request's ids with its pad values; :class:`PrefixMatch` records how a
waiting request matched the tree — the key compared (capped at ``len - 1``, so a request always extends
at least one token: ``Req.init_next_round_input``, floored to the page), the FULL match, and the prefix it
starts from, which in Kimi-K3's hybrid tree (:mod:`.radix_cache`, ``docs/hybrid-tree-notes.md`` §2) is the
deepest saved linear-attention state on the FULL match (its *branching point* a deeper checkpoint-grid
point). :class:`PlainTree` is a plain radix tree's memory of every insert whole (``RadixCache``'s keys,
floored to the page, matched page by page): the scheduler keeps one beside the hybrid tree to say what a
plain tree would have matched, and ``lpm`` one of the waiting queue. ``docs/scheduler-notes.md`` §3 and
§5 give the plain tree's rules.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

from .._records import frozen
from ..scheduler_rules import SchedulerRules
from .req import Image, Req, same_ids

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


class _Run:
    """A node of :class:`PlainTree`: the ids ``source[lo:hi]`` of a key it was given (read on demand: a view of a
    request's ids keeps no copy), its children by their first id."""

    __slots__ = ("source", "lo", "hi", "children")

    def __init__(self, source: Sequence[int], lo: int, hi: int) -> None:
        self.source, self.lo, self.hi = source, lo, hi
        self.children: dict[int, _Run] = {}

    def ids(self) -> Sequence[int]:
        return self.source[self.lo : self.hi]


class PlainTree:
    """A plain radix tree's memory of what was inserted (``RadixCache`` without eviction): the page-floored keys, kept
    as a radix tree of id runs (a match walks one path, not every key); a run holds no copy of a
    :class:`~.req.FillIds` view it was given.

    The scheduler keeps one beside Kimi-K3's hybrid tree, given every insert whole, to say what a plain tree
    would have matched; ``lpm`` keeps one of the waiting queue (its in-batch check)."""

    def __init__(self, page_size: int, disabled: bool = False) -> None:
        self.page_size = page_size
        self.disabled = disabled
        self.root = _Run((), 0, 0)

    def _walk(self, key: Sequence[int], length: int) -> tuple[_Run, int, int]:
        """Return the deepest node the walk of ``key[:length]`` reaches, how many of its ids the key shares, and the
        ids shared in all."""
        node, pos = self.root, 0
        while pos < length:
            child = node.children.get(key[pos])
            if child is None:
                return node, node.hi - node.lo, pos
            size = child.hi - child.lo
            if child.lo == pos and same_ids(child.source, key):
                common = min(size, length - pos)  # the same request's ids at the same offset
            else:
                common = common_prefix(child.ids(), key[pos : min(pos + size, length)])
            pos += common
            if common < size:
                return child, common, pos
            node = child
        return node, node.hi - node.lo, pos

    def shared(self, ids: Sequence[int], length: int | None = None) -> int:
        """Return the most leading tokens any inserted key shares with ``ids`` (their first ``length``) floored to the
        page (0 when disabled), before the match is floored to the page itself."""
        if self.disabled:
            return 0
        return self._walk(ids, page_floor(len(ids) if length is None else length, self.page_size))[2]

    def match(self, ids: Sequence[int]) -> int:
        """Return the longest cached prefix of ``ids`` (page-floored key and match)."""
        return page_floor(self.shared(ids), self.page_size)

    def insert(self, ids: Sequence[int]) -> None:
        """Insert ``ids`` floored to the page (a key already covered by a longer one adds nothing)."""
        if self.disabled:
            return
        length = page_floor(len(ids), self.page_size)
        node, inside, pos = self._walk(ids, length)
        if pos == length:
            return
        if inside < node.hi - node.lo:  # the walk stopped inside a node: split it where the key leaves it
            lower = _Run(node.source, node.lo + inside, node.hi)
            lower.children = node.children
            node.hi = node.lo + inside
            node.children = {lower.source[lower.lo]: lower}
        node.children[ids[pos]] = _Run(ids, pos, length)


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


def prefix_match(tree: PlainTree, fill_ids: Sequence[int]) -> PrefixMatch:
    """Return the :class:`PrefixMatch` of a waiting request's padded ``fill_ids`` in a plain tree."""
    capped = max(len(fill_ids) - 1, 0)
    shared = tree.shared(fill_ids, capped)
    key = 0 if tree.disabled else page_floor(capped, tree.page_size)
    full = page_floor(shared, tree.page_size)
    return PrefixMatch(len(fill_ids), key, shared, full, full)


__all__ = [
    "PlainTree",
    "PrefixMatch",
    "common_prefix",
    "pad_values",
    "padded_ids",
    "page_ceil",
    "page_floor",
    "prefix_match",
]
