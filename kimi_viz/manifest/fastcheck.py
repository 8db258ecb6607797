"""The fast path of manifest validation: items that certainly follow the schema, checked in plain Python.

``jsonschema`` costs about half a millisecond per item; a manifest of thousands of items spent seconds
there. :func:`item_is_plainly_valid` accepts only what the item schema of ``manifest-v1.schema.json``
accepts *and* what carries no unknown key: it is a strict subset of the schema, so an item it accepts
needs no further check, and every other item (anything unusual, wrong or extra) still goes through
``jsonschema`` for the exact error message and the warnings. :func:`document_is_plainly_valid` does the
same for everything around the items (format, version, source, runtime, processor, extra,
forward_context), so a manifest whose every part is plain never imports ``jsonschema`` at all (about
0.2 s at start-up).
``tests/test_hostile_scale.py`` fuzzes the first against the schema, ``tests/test_manifest_fastcheck.py``
the second.
"""

from __future__ import annotations

import math
from typing import Any

from .format import (
    CONTEXT_IMAGE_STATUSES,
    MAX_CONTEXT_ENTRIES,
    SHAPE_ONLY_DTYPES,
    SHAPE_ONLY_LAYOUTS,
    TENSOR_DTYPES,
    TENSOR_LAYOUTS,
)

COUNT_MAX = 2147483647
_FEATURE_KEYS = {
    "image": ({"kind", "file"}, set()),
    "tensor": ({"kind", "file", "key", "shape", "dtype"}, {"layout"}),
    "shape_only": ({"kind", "layout", "shape", "dtype"}, set()),
}
_ITEM_KEYS = {"grids", "feature", "deferred", "local_preprocessed", "original_size", "label"}
_DEFERRED_KEYS = {"backend", "image_mean", "image_std", "transparent_bg_config", "resize_config"}
_RESIZE_REQUIRED = {"new_width", "new_height", "pad_width", "pad_height"}
_BG_KEYS = {
    "pattern",
    "chessboard_square_size",
    "chessboard_square_on_top_left",
    "chessboard_white_value",
    "chessboard_gray_value",
}


def _int(value: Any) -> bool:
    return type(value) is int


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= COUNT_MAX


def _number(value: Any) -> bool:
    return (type(value) is int) or (type(value) is float and math.isfinite(value))


def _string(value: Any, low: int = 0, high: int | None = None) -> bool:
    return type(value) is str and len(value) >= low and (high is None or len(value) <= high)


def _rgb(value: Any) -> bool:
    return type(value) is list and len(value) == 3 and all(_number(v) for v in value)


def _grid_rows(value: Any) -> bool:
    return type(value) is list and all(
        type(row) is list and len(row) == 3 and all(_count(v) for v in row) for row in value
    )


def _shape(value: Any) -> bool:
    return type(value) is list and len(value) <= 8 and all(_count(v) for v in value)


def _feature(value: Any) -> bool:
    if type(value) is not dict:
        return False
    kind = value.get("kind")
    if type(kind) is not str or kind not in _FEATURE_KEYS:
        return False
    required, optional = _FEATURE_KEYS[kind]
    keys = set(value)
    if not required <= keys or not keys <= required | optional:
        return False
    if kind == "image":
        return _string(value["file"], 1, 255)
    if kind == "tensor":
        return (
            _string(value["file"], 1, 255)
            and _string(value["key"], 1, 255)
            and _shape(value["shape"])
            and value["dtype"] in TENSOR_DTYPES
            and ("layout" not in value or value["layout"] in TENSOR_LAYOUTS)
        )
    return value["layout"] in SHAPE_ONLY_LAYOUTS and _shape(value["shape"]) and value["dtype"] in SHAPE_ONLY_DTYPES


def _background(value: Any) -> bool:
    if value is None:
        return True
    if type(value) is not dict or not set(value) <= _BG_KEYS:
        return False
    if "pattern" in value and value["pattern"] not in ("white", "black", "gray", "chessboard"):
        return False
    square = value.get("chessboard_square_size", 1)
    if not (_int(square) and 1 <= square <= COUNT_MAX):
        return False
    if "chessboard_square_on_top_left" in value and type(value["chessboard_square_on_top_left"]) is not bool:
        return False
    return all(_number(value[k]) for k in ("chessboard_white_value", "chessboard_gray_value") if k in value)


