"""kimi-viz: see how SGLang turns images into Kimi-K3 vision features, and why row counts diverge.

The public names below are imported lazily so ``import kimi_viz`` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load_image": "kimi_viz.preprocess.images",
    "ProcessorConfig": "kimi_viz.preprocess.config",
    "get_config": "kimi_viz.preprocess.config",
    "load_preprocessor_config": "kimi_viz.preprocess.config",
    "resize_config": "kimi_viz.preprocess.processor",
    "Processor": "kimi_viz.preprocess.processor",
    "compare": "kimi_viz.preprocess.processor",
    "load_hf_processor": "kimi_viz.preprocess.processor",
    "ProcessorOutput": "kimi_viz.preprocess.records",
    "ImageRecord": "kimi_viz.preprocess.records",
    "BatchLayout": "kimi_viz.preprocess.layout",
    "compare_layouts": "kimi_viz.preprocess.layout",
    "VisionEncoder": "kimi_viz.encoder.runtime",
    "Batch": "kimi_viz.replay.batch",
    "Item": "kimi_viz.replay.batch",
    "Feature": "kimi_viz.replay.batch",
    "assign_ranks": "kimi_viz.replay.split",
    "replay": "kimi_viz.replay.split",
    "Verdict": "kimi_viz.replay.verdict",
    "Status": "kimi_viz.replay.verdict",
    "build_verdict": "kimi_viz.replay.verdict",
    "Stepper": "kimi_viz.report.stepper",
    "read_manifest": "kimi_viz.manifest",
    "write_manifest": "kimi_viz.manifest",
    "explain": "kimi_viz.explain",
    "sample_images": "kimi_viz.data",
    "sample_path": "kimi_viz.data",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_viz' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
