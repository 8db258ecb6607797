"""Turning one SGLang ``get_image_feature`` call into the kit's :class:`~kimi_viz.split.batch.Batch`, and writing it.

:func:`item_from_sglang` reads one ``MultimodalDataItem`` (both grid keys, the deferred config, the
``encoder_local_preprocessed`` flag, the feature); :func:`batch_from_call` adds what the running
process knows (attention TP, the SGLang release, the code path read from SGLang's source, the
checkpoint processor's config, the call's outcome, and the forward context around the call from
:mod:`.context`); :func:`record_call` writes it as a manifest.
Imported only when a call is recorded, never at start-up (see :mod:`kimi_viz.capture.hook`).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import os
import sys
import threading
import time
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .. import __version__
from ..manifest import DTYPES, jsonable, write_manifest
from ..releases import CodePath, PathSource
from ..split.batch import DEFERRED_KEY, GRID_KEYS, Batch, Feature, Item, RecordedOutcome
from ..split.cause import ErrorInfo
from .context import context_from_call
from .names import ENV_TP_RANK, ENV_TP_SIZE, TARGET_MODULE, log

_counter = itertools.count()
_counter_lock = threading.Lock()


def _model_data(item: Any) -> dict:
    data = getattr(item, "__dict__", {}).get("model_specific_data")
    if data is None:
        try:
            data = getattr(item, "model_specific_data", None)
        except Exception:
            data = None
    return data if isinstance(data, dict) else {}


def _item_value(item: Any, data: dict, key: str) -> Any:
    if key in data:
        return data[key]
    return getattr(item, "__dict__", {}).get(key)


def _grid_rows(value: Any) -> list[list[int]] | None:
    value = jsonable(value)
    if value is None:
        return None
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        value = [value]
    return [[int(v) for v in row] for row in value]


def _tensor_layout(tensor: Any) -> str:
    shape = tuple(tensor.shape)
    if len(shape) == 5:
        return "stacked"
    if str(tensor.dtype) != "torch.uint8":
        return "patches"
    if len(shape) == 3 and shape[0] not in (1, 2, 3, 4) and shape[-1] in (1, 2, 3, 4):
        return "hwc"
    return "chw"


def _feature_of(value: Any, backend: str | None):
    """Return a kit Feature for an SGLang item's feature (PIL image, tensor, array, or anything else)."""
    import torch
    from PIL import Image

    if isinstance(value, Image.Image):
        return Feature.from_image(value.copy())  # copy() loads the pixels and copies .info
    if value is not None and not isinstance(value, torch.Tensor) and hasattr(value, "__array__"):
        import numpy as np

        try:
            value = torch.from_numpy(np.asarray(value))
        except Exception:  # an array torch cannot hold: recorded by its shape below
            pass
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        layout = _tensor_layout(tensor)
        dtype = str(tensor.dtype).replace("torch.", "")
        if dtype not in DTYPES:
            return Feature.shape_only(layout, tuple(tensor.shape), "unknown")
        return Feature.from_tensor(tensor.contiguous(), layout)
    shape = tuple(int(s) for s in getattr(value, "shape", ()) or ())
    layout = "image" if backend == "cpu" else "chw" if backend == "gpu" else "patches"
    return Feature.shape_only(layout, shape, "unknown")


def item_from_sglang(item: Any, index: int):
    """Return the kit :class:`~kimi_viz.split.batch.Item` for one SGLang ``MultimodalDataItem``."""
    data = _model_data(item)
    found = {key: _grid_rows(_item_value(item, data, key)) for key in GRID_KEYS}
    grids = {key: rows for key, rows in found.items() if rows is not None}
    deferred = jsonable(_item_value(item, data, DEFERRED_KEY))
    backend = deferred.get("backend") if isinstance(deferred, dict) else None
    local = bool(_item_value(item, data, "encoder_local_preprocessed") or False)
    feature = _feature_of(getattr(item, "feature", None), backend)
    original_size = None
    shape = feature.shape
    if deferred is not None and len(shape) == 3 and feature.layout in ("image", "hwc"):
        original_size = (shape[1], shape[0])
    elif deferred is not None and len(shape) == 3 and feature.layout == "chw":
        original_size = (shape[2], shape[1])
    return Item(
        grids=grids,
        feature=feature,
        deferred=deferred,
        local_preprocessed=local,
        original_size=original_size,
        label=f"item {index}",
    )


def _attention_tp(model: Any) -> tuple[int, int | None, str]:
    """Return ``(attn_tp_size, attn_tp_rank, where it came from)`` for the running process."""
    if model is not None and getattr(model, "use_data_parallel", True) is False:
        return 1, None, "use_data_parallel is off: every rank materializes every image"

    def from_dp_attention():
        from sglang.srt.layers import dp_attention

        return dp_attention.get_attention_tp_size(), dp_attention.get_attention_tp_rank()

    def from_runtime_context():
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        return parallel.attn_tp_size, parallel.attn_tp_rank

    for probe in (from_dp_attention, from_runtime_context):
        try:
            size, rank = probe()
            return int(size), int(rank), f"sglang {probe.__name__.replace('from_', '')}"
        except Exception:
            continue
    size = os.environ.get(ENV_TP_SIZE)
    rank = os.environ.get(ENV_TP_RANK)
    if size:
        try:
            return int(size), (int(rank) if rank else None), f"${ENV_TP_SIZE}"
        except ValueError:
            pass
    return 1, None, "unknown (assumed 1; pass --tp to triage)"


def _sglang_version() -> str | None:
    try:
        return version("sglang")
    except Exception:
        module = sys.modules.get("sglang")
        value = getattr(module, "__version__", None)
        return str(value) if value else None