def _deferred(value: Any) -> bool:
    if value is None:
        return True
    if type(value) is not dict or "resize_config" not in value or not set(value) <= _DEFERRED_KEYS:
        return False
    if "backend" in value and value["backend"] not in ("gpu", "cpu"):
        return False
    if not all(_rgb(value[k]) for k in ("image_mean", "image_std") if k in value):
        return False
    if "transparent_bg_config" in value and not _background(value["transparent_bg_config"]):
        return False
    resize = value["resize_config"]
    if type(resize) is not dict:
        return False
    keys = set(resize)
    return _RESIZE_REQUIRED <= keys <= _RESIZE_REQUIRED | {"num_tokens"} and all(_count(v) for v in resize.values())


def item_is_plainly_valid(item: Any) -> bool:
    """Return True only when ``item`` follows the schema's ``item`` definition and has no unknown key."""
    if type(item) is not dict or not {"grids", "feature"} <= set(item) or not set(item) <= _ITEM_KEYS:
        return False
    grids = item["grids"]
    if type(grids) is not dict or not set(grids) <= {"image_grid_thw", "grid_thws"}:
        return False
    if not all(_grid_rows(rows) for rows in grids.values()):
        return False
    if not _feature(item["feature"]) or not _deferred(item.get("deferred")):
        return False
    if "local_preprocessed" in item and type(item["local_preprocessed"]) is not bool:
        return False
    size = item.get("original_size")
    if size is not None and not (type(size) is list and len(size) == 2 and all(_count(v) for v in size)):
        return False
    return "label" not in item or type(item["label"]) is str


_TOP_KEYS = {"format", "version", "created_by", "source", "runtime", "processor", "items", "extra", "forward_context"}
_SOURCE_KEYS = {"sglang_version", "code_variant", "code_variant_source", "recorded", "note"}
_RUNTIME_KEYS = {"attn_tp_size", "attn_tp_rank", "image_indices"}
_CONTEXT_KEYS = {"requests", "items", "chunked_prefill_size", "source"}
_REQUEST_REQUIRED = {"prefix_len", "extend_len", "images"}
_REQUEST_KEYS = _REQUEST_REQUIRED | {"rid", "batch_index"}
_IMAGE_KEYS = {"offsets", "status", "call_item"}
_PROCESSOR_KEYS = {
    "patch_size",
    "merge_kernel_size",
    "in_patch_limit",
    "patch_limit_on_one_side",
    "fixed_output_tokens",
    "image_mean",
    "image_std",
    "transparent_bg_config",
    "transparent_bg_fill_stage",
}


def _positive(value: Any) -> bool:
    return type(value) is int and 1 <= value <= COUNT_MAX


def _recorded(value: Any) -> bool:
    if value is None:
        return True
    if type(value) is not dict or "outcome" not in value or not set(value) <= {"outcome", "error"}:
        return False
    outcome, error = value["outcome"], value.get("error")
    if outcome == "ok" and type(outcome) is str:
        return error is None
    if outcome != "error" or type(outcome) is not str or type(error) is not dict:
        return False
    return set(error) == {"type", "message"} and _string(error["type"], 1) and _string(error["message"])


def _source(value: Any) -> bool:
    if type(value) is not dict or not set(value) <= _SOURCE_KEYS:
        return False
    return (
        (value.get("sglang_version") is None or _string(value["sglang_version"]))
        and ("code_variant" not in value or value["code_variant"] in ("post-fix", "pre-fix", "no-split"))
        and (
            "code_variant_source" not in value
            or value["code_variant_source"] in ("detected", "scenario", "recorded", "assumed")
        )
        and _recorded(value.get("recorded"))
        and ("note" not in value or _string(value["note"]))
    )


