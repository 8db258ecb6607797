"""Stage 5, the encoder: the vision tower (MoonViT3d) running on the call's pixels and grids."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import MODEL_K25, SCHEDULER_FAILS, TOWER, site

MESSAGES: tuple[Message, ...] = (
    Message(
        "k3-tower-frames",
        "t:{} > num_frames:{}",
        Stage.ENCODER,
        (site(TOWER, "Learnable2DInterpPosEmbDividedFixed.position_embeddings", "AssertionError", "0.5.17-0.5.23"),),
        fields=("t:n", "num_frames:n"),
        meaning="A grid reached the Kimi-K3 vision tower with more temporal frames (t) than its position "
        "embedding holds: an image item with t > 1 (images are t = 1), or a video.",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "k25-tower-frames",
        "t:{} > self.num_frames:{}",
        Stage.ENCODER,
        (site(MODEL_K25, "Learnable2DInterpPosEmbDivided_fixed.forward", "AssertionError", "0.5.17-0.5.23"),),
        fields=("t:n", "num_frames:n"),
        meaning="A grid reached the Kimi-K2.5 vision tower with more temporal frames (t) than its position "
        "embedding holds.",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "k25-tower-grid-2d",
        "grid_thws should be 2D, got {}",
        Stage.ENCODER,
        (site(MODEL_K25, "MoonViT3dPretrainedModel.forward", "AssertionError", "0.5.17-0.5.23"),),
        fields=("ndim:n",),
        meaning="The Kimi-K2.5 vision tower got its grids as a tensor of another rank than [images, 3].",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "k25-tower-grid-thw",
        "No support for _thw: {}",
        Stage.ENCODER,
        (site(MODEL_K25, "MoonViT3dPretrainedModel.forward", "AssertionError", "0.5.17-0.5.23"),),
        fields=("grids",),
        meaning="The Kimi-K2.5 vision tower got grid rows that are not [t, h, w] (e.g. [h, w]).",
        after=SCHEDULER_FAILS,
    ),
)
