"""How a what-if ends: the verdict's status, or that nothing reached the call, or that the release refuses."""

from __future__ import annotations

from enum import Enum

from ..split.verdict import Status


class WhatIfStatus(str, Enum):
    """How one what-if ends: its verdict's status, or that nothing reached the call, or that the release refuses."""

    CLEAN = Status.CLEAN.value
    ERROR_REPRODUCED = Status.ERROR_REPRODUCED.value
    SILENT_MISMATCH = Status.SILENT_MISMATCH.value
    NO_CALL = "no-call"  # every image was a cache hit or a duplicate: get_image_feature is never called
    NOT_APPLICABLE = "not-applicable"  # (a sweep cell) the release refuses one of the settings


__all__ = ["WhatIfStatus"]