def _runtime(value: Any) -> bool:
    if type(value) is not dict or not set(value) <= _RUNTIME_KEYS:
        return False
    if "attn_tp_size" in value and not (type(value["attn_tp_size"]) is int and 1 <= value["attn_tp_size"] <= 65536):
        return False
    rank = value.get("attn_tp_rank")
    if rank is not None and not (type(rank) is int and rank >= 0):
        return False
    indices = value.get("image_indices")
    return indices is None or (type(indices) is list and all(type(v) is int and v >= 0 for v in indices))


def _processor(value: Any) -> bool:
    if value is None:
        return True
    if type(value) is not dict or not set(value) <= _PROCESSOR_KEYS:
        return False
    if not all(_positive(value[k]) for k in ("patch_size", "in_patch_limit", "patch_limit_on_one_side") if k in value):
        return False
    if "merge_kernel_size" in value:
        kernel = value["merge_kernel_size"]
        if not (_positive(kernel) or (type(kernel) is list and len(kernel) == 2 and all(_positive(v) for v in kernel))):
            return False
    tokens = value.get("fixed_output_tokens")
    if tokens is not None and not _positive(tokens):
        return False
    if not all(_rgb(value[k]) for k in ("image_mean", "image_std") if k in value):
        return False
    stage = value.get("transparent_bg_fill_stage")
    return _background(value.get("transparent_bg_config")) and (stage is None or _string(stage))


def _count_or_null(value: Any) -> bool:
    return value is None or _count(value)


def _short_list(value: Any) -> bool:
    return type(value) is list and len(value) <= MAX_CONTEXT_ENTRIES


def _context_image(value: Any) -> bool:
    if type(value) is not dict or not set(value) >= {"offsets", "status"} or not set(value) <= _IMAGE_KEYS:
        return False
    offsets = value["offsets"]
    if not _short_list(offsets) or not all(
        type(run) is list and len(run) == 2 and all(_count(v) for v in run) for run in offsets
    ):
        return False
    status = value["status"]
    return type(status) is str and status in CONTEXT_IMAGE_STATUSES and _count_or_null(value.get("call_item"))


def _context_request(value: Any) -> bool:
    if type(value) is not dict or not set(value) >= _REQUEST_REQUIRED or not set(value) <= _REQUEST_KEYS:
        return False
    rid = value.get("rid")
    if rid is not None and not _string(rid, 0, 4096):
        return False
    if not all(_count_or_null(value.get(key)) for key in ("batch_index", "prefix_len", "extend_len")):
        return False
    return _short_list(value["images"]) and all(_context_image(image) for image in value["images"])


def _forward_context(value: Any) -> bool:
    if type(value) is not dict or not set(value) >= {"requests", "items"} or not set(value) <= _CONTEXT_KEYS:
        return False
    size = value.get("chunked_prefill_size")
    if size is not None and not (type(size) is int and -1 <= size <= COUNT_MAX):
        return False
    if "source" in value and not _string(value["source"]):
        return False
    requests, items = value["requests"], value["items"]
    if not _short_list(requests) or not all(_context_request(request) for request in requests):
        return False
    return _short_list(items) and all(
        type(item) is dict
        and set(item) == {"request", "image"}
        and _count_or_null(item["request"])
        and _count_or_null(item["image"])
        for item in items
    )


def document_is_plainly_valid(obj: Any) -> bool:
    """Return True only when ``obj`` outside its items follows the manifest schema and has no unknown key.

    The items are not looked at beyond being a list; check each with :func:`item_is_plainly_valid`.
    """
    if type(obj) is not dict or not {"format", "version", "items"} <= set(obj) or not set(obj) <= _TOP_KEYS:
        return False
    if obj["format"] != "kimi-viz-manifest" or type(obj["format"]) is not str:
        return False
    if type(obj["version"]) is not int or obj["version"] != 1 or type(obj["items"]) is not list:
        return False
    if "created_by" in obj and not _string(obj["created_by"]):
        return False
    if "extra" in obj and type(obj["extra"]) is not dict:
        return False
    return (
        ("source" not in obj or _source(obj["source"]))
        and ("runtime" not in obj or _runtime(obj["runtime"]))
        and ("processor" not in obj or _processor(obj["processor"]))
        and ("forward_context" not in obj or _forward_context(obj["forward_context"]))
    )


__all__ = ["document_is_plainly_valid", "item_is_plainly_valid"]
