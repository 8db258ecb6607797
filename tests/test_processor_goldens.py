"""Both pixel backends against the goldens computed with the checkpoint processor and SGLang 0.5.23."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from kimi_viz.errors import DeviceError, KimiVizError
from kimi_viz.preprocess.config import ProcessorConfig, get_config
from kimi_viz.preprocess.images import load_image
from kimi_viz.preprocess.pixels_torch import normalize_and_patchify, to_chw_uint8, write_rows
from kimi_viz.preprocess.processor import (
    Processor,
    checkpoint_pixels,
    normalization_lut,
    pad_mask,
    torch_pixels,
)
from kimi_viz.preprocess.records import (
    PATCH_CONTENT,
    PATCH_FULLY_PADDING,
    PATCH_PARTLY_PADDING,
)
from kimi_viz.preprocess.resize import ResizeConfig, resize_config

GOLDENS = json.loads((Path(__file__).parent / "goldens" / "pixel_goldens.json").read_text())
PRESETS = {"kimi_k3": "kimi-k3", "kimi_k25": "kimi-k25"}
CASES = [
    (key, i, f"{key}:{entry['file']}:exif={entry['exif_transpose']}")
    for key, entries in GOLDENS["images"].items()
    for i, entry in enumerate(entries)
]


def sha256(rows: torch.Tensor) -> str:
    return hashlib.sha256(rows.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def outputs(sample):
    """Every golden image through every preset, backend and loader policy, once per module."""
    cache = {}
    for key, entries in GOLDENS["images"].items():
        for backend in ("checkpoint", "torch"):
            for exif in (False, True):
                chosen = [e for e in entries if e["exif_transpose"] == exif]
                proc = Processor(PRESETS[key], backend, "cpu", exif_transpose=exif, keep_images=False)
                out = proc.preprocess([sample(e["file"]) for e in chosen])
                for entry, record in zip(chosen, out.records):
                    cache[(key, entry["file"], exif, backend)] = (out, record)
    return cache


@pytest.mark.parametrize("key,index", [c[:2] for c in CASES], ids=[c[2] for c in CASES])
def test_both_backends_match_goldens(outputs, key, index):
    entry = GOLDENS["images"][key][index]
    cpu_out, cpu = outputs[(key, entry["file"], entry["exif_transpose"], "checkpoint")]
    gpu_out, gpu = outputs[(key, entry["file"], entry["exif_transpose"], "torch")]
    assert list(cpu.source_size) == entry["source_size"]
    assert cpu.source_mode == entry["source_mode"]
    assert [list(cpu.grid_thw)] == entry["grid_thws"] == entry["gpu_path"]["grid_thws"]
    assert gpu.grid_thw == cpu.grid_thw and gpu.rows == cpu.rows
    assert cpu.patches == entry["rows"] == cpu.rows[1] - cpu.rows[0]

    cpu_rows = cpu_out.image_rows(cpu.index)
    gpu_rows = gpu_out.image_rows(gpu.index)
    assert cpu_rows.dtype == gpu_rows.dtype == torch.float32
    assert sha256(cpu_rows) == entry["pixel_values_sha256"]
    assert sha256(gpu_rows) == entry["gpu_path"]["pixel_values_sha256"]
    assert float((cpu_rows - gpu_rows).abs().max()) == entry["gpu_path"]["max_abs_diff_vs_cpu_path"]
    assert sha256(cpu_rows[:1]) == entry["first_row_sha256"]
    assert sha256(cpu_rows[-1:]) == entry["last_row_sha256"]


def test_batches_are_packed_in_order(outputs):
    out, _ = outputs[("kimi_k3", "astronaut.png", False, "checkpoint")]
    assert out.backend == "checkpoint" and out.config is get_config("kimi-k3")
    assert out.grid_thws.dtype == torch.int64 and out.grid_thws.shape == (len(out.records), 3)
    assert out.pixel_values.shape == (int(out.grid_thws.prod(dim=1).sum()), 3, 14, 14)
    row = token = 0
    for record in out.records:
        assert record.rows[0] == row and record.token_span[0] == token
        assert record.num_tokens == record.resize.tokens == record.patches // 4
        row, token = record.rows[1], record.token_span[1]
    assert row == out.pixel_values.shape[0]


def test_chelsea_record(sample):
    out = Processor("kimi-k3").preprocess([sample("astronaut_tiny_20x5.png"), sample("chelsea.png")])
    tiny, chelsea = out.records
    assert tiny.rows == (0, 4) and tiny.token_span == (0, 1)
    assert chelsea.index == 1 and chelsea.source.endswith("chelsea.png")
    assert chelsea.source_size == (451, 300) and chelsea.source_mode == "RGB"
    assert chelsea.loader == {"exif_transpose": False, "alpha": "keep", "exif_orientation": 1}
    assert chelsea.resize == ResizeConfig(
        new_width=451, new_height=300, pad_width=25, pad_height=8, tokens=187, grid=(1, 22, 34)
    )
    assert chelsea.rows == (4, 752) and chelsea.token_span == (1, 188)
    # 451 = 32 patches + 3 px, 300 = 21 patches + 6 px: one partial column, one partial row, one padding column
    assert chelsea.pad_mask.shape == (22, 34) and chelsea.pad_mask.dtype == np.int8
    assert int((chelsea.pad_mask == PATCH_CONTENT).sum()) == 21 * 32
    assert int((chelsea.pad_mask == PATCH_PARTLY_PADDING).sum()) == 22 + 32
    assert int((chelsea.pad_mask == PATCH_FULLY_PADDING).sum()) == 22
    assert (chelsea.pad_mask[:, 33] == PATCH_FULLY_PADDING).all()
    assert chelsea.to_json()["padding_patches"] == {"full": 22, "partial": 54}
    # the kept image is the padded uint8 RGB input of the patchifier
    assert chelsea.resized.shape == (308, 476, 3) and chelsea.resized.dtype == np.uint8
    assert (chelsea.resized[300:] == 0).all() and (chelsea.resized[:, 451:] == 0).all()
    assert np.array_equal(chelsea.resized[:300, :451], np.asarray(Image.open(sample("chelsea.png")).convert("RGB")))
    # padding normalises to -1.0
    assert (out.image_rows(1)[33] == -1.0).all()


def test_keep_images_false_and_torch_resized(sample):
    assert Processor(keep_images=False).preprocess(sample("chelsea.png")).records[0].resized is None
    cpu = Processor("kimi-k3").preprocess(sample("horse.png")).records[0]
    gpu = Processor("kimi-k3", backend="torch", device="cpu").preprocess(sample("horse.png")).records[0]
    assert gpu.resized.shape == cpu.resized.shape == (336, 420, 3)
    # horse is not resized under K3: both paths composite the same chessboard on the same pixels
    assert int(np.abs(gpu.resized.astype(int) - cpu.resized.astype(int)).max()) <= 1


def test_pad_mask_of_an_exact_fit():
    mask = pad_mask(resize_config(56, 28, "kimi-k3"))
    assert mask.shape == (2, 4) and (mask == PATCH_CONTENT).all()
    mask = pad_mask(resize_config(1, 1, "kimi-k3"))
    assert mask.tolist() == [[PATCH_PARTLY_PADDING, PATCH_FULLY_PADDING], [PATCH_FULLY_PADDING, PATCH_FULLY_PADDING]]


def plain_checkpoint(image: Image.Image, resize: ResizeConfig, config: ProcessorConfig) -> np.ndarray:
    """A plain transcription of the checkpoint processor (RGB-first variant, float64 normalisation)."""
    x = np.asarray(image.convert("RGB").resize((resize.new_width, resize.new_height), Image.Resampling.BICUBIC))
    x = np.pad(x, ((0, resize.pad_height), (0, resize.pad_width), (0, 0)))
    x = (x / 255.0).astype(np.float32)
    x -= np.array(config.image_mean)
    x *= 1.0 / np.array(config.image_std)
    p = config.patch_size
    h, w = x.shape[0] // p, x.shape[1] // p
    return x.reshape(1, h, p, w, p, 3).transpose(0, 1, 3, 5, 2, 4).reshape(-1, 3, p, p)


def test_lut_matches_float64_normalisation_per_channel(sample):
    clip = get_config(
        {
            **get_config("kimi-k25").to_media_proc_cfg(),
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
        }
    )
    lut = normalization_lut(clip.image_mean, clip.image_std)
    assert lut.dtype == np.float32 and lut.shape == (3, 256) and not lut.flags.writeable
    image = load_image(sample("coffee.png")).image
    resize = resize_config(300, 200, clip)  # a foreign resize: coffee is 600x400
    padded, rows = checkpoint_pixels(image, resize, clip)
    assert padded.shape == (224, 308, 3) and tuple(rows.shape) == (8 * 11 * 2 * 2, 3, 14, 14)
    assert np.array_equal(rows.numpy(), plain_checkpoint(image, resize, clip))


def test_foreign_resize_config_is_applied_as_given(sample):
    """A resize computed for another size (a stale or foreign config) decides the grid, on both paths."""
    image = load_image(sample("chelsea.png")).image
    k25_resize = resize_config(225, 150, "kimi-k25")  # chelsea is 451x300
    assert k25_resize.grid == (1, 12, 18)
    _, rows = checkpoint_pixels(image, k25_resize, "kimi-k25")
    assert rows.shape[0] == 12 * 18
    assert np.array_equal(rows.numpy(), plain_checkpoint(image, k25_resize, get_config("kimi-k25")))
    gpu_rows = torch_pixels(to_chw_uint8(image), k25_resize, "kimi-k25", "cpu")
    assert gpu_rows.shape == rows.shape
    # downscaled: the two paths agree within one 8-bit level (2/255 after normalisation)
    assert 0 < float((gpu_rows - rows).abs().max()) <= 2 / 255 + 1e-6


def test_torch_pixels_on_raw_chw_tensors(sample):
    """SGLang's deferred gpu items are CHW uint8 tensors; 1-channel tensors are repeated to RGB."""
    grey = load_image(sample("camera.png")).image
    chw = torch.from_numpy(np.asarray(grey).copy()).unsqueeze(0)  # [1, 512, 512]
    resize = resize_config(512, 512, "kimi-k3")
    out = Processor("kimi-k3", backend="torch", device="cpu").preprocess(sample("camera.png"))
    assert torch.equal(torch_pixels(chw, resize, "kimi-k3", "cpu"), out.pixel_values)
    with pytest.raises(KimiVizError, match="expected 1, 3 or 4"):
        torch_pixels(torch.zeros(2, 28, 28, dtype=torch.uint8), resize_config(28, 28), "kimi-k3", "cpu")
    with pytest.raises(KimiVizError, match="expects raw uint8 pixels, got torch.float32"):
        torch_pixels(torch.zeros(3, 28, 28), resize_config(28, 28), "kimi-k3", "cpu")


