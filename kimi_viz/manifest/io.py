"""Batch manifests (format version 1): a writer and a strict, safe reader.

A manifest is a folder (or a ``.zip`` of one) holding ``manifest.json`` plus the payload files it
names: images under ``images/`` and tensors in ``tensors.safetensors``. Nothing in a manifest is
ever executed or unpickled. The reader checks every field against the JSON Schema shipped in
``kimi_viz/schemas/manifest-v1.schema.json``, confines every file to the manifest folder, reads
tensors only with safetensors after checking the file header itself, reads images only with
Pillow after checking their pixel count, and checks every declared shape against the size limits
before anything is allocated. Errors are :class:`~kimi_viz.errors.ManifestError` naming the JSON
path (``items[3].deferred.resize_config.pad_width``); unknown keys are warnings.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import stat
import struct
import threading
import warnings
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Iterable

from .batch import GRID_KEYS, Batch, Feature, Item
from .errors import ManifestError

FORMAT = "kimi-viz-manifest"
VERSION = 1
MANIFEST_NAME = "manifest.json"
TENSORS_NAME = "tensors.safetensors"
IMAGES_DIR = "images"

MAX_JSON_BYTES = 64 * 1024 * 1024          # manifest.json itself
MAX_SAFETENSORS_HEADER = 16 * 1024 * 1024  # the JSON header of a safetensors file
MAX_IMAGE_FILE_BYTES = 1024 * 1024 * 1024  # one encoded image file
MAX_ZIP_MEMBERS = 100_000

# what zipfile raises for a truncated or damaged member
_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)

# dtype names in manifests -> (safetensors header name, bytes per element)
DTYPES = {"uint8": ("U8", 1), "float32": ("F32", 4), "bfloat16": ("BF16", 2), "float16": ("F16", 2)}
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "GIF", "BMP")
PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I;16"})   # Pillow writes these to PNG losslessly
TENSOR_LAYOUTS = ("chw", "hwc", "patches", "stacked")


class ManifestWarning(UserWarning):
    """An unknown key (or another harmless oddity) in a manifest; the message names the JSON path."""


# ------------------------------------------------------------------------------------------
# JSON paths and value descriptions for error messages
# ------------------------------------------------------------------------------------------
def json_path(parts: Iterable[Any]) -> str:
    """Return a JSON path such as ``items[3].deferred.resize_config.pad_width`` for the given parts."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(str(part))}]"
    return text or "(top level)"


def _describe(value: Any) -> str:
    """Return a short description of a JSON value, e.g. ``the string '1'``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"the integer {value}" if abs(value) < 10**30 else "a huge integer"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)} entries"
    if isinstance(value, dict):
        return f"an object with {len(value)} keys"
    return type(value).__name__


_TYPE_NAMES = {
    "integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
    "array": "a list", "object": "an object", "null": "null",
}


# ------------------------------------------------------------------------------------------
# Schema validation
# ------------------------------------------------------------------------------------------
def schema_path() -> Path:
    """Return the path of the shipped JSON Schema (draft 2020-12) for manifest version 1."""
    return Path(__file__).resolve().parent / "schemas" / "manifest-v1.schema.json"


@lru_cache(maxsize=1)
def _validator():
    """Return a draft 2020-12 validator whose ``integer`` excludes floats like 1.0 and booleans."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ).redefine(
        "number", lambda _checker, value: isinstance(value, (int, float)) and not isinstance(value, bool)
        and math.isfinite(value)
    )
    strict = jsonschema.validators.extend(base, type_checker=checker)
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    return strict(schema)


