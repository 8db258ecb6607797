"""SGLang's torch ("gpu") preprocessing path, on CPU or CUDA.

The steps follow SGLang 0.5.23 (``kimi_k3_image_processing.py`` and the K2.5/K3 multimodal
processors): the image becomes a CHW uint8 tensor (RGBA when it has alpha, 1 channel repeated to
3), is resized with ``F.interpolate(bicubic, antialias=True, align_corners=False)`` only when its
size changes and rounded/clamped back to integer levels, has its transparency composited on the
float tensor (floored), and is normalised as ``x * (1 / (255 * std)) + (-mean / std)`` in float32.
Zero padding is applied before that affine step (``torch.addcmul`` in SGLang's torch fallback), so
padding comes out as ``0 * scale + bias = -1.0``. SGLang's Triton kernel on CUDA computes the same
affine map in one fused multiply-add, which can differ from this by one float32 ulp.

:func:`normalize_and_patchify` is SGLang's sequence (pad, affine, patchify: three passes over the
output); :func:`write_rows` computes the same values bit for bit in two passes, straight into the
caller's packed ``pixel_values`` (the padding's value is the same ``addcmul`` of a zero), which is
what :class:`~kimi_viz.preprocess.processor.Processor` uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..devices import DeviceLike, resolve_device
from ..errors import UnsupportedImageError
from .config import ProcessorConfig, get_config
from .images import has_alpha
from .resize import ResizeConfig


def to_chw_uint8(image: Image.Image | torch.Tensor | np.ndarray) -> torch.Tensor:
    """Return a CHW uint8 tensor the way SGLang stages a raw image: RGBA when the image has alpha
    (an ``A`` band or a ``transparency`` entry, and mode not RGB), else RGB; a 1-channel tensor is
    repeated to 3 channels."""
    if isinstance(image, Image.Image):
        alpha = image.mode != "RGB" and has_alpha(image)
        mode = "RGBA" if alpha else "RGB"
        array = np.array(image if image.mode == mode else image.convert(mode))  # a fresh, writable copy
        return torch.from_numpy(array).permute(2, 0, 1)
    if isinstance(image, np.ndarray):
        image = torch.from_numpy(np.ascontiguousarray(image))
        image = image.permute(2, 0, 1) if image.dim() == 3 else image
    if image.dtype != torch.uint8:
        raise UnsupportedImageError(f"Kimi-K3 preprocessing expects raw uint8 pixels, got {image.dtype}")
    if image.dim() == 2:
        image = image.unsqueeze(0)
    if image.dim() != 3:
        raise UnsupportedImageError(f"expected a CHW uint8 tensor, got shape {tuple(image.shape)}")
    if image.shape[0] == 1:
        image = image.repeat(3, 1, 1)
    if image.shape[0] not in (3, 4):
        raise UnsupportedImageError(
            f"CHW tensor with {image.shape[0]} channels; expected 1, 3 or 4 (SGLang fails on this input too)"
        )
    return image


def resize_bicubic(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Return ``x`` (``[B, C, H, W]``) as float32 resized with antialiased bicubic, rounded and clamped;
    unchanged (but float) when the size already matches."""
    x = x.float()
    if tuple(x.shape[-2:]) == (height, width):
        return x
    resized = F.interpolate(x, size=(height, width), mode="bicubic", align_corners=False, antialias=True)
    return resized.round_().clamp_(0.0, 255.0)


def fill_transparent_bg(x: torch.Tensor, bg: dict[str, Any] | None) -> torch.Tensor:
    """Return ``[B, 3, H, W]``: RGB passes through; RGBA loses alpha when ``bg`` is None, else is
    composited ``a * rgb + (1 - a) * background`` (``a = A / 255``) and floored."""
    if x.shape[1] == 3:
        return x
    rgb = x[:, :3]
    if bg is None:
        return rgb
    _, _, height, width = x.shape
    pattern = bg.get("pattern", "black")
    if pattern == "chessboard":
        square = bg.get("chessboard_square_size", 16)
        white = float(bg.get("chessboard_white_value", 255))
        gray = float(bg.get("chessboard_gray_value", 200))
        gray_parity = 1 if bg.get("chessboard_square_on_top_left", True) else 0
        ys = torch.arange(height, device=x.device) // square
        xs = torch.arange(width, device=x.device) // square
        parity = (ys.unsqueeze(1) + xs.unsqueeze(0)) % 2
        level = torch.where(parity == gray_parity, gray, white).unsqueeze(0).expand(3, height, width)
    elif pattern in ("white", "black", "gray"):
        level = torch.full((3, height, width), {"white": 255.0, "black": 0.0, "gray": 128.0}[pattern], device=x.device)
    else:
        raise ValueError(f"Invalid background pattern: {pattern}")
    alpha = (x[:, 3:4] / 255.0).clamp_(0.0, 1.0)
    # SGLang's (alpha * rgb + (1 - alpha) * level).clamp(0, 255).floor_(), op for op, in place where it
    # can be: the same float32 operations in the same order, so the same bits, with fewer buffers.
    out = alpha * rgb
    out += (1.0 - alpha) * level
    return out.clamp_(0.0, 255.0).floor_()


