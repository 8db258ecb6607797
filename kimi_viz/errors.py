"""Every exception the kit raises on bad input.

All of them derive from :class:`KimiVizError`, so a caller (and the CLI, which turns them into
exit code 2 with a one-line message) can catch the kit's own errors without catching bugs.
Each message names the input, says what was expected, and what to do about it.
"""

from __future__ import annotations


class KimiVizError(Exception):
    """Base class: a bad input or an unusable environment, reported with a clear message."""


class ArgumentError(KimiVizError, ValueError, TypeError):
    """An argument a kit function was given has the wrong type or value; the message names it and what it takes."""


# --- images -------------------------------------------------------------------------------
class ImageLoadError(KimiVizError, ValueError):
    """An image could not be turned into pixels."""


class ImageNotFoundError(ImageLoadError, FileNotFoundError):
    """The path given for an image does not exist."""


class NotAnImageError(ImageLoadError):
    """The bytes are not in any image format Pillow can decode."""


class TruncatedImageError(ImageLoadError):
    """The file starts like an image but ends early."""


class EmptyImageError(ImageLoadError):
    """The image has zero width or height."""


class DecompressionBombError(ImageLoadError):
    """The image has more pixels than the ``max_pixels`` limit allows."""


class UnsupportedImageError(ImageLoadError):
    """The image mode, channel count or array dtype cannot be processed."""


# --- configuration and checkpoints ---------------------------------------------------------
class ConfigError(KimiVizError, ValueError):
    """A processor or model configuration value is missing or invalid (the message names the key)."""


class CheckpointError(KimiVizError):
    """A local checkpoint folder is missing files or tensors, or holds tensors of the wrong shape."""


class TokenizerError(CheckpointError, ValueError):
    """A checkpoint's tokenizer files cannot be read the way its own ``TikTokenTokenizer`` reads them."""


class DeviceError(KimiVizError, RuntimeError):
    """The requested device (e.g. ``cuda``) is not available."""


# --- row accounting ------------------------------------------------------------------------
class RowCountError(KimiVizError, ValueError):
    """``pixel_values`` rows do not fit the grids; the message names the first image that does not fit."""


class LayoutLookupError(RowCountError, IndexError):
    """A row, token, image or patch index that lies outside the layout."""


# --- manifests, scenarios, capture -----------------------------------------------------------
class ManifestError(KimiVizError, ValueError):
    """A manifest is malformed or unsafe; ``json_path`` names the offending field when known."""

    def __init__(self, message: str, *, json_path: str | None = None):
        super().__init__(f"{json_path}: {message}" if json_path else message)
        self.json_path = json_path


class ScenarioError(KimiVizError, KeyError):
    """An unknown scenario name was asked for."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class OutputError(KimiVizError, ValueError):
    """An output path is a link, a file, lies under a file, or cannot be written."""


class CaptureError(KimiVizError):
    """``kimi-viz capture`` was given nothing to run (the shim itself never raises into the process)."""


# --- what-if questions about a deployment ----------------------------------------------------------
class WhatIfError(KimiVizError, ValueError):
    """A ``kimi-viz whatif`` request or its server settings are empty, out of range or contradictory."""


class SettingNotInReleaseError(WhatIfError):
    """A server setting names a flag or value the chosen SGLang release does not accept."""


# --- the user's own deployment as input ------------------------------------------------------------
class ServerInputError(KimiVizError, ValueError):
    """A server's launch command (``--server``) or log (``--server-log``) cannot be read: the message names it."""
