"""A repro written from a manifest keeps the manifest's whole name: in its file name and in its title."""

from __future__ import annotations

import ast
import json

from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.repro import emit_repro
from kimi_viz.repro._emit import _manifest_name, _slug
from kimi_viz.scenarios import SCENARIOS


def _unnamed_batch():
    batch = SCENARIOS["s1-cpu"].build()
    batch.sglang_version, batch.attn_tp_rank = "0.5.18", 1
    batch.scenario, batch.created_by = None, None  # a real capture: no scenario behind it
    return batch


def test_a_folder_name_with_dots_is_kept_whole(tmp_path):
    manifest = write_manifest(_unnamed_batch(), tmp_path / "real-0.5.18-tp4-rank3")
    test_file = emit_repro(read_manifest(manifest), tmp_path / "out", manifest=manifest)
    digest = json.loads(test_file.with_suffix(".json").read_text(encoding="utf-8"))["source"]["manifest"]
    assert digest == "real-0.5.18-tp4-rank3"
    assert test_file.name.startswith("test_kimi_k3_repro_real_0_5_18_tp4_rank3_")
    assert len(test_file.stem) == len("test_kimi_k3_repro_real_0_5_18_tp4_rank3_") + 8
    assert test_file.stem.isidentifier()
    doc = ast.get_docstring(ast.parse(test_file.read_text(encoding="utf-8")))
    assert doc.splitlines()[0] == "Kimi-K3 get_image_feature regression from kimi-viz: real-0.5.18-tp4-rank3."


def test_names_keep_all_of_a_folder_or_file_name():
    assert _manifest_name({"manifest": "real-0.5.18-tp4-rank3"}) == "real-0.5.18-tp4-rank3"
    assert _manifest_name({"manifest": "captures/real-0.5.18-tp4-rank3.zip"}) == "real-0.5.18-tp4-rank3"
    assert _manifest_name({"manifest": "run.v2.tar"}) == "run.v2.tar"
    assert _manifest_name({}) is None
    assert _slug("real-0.5.18-tp4-rank3") == "real_0_5_18_tp4_rank3"
    assert _slug("Kimi K3 (run #2).v1") == "kimi_k3_run_2_v1"
    assert _slug("...") == "batch"
    long = "capture-" + "x" * 100 + ".0.5.23"
    assert _slug(long) == "capture_" + "x" * 100 + "_0_5_23"
