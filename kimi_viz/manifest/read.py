"""Reading a manifest: :func:`read_manifest` and the :class:`~kimi_viz.split.batch.Batch` it builds.

The reader parses and validates ``manifest.json`` (:mod:`.schema`), checks every payload before
loading any (paths, image headers, safetensors headers, size limits; :mod:`.sources`), and only then
loads the features. Errors are :class:`~kimi_viz.errors.ManifestError` naming the JSON path; unknown
keys are :class:`~kimi_viz.manifest.schema.ManifestWarning` warnings.

Declared limits, all checked before any payload is loaded: ``max_bytes`` (default
:data:`~kimi_viz.manifest.sources.MAX_PAYLOAD_BYTES`) for the decoded images and tensors together,
``max_pixels`` per image, and for the deferred resizes :data:`MAX_RESIZED_SIDE` pixels a side,
:data:`MAX_RESIZED_PIXELS` per image and :data:`MAX_BATCH_PIXELS` for the whole batch (the replay
materializes ``pixel_values`` from them).
"""

from __future__ import annotations

import math
import os
import stat
import warnings
import zipfile
from pathlib import Path

from ..errors import ManifestError
from ..files import file_kind
from ..preprocess.config import MAX_RESIZED_SIDE
from ..preprocess.limits import MAX_IMAGE_FILE_BYTES, decoded_bytes
from ..releases import PathSource, as_code_path
from ..split.batch import GRID_KEYS, Batch, Feature, Item, RecordedOutcome, scenario_named_by
from ..split.forward_context import ForwardContext
from .format import DTYPES, MANIFEST_NAME
from .schema import ManifestWarning, parse_json, validate_manifest_json
from .sources import (
    MAX_JSON_BYTES,
    MAX_PAYLOAD_BYTES,
    FolderSource,
    ZipSource,
    check_elements,
    check_tensor_entry,
    decode_image,
    open_image,
    open_zip,
    read_safetensors_header,
)

MAX_RESIZED_PIXELS = 1 << 24  # one deferred image after its resize, padding included (Kimi-K3: about 12.8 M)
MAX_BATCH_PIXELS = 1 << 25  # every deferred image of the manifest together


def _to_chw_uint8(image):
    """Return an image as SGLang's gpu backend receives it: a CHW uint8 tensor (RGBA when it has alpha)."""
    from ..preprocess.pixels_torch import to_chw_uint8

    return to_chw_uint8(image).contiguous()


def _infer_layout(shape: list[int], dtype: str) -> str:
    """Return a tensor layout for a manifest that does not state one."""
    if len(shape) == 5:
        return "stacked"
    if len(shape) == 4 or dtype != "uint8":
        return "patches"
    if len(shape) == 3 and shape[0] not in (1, 2, 3, 4) and shape[-1] in (1, 2, 3, 4):
        return "hwc"
    return "chw"


def _check_resizes(obj: dict) -> None:
    """Refuse deferred resizes past the declared limits (the replay allocates pixel_values from them)."""
    total = 0
    for i, raw in enumerate(obj["items"]):
        deferred = raw.get("deferred")
        if not isinstance(deferred, dict):
            continue
        resize = deferred["resize_config"]
        where = f"items[{i}].deferred.resize_config"
        for key in ("new_width", "new_height"):
            if resize[key] > MAX_RESIZED_SIDE:
                raise ManifestError(
                    f"a resize to {resize[key]} px is over the limit of {MAX_RESIZED_SIDE} px a side "
                    "(Kimi-K3 resizes to at most 7168)",
                    json_path=f"{where}.{key}",
                )
        for key in ("pad_width", "pad_height"):
            if resize[key] > MAX_RESIZED_SIDE:
                raise ManifestError(
                    f"a padding of {resize[key]} px is over the limit of {MAX_RESIZED_SIDE} px",
                    json_path=f"{where}.{key}",
                )
        area = (resize["new_width"] + resize["pad_width"]) * (resize["new_height"] + resize["pad_height"])
        if area > MAX_RESIZED_PIXELS:
            raise ManifestError(
                f"the resized, padded image has {area} pixels, over the limit of {MAX_RESIZED_PIXELS} per image",
                json_path=where,
            )
        total += area
        if total > MAX_BATCH_PIXELS:
            raise ManifestError(
                f"the deferred images resize to {total} pixels so far, over the limit of {MAX_BATCH_PIXELS} "
                "for one manifest; split the batch",
                json_path=where,
            )


