"""The images of one request, read from their headers: size, mode, transparency and a content digest.

Which items SGLang builds depends only on each image's width, height, mode and transparency (and, for
duplicates, its bytes), all of which PIL reads from the header without decoding the pixels.
:func:`probe_image` does just that; :meth:`RequestImage.pixels` decodes with the kit's
:func:`~kimi_viz.preprocess.images.load_image` only when pixels are asked for.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from ..errors import (
    DecompressionBombError,
    EmptyImageError,
    ImageNotFoundError,
    NotAnImageError,
    TruncatedImageError,
    WhatIfError,
)
from ..preprocess.images import DEFAULT_MAX_PIXELS, SIXTEEN_BIT_MODES, load_image


@dataclass(frozen=True)
class RequestImage:
    """One image of a request as SGLang's loader sees it (no pixels decoded)."""

    label: str
    width: int
    height: int
    mode: str  # PIL mode after the kit's 16-bit rule (16-bit images read as L)
    has_alpha: bool  # an A band or a transparency entry (what to_chw_uint8 and the byte rule test)
    digest: str  # SHA-256 of the bytes: equal bytes are one item after SGLang's dedup by hash
    data: bytes = field(repr=False, compare=False, default=b"")

    @property
    def size(self) -> tuple[int, int]:
        """Return ``(width, height)``."""
        return self.width, self.height

    def channels(self, *, discard_alpha: bool = False) -> int:
        """Return the channels SGLang stages (``to_chw_uint8``): 4 with alpha on a non-RGB image, else 3."""
        return 4 if self.has_alpha and not discard_alpha and self.mode != "RGB" else 3

    def pixels(self, *, discard_alpha: bool = False) -> Image.Image:
        """Return the decoded PIL image (alpha dropped by ``convert("RGB")`` when ``discard_alpha``, as in EPD)."""
        return load_image(self.data, alpha="discard" if discard_alpha else "keep").image

    def to_json(self) -> dict[str, Any]:
        """Return ``{"label", "size", "mode", "has_alpha", "digest"}``."""
        return {
            "label": self.label,
            "size": [self.width, self.height],
            "mode": self.mode,
            "has_alpha": self.has_alpha,
            "digest": self.digest[:16],
        }


def _read(src: Any) -> tuple[bytes, str]:
    if isinstance(src, RequestImage):
        return src.data, src.label
    if isinstance(src, (str, Path)):
        path = Path(src)
        if not path.exists():
            raise ImageNotFoundError(f"{path}: no such file; expected the path of an image file")
        if path.is_dir():
            raise NotAnImageError(f"{path}: is a folder; expected the path of an image file")
        return path.read_bytes(), path.name
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src), "<bytes>"
    if isinstance(src, Image.Image):
        buffer = io.BytesIO()
        src.save(buffer, format="PNG")
        return buffer.getvalue(), "<PIL.Image>"
    raise WhatIfError(f"image: expected a path, bytes or a PIL image, got {type(src).__name__}")


def probe_image(src: Any, *, label: str | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> RequestImage:
    """Return the :class:`RequestImage` of a path, bytes or PIL image, reading only its header."""
    if isinstance(src, RequestImage):
        return src
    data, name = _read(src)
    name = label or name
    if not data:
        raise NotAnImageError(f"{name}: empty file; expected image data (PNG, JPEG, ...)")
    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            image = Image.open(io.BytesIO(data))
        width, height, mode = image.width, image.height, image.mode
        alpha = "A" in image.getbands() or "transparency" in image.info
    except UnidentifiedImageError as exc:
        raise NotAnImageError(
            f"{name}: not an image Pillow can decode; expected PNG, JPEG, WebP, GIF, BMP or TIFF data"
        ) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise TruncatedImageError(f"{name}: the image header is damaged ({exc}); re-export the file") from exc
    finally:
        Image.MAX_IMAGE_PIXELS = saved
    if width <= 0 or height <= 0:
        raise EmptyImageError(f"{name}: image is {width}x{height}; expected a positive width and height")
    if width * height > max_pixels:
        raise DecompressionBombError(
            f"{name}: image is {width}x{height} = {width * height} pixels, over max_pixels={max_pixels}; "
            "downscale it first or pass a larger max_pixels if you trust the file"
        )
    if mode in SIXTEEN_BIT_MODES:
        mode = "L"
    digest = hashlib.sha256(data).hexdigest()
    return RequestImage(name, width, height, mode, alpha, digest, data)


def image_sources(names: Any) -> list[Any]:
    """Return each source as given, except a name that is no file but a sample image's, which becomes its path."""
    from ..data import images_dir

    items = [names] if isinstance(names, (str, Path)) else list(names)
    out: list[Any] = []
    for item in items:
        if isinstance(item, (str, Path)) and not Path(item).exists() and (images_dir() / str(item)).is_file():
            item = images_dir() / str(item)
        out.append(item)
    return out


def probe_images(sources: Any) -> list[RequestImage]:
    """Return the :class:`RequestImage` of every source; raise WhatIfError when there are none."""
    items = list(sources) if not isinstance(sources, (str, bytes, Path)) else [sources]
    if not items:
        raise WhatIfError("images: the request carries no images; pass at least one image file")
    return [probe_image(s) for s in items]


__all__ = ["RequestImage", "probe_image", "probe_images", "image_sources"]
