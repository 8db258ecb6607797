"""Hostile manifests and zips through ``kimi-viz triage``: bombs, huge members, absurd sizes, hostile labels.

A zip whose image member inflates to half a gigabyte (from a few MB), a member whose header lies
about its size, an image file of 1 GiB, tensors declared past the payload limit, resizes of 20000 px,
attention-TP sizes from 0 to 10**30, a file linked out of the folder: each exits 2 with one line
naming the JSON path or the member, within the time and memory bounds. Labels carrying HTML, ANSI
escapes and newlines are replayed (exit 1, the error reproduced) and come out escaped in the text,
in ``report.html`` and in ``trace.json``. (Item counts: test_hostile_scale.)
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image
from test_hostile_support import Case, check_case, run_cases

from kimi_viz.manifest import write_manifest
from kimi_viz.split.batch import Batch, Feature, Item

DEFERRED = {
    "backend": "cpu",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "transparent_bg_config": None,
    "resize_config": {"num_tokens": 1, "new_width": 28, "new_height": 28, "pad_width": 0, "pad_height": 0},
}
EVIL_LABEL = '<script>alert("x")</script>\x1b]0;pwned\x07\x1b[2J\x1b[31mred\nFAKE: all clean\r$\\frac{a}{'


def small_batch(label: str = "") -> Batch:
    image = Image.new("RGB", (28, 28), (10, 200, 30))
    return Batch(
        [
            Item(
                {"grid_thws": [[1, 2, 2]]},
                Feature.from_image(image),
                dict(DEFERRED),
                original_size=(28, 28),
                label=label,
            ),
            Item({"grid_thws": [[1, 2, 2]]}, Feature.from_tensor(torch.ones(4, 3, 14, 14), "patches"), label=label),
        ]
    )


def manifest(folder: Path, change=None, *, label: str = "", name: str = "m") -> Path:
    """Write a valid two-item manifest folder, then let ``change(obj, root)`` edit its JSON (and files)."""
    root = write_manifest(small_batch(label), folder / name)
    if change is not None:
        obj = json.loads((root / "manifest.json").read_text())
        change(obj, root)
        (root / "manifest.json").write_text(json.dumps(obj))
    return root


def triage(build, *extra):
    return lambda folder: ["triage", str(build(folder)), *extra]


def set_tp(value):
    def change(obj, root):
        obj["runtime"]["attn_tp_size"] = value

    return lambda folder: manifest(folder, change)


def set_resize(width, height):
    def change(obj, root):
        obj["items"][0]["deferred"]["resize_config"].update(new_width=width, new_height=height)

    return lambda folder: manifest(folder, change)


def huge_tensor(obj, root):
    obj["items"][1]["feature"]["shape"] = [4, 2**27]  # 2 GiB of float32 declared


def huge_grid(obj, root):
    obj["items"][1]["feature"] = {
        "kind": "shape_only",
        "layout": "patches",
        "shape": [4, 3, 14, 14],
        "dtype": "float32",
    }
    obj["items"][1]["grids"] = {"grid_thws": [[1, 2**31 - 1, 2**31 - 1]]}


def sparse_image(obj, root):
    path = root / obj["items"][0]["feature"]["file"]
    data = path.read_bytes()
    with open(path, "wb") as handle:
        handle.write(data)
        handle.truncate(1 << 30)


def header_image(obj, root):
    path = root / obj["items"][0]["feature"]["file"]
    head = b"\x89PNG\r\n\x1a\n"
    ihdr = struct.pack(">IIBBBBB", 16384, 16384, 8, 2, 0, 0, 0)
    import zlib

    iend = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    path.write_bytes(
        head + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + iend
    )


def link_out(obj, root):
    secret = root.parent / "secret.png"
    path = root / obj["items"][0]["feature"]["file"]
    os.replace(path, secret)
    os.symlink(secret, path)


def zip_of(folder: Path, root: Path, big_member: str | None = None, big_size: int = 0, head: bytes = b"") -> Path:
    """Zip a manifest folder; with ``big_member``, that member becomes ``head`` and then zero bytes up to
    ``big_size`` (deflated: a few MB on disk)."""
    path = folder / "m.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for file in sorted(root.rglob("*")):
            name = file.relative_to(root).as_posix()
            if file.is_dir() or name == big_member:
                continue
            archive.write(file, name)
        if big_member:
            with archive.open(big_member, "w", force_zip64=True) as handle:
                handle.write(head)
                block = bytes(1 << 24)
                for _ in range(big_size >> 24):
                    handle.write(block)
    return path


def zip_bomb(folder: Path) -> Path:
    root = manifest(folder)
    image = json.loads((root / "manifest.json").read_text())["items"][0]["feature"]["file"]
    path = zip_of(folder, root, image, 512 << 20)
    assert path.stat().st_size < 4 << 20  # a few MB that inflate to 512 MiB
    return path


def zip_tensor_bomb(folder: Path) -> Path:
    """A zip whose tensors.safetensors holds one honest 768 MiB tensor of zeros (a few MB deflated)."""
    shape = [192, 1 << 20]

    def change(obj, root):
        obj["items"][1]["feature"]["shape"] = shape

    root = manifest(folder, change)
    header = json.dumps({"items.1.feature": {"dtype": "F32", "shape": shape, "data_offsets": [0, 768 << 20]}}).encode()
    return zip_of(folder, root, "tensors.safetensors", 768 << 20, struct.pack("<Q", len(header)) + header)


def zip_lying_size(folder: Path) -> Path:
    """A zip whose image member says (in both headers) it is 100 bytes, but inflates to 50 MB."""
    root = manifest(folder)
    image = json.loads((root / "manifest.json").read_text())["items"][0]["feature"]["file"]
    path = zip_of(folder, root, image, 48 << 20, (root / image).read_bytes())
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(image)
        real = info.file_size
    for width, code in ((8, "<Q"), (4, "<I")):
        old, new = struct.pack(code, real), struct.pack(code, 100)
        at = data.find(old)
        while at >= 0:
            data[at : at + width] = new
            at = data.find(old, at + width)
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo(image).file_size == 100
    return path


def escaped_everywhere(run, folder):
    for stream in (run.out, run.err):
        assert "\x1b" not in stream and "\x07" not in stream and "\r" not in stream, run.describe()
        assert "\nFAKE: all clean" not in stream, run.describe()
    out = folder / "out"
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in report and "\x1b" not in report
    json.loads((out / "trace.json").read_text(encoding="utf-8"))
    assert (out / "summary.png").read_bytes().startswith(b"\x89PNG")


CASES = [
    # --- zips and members past the byte limits ----------------------------------------------------
    Case("zip-image-member-inflating-to-512-mib", triage(zip_bomb), words=("m.zip", "bytes", "limit")),
    Case("zip-tensor-member-declared-768-mib", triage(zip_tensor_bomb), words=("items[1].feature", "payload limit")),
    Case("zip-member-lying-about-its-size", triage(zip_lying_size), words=("items[0].feature.file", "damaged")),
    Case("image-file-of-1-gib", triage(lambda f: manifest(f, sparse_image)), words=("items[0].feature.file", "limit")),
    Case(
        "image-header-16384-square",
        triage(lambda f: manifest(f, header_image)),
        words=("items[0].feature.file", "decoded"),
    ),
    Case(
        "tensor-declared-2-gib", triage(lambda f: manifest(f, huge_tensor)), words=("items[1].feature", "payload limit")
    ),
    Case("resize-target-20000-square", triage(set_resize(20000, 20000)), words=("resize_config.new_width", "16384")),
    Case("resize-target-16000-square", triage(set_resize(16000, 16000)), words=("resize_config", "pixels")),
    Case(
        "file-linked-out-of-the-folder",
        triage(lambda f: manifest(f, link_out)),
        words=("items[0].feature.file", "outside"),
    ),
    Case("grid-of-2-62-patches", triage(lambda f: manifest(f, huge_grid), "--json"), code=(0, 1, 3)),
    # --- attention-TP sizes -----------------------------------------------------------------------------
    *[
        Case(f"manifest-tp-{name}", triage(set_tp(value)), words=("runtime.attn_tp_size",))
        for name, value in [
            ("0", 0),
            ("minus-1", -1),
            ("65537", 65537),
            ("10-30", 10**30),
            ("text", "2"),
            ("float", 2.0),
            ("bool", True),
        ]
    ],
    *[
        Case(f"cli-tp-{name}", triage(lambda f: manifest(f), "--tp", value), words=("--tp",))
        for name, value in [
            ("0", "0"),
            ("10-30", str(10**30)),
            ("1e3", "1e3"),
            ("5000-digits", "9" * 5000),
            ("65537", "65537"),
        ]
    ],
    Case("cli-rank-past-tp", triage(lambda f: manifest(f), "--tp", "2", "--rank", "7"), words=("rank",)),
    # --- labels with HTML, ANSI escapes, newlines: escaped everywhere -----------------------------------
    Case(
        "labels-with-html-and-control-characters",
        lambda f: ["triage", str(manifest(f, label=EVIL_LABEL)), "--out", str(f / "out")],
        code=(0, 1),
        one_line=False,
        check=escaped_everywhere,
    ),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-manifests"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_manifest(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)