def _check_payloads(obj: dict, source, max_elements: int, max_pixels: int, max_bytes: int) -> dict[str, dict]:
    """Check every payload before loading any: paths, image headers, safetensors headers, size limits.

    Returns the safetensors headers read, by file name. ``max_bytes`` bounds the decoded images and
    the tensors of the whole manifest together.
    """
    headers: dict[str, dict] = {}
    left = max_bytes
    for i, raw in enumerate(obj["items"]):
        entry, where = raw["feature"], f"items[{i}].feature"
        kind = entry["kind"]
        if kind == "shape_only":
            check_elements(entry["shape"], max_elements, where + ".shape")
        elif kind == "image":
            name = entry["file"]
            size = source.size(name, where + ".file")
            if size > MAX_IMAGE_FILE_BYTES:
                raise ManifestError(
                    f"{name!r} in {source.label} is {size} bytes, more than the {MAX_IMAGE_FILE_BYTES}-byte limit "
                    "for one image file",
                    json_path=where + ".file",
                )
            with source.open_stream(name, where + ".file") as stream:
                opened = open_image(stream, name, where + ".file", max_pixels, left)
                left -= decoded_bytes(opened.width, opened.height, opened.mode)
        else:
            name = entry["file"]
            if name not in headers:
                headers[name] = read_safetensors_header(source, name, where + ".file")
            size = math.prod(int(n) for n in entry["shape"]) * DTYPES[entry["dtype"]][1]
            if size > left:
                raise ManifestError(
                    f"tensor {entry['key']!r} takes {size} bytes, more than the {left} bytes left of the "
                    f"manifest's {max_bytes}-byte payload limit (pass a larger max_bytes only for a manifest "
                    "you trust)",
                    json_path=where + ".shape",
                )
            check_tensor_entry(headers[name], entry, where, max_elements)
            left -= size
    return headers


def _load_feature(source, entry: dict, backend: str | None, where: str, max_pixels: int) -> Feature:
    """Return one item's feature; its payload was checked by :func:`_check_payloads`."""
    kind = entry["kind"]
    if kind == "shape_only":
        return Feature.shape_only(entry["layout"], tuple(entry["shape"]), entry["dtype"])
    name = entry["file"]
    if kind == "image":
        data = source.read(name, where + ".file", MAX_IMAGE_FILE_BYTES)
        image = decode_image(data, name, where + ".file", max_pixels)
        if backend == "gpu":
            return Feature.from_tensor(_to_chw_uint8(image), "chw")
        return Feature.from_image(image)
    try:
        tensor = source.load_tensor(name, where + ".file", entry["key"])
    except ManifestError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for damaged files
        raise ManifestError(
            f"tensor {entry['key']!r} could not be read from {name!r} ({exc})", json_path=where
        ) from None
    if list(tensor.shape) != list(entry["shape"]):
        raise ManifestError(
            f"tensor {entry['key']!r} has shape {list(tensor.shape)}, the manifest declares {list(entry['shape'])}",
            json_path=where + ".shape",
        )
    layout = entry.get("layout") or _infer_layout(list(entry["shape"]), entry["dtype"])
    return Feature.from_tensor(tensor, layout)


def _recorded_outcome(value: dict | None) -> RecordedOutcome | None:
    """Return ``source.recorded`` (validated by the schema) as a RecordedOutcome; None when absent or null."""
    return None if value is None else RecordedOutcome.from_json(value)


def _forward_context(value: dict | None) -> ForwardContext | None:
    """Return ``forward_context`` (validated by the schema and its checks) as a ForwardContext; None when absent."""
    return None if value is None else ForwardContext.from_json(value)


