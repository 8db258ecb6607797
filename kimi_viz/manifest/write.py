"""Writing a manifest: :func:`write_manifest`, :func:`manifest_payload`, :func:`redact_batch`, :func:`jsonable`.

The writer stores images losslessly (PNG, or TIFF for modes PNG cannot hold), other tensors in
``tensors.safetensors``, and validates the JSON it writes against the shipped schema first, so it
never produces what the reader would refuse.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ManifestError
from ..files import prepare_folder, write_file

if TYPE_CHECKING:  # pragma: no cover - the replay (and torch) load only when a manifest is written
    from ..split.batch import Batch, Feature
from .format import DTYPES, FORMAT, IMAGES_DIR, MANIFEST_NAME, TENSORS_NAME, VERSION
from .schema import validate_manifest_json

PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I;16"})  # Pillow writes these to PNG losslessly


def jsonable(value: Any) -> Any:
    """Return ``value`` as plain JSON data (tensors, arrays, tuples and dataclasses become lists/dicts)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return jsonable(tolist())
    item = getattr(value, "item", None)
    if callable(item):
        return jsonable(item())
    return str(value)


def _image_bytes(image, index: int) -> tuple[str, bytes]:
    """Return ``(file name, encoded bytes)``: PNG when the mode allows it, else lossless TIFF."""
    buffer = io.BytesIO()
    if image.mode in PNG_MODES:
        image.save(buffer, format="PNG", compress_level=1)  # fast: captures run in a live server
        return f"{IMAGES_DIR}/item{index}.png", buffer.getvalue()
    try:
        image.save(buffer, format="TIFF")
    except (OSError, ValueError, KeyError) as exc:
        raise ManifestError(
            f"cannot store item {index}'s image of mode {image.mode!r} losslessly ({exc})",
            json_path=f"items[{index}].feature",
        ) from None
    return f"{IMAGES_DIR}/item{index}.tiff", buffer.getvalue()


def _as_png_image(feature: Feature, backend: str | None):
    """Return a PIL image for a gpu item's CHW uint8 RGB/RGBA tensor (stored losslessly as PNG), else None."""
    import torch
    from PIL import Image

    tensor = feature.tensor
    if (
        backend != "gpu"
        or tensor is None
        or feature.layout != "chw"
        or tensor.dtype != torch.uint8
        or tensor.dim() != 3
        or int(tensor.shape[0]) not in (3, 4)
        or 0 in tuple(tensor.shape)
    ):
        return None

    array = tensor.detach().cpu().permute(1, 2, 0).contiguous().numpy()
    return Image.fromarray(array, mode="RGB" if array.shape[2] == 3 else "RGBA")


def _feature_entry(
    feature: Feature,
    index: int,
    redact: bool,
    files: dict[str, bytes],
    tensors: dict[str, Any],
    backend: str | None = None,
) -> dict:
    if redact or feature.kind == "shape_only" or (feature.image is None and feature.tensor is None):
        return {
            "kind": "shape_only",
            "layout": feature.layout,
            "shape": [int(s) for s in feature.shape],
            "dtype": feature.dtype if feature.dtype in DTYPES else "unknown",
        }
    image = feature.image if feature.image is not None else _as_png_image(feature, backend)
    if image is not None:
        name, data = _image_bytes(image, index)
        files[name] = data
        return {"kind": "image", "file": name}
    if feature.tensor is None:
        raise ManifestError(
            "a tensor feature without its tensor; give the Feature its tensor, or redact the batch (redact_batch)",
            json_path=f"items[{index}].feature",
        )
    tensor = feature.tensor.detach().cpu().contiguous()
    dtype = str(tensor.dtype).replace("torch.", "")
    if dtype not in DTYPES:
        raise ManifestError(
            f"item {index}'s tensor has dtype {dtype}; manifests store {', '.join(DTYPES)} only",
            json_path=f"items[{index}].feature.dtype",
        )
    key = f"items.{index}.feature"
    tensors[key] = tensor
    return {
        "kind": "tensor",
        "file": TENSORS_NAME,
        "key": key,
        "shape": [int(s) for s in tensor.shape],
        "dtype": dtype,
        "layout": feature.layout,
    }


