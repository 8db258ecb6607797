"""Where a manifest's files come from: a folder or a zip, read safely.

:class:`FolderSource` confines every file to the manifest folder (no absolute paths, no ``..``, no
links out of it); :class:`ZipSource` reads members into memory (never extracting them) after
:func:`open_zip` has checked every member name. Both refuse files over the size limits. The payload
readers here never load anything before checking it: :func:`read_safetensors_header` reads a
safetensors header by hand (never unpickling), :func:`check_tensor_entry` checks it against the
manifest's declared dtype and shape, and :func:`open_image` / :func:`decode_image` open images with
Pillow only after checking their format and pixel count.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import struct
import zipfile
import zlib
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..errors import ImageLoadError, ManifestError
from .format import DTYPES, MANIFEST_NAME

MAX_JSON_BYTES = 16 * 1024 * 1024  # manifest.json itself (4096 items take about 4 MiB)
MAX_SAFETENSORS_HEADER = 16 * 1024 * 1024  # the JSON header of a safetensors file
MAX_PAYLOAD_BYTES = 512 * 1024 * 1024  # decoded images plus tensors of one manifest, in memory
MAX_ZIP_MEMBERS = 100_000

# what zipfile raises for a truncated or damaged member
_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "GIF", "BMP")


# ------------------------------------------------------------------------------------------
# Where the files come from: a folder or a zip
# ------------------------------------------------------------------------------------------
def safe_relative(name: str, where: str) -> PurePosixPath:
    """Return ``name`` as a relative POSIX path, refusing absolute paths, ``..`` and odd characters."""
    if "\x00" in name or "\\" in name:
        raise ManifestError(
            f"file name {name!r} contains a NUL or backslash; use plain relative POSIX paths such as images/item0.png",
            json_path=where,
        )
    if name.startswith("/") or PureWindowsPath(name).drive or PureWindowsPath(name).is_absolute():
        raise ManifestError(
            f"file name {name!r} is an absolute path; every file must be named relative to the manifest folder",
            json_path=where,
        )
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if not parts:
        raise ManifestError(f"file name {name!r} names no file", json_path=where)
    if ".." in parts:
        raise ManifestError(
            f"file name {name!r} contains '..' and could leave the manifest folder; every file must stay inside it",
            json_path=where,
        )
    return PurePosixPath(*parts)


class FolderSource:
    """Payload files in a folder, each confined to it."""

    def __init__(self, root: Path):
        self.root = root
        self.real_root = root.resolve()
        self.label = str(root)

    def _path(self, name: str, where: str) -> Path:
        relative = safe_relative(name, where)
        candidate = self.root.joinpath(*relative.parts)
        # Walk every component with lstat so a link is named in the message.
        current = self.root
        for part in relative.parts:
            current = current / part
            try:
                info = os.lstat(current)
            except OSError:
                raise ManifestError(
                    f"file {name!r} does not exist in the manifest folder {self.label}; "
                    "copy the whole manifest folder (or use the .zip)",
                    json_path=where,
                ) from None
            if stat.S_ISLNK(info.st_mode):
                target = self._resolve(current, name, where)
                if not target.is_relative_to(self.real_root):
                    raise ManifestError(
                        f"file {name!r} is a symbolic link pointing outside the manifest "
                        f"folder (to {target}); refusing to read it",
                        json_path=where,
                    )
        resolved = self._resolve(candidate, name, where)
        if not resolved.is_relative_to(self.real_root):
            raise ManifestError(
                f"file {name!r} resolves to {resolved}, outside the manifest folder "
                f"{self.real_root}; refusing to read it",
                json_path=where,
            )
        if not resolved.is_file():
            raise ManifestError(f"{name!r} is not a regular file in {self.label}", json_path=where)
        return resolved

    @staticmethod
    def _resolve(path: Path, name: str, where: str) -> Path:
        try:
            return path.resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop
            raise ManifestError(
                f"file {name!r} cannot be resolved inside the manifest folder ({exc}); "
                "replace the link with the file itself",
                json_path=where,
            ) from None

    @staticmethod
    def _size(path: Path, name: str, where: str) -> int:
        try:
            return path.stat().st_size
        except OSError as exc:
            raise ManifestError(
                f"file {name!r} cannot be read ({exc.strerror or exc}); check its permissions", json_path=where
            ) from None

    @staticmethod
    def _open(path: Path, name: str, where: str):
        try:
            return open(path, "rb")
        except OSError as exc:
            raise ManifestError(
                f"file {name!r} cannot be opened ({exc.strerror or exc}); check its permissions", json_path=where
            ) from None

    def size(self, name: str, where: str) -> int:
        return self._size(self._path(name, where), name, where)

    def read(self, name: str, where: str, limit: int) -> bytes:
        path = self._path(name, where)
        size = self._size(path, name, where)
        if size > limit:
            raise ManifestError(f"file {name!r} is {size} bytes, more than the {limit}-byte limit", json_path=where)
        with self._open(path, name, where) as handle:
            return handle.read(size + 1)[:limit]  # read(n) allocates n bytes up front: ask for the size

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


class ZipSource:
    """Payload files inside a zip, read into memory (never extracted), with member names checked."""

    def __init__(self, archive: zipfile.ZipFile, prefix: str, label: str):
        self.archive = archive
        self.prefix = prefix
        self.label = label
        self._loaded: dict[str, dict] = {}

    def _info(self, name: str, where: str) -> zipfile.ZipInfo:
        relative = safe_relative(name, where)
        member = self.prefix + relative.as_posix()
        try:
            return self.archive.getinfo(member)
        except KeyError:
            raise ManifestError(
                f"file {name!r} is not in the zip {self.label}; re-create the zip from the whole manifest folder",
                json_path=where,
            ) from None

    def size(self, name: str, where: str) -> int:
        return self._info(name, where).file_size

    def read(self, name: str, where: str, limit: int) -> bytes:
        info = self._info(name, where)
        if info.file_size > limit:
            raise ManifestError(
                f"file {name!r} is {info.file_size} bytes, more than the {limit}-byte limit", json_path=where
            )
        return _read_member(self.archive, info, self.label, where)

    def open_stream(self, name: str, where: str):
        info = self._info(name, where)
        try:
            return self.archive.open(info)
        except _ZIP_DAMAGE as exc:
            raise _damaged_zip(self.label, info, exc, where) from None

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
            raise _damaged_zip(self.label, info, exc, where) from None

    def load_tensor(self, name: str, where: str, key: str):
        from safetensors.torch import load

        if name not in self._loaded:
            info = self._info(name, where)
            if info.file_size > MAX_PAYLOAD_BYTES + MAX_SAFETENSORS_HEADER:
                raise ManifestError(
                    f"file {name!r} is {info.file_size} bytes, more than the {MAX_PAYLOAD_BYTES}-byte payload limit",
                    json_path=where,
                )
            try:
                self._loaded[name] = load(_read_member(self.archive, info, self.label, where))
            except ManifestError:
                raise
            except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for damaged files
                raise ManifestError(f"{name!r} is not a readable safetensors file ({exc})", json_path=where) from None
        return self._loaded[name][key]


def _damaged_zip(label: str, info: zipfile.ZipInfo, exc: BaseException, where: str) -> ManifestError:
    """Return the ManifestError for a zip member that could not be read (truncation, bad CRC) at ``where``."""
    return ManifestError(
        f"zip {label} is damaged or truncated while reading {info.filename!r} ({exc}); re-create the zip",
        json_path=where,
    )


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, where: str) -> bytes:
    """Return a zip member's bytes, turning damage (truncation, bad CRC) into ManifestError naming ``where``."""
    try:
        with archive.open(info) as handle:
            data = handle.read(info.file_size + 1)
    except _ZIP_DAMAGE as exc:
        raise _damaged_zip(label, info, exc, where) from None
    if len(data) != info.file_size:
        raise ManifestError(
            f"zip {label} member {info.filename!r} has {len(data)} bytes, its header says "
            f"{info.file_size}; the zip is damaged (re-create it)",
            json_path=where,
        )
    return data