def test_before_resize_fill_stage(sample):
    """A config that composites before resizing (the checkpoint's default stage) gives the composite, resized."""
    cfg = get_config(
        {
            **get_config("kimi-k3").to_media_proc_cfg(),
            "transparent_bg_fill_stage": "before_resize",
            "in_patch_limit": 256,
        }
    )
    image = load_image(sample("horse.png")).image
    resize = resize_config(*image.size, cfg)
    padded, _ = checkpoint_pixels(image, resize, cfg)
    after = get_config({**cfg.to_media_proc_cfg(), "transparent_bg_fill_stage": "after_resize"})
    padded_after, _ = checkpoint_pixels(image, resize, after)
    assert padded.shape == padded_after.shape == (224, 252, 3)
    assert not np.array_equal(padded, padded_after)  # the chessboard is resized in one case only


def test_processor_rejects_unknown_backend_and_device():
    with pytest.raises(KimiVizError, match="unknown backend 'gpu'; expected one of checkpoint, torch"):
        Processor(backend="gpu")
    assert Processor(backend="torch", device="auto").device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert Processor(backend="torch").device == Processor(backend="torch", device="auto").device  # the default
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA is not available"):
            Processor(backend="torch", device="cuda")


def test_empty_batch():
    out = Processor().preprocess([])
    assert tuple(out.pixel_values.shape) == (0, 3, 14, 14) and tuple(out.grid_thws.shape) == (0, 3)
    assert out.records == []


