"""Every catalogue scenario reproduces SGLang's outcome, exact message and status, in both modes and via manifests."""

from __future__ import annotations

import json

import pytest

from kimi_viz.cli import main
from kimi_viz.errors import ScenarioError
from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.scenarios import SCENARIOS, get_scenario, run_scenario
from kimi_viz.split._replay import replay
from kimi_viz.split.cause import ErrorInfo
from kimi_viz.split.verdict import build_verdict, validate_verdict

CASES = [(name, mode) for name, sc in SCENARIOS.items() for mode in sc.modes]

# The exact strings, written out once more here so that a change in the module cannot pass unnoticed.
LENGTH = "Kimi-K3 deferred feature length does not match image grids"
GPU_GRIDS = "Kimi-K3 deferred GPU preprocessing produced wrong grids"
CPU_GRIDS = "Kimi-K3 deferred CPU preprocessing produced wrong grids"
EXPECTED = {
    "healthy-tp1": None,
    "healthy-tp2": None,
    "healthy-tp4": None,
    "s1-cpu": ErrorInfo("ValueError", LENGTH),
    "s1-gpu": ErrorInfo("ValueError", GPU_GRIDS),
    "s2-cpu": ErrorInfo("ValueError", LENGTH),
    "s2-gpu": ErrorInfo("ValueError", GPU_GRIDS),
    "s3-mixed-local": ErrorInfo("ValueError", "Kimi-K3 cannot mix local preprocessed and deferred images"),
    "s4-cpu": ErrorInfo("ValueError", CPU_GRIDS),
    "s4-gpu": None,
    "s6-stacked": ErrorInfo("ValueError", LENGTH),
    "s6-list": ErrorInfo("AttributeError", "'list' object has no attribute 'shape'"),
    "s6-stacked-feature": ErrorInfo(
        "ValueError",
        "multimodal feature tensors must have matching trailing shapes: "
        "expected torch.Size([3, 14, 14]), got torch.Size([2, 64, 3, 14, 14])",
    ),
    "s8-t2": ErrorInfo("ValueError", GPU_GRIDS),
    "s9-two-grids": ErrorInfo(
        "ValueError",
        "Kimi-K3 expects one vision grid per MultimodalDataItem; split aggregated "
        "encoder inputs before get_image_feature()",
    ),
    "s10-stale-eager": None,
    "s11-two-channels": ErrorInfo(
        "RuntimeError",
        "The size of tensor a (0) must match the size of tensor b (2) at non-singleton dimension 1",
    ),
    "s11-cpu-two-channels": ErrorInfo("ValueError", "Unsupported Kimi-K3 image channel count: 512"),
    "s12-hwc": None,
    "s13-zero-size": ErrorInfo("ZeroDivisionError", "division by zero"),
}


def test_the_catalogue_covers_every_class_and_this_table():
    assert set(SCENARIOS) == set(EXPECTED)
    classes = {sc.scenario_class for sc in SCENARIOS.values()}
    assert classes == {"none", "S1", "S2", "S3", "S4", "S6", "S8", "S9", "S10", "S11", "S12", "S13"}
    for backend in ("cpu", "gpu"):
        for cls in ("s1", "s2", "s4"):
            assert f"{cls}-{backend}" in SCENARIOS
    assert {SCENARIOS[f"healthy-tp{tp}"].tp_size for tp in (1, 2, 4)} == {1, 2, 4}
    assert SCENARIOS["s1-cpu"].code_path == "pre-fix" and SCENARIOS["s1-cpu"].tp_size == 2


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_scenario_outcome_and_exact_message(name, mode):
    scenario = SCENARIOS[name]
    trace = run_scenario(name, mode=mode)
    verdict = build_verdict(trace).to_json()
    validate_verdict(verdict)
    expected = EXPECTED[name]
    if expected is None:
        assert verdict["outcome"] == "ok" and verdict["error"] is None
    else:
        assert verdict["outcome"] == "error"
        assert verdict["error"] == expected.to_json()
    assert scenario.expected.error == expected
    if scenario.expected.ranks is not None:
        got = {r["rank"]: (r["outcome"], r["error"]) for r in verdict["ranks"]}
        assert got == {
            rank: ("ok", None) if error is None else ("error", error.to_json())
            for rank, error in scenario.expected.ranks.items()
        }
    div = verdict["divergence"]
    assert div["scenario_class"] == scenario.scenario_class
    assert div["silent"] is scenario.expected.silent
    status = "error-reproduced" if expected is not None else "silent-mismatch" if scenario.expected.silent else "clean"
    assert (verdict["status"], verdict["exit_code"]) == (
        status,
        {"clean": 0, "error-reproduced": 1, "silent-mismatch": 3}[status],
    )
    if scenario.scenario_class != "none":
        assert div["first_image"] is not None and div["explanation"] and div["fix"]
    else:
        assert div["first_image"] is None and div["expected_total"] == div["produced_total"]


@pytest.mark.parametrize(
    ("name", "first", "expected_rows", "produced_rows"),
    [
        ("s1-gpu", 1, 748, 64),
        ("s2-cpu", 1, 884, 748),
        ("s2-gpu", 1, 884, 748),
        ("s4-cpu", 0, 16576, 65712),
        ("s4-gpu", 0, 65712, 16576),
        ("s8-t2", 1, 128, 64),
        ("s10-stale-eager", 1, 64, 4),
        ("s12-hwc", 1, 68, 68),
    ],
)
def test_first_diverging_image_and_both_counts(name, first, expected_rows, produced_rows):
    div = run_scenario(name, mode="shapes").divergence
    assert (div.first_image, div.expected_rows, div.produced_rows) == (first, expected_rows, produced_rows)