def _source_entry(batch: Batch) -> dict:
    """Return ``source``: the release, the code path and how it was found, the note, and the recorded outcome."""
    entry: dict[str, Any] = {
        "sglang_version": batch.sglang_version,
        "code_variant": batch.code_path,  # the manifest format's name (v1) for the code path
        "code_variant_source": batch.code_path_source.value,
        "note": batch.note,
    }
    if batch.recorded is not None:
        entry["recorded"] = batch.recorded.to_json()
    return entry


def manifest_payload(batch: Batch, *, redact: bool = False) -> tuple[dict, dict[str, bytes]]:
    """Return ``(manifest.json object, {relative file name: bytes})`` for a batch."""
    files: dict[str, bytes] = {}
    tensors: dict[str, Any] = {}
    items = []
    for index, item in enumerate(batch.items):
        entry: dict[str, Any] = {
            "grids": {key: [[int(v) for v in row] for row in rows] for key, rows in jsonable(item.grids).items()},
            "feature": _feature_entry(item.feature, index, redact, files, tensors, item.backend),
            "deferred": jsonable(item.deferred),
            "local_preprocessed": bool(item.local_preprocessed),
            "original_size": list(item.original_size) if item.original_size is not None else None,
        }
        if item.label:
            entry["label"] = item.label
        items.append(entry)
    if tensors:
        from safetensors.torch import save

        files[TENSORS_NAME] = save(tensors)
    obj = {
        "format": FORMAT,
        "version": VERSION,
        "created_by": batch.created_by or "kimi-viz",
        "source": _source_entry(batch),
        "runtime": {
            "attn_tp_size": int(batch.attn_tp_size),
            "attn_tp_rank": None if batch.attn_tp_rank is None else int(batch.attn_tp_rank),
            "image_indices": None if batch.image_indices is None else [int(i) for i in batch.image_indices],
        },
        "processor": jsonable(batch.processor),
        "items": items,
    }
    extra = batch.manifest_extra()
    if extra:
        obj["extra"] = jsonable(extra)
    if batch.forward_context is not None:
        obj["forward_context"] = batch.forward_context.to_json()
    return obj, files


def write_manifest(batch: Batch, path: str | os.PathLike, *, redact: bool = False, check: bool = True) -> Path:
    """Write ``batch`` as a manifest folder (or a ``.zip`` when ``path`` ends in .zip); return the path.

    ``redact=True`` stores every feature as shape-only (no pixels), for captures that must not
    leave the machine with user images. ``check=False`` skips validating the JSON first (the
    capture hook uses it to keep whatever it could record). No link is ever written through: the
    folder (and ``images/``) must be real folders, and each file is a new file renamed into place
    (:mod:`kimi_viz.files`); a path that is a file, lies under a file or is a link raises OutputError.
    """
    path = Path(path)
    obj, files = manifest_payload(batch, redact=redact)
    if check:
        validate_manifest_json(obj)  # the writer never produces what the reader would refuse
    text = json.dumps(obj, indent=2).encode("utf-8") + b"\n"
    what = "--manifest-out"
    if path.suffix.lower() == ".zip":
        prepare_folder(path.parent if str(path.parent) else ".", what=what)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST_NAME, text)
            for name, data in files.items():
                archive.writestr(name, data)
        write_file(path, buffer.getvalue())  # a new file renamed over the target: a link there is replaced
        return path
    prepare_folder(path, what=what)
    for name, data in files.items():
        target = path / name
        prepare_folder(target.parent, what=what)
        write_file(target, data)
    write_file(path / MANIFEST_NAME, text)
    return path


def redact_batch(batch: Batch) -> Batch:
    """Return a copy of ``batch`` whose features are shape-only (what ``--redact`` stores)."""
    return dataclasses.replace(
        batch, items=[dataclasses.replace(it, feature=it.feature.redacted()) for it in batch.items]
    )
