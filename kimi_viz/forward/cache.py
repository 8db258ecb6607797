"""SGLang's multimodal embedding cache (``MultiModalStaticCache``), as each release runs it.

One per scheduler process, sized by ``SGLANG_VLM_CACHE_SIZE_MB`` (its row in
:data:`~kimi_viz.scheduler.flags.FLAGS`; 0 stores nothing),
it lives across forward passes and is never cleared. It is an LRU keyed by an item's hash and
bounded in bytes: an entry costs its rows times the text model's hidden size times the dtype's bytes
(Kimi-K3: 7168 × 2 in bf16). ``set`` of a key already present only touches it (the entry is never
replaced); a new entry evicts the least recently used until it fits; an entry larger than the whole
cache evicts everything and is then not stored, except from 0.5.23, which refuses it without
evicting anything (:attr:`~kimi_viz.releases.ForwardRules.rejects_oversized_cache_entry`).
"""

from __future__ import annotations

from collections import OrderedDict

from .._records import frozen
from .rows import Rows

TEXT_HIDDEN = 7168  # Kimi-K3's text hidden size: one feature row
ROW_BYTES = TEXT_HIDDEN * 2  # bf16


@frozen
class CacheEntry:
    """One cached embedding: the item hash it is stored under and its rows."""

    key: str
    rows: Rows


class EmbeddingCache:
    """The embedding cache of one scheduler process: LRU by bytes, keyed by item hash."""

    def __init__(self, max_bytes: int, *, row_bytes: int = ROW_BYTES, rejects_oversized: bool = False):
        self.max_bytes = max(0, int(max_bytes))
        self.row_bytes = row_bytes
        self.rejects_oversized = rejects_oversized
        self._entries: OrderedDict[str, Rows] = OrderedDict()
        self._bytes = 0

    @classmethod
    def of_megabytes(cls, megabytes: float, *, rejects_oversized: bool = False) -> EmbeddingCache:
        """Return a cache of ``megabytes`` MB (``SGLANG_VLM_CACHE_SIZE_MB``; 0 stores nothing)."""
        return cls(int(megabytes * (1 << 20)), rejects_oversized=rejects_oversized)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    @property
    def used_bytes(self) -> int:
        """Return the bytes the entries take."""
        return self._bytes

    def keys(self) -> list[str]:
        """Return the keys, least recently used first."""
        return list(self._entries)

    def get(self, key: str) -> Rows | None:
        """Return the entry's rows (and mark it most recently used), or None."""
        rows = self._entries.get(key)
        if rows is not None:
            self._entries.move_to_end(key)
        return rows

    def set(self, key: str, rows: Rows) -> bool:
        """Store ``rows`` under ``key`` as ``MultiModalStaticCache.set`` does; return whether an entry is there now."""
        if key in self._entries:  # an existing key is only touched, never replaced
            self._entries.move_to_end(key)
            return True
        size = len(rows) * self.row_bytes
        if self.rejects_oversized and size > self.max_bytes:
            return False
        while self._bytes + size > self.max_bytes:
            if not self._entries:
                return False
            _, old = self._entries.popitem(last=False)
            self._bytes -= len(old) * self.row_bytes
        self._entries[key] = rows
        self._bytes += size
        return True

    def free(self, key: str) -> None:
        """Drop the entry under ``key`` (a stale one)."""
        rows = self._entries.pop(key, None)
        if rows is not None:
            self._bytes -= len(rows) * self.row_bytes

    def entries(self) -> list[CacheEntry]:
        """Return every entry, least recently used first."""
        return [CacheEntry(key, rows) for key, rows in self._entries.items()]

    def copy(self) -> EmbeddingCache:
        """Return an independent copy (a what-if must not change the cache it was given)."""
        other = EmbeddingCache(self.max_bytes, row_bytes=self.row_bytes, rejects_oversized=self.rejects_oversized)
        other._entries = OrderedDict(self._entries)
        other._bytes = self._bytes
        return other


__all__ = ["TEXT_HIDDEN", "ROW_BYTES", "CacheEntry", "EmbeddingCache"]
