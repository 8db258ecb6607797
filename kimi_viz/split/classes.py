"""The scenario classes of pipeline spec §7: one set, used by the findings, the divergence and the catalogue.

``S1`` … ``S13`` are the ways the deferred split's invariant breaks (``docs/pipeline.md`` §7),
``S14`` … ``S20`` the cases of the forward pass under load (§10: requests sharing one call, chunks,
the embedding cache, the splice, the radix prefix, the hybrid tree's cut back to a saved state, memory
pressure),
``skew`` a producer and a consumer on different releases, ``none`` a batch where nothing diverges and
``unclassified`` a failure no class of §7 explains (its cause's own text then explains it).
"""

from __future__ import annotations

from enum import Enum


class ScenarioClass(str, Enum):
    """One scenario class; its value is how every output writes it (``"S1"``, ``"skew"``, ``"none"``)."""

    S1 = "S1"  # shard-local grid index (0.5.18 at TP >= 2)
    S2 = "S2"  # a stale image_grid_thw
    S3 = "S3"  # EPD owner assignment differs from the model's
    S4 = "S4"  # producer and consumer processor configs differ
    S6 = "S6"  # per-image lists or a stacked tensor instead of one concatenation
    S8 = "S8"  # t > 1 on a deferred image
    S9 = "S9"  # several grid rows in one item
    S10 = "S10"  # a stale eager feature
    S11 = "S11"  # a 2-channel tensor
    S12 = "S12"  # an HWC tensor read as CHW
    S13 = "S13"  # a zero-sized image
    S14 = "S14"  # single-image requests prefilled together: one get_image_feature call (S1 across requests)
    S15 = "S15"  # an image straddling two prefill chunks
    S16 = "S16"  # an embedding-cache entry of another length under the image's hash
    S17 = "S17"  # a stale eager feature followed to the splice (S10 under load)
    S18 = "S18"  # an earlier turn's image back in a later turn's call: its radix prefix ends inside the image's run
    S19 = "S19"  # the same, only because the hybrid tree cut the hit back to a saved state
    S20 = "S20"  # images ample memory keeps apart meet in one call after a retraction or an eviction
    SKEW = "skew"  # producer and consumer on different releases
    NONE = "none"
    UNCLASSIFIED = "unclassified"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


__all__ = ["ScenarioClass"]
