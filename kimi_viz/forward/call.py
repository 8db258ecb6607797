"""From the items a request side built to the ``get_image_feature`` call each attention-TP rank makes.

Not every item reaches the vision tower, and not every rank sees the same items:

* **Normal serving.** The scheduler looks every item up in its embedding cache by hash
  (``managers/mm_schedule.py``: ``embedding_cache.get_single(item.hash)``) and encodes only the misses,
  deduplicated by hash, in one call. Equal bytes give equal hashes in every release, so a repeated
  image is one item. Every rank receives the same items.
* **EPD encoder, cpu backend.** ``EncoderPreprocessOutput.materialize_for_rank`` preprocesses each
  rank's *own* images right after loading, with the load balancing over the whole encode batch (all
  its images), and marks them ``encoder_local_preprocessed``. The model is then called with the
  global-cache misses (``--enable-mm-global-cache``), balanced again over those. So rank r sees its own
  images eager and everybody else's raw: :attr:`ModelCall.rank_batches`.
* **EPD encoder, gpu backend** (and 0.5.17's eager encoder): nothing is materialized early; every rank
  receives the misses as built.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .._records import frozen
from ..devices import DeviceLike
from ..releases import PathSource, Release, release_for
from ..request.sides import BuiltRequest, encoder_preprocesses, local_rows_feature
from ..split._replay import replay
from ..split.batch import Batch
from ..split.divergence import with_divergence
from ..split.ranks import assign_ranks, check_tp_size
from ..split.trace import Replayed, Trace


@frozen
class Skipped:
    """A request image that does not reach ``get_image_feature``, and why."""

    image: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Return ``{"image", "reason"}``."""
        return {"image": self.image, "reason": self.reason}


@dataclass
class ModelCall:
    """The ``get_image_feature`` call of one request at one attention-TP size."""

    tp_size: int
    positions: list[int]  # the request position of each item in the call, in call order
    skipped: list[Skipped]
    batch: Batch | None  # the items as built (None: nothing reaches get_image_feature)
    rank_batches: list[Batch] | None = None  # EPD cpu: what each rank holds after materialize_for_rank
    owners: list[int] | None = None  # EPD cpu: the owner rank of each request image (whole-batch balancing)

    @property
    def called(self) -> bool:
        """Return True when at least one item reaches ``get_image_feature``."""
        return self.batch is not None

    def batch_for(self, rank: int) -> Batch:
        """Return the batch rank ``rank`` calls ``get_image_feature`` with."""
        assert self.batch is not None
        return self.rank_batches[rank] if self.rank_batches is not None else self.batch

    def to_json(self) -> dict[str, Any]:
        """Return ``{"tp_size", "positions", "skipped", "owners", "local_per_rank"}``."""
        local = None
        if self.rank_batches is not None:
            local = [
                [self.positions[k] for k, it in enumerate(b.items) if it.local_preprocessed] for b in self.rank_batches
            ]
        return {
            "tp_size": self.tp_size,
            "positions": list(self.positions),
            "skipped": [s.to_json() for s in self.skipped],
            "owners": self.owners,
            "local_per_rank": local,
        }


def _entry(release: Release | str) -> Release:
    """Return ``release`` itself, or the table's entry of a version string."""
    return release if isinstance(release, Release) else release_for(release)[0]


def _batch(built: BuiltRequest, items: list[Any], tp_size: int, release: Release) -> Batch:
    return Batch(
        items=items,
        processor=built.consumer.to_media_proc_cfg(),
        attn_tp_size=tp_size,
        sglang_version=release.version,
        code_path=release.code_path,
        code_path_source=PathSource.RECORDED,  # the release the kit builds the call for
        created_by="kimi-viz whatif",
        note=f"built by SGLang {built.request_side.label}'s request side ({built.settings.sglang_flags()})",
    )


def model_call(built: BuiltRequest, tp_size: int, release: Release | str) -> ModelCall:
    """Return the :class:`ModelCall` SGLang makes for ``built`` at attention-TP ``tp_size`` on ``release`` (an entry
    of the release table, one the fix search changed, or a version); its batches record that release's code path."""
    tp = check_tp_size(tp_size, "tp")
    entry = _entry(release)
    hits = set(built.settings.embedding_cache_hits)
    skipped: list[Skipped] = []
    positions: list[int] = []
    if built.settings.epd:
        for k in range(len(built.items)):
            if k in hits:
                skipped.append(Skipped(k, "an embedding-cache hit (the encoder's --enable-mm-global-cache)"))
            else:
                positions.append(k)
    else:
        first_of: dict[str, int] = {}
        for k, image in enumerate(built.images):
            earlier = first_of.setdefault(image.digest, k)
            if k in hits:
                skipped.append(Skipped(k, "an embedding-cache hit: the scheduler reuses its embedding"))
            elif earlier != k:
                skipped.append(Skipped(k, f"the same bytes as image {earlier}: one hash, encoded once"))
            elif any(d.digest == image.digest for d in (built.images[h] for h in hits)):
                skipped.append(Skipped(k, "the same bytes as an embedding-cache hit"))
            else:
                positions.append(k)
    if not positions:
        return ModelCall(tp, [], skipped, None)
    batch = _batch(built, [built.items[k] for k in positions], tp, entry)
    if not encoder_preprocesses(built.settings, built.request_side):
        return ModelCall(tp, positions, skipped, batch)
    # materialize_for_rank: the owner assignment over the whole encode batch, before the cache lookup.
    patches = [int(it.grids["grid_thws"][0][1]) * int(it.grids["grid_thws"][0][2]) for it in built.items]
    shares = [list(range(len(patches)))] if tp == 1 else assign_ranks(patches, tp)
    owners = [0] * len(patches)
    for rank, share in enumerate(shares):
        for k in share:
            owners[k] = rank
    local_rows = {}
    rank_batches = []
    for rank in range(tp):
        items = []
        for k in positions:
            item = built.items[k]
            if owners[k] == rank:
                if k not in local_rows:
                    local_rows[k] = local_rows_feature(built.images[k], built.producer, built.mode)
                item = replace(item, feature=local_rows[k], local_preprocessed=True)
            items.append(item)
        rank_batches.append(_batch(built, items, tp, entry))
    return ModelCall(tp, positions, skipped, batch, rank_batches, owners)


def replay_call(
    call: ModelCall, release: Release | str, *, mode: str = "shapes", device: DeviceLike = "auto"
) -> Trace | None:
    """Return the trace of ``call`` on every rank with ``release``'s code path (None when nothing is called); each
    rank replays its own batch."""
    if not call.called:
        return None
    assert call.batch is not None
    entry = _entry(release)
    version, path = entry.version, entry.code_path
    if call.rank_batches is None:
        return replay(
            call.batch, tp_size=call.tp_size, sglang_version=version, code_path=path, mode=mode, device=device
        )
    traces = [
        replay(
            call.rank_batches[r],
            tp_size=call.tp_size,
            rank=r,
            sglang_version=version,
            code_path=path,
            mode=mode,
            device=device,
        )
        for r in range(call.tp_size)
    ]
    first = next((t for t in traces if t.outcome == "error"), traces[0])
    combined = Replayed(
        first.batch,
        call.tp_size,
        first.code_path,
        first.mode,
        [t.ranks[0] for t in traces],
        first.grid_thws_host,
        first.assignment,
        first.release,
    )
    return with_divergence(combined)


__all__ = ["Skipped", "ModelCall", "model_call", "replay_call"]
