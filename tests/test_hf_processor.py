"""load_hf_processor and compare, against a small remote-code processor folder written by the test."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch

from kimi_viz.errors import CheckpointError, KimiVizError
from kimi_viz.preprocess.processor import Processor, compare, load_hf_processor

# A plain transcription of the checkpoint processor (K2.5 style: RGB first, PIL resize, np.pad,
# float64 normalisation, numpy patchify), with the resampling filter read from the config so the
# test can also build a deliberately different processor.
REMOTE_CODE = textwrap.dedent(
    """
    import math

    import numpy as np
    import torch
    from PIL import Image
    from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


    class TinyKimiImageProcessor(BaseImageProcessor):
        model_input_names = ["pixel_values", "grid_thws"]

        def __init__(self, media_proc_cfg=None, resample="bicubic", **kwargs):
            super().__init__(**kwargs)
            self.media_proc_cfg = dict(media_proc_cfg or {})
            self.resample = resample

        def _size(self, width, height):
            c = self.media_proc_cfg
            p, side = c["patch_size"], c["patch_limit_on_one_side"]
            s1 = math.sqrt(c["in_patch_limit"] / (max(1.0, width // p) * max(1.0, height // p)))
            scale = min(1.0, s1, side * p / width, side * p / height)
            new_w = min(max(1, int(width * scale)), side * p)
            new_h = min(max(1, int(height * scale)), side * p)
            f = c["merge_kernel_size"] * p
            return new_w, new_h, (f - new_w % f) % f, (f - new_h % f) % f

        def preprocess(self, medias, return_tensors=None, **kwargs):
            c = self.media_proc_cfg
            p = c["patch_size"]
            mode = {"bicubic": Image.Resampling.BICUBIC, "nearest": Image.Resampling.NEAREST}[self.resample]
            rows, grids = [], []
            for media in medias:
                image = media["image"].convert("RGB")
                new_w, new_h, pad_w, pad_h = self._size(*image.size)
                x = np.asarray(image.resize((new_w, new_h), resample=mode))
                x = np.pad(x, ((0, pad_h), (0, pad_w), (0, 0)))
                x = (x / 255.0).astype(np.float32)
                x -= np.array(c["image_mean"])
                x *= 1.0 / np.array(c["image_std"])
                h, w = x.shape[0] // p, x.shape[1] // p
                x = x.reshape(1, h, p, w, p, 3).transpose(0, 1, 3, 5, 2, 4).reshape(-1, 3, p, p)
                rows.append(torch.from_numpy(np.ascontiguousarray(x)))
                grids.append([1, h, w])
            data = {"pixel_values": torch.cat(rows), "grid_thws": torch.tensor(grids, dtype=torch.int64)}
            return BatchFeature(data=data, tensor_type=return_tensors)
    """
)

MEDIA_PROC_CFG = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 256,  # small, so every sample below is resized
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
IMAGES = ("chelsea.png", "horse.png", "camera.png", "coffee_palette_transparent.png")


def write_folder(folder, *, resample="bicubic", auto_map=True):
    folder.mkdir()
    config = {"media_proc_cfg": MEDIA_PROC_CFG, "resample": resample, "image_processor_type": "TinyKimiImageProcessor"}
    if auto_map:
        config["auto_map"] = {"AutoImageProcessor": "tiny_kimi_processing.TinyKimiImageProcessor"}
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    (folder / "tiny_kimi_processing.py").write_text(REMOTE_CODE)
    return folder


@pytest.fixture
def offline_hf(tmp_path, monkeypatch):
    """Keep transformers offline and its module cache inside tmp_path."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    import transformers.dynamic_module_utils as dmu

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    return tmp_path


@pytest.fixture
def paths(sample):
    return [sample(name) for name in IMAGES]


def test_load_hf_processor_runs_the_folder_code(offline_hf):
    proc = load_hf_processor(write_folder(offline_hf / "ckpt"))
    assert type(proc).__name__ == "TinyKimiImageProcessor"
    assert proc.media_proc_cfg["in_patch_limit"] == 256


def test_compare_same_algorithm_is_exact(offline_hf, paths):
    folder = write_folder(offline_hf / "ckpt")
    ours = Processor(folder)  # the kit reads media_proc_cfg from the same folder
    report = compare(ours, load_hf_processor(folder), paths)
    assert len(report) == len(paths)
    for row in report:
        assert row["grids_equal"] is True
        assert row["grid_a"] == row["grid_b"]
        assert row["rows_a"] == row["rows_b"] == row["grid_a"][1] * row["grid_a"][2]
        assert row["max_abs_diff"] == 0.0
    # chelsea 451x300 under a 256-patch budget: scale sqrt(256 / (32 * 21)) -> 278x185 -> 280x196
    assert [row["grid_a"] for row in report] == [[1, 14, 20], [1, 16, 18], [1, 18, 18], [1, 14, 20]]


def test_compare_different_resampling_shows_pixel_difference(offline_hf, paths):
    theirs = load_hf_processor(write_folder(offline_hf / "nearest", resample="nearest"))
    report = compare(Processor(offline_hf / "nearest"), theirs, paths)
    assert all(row["grids_equal"] for row in report)
    assert all(row["max_abs_diff"] > 0.05 for row in report)


def test_compare_different_budget_reports_grid_mismatch(offline_hf, paths):
    theirs = load_hf_processor(write_folder(offline_hf / "ckpt"))
    report = compare(Processor("kimi-k3"), theirs, paths[:1])
    assert report == [
        {
            "grid_a": [1, 22, 34],
            "grid_b": [1, 14, 20],
            "grids_equal": False,
            "rows_a": 748,
            "rows_b": 280,
            "max_abs_diff": None,
        }
    ]


def test_compare_accepts_callables_and_other_backend(paths):
    ours = Processor("kimi-k3")

    def checkpoint_as_callable(pils):
        out = Processor("kimi-k3").preprocess(pils)
        return out.pixel_values, out.grid_thws

    assert [row["max_abs_diff"] for row in compare(ours, checkpoint_as_callable, paths)] == [0.0] * len(paths)
    torch_report = compare(ours, Processor("kimi-k3", backend="torch", device="cpu"), paths)
    assert all(row["grids_equal"] for row in torch_report)
    # no resize under K3 for these sizes: the two paths differ by float32 rounding only
    assert all(0.0 <= row["max_abs_diff"] <= 2.0**-22 for row in torch_report)


def test_compare_reports_rows_that_do_not_fit_the_grids(paths):
    def wrong_rows(pils):
        return torch.zeros(10, 3, 14, 14), torch.tensor([[1, 22, 34]])

    (row,) = compare(Processor("kimi-k3"), wrong_rows, paths[:1])
    assert row["grids_equal"] is True
    assert row["rows_b"] is None and row["max_abs_diff"] is None


def test_folder_without_remote_code_is_explained(tmp_path):
    folder = write_folder(tmp_path / "plain", auto_map=False)
    with pytest.raises(KimiVizError, match=r"no auto_map.AutoImageProcessor.*kimi_viz.Processor"):
        load_hf_processor(folder)


def test_missing_folder_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match=r"preprocessor_config.json does not exist"):
        load_hf_processor(tmp_path / "nowhere")


def test_unreadable_config_is_a_checkpoint_error(tmp_path):
    (tmp_path / "preprocessor_config.json").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(CheckpointError, match=r"preprocessor_config.json: not UTF-8 text .*; expected a JSON file"):
        load_hf_processor(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"preprocessor_config.json: not valid JSON"):
        load_hf_processor(tmp_path)
