"""Hostile images through ``kimi-viz inspect`` and ``kimi-viz encode``: exit 2 (or a clean answer), one line, bounded.

Unusual modes load (or are refused by name), corrupt JPEG scans warn, headers declaring huge sizes are
refused before decoding, odd EXIF orientations are ignored with a warning, and paths that are a
FIFO, a device, a folder or a huge sparse file are refused before they are read. Every input is
built here at test time. The harness is :mod:`test_hostile_support`.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image
from test_hostile_support import Case, check_case, run_cases

from kimi_viz.data import sample_path


def chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def png_header(width: int, height: int, bit_depth: int = 8, colour: int = 2, idat: bytes = b"") -> bytes:
    """Return a PNG whose IHDR declares ``width x height`` followed by ``idat`` (nothing: no pixel data)."""
    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0))
    return head + (chunk(b"IDAT", idat) if idat else b"") + chunk(b"IEND", b"")


def big_png(path: Path, width: int, height: int, bit_depth: int, row: bytes) -> Path:
    """Write a real ``width x height`` PNG (every row ``row``), compressed as it is generated."""
    compressor = zlib.compressobj(1)
    block = (b"\x00" + row) * 64
    out = bytearray()
    for _ in range(height // 64):
        out += compressor.compress(block)
    out += compressor.flush()
    path.write_bytes(png_header(width, height, bit_depth, 0, bytes(out)))
    return path


def tiff_header(width: int, height: int, bits: int, sample_format: int, data_offset: int = 4096) -> bytes:
    """Return a little-endian uncompressed one-strip greyscale TIFF header (the strip lies past the header)."""
    strip = width * height * bits // 8
    entries = [
        (256, 4, 1, width),
        (257, 4, 1, height),
        (258, 3, 1, bits),
        (259, 3, 1, 1),
        (262, 3, 1, 1),
        (273, 4, 1, data_offset),
        (277, 3, 1, 1),
        (278, 4, 1, height),
        (279, 4, 1, strip & 0xFFFFFFFF),
        (339, 3, 1, sample_format),
    ]
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        ifd += struct.pack("<HHI", tag, kind, count) + (
            struct.pack("<HH", value, 0) if kind == 3 else struct.pack("<I", value)
        )
    return b"II*\x00" + struct.pack("<I", 8) + ifd + b"\x00\x00\x00\x00"


def save(image: Image.Image, path: Path, **options) -> Path:
    image.save(path, **options)
    return path


def gradient(mode: str, size=(64, 48)) -> Image.Image:
    image = Image.new(mode, size)
    peak = {"I;16": 65535, "I": 65535, "F": 1.0}.get(mode, 255)
    for x in range(size[0]):
        for y in range(size[1]):
            value = (x * size[1] + y) * peak // (size[0] * size[1]) if mode != "F" else x / size[0]
            image.putpixel((x, y), value if mode not in ("LA", "PA") else (int(value) % 256, 200))
    return image


def corrupt_jpeg(folder: Path) -> Path:
    data = bytearray(sample_path("rocket.jpg").read_bytes())
    scan = data.find(b"\xff\xda")
    data[scan + 2000 : scan + 4000] = bytes(2000)  # a zero-filled stretch: Pillow decodes it to garbage silently
    path = folder / "zero-filled.jpg"
    path.write_bytes(bytes(data))
    return path


def exif_block(value) -> bytes:
    """Return an EXIF block whose one tag, Orientation, holds ``value``: a SHORT, or ASCII text for a str."""
    if isinstance(value, str):
        text = value.encode() + b"\x00"
        entry = struct.pack("<HHI", 0x0112, 2, len(text)) + struct.pack("<I", 26)
        tail = text
    else:
        entry = struct.pack("<HHIHH", 0x0112, 3, 1, value, 0)
        tail = b""
    return b"Exif\x00\x00II*\x00" + struct.pack("<IH", 8, 1) + entry + b"\x00\x00\x00\x00" + tail


def with_orientation(folder: Path, name: str, value) -> Path:
    image = Image.new("RGB", (40, 20), (200, 30, 30))
    return save(image, folder / name, format="JPEG", exif=exif_block(value))


def sparse(path: Path, size: int, head: bytes = b"") -> Path:
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


def fifo(folder: Path) -> Path:
    path = folder / "image.png"
    os.mkfifo(path)
    return path


def warns(*words):
    def check(run, folder):
        assert run.code == 0, run.describe()
        warnings = [line for line in run.err.splitlines() if line.startswith("kimi-viz inspect: warning: ")]
        assert len(warnings) == len(run.err.splitlines()) >= 1, run.describe()
        for word in words:
            assert any(word in line for line in warnings), run.describe()

    return check


def clean(mode: str):
    def check(run, folder):
        assert run.code == 0 and run.err == "", run.describe()
        assert f"  {mode}  " in run.out, run.describe()

    return check


def inspect(build):
    return lambda folder: ["inspect", str(build(folder))]


CASES = [
    # --- unusual modes: they load (16/32-bit become 8-bit grey), or are refused by name -------------
    Case("la-png", inspect(lambda f: save(gradient("LA"), f / "la.png")), code=0, check=clean("LA")),
    Case("pa-tiff", inspect(lambda f: save(gradient("PA"), f / "pa.tiff")), code=0, check=clean("PA")),
    Case("i16-png", inspect(lambda f: save(gradient("I;16"), f / "i16.png")), code=0, check=clean("L")),
    Case("i32-tiff", inspect(lambda f: save(gradient("I"), f / "i32.tiff")), code=0, check=clean("L")),
    Case("f-tiff", inspect(lambda f: save(gradient("F"), f / "float.tiff")), words=("float.tiff", "'F'", "8-bit")),
    Case(
        "i16-at-the-pixel-limit",
        inspect(lambda f: big_png(f / "i16-limit.png", 16384, 16384, 16, b"\x12\x34" * 16384)),
        code=0,
        check=clean("L"),
        marks=(pytest.mark.slow,),
    ),
    Case(
        "i32-at-the-pixel-limit",
        inspect(lambda f: sparse(f / "i32-limit.tiff", 2**20, tiff_header(16384, 16384, 32, 2))),
        words=("i32-limit.tiff", "16384x16384", "max_bytes"),
    ),
    Case(
        "rgb-header-at-the-pixel-limit-no-data",
        inspect(lambda f: (f / "rgb.png").write_bytes(png_header(16384, 16384)) and f / "rgb.png"),
        words=("rgb.png", "16384x16384", "max_bytes"),
    ),
    # --- corrupt data: warned about, or refused ---------------------------------------------------
    Case(
        "zero-filled-jpeg-scan",
        inspect(corrupt_jpeg),
        code=0,
        one_line=False,
        check=warns("zero-filled.jpg", "damaged"),
    ),
    Case(
        "jpeg-scan-of-random-bytes",
        inspect(
            lambda f: (
                (f / "noise.jpg").write_bytes(
                    sample_path("rocket.jpg").read_bytes()[:3000] + os.urandom(3000) + b"\xff\xd9"
                )
                and f / "noise.jpg"
            )
        ),
        code=(0, 2),
        one_line=False,
        words=("noise.jpg",),
    ),
    # --- headers that declare huge sizes with no data ----------------------------------------------
    Case(
        "png-declaring-2-31-pixels-a-side",
        inspect(lambda f: (f / "huge.png").write_bytes(png_header(2**31 - 1, 2**31 - 1)) and f / "huge.png"),
        words=("huge.png",),
    ),
    Case(
        "png-declaring-8000-square-no-data",
        inspect(lambda f: (f / "empty.png").write_bytes(png_header(8000, 8000, 8, 0)) and f / "empty.png"),
        words=("empty.png", "corrupt"),
    ),
    Case(
        "tiff-declaring-a-strip-past-the-end",
        inspect(lambda f: (f / "short.tiff").write_bytes(tiff_header(4000, 4000, 8, 1)) and f / "short.tiff"),
        words=("short.tiff",),
    ),
    Case(
        "gif-declaring-65535-square",
        inspect(
            lambda f: (
                (f / "big.gif").write_bytes(b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\x00\x00\x00;")
                and f / "big.gif"
            )
        ),
        words=("big.gif",),
    ),
    Case(
        "bmp-declaring-a-negative-huge-height",
        inspect(
            lambda f: (
                (f / "big.bmp").write_bytes(
                    b"BM"
                    + struct.pack("<IHHI", 54, 0, 0, 54)
                    + struct.pack("<IiiHHIIiiII", 40, 60000, -60000, 1, 24, 0, 0, 0, 0, 0, 0)
                )
                and f / "big.bmp"
            )
        ),
        words=("big.bmp",),
    ),
    # --- EXIF orientation as text or out of range: ignored with a warning ---------------------------
    Case(
        "exif-orientation-as-text",
        inspect(lambda f: with_orientation(f, "text.jpg", "upside down")),
        code=0,
        one_line=False,
        check=warns("text.jpg", "orientation"),
    ),
    Case(
        "exif-orientation-out-of-range-transposed",
        lambda f: ["inspect", "--exif-transpose", str(with_orientation(f, "nine.jpg", 9))],
        code=0,
        one_line=False,
        check=warns("nine.jpg", "orientation"),
    ),
    Case(
        "exif-orientation-65535",
        lambda f: ["inspect", "--exif-transpose", str(with_orientation(f, "big.jpg", 65535))],
        code=0,
        one_line=False,
        check=warns("big.jpg", "65535"),
    ),
    # --- paths that are not image files ----------------------------------------------------------------
    Case("fifo", inspect(fifo), words=("image.png", "FIFO")),
    Case("device", lambda f: ["inspect", "/dev/zero"], words=("/dev/zero", "device")),
    Case("folder", inspect(lambda f: (f / "folder.png").mkdir() or f / "folder.png"), words=("folder.png", "folder")),
    Case(
        "huge-sparse-file",
        inspect(lambda f: sparse(f / "sparse.png", 3 << 30, png_header(100, 100)[:33])),
        words=("sparse.png", "bytes"),
    ),
    Case(
        "sparse-file-of-zeros",
        inspect(lambda f: sparse(f / "zeros.png", 200 << 20)),
        words=("zeros.png", "not an image"),
    ),
    Case("missing", lambda f: ["inspect", str(f / "missing.png")], words=("missing.png", "no such file")),
    # --- encode meets the same images (with the tiny tower, so memory stays small) -----------------------
    Case("encode-fifo", lambda f: ["encode", "--preset", "tiny", str(fifo(f))], words=("image.png", "FIFO")),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-images"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_image(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)


def test_16_bit_conversion_keeps_the_high_byte_band_by_band():
    from kimi_viz.preprocess.images import load_image

    image = Image.new("I;16", (3000, 2000), 0x1234)
    image.putpixel((0, 0), 0xFFFF)
    loaded = load_image(image)
    assert loaded.mode == "L"
    assert loaded.image.getpixel((0, 0)) == 0xFF and loaded.image.getpixel((2999, 1999)) == 0x12


@pytest.mark.parametrize("mode", ["La", "PA", "LA", "RGBa"])
def test_modes_no_file_carries_go_through_the_processor(mode):
    from kimi_viz.preprocess.processor import Processor

    image = Image.new("RGBA", (40, 30), (10, 200, 30, 128)).convert(mode) if mode != "PA" else gradient("PA")
    for preset in ("kimi-k3", "kimi-k25"):
        output = Processor(preset).preprocess([image])
        assert output.pixel_values.shape[0] == output.records[0].patches


def test_the_zero_run_check_has_no_false_alarm_on_flat_or_noisy_jpegs():
    from kimi_viz.preprocess.images import _zero_filled_scan

    for optimize in (False, True):
        for progressive in (False, True):
            for image in (Image.new("RGB", (512, 512), (255, 255, 255)), Image.effect_noise((256, 256), 40)):
                buffer = io.BytesIO()
                image.save(buffer, "JPEG", optimize=optimize, progressive=progressive)
                assert _zero_filled_scan(buffer.getvalue()) is None
    for path in sample_path("rocket.jpg").parent.glob("*.jpg"):
        assert _zero_filled_scan(path.read_bytes()) is None, path
