"""``kimi-viz triage``: every catalogue scenario survives manifest → triage with its expected verdict,
in pixel and redacted (shape-only) manifests; the report files and the command's options."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kimi_viz._triage import triage
from kimi_viz.cli import main
from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split.verdict import validate_verdict

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("error")  # a manifest the kit wrote reads without a single warning
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def manifests(tmp_path_factory) -> dict[tuple[str, bool], Path]:
    """Every scenario written once as a pixel manifest and once redacted."""
    root = tmp_path_factory.mktemp("scenarios")
    written = {}
    for name, scenario in SCENARIOS.items():
        batch = scenario.build()
        written[name, False] = write_manifest(batch, root / f"{name}-pixels")
        written[name, True] = write_manifest(batch, root / f"{name}-redacted", redact=True)
    return written


CASES = [
    (name, redacted)
    for name, scenario in SCENARIOS.items()
    for redacted in (False, True)
    if (not redacted or "shapes" in scenario.modes) and (redacted or "pixels" in scenario.modes)
]


@pytest.mark.parametrize(("name", "redacted"), CASES, ids=[f"{n}-{'redacted' if r else 'pixels'}" for n, r in CASES])
def test_scenario_round_trip_gives_the_expected_verdict(manifests, name, redacted):
    scenario = SCENARIOS[name]
    expected = scenario.expected
    code, out, err = run_cli("triage", str(manifests[name, redacted]), "--json")
    assert err == ""
    verdict = json.loads(out)
    validate_verdict(verdict)
    assert set(verdict) == {
        "verdict_version",
        "status",
        "status_text",
        "headline",
        "exit_code",
        "outcome",
        "error",
        "recorded",
        "release",
        "rank_summary",
        "failing_ranks",
        "ranks",
        "images",
        "divergence",
    }
    path_release = {"pre-fix": "0.5.18", "post-fix": "0.5.23"}[scenario.code_path]
    assert (verdict["release"]["code_path"], verdict["release"]["sglang_version"]) == (scenario.code_path, path_release)
    # the manifest records the scenario's code and no version: chosen by the scenario (it said "detected" before,
    # which is for a code path a capture read from SGLang's source)
    assert verdict["release"]["chosen_by"] == "scenario"
    assert "the scenario's code" in verdict["release"]["note"]
    assert code == verdict["exit_code"] == (1 if expected.outcome == "error" else 3 if expected.silent else 0)
    assert verdict["outcome"] == expected.outcome
    assert verdict["error"] == (None if expected.error is None else expected.error.to_json())
    assert [r["rank"] for r in verdict["ranks"]] == list(range(scenario.tp_size))
    if expected.ranks is not None:
        for rank in verdict["ranks"]:
            error = expected.ranks[rank["rank"]]
            assert rank["outcome"] == ("ok" if error is None else "error")
            assert rank["error"] == (None if error is None else error.to_json())
    assert verdict["divergence"]["scenario_class"] == expected.scenario_class
    assert verdict["divergence"]["silent"] == expected.silent


def test_redacted_manifest_replays_in_shapes_mode(manifests, tmp_path):
    pixels = triage(manifests["s2-cpu", False])
    shapes = triage(manifests["s2-cpu", True])
    assert (pixels.mode, shapes.mode) == ("pixels", "shapes")
    from_pixels, from_shapes = pixels.verdict.to_json(), shapes.verdict.to_json()
    # A redacted manifest keeps each image's size, not its PIL mode: the rest of the verdict is the same.
    assert [(i["image"], i["label"], i["size"]) for i in from_pixels.pop("images")] == [
        (i["image"], i["label"], i["size"]) for i in from_shapes.pop("images")
    ]
    assert from_pixels == from_shapes
    assert all(item.feature.kind == "shape_only" for item in read_manifest(manifests["s2-cpu", True]).items)
    code, _, err = run_cli("triage", str(manifests["s2-cpu", True]), "--mode", "pixels")
    assert code == 2 and "shape-only" in err and "mode='shapes'" in err


def test_text_verdict_names_message_per_rank_divergence_class_and_fix(manifests):
    code, out, _ = run_cli("triage", str(manifests["s1-cpu", False]))
    assert code == 1
    message = "Kimi-K3 deferred feature length does not match image grids"
    assert f"outcome: error — ValueError: {message}" in out
    assert "  rank 0: images [0] -> ok" in out
    assert f"  rank 1: images [1, 2] -> ValueError: {message}" in out
    assert (
        "first diverging image: image 1 (microaneurysms.png; 102×102 L, cpu backend) on rank 1: expected 748 rows, "
        "produced 64"
    ) in out
    assert "grid read from another image: the grid of image 0, read for image 1" in out
    assert "counts: expected 812, produced 68" in out
    assert "scenario class: S1" in out
    assert re.search(r"^fix: Upgrade SGLang .*global_indices", out, re.M)


def test_both_code_paths(manifests):
    code, out, _ = run_cli("triage", str(manifests["s1-gpu", False]), "--code-path", "both", "--json")
    verdict = json.loads(out)
    assert code == 1  # the scenario's (pre-fix) code reproduces the error
    assert set(verdict["code_paths"]) == {"pre-fix", "post-fix"}
    assert verdict["error"]["message"] == "Kimi-K3 deferred GPU preprocessing produced wrong grids"
    assert verdict["code_paths"]["pre-fix"]["outcome"] == "error"
    assert verdict["code_paths"]["post-fix"]["outcome"] == "ok"
    assert verdict["code_paths"]["post-fix"]["divergence"]["scenario_class"] == "none"
    code, out, _ = run_cli("triage", str(manifests["s1-gpu", False]), "--code-path", "post-fix", "--json")
    assert code == 0 and json.loads(out)["outcome"] == "ok"


def test_tp_override_and_recorded_rank(manifests, tmp_path):
    code, out, _ = run_cli("triage", str(manifests["healthy-tp2", False]), "--tp", "4", "--json")
    verdict = json.loads(out)
    assert code == 0 and [r["rank"] for r in verdict["ranks"]] == [0, 1, 2, 3]
    assert sorted(i for r in verdict["ranks"] for i in r["image_indices"]) == [0, 1, 2, 3, 4]
    batch = read_manifest(manifests["s1-cpu", True])
    batch.attn_tp_rank = 1
    one_rank = write_manifest(batch, tmp_path / "rank1")
    code, out, _ = run_cli("triage", str(one_rank), "--json")
    verdict = json.loads(out)
    assert code == 1 and [r["rank"] for r in verdict["ranks"]] == [1]
    code, out, _ = run_cli("triage", str(one_rank), "--json", "--rank", "all")
    assert [r["rank"] for r in json.loads(out)["ranks"]] == [0, 1]
    code, _, err = run_cli("triage", str(one_rank), "--rank", "5")
    assert code == 2 and "rank" in err
    with pytest.raises(SystemExit):
        run_cli("triage", str(one_rank), "--tp", "0")


def test_out_writes_report_summary_trace_and_issue(manifests, tmp_path):
    out_dir = tmp_path / "out"
    code, out, _ = run_cli("triage", str(manifests["s2-cpu", False]), "--out", str(out_dir))
    assert code == 1
    assert sorted(p.name for p in out_dir.iterdir()) == ["issue.md", "report.html", "summary.png", "trace.json"]
    assert f"wrote {out_dir / 'issue.md'}" in out
    assert (out_dir / "issue.md").read_text().startswith("# Kimi-K3 get\\_image\\_feature raises ValueError")
    assert f"wrote {out_dir / 'report.html'}" in out
    png = (out_dir / "summary.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    trace = json.loads((out_dir / "trace.json").read_text())
    assert trace["error"]["message"] == "Kimi-K3 deferred feature length does not match image grids"
    assert trace["trace"]["ranks"][0]["steps"]
    page = (out_dir / "report.html").read_text()
    assert "http://" not in page and "https://" not in page
    assert page.startswith("<!DOCTYPE html>")
    # the verdict comes first, before any figure or table
    assert page.index('id="kv-verdict"') < page.index("<img") < page.index('class="kv-stepper')
    embedded = re.search(r'<script type="application/json" id="kv-trace">(.*?)</script>', page, re.S).group(1)
    assert json.loads(embedded) == trace
    assert "ValueError: Kimi-K3 deferred feature length does not match image grids" in page
    assert re.search(r'<img[^>]+src="data:image/png;base64,', page)
    assert not re.search(r'\b(src|href)="(?!data:|#)', page)  # nothing loaded from anywhere else


def test_urls_in_free_text_are_made_inert(manifests, tmp_path):
    batch = read_manifest(manifests["s3-mixed-local", True])
    batch.note = "see https://example.invalid/issue and http://x.invalid </script><b>"
    path = write_manifest(batch, tmp_path / "m")
    run_cli("triage", str(path), "--out", str(tmp_path / "out"))
    page = (tmp_path / "out" / "report.html").read_text()
    assert "http://" not in page and "https://" not in page
    assert "https&#58;//example.invalid/issue" in page
    embedded = re.search(r'id="kv-trace">(.*?)</script>', page, re.S).group(1)
    assert "</script>" not in embedded


def test_subprocess_smoke_zip(manifests, tmp_path):
    archive = tmp_path / "s2.zip"
    write_manifest(read_manifest(manifests["s2-gpu", False]), archive)
    result = subprocess.run(
        [sys.executable, "-m", "kimi_viz", "triage", str(archive), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=dict(os.environ),
    )
    assert result.returncode == 1, result.stderr
    verdict = json.loads(result.stdout)
    validate_verdict(verdict)
    assert verdict["error"] == {
        "type": "ValueError",
        "message": "Kimi-K3 deferred GPU preprocessing produced wrong grids",
    }


def test_missing_processor_config_assumes_the_k3_preset(manifests, tmp_path):
    batch = read_manifest(manifests["s2-cpu", True])
    batch.processor = None
    path = write_manifest(batch, tmp_path / "no-processor")
    code, out, _ = run_cli("triage", str(path))
    assert code == 1
    assert "assumed: the manifest records no processor config" in out
    assert "ValueError: Kimi-K3 deferred feature length does not match image grids" in out


def test_report_reproduce_line_repeats_every_option(manifests, tmp_path):
    manifest = manifests["s3-mixed-local", True]
    result = triage(manifest, out_dir=tmp_path / "out", code_path="both", rank="all", device="cpu")
    page = result.outputs["report"].read_text()
    assert f"<code>kimi-viz triage {manifest} --code-path both --rank all --device cpu</code>" in page
    page = triage(manifest, out_dir=tmp_path / "default").outputs["report"].read_text()
    assert f"<code>kimi-viz triage {manifest}</code>" in page
