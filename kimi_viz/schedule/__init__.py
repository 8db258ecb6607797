"""The scheduler's side of the call: which items of a forward batch reach ``get_image_feature``, on which rank.

:mod:`.call` turns the items a request side built into the call each attention-TP rank makes
(embedding-cache hits and duplicates skipped; the EPD encoder's owner-rank preprocessing). Names are
imported lazily.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "ModelCall": "call",
    "Skipped": "call",
    "model_call": "call",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
