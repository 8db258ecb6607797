"""``kimi_viz.repro.emit_repro``: the standalone SGLang test file and the data it reads, checked without SGLang.

The emitted file must compile, import nothing but the standard library, pytest, torch, Pillow and
SGLang (never ``kimi_viz``), say in its docstring where it came from and what each release does,
and carry no pixels unless asked (never for a redacted manifest). Its data file must round-trip.
Running it against the real SGLang is the lane's job (``tests/parity/test_repro_parity.py``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from kimi_viz.errors import ArgumentError, ConfigError, OutputError
from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.message_catalogue.messages import MSG_GPU_WRONG_GRIDS, MSG_LENGTH
from kimi_viz.repro import MARKER, ReproCase, emit_repro, template_text
from kimi_viz.scenarios import SCENARIOS

ALLOWED = {"json", "math", "pathlib", "types", "unittest", "pytest", "torch", "PIL", "sglang"}


def _s1(name: str = "s1-cpu"):
    batch = SCENARIOS[name].build()
    batch.sglang_version, batch.attn_tp_rank = "0.5.18", 1
    return batch


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


def _case(test_file: Path) -> ReproCase:
    return ReproCase.from_json(json.loads(test_file.with_suffix(".json").read_text(encoding="utf-8")))


def test_the_emitted_file_compiles_and_imports_only_pytest_torch_pil_sglang(tmp_path):
    for name in SCENARIOS:
        test_file = emit_repro(SCENARIOS[name].build(), tmp_path)
        compile(test_file.read_text(encoding="utf-8"), str(test_file), "exec")
        imports = _imports(test_file)
        assert imports <= ALLOWED, (name, imports - ALLOWED)
        assert "kimi_viz" not in test_file.read_text(encoding="utf-8").split('"""', 2)[2]
    assert {"sglang", "torch", "pytest"} <= imports


def test_the_file_is_shaped_like_sglangs_own_kimi_k3_tests(tmp_path):
    text = emit_repro(_s1(), tmp_path).read_text(encoding="utf-8")
    for needle in (
        "register_cpu_ci(est_time=",
        'suite="base-a-test-cpu")',
        "class _K3TowerStub:",
        "KimiK3ForConditionalGeneration.__new__(KimiK3ForConditionalGeneration)",
        "torch.nn.Module.__init__(model)",
        "from unittest.mock import patch as mock_patch",
        '"sglang.srt.multimodal.mm_utils.run_dp_sharded_mrope_vision_model"',
        "get_dp_encoder_lb_assignment(",
        "get_context().override_server_args(tp_size=tp_size)",
        "get_parallel().override(",
        'if __name__ == "__main__":',
    ):
        assert needle in text, needle
    assert "__DOCSTRING__" not in text and "__TEST_NAME__" not in text and "__EST_TIME__" not in text


def test_the_docstring_names_release_scenario_manifest_and_the_outcome_per_release(tmp_path):
    manifest = write_manifest(_s1(), tmp_path / "capture")
    test_file = emit_repro(read_manifest(manifest), tmp_path / "out", manifest=manifest, scenario="s1-cpu")
    doc = " ".join(ast.get_docstring(ast.parse(test_file.read_text(encoding="utf-8"))).split())
    digest = hashlib.sha256((manifest / "manifest.json").read_bytes()).hexdigest()
    assert "s1-cpu" in doc and SCENARIOS["s1-cpu"].title in doc
    assert f"Manifest sha256: {digest}" in doc
    assert "on SGLang 0.5.18 (pre-fix path) at attention-TP 2" in doc
    assert f"SGLang 0.5.18: rank 1 fails: ValueError: {MSG_LENGTH}" in doc
    assert "SGLang 0.5.19 to 0.5.23: passes on every rank" in doc
    assert "test/registered/unit/models/" in doc
    case = _case(test_file)
    assert case.source["kind"] == "manifest" and case.source["manifest_sha256"] == digest
    assert case.release == "0.5.18" and case.code_path == "pre-fix" and case.tp_size == 2


def test_a_scenarios_batch_names_its_scenario_and_keeps_the_name_through_a_manifest(tmp_path):
    batch = _s1()
    assert (batch.scenario, batch.created_by) == ("s1-cpu", "kimi-viz scenario s1-cpu")
    again = read_manifest(write_manifest(batch, tmp_path / "capture"))
    assert (again.scenario, again.created_by) == ("s1-cpu", "kimi-viz scenario s1-cpu")
    case = _case(emit_repro(again, tmp_path / "out"))
    assert case.source["kind"] == "scenario" and case.source["scenario"] == "s1-cpu"
    assert case.source["title"] == SCENARIOS["s1-cpu"].title