def test_s2_names_the_stale_grid_key():
    div = run_scenario("s2-cpu", mode="shapes").divergence
    assert div.grid_source == "image_grid_thw"
    assert div.wrong_expectation.startswith("image_grid_thw")
    assert (div.expected_total, div.produced_total) == (448 + 884, 448 + 748)


def test_s4_gpu_is_silent_because_the_grid_follows_resize_config():
    trace = run_scenario("s4-gpu", mode="shapes")
    step = next(s for s in trace.ranks[0].steps if s.name == "preprocess_gpu")
    assert step.variables.grids.produced_grids == step.variables.grids.expected_grids == [[1, 112, 148]]
    assert trace.divergence.expected_grid == [1, 222, 296]  # what the K3 consumer would use


def test_unknown_scenario_lists_the_valid_names():
    with pytest.raises(ScenarioError) as info:
        get_scenario("s5")
    message = str(info.value)
    assert "unknown scenario 's5'" in message and "healthy-tp1" in message and "s13-zero-size" in message


@pytest.mark.parametrize("redact", [False, True], ids=["pixels", "redacted"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_manifest_round_trip_replays_to_the_same_verdict(name, redact, tmp_path):
    scenario = SCENARIOS[name]
    batch = scenario.build()
    mode = "shapes" if redact else "pixels"
    direct = build_verdict(replay(batch, tp_size=scenario.tp_size, code_path=scenario.code_path, mode=mode)).to_json()
    path = write_manifest(batch, tmp_path / name, redact=redact)
    again = read_manifest(path)
    assert (again.attn_tp_size, again.code_path) == (scenario.tp_size, scenario.code_path)
    replayed = build_verdict(replay(again, mode="auto")).to_json()
    assert replayed["outcome"] == direct["outcome"] == scenario.expected.outcome
    assert replayed["error"] == direct["error"]
    assert replayed["ranks"] == direct["ranks"]
    assert replayed["divergence"]["scenario_class"] == scenario.scenario_class
    assert again.processor_output == batch.processor_output


# --- the CLI -----------------------------------------------------------------------------------------
def test_cli_list_json(capsys):
    assert main(["scenario", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    from kimi_viz.scenarios.under_load import LOAD_SCENARIOS

    assert [s["name"] for s in listed] == list(SCENARIOS) + list(LOAD_SCENARIOS)
    s13 = next(s for s in listed if s["name"] == "s13-zero-size")
    assert s13["expected"]["error"] == {"type": "ZeroDivisionError", "message": "division by zero"}


def test_cli_list_table(capsys):
    assert main(["scenario", "list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["NAME", "CLASS", "TP", "CODE", "PATH", "EXPECTED"]
    assert "s10-stale-eager" in out and "ok (silent)" in out


def test_cli_run_json_exit_codes(capsys):
    assert main(["scenario", "run", "s2-gpu", "--json", "--mode", "shapes"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    validate_verdict(verdict)
    assert verdict["error"] == {"type": "ValueError", "message": GPU_GRIDS}
    assert main(["scenario", "run", "healthy-tp2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "ok"
    assert main(["scenario", "run", "s4-gpu", "--json", "--mode", "shapes"]) == 3  # a silent mismatch
    assert json.loads(capsys.readouterr().out)["status"] == "silent-mismatch"


def test_cli_run_text(capsys):
    assert main(["scenario", "run", "s1-cpu", "--mode", "shapes"]) == 1
    out = capsys.readouterr().out
    assert f"outcome: error — ValueError: {LENGTH}" in out
    assert "rank 0: images [0] -> ok" in out
    assert "scenario class: S1" in out and "expected 748 rows, produced 64" in out
    assert out.splitlines()[1].startswith("✗ ERROR REPRODUCED — ValueError")  # the status comes first
    assert "ranks: 1 of 2 ranks fail" in out
    assert out.index("rank 1: images [1, 2]") < out.index("rank 0: images [0] -> ok")  # failing ranks first


def test_cli_bad_input_exits_2(capsys):
    assert main(["scenario", "run", "no-such-scenario"]) == 2
    assert "unknown scenario 'no-such-scenario'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["scenario", "run", "s2-cpu", "--mode", "quick"])
    assert info.value.code == 2
    assert main(["scenario"]) == 2


def test_cli_manifest_out_round_trips(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["scenario", "run", "s2-cpu", "--manifest-out", str(out), "--json"]) == 1
    first = json.loads(capsys.readouterr().out)
    assert (out / "manifest.json").is_file()
    again = build_verdict(replay(read_manifest(out), mode="auto")).to_json()
    assert again["error"] == first["error"] and again["ranks"] == first["ranks"]
    assert main(["scenario", "run", "s9-two-grids", "--manifest-out", str(tmp_path / "r.zip"), "--redact"]) == 1
    redacted = read_manifest(tmp_path / "r.zip")
    assert all(item.feature.kind == "shape_only" for item in redacted.items)
