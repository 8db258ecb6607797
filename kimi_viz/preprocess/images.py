"""Turn anything that holds an image into a PIL image, under an explicit loader policy.

SGLang meets images under three loader policies, and the kit can express each one:

* the checkpoint processor opens the file with PIL and keeps its mode and orientation
  (``exif_transpose=False, alpha="keep"``, the default);
* SGLang's serving loader applies the EXIF orientation (``exif_transpose=True``);
* the EPD encoder drops alpha before anything else (``alpha="discard"``).

16-bit images (modes ``I;16``, ``I;16B``, ``I;16L``, ``I;16N`` and 32-bit ``I``) are converted to
8-bit ``L`` by keeping the high byte: ``L = clip(value, 0, 65535) >> 8``. The checkpoint processor
has no rule of its own for them (PIL's ``convert("RGB")`` would clip at 255 and saturate), so this
rule is the kit's, chosen so that a 16-bit scan keeps its full tonal range.
"""

from __future__ import annotations

import io
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import (
    DecompressionBombError,
    EmptyImageError,
    ImageNotFoundError,
    NotAnImageError,
    TruncatedImageError,
    UnsupportedImageError,
)

DEFAULT_MAX_PIXELS = 2**28
ALPHA_POLICIES = ("keep", "discard")
# Modes the checkpoint processor can resize and convert to RGB.
SUPPORTED_MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr")
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")
EXIF_ORIENTATION_TAG = 0x0112
_OPEN_LOCK = threading.Lock()


@dataclass
class LoadedImage:
    """A decoded image plus where it came from and which loader policy was applied."""

    image: Image.Image
    source: str
    loader: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> tuple[int, int]:
        """Return ``(width, height)``."""
        return self.image.size

    @property
    def mode(self) -> str:
        """Return the PIL mode (``RGB``, ``RGBA``, ``P``, ``L``, ``LA``, ``CMYK``, ...)."""
        return self.image.mode


