"""What one forward pass records: its requests and items, the calls, the cache lookups, where the rows land.

:class:`ForwardTrace` is what :func:`~kimi_viz.forward.embedding.replay_forward` returns for one pass of
SGLang's ``get_embedding_and_mask``: the batch (:class:`ForwardRequest` with its
:class:`ForwardItem` s), the ``get_image_feature`` calls (:class:`CallRecord`, with each call's split
trace), every overlapping item's cache :class:`Lookup`, the warnings, the exception and its stage, and
the :class:`Placement` of every run of feature rows on the prompts' pad tokens. The step names are the
ones the stepper shows before and after ``get_image_feature``'s own; a pass the scheduler's model formed
opens with two of the scheduler's (the radix prefix match and the admission).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._records import frozen
from ..releases import Release
from ..split.batch import Item
from ..split.trace import ErrorInfo, Step, Trace
from .rows import RowRun, Rows, Source

# --- step names (the stepper shows them before and after get_image_feature's own) -------------------
PREFIX_MATCH = "prefix_match"  # the scheduler's, for a pass it formed
ADMISSION = "admission"  # the scheduler's, for a pass it formed
FORWARD_BATCH = "forward_batch"
CHOOSE_PATH = "choose_path"
CACHE_LOOKUP = "cache_lookup"
ENCODE_CALL = "encode_call"
SPLIT_BACK = "split_back"
SLICE_CHUNKS = "slice_chunks"
COUNT_TOKENS = "count_tokens"
ADJUST_LENGTH = "adjust_length"
SCATTER = "scatter"
FORWARD_STEPS = (
    PREFIX_MATCH,
    ADMISSION,
    FORWARD_BATCH,
    CHOOSE_PATH,
    CACHE_LOOKUP,
    ENCODE_CALL,
    SPLIT_BACK,
    SLICE_CHUNKS,
    COUNT_TOKENS,
    ADJUST_LENGTH,
    SCATTER,
)

Stage = Literal["precomputed", "call", "split-back", "adjust", "scatter"]
PathName = Literal["precomputed", "per-image", "by-item", "none"]
LookupOutcome = Literal["miss", "hit", "stale-hit", "discarded", "duplicate", "found"]
PrefixCut = Literal["cached", "cut", "after"]


def prefix_cut(offsets: tuple[int, int], matched: int) -> PrefixCut:
    """Return where a radix prefix ``[0, matched)`` leaves an image's inclusive pad run ``offsets``: wholly inside
    it (``cached``: the image never reaches the call), ending inside the run (``cut``), or before it (``after``)."""
    if offsets[1] < matched:
        return "cached"
    return "cut" if offsets[0] < matched else "after"


@frozen
class ForwardItem:
    """One ``MultimodalDataItem`` of a request in the forward batch: whose image, its hash, its pad run."""

    source: Source
    key: str  # item.hash: equal bytes give equal hashes
    offsets: tuple[int, int]  # the inclusive (start, end) of its <|media_pad|> run in the request's prompt
    item: Item | None  # what get_image_feature receives for it (None: it only carries precomputed rows)
    precomputed: Rows | None = None  # the EPD encoder's rows, on the language side
    origin: Source | None = None  # whose pixels its feature really holds, when not its own (a stale artifact)

    @property
    def rows_source(self) -> Source:
        """Return the image the encoder's rows for this item come from (its own, unless its feature is stale)."""
        return self.origin if self.origin is not None else self.source

    @property
    def tokens(self) -> int:
        """Return the run's length: the item's ``<|media_pad|>`` tokens (SGLang's ``end - start + 1``)."""
        return self.offsets[1] - self.offsets[0] + 1

    def overlaps(self, start: int, stop: int) -> bool:
        """Return whether the run touches the half-open window ``[start, stop)``."""
        return self.offsets[1] >= start and self.offsets[0] < stop

    def cut(self, matched: int) -> PrefixCut:
        """Return where the radix prefix ``[0, matched)`` leaves this image's run (:func:`prefix_cut`)."""
        return prefix_cut(self.offsets, matched)


@frozen(kw_only=True)
class ForwardRequest:
    """One request of the forward batch: its items and the window this pass computes, ``[prefix, prefix+extend)``."""

    index: int
    rid: str
    items: tuple[ForwardItem, ...]
    prefix: int
    extend: int
    length: int  # the prompt's length
    matched: int = 0  # the radix prefix it started from: tokens [0, matched) were cached, never prefilled
    shared: int = 0  # what it shared with the tree's earlier requests (a plain radix tree's match); >= matched
    states: tuple[int, ...] = ()  # saved linear-attention states on its prompt: where the tree held or took one
    retracted: tuple[int, ...] = ()  # the steps at which it was retracted before this pass (prefilled again here)

    @property
    def window(self) -> tuple[int, int]:
        """Return the half-open window ``(prefix, prefix + extend)``."""
        return self.prefix, self.prefix + self.extend

    def touches(self, image: int) -> bool:
        """Return whether this pass's window overlaps the run of item ``image`` (never when the window is empty)."""
        return self.extend > 0 and self.items[image].overlaps(self.prefix, self.prefix + self.extend)

    def touched(self) -> list[ForwardItem]:
        """Return the items whose run overlaps this pass's window (none when the window is empty)."""
        return [item for k, item in enumerate(self.items) if self.touches(k)]

    def pad_positions(self) -> list[tuple[int, int]]:
        """Return the half-open ``[start, stop)`` pad positions inside the window, run by run."""
        start, stop = self.window
        out = []
        for item in self.items:
            lo, hi = max(item.offsets[0], start), min(item.offsets[1] + 1, stop)
            if lo < hi:
                out.append((lo, hi))
        return out


