"""Both of the kit's pixel backends, bit for bit, against the real code paths on every sample image.

- the torch backend against SGLang's own ``_gpu_preprocess_images`` (``processors/kimi_k25.py``) run on
  the CPU with ``kimi_k3_image_processing``'s ``to_chw_uint8``, ``fill_transparent_bg`` and
  ``normalization_tensors``, as ``get_image_feature``'s gpu group calls it, with the resize from
  SGLang's ``navit_resize_config``;
- the checkpoint backend against the checkpoint processor's SHA-256 in ``tests/goldens/`` (the
  consumer's processor is not part of SGLang), on the resize SGLang computes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from PIL import Image

from kimi_viz.data import sample_images
from kimi_viz.preprocess.config import get_config
from kimi_viz.preprocess.processor import Processor

from .lane import module, record

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "pixel_goldens.json"
PRESETS = {"kimi-k3": "kimi_k3", "kimi-k25": "kimi_k25"}


def _sha(tensor) -> str:
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()


def _sglang_torch_path(image: Image.Image, preset: str):
    import torch

    k25 = module("sglang.srt.multimodal.processors.kimi_k25")
    k3 = module("sglang.srt.multimodal.kimi_k3_image_processing")
    c = get_config(preset)
    resize = k25.navit_resize_config(
        image.width,
        image.height,
        c.patch_size,
        c.merge_kernel_size,
        c.in_patch_limit,
        c.patch_limit_on_one_side,
        c.fixed_output_tokens,
    )
    cfg = c.to_media_proc_cfg()
    scale, bias = k3.normalization_tensors(cfg["image_mean"], cfg["image_std"], torch.device("cpu"))
    background = cfg.get("transparent_bg_config")
    pixels, grids = k25._gpu_preprocess_images(
        [image],
        [resize],
        scale,
        bias,
        c.patch_size,
        to_chw=lambda img: k3.to_chw_uint8(img, device=torch.device("cpu")),
        post_resize=lambda x: k3.fill_transparent_bg(x, background),
    )
    return resize, pixels, grids


def test_both_backends_are_bit_identical_to_the_real_paths_on_every_sample_image():
    goldens = json.loads(GOLDENS.read_text())
    mismatches, compared = [], 0
    for preset, key in PRESETS.items():
        expected = {g["file"]: g for g in goldens["images"][key] if not g.get("exif_transpose")}  # as loaded
        torch_backend = Processor(preset, "torch", device="cpu")
        checkpoint = Processor(preset, "checkpoint")
        for path in sample_images():
            with Image.open(path) as opened:
                opened.load()
                image = opened.copy()
            resize, real_pixels, real_grids = _sglang_torch_path(image, preset)
            ours = torch_backend.preprocess(image)
            if _sha(ours.pixel_values) != _sha(real_pixels):
                mismatches.append(f"{preset} {path.name}: torch backend differs from SGLang's _gpu_preprocess_images")
            if ours.grid_thws.tolist() != real_grids.tolist():
                mismatches.append(f"{preset} {path.name}: grid {ours.grid_thws.tolist()} != {real_grids.tolist()}")
            record_resize = ours.records[0].resize.to_sglang()
            if {k: record_resize[k] for k in resize} != dict(resize):
                mismatches.append(f"{preset} {path.name}: resize {record_resize} != navit_resize_config {resize}")
            cpu = checkpoint.preprocess(image)
            if path.name in expected and _sha(cpu.pixel_values) != expected[path.name]["pixel_values_sha256"]:
                mismatches.append(f"{preset} {path.name}: checkpoint backend differs from the checkpoint processor")
            compared += 1
    record("processor", images=compared, backends=2, disagreements=len(mismatches))
    assert mismatches == []
