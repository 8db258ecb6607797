"""Scale: item counts, attention-TP sizes and log sizes that used to run for minutes or gigabytes.

A manifest of 10**5 items is refused at once by the stated limit (4096 items), one of 4*10**5 by the
manifest.json size limit; 4096 plain items validate without a single jsonschema call and in under 2 s
of CPU (the fast path skips jsonschema for items that plainly follow the schema, which hypothesis
checks against jsonschema itself), and a triage replays them; rank assignment at TP 65536 takes under
2 s of CPU (a heap, not a scan). A triage of a two-item manifest at TP 512 and at TP 65536 (marked
slow) answers, and ``explain --file`` reads a 256 MiB log and refuses a 2 GiB one, a FIFO and a
folder. Every command case is held to the harness's CPU, memory and hang bounds.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_support import Case, check_case, run_cases

from kimi_viz.errors import ManifestError
from kimi_viz.manifest.fastcheck import item_is_plainly_valid
from kimi_viz.manifest.schema import MAX_ITEMS, _validator, validate_manifest_json

ITEM = {
    "grids": {"grid_thws": [[1, 2, 2]]},
    "feature": {"kind": "shape_only", "layout": "patches", "shape": [4, 3, 14, 14], "dtype": "float32"},
}


def items_manifest(folder: Path, count: int, **runtime) -> Path:
    root = folder / f"m{count}"
    root.mkdir()
    obj = {
        "format": "kimi-viz-manifest",
        "version": 1,
        "runtime": {"attn_tp_size": 1, **runtime},
        "items": [ITEM] * count,
    }
    (root / "manifest.json").write_text(json.dumps(obj, separators=(",", ":")))
    return root


def two_items_manifest(folder: Path) -> Path:
    from test_hostile_manifests import manifest

    return manifest(folder)


CASES = [
    Case("10-5-items", lambda f: ["triage", str(items_manifest(f, 10**5))], words=("items", "100000", str(MAX_ITEMS))),
    Case("4x10-5-items", lambda f: ["triage", str(items_manifest(f, 4 * 10**5))], words=("manifest.json", "bytes")),
    Case("4096-items-replayed", lambda f: ["triage", "--json", str(items_manifest(f, MAX_ITEMS))], code=(0, 1, 3)),
    Case("tp-512-two-items", lambda f: ["triage", "--json", "--tp", "512", str(two_items_manifest(f))], code=(0, 1, 3)),
    Case(
        "tp-65536-two-items",
        lambda f: ["triage", "--json", "--tp", "65536", str(two_items_manifest(f))],
        code=(0, 1, 3),
        marks=(pytest.mark.slow,),
    ),
    Case("explain-log-of-256-mib", lambda f: ["explain", "--file", str(_sparse(f / "big.log", 256 << 20))], code=1),
    Case(
        "explain-log-of-2-gib",
        lambda f: ["explain", "--file", str(_sparse(f / "huge.log", 2 << 30))],
        words=("huge.log", "MiB"),
    ),
    Case("explain-a-fifo", lambda f: ["explain", "--file", str(_fifo(f / "log"))], words=("log", "FIFO")),
    Case("explain-a-folder", lambda f: ["explain", "--file", str(f)], words=("folder",)),
]


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.write(b"ValueError: Kimi-K3 deferred feature length does not match image grids\n"[:0])
        handle.truncate(size)
    return path


def _fifo(path: Path) -> Path:
    import os

    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-scale"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_scale(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)


def test_rank_assignment_at_the_largest_tp_is_fast():
    """CPU time, not wall time: a loaded machine slows the clock on the wall, not the work done."""
    from kimi_viz.split.ranks import MAX_TP_SIZE, assign_ranks

    started = time.process_time()
    ranks = assign_ranks([196] * 5000, MAX_TP_SIZE)
    assert time.process_time() - started < 2.0
    assert sum(len(r) for r in ranks) == 5000


def test_validation_of_4096_plain_items_never_reaches_jsonschema(monkeypatch):
    """Plain items take the fast path: no jsonschema call, under 2 s of CPU; only an odd item goes to jsonschema."""
    from kimi_viz.manifest import schema

    obj = {"format": "kimi-viz-manifest", "version": 1, "items": [copy.deepcopy(ITEM) for _ in range(MAX_ITEMS)]}
    calls = []
    monkeypatch.setattr(schema, "_validator", lambda: calls.append(1) or _validator())
    started = time.process_time()
    assert validate_manifest_json(obj) == []
    assert calls == [] and time.process_time() - started < 2.0
    obj["items"][7]["label"] = 7  # one unusual item: only it (and the document around it) goes to jsonschema
    with pytest.raises(ManifestError, match=r"items\[7\]\.label"):
        validate_manifest_json(obj)
    assert len(calls) == 1


def test_the_cli_choices_match_triage():
    from kimi_viz import _triage as triage
    from kimi_viz.cli import triage_cmd

    assert triage_cmd.CODE_PATH_CHOICES == triage.CODE_PATH_CHOICES and triage_cmd.MODE_CHOICES == triage.MODE_CHOICES


# The fast path must never accept what jsonschema refuses or warns about.
item_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 2**32)
    | st.floats(allow_nan=False)
    | st.sampled_from(["image", "tensor", "shape_only", "gpu", "cpu", "patches", "chw", "float32", "uint8", "x"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["kind", "file", "key", "shape", "dtype", "layout", "grids", "grid_thws", "label", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=10,
)
GOOD_ITEMS = [
    ITEM,
    {
        "grids": {"image_grid_thw": [[1, 22, 34]], "grid_thws": [[1, 22, 34]]},
        "feature": {"kind": "image", "file": "images/item0.png"},
        "deferred": {
            "backend": "cpu",
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "transparent_bg_config": {"pattern": "chessboard", "chessboard_square_size": 8},
            "resize_config": {"num_tokens": 187, "new_width": 451, "new_height": 300, "pad_width": 25, "pad_height": 8},
        },
        "local_preprocessed": False,
        "original_size": [451, 300],
        "label": "chelsea.png",
    },
    {
        "grids": {"grid_thws": [[1, 2, 2]]},
        "feature": {"kind": "tensor", "file": "t.safetensors", "key": "k", "shape": [4, 3, 14, 14], "dtype": "float32"},
    },
]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_the_fast_path_is_a_subset_of_the_schema(data):
    item = copy.deepcopy(data.draw(st.sampled_from(GOOD_ITEMS)))
    for _ in range(data.draw(st.integers(0, 2))):
        path = data.draw(st.sampled_from([p for p in _paths(item) if p] or [()]))
        if not path:
            break
        parent = item
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(item_values)
        else:
            del parent[path[-1]]
    if item_is_plainly_valid(item):
        errors = list(_validator().iter_errors({"format": "kimi-viz-manifest", "version": 1, "items": [item]}))
        assert errors == [], (item, [e.message for e in errors])
