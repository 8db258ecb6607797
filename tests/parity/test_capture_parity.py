"""``kimi-viz capture`` around a stand-in server whose ranks run the real get_image_feature.

For each case the stand-in server (``standin_server.py``) starts one process per attention-TP rank
under ``kimi-viz capture``; every rank whose real call raises must leave a manifest, and each
manifest must triage — with no options — to the outcome, exception and message the rank recorded,
on the installed release, found from what the capture recorded. On 0.5.18, S1 is named with the
right image and both counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.scenarios import SCENARIOS

from .lane import record

SERVER = Path(__file__).resolve().parent / "standin_server.py"
ROOT = Path(__file__).resolve().parents[2]
CASES = ["s1-cpu", "s1-gpu", "s2-gpu", "s3-mixed-local", "healthy-tp2"]  # 8 rank processes: each imports SGLang


def _batch(name: str):
    return SCENARIOS[name].build(), SCENARIOS[name].tp_size


def _kimi_viz(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kimi_viz", *args], capture_output=True, text=True, cwd=cwd, timeout=600, env=_env()
    )


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_captures_from_a_stand_in_server_triage_to_what_the_ranks_recorded(release, tmp_path):
    manifests_checked, ranks_run, problems = 0, 0, []
    s1_named = None
    for name in CASES:
        batch, tp = _batch(name)
        batch.sglang_version = None  # the source batch carries no release: the capture must record it
        source = write_manifest(batch, tmp_path / name / "source")
        captures, outcomes = tmp_path / name / "captures", tmp_path / name / "outcomes"
        done = _kimi_viz(
            "capture",
            "--out",
            str(captures),
            "--",
            sys.executable,
            str(SERVER),
            str(source),
            "--tp",
            str(tp),
            "--outcomes",
            str(outcomes),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results = [json.loads((outcomes / f"rank{r}.json").read_text()) for r in range(tp)]
        ranks_run += tp
        failing = [r for r in results if r["outcome"] == "error"]
        folders = sorted(p for p in captures.iterdir() if (p / "manifest.json").is_file()) if captures.exists() else []
        if len(folders) != len(failing):
            problems.append(f"{name}: {len(failing)} ranks raised but {len(folders)} manifests were written")
            continue
        for folder in folders:
            captured = read_manifest(folder)
            rank = next(r for r in failing if r["rank"] == captured.attn_tp_rank)
            triaged = _kimi_viz("triage", str(folder), "--json", cwd=tmp_path)
            verdict = json.loads(triaged.stdout)
            manifests_checked += 1
            expected = {
                "status": "error-reproduced",
                "error": {"type": rank["type"], "message": rank["message"]},
                "release": release,
                "chosen_by": "recorded",
                "tp": tp,
            }
            got = {
                "status": verdict["status"],
                "error": verdict["error"],
                "release": verdict["release"]["sglang_version"],
                "chosen_by": verdict["release"]["chosen_by"],
                "tp": captured.attn_tp_size,
            }
            if got != expected or triaged.returncode != 1:
                problems.append(f"{name} rank {rank['rank']}: triage {got} (exit {triaged.returncode}) != {expected}")
            if verdict["recorded"] != {"outcome": "error", "error": {"type": rank["type"], "message": rank["message"]}}:
                problems.append(f"{name} rank {rank['rank']}: recorded {verdict['recorded']}")
            if name == "s1-cpu" and release == "0.5.18":
                div = verdict["divergence"]
                s1_named = (
                    div["scenario_class"],
                    div["first_image"],
                    div["expected_rows"],
                    div["produced_rows"],
                    verdict["release"]["fixed_in"]["release"],
                )
    if release == "0.5.18":
        assert s1_named == ("S1", 1, 748, 64, "0.5.19")
    record("capture", cases=len(CASES), ranks=ranks_run, manifests=manifests_checked, disagreements=len(problems))
    assert problems == []
    assert manifests_checked >= (4 if release == "0.5.18" else 2)


@pytest.fixture(autouse=True)
def _need_the_kit_cli():
    """The lane runs the kit's CLI from this checkout (``python -m kimi_viz``)."""
    assert (ROOT / "kimi_viz" / "__main__.py").is_file()


def test_the_real_get_image_feature_is_wrapped_and_restored(tmp_path):
    """``capture.patch`` wraps the real ``KimiK3ForConditionalGeneration.get_image_feature`` and puts it back."""
    import importlib

    from kimi_viz import capture

    cls = importlib.import_module("sglang.srt.models.kimi_k3").KimiK3ForConditionalGeneration
    original = cls.get_image_feature
    with capture.patch(tmp_path):
        assert cls.get_image_feature is not original
        assert getattr(cls.get_image_feature, capture.WRAPPED_ATTR) is original
    assert cls.get_image_feature is original
    record("capture-wrap", cases=1, disagreements=0)
