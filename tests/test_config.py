"""Processor presets, preprocessor_config.json / config.json loading, and error messages naming the key."""

from __future__ import annotations

import json

import pytest

from kimi_viz.errors import CheckpointError, ConfigError
from kimi_viz.preprocess.config import (
    PROCESSOR_PRESETS,
    ProcessorConfig,
    get_config,
    load_preprocessor_config,
    read_vision_config,
)


def test_presets_match_the_spec(pixel_goldens):
    k3, k25 = PROCESSOR_PRESETS["kimi-k3"], PROCESSOR_PRESETS["kimi-k25"]
    assert (k3.patch_size, k3.merge_kernel_size, k3.in_patch_limit, k3.patch_limit_on_one_side) == (14, 2, 65536, 512)
    assert k3.fixed_output_tokens is None and k3.image_mean == k3.image_std == (0.5, 0.5, 0.5)
    assert k3.transparent_bg_config == {
        "pattern": "chessboard",
        "chessboard_square_size": 8,
        "chessboard_square_on_top_left": True,
        "chessboard_white_value": 255,
        "chessboard_gray_value": 180,
    }
    assert k3.transparent_bg_fill_stage == "after_resize"
    assert k25.in_patch_limit == 16384 and k25.transparent_bg_config is None
    assert k25.transparent_bg_fill_stage is None and k25.fill_stage == "before_resize"
    assert k3.to_media_proc_cfg() == pixel_goldens["configs"]["kimi_k3"]
    assert k25.to_media_proc_cfg() == pixel_goldens["configs"]["kimi_k25"]


def test_round_trip_and_background_defaults():
    cfg = ProcessorConfig.from_media_proc_cfg(PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), name="kimi-k3")
    assert cfg == PROCESSOR_PRESETS["kimi-k3"]
    partial = ProcessorConfig.from_media_proc_cfg(
        {**PROCESSOR_PRESETS["kimi-k25"].to_media_proc_cfg(), "transparent_bg_config": {"pattern": "chessboard"}}
    )
    assert partial.background() == {
        "pattern": "chessboard",
        "chessboard_square_size": 16,
        "chessboard_square_on_top_left": True,
        "chessboard_white_value": 255,
        "chessboard_gray_value": 200,
    }
    assert PROCESSOR_PRESETS["kimi-k25"].background() is None


def test_get_config_accepts_every_form(tmp_path):
    assert get_config("kimi-k3") is PROCESSOR_PRESETS["kimi-k3"]
    assert get_config("kimi_k25") is PROCESSOR_PRESETS["kimi-k25"]
    assert get_config(PROCESSOR_PRESETS["kimi-k25"]) is PROCESSOR_PRESETS["kimi-k25"]
    as_dict = get_config(PROCESSOR_PRESETS["kimi-k25"].to_media_proc_cfg())
    assert as_dict.in_patch_limit == 16384 and as_dict.name == "custom"
    assert get_config({"media_proc_cfg": PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg()}).in_patch_limit == 65536
    folder = tmp_path / "Kimi-K3"
    folder.mkdir()
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"media_proc_cfg": PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg()})
    )
    from_folder = get_config(folder)
    assert from_folder.name == "Kimi-K3" and from_folder.with_name("kimi-k3") == PROCESSOR_PRESETS["kimi-k3"]
    assert get_config(str(folder / "preprocessor_config.json")).in_patch_limit == 65536
    with pytest.raises(
        ConfigError, match=r"unknown processor config 'kimi-k9': expected a preset \(kimi-k3, kimi-k25\)"
    ):
        get_config("kimi-k9")
    with pytest.raises(ConfigError, match="expected a preset name, ProcessorConfig, dict or path, got int"):
        get_config(3)


