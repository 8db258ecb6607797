"""Each step kind's typed record: the JSON keys trace.json has always had, and the variables the step view shows."""

from __future__ import annotations

import dataclasses

import pytest

from kimi_viz.forward import step_records as forward_records
from kimi_viz.plots.steps import key_variables, short
from kimi_viz.scenarios.catalogue import get_scenario
from kimi_viz.split import step_records as records
from kimi_viz.split._replay import replay
from kimi_viz.split.step_records import StepRecord
from kimi_viz.split.trace import Check, Step

GROUP = records.GroupIndices("cpu", [0, 1], [1, 2], [0, 1])
GPU_GROUP = records.GroupIndices("gpu", [0], [0], [0])
GROUP_KEYS = ["backend", "indices", "global_indices", "grid_rows_read"]

# One record of every kind, every optional part present, with the keys (in order) its step has in trace.json.
FULL = [
    (
        records.GridCollection([{"image": 0}], [[1, 2, 2]], [4]),
        ["items", "grid_thws_host", "patch_counts"],
    ),
    (
        records.RankAssignment(2, 1, [4, 8], [1, 0], [[1], [0]], [8, 4], [0], [0]),
        [
            "tp_size",
            "rank",
            "patch_counts",
            "order_largest_first",
            "assignment",
            "loads",
            "image_indices",
            "recorded_image_indices",
        ],
    ),
    (
        records.ItemSelection([1, 2], [{"local": 0}], [False, False]),
        ["image_indices", "selected", "locally_preprocessed"],
    ),
    (
        records.BackendGrouping([{"local": 0}], {"cpu": {"indices": [0]}}, "pre-fix"),
        ["eager", "backend_groups", "code_path"],
    ),
    (records.UnsupportedBackend(GROUP), GROUP_KEYS),
    (
        records.GpuPreprocess(GPU_GROUP, [{"image": 0}], records.GpuGrids([[1, 2, 2]], [4], [[1, 2, 2]], "x")),
        [*GROUP_KEYS, "inputs", "produced_grids", "produced_rows", "expected_grids", "expected_from"],
    ),
    (
        records.CpuPreprocess(
            GROUP, [{"image": 1}], {"patch_size": 14}, records.CpuGrids([[1, 2, 2]], [4], [[1, 2, 2]], "x", "list", 4)
        ),
        [
            *GROUP_KEYS,
            "inputs",
            "processor",
            "produced_grids",
            "produced_rows",
            "expected_grids",
            "expected_from",
            "processor_output",
            "pixel_values_rows",
        ],
    ),
    (
        records.LengthCheck(GROUP, [4, 4], 8, 8, "concatenated", [{"local": 0, "image": 1, "rows": 4}]),
        [*GROUP_KEYS, "patch_counts", "sum_patch_counts", "pixel_values_rows", "processor_output", "split"],
    ),
    (
        records.Concatenation("deferred", [{"local": 0}], 8, 8),
        ["branch", "features", "total_rows", "rows_from_grids"],
    ),
    (forward_records.RadixMatches("fcfs", 16, [{"rid": "a"}]), ["policy", "page_size", "requests"]),
    (
        forward_records.PassAdmission("fcfs", True, {"rem_input_tokens": 4}, [{"rid": "a"}], ["b"], "a", {}),
        [
            "policy",
            "budget_state_before_candidate",
            "start_budget",
            "offers",
            "unoffered",
            "cut",
            "end_budget",
            "stop",
            "kv_budget_left",
            "memory",
        ],
    ),
    (forward_records.ForwardBatch([{"rid": "a"}]), ["requests"]),
    (forward_records.PathChoice("per-image", "cuda"), ["path", "platform"]),
    (forward_records.CacheLookups([{"request": "a"}], "item.hash"), ["items", "key"]),
    (forward_records.EncodeCall([{"request": "a"}], [4]), ["call", "produced_tokens"]),
    (forward_records.SplitBack(4, [4]), ["rows", "split_sizes"]),
    (forward_records.ChunkSlices([{"request": "a"}]), ["slices"]),
    (forward_records.TokenCount("offsets", 4, 4), ["from", "tokens", "rows"]),
    (forward_records.LengthFit(4, 4, 4), ["tokens_in_text", "rows_in_embedding", "rows_kept"]),
    (forward_records.Scatter(4, 4, "index_copy_"), ["pad_tokens", "rows", "scatter"]),
]

