"""``kimi-viz encode`` on sample images with the tiny preset (and a tiny fake checkpoint)."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from kimi_viz.cli import main
from kimi_viz.encoder import VisionEncoder
from kimi_viz.preprocess.processor import Processor


def test_encode_json_accounts_for_rows_and_tokens(sample, capsys):
    paths = [str(sample("chelsea.png")), str(sample("astronaut_tiny_20x5.png")), str(sample("text.png"))]
    assert main(["encode", *paths, "--preset", "tiny", "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = Processor("kimi-k3").preprocess(paths)
    assert report["encoder"] == "tiny" and report["device"] == "cpu" and report["dtype"] == "float32"
    assert report["weights"] == {"source": "random", "seed": 0}
    assert [item["grid_thw"] for item in report["images"]] == [list(r.grid_thw) for r in expected.records]
    assert [item["grid_thw"] for item in report["images"]] == [[1, 22, 34], [1, 2, 2], [1, 14, 32]]
    for item, record in zip(report["images"], expected.records):
        t, h, w = record.grid_thw
        assert item["rows_in"] == t * h * w == record.rows[1] - record.rows[0]
        assert item["tokens_out"] == item["media_pad_tokens"] == (h // 2) * (w // 2) == record.num_tokens
        assert item["tokens_match"] is True
        assert item["feature_dim"] == 96
        assert item["time_ms"] > 0
    assert report["total_rows_in"] == expected.pixel_values.shape[0]
    assert report["total_tokens_out"] == expected.records[-1].token_span[1]


def test_encode_table(sample, capsys):
    assert main(["encode", str(sample("astronaut_tiny_20x5.png")), "--preset", "tiny", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("encoder tiny (0.2 M parameters, random weights (seed 0)) on cpu in float32")
    assert out[1].split() == [
        "#",
        "grid",
        "t×h×w",
        "rows",
        "in",
        "tokens",
        "out",
        "<|media_pad|>",
        "time",
        "ms",
        "image",
    ]
    assert out[2].split()[:5] == ["0", "1×2×2", "4", "1", "1"]


def test_device_cuda_without_cuda_exits_2(sample, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = main(["encode", str(sample("astronaut_tiny_20x5.png")), "--preset", "tiny", "--device", "cuda"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("kimi-viz encode: error: device 'cuda' was asked for but CUDA is not available")


def write_tiny_checkpoint(folder, model: VisionEncoder) -> None:
    """A two-shard checkpoint: the vision tensors, and a language-model shard that is never opened."""
    c = model.config
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "vision.safetensors"))
    (folder / "language.safetensors").write_bytes(b"not a safetensors file")
    weight_map = dict.fromkeys(model.state_dict(), "vision.safetensors")
    weight_map["language_model.lm_head.weight"] = "language.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "kimi_k3",
                "vision_config": {
                    "vt_hidden_size": c.hidden_size,
                    "vt_num_attention_heads": c.num_heads,
                    "vt_num_hidden_layers": c.num_layers,
                    "vt_intermediate_size": c.intermediate_size,
                    "qkv_hidden_size": c.qkv_hidden_size,
                    "init_pos_emb_height": c.pos_emb_height,
                    "init_pos_emb_width": c.pos_emb_width,
                    "merge_kernel_size": [2, 2],
                    "text_hidden_size": c.text_hidden_size,
                },
            }
        )
    )


def test_encode_with_a_checkpoint_folder(sample, capsys, tmp_path):
    source = VisionEncoder.random("tiny", seed=5, device="cpu")
    write_tiny_checkpoint(tmp_path, source)
    path = str(sample("astronaut_tiny_20x5.png"))
    assert main(["encode", path, "--checkpoint", str(tmp_path), "--device", "cpu", "--dtype", "bf16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["weights"]["source"] == "checkpoint"
    assert report["weights"]["load_report"]["missing"] == []
    assert report["weights"]["load_report"]["shards_opened"] == ["vision.safetensors"]
    assert report["dtype"] == "bfloat16"
    assert report["images"][0]["tokens_out"] == 1


def test_missing_checkpoint_exits_2(sample, capsys, tmp_path):
    code = main(["encode", str(sample("astronaut_tiny_20x5.png")), "--checkpoint", str(tmp_path), "--device", "cpu"])
    assert code == 2
    assert "config.json does not exist" in capsys.readouterr().err
