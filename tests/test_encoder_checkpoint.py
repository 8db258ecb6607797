"""Loading the vision tensors of a sharded checkpoint without touching the language model.

Each test builds a fake checkpoint in ``tmp_path``: ``config.json`` with a ``vision_config``,
``model.safetensors.index.json``, three shards holding the tiny tower and projector under their
real names (one also holds a language-model tensor, as real shards do), and one language-model
shard written as garbage bytes. ``safetensors.safe_open`` is wrapped so opening that shard fails
the test, and any read of it would fail anyway.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safetensors
import torch
from safetensors.torch import save_file

from kimi_viz.encoder import ENCODER_PRESETS, VisionEncoder
from kimi_viz.errors import CheckpointError

LM_SHARD = "model-00004-of-00004.safetensors"
TINY = ENCODER_PRESETS["tiny"]


def vision_config_json() -> dict:
    c = TINY
    return {
        "patch_size": c.patch_size,
        "init_pos_emb_height": c.pos_emb_height,
        "init_pos_emb_width": c.pos_emb_width,
        "init_pos_emb_time": c.pos_emb_time,
        "pos_emb_type": "divided_fixed",
        "vt_num_attention_heads": c.num_heads,
        "vt_num_hidden_layers": c.num_layers,
        "vt_hidden_size": c.hidden_size,
        "vt_intermediate_size": c.intermediate_size,
        "merge_kernel_size": [2, 2],
        "merge_type": "sd2_tpool",
        "mm_projector_type": "patchmergerv2",
        "projector_hidden_act": "gelu",
        "projector_ln_eps": 1e-5,
        "qkv_hidden_size": c.qkv_hidden_size,
        "norm_type": "rmsnorm",
        "attn_bias": False,
        "patch_embed_proj_bias": False,
        "mlp_type": "mlp2",
        "linear_bias": False,
        "activation_func": "gelu_pytorch_tanh",
        "pos_emb_interpolation_mode": "bilinear",
        "text_hidden_size": c.text_hidden_size,
    }


def shard_of(key: str) -> str:
    if key.startswith("mm_projector."):
        return "model-00003-of-00004.safetensors"
    if ".blocks.1." in key or "final_layernorm" in key:
        return "model-00002-of-00004.safetensors"
    return "model-00001-of-00004.safetensors"


def write_checkpoint(
    folder: Path, tensors: dict[str, torch.Tensor], *, index: bool = True, config: bool = True
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shards: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        shards.setdefault(shard_of(key), {})[key] = value.contiguous()
    # a real shard mixes in language-model tensors
    shards["model-00003-of-00004.safetensors"]["language_model.model.norm.weight"] = torch.ones(8)
    weight_map = {}
    for name, content in shards.items():
        save_file(content, str(folder / name))
        weight_map.update(dict.fromkeys(content, name))
    lm_keys = [f"language_model.model.layers.{i}.mlp.experts.{j}.w1.weight" for i in range(3) for j in range(4)]
    weight_map.update(dict.fromkeys(lm_keys, LM_SHARD))
    (folder / LM_SHARD).write_bytes(b"\x00garbage: a 1 T-parameter language model lives here\xff" * 64)
    if index:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map})
        )
    if config:
        (folder / "config.json").write_text(
            json.dumps(
                {
                    "model_type": "kimi_k3",
                    "architectures": ["KimiK3ForConditionalGeneration"],
                    "text_config": {"hidden_size": TINY.text_hidden_size},
                    "vision_config": vision_config_json(),
                }
            )
        )


@pytest.fixture
def source() -> VisionEncoder:
    return VisionEncoder.random("tiny", seed=11, device="cpu")


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Record every shard opened; opening the language-model shard fails the test."""
    paths: list[str] = []
    real = safetensors.safe_open

    def guarded(path, *args, **kwargs):
        paths.append(Path(path).name)
        if Path(path).name == LM_SHARD:
            pytest.fail(f"the loader opened the language-model shard {path}")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(safetensors, "safe_open", guarded)
    return paths


def test_loads_only_vision_shards_and_reproduces_the_model(tmp_path, source, opened):
    write_checkpoint(tmp_path, source.state_dict())
    model = VisionEncoder.from_checkpoint(tmp_path, device="cpu")
    report = model.load_report
    assert report.shards_opened == [
        "model-00001-of-00004.safetensors",
        "model-00002-of-00004.safetensors",
        "model-00003-of-00004.safetensors",
    ]
    assert sorted(opened) == report.shards_opened
    assert report.shards_skipped == 1
    assert report.missing == [] and report.unexpected == []
    assert report.loaded == sorted(source.state_dict())
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    grids = [(1, 4, 6), (1, 2, 2)]
    x = torch.randn(28, 3, 14, 14, generator=torch.Generator().manual_seed(0))
    assert torch.equal(model.encode(x, grids).features, source.encode(x, grids).features)
    assert "3 shard(s)" in report.summary() and "1 other shard(s) left unopened" in report.summary()