def _schema_error_message(error) -> tuple[str, str]:
    """Return ``(json_path, message)`` in the kit's own words for one jsonschema error."""
    path = list(error.absolute_path)
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required":
        missing = [key for key in expected if key not in value]
        key = missing[0] if missing else "?"
        return json_path(path + [key]), f"missing required key {key!r}; add it (see the manifest format)"
    if kind == "type":
        names = [expected] if isinstance(expected, str) else list(expected)
        wanted = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
        return json_path(path), f"expected {wanted}, got {_describe(value)}"
    if kind == "const":
        return json_path(path), f"expected {json.dumps(expected)}, got {_describe(value)}"
    if kind == "enum":
        options = ", ".join(json.dumps(v) for v in expected)
        return json_path(path), f"expected one of {options}, got {_describe(value)}"
    if kind == "minimum":
        return json_path(path), f"expected a value >= {expected}, got {_describe(value)}"
    if kind == "maximum":
        return json_path(path), f"expected a value <= {expected}, got {_describe(value)}"
    if kind in ("minItems", "maxItems"):
        if error.schema.get("minItems") == error.schema.get("maxItems"):
            wanted = f"exactly {expected}"
        else:
            wanted = f"at least {expected}" if kind == "minItems" else f"at most {expected}"
        return json_path(path), f"expected a list of {wanted} entries, got {len(value)}"
    if kind in ("minLength", "maxLength"):
        wanted = f"at least {expected}" if kind == "minLength" else f"at most {expected}"
        return json_path(path), f"expected a string of {wanted} characters, got {len(value)}"
    return json_path(path), f"invalid value {_describe(value)} ({kind})"


def _unknown_keys(error) -> list[str]:
    """Return the keys an ``additionalProperties`` error complains about."""
    known = set(error.schema.get("properties", {}))
    return [key for key in error.instance if key not in known]


def _check_header_fields(obj: Any) -> None:
    """Refuse anything that is not a version-1 kimi-viz manifest, naming the field."""
    if not isinstance(obj, dict):
        raise ManifestError(f"expected a JSON object at the top level of manifest.json, got {_describe(obj)}",
                            json_path="(top level)")
    if "format" not in obj:
        raise ManifestError('missing required key "format"; a kimi-viz manifest starts with '
                            '"format": "kimi-viz-manifest"', json_path="format")
    if obj["format"] != FORMAT:
        raise ManifestError(f"unknown format {_describe(obj['format'])}; expected {json.dumps(FORMAT)} "
                            "(is this a kimi-viz manifest?)", json_path="format")
    if "version" not in obj:
        raise ManifestError('missing required key "version"; expected "version": 1', json_path="version")
    version = obj["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ManifestError(f"expected the integer 1, got {_describe(version)} (write \"version\": 1)",
                            json_path="version")
    if version != VERSION:
        raise ManifestError(f"unsupported manifest version {version}; this kimi-viz reads version {VERSION} "
                            "only (upgrade kimi-viz, or re-export the manifest as version 1)",
                            json_path="version")


def _check_semantics(obj: dict) -> None:
    """Check what the schema cannot say: ranks and indices inside their ranges."""
    runtime = obj.get("runtime") or {}
    size = runtime.get("attn_tp_size", 1)
    rank = runtime.get("attn_tp_rank")
    if rank is not None and rank >= size:
        raise ManifestError(f"rank {rank} does not exist with attn_tp_size {size}; expected 0..{size - 1} "
                            "or null for all ranks", json_path="runtime.attn_tp_rank")
    indices = runtime.get("image_indices")
    if indices is not None:
        count = len(obj["items"])
        for k, index in enumerate(indices):
            if index >= count:
                raise ManifestError(f"image index {index} is out of range for {count} items",
                                    json_path=json_path(["runtime", "image_indices", k]))


def validate_manifest_json(obj: Any) -> list[str]:
    """Validate a parsed ``manifest.json``; return warnings (unknown keys), raise ManifestError on errors.

    Warnings are strings ``"<json path>: unknown key 'x' (ignored)"``; errors name the JSON path
    of the first offending field.
    """
    _check_header_fields(obj)
    try:
        errors = list(_validator().iter_errors(obj))
    except RecursionError as exc:
        raise ManifestError("manifest.json is nested too deeply to be a kimi-viz manifest") from exc
    found: list[str] = []
    hard = []
    for error in errors:
        if error.validator == "additionalProperties":
            for key in _unknown_keys(error):
                found.append(f"{json_path(list(error.absolute_path) + [key])}: unknown key {key!r} (ignored)")
        else:
            hard.append(error)
    if hard:
        hard.sort(key=lambda e: (list(map(str, e.absolute_path)), e.validator != "type"))
        import jsonschema

        best = jsonschema.exceptions.best_match(hard)
        path, message = _schema_error_message(best)
        raise ManifestError(message, json_path=path)
    _check_semantics(obj)
    return sorted(set(found))


def _parse_json(data: bytes, where: str) -> Any:
    """Return parsed JSON, refusing NaN/Infinity, bad UTF-8 and absurd nesting."""
    def refuse_constant(name: str):
        raise ManifestError(f"{where}: {name} is not valid JSON; write a finite number")

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            "expected a JSON manifest") from exc
    try:
        return json.loads(text, parse_constant=refuse_constant)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:   # an integer literal longer than Python converts
        reason = str(exc).split(";")[0]
        raise ManifestError(f"{where} could not be read as JSON ({reason}); expected a kimi-viz manifest") from None
    except RecursionError as exc:
        raise ManifestError(f"{where} is nested too deeply to be a kimi-viz manifest") from exc


