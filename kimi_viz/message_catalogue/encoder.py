"""Stage 5, the encoder: the vision tower (MoonViT3d) running on the call's pixels and grids."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import MODEL_K25, SCHEDULER_FAILS, TOWER, site

VIT_GRAPH = "multimodal/kimi_k3_vit_cuda_graph_runner.py"

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
    Message(
        "k3-vit-graph-capture",
        "Kimi-K3 ViT CUDA graph capture failed for key={}; using eager fallback",
        Stage.ENCODER,
        (site(VIT_GRAPH, "KimiK3ViTCudaGraphRunner.run", "exception", "0.5.17-0.5.23"),),
        fields=("key",),
        meaning="Capturing a CUDA graph of the Kimi-K3 vision tower for this shape of the call's patches failed "
        "(the traceback follows).",
        after="Logged, not raised: the tower runs eagerly for this call, with the same features; later calls of "
        "that shape run eagerly too.",
    ),
    Message(
        "k3-vit-graph-capacity",
        "Kimi-K3 ViT CUDA graph cache reached capacity={}; new shapes use eager fallback to bound HBM",
        Stage.ENCODER,
        (site(VIT_GRAPH, "KimiK3ViTCudaGraphRunner.run", "warning", "0.5.17-0.5.23"),),
        fields=("capacity:n",),
        meaning="The Kimi-K3 vision tower's CUDA-graph cache holds as many shapes as it may; a call with a new "
        "shape of patches is not captured.",
        after="Logged, not raised: the tower runs eagerly for new shapes, with the same features.",
    ),
)