def test_merge_kernel_size_as_list_in_preprocessor_config():
    cfg = ProcessorConfig.from_media_proc_cfg(
        {**PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), "merge_kernel_size": [2, 2]}
    )
    assert cfg.merge_kernel_size == 2


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("patch_size", 0, "media_proc_cfg.patch_size: expected a positive int, got 0; fix preprocessor_config.json"),
        ("patch_size", 14.0, "media_proc_cfg.patch_size: expected a positive int, got 14.0"),
        ("in_patch_limit", True, "media_proc_cfg.in_patch_limit: expected a positive int, got True"),
        ("patch_limit_on_one_side", -1, "media_proc_cfg.patch_limit_on_one_side: expected a positive int, got -1"),
        ("fixed_output_tokens", 0, "media_proc_cfg.fixed_output_tokens: expected a positive int, got 0"),
        ("merge_kernel_size", [2, 3], "media_proc_cfg.merge_kernel_size: expected a square kernel [k, k], got [2, 3]"),
        ("merge_kernel_size", "2", "media_proc_cfg.merge_kernel_size: expected a positive int or [k, k], got '2'"),
        ("image_mean", [0.5, 0.5], "media_proc_cfg.image_mean: expected a list of 3 numbers, got [0.5, 0.5]"),
        ("image_std", [0.5, 0, 0.5], "media_proc_cfg.image_std: expected non-zero values, got [0.5, 0, 0.5]"),
        (
            "transparent_bg_config",
            {"pattern": "plaid"},
            "media_proc_cfg.transparent_bg_config.pattern: expected one of ['white', 'black', 'gray', 'chessboard'], "
            "got 'plaid'",
        ),
        (
            "transparent_bg_config",
            {"chessboard_gray_value": 300},
            "media_proc_cfg.transparent_bg_config.chessboard_gray_value: expected an int in 0..255, got 300",
        ),
        ("transparent_bg_config", {"colour": 1}, "media_proc_cfg.transparent_bg_config.colour: unknown key"),
        (
            "transparent_bg_fill_stage",
            "during_resize",
            "media_proc_cfg.transparent_bg_fill_stage: expected one of ['before_resize', 'after_resize'], "
            "got 'during_resize'",
        ),
    ],
)
def test_invalid_values_name_the_key(key, value, message):
    cfg = {**PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), key: value}
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.from_media_proc_cfg(cfg)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("key", ["image_mean", "image_std"])
def test_non_finite_mean_or_std_is_refused(key):
    cfg = {**PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), key: [0.5, float("nan"), 0.5]}
    with pytest.raises(ConfigError, match=rf"^media_proc_cfg.{key}: expected finite values, got \[0.5, nan, 0.5\]"):
        ProcessorConfig.from_media_proc_cfg(cfg)


def test_config_dict_errors_name_the_dict():
    bad = {**PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), "patch_size": 0}
    for given in (bad, {"media_proc_cfg": bad}):
        with pytest.raises(
            ConfigError, match=r"^media_proc_cfg.patch_size: expected a positive int, got 0; fix the config dict$"
        ):
            get_config(given)


def test_missing_key_is_named():
    cfg = PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg()
    del cfg["in_patch_limit"]
    with pytest.raises(
        ConfigError, match=r"^media_proc_cfg.in_patch_limit: missing \(a required key\); fix preprocessor_config.json$"
    ):
        ProcessorConfig.from_media_proc_cfg(cfg)


def test_load_preprocessor_config_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r"preprocessor_config.json does not exist; expected a checkpoint folder"):
        load_preprocessor_config(tmp_path)
    file = tmp_path / "preprocessor_config.json"
    file.write_text("{not json")
    with pytest.raises(ConfigError, match=r"preprocessor_config.json: not valid JSON"):
        load_preprocessor_config(tmp_path)
    file.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match=r"preprocessor_config.json: not UTF-8 text .*; expected a JSON file"):
        load_preprocessor_config(tmp_path)
    file.write_text(json.dumps({"image_processor_type": "X"}))
    with pytest.raises(ConfigError, match=r"^media_proc_cfg: missing from .*preprocessor_config.json"):
        load_preprocessor_config(file)
    file.write_text(
        json.dumps({"media_proc_cfg": {**PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), "patch_size": 0}})
    )
    with pytest.raises(ConfigError, match=rf"^media_proc_cfg.patch_size: expected a positive int, got 0; fix {file}$"):
        load_preprocessor_config(tmp_path)


def test_read_vision_config(tmp_path):
    vision = {"patch_size": 14, "merge_kernel_size": [2, 2], "hidden_size": 1024}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k3", "vision_config": vision}))
    assert read_vision_config(tmp_path) == {"patch_size": 14, "merge_kernel_size": 2, "hidden_size": 1024}
    (tmp_path / "config.json").write_text(json.dumps({"vision_config": {**vision, "merge_kernel_size": 2}}))
    assert read_vision_config(tmp_path)["merge_kernel_size"] == 2
    (tmp_path / "config.json").write_text(json.dumps({"vision_config": {**vision, "merge_kernel_size": [2, 3]}}))
    with pytest.raises(
        ConfigError, match=r"^vision_config.merge_kernel_size: expected a square kernel \[k, k\], got \[2, 3\]"
    ):
        read_vision_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k3"}))
    with pytest.raises(ConfigError, match=r"^vision_config: missing from .*config.json"):
        read_vision_config(tmp_path)
    with pytest.raises(CheckpointError, match=r"config.json does not exist"):
        read_vision_config(tmp_path / "empty")