# ------------------------------------------------------------------------------------------
# Where the files come from: a folder or a zip
# ------------------------------------------------------------------------------------------
def _safe_relative(name: str, where: str) -> PurePosixPath:
    """Return ``name`` as a relative POSIX path, refusing absolute paths, ``..`` and odd characters."""
    if "\x00" in name or "\\" in name:
        raise ManifestError(f"file name {name!r} contains a NUL or backslash; use plain relative "
                            "POSIX paths such as images/item0.png", json_path=where)
    if name.startswith("/") or PureWindowsPath(name).drive or PureWindowsPath(name).is_absolute():
        raise ManifestError(f"file name {name!r} is an absolute path; every file must be named relative "
                            "to the manifest folder", json_path=where)
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if not parts:
        raise ManifestError(f"file name {name!r} names no file", json_path=where)
    if ".." in parts:
        raise ManifestError(f"file name {name!r} contains '..' and could leave the manifest folder; "
                            "every file must stay inside it", json_path=where)
    return PurePosixPath(*parts)


class _FolderSource:
    """Payload files in a folder, each confined to it."""

    def __init__(self, root: Path):
        self.root = root
        self.real_root = root.resolve()
        self.label = str(root)

    def _path(self, name: str, where: str) -> Path:
        relative = _safe_relative(name, where)
        candidate = self.root.joinpath(*relative.parts)
        # Walk every component with lstat so a link is named in the message.
        current = self.root
        for part in relative.parts:
            current = current / part
            try:
                info = os.lstat(current)
            except OSError:
                raise ManifestError(f"file {name!r} does not exist in the manifest folder {self.label}; "
                                    "copy the whole manifest folder (or use the .zip)", json_path=where) from None
            if stat.S_ISLNK(info.st_mode):
                target = self._resolve(current, name, where)
                if not target.is_relative_to(self.real_root):
                    raise ManifestError(f"file {name!r} is a symbolic link pointing outside the manifest "
                                        f"folder (to {target}); refusing to read it", json_path=where)
        resolved = self._resolve(candidate, name, where)
        if not resolved.is_relative_to(self.real_root):
            raise ManifestError(f"file {name!r} resolves to {resolved}, outside the manifest folder "
                                f"{self.real_root}; refusing to read it", json_path=where)
        if not resolved.is_file():
            raise ManifestError(f"{name!r} is not a regular file in {self.label}", json_path=where)
        return resolved

    @staticmethod
    def _resolve(path: Path, name: str, where: str) -> Path:
        try:
            return path.resolve()
        except (OSError, RuntimeError) as exc:   # RuntimeError: a symbolic link loop
            raise ManifestError(f"file {name!r} cannot be resolved inside the manifest folder ({exc}); "
                                "replace the link with the file itself", json_path=where) from None

    @staticmethod
    def _size(path: Path, name: str, where: str) -> int:
        try:
            return path.stat().st_size
        except OSError as exc:
            raise ManifestError(f"file {name!r} cannot be read ({exc.strerror or exc}); check its permissions",
                                json_path=where) from None

    @staticmethod
    def _open(path: Path, name: str, where: str):
        try:
            return open(path, "rb")
        except OSError as exc:
            raise ManifestError(f"file {name!r} cannot be opened ({exc.strerror or exc}); check its permissions",
                                json_path=where) from None

    def size(self, name: str, where: str) -> int:
        return self._size(self._path(name, where), name, where)

    def read(self, name: str, where: str, limit: int) -> bytes:
        path = self._path(name, where)
        size = self._size(path, name, where)
        if size > limit:
            raise ManifestError(f"file {name!r} is {size} bytes, more than the {limit}-byte limit", json_path=where)
        with self._open(path, name, where) as handle:
            return handle.read(size + 1)[:limit]   # read(n) allocates n bytes up front: ask for the size

    def open_stream(self, name: str, where: str):
        return self._open(self._path(name, where), name, where)

    def read_range(self, name: str, where: str, offset: int, count: int) -> bytes:
        with self.open_stream(name, where) as handle:
            handle.seek(offset)
            return handle.read(count)

    def load_tensor(self, name: str, where: str, key: str):
        from safetensors import safe_open

        with safe_open(str(self._path(name, where)), framework="pt") as handle:
            return handle.get_tensor(key)


