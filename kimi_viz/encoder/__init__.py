"""The Kimi-K3 vision encoder (MoonViT3d tower + ``patchmergerv2`` projector).

Read in this order:

* :mod:`.config`: :class:`VisionConfig`, ``ENCODER_PRESETS`` (``kimi-k3``, ``kimi-k25``, ``tiny``)
  and :func:`processor_preset_for` (which processor preset feeds each encoder);
* :mod:`.model`: the model itself, top to bottom: RoPE, attention within each image, the
  blocks, the tower, the projector and :class:`~kimi_viz.encoder.model.VisionModel`;
* :mod:`.checkpoint`: reading ``config.json``, the shard index and only the vision shards;
* :mod:`.runtime`: :class:`VisionEncoder` (``random()``, ``from_checkpoint()``, ``encode()``),
  :class:`EncoderOutput`, input checks, chunking, layout and CUDA-graph caches.
"""

from __future__ import annotations

from .checkpoint import LoadReport
from .config import (
    ENCODER_PRESETS,
    VisionConfig,
    get_vision_config,
    processor_preset_for,
)
from .model import AttentionLayout, VisionModel, count_parameters, matmul_flops
from .runtime import (
    ATTENTION_IMPLS,
    EncoderOutput,
    VisionEncoder,
    check_grids,
    check_rows,
    encode,
    normalise_grids,
    resolve_dtype,
)

__all__ = [
    "ATTENTION_IMPLS",
    "ENCODER_PRESETS",
    "AttentionLayout",
    "EncoderOutput",
    "LoadReport",
    "VisionConfig",
    "VisionEncoder",
    "VisionModel",
    "check_grids",
    "check_rows",
    "count_parameters",
    "encode",
    "get_vision_config",
    "matmul_flops",
    "normalise_grids",
    "processor_preset_for",
    "resolve_dtype",
]
