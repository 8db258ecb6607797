"""Hostile JSON: processor configs, checkpoint ``config.json`` and shard indexes (manifests: test_hostile_manifests).

Nesting 10**5 deep, 5000-digit integers, non-UTF-8 bytes, wrong types, and absurd sizes (patch size
8000 or 10**5, merge kernel 10**6, hidden size 10**6, 10**7 layers, 20000-px resizes) are refused by
declared limits before anything is allocated: exit 2, one line naming the file and the key. A
hypothesis fuzz feeds random and mutated processor configs and checkpoint indexes to the readers:
only :class:`~kimi_viz.errors.KimiVizError` may ever come out.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_support import Case, check_case, run_cases

from kimi_viz.data import sample_path
from kimi_viz.errors import KimiVizError
from kimi_viz.preprocess.config import PROCESSOR_PRESETS, get_config, load_preprocessor_config

IMAGE = str(sample_path("chelsea.png"))
DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_INT = b"1" + b"0" * 5000


def media_proc_cfg(**changes) -> dict:
    cfg = PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg()
    cfg.update(changes)
    return cfg


def processor_file(folder: Path, body: bytes | dict) -> Path:
    path = folder / "preprocessor_config.json"
    path.write_bytes(body if isinstance(body, bytes) else json.dumps({"media_proc_cfg": body}).encode())
    return path


def raw_cfg(text: bytes) -> bytes:
    """A preprocessor_config.json whose patch_size is the raw JSON ``text``."""
    body = json.dumps({"media_proc_cfg": media_proc_cfg(patch_size=14)}).encode()
    return body.replace(b'"patch_size": 14', b'"patch_size": ' + text)


def inspect_config(body):
    return lambda folder: ["inspect", "--config", str(processor_file(folder, body)), IMAGE]


def vision_config(**changes) -> dict:
    from test_hostile_checkpoints import vision_config_json

    config = vision_config_json()
    config.update(changes)
    return config


def checkpoint(folder: Path, config: bytes | dict | None = None, index: bytes | dict | None = None) -> Path:
    """A checkpoint folder with the given config.json and model.safetensors.index.json (valid ones by default)."""
    from test_hostile_checkpoints import write_checkpoint

    root = write_checkpoint(folder / "ckpt")
    if config is not None:
        (root / "config.json").write_bytes(
            config if isinstance(config, bytes) else json.dumps({"vision_config": config}).encode()
        )
    if index is not None:
        (root / "model.safetensors.index.json").write_bytes(
            index if isinstance(index, bytes) else json.dumps(index).encode()
        )
    return root


def encode(**parts):
    return lambda folder: ["encode", "--preset", "tiny", "--checkpoint", str(checkpoint(folder, **parts)), IMAGE]


PROCESSOR_CASES = [
    Case(
        "nested-10-5-deep",
        inspect_config(b'{"media_proc_cfg": ' + DEEP + b"}"),
        words=("preprocessor_config.json", "nested"),
    ),
    Case("5000-digit-integer", inspect_config(raw_cfg(HUGE_INT)), words=("preprocessor_config.json", "digits")),
    Case(
        "non-utf8-bytes", inspect_config(b'{"media_proc_cfg": "\xff\xfe"}'), words=("preprocessor_config.json", "UTF-8")
    ),
    Case("nan", inspect_config(raw_cfg(b"NaN")), words=("preprocessor_config.json", "NaN")),
    Case("patch-size-as-text", inspect_config(media_proc_cfg(patch_size="14")), words=("patch_size", "'14'")),
    Case("patch-size-8000", inspect_config(media_proc_cfg(patch_size=8000)), words=("patch_size", "at most 64")),
    Case("patch-size-10-5", inspect_config(media_proc_cfg(patch_size=10**5)), words=("patch_size", "at most 64")),
    Case(
        "merge-kernel-10-6",
        inspect_config(media_proc_cfg(merge_kernel_size=10**6)),
        words=("merge_kernel_size", "at most 8"),
    ),
    Case(
        "merge-kernel-list-10-6",
        inspect_config(media_proc_cfg(merge_kernel_size=[10**6, 10**6])),
        words=("merge_kernel_size",),
    ),
    Case(
        "in-patch-limit-10-9", inspect_config(media_proc_cfg(in_patch_limit=10**9)), words=("in_patch_limit", "at most")
    ),
    Case(
        "resize-target-20000-px",
        inspect_config(media_proc_cfg(patch_limit_on_one_side=1429)),
        words=("patch_limit_on_one_side", "16384"),
    ),
    Case(
        "fixed-tokens-10-12", inspect_config(media_proc_cfg(fixed_output_tokens=10**12)), words=("fixed_output_tokens",)
    ),
    Case(
        "chessboard-square-10-9",
        inspect_config(media_proc_cfg(transparent_bg_config={"chessboard_square_size": 10**9})),
        words=("chessboard_square_size",),
    ),
    Case(
        "pattern-as-list", inspect_config(media_proc_cfg(transparent_bg_config={"pattern": ["x"]})), words=("pattern",)
    ),
    Case("top-level-list", inspect_config(b"[1, 2, 3]"), words=("media_proc_cfg",)),
    Case(
        "config-is-a-fifo",
        lambda f: ["inspect", "--config", str(_fifo(f / "x.json")), IMAGE],
        words=("x.json", "a FIFO", "expected a JSON file"),
    ),
    Case(
        "config-over-16-mib",
        lambda f: ["inspect", "--config", str(_sparse(f / "big.json", 20 << 20)), IMAGE],
        words=("big.json", "limit"),
    ),
]

# Through the CLI: one case per kind of fault; the other absurd values go through the same readers
# in-process below (each CLI run of encode pays for importing torch).
CHECKPOINT_CONFIG_CASES = [
    Case("ckpt-config-nested", encode(config=b'{"vision_config": ' + DEEP + b"}"), words=("config.json", "nested")),
    Case(
        "ckpt-config-5000-digits",
        encode(config=b'{"vision_config": {"vt_hidden_size": ' + HUGE_INT + b"}}"),
        words=("config.json", "digits"),
    ),
    Case("ckpt-config-non-utf8", encode(config=b'{"vision_config": {"name": "\xff"}}'), words=("config.json", "UTF-8")),
    Case(
        "ckpt-hidden-size-as-text",
        encode(config=vision_config(vt_hidden_size="wide")),
        words=("vt_hidden_size", "'wide'"),
    ),
    Case(
        "ckpt-hidden-size-10-6",
        encode(config=vision_config(vt_hidden_size=10**6)),
        words=("hidden_size", "at most 16384"),
    ),
    Case(
        "ckpt-10-7-layers",
        encode(config=vision_config(vt_num_hidden_layers=10**7)),
        words=("num_layers", "at most 256"),
    ),
]

INDEX_CASES = [
    Case(
        "index-nested", encode(index=b'{"weight_map": ' + DEEP + b"}"), words=("model.safetensors.index.json", "nested")
    ),
    Case("index-non-utf8", encode(index=b'{"weight_map": {"\xff": "x"}}'), words=("index.json", "UTF-8")),
    Case(
        "index-shard-as-number",
        encode(index={"weight_map": {"vision_tower.x": 5}}),
        words=("index.json", "shard file name"),
    ),
]

IN_PROCESS_CONFIGS = [
    (vision_config(norm_eps="tiny"), ("norm_eps",)),
    (vision_config(attn_bias="yes"), ("attn_bias",)),
    (vision_config(model_type=5, vt_hidden_size=10**6), ("hidden_size",)),
    (vision_config(merge_kernel_size=10**6), ("merge_kernel_size",)),
    (vision_config(merge_kernel_size=[10**6, 10**6]), ("merge_kernel_size",)),
    (vision_config(patch_size=8000), ("patch_size", "at most 64")),
    (vision_config(patch_size=10**5), ("patch_size", "at most 64")),
    (vision_config(vt_intermediate_size=10**9), ("intermediate_size",)),
    (vision_config(text_hidden_size=10**30), ("text_hidden_size", "huge integer")),
    (vision_config(init_pos_emb_height=10**6), ("pos_emb_height",)),
    (
        vision_config(
            vt_hidden_size=16384, qkv_hidden_size=16384, vt_num_attention_heads=128, vt_num_hidden_layers=256
        ),
        ("parameters", "limit"),
    ),
    ([1, 2], ("vision_config",)),
]
IN_PROCESS_INDEXES = [
    (b'{"weight_map": {"a": ' + HUGE_INT + b"}}", ("index.json", "digits")),
    (b'{"weight_map": ["a"]}', ("index.json", "weight_map")),
    (b'{"weight_map": {"a": NaN}}', ("index.json", "NaN")),
    (b"[]", ("index.json", "weight_map")),
]


@pytest.mark.parametrize("config,words", IN_PROCESS_CONFIGS)
def test_absurd_checkpoint_configs_are_refused_by_their_limits(tmp_path, config, words):
    from kimi_viz.encoder.checkpoint import read_config
    from kimi_viz.errors import ConfigError

    (tmp_path / "config.json").write_text(json.dumps({"vision_config": config}))
    with pytest.raises(ConfigError) as caught:
        read_config(tmp_path)
    assert all(word in str(caught.value) for word in words), caught.value
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.parametrize("index,words", IN_PROCESS_INDEXES)
def test_damaged_indexes_are_refused(tmp_path, index, words):
    from kimi_viz.encoder.checkpoint import read_weight_map

    (tmp_path / "model.safetensors.index.json").write_bytes(index)
    with pytest.raises(KimiVizError) as caught:
        read_weight_map(tmp_path)
    assert all(word in str(caught.value) for word in words), caught.value


def _fifo(path: Path) -> Path:
    import os

    os.mkfifo(path)
    return path


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


CASES = PROCESSOR_CASES + CHECKPOINT_CONFIG_CASES + INDEX_CASES


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-json"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_json(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)


def test_the_cli_preset_names_match_the_encoder_presets():
    from kimi_viz.cli.encode_cmd import ENCODER_PRESET_NAMES
    from kimi_viz.encoder.config import ENCODER_PRESETS

    assert sorted(ENCODER_PRESETS) == list(ENCODER_PRESET_NAMES)


# ------------------------------------------------------------------------------------------
# Fuzzing: only the kit's own error ever escapes the readers
# ------------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


def mutate(data, obj):
    obj = copy.deepcopy(obj)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            return data.draw(json_values)
        path = data.draw(st.sampled_from(paths))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add", "huge"]))
        if action == "replace":
            parent[path[-1]] = data.draw(json_values)
        elif action == "huge":
            parent[path[-1]] = data.draw(st.sampled_from([10**6, 10**7, 8000, 10**30, -1, 0, 2**63]))
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(max_size=8))] = data.draw(json_values)
        else:
            parent.append(data.draw(json_values))
    return obj


def only_kit_errors(call):
    try:
        return call()
    except KimiVizError:
        return None


@FUZZ
@given(data=st.data())
def test_fuzz_processor_configs(tmp_path_factory, data):
    obj = mutate(data, {"media_proc_cfg": media_proc_cfg()})
    only_kit_errors(lambda: get_config(obj))
    folder = tmp_path_factory.mktemp("cfg")
    (folder / "preprocessor_config.json").write_text(json.dumps(obj))
    config = only_kit_errors(lambda: load_preprocessor_config(folder))
    if config is not None:  # an accepted config stays inside the declared limits
        from kimi_viz.preprocess.resize import resize_config

        result = resize_config(4000, 3000, config)
        assert result.new_width <= 16384 and result.new_height <= 16384


@FUZZ
@given(blob=st.binary(max_size=300))
def test_fuzz_processor_config_bytes(tmp_path_factory, blob):
    folder = tmp_path_factory.mktemp("cfgb")
    (folder / "preprocessor_config.json").write_bytes(blob)
    only_kit_errors(lambda: load_preprocessor_config(folder))


@pytest.fixture(scope="module")
def fuzz_checkpoint(tmp_path_factory):
    return checkpoint(tmp_path_factory.mktemp("fuzz-ckpt"))


@FUZZ
@given(data=st.data())
def test_fuzz_checkpoint_config_and_index(fuzz_checkpoint, data):
    from kimi_viz.encoder.checkpoint import read_config, read_weight_map

    folder = fuzz_checkpoint.parent / "mutated"
    if not folder.exists():
        import shutil

        shutil.copytree(fuzz_checkpoint, folder)
    config = json.loads((fuzz_checkpoint / "config.json").read_text())
    index = json.loads((fuzz_checkpoint / "model.safetensors.index.json").read_text())
    (folder / "config.json").write_text(json.dumps(mutate(data, config)))
    (folder / "model.safetensors.index.json").write_text(json.dumps(mutate(data, index)))
    vision = only_kit_errors(lambda: read_config(folder))
    if vision is not None:
        assert vision.estimated_parameters() <= 4 * 10**9
    weight_map = only_kit_errors(lambda: read_weight_map(folder))
    if weight_map is not None:
        assert all(isinstance(v, str) for v in weight_map.values())
