"""The names a captured process and the recorder share: what is wrapped, the environment settings, the log.

Imported at interpreter start-up in every process under ``kimi-viz capture``: it imports only ``sys``.
"""

from __future__ import annotations

import sys

TARGET_MODULE = "sglang.srt.models.kimi_k3"
TARGET_CLASS = "KimiK3ForConditionalGeneration"
TARGET_METHOD = "get_image_feature"

# The function on the forward path that knows the prefill batch: it is wrapped where SGLang looks it up
# (mm_utils from 0.5.17; mm_schedule defines it from 0.5.18 and mm_utils imports it by name).
FORWARD_MODULES = ("sglang.srt.managers.mm_schedule", "sglang.srt.managers.mm_utils")
FORWARD_FUNCTION = "get_embedding_and_mask"

ENV_DIR = "KIMI_VIZ_CAPTURE_DIR"
ENV_REDACT = "KIMI_VIZ_CAPTURE_REDACT"
ENV_ALL = "KIMI_VIZ_CAPTURE_ALL"
ENV_PACKAGE_ROOT = "KIMI_VIZ_CAPTURE_PACKAGE_ROOT"
ENV_TP_SIZE = "KIMI_VIZ_ATTN_TP_SIZE"
ENV_TP_RANK = "KIMI_VIZ_ATTN_TP_RANK"

WRAPPED_ATTR = "__kimi_viz_capture_original__"


def log(message: str) -> None:
    """Print one capture message to stderr (never raises)."""
    try:
        print(f"kimi-viz capture: {message}", file=sys.stderr, flush=True)
    except Exception:  # pragma: no cover - a closed stderr must not break the server
        pass