def open_zip(path: Path) -> tuple[zipfile.ZipFile, str]:
    """Open a manifest zip, check every member name, and return it with the prefix of manifest.json."""
    try:
        archive = zipfile.ZipFile(path)
    except (*_ZIP_DAMAGE, ValueError) as exc:  # NotImplementedError: a zip version zipfile does not read
        raise ManifestError(
            f"{path} is not a readable zip ({exc}); a truncated or damaged download? "
            "re-create it from the manifest folder"
        ) from None
    try:
        infos = archive.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise ManifestError(f"zip {path} has {len(infos)} members, more than {MAX_ZIP_MEMBERS}")
        seen: set[str] = set()
        for info in infos:
            name = info.filename
            if name.rstrip("/"):
                safe_relative(name.rstrip("/"), f"zip {path} member {name!r}")
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
        raise ManifestError(
            f"zip {path} holds no manifest.json at its top level (or in one top-level folder); "
            "zip the manifest folder itself"
        )
    except BaseException:
        archive.close()
        raise


# ------------------------------------------------------------------------------------------
# Payload readers: safetensors header, tensors, images
# ------------------------------------------------------------------------------------------
def check_elements(shape: list[int], max_elements: int, where: str) -> int:
    count = math.prod(int(s) for s in shape)
    if count > max_elements:
        raise ManifestError(
            f"declared shape {list(shape)} has {count} elements, more than the limit of "
            f"{max_elements} (pass a larger max_elements only for a manifest you trust)",
            json_path=where,
        )
    return count


