"""The "why" engine on its own: findings and analyse() on hand-built batches and traces, not only via scenarios.

Every cause kind the replay can record must come out with an explanation and a fix (no silent
"unknown"), and each §7 finding must be found from the batch alone.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from kimi_viz.preprocess.config import get_config
from kimi_viz.preprocess.resize import resize_config
from kimi_viz.releases import choose_release
from kimi_viz.split._replay import replay
from kimi_viz.split.batch import Batch, Feature, Item
from kimi_viz.split.divergence import analyse, with_divergence
from kimi_viz.split.findings import Finding, collect_findings
from kimi_viz.split.trace import CAUSES, Cause, CauseKind, ErrorInfo, ImageRow, RankTrace, Replayed, Trace

K3 = get_config("kimi-k3")


def _image_item(width: int, height: int, backend: str = "cpu", *, preset: str = "kimi-k3", label: str = "") -> Item:
    image = Image.new("RGB", (width, height), (120, 30, 200))
    resize = resize_config(width, height, preset)
    cfg = get_config(preset).to_media_proc_cfg()
    deferred = {
        "backend": backend,
        "image_mean": list(cfg["image_mean"]),
        "image_std": list(cfg["image_std"]),
        "transparent_bg_config": cfg.get("transparent_bg_config"),
        "resize_config": resize.to_sglang(),
    }
    feature = (
        Feature.from_image(image)
        if backend == "cpu"
        else Feature.from_tensor(torch.zeros((3, height, width), dtype=torch.uint8), "chw")
    )
    return Item(
        {"grid_thws": [[int(v) for v in resize.grid]]},
        feature,
        deferred,
        original_size=(width, height),
        label=label or f"{width}x{height}",
    )


def _batch(*items: Item) -> Batch:
    return Batch(items=list(items), processor=K3.to_media_proc_cfg())


def test_every_cause_kind_has_an_explanation_and_a_fix():
    assert set(CAUSES) == set(CauseKind)
    for kind, text in CAUSES.items():
        assert text.explanation and text.fix, kind


def test_findings_name_each_class_from_the_batch_alone():
    stale = _image_item(451, 300)
    stale.grids["image_grid_thw"] = [[1, 26, 34]]
    t2 = _image_item(102, 102, "gpu")
    t2.grids["grid_thws"] = [[2, 8, 8]]
    two_rows = Item({"grid_thws": [[1, 8, 8], [1, 2, 2]]}, Feature.shape_only("patches", (68, 3, 14, 14), "float32"))
    hwc = Item(
        {"grid_thws": [[1, 34, 2]]},
        Feature.shape_only("hwc", (300, 451, 3), "uint8"),
        {"backend": "gpu", "resize_config": {}},
    )
    k25 = _image_item(4200, 3150, "gpu", preset="kimi-k25")
    found = collect_findings(_batch(stale, t2, two_rows, hwc, k25), consumer=K3)
    assert [(f.cls, f.image) for f in found] == [("S2", 0), ("S8", 1), ("S9", 2), ("S12", 3), ("S4", 4)]
    s4 = found[-1]
    assert (s4.given_grid, s4.consumer_grid) == ([1, 112, 148], [1, 222, 296])
    assert s4.to_json()["class"] == "S4" and "given_grid" in s4.to_json()


def test_a_clean_replay_says_nothing_diverges_with_both_totals():
    trace = replay(_batch(_image_item(100, 80), _image_item(60, 200, "gpu")), mode="shapes")
    div = trace.divergence
    assert (div.scenario_class, div.silent, div.first_image, div.cause) == ("none", False, None, None)
    assert div.expected_total == div.produced_total == sum(r.expected_rows for r in div.images)


def test_s1_names_the_row_read_and_the_image_it_belongs_to():
    batch = _batch(
        _image_item(451, 300, label="big"), _image_item(102, 102, label="small"), _image_item(20, 5, label="tiny")
    )
    trace = replay(batch, tp_size=2, sglang_version="0.5.18", mode="shapes")
    div = trace.divergence
    assert (div.scenario_class, div.cause, div.rank, div.first_image) == ("S1", CauseKind.LENGTH, 1, 1)
    assert div.grid_read_from == 0
    assert div.wrong_expectation == "grid_thws_host[indices]: row 0 (image 0's grid) for image 1"
    assert (div.expected_rows, div.produced_rows) == (748, 64)
    # The same batch on 0.5.19's code reads the right rows.
    assert replay(batch, tp_size=2, sglang_version="0.5.19", mode="shapes").divergence.scenario_class == "none"


def test_s4_silent_reports_the_consumers_count_in_the_batch_total():
    trace = replay(_batch(_image_item(4200, 3150, "gpu", preset="kimi-k25")), mode="shapes")
    div = trace.divergence
    assert (div.scenario_class, div.silent) == ("S4", True)
    assert (div.expected_grid, div.produced_grid) == ([1, 222, 296], [1, 112, 148])
    assert (div.expected_rows, div.produced_rows) == (65712, 16576)
    assert (div.expected_total, div.produced_total) == (65712, 16576)


def _trace_with_cause(cause: Cause, error: ErrorInfo) -> Trace:
    """A one-rank trace that raised ``error`` for ``cause`` (so analyse is tested without the replay)."""
    batch = _batch(_image_item(100, 80))
    row = ImageRow(0, 0, "100x80", [1, 6, 8], [1, 6, 8], 0)
    rank = RankTrace(0, [0], [], "error", error, [row], cause)
    replayed = Replayed(
        batch, 1, "post-fix", "shapes", [rank], [[1, 6, 8]], [[0]], choose_release(code_path="post-fix")
    )
    return with_divergence(replayed)


def test_every_cause_kind_is_explained_with_a_fix_and_never_unknown():
    for kind in CauseKind:
        trace = _trace_with_cause(
            Cause(
                kind,
                0,
                key="image_mean",
                size=[0, 5],
                channels=2,
                rows=2,
                shape=[2, 64, 3, 14, 14],
                expected_trailing=[3, 14, 14],
                local=[0],
                deferred=[1],
                expected_total=10,
                produced_total=4,
            ),
            ErrorInfo("ValueError", "some SGLang message"),
        )
        div = analyse(trace)
        assert div.cause is kind
        assert div.scenario_class != "unknown"
        assert div.explanation, kind
        assert div.fix, kind


def test_an_unclassified_count_error_falls_back_to_the_cause_text():
    trace = _trace_with_cause(
        Cause(CauseKind.GPU_GRIDS, 0, expected=[1, 6, 8], produced=[1, 6, 10]),
        ErrorInfo("ValueError", "Kimi-K3 deferred GPU preprocessing produced wrong grids"),
    )
    div = analyse(trace)
    assert div.scenario_class == "unclassified"
    assert CAUSES[CauseKind.GPU_GRIDS].explanation in div.explanation
    assert div.fix == CAUSES[CauseKind.GPU_GRIDS].fix


def test_a_deferred_config_from_a_newer_producer_is_a_skew():
    item = _image_item(100, 80)
    del item.deferred["backend"]
    trace = replay(_batch(item), mode="shapes")
    assert trace.error == ErrorInfo("KeyError", "'backend'")
    div = trace.divergence
    assert (div.scenario_class, div.cause) == ("skew", CauseKind.MISSING_BACKEND)
    assert "Run the same SGLang release" in div.fix


def test_no_split_findings_only_on_0_5_17():
    batch = _batch(_image_item(100, 80))
    on_17 = replay(batch, sglang_version="0.5.17", mode="shapes").divergence
    on_23 = replay(batch, sglang_version="0.5.23", mode="shapes").divergence
    assert [f.cls for f in on_17.findings] == ["skew"] and on_17.scenario_class == "skew"
    assert on_23.findings == [] and on_23.scenario_class == "none"


def test_finding_json_leaves_out_unset_facts():
    assert Finding("S9", 2, "two rows").to_json() == {"class": "S9", "image": 2, "text": "two rows"}


def test_scenario_classes_are_one_set():
    """Every class a finding, a divergence or a scenario names is a ScenarioClass member; any other is refused."""
    from kimi_viz.scenarios import SCENARIOS
    from kimi_viz.split.classes import ScenarioClass

    assert {s.scenario_class for s in SCENARIOS.values()} <= set(ScenarioClass)
    assert all(isinstance(s.expected.scenario_class, ScenarioClass) for s in SCENARIOS.values())
    assert f"{ScenarioClass.SKEW}" == "skew" and f"{ScenarioClass.S4:<5}|" == "S4   |"
    with pytest.raises(ValueError, match="'S5' is not a valid ScenarioClass"):
        Finding("S5", 0, "no such class in §7")
