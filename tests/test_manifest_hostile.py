"""Hostile manifests: every unsafe or malformed input exits 2 with a clear message and loads nothing large.

Each case goes through the real command (``kimi-viz triage``, in-process) and through
:func:`read_manifest`; payload loaders (safetensors, Pillow's decoder) are replaced by tripwires
so a test fails if the reader gets as far as loading, and ``tracemalloc`` bounds what it allocates.
A hypothesis fuzz test mutates a valid manifest (and feeds random JSON and random bytes) and
checks that nothing but the kit's own error type ever escapes.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
import struct
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from kimi_viz.cli import build_parser, main
from kimi_viz.errors import KimiVizError, ManifestError
from kimi_viz.manifest import read_manifest, validate_manifest_json, write_manifest
from kimi_viz.split.batch import Batch, Feature, Item

PEAK_LIMIT = 4 * 1024 * 1024  # bytes a refused manifest may make Python allocate while being read

DEFERRED = {
    "backend": "cpu",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "transparent_bg_config": None,
    "resize_config": {"num_tokens": 1, "new_width": 28, "new_height": 28, "pad_width": 0, "pad_height": 0},
}


def small_batch() -> Batch:
    image = Image.new("RGB", (28, 28), (10, 200, 30))
    return Batch(
        [
            Item({"grid_thws": [[1, 2, 2]]}, Feature.from_image(image), dict(DEFERRED), original_size=(28, 28)),
            Item({"grid_thws": [[1, 2, 2]]}, Feature.from_tensor(torch.ones(4, 3, 14, 14), "patches")),
        ]
    )


def write_valid(folder: Path) -> Path:
    return write_manifest(small_batch(), folder)


def load_obj(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def save_obj(folder: Path, obj: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(obj))


class Pwned:
    """Unpickling this creates a marker file; a safe reader never unpickles anything."""

    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


@pytest.fixture(scope="module", autouse=True)
def warm_up(tmp_path_factory):
    """Import and cache everything a normal read needs, so tracemalloc only sees the hostile read."""
    build_parser()
    folder = write_valid(tmp_path_factory.mktemp("warm") / "m")
    read_manifest(folder)
    read_manifest(write_manifest(small_batch(), folder.parent / "m.zip"))


@pytest.fixture
def tripwires(monkeypatch):
    """Make loading any payload fail the test: only headers may be read for a refused manifest."""
    import PIL.ImageFile
    import safetensors
    import safetensors.torch

    def boom(*_args, **_kwargs):
        raise AssertionError("a payload was loaded although the manifest should have been refused first")

    monkeypatch.setattr(safetensors, "safe_open", boom)
    monkeypatch.setattr(safetensors.torch, "load", boom)
    monkeypatch.setattr(PIL.ImageFile.ImageFile, "load", boom)
    monkeypatch.setattr(torch, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)


def refuse(path: Path, capsys, *words: str) -> str:
    """Assert the CLI exits 2 naming the problem, and read_manifest refuses with little allocation."""
    code = main(["triage", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("kimi-viz triage: error: "), err
    assert err.count("\n") == 1, "one line"
    for word in words:
        assert word in err, err
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ManifestError):
                read_manifest(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"reading a refused manifest allocated {peak} bytes"
    return err


def test_pickle_renamed_safetensors_is_never_unpickled(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    Pwned.marker = str(tmp_path / "pwned")
    (folder / "tensors.safetensors").write_bytes(pickle.dumps({"items.1.feature": Pwned()}, protocol=4))
    refuse(folder, capsys, "items[1].feature.file", "not a safetensors file", "never from pickles")
    assert not (tmp_path / "pwned").exists()


def test_torch_save_renamed_safetensors_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    torch.save({"items.1.feature": torch.ones(4, 3, 14, 14)}, folder / "tensors.safetensors")
    refuse(folder, capsys, "items[1].feature.file", "not a safetensors file")


@pytest.mark.parametrize("name", ["../outside.png", "images/../../outside.png"])
def test_dotdot_path_is_refused(tmp_path, capsys, tripwires, name):
    folder = write_valid(tmp_path / "m")
    Image.new("RGB", (28, 28)).save(tmp_path / "outside.png")
    obj = load_obj(folder)
    obj["items"][0]["feature"]["file"] = name
    save_obj(folder, obj)
    refuse(folder, capsys, "items[0].feature.file", "contains '..'")


@pytest.mark.parametrize("absolute", [True, False], ids=["posix", "windows-drive"])
def test_absolute_path_is_refused(tmp_path, capsys, tripwires, absolute):
    folder = write_valid(tmp_path / "m")
    outside = tmp_path / "outside.png"
    Image.new("RGB", (28, 28)).save(outside)
    obj = load_obj(folder)
    obj["items"][0]["feature"]["file"] = str(outside) if absolute else "C:/Windows/outside.png"
    save_obj(folder, obj)
    refuse(folder, capsys, "items[0].feature.file", "is an absolute path")


def test_symlink_out_of_the_folder_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    secret = tmp_path / "secret.png"
    Image.new("RGB", (28, 28)).save(secret)
    link = folder / "images" / "item0.png"
    link.unlink()
    link.symlink_to(secret)
    refuse(folder, capsys, "items[0].feature.file", "symbolic link pointing outside")


def test_symlinked_directory_out_of_the_folder_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    elsewhere = tmp_path / "elsewhere"
    (folder / "images").rename(elsewhere)
    (folder / "images").symlink_to(elsewhere, target_is_directory=True)
    refuse(folder, capsys, "items[0].feature.file", "symbolic link pointing outside")


def test_declared_shape_of_a_trillion_elements_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    obj["items"][1]["feature"]["shape"] = [1_000_000, 1_000_000]
    save_obj(folder, obj)
    refuse(folder, capsys, "items[1].feature.shape", "4000000000000 bytes", "payload limit")


def test_shape_only_trillion_elements_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    obj["items"][1]["feature"] = {
        "kind": "shape_only",
        "layout": "patches",
        "shape": [1_000_000, 1_000_000, 1],
        "dtype": "float32",
    }
    save_obj(folder, obj)
    refuse(folder, capsys, "items[1].feature.shape", "1000000000000 elements")


def test_safetensors_header_claiming_a_trillion_elements_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    header = json.dumps(
        {
            "items.1.feature": {"dtype": "F32", "shape": [4, 3, 14, 14], "data_offsets": [0, 9408]},
            "hidden": {"dtype": "U8", "shape": [1_000_000, 1_000_000], "data_offsets": [0, 10**12]},
        }
    )
    blob = struct.pack("<Q", len(header)) + header.encode() + b"\0" * 9408
    (folder / "tensors.safetensors").write_bytes(blob)
    refuse(folder, capsys, "items[1].feature", "1000000000000 elements")


def test_safetensors_header_naming_one_tensor_twice_is_refused(tmp_path, capsys, tripwires):
    """Two entries for one key: JSON readers keep one (which depends on the reader); the kit refuses the file."""
    folder = write_valid(tmp_path / "m")
    entry = '{"dtype": "F32", "shape": [4, 3, 14, 14], "data_offsets": [0, 9408]}'
    other = '{"dtype": "F32", "shape": [1, 3, 14, 14], "data_offsets": [0, 2352]}'
    header = '{"items.1.feature": ' + entry + ', "items.1.feature": ' + other + "}"
    (folder / "tensors.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 9408)
    refuse(folder, capsys, "items[1].feature.file", "ambiguous safetensors header", "'items.1.feature' twice")


def test_a_fifo_as_the_manifest_itself_is_refused_without_blocking(tmp_path, capsys, tripwires):
    """kimi-viz triage PATH where PATH is a FIFO: refused before anything opens it (opening one blocks)."""
    fifo = tmp_path / "manifest.zip"
    os.mkfifo(fifo)
    refuse(fifo, capsys, str(fifo), "a FIFO", "expected a manifest folder")


def test_safetensors_offsets_past_the_end_are_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    header = json.dumps({"items.1.feature": {"dtype": "F32", "shape": [4, 3, 14, 14], "data_offsets": [0, 9408]}})
    (folder / "tensors.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 100)
    refuse(folder, capsys, "items[1].feature.key", "do not fit", "damaged")


def test_safetensors_dtype_that_differs_from_the_manifest_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    obj["items"][1]["feature"]["dtype"] = "bfloat16"
    save_obj(folder, obj)
    refuse(folder, capsys, "items[1].feature.dtype", "stored as 'F32'", "declares 'bfloat16'")


def test_image_header_over_the_pixel_limit_is_refused_before_decoding(tmp_path, capsys, tripwires):
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )
    folder = write_valid(tmp_path / "m")
    (folder / "images" / "item0.png").write_bytes(png)
    refuse(folder, capsys, "items[0].feature.file", "100000x100000", "over max_pixels")


def test_not_an_image_is_refused(tmp_path, capsys):
    folder = write_valid(tmp_path / "m")
    (folder / "images" / "item0.png").write_bytes(b"<svg xmlns='x'></svg>")
    refuse(folder, capsys, "items[0].feature.file", "not an image Pillow can decode")


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda o: o.update(version="1"), ["version: expected the integer 1, got the string '1'"]),
        (lambda o: o.update(items={"0": o["items"][0]}), ["items: expected a list"]),
        (
            lambda o: o["items"][0]["grids"]["grid_thws"].__setitem__(0, [1, "2", 2]),
            ["items[0].grids.grid_thws[0][1]: expected an integer"],
        ),
        (
            lambda o: o["items"][0]["deferred"]["resize_config"].__setitem__("pad_width", None),
            ["items[0].deferred.resize_config.pad_width: expected an integer, got null"],
        ),
        (lambda o: o["runtime"].__setitem__("attn_tp_size", "2"), ["runtime.attn_tp_size: expected an integer"]),
    ],
    ids=["version-string", "items-not-a-list", "grid-row-not-ints", "pad-width-null", "tp-size-string"],
)
def test_wrong_types_are_refused(tmp_path, capsys, tripwires, mutate, words):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    mutate(obj)
    save_obj(folder, obj)
    refuse(folder, capsys, *words)


@pytest.mark.parametrize("version", [2, 0, 1.5])
def test_unknown_version_is_refused(tmp_path, capsys, tripwires, version):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    obj["version"] = version
    save_obj(folder, obj)
    expected = "unsupported manifest version" if isinstance(version, int) else "expected the integer 1"
    refuse(folder, capsys, "version: ", expected)


def test_unknown_format_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    obj["format"] = "something-else"
    save_obj(folder, obj)
    refuse(folder, capsys, "format: unknown format")


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"format": NaN}', "\xff\xfe"])
def test_broken_manifest_json_is_refused(tmp_path, capsys, tripwires, text):
    folder = write_valid(tmp_path / "m")
    (folder / "manifest.json").write_bytes(text.encode("latin-1"))
    refuse(folder, capsys, "manifest.json")


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.1])
def test_truncated_zip_is_refused(tmp_path, capsys, tripwires, keep):
    path = write_manifest(small_batch(), tmp_path / "m.zip")
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    refuse(path, capsys, "m.zip", "zip")


def test_zip_with_a_damaged_member_is_refused(tmp_path, capsys):
    path = write_manifest(small_batch(), tmp_path / "m.zip")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("tensors.safetensors")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200
    data[start : start + 64] = bytes(64)
    path.write_bytes(bytes(data))
    refuse(path, capsys, "damaged")


@pytest.mark.parametrize(
    ("member", "words"),
    [("../evil.png", "contains '..'"), ("/abs/evil.png", "absolute path"), ("images\\item0.png", "backslash")],
)
def test_zip_member_names_are_checked(tmp_path, capsys, tripwires, member, words):
    path = tmp_path / "m.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"format": "kimi-viz-manifest", "version": 1, "items": []}))
        zf.writestr(member, b"x")
    refuse(path, capsys, "m.zip", words)


def test_zip_symlink_member_is_refused(tmp_path, capsys, tripwires):
    path = tmp_path / "m.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"format": "kimi-viz-manifest", "version": 1, "items": []}))
        info = zipfile.ZipInfo("images/item0.png")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    refuse(path, capsys, "symbolic link")


def test_zip_file_reference_outside_the_zip_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    obj = load_obj(folder)
    obj["items"][0]["feature"]["file"] = "images/../../m/images/item0.png"
    path = tmp_path / "m.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps(obj))
    refuse(path, capsys, "items[0].feature.file", "contains '..'")


def test_integer_too_long_for_python_in_manifest_json_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    text = (folder / "manifest.json").read_text().replace('"version": 1', '"version": 1, "x": ' + "9" * 5000, 1)
    (folder / "manifest.json").write_text(text)
    refuse(folder, capsys, "manifest.json could not be read as JSON", "digits")


def _write_safetensors(folder: Path, header: dict, data_bytes: int = 9408, raw_header: str | None = None) -> None:
    text = raw_header if raw_header is not None else json.dumps(header)
    (folder / "tensors.safetensors").write_bytes(struct.pack("<Q", len(text)) + text.encode() + b"\0" * data_bytes)


def test_integer_too_long_for_python_in_the_safetensors_header_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    entry = json.dumps({"dtype": "F32", "shape": [4, 3, 14, 14], "data_offsets": [0, 9408]})
    _write_safetensors(folder, {}, raw_header='{"items.1.feature": ' + entry + ', "n": ' + "9" * 5000 + "}")
    refuse(folder, capsys, "items[1].feature.file", "damaged safetensors header")


@pytest.mark.parametrize(
    "shape",
    [["x"], [None], [[2]], [1.5], [True], [-5, 2], "4"],
    ids=["string", "null", "list", "float", "bool", "negative", "not-a-list"],
)
def test_another_tensor_with_a_damaged_shape_is_refused_before_loading(tmp_path, capsys, tripwires, shape):
    folder = write_valid(tmp_path / "m")
    _write_safetensors(
        folder,
        {
            "items.1.feature": {"dtype": "F32", "shape": [4, 3, 14, 14], "data_offsets": [0, 9408]},
            "other": {"dtype": "U8", "shape": shape, "data_offsets": [0, 1]},
        },
    )
    refuse(folder, capsys, "items[1].feature.file", "tensor 'other'", "damaged header entry")


def test_symlink_loop_is_refused(tmp_path, capsys, tripwires):
    folder = write_valid(tmp_path / "m")
    images = folder / "images"
    (images / "item0.png").unlink()
    (images / "a").symlink_to("b")
    (images / "b").symlink_to("a")
    (images / "item0.png").symlink_to("a")
    refuse(folder, capsys, "items[0].feature.file", "cannot be resolved", "replace the link")


def test_unreadable_payload_is_refused(tmp_path, capsys, tripwires, monkeypatch):
    import kimi_viz.manifest.sources as manifest_module

    folder = write_valid(tmp_path / "m")
    real_open = open

    def open_denied(file, *args, **kwargs):  # what a file without read permission does for a non-root user
        if str(file).endswith("item0.png"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(manifest_module, "open", open_denied, raising=False)
    refuse(folder, capsys, "items[0].feature.file", "cannot be opened (Permission denied)", "permissions")


def test_zip_with_a_damaged_image_member_is_refused(tmp_path, capsys, tripwires):
    path = write_manifest(small_batch(), tmp_path / "m.zip")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("images/item0.png")
    assert info.compress_type == zipfile.ZIP_DEFLATED
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start] = 0b111  # final block of the reserved deflate type 3: zlib refuses it at once
    path.write_bytes(bytes(data))
    refuse(path, capsys, "items[0].feature.file", "damaged", "re-create the zip")


def test_zip_needing_a_newer_zip_version_is_refused(tmp_path, capsys, tripwires):
    path = write_manifest(small_batch(), tmp_path / "m.zip")
    data = bytearray(path.read_bytes())
    entry = data.index(b"PK\x01\x02")  # the first central directory entry
    data[entry + 6 : entry + 8] = struct.pack("<H", 100)  # "version needed to extract": 10.0
    path.write_bytes(bytes(data))
    refuse(path, capsys, "m.zip", "not a readable zip", "zip file version 10.0")


def test_path_with_a_nul_byte_is_refused():
    with pytest.raises(ManifestError, match="does not exist"):
        read_manifest("manifest\0.zip")


def test_missing_manifest_and_not_a_manifest(tmp_path, capsys):
    assert main(["triage", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert main(["triage", str(other)]) == 2
    assert "neither a manifest folder" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# Fuzzing
# ------------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory) -> Path:
    return write_valid(tmp_path_factory.mktemp("fuzz") / "m")


def _read(folder: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return read_manifest(folder)
        except KimiVizError:
            return None


FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_manifest_never_raises_anything_else(fuzz_folder, data):
    obj = copy.deepcopy(load_obj(fuzz_folder))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = data.draw(json_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(max_size=8))] = data.draw(json_values)
        else:
            parent.append(data.draw(json_values))
    folder = fuzz_folder.parent / "mutated"
    if not folder.exists():
        shutil.copytree(fuzz_folder, folder)
    (folder / "manifest.json").write_text(json.dumps(obj))
    result = _read(folder)
    assert result is None or isinstance(result, Batch)


@FUZZ
@given(value=json_values)
def test_fuzz_random_json_is_refused_cleanly(value):
    try:
        validate_manifest_json(value)
    except KimiVizError:
        pass


@FUZZ
@given(blob=st.binary(max_size=200), where=st.integers(0, 2000))
def test_fuzz_damaged_safetensors_and_json_bytes(fuzz_folder, blob, where):
    folder = fuzz_folder.parent / "bytes"
    if not folder.exists():
        shutil.copytree(fuzz_folder, folder)
    tensors = bytearray((fuzz_folder / "tensors.safetensors").read_bytes())
    tensors[where : where + len(blob)] = blob
    (folder / "tensors.safetensors").write_bytes(bytes(tensors))
    (folder / "manifest.json").write_text((fuzz_folder / "manifest.json").read_text())
    result = _read(folder)
    assert result is None or isinstance(result, Batch)
    (folder / "manifest.json").write_bytes(blob)
    assert _read(folder) is None