class _RepeatedKey(Exception):
    """A JSON object names one key twice (``json`` would silently keep the last)."""


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


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
        raise ManifestError(
            f"{name!r} is not a safetensors file (its first 8 bytes do not give a plausible "
            "header length); tensors are read only from safetensors files, never from pickles",
            json_path=where,
        )
    raw = source.read_range(name, where, 8, header_len)
    if not raw.lstrip().startswith(b"{"):
        raise ManifestError(
            f"{name!r} is not a safetensors file (no JSON header); tensors are read only from safetensors files",
            json_path=where,
        )
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_refuse_repeated_keys)
    except _RepeatedKey as exc:
        raise ManifestError(
            f"{name!r} has an ambiguous safetensors header: it names {exc.args[0]!r} twice; refusing it (which "
            "entry would win depends on the reader) — re-export the tensors",
            json_path=where,
        ) from None
    except (ValueError, RecursionError):  # bad UTF-8, bad JSON, an integer too long to convert
        raise ManifestError(f"{name!r} has a damaged safetensors header (not JSON)", json_path=where) from None
    if not isinstance(header, dict):
        raise ManifestError(f"{name!r} has a damaged safetensors header (not an object)", json_path=where)
    header["__data_len__"] = size - 8 - header_len
    return header


def _is_shape(value: Any) -> bool:
    """Return whether a safetensors header ``shape`` is a list of non-negative integers."""
    return isinstance(value, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)


def check_tensor_entry(header: dict, entry: dict, where: str, max_elements: int) -> None:
    """Check one tensor's header entry against the manifest's dtype/shape and the size limit."""
    key, shape, dtype = entry["key"], list(entry["shape"]), entry["dtype"]
    check_elements(shape, max_elements, where + ".shape")
    info = header.get(key)
    if key == "__metadata__" or not isinstance(info, dict):
        raise ManifestError(f"tensor {key!r} is not in {entry['file']!r}", json_path=where + ".key")
    st_dtype, itemsize = DTYPES[dtype]
    if info.get("dtype") != st_dtype:
        raise ManifestError(
            f"tensor {key!r} is stored as {info.get('dtype')!r} but the manifest declares {dtype!r} ({st_dtype})",
            json_path=where + ".dtype",
        )
    stored_shape = info.get("shape")
    if not _is_shape(stored_shape):
        raise ManifestError(f"tensor {key!r} has a damaged shape in the safetensors header", json_path=where + ".key")
    if stored_shape != shape:
        raise ManifestError(
            f"tensor {key!r} is stored with shape {stored_shape} but the manifest declares {shape}",
            json_path=where + ".shape",
        )
    offsets = info.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise ManifestError(
            f"tensor {key!r} has damaged data_offsets in the safetensors header", json_path=where + ".key"
        )
    begin, end = offsets
    if not (0 <= begin <= end <= header["__data_len__"]) or end - begin != math.prod(int(s) for s in shape) * itemsize:
        raise ManifestError(
            f"tensor {key!r} has data_offsets {offsets} that do not fit its shape {shape} "
            f"and dtype {dtype} inside the file; the file is damaged",
            json_path=where + ".key",
        )
    for other, other_info in header.items():
        if other.startswith("__"):
            continue
        if not isinstance(other_info, dict) or not _is_shape(other_info.get("shape")):
            raise ManifestError(
                f"tensor {other!r} in {entry['file']!r} has a damaged header entry", json_path=where + ".file"
            )
        check_elements(other_info["shape"], max_elements, where + ".file")


def open_image(stream, name: str, where: str, max_pixels: int, max_bytes: int = MAX_PAYLOAD_BYTES):
    """Return a lazily opened PIL image (header only) after checking its format, pixel count and decoded size."""
    from ..preprocess.images import open_header

    try:
        return open_header(stream, repr(name), max_pixels=max_pixels, max_bytes=max_bytes, formats=IMAGE_FORMATS)
    except ImageLoadError as exc:
        raise ManifestError(str(exc), json_path=where) from None  # its message names the file
    except (zipfile.BadZipFile, zlib.error) as exc:  # a damaged member of a manifest zip
        raise ManifestError(f"{name!r} is damaged inside the zip ({exc}); re-create the zip", json_path=where) from None


def decode_image(data: bytes, name: str, where: str, max_pixels: int, max_bytes: int = MAX_PAYLOAD_BYTES):
    """Return a loaded PIL image from bytes after checking its format, pixel count and decoded size."""
    from ..preprocess.images import decode

    image = open_image(io.BytesIO(data), name, where, max_pixels, max_bytes)
    try:
        return decode(image, repr(name))
    except ImageLoadError as exc:
        raise ManifestError(str(exc), json_path=where) from None  # its message names the file
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise ManifestError(f"{name!r} is damaged inside the zip ({exc}); re-create the zip", json_path=where) from None