def load_image(
    src: Any,
    *,
    exif_transpose: bool = False,
    alpha: str = "keep",
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> LoadedImage:
    """Return a :class:`LoadedImage` from a path, bytes, PIL image, numpy array or torch tensor.

    Arrays must be ``uint8``: numpy ``(H, W)`` or ``(H, W, 1|3|4)``; torch ``CHW`` or ``HWC``
    (a leading dimension of 1, 3 or 4 means CHW, as in SGLang's ``to_hwc_uint8``). Animated
    images give their first frame with a warning. Sizes over ``max_pixels`` are refused before
    any pixel is decoded.
    """
    if alpha not in ALPHA_POLICIES:
        raise ValueError(f"load_image: alpha must be one of {ALPHA_POLICIES}, got {alpha!r}")
    if isinstance(src, LoadedImage):
        src = src.image
    if isinstance(src, (str, Path)):
        image, source = _open_path(Path(src), max_pixels), str(src)
    elif isinstance(src, (bytes, bytearray, memoryview)):
        image, source = _open_bytes(bytes(src), "<bytes>", max_pixels), "<bytes>"
    elif isinstance(src, Image.Image):
        image, source = _from_pil(src, max_pixels), "<PIL.Image>"
    elif isinstance(src, np.ndarray):
        image, source = _from_numpy(src, max_pixels), "<numpy>"
    elif _is_torch_tensor(src):
        image, source = _from_torch(src, max_pixels), "<torch>"
    else:
        raise UnsupportedImageError(
            f"cannot load an image from a {type(src).__name__}; expected a path, bytes, PIL.Image, "
            "numpy uint8 array or torch uint8 tensor"
        )

    orientation = _exif_orientation(image)
    if exif_transpose:
        image = ImageOps.exif_transpose(image)
    image = _eight_bit(image, source)
    if image.mode not in SUPPORTED_MODES:
        raise UnsupportedImageError(
            f"{source}: image mode {image.mode!r} is not supported; expected one of "
            f"{', '.join(SUPPORTED_MODES)} or a 16-bit mode; convert it to RGB first"
        )
    if alpha == "discard":
        image = image.convert("RGB")
    loader = {"exif_transpose": bool(exif_transpose), "alpha": alpha, "exif_orientation": orientation}
    return LoadedImage(image=image, source=source, loader=loader)


# --- sources ----------------------------------------------------------------------------------
def _check_size(width: int, height: int, source: str, max_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise EmptyImageError(
            f"{source}: image is {width}x{height}; expected a positive width and height "
            "(SGLang would divide by zero computing its resize)"
        )
    if width * height > max_pixels:
        raise DecompressionBombError(
            f"{source}: image is {width}x{height} = {width * height} pixels, over max_pixels={max_pixels}; "
            "downscale it first or pass a larger max_pixels if you trust the file"
        )


def _open_path(path: Path, max_pixels: int) -> Image.Image:
    if not path.exists():
        raise ImageNotFoundError(f"{path}: no such file; expected the path of an image file")
    if path.is_dir():
        raise NotAnImageError(f"{path}: is a folder; expected the path of an image file")
    return _open_bytes(path.read_bytes(), str(path), max_pixels)


def _open_bytes(data: bytes, source: str, max_pixels: int) -> Image.Image:
    if not data:
        raise NotAnImageError(f"{source}: empty file; expected image data (PNG, JPEG, ...)")
    # PIL's own bomb check (its own limit) fires while opening and loading; apply ours instead.
    with _OPEN_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            try:
                image = Image.open(io.BytesIO(data))
            except UnidentifiedImageError as exc:
                raise NotAnImageError(
                    f"{source}: not an image Pillow can decode; expected PNG, JPEG, WebP, GIF, BMP or TIFF data"
                ) from exc
            except (OSError, SyntaxError, ValueError) as exc:
                raise TruncatedImageError(f"{source}: the image header is damaged ({exc}); re-export the file") from exc
            _check_size(image.width, image.height, source, max_pixels)
            _warn_if_animated(image, source)
            try:
                image.load()
            except (OSError, SyntaxError, ValueError) as exc:
                raise TruncatedImageError(
                    f"{source}: the image data ends early or is corrupt ({exc}); re-download or re-export the file"
                ) from exc
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    return image


def _warn_if_animated(image: Image.Image, source: str) -> None:
    frames = getattr(image, "n_frames", 1)
    if frames > 1:
        warnings.warn(f"{source}: animated image with {frames} frames; using the first frame only", stacklevel=4)


def _from_pil(image: Image.Image, max_pixels: int) -> Image.Image:
    _check_size(image.width, image.height, "<PIL.Image>", max_pixels)
    if getattr(image, "n_frames", 1) > 1:
        _warn_if_animated(image, "<PIL.Image>")
        if image.tell() != 0:
            image.seek(0)
    try:
        image.load()  # an Image.open()ed file decodes here
    except (OSError, SyntaxError, ValueError) as exc:
        raise TruncatedImageError(
            f"<PIL.Image>: the image data ends early or is corrupt ({exc}); re-download or re-export the file"
        ) from exc
    return image


def _array_to_pil(array: np.ndarray, source: str, max_pixels: int) -> Image.Image:
    """Return a PIL image from a uint8 (H, W) or (H, W, C) array."""
    if array.dtype.kind == "f":
        raise UnsupportedImageError(
            f"{source}: float arrays ({array.dtype}) are not images the processor receives; "
            "expected uint8 in 0..255 (multiply by 255 and cast with .astype(np.uint8))"
        )
    if array.dtype != np.uint8:
        raise UnsupportedImageError(f"{source}: dtype {array.dtype} is not supported; expected uint8 pixels")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3):
        raise UnsupportedImageError(f"{source}: array of shape {tuple(array.shape)}; expected (H, W) or (H, W, C)")
    height, width = array.shape[:2]
    _check_size(width, height, source, max_pixels)
    if array.ndim == 2:
        return Image.fromarray(np.ascontiguousarray(array), mode="L")
    channels = array.shape[2]
    if channels not in (3, 4):
        raise UnsupportedImageError(f"{source}: {channels} channels; expected 1 (grey), 3 (RGB) or 4 (RGBA)")
    return Image.fromarray(np.ascontiguousarray(array), mode="RGB" if channels == 3 else "RGBA")


def _from_numpy(array: np.ndarray, max_pixels: int) -> Image.Image:
    return _array_to_pil(array, "<numpy>", max_pixels)


def _is_torch_tensor(obj: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, torch.Tensor)


def _from_torch(tensor: Any, max_pixels: int) -> Image.Image:
    import torch

    if tensor.dtype.is_floating_point:
        raise UnsupportedImageError(
            f"<torch>: float tensors ({tensor.dtype}) are not images the processor receives; expected uint8"
        )
    if tensor.dtype != torch.uint8:
        raise UnsupportedImageError(f"<torch>: dtype {tensor.dtype} is not supported; expected torch.uint8")
    shape = tuple(tensor.shape)
    if tensor.dim() == 3:
        if shape[0] in (1, 3, 4) or (shape[0] == 2 and shape[-1] > 4):
            tensor = tensor.permute(1, 2, 0)  # CHW -> HWC, as SGLang's to_hwc_uint8 decides
        elif shape[-1] > 4:
            raise UnsupportedImageError(
                f"<torch>: tensor of shape {shape} has neither 1, 3 or 4 channels first (CHW) nor last (HWC)"
            )
    elif tensor.dim() != 2:
        raise UnsupportedImageError(f"<torch>: tensor of shape {shape}; expected CHW, HWC or HW uint8")
    return _array_to_pil(tensor.detach().cpu().contiguous().numpy(), "<torch>", max_pixels)


# --- after loading -----------------------------------------------------------------------------
def has_alpha(image: Image.Image) -> bool:
    """Return True when the image carries transparency: an ``A`` band or a ``transparency`` entry.

    This is the test both the checkpoint's fill and SGLang's ``to_chw_uint8`` apply (the latter to
    non-RGB images only)."""
    return "A" in image.getbands() or "transparency" in image.info


def _exif_orientation(image: Image.Image) -> int | None:
    try:
        value = image.getexif().get(EXIF_ORIENTATION_TAG)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not stop loading
        return None
    return int(value) if value is not None else None


def sixteen_bit_to_l(image: Image.Image) -> Image.Image:
    """Return an 8-bit ``L`` image from a 16/32-bit integer image: ``clip(v, 0, 65535) >> 8``."""
    values = np.asarray(image if image.mode == "I" else image.convert("I"))  # int32
    return Image.fromarray((np.clip(values, 0, 65535) >> 8).astype(np.uint8), mode="L")


def _eight_bit(image: Image.Image, source: str) -> Image.Image:
    if image.mode in SIXTEEN_BIT_MODES:
        return sixteen_bit_to_l(image)
    return image
