"""The forward pass under load: from the scheduler's passes to the ``get_image_feature`` call and the splice back.

Read in order: :mod:`.rows` (feature rows by provenance), :mod:`.cache` (the embedding cache),
:mod:`.trace` (what a pass records), :mod:`.step_records` (each step's variables), :mod:`.call` (one
request's call on every attention-TP rank), :mod:`.embedding` (``get_embedding_and_mask``: the one
call for every request of a pass, the split back, the splice), :mod:`.scheduled` (the scheduler's
two steps as the report shows them), :mod:`.supply` (where each image's rows came from) and
:mod:`.workload_replay` (``replay_workload``: a workload's requests, their passes, each replayed).
Names are imported lazily.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "ModelCall": "call",
    "Skipped": "call",
    "model_call": "call",
    "replay_forward": "embedding",
    "replay_workload": "workload_replay",
    "LoadResult": "workload_replay",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
