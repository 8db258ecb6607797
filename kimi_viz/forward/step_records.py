"""What each step of a forward pass records: one frozen record per step kind, around ``get_image_feature``.

A forward pass's :class:`~kimi_viz.split.trace.Step` s (:func:`~kimi_viz.forward.embedding.replay_forward`)
hold one of these as their ``variables``, as the deferred split's steps hold those of
:mod:`kimi_viz.split.step_records`. ``to_json`` gives the step's ``variables`` object (keys, order and
values as ``forward.json`` and the report carry them); none of them names key variables for the step
view, whose forward frame is the pass itself.
"""

from __future__ import annotations

from typing import Any

from .._records import frozen
from ..split.step_records import JsonObject, StepRecord


@frozen
class RadixMatches(StepRecord):
    """Scheduler §3: each request of the pass, its padded ids' match in the radix tree (floored to the page, capped
    at ``len - 1``) and the images inside it, which never reach the call, or the chunked request's continuation."""

    policy: str
    page_size: int
    requests: list[JsonObject]


@frozen
class PassAdmission(StepRecord):
    """Scheduler §2: the adder's walk, its budgets at the start and the end, every offer (the chunked request first:
    its window, the page-ceiled charge, whether it was cut), the waiting requests never offered and who was cut."""

    policy: str
    budget_state_before_candidate: bool
    start_budget: JsonObject
    offers: list[JsonObject]
    unoffered: list[str]
    cut: str | None
    end_budget: JsonObject
    stop: str | None = None  # why the walk stopped early: no_token, other, rows (None: every candidate offered)
    kv_budget_left: float | None = None  # rem_total_tokens at the end (None: the KV pool is unbounded)
    memory: JsonObject | None = None  # since the previous pass: retractions, evictions, NO_TOKEN steps


@frozen
class ForwardBatch(StepRecord):
    """§10: every request of the batch with its window and its items' images, pad runs and hashes."""

    requests: list[JsonObject]


@frozen
class PathChoice(StepRecord):
    """§10.1: the path the pass takes (precomputed, per-image or by-item) and the platform that decides it."""

    path: str
    platform: str


@frozen
class CacheLookups(StepRecord):
    """§10.3: every overlapping item's embedding-cache lookup and what came of it, and the key the cache uses."""

    items: list[JsonObject]
    key: str


@frozen
class EncodeCall(StepRecord):
    """§10.3: the items of the one ``get_image_feature`` call (request, image, tokens) and the tokens it produced."""

    call: list[JsonObject]
    produced_tokens: list[int]


@frozen
class SplitBack(StepRecord):
    """§10.3: the call's rows and the sizes ``torch.split`` cuts them into (each item's pad tokens)."""

    rows: int
    split_sizes: list[int]


@frozen
class ChunkSlices(StepRecord):
    """§10.3: each request's part of each overlapping image for its window (request, image, rows)."""

    slices: list[JsonObject]


@frozen
class TokenCount(StepRecord):
    """§10.4: where the pad tokens are counted from (``from`` in JSON), how many, and the rows there are for them."""

    counted_from: str
    tokens: int
    rows: int

    def to_json(self) -> dict[str, Any]:
        """Return ``{"from", "tokens", "rows"}``."""
        return {"from": self.counted_from, "tokens": self.tokens, "rows": self.rows}


@frozen
class LengthFit(StepRecord):
    """§10.4: the pad tokens, the rows of the embedding and the rows kept (None when SGLang raises)."""

    tokens_in_text: int
    rows_in_embedding: int
    rows_kept: int | None


@frozen
class Scatter(StepRecord):
    """§10.2: the pad tokens, the rows written onto them, and the operation (``index_copy_`` or ``masked_scatter_``)."""

    pad_tokens: int
    rows: int
    scatter: str


__all__ = [
    "RadixMatches",
    "PassAdmission",
    "ForwardBatch",
    "PathChoice",
    "CacheLookups",
    "EncodeCall",
    "SplitBack",
    "ChunkSlices",
    "TokenCount",
    "LengthFit",
    "Scatter",
]