# Where SGLang raises before the step's outcome (or 0.5.17, which asks less), the optional parts stay out.
PARTIAL = [
    (records.ItemSelection([1, 2], [{"local": 0}]), ["image_indices", "selected"]),
    (records.GpuPreprocess(GPU_GROUP, []), [*GROUP_KEYS, "inputs"]),
    (records.CpuPreprocess(GROUP, [], {"patch_size": 14}), [*GROUP_KEYS, "inputs", "processor"]),
    (
        records.LengthCheck(GROUP, [4, 4], 8, 7, "concatenated"),
        [*GROUP_KEYS, "patch_counts", "sum_patch_counts", "pixel_values_rows", "processor_output"],
    ),
]

# The variables the step view showed per step kind before the records (its KEY_VARIABLES table).
SHOWN_BEFORE = {
    records.GridCollection: ["grid_thws_host", "patch_counts"],
    records.RankAssignment: [
        "tp_size",
        "patch_counts",
        "order_largest_first",
        "assignment",
        "loads",
        "image_indices",
        "recorded_image_indices",
    ],
    records.ItemSelection: ["image_indices", "locally_preprocessed"],
    records.BackendGrouping: ["backend_groups", "eager", "code_path"],
    records.GpuPreprocess: [
        "indices",
        "global_indices",
        "grid_rows_read",
        "expected_grids",
        "produced_grids",
        "produced_rows",
    ],
    records.CpuPreprocess: [
        "indices",
        "global_indices",
        "expected_grids",
        "produced_grids",
        "produced_rows",
        "processor_output",
    ],
    records.Concatenation: ["branch", "total_rows", "rows_from_grids"],
}
LENGTH_SHOWN = ["indices", "global_indices", "grid_rows_read", "patch_counts", "sum_patch_counts", "pixel_values_rows"]


def _name(value: object) -> str:
    return "" if isinstance(value, list) else type(value).__name__


def _kinds(base: type) -> set[type]:
    out = set()
    for sub in base.__subclasses__():
        out |= {sub} | _kinds(sub)
    return out


def _step(record: StepRecord) -> Step:
    return Step("a_step", "A step", "§0", record)


def test_every_step_kind_has_a_record_here():
    assert {type(r) for r, _ in FULL} == _kinds(StepRecord)


@pytest.mark.parametrize(("record", "keys"), FULL + PARTIAL, ids=_name)
def test_a_record_gives_the_json_keys_its_step_always_had(record, keys):
    data = record.to_json()
    assert list(data) == keys
    assert record.to_json() is not data  # a new dict each time: Step.to_json adds row_tracks to it
    assert list(_step(record).to_json()["variables"]) == keys


@pytest.mark.parametrize(("record", "keys"), FULL + PARTIAL, ids=_name)
def test_the_step_view_reads_every_key_variable_of_a_record(record, keys):
    data = record.to_json()
    shown = key_variables(_step(record))
    expected_names = [name for name, value in record.key_variables() if value is not None]
    assert [name for name, _ in shown] == expected_names
    for name, text in shown:
        assert name in data and text == short(data[name])  # shown under its trace.json name, with its value
    if type(record) in SHOWN_BEFORE:
        before = [name for name in SHOWN_BEFORE[type(record)] if data.get(name) is not None]
        assert expected_names == before
    elif isinstance(record, records.LengthCheck):
        before = LENGTH_SHOWN + (["processor_output"] if record.group.backend == "cpu" else [])
        assert expected_names == before
    else:
        assert expected_names == []  # the forward pass's steps and an unknown backend's show none


def test_records_and_steps_are_frozen():
    record, _ = FULL[0]
    step = Step("collect_grids", "Collect", "§6.1", record, "note", Check("c", 1, 1, True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.note += " more"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.check.passed = False  # type: ignore[misc,union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.patch_counts = None  # type: ignore[misc,attr-defined]


@pytest.mark.parametrize(
    ("scenario", "version"), [("s1-cpu", "0.5.18"), ("healthy-tp2", "0.5.23"), ("healthy-tp1", "0.5.17")]
)
def test_a_replay_builds_every_step_complete(scenario, version):
    trace = replay(get_scenario(scenario).build(), sglang_version=version, mode="shapes")
    for rank in trace.ranks:
        for k, step in enumerate(rank.steps):
            assert isinstance(step.variables, StepRecord)
            # the error sits on the last step only, and that step names its cause
            assert (step.error is not None) == (rank.error is not None and k == len(rank.steps) - 1)
            assert (step.cause is not None) == (step.error is not None)