def test_the_expectations_are_the_kits_verdict_per_release(tmp_path):
    case = _case(emit_repro(_s1("s1-gpu"), tmp_path))
    assert case.ranks == [0, 1]
    assert [e.outcome for e in case.expected_for("0.5.18").values()] == ["passes", "raises"]
    assert case.expected_for("0.5.18")[1].error.message == MSG_GPU_WRONG_GRIDS
    assert case.expected_for("0.5.18.post1") == case.expected["0.5.18"]
    assert all(not e.fails for e in case.expected["0.5.23"].values())
    stale = _case(emit_repro(SCENARIOS["s10-stale-eager"].build(), tmp_path))
    wrong = stale.expected["0.5.23"][0]
    assert wrong.outcome == "wrong-rows" and wrong.rows == (448, 4) and wrong.grid_rows == (448, 64)
    assert "image 1 has 4 rows, its grid 64" in wrong.text()


def test_the_data_file_round_trips(tmp_path):
    for name in ("s1-cpu", "s6-stacked", "s9-two-grids", "s11-two-channels", "s3-mixed-local"):
        test_file = emit_repro(SCENARIOS[name].build(), tmp_path)
        data = json.loads(test_file.with_suffix(".json").read_text(encoding="utf-8"))
        case = ReproCase.from_json(data)
        assert case.to_json() == data
        assert ReproCase.from_json(json.loads(json.dumps(case.to_json()))) == case
        assert data["format"] == "kimi-viz-repro" and data["version"] == 1
    assert case.batches[0][0].local_preprocessed is True
    assert case.processor is not None and case.processor["output"] == "concatenated"
    with pytest.raises(ConfigError, match="not a kimi-viz repro data file"):
        ReproCase.from_json({"format": "something else"})


def test_a_redacted_manifest_gives_a_repro_without_pixels(tmp_path):
    manifest = write_manifest(_s1(), tmp_path / "capture", redact=True)
    before = set(tmp_path.rglob("*"))
    test_file = emit_repro(read_manifest(manifest), tmp_path / "out", manifest=manifest, pixels=True)
    written = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*"))
    assert written == sorted([MARKER, test_file.name, test_file.with_suffix(".json").name])
    assert not [p for p in set(tmp_path.rglob("*")) - before if p.suffix.lower() in (".png", ".jpg", ".safetensors")]
    case = _case(test_file)
    assert case.source["redacted"] is True
    assert all(spec.feature.png is None for spec in case.batches[0])
    assert [spec.feature.shape for spec in case.batches[0]] == [(300, 451, 3), (102, 102, 1), (5, 20, 3)]
    assert "no pixels" in test_file.read_text(encoding="utf-8")


def test_pixels_are_written_only_when_asked(tmp_path):
    plain = emit_repro(_s1(), tmp_path / "plain")
    assert not list((tmp_path / "plain").rglob("*.png"))
    with_pixels = emit_repro(_s1(), tmp_path / "pixels", pixels=True)
    pngs = sorted((tmp_path / "pixels").rglob("*.png"))
    assert len(pngs) == 3
    case = _case(with_pixels)
    for spec, png in zip(case.batches[0], pngs):
        assert spec.feature.png == png.relative_to(tmp_path / "pixels").as_posix()
        with Image.open(png) as image:
            assert (image.height, image.width) == spec.feature.shape[:2] and image.mode == spec.feature.mode
    assert _case(plain).digest() == case.digest()
    # Emitting the same repro again without pixels takes its images away.
    emit_repro(_s1(), tmp_path / "pixels", name=with_pixels.stem.removeprefix("test_kimi_k3_repro_"))
    assert not list((tmp_path / "pixels").rglob("*.png"))


def test_the_minimal_failing_set_is_what_gets_emitted(tmp_path):
    from kimi_viz import minimize

    images = ["chelsea.png", "microaneurysms.png", "astronaut_tiny_20x5.png", "horse.png"]
    minimal = minimize(images, sglang_version="0.5.18", tp_size=2)
    assert minimal.target is not None and len(minimal.kept) < len(images)
    test_file = emit_repro(minimal, tmp_path)
    case = _case(test_file)
    assert len(case.batches[0]) == len(minimal.kept)
    assert case.source["kind"] == "minimized" and case.source["kept"] == list(minimal.kept)
    assert case.release == "0.5.18" and case.tp_size == 2
    failing = [e for e in case.expected["0.5.18"].values() if e.fails]
    assert failing and failing[0].error == minimal.target
    doc = " ".join(ast.get_docstring(ast.parse(test_file.read_text(encoding="utf-8"))).split())
    assert "minimal failing set of a 4-image request" in doc
    with pytest.raises(ArgumentError, match="the what-if ran SGLang 0.5.18"):
        emit_repro(minimal, tmp_path, sglang_version="0.5.23")


