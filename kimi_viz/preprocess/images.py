"""Turn anything that holds an image into a PIL image, under an explicit loader policy.

SGLang meets images under three loader policies, and the kit can express each one:

* the checkpoint processor opens the file with PIL and keeps its mode and orientation
  (``exif_transpose=False, alpha="keep"``, the default);
* SGLang's serving loader applies the EXIF orientation (``exif_transpose=True``);
* the EPD encoder drops alpha before anything else (``alpha="discard"``).

16-bit images (modes ``I;16``, ``I;16B``, ``I;16L``, ``I;16N`` and 32-bit ``I``) are converted to
8-bit ``L`` by keeping the high byte: ``L = clip(value, 0, 65535) >> 8``. The checkpoint processor
has no rule of its own for them (PIL's ``convert("RGB")`` would clip at 255 and saturate), so this
rule is the kit's, chosen so that a 16-bit scan keeps its full tonal range. The conversion runs a
band of rows at a time, so it never holds more than the source and the 8-bit result.

Limits, all checked on the header before any pixel is decoded: ``max_pixels`` (width x height) and
``max_bytes`` (the decoded buffer, width x height x the mode's bytes per pixel in Pillow: 1 for
``L``/``P``/``1``, 2 for 16-bit, 4 for ``RGB``, ``RGBA``, ``I`` and the rest). A path must be a
regular file of at most :data:`MAX_IMAGE_FILE_BYTES` (a FIFO, a device or a folder is refused before
it is opened); it is read as a stream, never into memory whole. A JPEG whose scan holds a long run
of zero bytes where its Huffman tables make that impossible (a zero-filled, partial download that
Pillow decodes to garbage without a word) gives a warning naming the file and the offset.
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import (
    ArgumentError,
    DecompressionBombError,
    EmptyImageError,
    ImageNotFoundError,
    NotAnImageError,
    TruncatedImageError,
    UnsupportedImageError,
)
from ..files import file_kind
from .limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, MAX_IMAGE_FILE_BYTES, decoded_bytes

if TYPE_CHECKING:
    import numpy as np

# Exceptions Pillow's format plugins raise on damaged data (beyond its own OSError/SyntaxError): the one list.
DECODE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    IndexError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    OverflowError,
    MemoryError,
)
ALPHA_POLICIES = ("keep", "discard")
# Modes the checkpoint processor can resize and convert to RGB.
SUPPORTED_MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr")
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")
PREMULTIPLIED = {"La": "LA", "RGBa": "RGBA"}  # loaded as their straight-alpha modes
EXIF_ORIENTATION_TAG = 0x0112
_PILLOW_LOCK = threading.Lock()


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
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> LoadedImage:
    """Return a :class:`LoadedImage` from a path, bytes, PIL image, numpy array or torch tensor.

    Arrays must be ``uint8``: numpy ``(H, W)`` or ``(H, W, 1|3|4)``; torch ``CHW`` or ``HWC``
    (a leading dimension of 1, 3 or 4 means CHW, as in SGLang's ``to_hwc_uint8``). Animated
    images give their first frame with a warning. Sizes over ``max_pixels`` pixels or ``max_bytes``
    decoded bytes are refused before any pixel is decoded.
    """
    if alpha not in ALPHA_POLICIES:
        raise ArgumentError(f"load_image: alpha must be one of {ALPHA_POLICIES}, got {alpha!r}")
    if isinstance(src, LoadedImage):
        src = src.image
    if isinstance(src, (str, Path)):
        image, source = _open_path(Path(src), max_pixels, max_bytes), str(src)
    elif isinstance(src, (bytes, bytearray, memoryview)):
        image, source = _open_bytes(bytes(src), "<bytes>", max_pixels, max_bytes), "<bytes>"
    elif isinstance(src, Image.Image):
        image, source = _from_pil(src, max_pixels), "<PIL.Image>"
    elif _is_numpy_array(src):
        image, source = _array_to_pil(src, "<numpy>", max_pixels), "<numpy>"
    elif _is_torch_tensor(src):
        image, source = _from_torch(src, max_pixels), "<torch>"
    else:
        raise UnsupportedImageError(
            f"cannot load an image from a {type(src).__name__}; expected a path, bytes, PIL.Image, "
            "numpy uint8 array or torch uint8 tensor"
        )

    orientation = _exif_orientation(image, source)
    if exif_transpose and orientation is not None:
        try:
            image = ImageOps.exif_transpose(image)
        except DECODE_ERRORS as exc:
            raise TruncatedImageError(
                f"{source}: its EXIF orientation could not be applied ({exc}); re-export the file"
            ) from exc
    image = _eight_bit(image, source)
    if image.mode in PREMULTIPLIED:  # Pillow converts premultiplied alpha to nothing else: unpremultiply first
        image = image.convert(PREMULTIPLIED[image.mode])
    if image.mode not in SUPPORTED_MODES:
        if image.mode == "F":
            raise UnsupportedImageError(
                f"{source}: image mode 'F' is not supported (32-bit floating point); expected 8-bit or 16-bit "
                "integer pixels — scale it to 0..255 (or 0..65535) and save it as an 8-bit or 16-bit image"
            )
        raise UnsupportedImageError(
            f"{source}: image mode {image.mode!r} is not supported; expected one of "
            f"{', '.join(SUPPORTED_MODES)} or a 16-bit mode; convert it to RGB first"
        )
    if alpha == "discard":
        image = image.convert("RGB")
    loader = {"exif_transpose": bool(exif_transpose), "alpha": alpha, "exif_orientation": orientation}
    return LoadedImage(image=image, source=source, loader=loader)


# --- sources ----------------------------------------------------------------------------------
def check_size(width: int, height: int, source: str, max_pixels: int) -> None:
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


def _check_bytes(image: Image.Image, source: str, max_bytes: int) -> None:
    width, height = image.size
    needed = decoded_bytes(width, height, image.mode)
    if needed > max_bytes:
        raise DecompressionBombError(
            f"{source}: image is {width}x{height} in mode {image.mode!r}, {needed} bytes once decoded, over "
            f"max_bytes={max_bytes}; downscale it first or pass a larger max_bytes if you trust the file"
        )


def open_file(path: Path) -> BinaryIO:
    """Return an open binary handle on an image file, after checking it is a regular, non-empty file within the limit.

    A FIFO, a device or a folder is refused before it is opened (so nothing can hang on it), and so is
    a file over :data:`~kimi_viz.preprocess.limits.MAX_IMAGE_FILE_BYTES`.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ImageNotFoundError(f"{path}: no such file; expected the path of an image file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ImageNotFoundError(
            f"{path}: cannot be opened ({getattr(exc, 'strerror', None) or exc}); expected the path of an image file"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise NotAnImageError(f"{path}: is {file_kind(info.st_mode)}; expected the path of an image file")
    if info.st_size == 0:
        raise NotAnImageError(f"{path}: empty file; expected image data (PNG, JPEG, ...)")
    if info.st_size > MAX_IMAGE_FILE_BYTES:
        raise DecompressionBombError(
            f"{path}: the file is {info.st_size} bytes, over the {MAX_IMAGE_FILE_BYTES}-byte limit for one "
            "image file; expected an image file (downscale or recompress it)"
        )
    try:
        return open(path, "rb")
    except OSError as exc:
        raise ImageNotFoundError(f"{path}: cannot be opened ({exc.strerror or exc}); check its permissions") from None


def read_file(path: Path) -> bytes:
    """Return the bytes of an image file, checked as :func:`open_file` checks it and read no further than the limit."""
    with open_file(path) as handle:
        return handle.read(MAX_IMAGE_FILE_BYTES + 1)[:MAX_IMAGE_FILE_BYTES]


def _open_path(path: Path, max_pixels: int, max_bytes: int = DEFAULT_MAX_BYTES) -> Image.Image:
    with open_file(path) as handle:
        return _open_stream(handle, str(path), max_pixels, max_bytes)


def _open_bytes(data: bytes, source: str, max_pixels: int, max_bytes: int = DEFAULT_MAX_BYTES) -> Image.Image:
    if not data:
        raise NotAnImageError(f"{source}: empty file; expected image data (PNG, JPEG, ...)")
    return _open_stream(io.BytesIO(data), source, max_pixels, max_bytes)


@contextmanager
def _pillow_limit_lifted() -> Iterator[None]:
    """Lift Pillow's own pixel limit while the kit's limits (checked on the header) apply instead.

    Pillow reads one process-wide ``Image.MAX_IMAGE_PIXELS`` while opening and decoding; this is the
    only place in the kit that changes it, under one lock, and it is restored on the way out.
    """
    with _PILLOW_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def open_header(
    stream: Any,
    source: str,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    formats: tuple[str, ...] | None = None,
) -> Image.Image:
    """Return an image opened from ``stream`` with only its header read, after checking its size and limits.

    ``source`` names the input in every message; ``formats`` restricts the decoders Pillow may try.
    Raises :class:`~kimi_viz.errors.NotAnImageError`, :class:`~kimi_viz.errors.TruncatedImageError`,
    :class:`~kimi_viz.errors.EmptyImageError` or :class:`~kimi_viz.errors.DecompressionBombError`.
    """
    try:
        with _pillow_limit_lifted(), warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(stream, formats=list(formats) if formats else None)
    except UnidentifiedImageError as exc:
        accepted = ", ".join(formats) if formats else "PNG, JPEG, WebP, GIF, BMP or TIFF"
        raise NotAnImageError(f"{source}: not an image Pillow can decode; expected {accepted} data") from exc
    except DECODE_ERRORS as exc:
        raise TruncatedImageError(f"{source}: the image header is damaged ({exc}); re-export the file") from exc
    check_size(image.width, image.height, source, max_pixels)
    _check_bytes(image, source, max_bytes)
    return image


def decode(image: Image.Image, source: str) -> Image.Image:
    """Return ``image`` (from :func:`open_header`) with its pixels decoded; raise TruncatedImageError if damaged."""
    try:
        with _pillow_limit_lifted():
            _warn_if_animated(image, source)
    except DECODE_ERRORS as exc:
        raise TruncatedImageError(f"{source}: the image frames are damaged ({exc}); re-export the file") from exc
    try:
        with _pillow_limit_lifted():
            image.load()
    except DECODE_ERRORS as exc:
        raise TruncatedImageError(
            f"{source}: the image data ends early or is corrupt ({exc}); re-download or re-export the file"
        ) from exc
    return image


def _open_stream(stream: Any, source: str, max_pixels: int, max_bytes: int) -> Image.Image:
    image = decode(open_header(stream, source, max_pixels=max_pixels, max_bytes=max_bytes), source)
    if image.format == "JPEG":
        _warn_if_zero_filled_jpeg(stream, source)
    return image


def _warn_if_animated(image: Image.Image, source: str) -> None:
    frames = getattr(image, "n_frames", 1)
    if frames > 1:
        warnings.warn(f"{source}: animated image with {frames} frames; using the first frame only", stacklevel=6)
        if image.tell() != 0:
            image.seek(0)


_ZERO_RUN = re.compile(b"\x00{64}")
_JPEG_CHECK_BYTES = 64 << 20  # only the first 64 MiB of a JPEG are checked for zero-filled scans


def _warn_if_zero_filled_jpeg(stream: Any, source: str) -> None:
    """Warn when a baseline JPEG's scan holds 64 zero bytes in a row although its Huffman tables cannot code them.

    Zero bits decode to (DC difference 0, end of block) only when both tables give that symbol the
    all-zero code (as optimised tables of flat images do); with any other table a run of 512 zero bits
    is not something an encoder writes — it is a zero-filled (partial) download, which Pillow decodes
    to garbage without an error.
    """
    try:
        stream.seek(0)
        data = stream.read(_JPEG_CHECK_BYTES)
        offset = _zero_filled_scan(data)
    except (OSError, ValueError, IndexError, struct.error):
        return
    if offset is not None:
        warnings.warn(
            f"{source}: the JPEG scan data holds a run of zero bytes at byte {offset}, which its Huffman tables "
            "cannot produce: the file is damaged (a partial download?) and its pixels past that point are "
            "garbage; re-download or re-export it",
            stacklevel=5,
        )


def _zero_filled_scan(data: bytes) -> int | None:
    """Return the offset of an impossible zero run in a baseline JPEG scan, else None (see above)."""
    first_symbol: dict[tuple[int, int], int] = {}
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker == 0xD9 or marker in (0xC2, 0xC3, 0xC6, 0xC7, 0xCA, 0xCB, 0xCE, 0xCF):
            return None  # the end, or a progressive / lossless frame (zero runs are normal there)
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        segment = data[pos + 4 : pos + 2 + length]
        if marker == 0xC4:  # DHT: one or more tables
            at = 0
            while at + 17 <= len(segment):
                counts = segment[at + 1 : at + 17]
                total = sum(counts)
                if total:
                    first_symbol[(segment[at] >> 4, segment[at] & 0x0F)] = segment[at + 17]
                at += 17 + total
        elif marker == 0xDA:  # SOS, then the entropy-coded data up to the next real marker
            start = pos + 2 + length
            end = start
            while True:
                end = data.find(b"\xff", end)
                if end < 0 or end + 1 >= len(data):
                    end = len(data)
                    break
                if data[end + 1] == 0 or 0xD0 <= data[end + 1] <= 0xD7:
                    end += 2
                    continue
                break
            tables = [(segment[1 + 2 * k + 1] >> 4, segment[1 + 2 * k + 1] & 0x0F) for k in range(segment[0])]
            zeros_are_flat = all(first_symbol.get((0, dc)) == 0 and first_symbol.get((1, ac)) == 0 for dc, ac in tables)
            if not zeros_are_flat:
                found = _ZERO_RUN.search(data, start, end)
                if found is not None:
                    return found.start()
            pos = end
            continue
        pos += 2 + length
    return None


def _from_pil(image: Image.Image, max_pixels: int) -> Image.Image:
    check_size(image.width, image.height, "<PIL.Image>", max_pixels)
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
    import numpy as np

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
    check_size(width, height, source, max_pixels)
    if array.ndim == 2:
        return Image.fromarray(np.ascontiguousarray(array), mode="L")
    channels = array.shape[2]
    if channels not in (3, 4):
        raise UnsupportedImageError(f"{source}: {channels} channels; expected 1 (grey), 3 (RGB) or 4 (RGBA)")
    return Image.fromarray(np.ascontiguousarray(array), mode="RGB" if channels == 3 else "RGBA")


def _is_numpy_array(obj: Any) -> bool:
    """Return True for a numpy array, without importing numpy: an array exists only once numpy is loaded."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray)


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


def _exif_orientation(image: Image.Image, source: str = "<image>") -> int | None:
    """Return the EXIF orientation (1..8), or None when absent; a value that is text, out of range or
    unreadable is ignored with a warning (as Pillow's ``exif_transpose`` ignores it)."""
    try:
        value = image.getexif().get(EXIF_ORIENTATION_TAG)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not stop loading
        return None
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 8:
        return value
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    warnings.warn(
        f"{source}: EXIF orientation {shown} is not an integer from 1 to 8; ignored (the image is used as stored)",
        stacklevel=4,
    )
    return None


_SIXTEEN_BIT_BAND_PIXELS = 1 << 22  # pixels converted at a time


def sixteen_bit_to_l(image: Image.Image) -> Image.Image:
    """Return an 8-bit ``L`` image from a 16/32-bit integer image: ``clip(v, 0, 65535) >> 8``.

    A band of rows at a time: memory beyond the source and the result stays a few MiB.
    """
    import numpy as np

    width, height = image.size
    out = Image.new("L", (width, height))
    rows = max(1, _SIXTEEN_BIT_BAND_PIXELS // max(1, width))
    for y0 in range(0, height, rows):
        y1 = min(height, y0 + rows)
        band = image.crop((0, y0, width, y1))
        if band.mode.startswith("I;16"):
            levels = (np.asarray(band) >> 8).astype(np.uint8)  # uint16 (numpy follows the byte order)
        else:
            values = np.asarray(band if band.mode == "I" else band.convert("I"))  # int32
            levels = (np.clip(values, 0, 65535) >> 8).astype(np.uint8)
        out.paste(Image.fromarray(levels, mode="L"), (0, y0))
    return out


def _eight_bit(image: Image.Image, source: str) -> Image.Image:
    if image.mode in SIXTEEN_BIT_MODES:
        return sixteen_bit_to_l(image)
    return image