def test_dtype_bf16_is_applied_on_load(tmp_path, source, opened):
    write_checkpoint(tmp_path, source.state_dict())
    model = VisionEncoder.from_checkpoint(tmp_path, device="cpu", dtype="bf16")
    assert model.dtype == torch.bfloat16
    key = "mm_projector.proj.0.weight"
    assert torch.equal(model.state_dict()[key], source.state_dict()[key].to(torch.bfloat16))


def test_missing_key_is_reported_and_strict_refuses(tmp_path, source, opened):
    tensors = dict(source.state_dict())
    del tensors["vision_tower.encoder.blocks.1.wo.weight"]
    write_checkpoint(tmp_path, tensors)
    model = VisionEncoder.from_checkpoint(tmp_path, device="cpu")
    assert model.load_report.missing == ["vision_tower.encoder.blocks.1.wo.weight"]
    assert model.load_report.unexpected == []
    with pytest.raises(
        CheckpointError, match=r"1 missing vision key\(s\) \(first: \['vision_tower.encoder.blocks.1.wo.weight'\]\)"
    ):
        VisionEncoder.from_checkpoint(tmp_path, device="cpu", strict=True)


def test_unexpected_vision_key_is_reported(tmp_path, source, opened):
    tensors = dict(source.state_dict())
    tensors["vision_tower.encoder.blocks.2.norm0.weight"] = torch.ones(TINY.hidden_size)
    write_checkpoint(tmp_path, tensors)
    model = VisionEncoder.from_checkpoint(tmp_path, device="cpu")
    assert model.load_report.unexpected == ["vision_tower.encoder.blocks.2.norm0.weight"]
    assert model.load_report.missing == []
    assert "language_model.model.norm.weight" not in model.load_report.unexpected
    with pytest.raises(CheckpointError, match="1 unexpected"):
        VisionEncoder.from_checkpoint(tmp_path, device="cpu", strict=True)


def test_shape_mismatch_names_the_file_and_key(tmp_path, source, opened):
    tensors = dict(source.state_dict())
    tensors["vision_tower.encoder.blocks.1.wo.weight"] = torch.zeros(TINY.hidden_size, 2 * TINY.qkv_hidden_size)
    write_checkpoint(tmp_path, tensors)
    with pytest.raises(CheckpointError) as info:
        VisionEncoder.from_checkpoint(tmp_path, device="cpu")
    message = str(info.value)
    assert str(tmp_path / "model-00002-of-00004.safetensors") in message
    assert "tensor vision_tower.encoder.blocks.1.wo.weight has shape [64, 128]" in message
    assert "expects [64, 64]" in message


def test_missing_index_and_config_name_the_file(tmp_path, source, opened):
    write_checkpoint(tmp_path / "no-index", source.state_dict(), index=False)
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json does not exist; expected the sharded"):
        VisionEncoder.from_checkpoint(tmp_path / "no-index", device="cpu")
    write_checkpoint(tmp_path / "no-config", source.state_dict(), config=False)
    with pytest.raises(CheckpointError, match=r"config\.json does not exist"):
        VisionEncoder.from_checkpoint(tmp_path / "no-config", device="cpu")
    with pytest.raises(CheckpointError, match="does not exist"):
        VisionEncoder.from_checkpoint(tmp_path / "nowhere", device="cpu")


def test_shard_missing_from_disk_is_named(tmp_path, source, opened):
    write_checkpoint(tmp_path, source.state_dict())
    (tmp_path / "model-00002-of-00004.safetensors").unlink()
    with pytest.raises(
        CheckpointError,
        match=r"model-00002-of-00004\.safetensors does not exist but "
        r"model\.safetensors\.index\.json maps",
    ):
        VisionEncoder.from_checkpoint(tmp_path, device="cpu")


def test_text_width_comes_from_text_config_when_vision_config_lacks_it(tmp_path, source, opened):
    write_checkpoint(tmp_path, source.state_dict())
    config = json.loads((tmp_path / "config.json").read_text())
    del config["vision_config"]["text_hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = VisionEncoder.from_checkpoint(tmp_path, device="cpu")
    assert model.config.text_hidden_size == TINY.text_hidden_size == config["text_config"]["hidden_size"]
    assert model.load_report.missing == []


def test_a_single_model_safetensors_file_works_without_an_index(tmp_path, source, opened):
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k3", "vision_config": vision_config_json()}))
    model = VisionEncoder.from_checkpoint(tmp_path, device="cpu")
    assert model.load_report.shards_opened == ["model.safetensors"] and model.load_report.missing == []
