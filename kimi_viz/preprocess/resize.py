"""NaViT resize maths: from an image's width and height to its resized size, padding and grid.

The arithmetic mirrors the checkpoint's ``navit_resize_image`` and SGLang's
``navit_resize_config`` operation for operation (same float divisions, same ``int()``
truncation), so every size gives the same answer as the real code.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from .._records import frozen
from ..errors import ArgumentError, EmptyImageError
from .config import ProcessorConfig, get_config

SGLANG_KEYS = ("num_tokens", "new_width", "new_height", "pad_width", "pad_height")  # SGLang's resize_config dict


@frozen
class ResizeConfig:
    """One image's NaViT resize: its resized size, the right and bottom padding, the grid and the tokens.

    ``grid`` is ``(1, h, w)`` in patches (not merged tokens); ``tokens`` the ``<|media_pad|>`` count.
    :meth:`to_sglang` is the ``resize_config`` dict SGLang's deferred config carries; :meth:`from_sglang`
    reads one back (the grid then follows from the padded size).
    """

    new_width: int
    new_height: int
    pad_width: int
    pad_height: int
    tokens: int
    grid: tuple[int, int, int]

    @property
    def padded_size(self) -> tuple[int, int]:
        """Return ``(width, height)`` after padding."""
        return self.new_width + self.pad_width, self.new_height + self.pad_height

    @property
    def patches(self) -> int:
        """Return ``t*h*w``: the rows of ``pixel_values`` this image takes."""
        t, h, w = self.grid
        return t * h * w

    def to_sglang(self) -> dict[str, int]:
        """Return SGLang's ``resize_config`` dict: ``num_tokens, new_width, new_height, pad_width, pad_height``."""
        return {
            "num_tokens": self.tokens,
            "new_width": self.new_width,
            "new_height": self.new_height,
            "pad_width": self.pad_width,
            "pad_height": self.pad_height,
        }

    def to_json(self) -> dict[str, Any]:
        """Return ``new_width, new_height, pad_width, pad_height, num_tokens, grid_thw`` (a list) as JSON data."""
        return {
            "new_width": self.new_width,
            "new_height": self.new_height,
            "pad_width": self.pad_width,
            "pad_height": self.pad_height,
            "num_tokens": self.tokens,
            "grid_thw": list(self.grid),
        }

    @classmethod
    def from_sglang(
        cls, resize: dict[str, Any], patch_size: int | None = None, merge: int | None = None
    ) -> ResizeConfig:
        """Return the config an SGLang ``resize_config`` dict describes (``KeyError`` for a missing size key);
        the patch size and merge kernel default to the Kimi-K3 processor config's."""
        patch_size = get_config().patch_size if patch_size is None else patch_size
        merge = get_config().merge_kernel_size if merge is None else merge
        new_w, new_h = int(resize["new_width"]), int(resize["new_height"])
        pad_w, pad_h = int(resize["pad_width"]), int(resize["pad_height"])
        grid = (1, (new_h + pad_h) // patch_size, (new_w + pad_w) // patch_size)
        tokens = resize.get("num_tokens")
        tokens = int(tokens) if tokens is not None else (grid[1] // merge) * (grid[2] // merge)
        return cls(new_w, new_h, pad_w, pad_h, tokens, grid)


def _side(value: Any, name: str) -> int:
    numpy = sys.modules.get("numpy")  # a numpy integer can only come from a loaded numpy
    if numpy is not None and isinstance(value, numpy.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"resize_config: {name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise EmptyImageError(
            f"resize_config: {name} is {value}; an image needs a positive width and height "
            "(SGLang's navit_resize_config raises ZeroDivisionError on a 0-sized image)"
        )
    return value


def resize_config(width: int, height: int, preset_or_config: Any = "kimi-k3") -> ResizeConfig:
    """Return the :class:`ResizeConfig` of a W x H image under a processor preset or config.

    The patch budget is applied to the floor patch counts of the original size, before padding, so
    the padded grid may hold a few more patches than ``in_patch_limit``.
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
    return ResizeConfig(new_w, new_h, pad_w, pad_h, num_tokens, (1, (new_h + pad_h) // p, (new_w + pad_w) // p))


__all__ = ["ResizeConfig", "SGLANG_KEYS", "resize_config"]
