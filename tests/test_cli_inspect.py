"""``kimi-viz inspect``: the JSON schema, the table, and exit code 2 on bad input."""

from __future__ import annotations

import json

import pytest

from kimi_viz.cli import main

IMAGE_KEYS = {
    "path",
    "source_size",
    "source_mode",
    "resize",
    "grid_thw",
    "patches",
    "tokens",
    "rows",
    "token_span",
    "pixel_values_sha256",
}


def run_json(capsys, *argv):
    assert main(["inspect", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_schema_and_values(capsys, sample, pixel_goldens):
    paths = [str(sample("chelsea.png")), str(sample("horse.png"))]
    report = run_json(capsys, *paths)
    assert set(report) == {"preset", "images", "total_rows", "total_tokens"}
    assert report["preset"] == "kimi-k3"
    chelsea, horse = report["images"]
    assert set(chelsea) == IMAGE_KEYS
    assert chelsea["path"] == paths[0]
    assert chelsea["source_size"] == [451, 300] and chelsea["source_mode"] == "RGB"
    assert chelsea["resize"] == {
        "new_width": 451,
        "new_height": 300,
        "pad_width": 25,
        "pad_height": 8,
        "num_tokens": 187,
        "grid_thw": [1, 22, 34],
    }
    assert chelsea["grid_thw"] == [1, 22, 34] and chelsea["patches"] == 748 and chelsea["tokens"] == 187
    assert chelsea["rows"] == [0, 748] and chelsea["token_span"] == [0, 187]
    assert horse["rows"] == [748, 1468] and horse["token_span"] == [187, 367]
    assert report["total_rows"] == 1468 and report["total_tokens"] == 367
    golden = {e["file"]: e for e in pixel_goldens["images"]["kimi_k3"] if not e["exif_transpose"]}
    assert chelsea["pixel_values_sha256"] == golden["chelsea.png"]["pixel_values_sha256"]
    assert horse["pixel_values_sha256"] == golden["horse.png"]["pixel_values_sha256"]


def test_options_reach_the_processor(capsys, sample, pixel_goldens):
    path = str(sample("chelsea_exif_orientation6.jpg"))
    report = run_json(capsys, path, "--preset", "kimi-k25", "--backend", "torch", "--exif-transpose")
    (image,) = report["images"]
    assert report["preset"] == "kimi-k25"
    assert image["source_size"] == [300, 451] and image["grid_thw"] == [1, 34, 22]
    golden = next(e for e in pixel_goldens["images"]["kimi_k25"] if e["exif_transpose"])
    assert image["pixel_values_sha256"] == golden["gpu_path"]["pixel_values_sha256"]
    discard = run_json(capsys, str(sample("horse.png")), "--alpha", "discard")
    assert discard["images"][0]["source_mode"] == "RGB"


def test_config_path_overrides_preset(capsys, sample, tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "media_proc_cfg": {
                    "patch_size": 14,
                    "merge_kernel_size": [2, 2],
                    "in_patch_limit": 256,
                    "patch_limit_on_one_side": 512,
                    "image_mean": [0.5, 0.5, 0.5],
                    "image_std": [0.5, 0.5, 0.5],
                }
            }
        )
    )
    report = run_json(capsys, str(sample("chelsea.png")), "--config", str(tmp_path))
    assert report["preset"] == tmp_path.name
    assert report["images"][0]["grid_thw"] == [1, 14, 20]


def test_table(capsys, sample, pixel_goldens):
    assert main(["inspect", str(sample("chelsea.png")), str(sample("astronaut_tiny_20x5.png"))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "preset kimi-k3"
    assert lines[1].split()[:4] == ["image", "size", "mode", "resized"]
    golden = next(e for e in pixel_goldens["images"]["kimi_k3"] if e["file"] == "chelsea.png")
    assert "451x300" in lines[2] and "1,22,34" in lines[2] and "[0, 748)" in lines[2]
    assert lines[2].split()[-1] == golden["pixel_values_sha256"][:12]
    assert "20x5" in lines[3] and "[748, 752)" in lines[3]
    assert lines[-1] == "total: 752 rows, 188 tokens"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["missing.png"], "kimi-viz inspect: error: missing.png: no such file; expected the path of an image file"),
        (["{image}", "--config", "/nonexistent/folder"], "kimi-viz inspect: error: unknown processor config"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, sample, argv, message):
    argv = [a.format(image=sample("chelsea.png")) for a in argv]
    assert main(["inspect", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(message)