def _build_batch(obj: dict, source, max_elements: int, max_pixels: int, max_bytes: int, load: bool = True):
    _check_resizes(obj)
    _check_payloads(obj, source, max_elements, max_pixels, max_bytes)
    if not load:
        return None
    items = []
    for i, raw in enumerate(obj["items"]):
        where = f"items[{i}]"
        deferred = raw.get("deferred")
        backend = deferred.get("backend") if isinstance(deferred, dict) else None
        feature = _load_feature(source, raw["feature"], backend, where + ".feature", max_pixels)
        size = raw.get("original_size")
        items.append(
            Item(
                grids={key: [list(row) for row in raw["grids"][key]] for key in GRID_KEYS if key in raw["grids"]},
                feature=feature,
                deferred=deferred,
                local_preprocessed=bool(raw.get("local_preprocessed", False)),
                original_size=tuple(size) if size is not None else None,
                label=raw.get("label", ""),
            )
        )
    runtime = obj.get("runtime") or {}
    source_info = obj.get("source") or {}
    indices = runtime.get("image_indices")
    extra = dict(obj.get("extra") or {})
    output = extra.pop("processor_output", "concatenated")
    return Batch(
        items=items,
        processor=obj.get("processor"),
        attn_tp_size=runtime.get("attn_tp_size", 1),
        attn_tp_rank=runtime.get("attn_tp_rank"),
        image_indices=list(indices) if indices is not None else None,
        sglang_version=source_info.get("sglang_version"),
        code_path=as_code_path(source_info.get("code_variant", "post-fix"), "source.code_variant"),
        code_path_source=PathSource(
            source_info.get("code_variant_source", "recorded" if "code_variant" in source_info else "assumed")
        ),
        recorded=_recorded_outcome(source_info.get("recorded")),
        note=source_info.get("note", ""),
        created_by=obj.get("created_by", ""),
        scenario=scenario_named_by(obj.get("created_by", "")),
        processor_output=output,
        extra=extra,
        forward_context=_forward_context(obj.get("forward_context")),
    )


def _emit(found: list[str], label: str) -> None:
    for text in found:  # stacklevel: _emit <- _read_source <- read_manifest <- its caller
        warnings.warn(f"manifest {label}: {text}", ManifestWarning, stacklevel=4)


def _read_source(source, json_label: str, max_elements: int, max_pixels: int, max_bytes: int, load: bool = True):
    """Return the batch of an opened folder or zip: manifest.json parsed and validated, payloads checked, loaded."""
    obj = parse_json(source.read(MANIFEST_NAME, MANIFEST_NAME, MAX_JSON_BYTES), json_label)
    found = validate_manifest_json(obj)
    if load:
        _emit(found, source.label)
    return _build_batch(obj, source, max_elements, max_pixels, max_bytes, load)


def read_manifest(
    path: str | os.PathLike,
    *,
    max_elements: int = 10**9,
    max_pixels: int = 2**28,
    max_bytes: int = MAX_PAYLOAD_BYTES,
    load: bool = True,
) -> Batch:
    """Return the :class:`Batch` stored in a manifest folder, its ``manifest.json``, or a ``.zip``.

    Raises ManifestError (naming the JSON path) for anything malformed or unsafe; unknown keys
    are reported with ``warnings.warn`` (:class:`ManifestWarning`). ``load=False`` runs every check
    (JSON, schema, limits, payload headers) without loading any payload or importing torch, and
    returns None (:func:`check_manifest`).
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        raise ManifestError(
            f"manifest {path} does not exist; expected a manifest folder, its manifest.json or a .zip of the folder"
        ) from None
    if stat.S_ISDIR(info.st_mode) or path.name == MANIFEST_NAME:
        folder = path if stat.S_ISDIR(info.st_mode) else path.parent
        return _read_source(
            FolderSource(folder), str(folder / MANIFEST_NAME), max_elements, max_pixels, max_bytes, load
        )
    if not stat.S_ISREG(info.st_mode):  # a FIFO or a device would block or never end: refused before opening
        raise ManifestError(
            f"manifest {path} is {file_kind(info.st_mode)}; expected a manifest folder, its manifest.json or a .zip"
        )
    if not zipfile.is_zipfile(path):
        if path.suffix.lower() == ".zip":
            raise ManifestError(
                f"{path} is not a readable zip (truncated or damaged?); re-create it from the manifest folder"
            )
        raise ManifestError(f"{path} is neither a manifest folder, a manifest.json nor a .zip of a manifest folder")
    archive, prefix = open_zip(path)
    with archive:
        return _read_source(
            ZipSource(archive, prefix, str(path)),
            f"{path}:{prefix}{MANIFEST_NAME}",
            max_elements,
            max_pixels,
            max_bytes,
            load,
        )


def check_manifest(path: str | os.PathLike) -> None:
    """Run every check :func:`read_manifest` runs (JSON, schema, limits, payload headers) and load nothing.

    Cheap: it loads no payload and imports no torch, so a command can refuse a bad manifest at once.
    """
    read_manifest(path, load=False)