class _ZipSource:
    """Payload files inside a zip, read into memory (never extracted), with member names checked."""

    def __init__(self, archive: zipfile.ZipFile, prefix: str, label: str):
        self.archive = archive
        self.prefix = prefix
        self.label = label
        self._loaded: dict[str, dict] = {}

    def _info(self, name: str, where: str) -> zipfile.ZipInfo:
        relative = _safe_relative(name, where)
        member = self.prefix + relative.as_posix()
        try:
            return self.archive.getinfo(member)
        except KeyError:
            raise ManifestError(f"file {name!r} is not in the zip {self.label}; re-create the zip from the "
                                "whole manifest folder", json_path=where) from None

    def size(self, name: str, where: str) -> int:
        return self._info(name, where).file_size

    def read(self, name: str, where: str, limit: int) -> bytes:
        info = self._info(name, where)
        if info.file_size > limit:
            raise ManifestError(f"file {name!r} is {info.file_size} bytes, more than the {limit}-byte limit",
                                json_path=where)
        return _read_member(self.archive, info, self.label, where)

    def open_stream(self, name: str, where: str):
        info = self._info(name, where)
        try:
            return self.archive.open(info)
        except _ZIP_DAMAGE as exc:
            raise ManifestError(f"zip {self.label} is damaged or truncated while reading {info.filename!r} "
                                f"({exc}); re-create the zip", json_path=where) from None

    def read_range(self, name: str, where: str, offset: int, count: int) -> bytes:
        info = self._info(name, where)
        try:
            with self.archive.open(info) as handle:
                remaining = offset
                while remaining > 0:
                    chunk = handle.read(min(remaining, 1 << 20))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                return handle.read(count)
        except _ZIP_DAMAGE as exc:
            raise ManifestError(f"zip {self.label} is damaged or truncated while reading {info.filename!r} "
                                f"({exc}); re-create the zip", json_path=where) from None

    def load_tensor(self, name: str, where: str, key: str):
        from safetensors.torch import load

        if name not in self._loaded:
            info = self._info(name, where)
            self._loaded[name] = load(_read_member(self.archive, info, self.label, where))
        return self._loaded[name][key]


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, where: str) -> bytes:
    """Return a zip member's bytes, turning damage (truncation, bad CRC) into ManifestError naming ``where``."""
    try:
        with archive.open(info) as handle:
            data = handle.read(info.file_size + 1)
    except _ZIP_DAMAGE as exc:
        raise ManifestError(f"zip {label} is damaged or truncated while reading {info.filename!r} ({exc}); "
                            "re-create the zip", json_path=where) from None
    if len(data) != info.file_size:
        raise ManifestError(f"zip {label} member {info.filename!r} has {len(data)} bytes, its header says "
                            f"{info.file_size}; the zip is damaged (re-create it)", json_path=where)
    return data