def test_a_whatif_is_emitted_with_its_release_and_tp(tmp_path):
    from kimi_viz import whatif

    result = whatif(["chelsea.png", "microaneurysms.png"], sglang_version="0.5.23", tp_size=2, under_load=False)
    case = _case(emit_repro(result, tmp_path))
    assert case.source["kind"] == "whatif" and case.release == "0.5.23" and case.tp_size == 2
    assert case.source["images"] == ["chelsea.png", "microaneurysms.png"]


def test_the_output_folder_is_refused_when_it_is_not_the_kits(tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="is not empty and was not made by kimi-viz --emit-repro"):
        emit_repro(_s1(), busy)
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    link = tmp_path / "link"
    os.symlink(tmp_path / "real", link, target_is_directory=True)
    with pytest.raises(OutputError, match="symbolic link"):
        emit_repro(_s1(), link)
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(OutputError, match="expected a folder"):
        emit_repro(_s1(), afile)
    # A folder it made takes more repros, and the same one again.
    made = tmp_path / "made"
    first = emit_repro(_s1("s1-cpu"), made)
    second = emit_repro(_s1("s1-gpu"), made)
    again = emit_repro(_s1("s1-cpu"), made)
    assert first == again and first != second
    assert (made / MARKER).is_file()


def test_a_link_planted_where_the_data_file_goes_is_replaced_not_followed(tmp_path):
    made = tmp_path / "made"
    test_file = emit_repro(_s1(), made)
    target = tmp_path / "victim.txt"
    target.write_text("keep")
    data = test_file.with_suffix(".json")
    data.unlink()
    os.symlink(target, data)
    emit_repro(_s1(), made)
    assert target.read_text() == "keep" and not data.is_symlink()


def test_bad_sources_are_refused_with_one_line(tmp_path):
    with pytest.raises(ArgumentError, match="expected a kimi_viz Batch, Answer or Minimized"):
        emit_repro("manifest.json", tmp_path)  # type: ignore[arg-type]
    batch = SCENARIOS["s1-cpu"].build()
    del batch.items[0].deferred["backend"]
    with pytest.raises(ConfigError, match=r"items\[0\]\.deferred: no 'backend'") as info:
        emit_repro(batch, tmp_path)
    assert "\n" not in str(info.value)
    with pytest.raises(ArgumentError, match="tp_size"):
        emit_repro(_s1(), tmp_path, tp_size=0)
    with pytest.raises(ArgumentError, match="manifest: cannot read"):
        emit_repro(_s1(), tmp_path, manifest=tmp_path / "missing")


def test_the_template_is_package_data():
    text = template_text()
    assert text.startswith('"""__DOCSTRING__"""')
    for marker in ("__DOCSTRING__", "__EST_TIME__", "__DATA_FILE__", "__TEST_NAME__"):
        assert marker in text


def test_the_emitted_file_is_lint_clean_at_sglangs_line_length(tmp_path):
    pytest.importorskip("ruff")
    for name in ("s1-cpu", "s6-list", "healthy-tp4"):
        emit_repro(SCENARIOS[name].build(), tmp_path)
    ruff = [sys.executable, "-m", "ruff"]
    checked = subprocess.run(
        [*ruff, "check", "--no-cache", "--isolated", "--select", "E,F,W,B", "--line-length", "88", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout
    formatted = subprocess.run(
        [*ruff, "format", "--check", "--no-cache", "--isolated", "--line-length", "88", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert formatted.returncode == 0, formatted.stdout


def test_whatif_emit_repro_writes_the_minimal_failing_request(tmp_path, capsys):
    from kimi_viz.cli import main

    out = tmp_path / "repro"
    argv = ["whatif", "rocket.jpg", "astronaut.png", "chelsea.png", "--sglang-version", "0.5.18", "--tp", "2"]
    assert main([*argv, "--minimize", "--emit-repro", str(out)]) == 1
    (test_file,) = out.glob("test_kimi_k3_repro_*.py")
    assert "kimi_viz" not in test_file.read_text().split('"""', 2)[2]  # the code imports no kit
    assert f"wrote the repro {test_file}" in capsys.readouterr().err
    assert main([*argv, "--together", "--emit-repro", str(tmp_path / "other")]) == 2
    assert "--emit-repro writes one request's get_image_feature call" in capsys.readouterr().err
