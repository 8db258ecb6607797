"""The images of one request, read from their headers: size, mode, transparency and a content digest.

Which items SGLang builds depends only on each image's width, height, mode and transparency (and, for
duplicates, its bytes), all of which PIL reads from the header without decoding the pixels.
:func:`probe_image` does just that; :meth:`RequestImage.pixels` decodes with the kit's
:func:`~kimi_viz.preprocess.images.load_image` only when pixels are asked for.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from PIL import Image

from .._records import frozen
from ..data import images_dir
from ..errors import DecompressionBombError, NotAnImageError, WhatIfError
from ..preprocess.images import SIXTEEN_BIT_MODES, check_size, has_alpha, load_image, open_header, read_file
from ..preprocess.limits import DEFAULT_MAX_PIXELS

#: The most bytes one ``data:`` URL may decode to (checked on its length, before decoding).
MAX_DATA_URL_BYTES = 48 << 20


@frozen
class RequestImage:
    """One image of a request as SGLang's loader sees it (no pixels decoded)."""

    label: str
    width: int
    height: int
    mode: str  # PIL mode after the kit's 16-bit rule (16-bit images read as L)
    has_alpha: bool  # an A band or a transparency entry (what to_chw_uint8 and the byte rule test)
    digest: str  # SHA-256 of the bytes: equal bytes are one item after SGLang's dedup by hash
    data: bytes = field(repr=False, compare=False, default=b"")
    decoded: Image.Image | None = field(repr=False, compare=False, default=None)  # pixels already in memory

    @property
    def size(self) -> tuple[int, int]:
        """Return ``(width, height)``."""
        return self.width, self.height

    def channels(self, *, discard_alpha: bool = False) -> int:
        """Return the channels SGLang stages (``to_chw_uint8``): 4 with alpha on a non-RGB image, else 3."""
        return 4 if self.has_alpha and not discard_alpha and self.mode != "RGB" else 3

    def pixels(self, *, discard_alpha: bool = False) -> Image.Image:
        """Return the decoded ``PIL.Image.Image`` (with ``discard_alpha``, converted to RGB as EPD does)."""
        source = self.decoded if self.decoded is not None else self.data
        image = load_image(source, alpha="discard" if discard_alpha else "keep").image
        return image if type(image) is Image.Image else image.copy()  # detached from the file it was read from

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
        return read_file(path), path.name
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src), "<bytes>"
    raise WhatIfError(f"image: expected a path, bytes or a PIL image, got {type(src).__name__}")


def probe_image(src: Any, *, label: str | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> RequestImage:
    """Return the :class:`RequestImage` of a path, bytes or PIL image, reading only its header."""
    if isinstance(src, RequestImage):
        return src
    if isinstance(src, Image.Image):
        check_size(src.width, src.height, label or "<PIL.Image>", max_pixels)
        return as_request_image(src, label=label)
    data, name = _read(src)
    name = label or name
    if not data:
        raise NotAnImageError(f"{name}: empty file; expected image data (PNG, JPEG, ...)")
    image = open_header(io.BytesIO(data), name, max_pixels=max_pixels)
    width, height, mode = image.width, image.height, image.mode
    alpha = has_alpha(image)
    if mode in SIXTEEN_BIT_MODES:
        mode = "L"
    digest = hashlib.sha256(data).hexdigest()
    return RequestImage(name, width, height, mode, alpha, digest, data)


def decode_data_url(url: str, *, label: str, max_bytes: int = MAX_DATA_URL_BYTES) -> RequestImage:
    """Return the :class:`RequestImage` of a base64 ``data:`` URL (``data:image/png;base64,...``).

    The payload's length is checked against ``max_bytes`` before anything is decoded; the bytes then go
    through :func:`probe_image` (the same header limits and errors as a file). ``label`` names the URL in
    every message (the URL itself may be megabytes long).
    """
    head, comma, payload = url.partition(",")
    if not head.lower().startswith("data:") or not comma:
        raise NotAnImageError(f"{label}: not a data: URL; expected data:image/<type>;base64,<bytes>")
    if not head.lower().endswith(";base64"):
        raise NotAnImageError(
            f"{label}: a data: URL without ;base64 ({head[:40]!r}); expected data:image/<type>;base64,<bytes> "
            "(SGLang decodes data: URLs as base64)"
        )
    if (len(payload) // 4) * 3 > max_bytes:
        raise DecompressionBombError(
            f"{label}: the data: URL holds about {(len(payload) // 4) * 3} bytes, over the {max_bytes}-byte limit "
            "for one image; save the image to a file and pass its path"
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise NotAnImageError(
            f"{label}: the data: URL is not valid base64; expected data:image/<type>;base64,<bytes>"
        ) from None
    return probe_image(data, label=label)


def as_request_image(source: Any, *, label: str | None = None) -> RequestImage:
    """Return a :class:`RequestImage` for a sample name, path, bytes, decoded PIL image or RequestImage.

    A PIL image is taken as it is, with no round trip through an encoder: its digest is that of its pixels.
    """
    if isinstance(source, RequestImage):
        return source if label is None else replace(source, label=label)
    if isinstance(source, Image.Image):
        mode = "L" if source.mode in SIXTEEN_BIT_MODES else source.mode
        alpha = has_alpha(source)
        digest = hashlib.sha256(f"{source.mode}{source.size}".encode() + source.tobytes()).hexdigest()
        return RequestImage(label or "<PIL.Image>", source.width, source.height, mode, alpha, digest, decoded=source)
    return probe_image(image_sources([source])[0], label=label)


def image_sources(names: Any) -> list[Any]:
    """Return each source as given, except a name that is no file but a sample image's, which becomes its path."""
    items = [names] if isinstance(names, (str, Path)) else list(names)
    out: list[Any] = []
    for item in items:
        if isinstance(item, (str, Path)) and not Path(item).exists() and (images_dir() / str(item)).is_file():
            item = images_dir() / str(item)
        out.append(item)
    return out


def resolve_image(name: str, folder: Path | None) -> Any:
    """Return the path a request file names: relative to the file's ``folder`` when the image is there, else
    as :func:`image_sources` takes it (a path as given, or a sample image's name)."""
    path = Path(name)
    if not path.is_absolute() and folder is not None and (folder / path).exists():
        return folder / path
    return image_sources([name])[0]


def probe_images(sources: Any) -> list[RequestImage]:
    """Return the :class:`RequestImage` of every source (path, sample name, bytes, PIL image); WhatIfError if none."""
    items = list(sources) if not isinstance(sources, (str, bytes, Path)) else [sources]
    if not items:
        raise WhatIfError("images: the request carries no images; pass at least one image file")
    return [as_request_image(s) for s in items]


__all__ = [
    "MAX_DATA_URL_BYTES",
    "RequestImage",
    "probe_image",
    "probe_images",
    "resolve_image",
    "decode_data_url",
    "image_sources",
    "as_request_image",
]