def _open_zip(path: Path) -> tuple[zipfile.ZipFile, str]:
    """Open a manifest zip, check every member name, and return it with the prefix of manifest.json."""
    try:
        archive = zipfile.ZipFile(path)
    except (*_ZIP_DAMAGE, ValueError) as exc:   # NotImplementedError: a zip version zipfile does not read
        raise ManifestError(f"{path} is not a readable zip ({exc}); a truncated or damaged download? "
                            "re-create it from the manifest folder") from None
    try:
        infos = archive.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise ManifestError(f"zip {path} has {len(infos)} members, more than {MAX_ZIP_MEMBERS}")
        seen: set[str] = set()
        for info in infos:
            name = info.filename
            if name.rstrip("/"):
                _safe_relative(name.rstrip("/"), f"zip {path} member {name!r}")
            if name in seen:
                raise ManifestError(f"zip {path} holds {name!r} twice; refusing an ambiguous archive")
            seen.add(name)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise ManifestError(f"zip {path} member {name!r} is a symbolic link; manifests hold plain files only")
            if info.flag_bits & 0x1:
                raise ManifestError(f"zip {path} member {name!r} is encrypted; manifests are not encrypted")
        names = [i.filename for i in infos]
        if MANIFEST_NAME in names:
            return archive, ""
        nested = [n for n in names if n.count("/") == 1 and n.endswith("/" + MANIFEST_NAME)]
        if len(nested) == 1:
            return archive, nested[0][: -len(MANIFEST_NAME)]
        raise ManifestError(f"zip {path} holds no manifest.json at its top level (or in one top-level folder); "
                            "zip the manifest folder itself")
    except BaseException:
        archive.close()
        raise


# ------------------------------------------------------------------------------------------
# Payload readers: safetensors header, tensors, images
# ------------------------------------------------------------------------------------------
def _element_count(shape: Iterable[int]) -> int:
    return math.prod(int(s) for s in shape)


def _check_elements(shape: list[int], max_elements: int, where: str) -> int:
    count = _element_count(shape)
    if count > max_elements:
        raise ManifestError(f"declared shape {list(shape)} has {count} elements, more than the limit of "
                            f"{max_elements} (pass a larger max_elements only for a manifest you trust)",
                            json_path=where)
    return count


def read_safetensors_header(source, name: str, where: str) -> dict:
    """Return the JSON header of a safetensors file after checking it is one; never loads tensor data.

    The returned dict also holds ``"__data_len__"``: the number of data bytes after the header.
    """
    size = source.size(name, where)
    start = source.read_range(name, where, 0, 8)
    if len(start) < 8:
        raise ManifestError(f"{name!r} is {size} bytes, too short to be a safetensors file", json_path=where)
    (header_len,) = struct.unpack("<Q", start)
    if header_len == 0 or header_len > MAX_SAFETENSORS_HEADER or 8 + header_len > size:
        raise ManifestError(f"{name!r} is not a safetensors file (its first 8 bytes do not give a plausible "
                            "header length); tensors are read only from safetensors files, never from pickles",
                            json_path=where)
    raw = source.read_range(name, where, 8, header_len)
    if not raw.lstrip().startswith(b"{"):
        raise ManifestError(f"{name!r} is not a safetensors file (no JSON header); tensors are read only from "
                            "safetensors files", json_path=where)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):   # bad UTF-8, bad JSON, an integer too long to convert
        raise ManifestError(f"{name!r} has a damaged safetensors header (not JSON)", json_path=where) from None
    if not isinstance(header, dict):
        raise ManifestError(f"{name!r} has a damaged safetensors header (not an object)", json_path=where)
    header["__data_len__"] = size - 8 - header_len
    return header


def _is_shape(value: Any) -> bool:
    """Return whether a safetensors header ``shape`` is a list of non-negative integers."""
    return isinstance(value, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)