def alpha_test_image(width: int, height: int) -> Image.Image:
    """A noisy RGBA image whose alpha runs from 0 to 255 across the width."""
    rng = np.random.default_rng(0)
    smooth = np.kron(
        rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8), np.ones((16, 16, 1), np.uint8)
    )[:height, :width]
    noisy = np.clip(smooth.astype(int) + rng.integers(-40, 41, smooth.shape), 0, 255).astype(np.uint8)
    alpha = np.broadcast_to(np.linspace(0, 255, width).astype(np.uint8), (height, width))
    return Image.fromarray(np.dstack([noisy, alpha]), mode="RGBA")


def in_mode(rgba: Image.Image, mode: str) -> Image.Image:
    """The RGBA test image in another mode: a palette with a transparent index, 16-bit grey, ..."""
    if mode == "P":
        palette = rgba.convert("RGB").quantize(64)
        palette.info["transparency"] = 0
        return palette
    if mode == "I;16":
        return Image.fromarray(np.asarray(rgba.convert("L")).astype(np.uint16) * 257)
    return rgba.convert(mode)


# (480, 720) -> one-pixel shrink, a ~1.5% shrink (like 4200x3150 -> 4138x3103), one side only,
# shrinks that Pillow 13 runs vertical pass first (it picks the order of its two passes), no change,
# and an enlargement (a foreign resize config).
SIZES = [(479, 719), (472, 709), (480, 680), (450, 720), (470, 400), (240, 100), (480, 720), (500, 760)]


