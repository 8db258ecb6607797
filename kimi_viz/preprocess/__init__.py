"""Images to ``pixel_values``: the Kimi-K3 processor, modelled bit for bit.

Read in pipeline order: :mod:`.limits` and :mod:`.images` (the one image opener: loader policies,
the decompression-bomb limit, damaged files), :mod:`.config` (presets and ``preprocessor_config.json``),
:mod:`.resize` (the NaViT maths), :mod:`.pixels_checkpoint` and :mod:`.pixels_torch` (the two pixel
paths), :mod:`.processor` (:class:`Processor`), :mod:`.records` (what it returns) and :mod:`.layout`
(:class:`BatchLayout`: rows, tokens and patches). Names are imported lazily.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "load_image": "images",
    "LoadedImage": "images",
    "ProcessorConfig": "config",
    "PROCESSOR_PRESETS": "config",
    "get_config": "config",
    "load_preprocessor_config": "config",
    "resize_config": "resize",
    "Processor": "processor",
    "compare": "processor",
    "load_hf_processor": "processor",
    "ProcessorOutput": "records",
    "ImageRecord": "records",
    "ImageSpan": "records",
    "BatchLayout": "layout",
    "LayoutComparison": "layout",
    "compare_layouts": "layout",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