def _check_tensor_entry(header: dict, entry: dict, where: str, max_elements: int) -> None:
    """Check one tensor's header entry against the manifest's dtype/shape and the size limit."""
    key, shape, dtype = entry["key"], list(entry["shape"]), entry["dtype"]
    _check_elements(shape, max_elements, where + ".shape")
    info = header.get(key)
    if key == "__metadata__" or not isinstance(info, dict):
        raise ManifestError(f"tensor {key!r} is not in {entry['file']!r}", json_path=where + ".key")
    st_dtype, itemsize = DTYPES[dtype]
    if info.get("dtype") != st_dtype:
        raise ManifestError(f"tensor {key!r} is stored as {info.get('dtype')!r} but the manifest declares "
                            f"{dtype!r} ({st_dtype})", json_path=where + ".dtype")
    stored_shape = info.get("shape")
    if not _is_shape(stored_shape):
        raise ManifestError(f"tensor {key!r} has a damaged shape in the safetensors header", json_path=where + ".key")
    if stored_shape != shape:
        raise ManifestError(f"tensor {key!r} is stored with shape {stored_shape} but the manifest declares "
                            f"{shape}", json_path=where + ".shape")
    offsets = info.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise ManifestError(f"tensor {key!r} has damaged data_offsets in the safetensors header",
                            json_path=where + ".key")
    begin, end = offsets
    if not (0 <= begin <= end <= header["__data_len__"]) or end - begin != _element_count(shape) * itemsize:
        raise ManifestError(f"tensor {key!r} has data_offsets {offsets} that do not fit its shape {shape} "
                            f"and dtype {dtype} inside the file; the file is damaged", json_path=where + ".key")
    for other, other_info in header.items():
        if other.startswith("__"):
            continue
        if not isinstance(other_info, dict) or not _is_shape(other_info.get("shape")):
            raise ManifestError(f"tensor {other!r} in {entry['file']!r} has a damaged header entry",
                                json_path=where + ".file")
        _check_elements(other_info["shape"], max_elements, where + ".file")


_PILLOW_LIMIT_LOCK = threading.Lock()


def _open_image(stream, name: str, where: str, max_pixels: int):
    """Return a lazily opened PIL image (header only) after checking its format and pixel count."""
    from PIL import Image, UnidentifiedImageError

    try:
        with _PILLOW_LIMIT_LOCK:   # our own limit (with the size in the message) replaces Pillow's while opening
            saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
            try:
                image = Image.open(stream, formats=list(IMAGE_FORMATS))
            finally:
                Image.MAX_IMAGE_PIXELS = saved
    except UnidentifiedImageError:
        raise ManifestError(f"{name!r} is not an image in any accepted format ({', '.join(IMAGE_FORMATS)})",
                            json_path=where) from None
    except Image.DecompressionBombError:
        raise ManifestError(f"{name!r} has too many pixels for Pillow's safety limit", json_path=where) from None
    except (OSError, ValueError, SyntaxError, EOFError, struct.error) as exc:
        raise ManifestError(f"{name!r} could not be read as an image ({exc})", json_path=where) from None
    except (zipfile.BadZipFile, zlib.error) as exc:   # a damaged member of a manifest zip
        raise ManifestError(f"{name!r} is damaged inside the zip ({exc}); re-create the zip",
                            json_path=where) from None
    width, height = image.size
    if width * height > max_pixels:
        raise ManifestError(f"{name!r} is {width}x{height} = {width * height} pixels, more than the limit of "
                            f"{max_pixels} (pass a larger max_pixels only for a manifest you trust)", json_path=where)
    return image