@frozen
class CallItem:
    """One item of the ``get_image_feature`` call: its image, hash, tokens and whether it stands for others."""

    source: Source
    key: str
    tokens: int


@dataclass
class CallRecord:
    """One ``get_image_feature`` call of the pass: its items in order and the replay of its deferred split."""

    items: list[CallItem]
    trace: Trace | None  # None when a caller gave no replay (e.g. an encoder function of its own)
    produced: list[int] = field(default_factory=list)  # feature rows (tokens) each item yields

    def to_json(self) -> dict[str, Any]:
        """Return ``{"items": [...], "produced_tokens": [...], "outcome", "error"}``."""
        error = None if self.trace is None or self.trace.error is None else self.trace.error.to_json()
        return {
            "items": [
                {"request": i.source.rid, "image": i.source.image, "label": i.source.label, "tokens": i.tokens}
                for i in self.items
            ],
            "produced_tokens": list(self.produced),
            "outcome": "error" if error else "ok",
            "error": error,
        }


@frozen
class Lookup:
    """One overlapping item looked up in the embedding cache: a miss (into the call), a hit, or a duplicate.

    ``stale-hit``: a cached entry of another length used as it is (before 0.5.19); ``discarded``: such
    an entry dropped with a warning and the item encoded (0.5.19+); ``found``: an equal key already
    found in this pass; ``duplicate``: an equal key already among this pass's misses (encoded once).
    """

    source: Source
    outcome: LookupOutcome
    rows: int | None = None  # the cached entry's rows, for hits and stale entries


@frozen
class Placement:
    """Feature rows written onto a request's pad tokens: positions ``[start, start + run.count)`` get ``run``."""

    request: int
    start: int
    run: RowRun


@dataclass
class ForwardTrace:
    """The replay of one forward pass: its steps, calls, warnings, error, and where every feature row lands."""

    batch: tuple[ForwardRequest, ...]
    release: Release
    tp_size: int
    path: PathName
    steps: list[Step]
    calls: list[CallRecord]
    warnings: list[str]
    error: ErrorInfo | None
    stage: Stage | None  # where it raised
    placements: list[Placement]
    lookups: list[Lookup] = field(default_factory=list)  # every overlapping item's cache lookup, in order
    memory: str = ""  # what memory did since the previous pass (retractions, evictions), one sentence; "" quiet

    @property
    def outcome(self) -> Literal["ok", "error"]:
        """Return ``"error"`` when the pass raises, else ``"ok"``."""
        return "error" if self.error is not None else "ok"

    def request_at(self, index: int) -> ForwardRequest:
        """Return the batch's request whose ``index`` (its place in the workload) is ``index``."""
        return next(r for r in self.batch if r.index == index)

    def token_owner(self, request: int, position: int) -> tuple[Source, int] | None:
        """Return ``(source, row)`` of the feature row written on ``position`` of ``request``, or None."""
        for p in self.placements:
            if p.request == request and p.start <= position < p.start + p.run.count:
                return p.run.source, p.run.start + position - p.start
        return None

    def misplaced(self) -> list[tuple[ForwardRequest, ForwardItem, Placement]]:
        """Return every placement whose rows are not the rows the pad tokens' own image would give there."""
        out = []
        for p in self.placements:
            request = self.request_at(p.request)
            item = next(i for i in request.items if i.offsets[0] <= p.start <= i.offsets[1])
            own_row = p.start - item.offsets[0]
            same_pixels = p.run.source == item.source or (item.key and p.run.source.key == item.key)
            if not same_pixels or p.run.start != own_row:
                out.append((request, item, p))
        return out

    def to_json(self) -> dict[str, Any]:
        """Return the pass as JSON: requests and windows, path, calls, warnings, error and placements."""
        return {
            "requests": [
                {
                    "rid": r.rid,
                    "matched_prefix": r.matched,
                    "prefix_length": r.prefix,
                    "extend_length": r.extend,
                    "items": [
                        {"image": i.source.image, "label": i.source.label, "offsets": list(i.offsets), "hash": i.key}
                        for i in r.items
                    ],
                }
                for r in self.batch
            ],
            "sglang_version": self.release.version,
            "tp_size": self.tp_size,
            "path": self.path,
            "calls": [c.to_json() for c in self.calls],
            "warnings": list(self.warnings),
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "stage": self.stage,
            "lookups": [
                {"request": u.source.rid, "image": u.source.image, "outcome": u.outcome, "cached_rows": u.rows}
                for u in self.lookups
            ],
            "placements": [
                {
                    "request": self.request_at(p.request).rid,
                    "positions": [p.start, p.start + p.run.count],
                    "rows_of": {"request": p.run.source.rid, "image": p.run.source.image, "label": p.run.source.label},
                    "rows": [p.run.start, p.run.start + p.run.count],
                }
                for p in self.placements
            ],
            "steps": [s.to_json() for s in self.steps],
        }


__all__ = [
    "FORWARD_STEPS",
    "PREFIX_MATCH",
    "ADMISSION",
    "FORWARD_BATCH",
    "CHOOSE_PATH",
    "CACHE_LOOKUP",
    "ENCODE_CALL",
    "SPLIT_BACK",
    "SLICE_CHUNKS",
    "COUNT_TOKENS",
    "ADJUST_LENGTH",
    "SCATTER",
    "PrefixCut",
    "Stage",
    "PathName",
    "LookupOutcome",
    "ForwardItem",
    "ForwardRequest",
    "CallItem",
    "CallRecord",
    "Lookup",
    "Placement",
    "ForwardTrace",
    "prefix_cut",
]
