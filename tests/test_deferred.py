"""The replay of SGLang's deferred split: load balancing, step variables, error sites and pixel fidelity."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from kimi_viz.errors import ConfigError, KimiVizError
from kimi_viz.manifest import redact_batch
from kimi_viz.message_catalogue.messages import (
    MSG_FEATURE_TYPE,
    MSG_GPU_WRONG_GRIDS,
    MSG_LENGTH,
    MSG_UNSUPPORTED_BACKEND,
)
from kimi_viz.request import deferred_item, eager_item
from kimi_viz.scenarios import get_scenario
from kimi_viz.split._replay import replay
from kimi_viz.split.batch import Batch, Feature, Item
from kimi_viz.split.cause import ErrorInfo
from kimi_viz.split.ranks import assign_ranks
from kimi_viz.split.trace import Check
from kimi_viz.split.verdict import build_verdict, trace_document, validate_verdict, verdict_schema


# --- assign_ranks ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("counts", "tp", "expected"),
    [
        # The example in the docstring of SGLang's get_dp_encoder_lb_assignment (mm_utils.py):
        # sizes [1000, 100, 200, 50] on 2 GPUs -> GPU_0 = [0], GPU_1 = [2, 1, 3].
        ([1000, 100, 200, 50], 2, [[0], [2, 1, 3]]),
        # Ties keep their order (stable sort) and go to the lowest least-loaded rank.
        ([5, 5, 5, 5], 2, [[0, 2], [1, 3]]),
        ([7, 7, 7], 4, [[0], [1], [2], []]),
        # Each rank's list keeps assignment order (largest first), not index order.
        ([4, 748, 64], 2, [[1], [2, 0]]),
        ([10, 30, 20, 40], 3, [[3], [1], [2, 0]]),
        ([], 3, [[], [], []]),
        ([3, 1, 2], 1, [[0, 2, 1]]),
    ],
)
def test_assign_ranks_matches_sglang_load_balancing(counts, tp, expected):
    assert assign_ranks(counts, tp) == expected


def test_assign_ranks_covers_every_image_once_and_balances_greedily():
    rng = np.random.default_rng(7)
    counts = [int(c) for c in rng.integers(1, 5000, size=97)]
    ranks = assign_ranks(counts, 8)
    assert sorted(i for r in ranks for i in r) == list(range(97))
    loads = [sum(counts[i] for i in r) for r in ranks]
    # Greedy largest-first: no rank exceeds the lightest by more than the largest single image.
    assert max(loads) - min(loads) <= max(counts)
    for r in ranks:  # assignment order: non-increasing patch counts within each rank
        assert [counts[i] for i in r] == sorted((counts[i] for i in r), reverse=True)


@pytest.mark.parametrize("tp", [0, -1, 1.5, True, "2", 65537, 10**30])
def test_assign_ranks_refuses_bad_tp(tp):
    with pytest.raises(ConfigError, match="tp_size"):
        assign_ranks([1, 2], tp)


# --- replay: structure ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s1_trace():
    return replay(get_scenario("s1-cpu").build(), tp_size=2, code_path="pre-fix", mode="shapes")


def test_s1_rank1_reads_shard_local_grid_rows(s1_trace):
    rank1 = s1_trace.rank_trace(1)
    assert rank1.image_indices == [1, 2]
    steps = {s.name: s for s in rank1.steps}
    assert [s.name for s in rank1.steps] == [
        "collect_grids",
        "assign_ranks",
        "select_items",
        "group_backends",
        "preprocess_cpu",
        "length_check_cpu",
    ]
    group = steps["group_backends"].variables.backend_groups["cpu"]
    assert group == {"indices": [0, 1], "global_indices": [1, 2], "grid_rows_read": [0, 1]}
    length = steps["length_check_cpu"].variables
    assert length.patch_counts == [748, 64]  # images 0 and 1's grids, read for images 1 and 2
    assert length.sum_patch_counts == 812
    assert length.pixel_values_rows == 68  # 64 + 4: what the checkpoint processor produced
    assert steps["length_check_cpu"].check == Check("sum(patch_counts) == pixel_values.shape[0]", 812, 68, False)
    assert steps["length_check_cpu"].error.message == MSG_LENGTH
    assert steps["preprocess_cpu"].check.passed is True  # the cpu grid check uses the items' own grid_thws
    assert steps["assign_ranks"].spec_ref == "§6.2" and steps["length_check_cpu"].spec_ref == "§6.6"


def test_s1_rank0_is_a_prefix_and_passes(s1_trace):
    rank0 = s1_trace.rank_trace(0)
    assert rank0.image_indices == [0]
    assert rank0.outcome == "ok" and rank0.error is None
    assert s1_trace.grid_thws_host == [[1, 22, 34], [1, 8, 8], [1, 2, 2]]
    assert s1_trace.assignment == [[0], [1, 2]]


def test_s1_divergence_names_image_counts_and_mapping(s1_trace):
    div = s1_trace.divergence
    assert div.scenario_class == "S1"
    assert (div.first_image, div.rank, div.grid_read_from) == (1, 1, 0)
    assert (div.expected_rows, div.produced_rows) == (748, 64)
    assert (div.expected_total, div.produced_total) == (812, 68)
    assert div.wrong_expectation == "grid_thws_host[indices]: row 0 (image 0's grid) for image 1"
    assert "#35305" in div.fix
    images = {row.image: row for row in div.images}
    assert images[2].grid_index_read == 1 and images[2].expected_rows == 64 and images[2].produced_rows == 4


def test_s1_the_wrong_read_is_drawn_at_the_grouping_step_that_makes_it(s1_trace):
    steps = {s.name: s for s in s1_trace.rank_trace(1).steps}
    assert [(r.image, r.grid_index_read) for r in steps["select_items"].rows] == [(1, 1), (2, 2)]
    assert [(r.image, r.grid_index_read, r.expected_grid) for r in steps["group_backends"].rows] == [
        (1, 0, [1, 22, 34]),
        (2, 1, [1, 8, 8]),
    ]


def test_the_fixed_code_passes_the_same_batch():
    trace = replay(get_scenario("s1-cpu").build(), tp_size=2, code_path="post-fix", mode="shapes")
    assert trace.outcome == "ok"
    group = trace.rank_trace(1).steps[3].variables.backend_groups["cpu"]
    assert group["grid_rows_read"] == [1, 2]
    assert trace.divergence.scenario_class == "none"


def test_tp1_materializes_every_image_in_index_order():
    trace = replay(get_scenario("healthy-tp1").build(), mode="shapes")
    (rank,) = trace.ranks
    assert rank.image_indices == [0, 1, 2, 3, 4]
    assign = rank.steps[1].variables
    assert assign.order_largest_first is None and assign.assignment == [[0, 1, 2, 3, 4]]
    groups = rank.steps[3].variables.backend_groups
    assert list(groups) == ["gpu", "cpu"]  # first-appearance order, as SGLang's dict
    assert groups["gpu"]["global_indices"] == [0, 2, 4] and groups["cpu"]["global_indices"] == [1, 3]
    names = [s.name for s in rank.steps]
    assert names[4:] == ["preprocess_gpu", "length_check_gpu", "preprocess_cpu", "length_check_cpu", "concatenate"]
    assert rank.steps[-1].variables.total_rows == 748 + 64 + 720 + 448 + 4


def test_replay_one_rank_only():
    trace = replay(get_scenario("healthy-tp4").build(), rank=2, mode="shapes")
    assert [r.rank for r in trace.ranks] == [2]
    with pytest.raises(ConfigError, match="rank 0 was not replayed"):
        trace.rank_trace(0)


def test_a_rank_without_images_does_not_call_the_loader():
    batch = Batch(items=[deferred_item("microaneurysms.png", "gpu")], attn_tp_size=2)
    trace = replay(batch, mode="shapes")
    empty = trace.rank_trace(1)
    assert empty.image_indices == [] and empty.outcome == "ok"
    assert [s.name for s in empty.steps] == ["collect_grids", "assign_ranks"]
    assert "does not call the loader" in empty.steps[-1].note


def test_recorded_image_indices_that_differ_are_noted():
    batch = get_scenario("healthy-tp2").build()
    batch.attn_tp_rank, batch.image_indices = 1, [3, 2]
    step = replay(batch, rank=1, mode="shapes").ranks[0].steps[1]
    assert step.variables.recorded_image_indices == [3, 2]
    assert step.variables.image_indices == [2, 3]
    assert "differ" in step.note


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tp_size": 0}, "tp_size"),
        ({"rank": 4}, "rank"),
        ({"code_path": "fixed"}, "code_path"),
        ({"mode": "fast"}, "mode"),
    ],
)
def test_bad_arguments_raise_the_kits_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        replay(get_scenario("healthy-tp1").build(), **kwargs)


def test_pixels_mode_refuses_a_redacted_batch_and_auto_picks_shapes():
    redacted = redact_batch(get_scenario("s2-gpu").build())
    with pytest.raises(ConfigError, match="shape-only"):
        replay(redacted, mode="pixels")
    trace = replay(redacted, mode="auto")
    assert trace.mode == "shapes"
    assert trace.error.message == MSG_GPU_WRONG_GRIDS


def test_cpu_items_need_the_consumer_processor_config():
    batch = Batch(items=[deferred_item("microaneurysms.png", "cpu")], processor=None)
    with pytest.raises(KimiVizError, match="batch.processor is None"):
        replay(batch, mode="shapes")


# --- replay: error sites beyond the catalogue ---------------------------------------------------------
def _batch(*items: Item) -> Batch:
    from kimi_viz.preprocess.config import get_config

    return Batch(items=list(items), processor=get_config("kimi-k3").to_media_proc_cfg())


def test_unsupported_backend_message():
    item = deferred_item("microaneurysms.png", "gpu")
    item.deferred["backend"] = "npu"
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo("ValueError", MSG_UNSUPPORTED_BACKEND.format("npu"))
    assert MSG_UNSUPPORTED_BACKEND.format("npu") == "Unsupported Kimi-K3 deferred preprocessing backend: npu"


def test_missing_backend_is_a_key_error():
    item = deferred_item("microaneurysms.png", "gpu")
    del item.deferred["backend"]
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo("KeyError", "'backend'")


def test_an_item_without_any_grid_is_a_key_error_on_grid_thws():
    item = deferred_item("microaneurysms.png", "cpu")
    item.grids = {}
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo("KeyError", "'grid_thws'")
    assert trace.ranks[0].image_indices is None


def test_an_eager_image_in_a_deferred_batch_is_a_type_error():
    eager = deferred_item("astronaut_tiny_20x5.png", "cpu")
    eager.deferred = None  # an eager item whose feature is still a PIL image
    trace = replay(_batch(deferred_item("microaneurysms.png", "cpu"), eager), mode="pixels")
    expected = MSG_FEATURE_TYPE.format(type(eager.feature.image))
    assert expected.startswith("Kimi-K3 image feature must be a torch.Tensor, got <class 'PIL.")
    assert trace.error == ErrorInfo("TypeError", expected)


def test_a_float_tensor_on_the_gpu_path_is_refused_like_to_chw_uint8():
    item = deferred_item("microaneurysms.png", "gpu")
    item.feature = Feature.from_tensor(item.feature.tensor.float(), "chw")
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo(
        "ValueError",
        "Kimi-K3 preprocessing expects raw uint8 pixels, got torch.float32",
    )


def test_a_float_tensor_on_the_cpu_path_is_a_type_error():
    item = deferred_item("microaneurysms.png", "cpu")
    item.feature = Feature.from_tensor(torch.zeros(3, 8, 8), "chw")
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo(
        "TypeError",
        "Kimi-K3 deferred CPU preprocessing expects PIL or uint8 tensors",
    )


def test_cpu_items_without_grid_thws_fail_after_preprocessing():
    item = deferred_item("microaneurysms.png", "cpu")
    item.grids = {"image_grid_thw": item.grids["grid_thws"]}
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo("KeyError", "'grid_thws'")
    assert trace.ranks[0].steps[-1].name == "preprocess_cpu"


def test_local_branch_checks_types_in_materialize_multimodal_features():
    local = eager_item("astronaut_tiny_20x5.png", local_preprocessed=True)
    image_local = deferred_item("microaneurysms.png", "cpu")
    image_local.deferred, image_local.local_preprocessed = None, True
    trace = replay(_batch(local, image_local), mode="shapes")
    assert trace.error == ErrorInfo(
        "TypeError",
        "expected torch.Tensor, got <class 'PIL.Image.Image'>",
    )


# --- replay: pixels ---------------------------------------------------------------------------------
def _sha(rows: torch.Tensor) -> str:
    return hashlib.sha256(rows.contiguous().numpy().tobytes()).hexdigest()


def test_pixel_replay_reproduces_the_golden_pixels_of_both_paths(pixel_goldens):
    goldens = {g["file"]: g for g in pixel_goldens["images"]["kimi_k3"]}
    batch = _batch(
        deferred_item("chelsea.png", "gpu"),
        deferred_item("microaneurysms.png", "cpu"),
        deferred_item("horse.png", "cpu"),
    )
    trace = replay(batch, mode="pixels")
    assert trace.outcome == "ok"
    pixels = trace.ranks[0].pixel_values
    rows = [row.produced_rows for row in trace.ranks[0].images]
    chelsea, micro, horse = pixels.split(rows)
    assert _sha(chelsea) == goldens["chelsea.png"]["gpu_path"]["pixel_values_sha256"]
    assert _sha(micro) == goldens["microaneurysms.png"]["pixel_values_sha256"]
    assert _sha(horse) == goldens["horse.png"]["pixel_values_sha256"]


def test_pixel_and_shape_replays_agree_on_every_count():
    batch = get_scenario("healthy-tp2").build()
    pixels, shapes = replay(batch, mode="pixels"), replay(batch, mode="shapes")
    assert build_verdict(pixels).to_json() == build_verdict(shapes).to_json()
    assert [r.images for r in pixels.ranks] == [r.images for r in shapes.ranks]
    assert [r.pixel_values.shape[0] for r in pixels.ranks] == [748 + 64 + 4, 720 + 448]
    assert all(r.pixel_values is None for r in shapes.ranks)


# --- verdict and JSON ---------------------------------------------------------------------------------
def test_verdict_schema_and_json(s1_trace):
    verdict = build_verdict(s1_trace).to_json()
    validate_verdict(verdict)
    assert verdict["verdict_version"] == 3 and verdict["status"] == "error-reproduced"
    assert verdict["rank_summary"] == "1 of 2 ranks fail" and verdict["failing_ranks"] == [1]
    assert verdict["release"]["fixed_in"] is None  # a bare replay: the fix search is the question's (test_releases)
    assert verdict["outcome"] == "error"
    assert verdict["error"] == {"type": "ValueError", "message": MSG_LENGTH}
    assert verdict["ranks"] == [
        {"rank": 0, "image_indices": [0], "outcome": "ok", "error": None},
        {
            "rank": 1,
            "image_indices": [1, 2],
            "outcome": "error",
            "error": {"type": "ValueError", "message": MSG_LENGTH},
        },
    ]
    full = json.loads(json.dumps(trace_document(s1_trace)))
    assert {k: full[k] for k in verdict} == json.loads(json.dumps(verdict))
    assert full["trace"]["code_path"] == "pre-fix" and len(full["trace"]["ranks"][1]["steps"]) == 6
    assert set(verdict_schema()["required"]) == set(verdict)


def test_verdict_schema_refuses_a_malformed_verdict(s1_trace):
    import jsonschema

    verdict = build_verdict(s1_trace).to_json()
    verdict["ranks"][0]["outcome"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        validate_verdict(verdict)


# --- divergence: inputs the replay accepts are explained, never crash the analysis ---------------------
def test_a_deferred_config_without_a_resize_key_is_reported_not_crashed():
    gpu = deferred_item("microaneurysms.png", "gpu")
    del gpu.deferred["resize_config"]["pad_height"]
    trace = replay(_batch(gpu), mode="shapes")
    assert trace.error == ErrorInfo("KeyError", "'pad_height'")
    assert "lacks a key the gpu path reads" in trace.divergence.explanation
    assert trace.divergence.wrong_expectation == "a deferred config without 'pad_height'"
    cpu = deferred_item("microaneurysms.png", "cpu")  # the cpu backend computes its own resize
    del cpu.deferred["resize_config"]["pad_height"]
    trace = replay(_batch(cpu), mode="shapes")
    assert trace.outcome == "ok" and trace.divergence.scenario_class == "none"


def test_a_two_dimensional_hwc_feature_is_no_s12():
    item = deferred_item("microaneurysms.png", "gpu")
    item.feature = Feature.shape_only("hwc", (102, 102), "uint8")
    trace = replay(_batch(item), mode="shapes")
    assert trace.outcome == "ok"
    assert [f.cls for f in trace.divergence.findings] == []


def test_an_hwc_tensor_on_the_cpu_backend_is_read_as_hwc_there():
    item = deferred_item("chelsea.png", "cpu")
    hwc = torch.from_numpy(np.array(item.feature.image)).contiguous()  # [300, 451, 3]
    item.feature = Feature.from_tensor(hwc, "hwc")
    item.grids = {"grid_thws": [[1, 34, 2]]}  # the producer's CHW reading: 3x451
    trace = replay(_batch(item), mode="shapes")
    assert trace.error.message == "Kimi-K3 deferred CPU preprocessing produced wrong grids"
    div = trace.divergence
    assert div.scenario_class == "S12"
    assert (div.expected_grid, div.produced_grid) == ([1, 34, 2], [1, 22, 34])
    assert (
        "SGLang's producer reads it as CHW (a 300-channel 3x451 (WxH) image) for its grid, but the cpu "
        "backend reads it as HWC (451x300)" in div.explanation
    )


def test_findings_name_each_anomaly_once_and_correctly():
    from kimi_viz.scenarios import run_scenario

    s9 = run_scenario("s9-two-grids", mode="shapes").divergence.findings
    assert [f.cls for f in s9] == ["S9"]  # the aggregated feature matches both grids: no S10
    s6 = run_scenario("s6-list", mode="shapes").divergence.findings
    assert [f.text for f in s6] == ["the checkpoint processor returns pixel_values as a per-image list"]
    s11 = run_scenario("s11-cpu-two-channels", mode="shapes").divergence.explanation
    assert s11.startswith(
        "Image 1 reaches preprocessing with 512 channels (the cpu backend reads its [2, 512, 512] tensor as HWC"
    )


def test_the_verdict_schema_file_names_every_status_exit_code_and_code_path():
    """``verdict-v3.schema.json`` is a file like the manifest's; its enums are the kit's own values."""
    from kimi_viz.releases import CODE_PATHS, PathSource
    from kimi_viz.split.verdict import VERDICT_VERSION, Status, verdict_schema_path

    schema = json.loads(verdict_schema_path().read_text(encoding="utf-8"))
    assert verdict_schema_path().name == f"verdict-v{VERDICT_VERSION}.schema.json"
    props = schema["properties"]
    assert props["verdict_version"] == {"const": VERDICT_VERSION}
    # a verdict is the replay of a call: "no-call" and "not-applicable" are answers without one
    with_a_call = [s for s in Status if s not in (Status.NO_CALL, Status.NOT_APPLICABLE)]
    assert props["status"]["enum"] == [s.value for s in with_a_call]
    assert props["exit_code"]["enum"] == sorted({s.style.exit_code for s in with_a_call})
    release = props["release"]["properties"]
    assert release["code_path"]["enum"] == list(CODE_PATHS)
    chosen = set(PathSource)
    assert set(release["chosen_by"]["enum"]) == {s.value for s in chosen}


def test_a_verdict_is_never_built_on_a_replay_nobody_analysed(s1_trace):
    """build_verdict takes a Trace (replay plus divergence analysis); the bare replay is refused, not called clean."""
    from dataclasses import fields

    from kimi_viz.split.trace import Replayed

    bare = Replayed(**{f.name: getattr(s1_trace, f.name) for f in fields(Replayed)})
    with pytest.raises(ConfigError, match="build_verdict: expected a Trace"):
        build_verdict(bare)