def _decode_image(data: bytes, name: str, where: str, max_pixels: int):
    """Return a loaded PIL image from bytes after checking its format and pixel count."""
    from PIL import Image

    image = _open_image(io.BytesIO(data), name, where, max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
    except Image.DecompressionBombError:
        raise ManifestError(f"{name!r} has too many pixels for Pillow's safety limit", json_path=where) from None
    except (OSError, ValueError, SyntaxError, EOFError, struct.error, MemoryError) as exc:
        raise ManifestError(f"{name!r} is damaged or truncated ({exc})", json_path=where) from None
    return image


def _to_chw_uint8(image):
    """Return an image as SGLang's gpu backend receives it: a CHW uint8 tensor (RGBA when it has alpha)."""
    from .pixels_torch import to_chw_uint8

    return to_chw_uint8(image).contiguous()


# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------
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
            _check_elements(entry["shape"], max_elements, where + ".shape")
        elif kind == "image":
            name = entry["file"]
            if source.size(name, where + ".file") > MAX_IMAGE_FILE_BYTES:
                raise ManifestError(f"{name!r} is larger than {MAX_IMAGE_FILE_BYTES} bytes", json_path=where + ".file")
            with source.open_stream(name, where + ".file") as stream:
                _open_image(stream, name, where + ".file", max_pixels)
        else:
            name = entry["file"]
            if name not in headers:
                headers[name] = read_safetensors_header(source, name, where + ".file")
            _check_tensor_entry(headers[name], entry, where, max_elements)
    return headers


def _load_feature(source, entry: dict, backend: str | None, where: str, max_pixels: int) -> Feature:
    """Return one item's feature; its payload was checked by :func:`_check_payloads`."""
    kind = entry["kind"]
    if kind == "shape_only":
        return Feature.shape_only(entry["layout"], tuple(entry["shape"]), entry["dtype"])
    name = entry["file"]
    if kind == "image":
        data = source.read(name, where + ".file", MAX_IMAGE_FILE_BYTES)
        image = _decode_image(data, name, where + ".file", max_pixels)
        if backend == "gpu":
            return Feature.from_tensor(_to_chw_uint8(image), "chw")
        return Feature.from_image(image)
    try:
        tensor = source.load_tensor(name, where + ".file", entry["key"])
    except ManifestError:
        raise
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise ManifestError(f"tensor {entry['key']!r} could not be read from {name!r} ({exc})",
                            json_path=where) from None
    if list(tensor.shape) != list(entry["shape"]):
        raise ManifestError(f"tensor {entry['key']!r} has shape {list(tensor.shape)}, the manifest declares "
                            f"{list(entry['shape'])}", json_path=where + ".shape")
    layout = entry.get("layout") or _infer_layout(list(entry["shape"]), entry["dtype"])
    return Feature.from_tensor(tensor, layout)


def _build_batch(obj: dict, source, max_elements: int, max_pixels: int) -> Batch:
    _check_payloads(obj, source, max_elements, max_pixels)
    items = []
    for i, raw in enumerate(obj["items"]):
        where = f"items[{i}]"
        deferred = raw.get("deferred")
        backend = deferred.get("backend") if isinstance(deferred, dict) else None
        feature = _load_feature(source, raw["feature"], backend, where + ".feature", max_pixels)
        size = raw.get("original_size")
        items.append(Item(
            grids={key: [list(row) for row in raw["grids"][key]] for key in GRID_KEYS if key in raw["grids"]},
            feature=feature,
            deferred=deferred,
            local_preprocessed=bool(raw.get("local_preprocessed", False)),
            original_size=tuple(size) if size is not None else None,
            label=raw.get("label", ""),
        ))
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
        code_variant_source=source_info.get("code_variant_source",
                                            "recorded" if "code_variant" in source_info else "assumed"),
        note=source_info.get("note", ""),
        created_by=obj.get("created_by", ""),
        extra=obj.get("extra") or {},
    )


def _emit(found: list[str], label: str) -> None:
    for text in found:   # stacklevel: _emit <- _read_source <- read_manifest <- its caller
        warnings.warn(f"manifest {label}: {text}", ManifestWarning, stacklevel=4)


def _read_source(source, json_label: str, max_elements: int, max_pixels: int) -> Batch:
    """Return the batch of an opened folder or zip: manifest.json parsed and validated, payloads checked, then loaded."""
    obj = _parse_json(source.read(MANIFEST_NAME, MANIFEST_NAME, MAX_JSON_BYTES), json_label)
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
    except (OSError, ValueError):   # ValueError: a NUL byte in the path
        raise ManifestError(f"manifest {path} does not exist; expected a manifest folder, its manifest.json "
                            "or a .zip of the folder") from None
    if stat.S_ISDIR(info.st_mode) or path.name == MANIFEST_NAME:
        folder = path if stat.S_ISDIR(info.st_mode) else path.parent
        return _read_source(_FolderSource(folder), str(folder / MANIFEST_NAME), max_elements, max_pixels)
    if not zipfile.is_zipfile(path):
        if path.suffix.lower() == ".zip":
            raise ManifestError(f"{path} is not a readable zip (truncated or damaged?); re-create it from "
                                "the manifest folder")
        raise ManifestError(f"{path} is neither a manifest folder, a manifest.json nor a .zip of a manifest folder")
    archive, prefix = _open_zip(path)
    with archive:
        return _read_source(_ZipSource(archive, prefix, str(path)), f"{path}:{prefix}{MANIFEST_NAME}",
                            max_elements, max_pixels)


