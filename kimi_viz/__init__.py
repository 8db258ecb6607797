"""kimi-viz: see how SGLang turns images into Kimi-K3 vision features, and why row counts diverge.

The public names below are imported lazily so ``import kimi_viz`` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load_image": "kimi_viz.images",
    "ProcessorConfig": "kimi_viz.config",
    "get_config": "kimi_viz.config",
    "load_preprocessor_config": "kimi_viz.config",
    "resize_config": "kimi_viz.processor",
    "Processor": "kimi_viz.processor",
    "compare": "kimi_viz.processor",
    "load_hf_processor": "kimi_viz.processor",
    "ProcessorOutput": "kimi_viz.records",
    "ImageRecord": "kimi_viz.records",
    "BatchLayout": "kimi_viz.layout",
    "compare_layouts": "kimi_viz.layout",
    "VisionEncoder": "kimi_viz.encoder",
    "Batch": "kimi_viz.batch",
    "Item": "kimi_viz.batch",
    "Feature": "kimi_viz.batch",
    "assign_ranks": "kimi_viz.deferred",
    "replay": "kimi_viz.deferred",
    "Stepper": "kimi_viz.stepper",
    "read_manifest": "kimi_viz.manifest",
    "write_manifest": "kimi_viz.manifest",
    "explain": "kimi_viz.messages",
    "sample_images": "kimi_viz.data",
    "sample_path": "kimi_viz.data",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_viz' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
