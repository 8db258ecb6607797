"""The checkpoint processor's pixels, bit for bit, without its float64 temporaries.

The checkpoint (``media_utils.py`` of the model repository) resizes with PIL bicubic, fills
transparency, zero-pads at the bottom and right, normalises ``float32(x / 255.0)`` then
``-= mean`` and ``*= 1 / std`` (both in float64, stored float32) and patchifies in raster order.

Here the same numbers come out of a cheaper route: the resized image is written straight into a
pre-zeroed padded uint8 buffer, patchified as uint8 a band of patch rows at a time, and each
uint8 value is mapped through a 256-entry float32 table built with exactly the checkpoint's
operations — so every output float is the one the checkpoint computes for that byte. The resize
is one PIL ``resize`` call, as in the checkpoint (Pillow picks the order of its two passes from the
sizes, so splitting the work would not give the same bytes), and pixels leave PIL a band of rows at
a time, so no full-size float or byte-string temporary is ever made.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..errors import ArgumentError, ConfigError
from .config import BACKGROUND_PATTERNS, ProcessorConfig, get_config
from .images import has_alpha
from .resize import ResizeConfig

# Patch rows per band: small bands keep the uint8 staging buffer in cache.
_BAND_ROWS = 2
# Pixels per band of rows when copying out of PIL or compositing (bounds the temporaries).
_BAND_PIXELS = 1 << 14


@functools.lru_cache(maxsize=32)
def normalization_lut(image_mean: tuple[float, ...], image_std: tuple[float, ...]) -> np.ndarray:
    """Return a read-only float32 ``[3, 256]`` table: the checkpoint's normalisation of every byte.

    Row ``c`` is ``float32(v / 255.0)``, then ``-= mean[c]`` and ``*= 1 / std[c]``, each step in
    float64 and stored back to float32 — the checkpoint's ``normalize`` operation order.
    """
    mean = np.asarray(image_mean, dtype=np.float64)
    std_inv = 1.0 / np.asarray(image_std, dtype=np.float64)
    values = np.arange(256, dtype=np.uint8)
    table = np.empty((3, 256), dtype=np.float32)
    for channel in range(3):
        row = (values / 255.0).astype(np.float32)
        row -= mean[channel]
        row *= std_inv[channel]
        table[channel] = row
    table.flags.writeable = False
    return table


def background(height: int, width: int, bg: dict[str, Any], top: int = 0) -> np.ndarray:
    """Return the ``(height, width)`` uint8 background levels of rows ``top..top+height`` of a
    transparent_bg_config (defaults filled in). The chessboard's top-left square is white when
    ``chessboard_square_on_top_left`` is true."""
    pattern = bg["pattern"]
    if pattern == "chessboard":
        square = int(bg["chessboard_square_size"])
        gray_parity = 1 if bg["chessboard_square_on_top_left"] else 0
        ys = (top + np.arange(height)) // square
        parity = (ys[:, None] + (np.arange(width) // square)[None, :]) % 2
        gray, white = bg["chessboard_gray_value"], bg["chessboard_white_value"]
        return np.where(parity == gray_parity, gray, white).astype(np.uint8)
    level = {"white": 255, "black": 0, "gray": 128}.get(pattern)
    if level is None:
        raise ConfigError(
            f"transparent_bg_config.pattern: expected one of {', '.join(BACKGROUND_PATTERNS)}, got {pattern!r}; "
            "fix the processor config"
        )
    return np.full((height, width), level, dtype=np.uint8)


def _band_rows(width: int) -> int:
    return max(1, _BAND_PIXELS // max(1, width))


def copy_into(image: Image.Image, out: np.ndarray) -> np.ndarray:
    """Copy a PIL image into ``out`` (uint8 ``(H, W, 3)``, or ``(H, W)`` for an ``L`` image) band by band.

    Other modes are converted to RGB first (as ``convert("RGB")`` would); an ``L`` image fills all
    three channels. Copying a band at a time avoids ``np.asarray``'s full-size byte strings.
    """
    if out.ndim == 3 and image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    height, width = out.shape[:2]
    rows = _band_rows(width)
    for y0 in range(0, height, rows):
        y1 = min(height, y0 + rows)
        band = np.asarray(image.crop((0, y0, width, y1)) if (y0, y1) != (0, height) else image)
        if out.ndim == 3 and band.ndim == 2:
            band = band[:, :, None]
        out[y0:y1] = band
    return out


def fill_transparent(image: Image.Image, bg: dict[str, Any] | None, out: np.ndarray | None = None) -> np.ndarray:
    """Return the image as uint8 RGB ``(H, W, 3)`` with transparency composited like the checkpoint.

    ``bg`` None: plain ``convert("RGB")`` (alpha dropped). Otherwise RGB is kept, images without
    alpha are converted, and the rest are composited ``a * rgb + (1 - a) * bg`` in float32 with
    ``a = A / 255`` and truncated to uint8 (a band of rows at a time). When ``out`` is given the
    result is written there.
    """
    if out is None:
        out = np.empty((image.height, image.width, 3), dtype=np.uint8)
    if bg is None or image.mode == "RGB" or not has_alpha(image):
        return copy_into(image, out)
    rgba = image if image.mode == "RGBA" else image.convert("RGBA")
    height, width = out.shape[:2]
    rows = _band_rows(width)
    for y0 in range(0, height, rows):
        y1 = min(height, y0 + rows)
        pixels = np.asarray(rgba.crop((0, y0, width, y1)))
        level = background(y1 - y0, width, bg, top=y0)
        alpha = pixels[:, :, 3].astype(np.float32) / 255.0
        inverse = 1 - alpha
        for channel in range(3):
            blended = alpha * pixels[:, :, channel]
            blended += inverse * level
            out[y0:y1, :, channel] = blended  # float32 -> uint8 truncates, like astype(np.uint8)
    return out


def resize_image(image: Image.Image, resize: ResizeConfig, config: ProcessorConfig) -> Image.Image:
    """Return the image resized to ``(new_width, new_height)`` with PIL bicubic, as the checkpoint does.

    With fill stage ``before_resize`` the image is made RGB first (composited when a background is
    configured); with ``after_resize`` it keeps its own mode (PIL resizes ``P`` and ``1`` with NEAREST).
    An image that already has the new size is returned as it is (PIL's resize would copy it).
    """
    image = _before_resize(image, config)
    size = (resize.new_width, resize.new_height)
    if image.size == size:
        return image
    return image.resize(size, resample=Image.Resampling.BICUBIC)


def _before_resize(image: Image.Image, config: ProcessorConfig) -> Image.Image:
    if config.fill_stage != "before_resize" or image.mode == "RGB":
        return image
    if config.transparent_bg_config is None or not has_alpha(image):
        return image.convert("RGB")
    return Image.fromarray(fill_transparent(image, config.background()), mode="RGB")


def padded_uint8(image: Image.Image, resize: ResizeConfig, config: ProcessorConfig) -> np.ndarray:
    """Return the resized, filled image zero-padded at bottom and right: uint8 ``(H + pad_h, W + pad_w, 3)``.

    The resized pixels are written straight into the pre-zeroed padded buffer.
    """
    new_w, new_h = resize.new_width, resize.new_height
    padded = np.zeros((new_h + resize.pad_height, new_w + resize.pad_width, 3), dtype=np.uint8)
    fill_transparent(resize_image(image, resize, config), config.background(), out=padded[:new_h, :new_w])
    return padded


def patchify_normalize(
    padded: np.ndarray, patch_size: int, lut: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """Return float32 ``[h*w, 3, p, p]`` rows (raster order) of a padded uint8 HWC image through ``lut``."""
    height, width, channels = padded.shape
    gh, gw = height // patch_size, width // patch_size
    shape = (gh * gw, channels, patch_size, patch_size)
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ArgumentError(f"out: expected a C-contiguous float32 array of shape {shape}, got {out.dtype} {out.shape}")
    grid = padded.reshape(gh, patch_size, gw, patch_size, channels)
    rows = out.reshape(gh, gw, channels, patch_size, patch_size)
    same_table = bool((lut == lut[0]).all())
    band = np.empty((_BAND_ROWS, gw, channels, patch_size, patch_size), dtype=np.uint8)
    for y0 in range(0, gh, _BAND_ROWS):
        y1 = min(gh, y0 + _BAND_ROWS)
        staged = band[: y1 - y0]
        np.copyto(staged, grid[y0:y1].transpose(0, 2, 4, 1, 3))
        if same_table:
            np.take(lut[0], staged, out=rows[y0:y1], mode="clip")
        else:
            for channel in range(channels):
                rows[y0:y1, :, channel] = np.take(lut[channel], staged[:, :, channel], mode="clip")
    return out


def checkpoint_pixels(
    image: Image.Image, resize: ResizeConfig, config: Any = "kimi-k3", out: np.ndarray | None = None
) -> tuple[np.ndarray, torch.Tensor]:
    """Return ``(padded uint8 HWC image, rows float32 [h*w, 3, p, p])`` for one image, checkpoint-exact.

    ``resize`` is a :class:`~kimi_viz.preprocess.resize.ResizeConfig`; it may come from another size than
    the image's own (a stale or foreign config), and is applied as given. ``out`` (a float32 array of
    the right shape) receives the rows in place; the returned tensor shares its memory.
    """
    config = get_config(config)
    padded = padded_uint8(image, resize, config)
    lut = normalization_lut(tuple(config.image_mean), tuple(config.image_std))
    rows = patchify_normalize(padded, config.patch_size, lut, out=out)
    return padded, torch.from_numpy(rows)