# ------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------
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
        raise ManifestError(f"cannot store item {index}'s image of mode {image.mode!r} losslessly ({exc})",
                            json_path=f"items[{index}].feature") from None
    return f"{IMAGES_DIR}/item{index}.tiff", buffer.getvalue()


def _as_png_image(feature: Feature, backend: str | None):
    """Return a PIL image for a gpu item's CHW uint8 RGB/RGBA tensor (stored losslessly as PNG), else None."""
    import torch
    from PIL import Image

    tensor = feature.tensor
    if (backend != "gpu" or tensor is None or feature.layout != "chw" or tensor.dtype != torch.uint8
            or tensor.dim() != 3 or int(tensor.shape[0]) not in (3, 4) or 0 in tuple(tensor.shape)):
        return None

    array = tensor.detach().cpu().permute(1, 2, 0).contiguous().numpy()
    return Image.fromarray(array, mode="RGB" if array.shape[2] == 3 else "RGBA")


def _feature_entry(feature: Feature, index: int, redact: bool, files: dict[str, bytes],
                   tensors: dict[str, Any], backend: str | None = None) -> dict:
    if redact or feature.kind == "shape_only" or (feature.image is None and feature.tensor is None):
        return {"kind": "shape_only", "layout": feature.layout, "shape": [int(s) for s in feature.shape],
                "dtype": feature.dtype if feature.dtype in DTYPES else "unknown"}
    image = feature.image if feature.image is not None else _as_png_image(feature, backend)
    if image is not None:
        name, data = _image_bytes(image, index)
        files[name] = data
        return {"kind": "image", "file": name}
    tensor = feature.tensor.detach().cpu().contiguous()
    dtype = str(tensor.dtype).replace("torch.", "")
    if dtype not in DTYPES:
        raise ManifestError(f"item {index}'s tensor has dtype {dtype}; manifests store "
                            f"{', '.join(DTYPES)} only", json_path=f"items[{index}].feature.dtype")
    key = f"items.{index}.feature"
    tensors[key] = tensor
    return {"kind": "tensor", "file": TENSORS_NAME, "key": key,
            "shape": [int(s) for s in tensor.shape], "dtype": dtype, "layout": feature.layout}


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
        "source": {"sglang_version": batch.sglang_version, "code_variant": batch.code_variant,
                   "code_variant_source": batch.code_variant_source, "note": batch.note},
        "runtime": {"attn_tp_size": int(batch.attn_tp_size),
                    "attn_tp_rank": None if batch.attn_tp_rank is None else int(batch.attn_tp_rank),
                    "image_indices": None if batch.image_indices is None else [int(i) for i in batch.image_indices]},
        "processor": jsonable(batch.processor),
        "items": items,
    }
    if batch.extra:
        obj["extra"] = jsonable(batch.extra)
    return obj, files


def write_manifest(batch: Batch, path: str | os.PathLike, *, redact: bool = False, check: bool = True) -> Path:
    """Write ``batch`` as a manifest folder (or a ``.zip`` when ``path`` ends in .zip); return the path.

    ``redact=True`` stores every feature as shape-only (no pixels), for captures that must not
    leave the machine with user images. ``check=False`` skips validating the JSON first (the
    capture hook uses it to keep whatever it could record).
    """
    path = Path(path)
    obj, files = manifest_payload(batch, redact=redact)
    if check:
        validate_manifest_json(obj)  # the writer never produces what the reader would refuse
    text = json.dumps(obj, indent=2).encode("utf-8") + b"\n"
    if path.suffix.lower() == ".zip":
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST_NAME, text)
            for name, data in files.items():
                archive.writestr(name, data)
        os.replace(tmp, path)
        return path
    path.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (path / MANIFEST_NAME).write_bytes(text)
    return path


def redact_batch(batch: Batch) -> Batch:
    """Return a copy of ``batch`` whose features are shape-only (what ``--redact`` stores)."""
    return dataclasses.replace(batch, items=[dataclasses.replace(it, feature=it.feature.redacted())
                                             for it in batch.items])


__all__ = [
    "FORMAT", "VERSION", "ManifestWarning", "json_path", "manifest_payload", "read_manifest",
    "read_safetensors_header", "redact_batch", "schema_path", "validate_manifest_json", "write_manifest",
    "jsonable",
]
