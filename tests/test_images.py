"""load_image: every source type, both loader policies, and a clear error for each bad input."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from kimi_viz.errors import (
    DecompressionBombError,
    EmptyImageError,
    ImageNotFoundError,
    NotAnImageError,
    TruncatedImageError,
    UnsupportedImageError,
)
from kimi_viz.preprocess.images import LoadedImage, has_alpha, load_image


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width x height but holds no pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


# --- sources ----------------------------------------------------------------------------------------
def test_path_str_and_pathlib(sample):
    path = sample("chelsea.png")
    for src in (path, str(path)):
        loaded = load_image(src)
        assert isinstance(loaded, LoadedImage)
        assert loaded.source == str(path) and loaded.size == (451, 300) and loaded.mode == "RGB"
        assert loaded.loader == {"exif_transpose": False, "alpha": "keep", "exif_orientation": 1}


def test_modes_are_kept(sample):
    modes = {
        name: load_image(sample(name)).mode
        for name in (
            "horse.png",
            "camera.png",
            "camera_vignette_la.png",
            "coffee_palette_transparent.png",
            "coffee_cmyk.jpg",
        )
    }
    assert modes == {
        "horse.png": "RGBA",
        "camera.png": "L",
        "camera_vignette_la.png": "LA",
        "coffee_palette_transparent.png": "P",
        "coffee_cmyk.jpg": "CMYK",
    }
    assert "transparency" in load_image(sample("coffee_palette_transparent.png")).image.info


def test_bytes_and_pil(sample):
    data = Path(sample("horse.png")).read_bytes()
    loaded = load_image(data)
    assert loaded.source == "<bytes>" and loaded.size == (400, 328) and loaded.mode == "RGBA"
    pil = Image.open(sample("horse.png"))
    assert load_image(pil).source == "<PIL.Image>"
    assert np.array_equal(np.asarray(load_image(pil).image), np.asarray(loaded.image))
    assert load_image(loaded).image is loaded.image


def test_numpy_layouts():
    rgb = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    assert load_image(rgb).mode == "RGB" and load_image(rgb).size == (7, 5)
    assert load_image(rgb).source == "<numpy>"
    assert np.array_equal(np.asarray(load_image(rgb).image), rgb)
    assert load_image(np.zeros((5, 7, 4), np.uint8)).mode == "RGBA"
    assert load_image(np.zeros((5, 7), np.uint8)).mode == "L"
    assert load_image(np.zeros((5, 7, 1), np.uint8)).mode == "L"
    assert load_image(rgb[:, ::2]).size == (4, 5)  # non-contiguous views are fine


def test_torch_layouts():
    hwc = torch.arange(5 * 7 * 3, dtype=torch.uint8).reshape(5, 7, 3)
    chw = hwc.permute(2, 0, 1)
    for tensor in (hwc, chw):
        loaded = load_image(tensor)
        assert loaded.source == "<torch>" and loaded.size == (7, 5) and loaded.mode == "RGB"
        assert np.array_equal(np.asarray(loaded.image), hwc.numpy())
    assert load_image(torch.zeros(4, 5, 7, dtype=torch.uint8)).mode == "RGBA"
    assert load_image(torch.zeros(1, 5, 7, dtype=torch.uint8)).mode == "L"
    assert load_image(torch.zeros(5, 7, dtype=torch.uint8)).mode == "L"


# --- loader policies ----------------------------------------------------------------------------------
def test_exif_orientation_policy(sample):
    path = sample("chelsea_exif_orientation6.jpg")
    kept = load_image(path)
    assert kept.size == (451, 300)
    assert kept.loader == {"exif_transpose": False, "alpha": "keep", "exif_orientation": 6}
    turned = load_image(path, exif_transpose=True)
    assert turned.size == (300, 451)
    assert turned.loader == {"exif_transpose": True, "alpha": "keep", "exif_orientation": 6}
    # orientation 6 = rotate 90 degrees clockwise to display
    assert np.array_equal(np.asarray(turned.image), np.asarray(kept.image.transpose(Image.Transpose.ROTATE_270)))


def test_has_alpha(sample):
    assert [has_alpha(Image.new(mode, (2, 2))) for mode in ("RGB", "L", "RGBA", "LA", "PA", "P", "CMYK")] == [
        False,
        False,
        True,
        True,
        True,
        False,
        False,
    ]
    assert has_alpha(load_image(sample("coffee_palette_transparent.png")).image)  # a P image with a transparent index


def test_alpha_discard_converts_to_rgb_first(sample):
    for name in ("horse.png", "coffee_palette_transparent.png", "camera_vignette_la.png"):
        original = Image.open(sample(name))
        loaded = load_image(sample(name), alpha="discard")
        assert loaded.mode == "RGB" and loaded.loader["alpha"] == "discard"
        assert np.array_equal(np.asarray(loaded.image), np.asarray(original.convert("RGB")))
    with pytest.raises(ValueError, match="alpha must be one of"):
        load_image(sample("horse.png"), alpha="drop")


def test_sixteen_bit_keeps_the_high_byte():
    values = np.array([[0, 255, 256, 4095], [32768, 65280, 65535, 1]], dtype=np.uint16)
    loaded = load_image(png_bytes(Image.fromarray(values)))
    assert loaded.mode == "L"
    assert np.asarray(loaded.image).tolist() == [[0, 0, 1, 15], [128, 255, 255, 0]]
    wide = Image.fromarray(np.array([[-5, 70000, 512]], dtype=np.int32), mode="I")
    assert np.asarray(load_image(wide).image).tolist() == [[0, 255, 2]]


def test_animated_image_gives_first_frame_with_warning():
    frames = [Image.new("RGB", (8, 6), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=50)
    with pytest.warns(UserWarning, match=r"<bytes>: animated image with 2 frames; using the first frame only"):
        loaded = load_image(buffer.getvalue())
    assert loaded.size == (8, 6)
    assert loaded.image.convert("RGB").getpixel((0, 0)) == (255, 0, 0)
    opened = Image.open(io.BytesIO(buffer.getvalue()))
    opened.seek(1)
    with pytest.warns(UserWarning, match="<PIL.Image>: animated image"):
        assert load_image(opened).image.convert("RGB").getpixel((0, 0)) == (255, 0, 0)


# --- bad inputs -----------------------------------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(ImageNotFoundError, match=r"nope.png: no such file; expected the path of an image file"):
        load_image(tmp_path / "nope.png")


def test_not_an_image(tmp_path):
    text = tmp_path / "notes.png"
    text.write_text("these are not pixels")
    with pytest.raises(NotAnImageError, match=r"notes.png: not an image Pillow can decode; expected PNG, JPEG"):
        load_image(text)
    with pytest.raises(NotAnImageError, match=r"<bytes>: empty file"):
        load_image(b"")
    with pytest.raises(NotAnImageError, match=r"is a folder"):
        load_image(tmp_path)


def test_truncated_file(tmp_path, sample):
    for name in ("rocket.jpg", "chelsea.png"):
        data = Path(sample(name)).read_bytes()
        cut = tmp_path / name
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(TruncatedImageError, match=rf"{name}: the image data ends early or is corrupt"):
            load_image(cut)


def test_zero_sized_images():
    with pytest.raises(EmptyImageError, match=r"<PIL.Image>: image is 0x5; expected a positive width and height"):
        load_image(Image.new("RGB", (0, 5)))
    with pytest.raises(EmptyImageError, match=r"<numpy>: image is 7x0"):
        load_image(np.zeros((0, 7, 3), np.uint8))
    with pytest.raises(EmptyImageError, match=r"<torch>: image is 0x5"):
        load_image(torch.zeros(3, 5, 0, dtype=torch.uint8))


def test_decompression_bomb_is_refused_before_decoding():
    # The header says 100000 x 100000 and there are no pixels at all: refusing it proves no decoding happened.
    with pytest.raises(
        DecompressionBombError, match=r"<bytes>: image is 100000x100000 = 10000000000 pixels, over max_pixels=268435456"
    ):
        load_image(png_header_only(100_000, 100_000))
    with pytest.raises(DecompressionBombError, match=r"over max_pixels=1000"):
        load_image(np.zeros((40, 40, 3), np.uint8), max_pixels=1000)
    # 200M RGB pixels: under max_pixels but 800 MB once decoded, over max_bytes (512 MiB).
    with pytest.raises(DecompressionBombError, match=r"800000000 bytes once decoded, over max_bytes=536870912"):
        load_image(png_header_only(20_000, 10_000))
    # Over Pillow's own error limit (2 x 89M) but under ours, so the file reaches decoding (and fails
    # there, having no pixel data); Pillow's limit is restored afterwards.
    limit = Image.MAX_IMAGE_PIXELS
    with pytest.raises(TruncatedImageError):
        load_image(png_header_only(20_000, 10_000), max_bytes=2**30)
    assert limit == Image.MAX_IMAGE_PIXELS


def test_pillow_is_opened_and_its_limit_changed_in_one_module_only():
    # Read the package's own source: Pillow's process-wide limit, its bomb warning and its opener appear
    # in preprocess/images.py alone (report/summary.py reopens the PNGs the kit itself just drew).
    import kimi_viz

    package = Path(kimi_viz.__file__).parent
    found: dict[str, list[str]] = {"MAX_IMAGE_PIXELS": [], "DecompressionBombWarning": [], "Image.open(": []}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for needle, where in found.items():
            if needle in text:
                where.append(path.relative_to(package).as_posix())
    assert found == {
        "MAX_IMAGE_PIXELS": ["preprocess/images.py"],
        "DecompressionBombWarning": ["preprocess/images.py"],
        "Image.open(": ["preprocess/images.py", "report/summary.py"],
    }


@pytest.mark.parametrize(
    "src,message",
    [
        (np.zeros((4, 4, 3), np.float32), r"<numpy>: float arrays \(float32\) are not images"),
        (np.zeros((4, 4, 3), np.uint16), r"<numpy>: dtype uint16 is not supported; expected uint8"),
        (np.zeros((4, 4, 2), np.uint8), r"<numpy>: 2 channels; expected 1 \(grey\), 3 \(RGB\) or 4 \(RGBA\)"),
        (np.zeros((4, 4, 5), np.uint8), r"<numpy>: 5 channels"),
        (np.zeros((2, 4, 4, 3), np.uint8), r"<numpy>: array of shape \(2, 4, 4, 3\); expected \(H, W\) or \(H, W, C\)"),
        (torch.zeros(3, 4, 4), r"<torch>: float tensors \(torch.float32\) are not images"),
        (torch.zeros(3, 4, 4, dtype=torch.int16), r"<torch>: dtype torch.int16 is not supported"),
        (torch.zeros(2, 8, 8, dtype=torch.uint8), r"<torch>: 2 channels"),
        (torch.zeros(8, 8, 2, dtype=torch.uint8), r"<torch>: 2 channels"),
        (
            torch.zeros(8, 8, 6, dtype=torch.uint8),
            r"<torch>: tensor of shape \(8, 8, 6\) has neither 1, 3 or 4 channels",
        ),
        (Image.new("F", (4, 4)), r"<PIL.Image>: image mode 'F' is not supported"),
        ([1, 2, 3], r"cannot load an image from a list"),
    ],
)
def test_unsupported_inputs(src, message):
    with pytest.raises(UnsupportedImageError, match=message):
        load_image(src)


def test_truncated_pil_image_fails_at_load(tmp_path, sample):
    data = Path(sample("rocket.jpg")).read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(TruncatedImageError, match=r"<PIL.Image>: the image data ends early or is corrupt"):
        load_image(Image.open(cut))
