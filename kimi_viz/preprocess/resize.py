"""NaViT resize maths: from an image's width and height to its resized size, padding and grid.

The arithmetic mirrors the checkpoint's ``navit_resize_image`` and SGLang's
``navit_resize_config`` operation for operation (same float divisions, same ``int()``
truncation), so every size gives the same answer as the real code.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from ..errors import EmptyImageError
from .config import ProcessorConfig, get_config

RESIZE_KEYS = ("new_width", "new_height", "pad_width", "pad_height", "num_tokens", "grid_thw")


def _side(value: Any, name: str) -> int:
    numpy = sys.modules.get("numpy")  # a numpy integer can only come from a loaded numpy
    if numpy is not None and isinstance(value, numpy.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"resize_config: {name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise EmptyImageError(
            f"resize_config: {name} is {value}; an image needs a positive width and height "
            "(SGLang's navit_resize_config raises ZeroDivisionError on a 0-sized image)"
        )
    return value


def resize_config(width: int, height: int, preset_or_config: Any = "kimi-k3") -> dict[str, Any]:
    """Return ``new_width, new_height, pad_width, pad_height, num_tokens, grid_thw`` for a W x H image.

    ``grid_thw`` is ``(1, h, w)`` in patches (not merged tokens). The patch budget is applied to
    the floor patch counts of the original size, before padding, so the padded grid may hold a
    few more patches than ``in_patch_limit``.
    """
    cfg: ProcessorConfig = get_config(preset_or_config)
    width = _side(width, "width")
    height = _side(height, "height")
    p = cfg.patch_size
    side = cfg.patch_limit_on_one_side
    s1 = math.sqrt(cfg.in_patch_limit / (max(1.0, width // p) * max(1.0, height // p)))
    s2 = side * p / width
    s3 = side * p / height
    scale = min(1.0, s1, s2, s3)
    new_w = min(max(1, int(width * scale)), side * p)
    new_h = min(max(1, int(height * scale)), side * p)
    factor = cfg.merge_kernel_size * p
    pad_h = (factor - new_h % factor) % factor
    pad_w = (factor - new_w % factor) % factor
    if cfg.fixed_output_tokens is not None:
        num_tokens = cfg.fixed_output_tokens
    else:
        num_tokens = ((new_h + pad_h) // factor) * ((new_w + pad_w) // factor)
    return {
        "new_width": new_w,
        "new_height": new_h,
        "pad_width": pad_w,
        "pad_height": pad_h,
        "num_tokens": num_tokens,
        "grid_thw": (1, (new_h + pad_h) // p, (new_w + pad_w) // p),
    }


def grid_of(resize: dict[str, Any], patch_size: int = 14) -> tuple[int, int, int]:
    """Return ``(1, h, w)`` from a resize dict (its ``grid_thw`` when present, else from the sizes)."""
    if "grid_thw" in resize:
        return tuple(int(v) for v in resize["grid_thw"])  # type: ignore[return-value]
    return (
        1,
        (resize["new_height"] + resize["pad_height"]) // patch_size,
        (resize["new_width"] + resize["pad_width"]) // patch_size,
    )