@pytest.mark.parametrize("preset", ["kimi-k3", "kimi-k25"])
@pytest.mark.parametrize("mode", ["RGB", "L", "LA", "RGBA", "P", "CMYK", "I;16"])
def test_checkpoint_resize_is_one_pil_resize(preset, mode):
    """The padded image equals one PIL bicubic resize of the loaded image, filled as the checkpoint
    fills it (K3: after the resize, on a chessboard; K2.5: ``convert("RGB")`` before it)."""
    config = get_config(preset)
    image = load_image(in_mode(alpha_test_image(480, 720), mode)).image
    assert image.mode == ("L" if mode == "I;16" else mode)
    for width, height in SIZES:
        resize = resize_config(width, height, config)  # applied as given to the 480x720 image
        assert (resize.new_width, resize.new_height) == (width, height)
        padded, rows = checkpoint_pixels(image, resize, config)
        if config.fill_stage == "before_resize":
            expected = np.asarray(image.convert("RGB").resize((width, height), Image.Resampling.BICUBIC))
        else:
            resized = image.resize((width, height), Image.Resampling.BICUBIC)
            has_alpha = "A" in resized.getbands() or "transparency" in resized.info
            expected = plain_fill(resized, config.background()) if has_alpha else np.asarray(resized.convert("RGB"))
        assert np.array_equal(padded[:height, :width], expected), (mode, width, height)
        assert not padded[height:].any() and not padded[:, width:].any()
        assert rows.shape[0] == resize.grid[1] * resize.grid[2]