def _code_path(function: Any) -> tuple[CodePath, PathSource, str]:
    """Return ``(code path, "detected" | "assumed", how it was found)`` from SGLang's ``get_image_feature`` source.

    0.5.19 and later map backend-group positions through ``global_indices`` (post-fix); 0.5.18 has the
    deferred split (``DEFERRED_PREPROCESSING_KEY``) without it (pre-fix); 0.5.17 has neither and
    requires every feature to be a tensor (no-split). The method's own source decides; the module's
    source is read only when the method's cannot be.
    """
    text = ""
    with contextlib.suppress(Exception):
        text = inspect.getsource(function)
    if not text:
        module = sys.modules.get(TARGET_MODULE)
        with contextlib.suppress(Exception):
            text = inspect.getsource(module) if module is not None else ""
    if "global_indices" in text:
        return "post-fix", PathSource.DETECTED, "detected: SGLang maps shard-local indices through global_indices"
    if "DEFERRED_PREPROCESSING_KEY" in text or "kimi_k3_deferred_preprocessing" in text:
        return "pre-fix", PathSource.DETECTED, "detected: deferred split without global_indices"
    if "must be a torch.Tensor" in text:
        return "no-split", PathSource.DETECTED, "detected: no deferred split (every feature must be a tensor)"
    return "post-fix", PathSource.ASSUMED, "not detected from the source; the recorded SGLang version decides"


def _processor_config(model: Any) -> dict | None:
    """Return the ``media_proc_cfg`` of the model's checkpoint image processor as plain JSON, or None."""
    for name in ("_encoder_image_processor", "image_processor", "_image_processor"):
        processor = getattr(model, name, None) if model is not None else None
        config = getattr(processor, "media_proc_cfg", None)
        if isinstance(config, dict):
            return jsonable(config)
    return None


def batch_from_call(
    model: Any, items: list, *, error: BaseException | None = None, function: Any = None, forward: Any = None
):
    """Return a :class:`~kimi_viz.split.batch.Batch` describing one ``get_image_feature(items)`` call.

    ``batch.recorded`` is the call's outcome: ``"error"`` with ``ErrorInfo(type(error).__name__, str(error))``
    when it raised ``error``, else ``RecordedOutcome("ok")`` (a passing call recorded with ``--all``).
    ``forward`` is the running ``get_embedding_and_mask`` the call was made in
    (:func:`~kimi_viz.capture.hook.running_forward`); ``batch.forward_context`` is what it tells
    (:func:`~kimi_viz.capture.context.context_from_call`), None when there is none.
    """
    size, rank, tp_source = _attention_tp(model)
    code_path, path_source, how = _code_path(function)
    processor = _processor_config(model)
    context = context_from_call(forward, items)
    outcome = "ok" if error is None else f"{type(error).__name__}: {error}"
    note = (
        f"captured in pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}; outcome: {outcome}; "
        f"attention TP from {tp_source}; code path {how}"
        + ("" if processor is not None else "; the model's checkpoint-processor config was not found")
        + ("" if context is None else f"; forward context: {context.summary()}")
    )
    return Batch(
        items=[item_from_sglang(item, i) for i, item in enumerate(items)],
        processor=processor,
        attn_tp_size=size,
        attn_tp_rank=rank,
        sglang_version=_sglang_version(),
        code_path=code_path,
        code_path_source=path_source,
        recorded=(
            RecordedOutcome("ok")
            if error is None
            else RecordedOutcome("error", ErrorInfo(type(error).__name__, str(error)))
        ),
        note=note,
        created_by=f"kimi-viz {__version__} capture",
        forward_context=context,
    )


def _new_folder(out_dir: Path) -> Path:
    """Return a new, empty folder under ``out_dir`` named by time, pid and a counter."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    while True:
        with _counter_lock:
            count = next(_counter)
        folder = out_dir / f"{stamp}-pid{os.getpid()}-{count:04d}"
        with contextlib.suppress(FileExistsError):  # taken meanwhile: try the next count
            folder.mkdir()
            return folder


def record_call(
    model: Any,
    items: Any,
    out_dir: str | os.PathLike,
    *,
    redact: bool = False,
    error: BaseException | None = None,
    function: Any = None,
    forward: Any = None,
) -> Path | None:
    """Write a manifest of one call's items to a new folder under ``out_dir``; return it (None on failure).

    Never raises: a failure to capture is logged to stderr, so it can never mask the call's own error.
    ``forward``: the running ``get_embedding_and_mask`` (see :func:`batch_from_call`).
    """
    try:
        batch = batch_from_call(model, list(items), error=error, function=function, forward=forward)
        folder = _new_folder(Path(out_dir))
        try:
            write_manifest(batch, folder, redact=redact)
        except Exception as exc:  # still keep what we can: without the forward context, else the unvalidated JSON
            problem: Exception | None = exc
            if batch.forward_context is not None:
                log(f"manifest did not validate ({exc}); writing it without the forward context")
                batch.forward_context = None
                try:
                    write_manifest(batch, folder, redact=redact)
                    problem = None
                except Exception as again:
                    problem = again
            if problem is not None:
                log(f"manifest did not validate ({problem}); writing it unchecked")
                write_manifest(batch, folder, redact=redact, check=False)
        if error is not None:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            (folder / "traceback.txt").write_text(text, encoding="utf-8")
        log(f"wrote {folder}" + (f" ({type(error).__name__}: {error})" if error is not None else ""))
        return folder
    except BaseException as exc:
        log(f"could not write a manifest ({type(exc).__name__}: {exc}); the original behaviour is unchanged")
        return None
