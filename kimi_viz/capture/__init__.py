"""Capture failing ``get_image_feature`` calls from a live SGLang process.

:mod:`.hook` is the start-up part (the import hook, wrapping the method and the forward path's
``get_embedding_and_mask``, :func:`patch`); it is imported in every Python process under
``kimi-viz capture``, so this package imports nothing else eagerly. :mod:`.record` (SGLang items to the
kit's batch, the manifest written), :mod:`.context` (the forward context of a call) and :mod:`.run`
(running a command under capture) are imported on first use of one of their names.
"""

from .._lazy import lazy_exports
from .hook import (
    ENV_ALL,
    ENV_DIR,
    ENV_PACKAGE_ROOT,
    ENV_REDACT,
    ENV_TP_RANK,
    ENV_TP_SIZE,
    FORWARD_FUNCTION,
    FORWARD_MODULES,
    TARGET_CLASS,
    TARGET_METHOD,
    TARGET_MODULE,
    WRAPPED_ATTR,
    CaptureSession,
    ForwardCall,
    KimiK3ImportHook,
    install_from_environment,
    install_import_hook,
    log,
    patch,
    running_forward,
    unwrap_forward_function,
    unwrap_method,
    wrap_forward_function,
    wrap_method,
    wrap_module,
)

_LAZY = {
    "item_from_sglang": "record",
    "batch_from_call": "record",
    "record_call": "record",
    "context_from_call": "context",
    "capture_environment": "run",
    "run_captured": "run",
    "captured_manifests": "run",
    "shim_dir": "run",
}

__all__ = [
    "ENV_ALL",
    "ENV_DIR",
    "ENV_PACKAGE_ROOT",
    "ENV_REDACT",
    "ENV_TP_RANK",
    "ENV_TP_SIZE",
    "FORWARD_FUNCTION",
    "FORWARD_MODULES",
    "TARGET_CLASS",
    "TARGET_METHOD",
    "TARGET_MODULE",
    "WRAPPED_ATTR",
    "CaptureSession",
    "ForwardCall",
    "KimiK3ImportHook",
    "install_from_environment",
    "install_import_hook",
    "log",
    "patch",
    "running_forward",
    "unwrap_forward_function",
    "unwrap_method",
    "wrap_forward_function",
    "wrap_method",
    "wrap_module",
    *_LAZY,  # lazily, from .record, .context and .run
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