def normalization_tensors(config: ProcessorConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Return float32 ``scale = 1 / (255 * std)`` and ``bias = -mean / std``, shaped ``[1, 3, 1, 1]``."""
    scale = torch.tensor([1.0 / (255.0 * s) for s in config.image_std], dtype=torch.float32, device=device)
    bias = torch.tensor(
        [-m / s for m, s in zip(config.image_mean, config.image_std)], dtype=torch.float32, device=device
    )
    return scale.view(1, 3, 1, 1), bias.view(1, 3, 1, 1)


def normalize_and_patchify(
    x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, patch_size: int, padded_h: int, padded_w: int
) -> torch.Tensor:
    """Return ``[h*w, 3, p, p]`` rows of a ``[1, 3, H, W]`` float image: zero-pad, ``bias + x * scale``, patchify."""
    pad_h, pad_w = padded_h - x.shape[-2], padded_w - x.shape[-1]
    if pad_h > 0 or pad_w > 0:
        x = F.pad(x, (0, pad_w, 0, pad_h), value=0.0)
    x = torch.addcmul(bias, x, scale)
    b, c, height, width = x.shape
    gh, gw = height // patch_size, width // patch_size
    x = x.view(b, c, gh, patch_size, gw, patch_size).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b * gh * gw, c, patch_size, patch_size)


def write_rows(
    out: torch.Tensor,
    x: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    patch_size: int,
    padded_h: int,
    padded_w: int,
) -> torch.Tensor:
    """Write into ``out`` the rows :func:`normalize_and_patchify` returns for ``x`` ``[1, 3, H, W]``; return ``out``.

    The same ``addcmul`` runs on the same values (the content, and a zero for the padding), so the
    rows are bit-identical to SGLang's; only the padded copy and the packed copy are saved.
    """
    _, channels, height, width = x.shape
    p = patch_size
    normed = torch.empty((channels, padded_h, padded_w), dtype=torch.float32, device=x.device)
    if padded_h > height or padded_w > width:
        pad = torch.addcmul(bias, torch.zeros((), dtype=torch.float32, device=x.device), scale)[0]  # [3, 1, 1]
        normed[:, height:, :] = pad
        normed[:, :height, width:] = pad
    torch.addcmul(bias[0], x[0], scale[0], out=normed[:, :height, :width])
    grid_h, grid_w = padded_h // p, padded_w // p
    out.view(grid_h, grid_w, channels, p, p).copy_(normed.view(channels, grid_h, p, grid_w, p).permute(1, 3, 0, 2, 4))
    return out


def resized_rgb(
    chw_uint8: torch.Tensor, resize: ResizeConfig, config: Any, device: DeviceLike = "auto"
) -> torch.Tensor:
    """Return the resized, filled ``[1, 3, new_h, new_w]`` float32 image (integer levels) on ``device``."""
    config = get_config(config)
    x = to_chw_uint8(chw_uint8).to(resolve_device(device)).unsqueeze(0)
    x = resize_bicubic(x, resize.new_height, resize.new_width)
    return fill_transparent_bg(x, config.transparent_bg_config)


def torch_pixels_and_image(
    chw_uint8: torch.Tensor, resize: ResizeConfig, config: Any = "kimi-k3", device: DeviceLike = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(rows [h*w, 3, p, p], resized [1, 3, new_h, new_w])`` of one image through SGLang's torch path."""
    config = get_config(config)
    dev = resolve_device(device)
    x = resized_rgb(chw_uint8, resize, config, dev)
    scale, bias = normalization_tensors(config, dev)
    rows = normalize_and_patchify(
        x,
        scale,
        bias,
        config.patch_size,
        resize.new_height + resize.pad_height,
        resize.new_width + resize.pad_width,
    )
    return rows, x


def torch_pixels(
    chw_uint8: torch.Tensor, resize: ResizeConfig, config: Any = "kimi-k3", device: DeviceLike = "auto"
) -> torch.Tensor:
    """Return float32 ``[h*w, 3, p, p]`` rows of one CHW uint8 image through SGLang's torch path.

    ``resize`` is a :class:`~kimi_viz.preprocess.resize.ResizeConfig` applied as given (it may belong to
    another image size). ``device`` is ``"cpu"``, ``"cuda"`` or ``"auto"``; rows stay on it.
    """
    return torch_pixels_and_image(chw_uint8, resize, config, device)[0]
