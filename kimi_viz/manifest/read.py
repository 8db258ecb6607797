"""Reading a manifest: :func:`read_manifest` and the :class:`~kimi_viz.replay.batch.Batch` it builds.

The reader parses and validates ``manifest.json`` (:mod:`.schema`), checks every payload before
loading any (paths, image headers, safetensors headers, size limits; :mod:`.sources`), and only then
loads the features. Errors are :class:`~kimi_viz.errors.ManifestError` naming the JSON path; unknown
keys are :class:`~kimi_viz.manifest.schema.ManifestWarning` warnings.
"""

from __future__ import annotations

import os
import stat
import warnings
import zipfile
from pathlib import Path

from ..errors import ManifestError
from ..replay.batch import GRID_KEYS, Batch, Feature, Item, RecordedOutcome
from .schema import MANIFEST_NAME, ManifestWarning, parse_json, validate_manifest_json
from .sources import (
    MAX_IMAGE_FILE_BYTES,
    MAX_JSON_BYTES,
    FolderSource,
    ZipSource,
    check_elements,
    check_tensor_entry,
    decode_image,
    open_image,
    open_zip,
    read_safetensors_header,
)


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


def _check_payloads(obj: dict, source, max_elements: int, max_pixels: int) -> dict[str, dict]:
    """Check every payload before loading any: paths, image headers, safetensors headers, size limits.

    Returns the safetensors headers read, by file name.
    """
    headers: dict[str, dict] = {}
    for i, raw in enumerate(obj["items"]):
        entry, where = raw["feature"], f"items[{i}].feature"
        kind = entry["kind"]
        if kind == "shape_only":
            check_elements(entry["shape"], max_elements, where + ".shape")
        elif kind == "image":
            name = entry["file"]
            if source.size(name, where + ".file") > MAX_IMAGE_FILE_BYTES:
                raise ManifestError(f"{name!r} is larger than {MAX_IMAGE_FILE_BYTES} bytes", json_path=where + ".file")
            with source.open_stream(name, where + ".file") as stream:
                open_image(stream, name, where + ".file", max_pixels)
        else:
            name = entry["file"]
            if name not in headers:
                headers[name] = read_safetensors_header(source, name, where + ".file")
            check_tensor_entry(headers[name], entry, where, max_elements)
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
    if value is None:
        return None
    error = value.get("error")
    if error is None:
        return RecordedOutcome(value["outcome"])
    return RecordedOutcome(value["outcome"], error["type"], error["message"])


def _build_batch(obj: dict, source, max_elements: int, max_pixels: int) -> Batch:
    _check_payloads(obj, source, max_elements, max_pixels)
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
    return Batch(
        items=items,
        processor=obj.get("processor"),
        attn_tp_size=runtime.get("attn_tp_size", 1),
        attn_tp_rank=runtime.get("attn_tp_rank"),
        image_indices=list(indices) if indices is not None else None,
        sglang_version=source_info.get("sglang_version"),
        code_variant=source_info.get("code_variant", "post-fix"),
        code_variant_source=source_info.get(
            "code_variant_source", "recorded" if "code_variant" in source_info else "assumed"
        ),
        recorded=_recorded_outcome(source_info.get("recorded")),
        note=source_info.get("note", ""),
        created_by=obj.get("created_by", ""),
        extra=obj.get("extra") or {},
    )


def _emit(found: list[str], label: str) -> None:
    for text in found:  # stacklevel: _emit <- _read_source <- read_manifest <- its caller
        warnings.warn(f"manifest {label}: {text}", ManifestWarning, stacklevel=4)


def _read_source(source, json_label: str, max_elements: int, max_pixels: int) -> Batch:
    """Return the batch of an opened folder or zip: manifest.json parsed and validated, payloads checked, loaded."""
    obj = parse_json(source.read(MANIFEST_NAME, MANIFEST_NAME, MAX_JSON_BYTES), json_label)
    _emit(validate_manifest_json(obj), source.label)
    return _build_batch(obj, source, max_elements, max_pixels)


def read_manifest(path: str | os.PathLike, *, max_elements: int = 10**9, max_pixels: int = 2**28) -> Batch:
    """Return the :class:`Batch` stored in a manifest folder, its ``manifest.json``, or a ``.zip``.

    Raises ManifestError (naming the JSON path) for anything malformed or unsafe; unknown keys
    are reported with ``warnings.warn`` (:class:`ManifestWarning`).
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
        return _read_source(FolderSource(folder), str(folder / MANIFEST_NAME), max_elements, max_pixels)
    if not zipfile.is_zipfile(path):
        if path.suffix.lower() == ".zip":
            raise ManifestError(
                f"{path} is not a readable zip (truncated or damaged?); re-create it from the manifest folder"
            )
        raise ManifestError(f"{path} is neither a manifest folder, a manifest.json nor a .zip of a manifest folder")
    archive, prefix = open_zip(path)
    with archive:
        return _read_source(
            ZipSource(archive, prefix, str(path)), f"{path}:{prefix}{MANIFEST_NAME}", max_elements, max_pixels
        )
