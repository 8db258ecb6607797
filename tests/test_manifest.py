"""Manifest version 1: the writer and the strict reader agree, field by field, for folders and zips."""

from __future__ import annotations

import json
import re
import warnings
import zipfile

import jsonschema
import numpy as np
import pytest
import torch
from PIL import Image

from kimi_viz.cli import main
from kimi_viz.errors import ManifestError
from kimi_viz.manifest import (
    ManifestWarning,
    json_path,
    manifest_payload,
    read_manifest,
    schema_path,
    validate_manifest_json,
    write_manifest,
)
from kimi_viz.releases import PathSource
from kimi_viz.split.batch import Batch, Feature, Item, RecordedOutcome
from kimi_viz.split.cause import ErrorInfo

RESIZE = {"num_tokens": 6, "new_width": 80, "new_height": 40, "pad_width": 4, "pad_height": 2}


def _deferred(backend: str) -> dict:
    return {
        "backend": backend,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "transparent_bg_config": {
            "pattern": "chessboard",
            "chessboard_square_size": 8,
            "chessboard_square_on_top_left": True,
            "chessboard_white_value": 255,
            "chessboard_gray_value": 180,
        },
        "resize_config": dict(RESIZE),
    }


def _noise(mode: str, size=(80, 40), seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    bands = len(Image.new(mode, (1, 1)).getbands())
    array = rng.integers(0, 256, (size[1], size[0], bands), dtype=np.uint8)
    if mode == "P":
        image = Image.fromarray(array[..., 0], mode="L").convert("P")
        image.info["transparency"] = 5
        return image
    if bands == 1:
        return Image.fromarray(array[..., 0], mode="L").convert(mode)
    return Image.fromarray(array, mode=mode)


@pytest.fixture
def batch() -> Batch:
    items = [
        Item(
            {"grid_thws": [[1, 4, 6]]},
            Feature.from_image(_noise("RGB")),
            _deferred("cpu"),
            original_size=(80, 40),
            label="rgb",
        ),
        Item(
            {"grid_thws": [[1, 4, 6]], "image_grid_thw": [[1, 6, 6]]},
            Feature.from_image(_noise("RGBA", seed=1)),
            _deferred("cpu"),
            original_size=(80, 40),
            label="rgba with a stale image_grid_thw",
        ),
        Item({"grid_thws": [[1, 4, 6]]}, Feature.from_image(_noise("P", seed=2)), _deferred("cpu"), label="palette"),
        Item({"grid_thws": [[1, 4, 6]]}, Feature.from_image(_noise("CMYK", seed=3)), _deferred("cpu"), label="cmyk"),
        Item(
            {"grid_thws": [[1, 4, 6]]},
            Feature.from_tensor(torch.arange(3 * 40 * 80).reshape(3, 40, 80).to(torch.uint8), "chw"),
            _deferred("gpu"),
            label="chw",
        ),
        Item(
            {"grid_thws": [[1, 2, 2]]},
            Feature.from_tensor(torch.randn(4, 3, 14, 14), "patches"),
            local_preprocessed=True,
            label="eager",
        ),
        Item(
            {"grid_thws": [[1, 2, 2]]},
            Feature.from_tensor(torch.randn(4, 3, 14, 14).to(torch.bfloat16), "patches"),
            label="bf16",
        ),
        Item(
            {"grid_thws": [[1, 2, 2]]},
            Feature.from_tensor(torch.zeros(5, 7, 3, dtype=torch.uint8), "hwc"),
            _deferred("gpu"),
            label="hwc",
        ),
        Item(
            {"grid_thws": [[1, 2, 2]]},
            Feature.from_tensor(torch.zeros(3, 5, 0, dtype=torch.uint8), "chw"),
            _deferred("cpu"),
            original_size=(0, 5),
            label="empty",
        ),
    ]
    return Batch(
        items,
        processor={
            "patch_size": 14,
            "merge_kernel_size": 2,
            "in_patch_limit": 65536,
            "patch_limit_on_one_side": 512,
            "fixed_output_tokens": None,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "transparent_bg_config": None,
            "transparent_bg_fill_stage": "after_resize",
        },
        attn_tp_size=4,
        attn_tp_rank=3,
        image_indices=[4, 0],
        sglang_version="0.5.23",
        code_path="pre-fix",
        note="free text",
        created_by="a test",
        processor_output="stacked",
        extra={"origin": "a unit test"},
    )


def _read_quietly(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a manifest we wrote must read without any warning
        return read_manifest(path)


def _assert_same(got: Batch, want: Batch) -> None:
    assert (got.attn_tp_size, got.attn_tp_rank, got.image_indices) == (4, 3, [4, 0])
    assert (got.sglang_version, got.code_path, got.note, got.created_by) == (
        "0.5.23",
        "pre-fix",
        "free text",
        "a test",
    )
    assert got.processor == want.processor
    assert got.processor_output == "stacked"
    assert got.extra == {"origin": "a unit test"}
    assert len(got.items) == len(want.items)
    for g, w in zip(got.items, want.items):
        assert g.grids == w.grids
        assert g.deferred == w.deferred
        assert g.local_preprocessed == w.local_preprocessed
        assert g.original_size == w.original_size
        assert g.label == w.label
        assert (g.feature.kind, g.feature.layout, g.feature.shape, g.feature.dtype) == (
            w.feature.kind,
            w.feature.layout,
            w.feature.shape,
            w.feature.dtype,
        )
        if w.feature.image is not None:
            assert g.feature.image.mode == w.feature.image.mode
            assert g.feature.image.info.get("transparency") == w.feature.image.info.get("transparency")
            assert np.array_equal(np.asarray(g.feature.image), np.asarray(w.feature.image))
        else:
            assert g.feature.tensor.dtype == w.feature.tensor.dtype
            assert torch.equal(g.feature.tensor, w.feature.tensor)


@pytest.mark.parametrize("suffix", ["", ".zip"], ids=["folder", "zip"])
def test_round_trip_is_exact(batch, tmp_path, suffix):
    path = write_manifest(batch, tmp_path / f"m{suffix}")
    _assert_same(_read_quietly(path), batch)


def test_folder_layout_and_manifest_json(batch, tmp_path):
    path = write_manifest(batch, tmp_path / "m")
    names = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert names == [
        "images/item0.png",
        "images/item1.png",
        "images/item2.png",
        "images/item3.tiff",
        "images/item4.png",
        "manifest.json",
        "tensors.safetensors",
    ]
    obj = json.loads((path / "manifest.json").read_text())
    assert obj["format"] == "kimi-viz-manifest" and obj["version"] == 1
    assert obj["items"][0]["feature"] == {"kind": "image", "file": "images/item0.png"}
    # a gpu item's CHW uint8 RGB tensor is stored as a PNG (read back as the same CHW tensor) ...
    assert obj["items"][4]["feature"] == {"kind": "image", "file": "images/item4.png"}
    # ... other tensors go to tensors.safetensors, with their layout
    assert obj["items"][7]["feature"] == {
        "kind": "tensor",
        "file": "tensors.safetensors",
        "key": "items.7.feature",
        "shape": [5, 7, 3],
        "dtype": "uint8",
        "layout": "hwc",
    }
    assert obj["items"][8]["feature"]["shape"] == [3, 5, 0]
    assert obj["items"][6]["feature"]["dtype"] == "bfloat16"
    assert obj["runtime"] == {"attn_tp_size": 4, "attn_tp_rank": 3, "image_indices": [4, 0]}
    # the processor output is written into extra, first, as before it was a field of the batch
    assert obj["extra"] == {"processor_output": "stacked", "origin": "a unit test"}
    assert obj["source"] == {
        "sglang_version": "0.5.23",
        "code_variant": "pre-fix",
        "code_variant_source": "assumed",
        "note": "free text",
    }
    assert obj["items"][1]["grids"] == {"grid_thws": [[1, 4, 6]], "image_grid_thw": [[1, 6, 6]]}
    # The shipped JSON Schema accepts what the writer writes (checked with plain jsonschema too).
    schema = json.loads(schema_path().read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(obj)


def test_read_accepts_the_manifest_json_path_and_a_zip_of_the_folder(batch, tmp_path):
    folder = write_manifest(batch, tmp_path / "capture-1")
    _assert_same(_read_quietly(folder / "manifest.json"), batch)
    archive = tmp_path / "attached.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for file in folder.rglob("*"):
            if file.is_file():
                zf.write(file, f"capture-1/{file.relative_to(folder).as_posix()}")
    _assert_same(_read_quietly(archive), batch)


@pytest.mark.parametrize("suffix", ["", ".zip"], ids=["folder", "zip"])
def test_redact_writes_shapes_only(batch, tmp_path, suffix):
    path = write_manifest(batch, tmp_path / f"r{suffix}", redact=True)
    if suffix:
        assert zipfile.ZipFile(path).namelist() == ["manifest.json"]
    else:
        assert [p.name for p in path.iterdir()] == ["manifest.json"]
    got = _read_quietly(path)
    for g, w in zip(got.items, batch.items):
        assert g.feature.kind == "shape_only"
        assert (g.feature.layout, g.feature.shape, g.feature.dtype) == (
            w.feature.layout,
            w.feature.shape,
            w.feature.dtype,
        )
        assert g.feature.image is None and g.feature.tensor is None
        assert g.grids == w.grids and g.deferred == w.deferred


@pytest.mark.parametrize(
    ("mode", "values", "suffix"),
    [
        ("I", [[0, 70_000], [-5, 2**31 - 1]], "tiff"),  # 32-bit: PNG cannot hold it
        ("F", [[0.25, -1.5], [3e38, 0.0]], "tiff"),
        ("I;16", [[0, 65_535], [1, 300]], "png"),
    ],
)
def test_wide_image_modes_round_trip_losslessly(tmp_path, mode, values, suffix):
    dtype = {"I": np.int32, "F": np.float32, "I;16": np.uint16}[mode]
    image = Image.fromarray(np.array(values, dtype=dtype))
    assert image.mode == mode
    item = Item({"grid_thws": [[1, 2, 2]]}, Feature.from_image(image), _deferred("cpu"))
    path = write_manifest(Batch([item]), tmp_path / "m")
    assert json.loads((path / "manifest.json").read_text())["items"][0]["feature"]["file"] == f"images/item0.{suffix}"
    got = _read_quietly(path).items[0].feature.image
    assert got.mode == mode
    assert np.array_equal(np.asarray(got), np.asarray(image))


def test_gpu_item_stored_as_an_image_is_read_as_a_chw_tensor(tmp_path):
    rgba = _noise("RGBA", seed=4)
    item = Item({"grid_thws": [[1, 4, 6]]}, Feature.from_image(rgba), _deferred("gpu"))
    got = _read_quietly(write_manifest(Batch([item]), tmp_path / "m")).items[0].feature
    assert (got.kind, got.layout, got.shape, got.dtype) == ("tensor", "chw", (4, 40, 80), "uint8")
    assert torch.equal(got.tensor, torch.from_numpy(np.array(rgba)).permute(2, 0, 1))


def test_defaults_for_optional_sections(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "format": "kimi-viz-manifest",
                "version": 1,
                "items": [
                    {
                        "grids": {"grid_thws": [[1, 2, 2]]},
                        "feature": {
                            "kind": "shape_only",
                            "layout": "patches",
                            "shape": [4, 3, 14, 14],
                            "dtype": "float32",
                        },
                    }
                ],
            }
        )
    )
    got = _read_quietly(tmp_path)
    assert (got.attn_tp_size, got.attn_tp_rank, got.code_path, got.processor) == (1, None, "post-fix", None)
    assert got.items[0].deferred is None and got.items[0].local_preprocessed is False


def test_unknown_keys_are_warnings_naming_the_path(batch, tmp_path):
    path = write_manifest(batch, tmp_path / "m")
    obj = json.loads((path / "manifest.json").read_text())
    obj["shiny"] = 1
    obj["items"][2]["deferred"]["resize_config"]["grid_thw"] = [1, 4, 6]
    obj["runtime"]["dp_size"] = 2
    (path / "manifest.json").write_text(json.dumps(obj))
    with pytest.warns(ManifestWarning) as record:
        got = read_manifest(path)
    texts = sorted(str(w.message) for w in record)
    assert any("items[2].deferred.resize_config.grid_thw: unknown key 'grid_thw'" in t for t in texts)
    assert any("runtime.dp_size: unknown key 'dp_size'" in t for t in texts)
    assert any("shiny: unknown key 'shiny'" in t for t in texts)
    assert len(texts) == 3
    assert validate_manifest_json(obj) == [
        "items[2].deferred.resize_config.grid_thw: unknown key 'grid_thw' (ignored)",
        "runtime.dp_size: unknown key 'dp_size' (ignored)",
        "shiny: unknown key 'shiny' (ignored)",
    ]
    assert got.items[2].deferred["resize_config"]["grid_thw"] == [1, 4, 6]  # kept, only reported


def _valid() -> dict:
    obj, _ = manifest_payload(
        Batch([Item({"grid_thws": [[1, 2, 2]]}, Feature.shape_only("image", (28, 28, 3), "uint8"), _deferred("cpu"))])
    )
    return obj


@pytest.mark.parametrize(
    ("mutate", "path", "words"),
    [
        (lambda o: o.update(version="1"), "version", "expected the integer 1, got the string '1'"),
        (lambda o: o.update(version=2), "version", "unsupported manifest version 2"),
        (lambda o: o.update(format="kimi-viz-batch"), "format", "unknown format the string 'kimi-viz-batch'"),
        (lambda o: o.pop("format"), "format", 'missing required key "format"'),
        (lambda o: o.update(items={"0": {}}), "items", "expected a list, got an object with 1 keys"),
        (
            lambda o: o["items"][0]["grids"]["grid_thws"][0].__setitem__(1, "2"),
            "items[0].grids.grid_thws[0][1]",
            "expected an integer, got the string '2'",
        ),
        (
            lambda o: o["items"][0]["grids"]["grid_thws"][0].__setitem__(1, 2.0),
            "items[0].grids.grid_thws[0][1]",
            "expected an integer, got the number 2.0",
        ),
        (
            lambda o: o["items"][0]["grids"]["grid_thws"][0].__setitem__(2, True),
            "items[0].grids.grid_thws[0][2]",
            "expected an integer, got the boolean true",
        ),
        (
            lambda o: o["items"][0]["grids"]["grid_thws"][0].pop(),
            "items[0].grids.grid_thws[0]",
            "expected a list of exactly 3 entries, got 2",
        ),
        (
            lambda o: o["items"][0]["deferred"]["resize_config"].__setitem__("pad_width", "4"),
            "items[0].deferred.resize_config.pad_width",
            "expected an integer, got the string '4'",
        ),
        (
            lambda o: o["items"][0]["deferred"]["resize_config"].__setitem__("pad_width", -1),
            "items[0].deferred.resize_config.pad_width",
            "expected a value >= 0, got the integer -1",
        ),
        (
            lambda o: o["items"][0]["deferred"]["resize_config"].pop("new_height"),
            "items[0].deferred.resize_config.new_height",
            "missing required key 'new_height'",
        ),
        (
            lambda o: o["items"][0]["deferred"].__setitem__("backend", "tpu"),
            "items[0].deferred.backend",
            'expected one of "gpu", "cpu", got the string \'tpu\'',
        ),
        (
            lambda o: o["items"][0].__setitem__("local_preprocessed", 1),
            "items[0].local_preprocessed",
            "expected true or false, got the integer 1",
        ),
        (
            lambda o: o["items"][0]["feature"].__setitem__("kind", "pickle"),
            "items[0].feature.kind",
            'expected one of "image", "tensor", "shape_only"',
        ),
        (lambda o: o["items"][0].pop("feature"), "items[0].feature", "missing required key 'feature'"),
        (
            lambda o: o["runtime"].__setitem__("attn_tp_size", 0),
            "runtime.attn_tp_size",
            "expected a value >= 1, got the integer 0",
        ),
        (
            lambda o: o["runtime"].__setitem__("attn_tp_rank", 2),
            "runtime.attn_tp_rank",
            "rank 2 does not exist with attn_tp_size 1",
        ),
        (
            lambda o: o["runtime"].__setitem__("image_indices", [0, 1]),
            "runtime.image_indices[1]",
            "image index 1 is out of range for 1 items",
        ),
        (
            lambda o: o["source"].__setitem__("code_variant", "fixed"),
            "source.code_variant",
            'expected one of "post-fix", "pre-fix"',
        ),
    ],
)
def test_wrong_fields_name_their_json_path(mutate, path, words):
    obj = _valid()
    mutate(obj)
    with pytest.raises(ManifestError) as caught:
        validate_manifest_json(obj)
    assert caught.value.json_path == path
    assert str(caught.value).startswith(f"{path}: ")
    assert words in str(caught.value)


def test_json_path_spelling():
    assert (
        json_path(["items", 3, "deferred", "resize_config", "pad_width"]) == "items[3].deferred.resize_config.pad_width"
    )
    assert json_path(["items", 0, "grids", "odd key"]) == 'items[0].grids["odd key"]'
    assert json_path([]) == "(top level)"


def test_writer_refuses_what_the_reader_would_refuse(tmp_path):
    bad = Batch([Item({"grid_thws": [[1, 2, 2]]}, Feature.from_tensor(torch.zeros(4, dtype=torch.int64), "patches"))])
    with pytest.raises(ManifestError, match=r"items\[0\].feature.dtype: item 0's tensor has dtype int64"):
        write_manifest(bad, tmp_path / "m")


# ------------------------------------------------------------------------------------------
# source.recorded, source.code_variant and source.code_variant_source
# ------------------------------------------------------------------------------------------
RECORDED = [
    RecordedOutcome("error", ErrorInfo("ValueError", "Kimi-K3 deferred feature length does not match image grids")),
    RecordedOutcome("error", ErrorInfo("KeyError", "'grid_thws'")),
    RecordedOutcome("error", ErrorInfo("RuntimeError", "")),
    RecordedOutcome("ok"),
]


@pytest.mark.parametrize("suffix", ["", ".zip"], ids=["folder", "zip"])
@pytest.mark.parametrize("recorded", RECORDED, ids=["value-error", "key-error", "empty-message", "ok"])
def test_recorded_outcome_round_trips(batch, tmp_path, suffix, recorded):
    batch.recorded = recorded
    path = write_manifest(batch, tmp_path / f"m{suffix}")
    got = _read_quietly(path)
    assert got.recorded == recorded
    _assert_same(got, batch)
    obj, _ = manifest_payload(batch)
    assert obj["source"]["recorded"] == recorded.to_json()


@pytest.mark.parametrize("suffix", ["", ".zip"], ids=["folder", "zip"])
def test_no_recorded_outcome_is_absent_and_reads_as_none(batch, tmp_path, suffix):
    assert batch.recorded is None
    obj, _ = manifest_payload(batch)
    assert "recorded" not in obj["source"]
    assert _read_quietly(write_manifest(batch, tmp_path / f"m{suffix}")).recorded is None
    obj["source"]["recorded"] = None  # null reads as "not recorded" too
    validate_manifest_json(obj)


def test_recorded_outcome_written_by_hand_is_read(tmp_path):
    obj = _valid()
    obj["source"]["recorded"] = {"outcome": "ok"}  # error may be left out when the call passed
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    assert _read_quietly(tmp_path).recorded == RecordedOutcome("ok")
    obj["source"]["recorded"] = {
        "outcome": "error",
        "error": {"type": "IndexError", "message": "list index out of range"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    assert _read_quietly(tmp_path).recorded == RecordedOutcome(
        "error", ErrorInfo("IndexError", "list index out of range")
    )


@pytest.mark.parametrize(
    ("recorded", "path", "words"),
    [
        ("error", "source.recorded", "expected an object or null, got the string 'error'"),
        (
            {"outcome": "crashed", "error": None},
            "source.recorded.outcome",
            'expected one of "ok", "error", got the string \'crashed\'',
        ),
        ({"error": None}, "source.recorded.outcome", "missing required key 'outcome'"),
        ({"outcome": "error", "error": None}, "source.recorded.error", "expected an object, got null"),
        ({"outcome": "error"}, "source.recorded.error", "missing required key 'error'"),
        (
            {"outcome": "ok", "error": {"type": "ValueError", "message": "x"}},
            "source.recorded.error",
            "expected null, got an object with 2 keys",
        ),
        (
            {"outcome": "error", "error": {"type": 3, "message": "x"}},
            "source.recorded.error.type",
            "expected a string, got the integer 3",
        ),
        (
            {"outcome": "error", "error": {"type": "", "message": "x"}},
            "source.recorded.error.type",
            "expected a string of at least 1 characters",
        ),
        (
            {"outcome": "error", "error": {"type": "ValueError"}},
            "source.recorded.error.message",
            "missing required key 'message'",
        ),
        (
            {"outcome": "error", "error": {"type": "ValueError", "message": None}},
            "source.recorded.error.message",
            "expected a string, got null",
        ),
        (
            {"outcome": "error", "error": "ValueError: x"},
            "source.recorded.error",
            "expected an object or null, got the string 'ValueError: x'",
        ),
    ],
    ids=[
        "not-an-object",
        "unknown-outcome",
        "no-outcome",
        "error-null",
        "error-missing",
        "ok-with-error",
        "type-not-a-string",
        "type-empty",
        "message-missing",
        "message-null",
        "error-a-string",
    ],
)
def test_invalid_recorded_outcome_names_its_json_path(tmp_path, capsys, recorded, path, words):
    obj = _valid()
    obj["source"]["recorded"] = recorded
    with pytest.raises(ManifestError) as caught:
        validate_manifest_json(obj)
    assert caught.value.json_path == path
    assert str(caught.value).startswith(f"{path}: ")
    assert words in str(caught.value)
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    with pytest.raises(ManifestError, match=re.escape(f"{path}: ")):
        read_manifest(tmp_path)
    assert main(["triage", str(tmp_path)]) == 2  # the command refuses it as bad input, naming the path
    assert f"{path}: " in capsys.readouterr().err


def test_unknown_keys_in_recorded_are_warnings(tmp_path):
    obj = _valid()
    obj["source"]["recorded"] = {"outcome": "error", "error": {"type": "ValueError", "message": "x", "tb": "..."}}
    assert validate_manifest_json(obj) == ["source.recorded.error.tb: unknown key 'tb' (ignored)"]
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    with pytest.warns(ManifestWarning, match=r"source\.recorded\.error\.tb"):
        got = read_manifest(tmp_path)
    assert got.recorded == RecordedOutcome("error", ErrorInfo("ValueError", "x"))


def test_writer_refuses_an_error_outcome_without_the_exception(batch, tmp_path):
    batch.recorded = RecordedOutcome("error")
    with pytest.raises(ManifestError, match=r"^source\.recorded\.error: expected an object, got null"):
        write_manifest(batch, tmp_path / "m")


@pytest.mark.parametrize("suffix", ["", ".zip"], ids=["folder", "zip"])
@pytest.mark.parametrize("code_path", ["post-fix", "pre-fix", "no-split"])
@pytest.mark.parametrize("how", ["detected", "scenario", "recorded", "assumed"])
def test_code_path_and_its_source_round_trip(batch, tmp_path, suffix, code_path, how):
    batch.code_path, batch.code_path_source = code_path, PathSource(how)
    path = write_manifest(batch, tmp_path / f"m{suffix}")
    got = _read_quietly(path)
    assert (got.code_path, got.code_path_source.value) == (code_path, how)


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ({}, ("post-fix", "assumed")),
        ({"code_variant": "no-split"}, ("no-split", "recorded")),
        ({"code_variant": "pre-fix", "code_variant_source": "scenario"}, ("pre-fix", "scenario")),
    ],
)
def test_code_variant_source_defaults(tmp_path, source, want):
    obj = _valid()
    obj["source"] = source
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    got = _read_quietly(tmp_path)
    assert (got.code_path, got.code_path_source.value) == want


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("code_variant", "split", 'expected one of "post-fix", "pre-fix", "no-split", got the string \'split\''),
        (
            "code_variant_source",
            "guessed",
            'expected one of "detected", "scenario", "recorded", "assumed", got the string \'guessed\'',
        ),
    ],
)
def test_invalid_code_variant_fields_name_their_path(key, value, words):
    obj = _valid()
    obj["source"][key] = value
    with pytest.raises(ManifestError) as caught:
        validate_manifest_json(obj)
    assert caught.value.json_path == f"source.{key}"
    assert words in str(caught.value)