def plain_fill(image: Image.Image, bg: dict) -> np.ndarray:
    """The checkpoint's fill_transparent_bg_with, transcribed plainly."""
    img = np.array(image.convert("RGBA"))
    h, w = img.shape[:2]
    if bg["pattern"] == "chessboard":
        board = np.ones((h, w, 3), dtype=np.uint8) * bg["chessboard_white_value"]
        s = bg["chessboard_square_size"]
        for y in range(0, h, s):
            for x in range(0, w, s):
                if (y // s + x // s) % 2 == (1 if bg["chessboard_square_on_top_left"] else 0):
                    board[y : y + s, x : x + s] = bg["chessboard_gray_value"]
    else:
        board = np.full((h, w, 3), {"white": 255, "black": 0, "gray": 128}[bg["pattern"]], dtype=np.uint8)
    alpha = np.stack([img[:, :, 3].astype(np.float32) / 255.0] * 3, axis=2)
    return (alpha * img[:, :, :3] + (1 - alpha) * board).astype(np.uint8)


@pytest.mark.parametrize(
    "bg",
    [
        {
            "pattern": "chessboard",
            "chessboard_square_size": 5,
            "chessboard_square_on_top_left": False,
            "chessboard_white_value": 250,
            "chessboard_gray_value": 10,
        },
        {"pattern": "white"},
        {"pattern": "gray"},
        {"pattern": "black"},
    ],
)
def test_background_patterns_match_the_checkpoint(sample, bg):
    from kimi_viz.preprocess.config import BACKGROUND_DEFAULTS
    from kimi_viz.preprocess.pixels_checkpoint import fill_transparent

    bg = {**BACKGROUND_DEFAULTS, **bg}
    for name in ("horse.png", "camera_vignette_la.png"):
        image = load_image(sample(name)).image.resize((203, 157), Image.Resampling.BICUBIC)
        assert np.array_equal(fill_transparent(image, bg), plain_fill(image, bg)), name


def test_unknown_background_pattern_is_a_config_error():
    from kimi_viz.errors import ConfigError
    from kimi_viz.preprocess.pixels_checkpoint import background

    with pytest.raises(
        ConfigError,
        match=r"^transparent_bg_config.pattern: expected one of white, black, gray, chessboard, got 'plaid'",
    ):
        background(4, 4, {"pattern": "plaid"})


@settings(max_examples=60, deadline=None)
@given(
    height=st.integers(1, 90),
    width=st.integers(1, 90),
    patch=st.sampled_from([1, 2, 7, 14, 16]),
    pad_h=st.integers(0, 40),
    pad_w=st.integers(0, 40),
    mean=st.lists(st.floats(-2.0, 2.0, allow_subnormal=False), min_size=3, max_size=3),
    std=st.lists(st.floats(0.01, 3.0), min_size=3, max_size=3),
    seed=st.integers(0, 2**31 - 1),
)
def test_write_rows_is_bit_identical_to_sglangs_pad_affine_patchify(
    height, width, patch, pad_h, pad_w, mean, std, seed
):
    """The Processor's two-pass rows equal SGLang's pad, addcmul, patchify sequence bit for bit (zero means
    and negative zeros included), whatever the size, padding and normalisation."""
    padded_h = -(-(height + pad_h) // patch) * patch
    padded_w = -(-(width + pad_w) // patch) * patch
    x = torch.randint(0, 256, (1, 3, height, width), generator=torch.Generator().manual_seed(seed)).float()
    mean = [0.0 if abs(m) < 0.5 else m for m in mean]  # zero means give -0.0 biases: the sign must survive
    scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(1, 3, 1, 1)
    bias = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32).view(1, 3, 1, 1)
    expected = normalize_and_patchify(x, scale, bias, patch, padded_h, padded_w)
    out = torch.full_like(expected, float("nan"))
    write_rows(out, x, scale, bias, patch, padded_h, padded_w)
    assert torch.equal(out.view(torch.int32), expected.contiguous().view(torch.int32))
