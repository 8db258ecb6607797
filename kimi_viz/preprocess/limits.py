"""The image limits every image opener of the kit applies, in one place (light: the manifest reader uses them).

All are checked on an image's header, before any pixel is decoded: ``DEFAULT_MAX_PIXELS`` (width x
height), ``DEFAULT_MAX_BYTES`` (the decoded buffer: width x height x :data:`MODE_BYTES`, 4 for any
mode not listed) and ``MAX_IMAGE_FILE_BYTES`` (one encoded image file, on disk or in a manifest).
"""

from __future__ import annotations

DEFAULT_MAX_PIXELS = 2**28
DEFAULT_MAX_BYTES = 2**29  # the decoded buffer: a 16-bit image at the pixel limit fits, a 32-bit one does not
MAX_IMAGE_FILE_BYTES = 2**28  # one encoded image file (on disk or in a manifest)
# Bytes per pixel of Pillow's decoded buffer, by mode (any other mode: 4).
MODE_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2, "BGR;16": 2, "BGR;15": 2}


def decoded_bytes(width: int, height: int, mode: str) -> int:
    """Return the bytes Pillow's buffer takes for a ``width`` x ``height`` image of ``mode`` once decoded."""
    return width * height * MODE_BYTES.get(mode, 4)


__all__ = ["DEFAULT_MAX_PIXELS", "DEFAULT_MAX_BYTES", "MAX_IMAGE_FILE_BYTES", "MODE_BYTES", "decoded_bytes"]
