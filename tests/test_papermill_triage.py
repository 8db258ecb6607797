"""papermill runs notebooks/04_triage.ipynb with a parameter set, the way an on-call engineer does.

Each case writes a scenario's manifest to ``tmp_path``, executes the notebook there (its working
directory is ``tmp_path``, not the repository) with ``manifest``, ``code_path``, ``tp``, ``device`` and
``out_dir`` injected, and checks the report files and the verdict the executed notebook shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import papermill
import pytest

from kimi_viz.manifest import write_manifest
from kimi_viz.releases import PathSource
from kimi_viz.scenarios import get_scenario

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_triage.ipynb"
LENGTH_MESSAGE = "Kimi-K3 deferred feature length does not match image grids"


def execute(tmp_path: Path, **parameters) -> tuple[nbformat.NotebookNode, str]:
    """Run the notebook with ``parameters``; return it and the text of all its outputs."""
    executed = tmp_path / "executed.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOK),
        str(executed),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
        execution_timeout=240,
    )
    notebook = nbformat.read(executed, as_version=4)
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                texts.append(output["text"])
            elif "text/plain" in output.get("data", {}):
                texts.append(output["data"]["text/plain"])
    return notebook, "\n".join(texts)


def markdown_outputs(notebook) -> list[str]:
    """Return the ``text/markdown`` outputs of the executed notebook, in order."""
    return [
        output["data"]["text/markdown"]
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if "text/markdown" in output.get("data", {})
    ]


def injected_parameters(notebook) -> str:
    """Return the source of the cell papermill inserted after the ``parameters`` cell."""
    cells = [c for c in notebook.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "papermill did not find the notebook's parameters cell"
    return cells[0].source


def test_triage_notebook_reproduces_a_stale_grid_error_from_a_manifest(tmp_path):
    manifest = write_manifest(get_scenario("s2-cpu").build(), tmp_path / "captured")
    out_dir = tmp_path / "report"
    notebook, text = execute(
        tmp_path, manifest=str(manifest), code_path="post-fix", tp=None, device="cpu", out_dir=str(out_dir)
    )

    assert f"manifest = {json.dumps(str(manifest))}" in injected_parameters(notebook)
    report = out_dir / "report.html"
    assert report.is_file() and report.stat().st_size > 10_000
    assert (out_dir / "summary.png").read_bytes().startswith(b"\x89PNG")
    assert str(report) in text

    assert f"outcome: error — ValueError: {LENGTH_MESSAGE}" in text
    assert f"rank 0: images [0, 1] -> ValueError: {LENGTH_MESSAGE}" in text
    assert "scenario class: S2" in text
    assert (
        "first diverging image: image 1 (chelsea.png; 451×300 RGB, cpu backend) on rank 0: expected 884 rows, "
        "produced 748"
    ) in text
    assert text.index("✗ ERROR REPRODUCED") < text.index("report.html")  # the verdict before the slow work
    assert "counts: expected 1332, produced 1196" in text
    trace = json.loads((out_dir / "trace.json").read_text())
    assert trace["error"] == {"type": "ValueError", "message": LENGTH_MESSAGE}
    assert not (tmp_path / "build").exists(), "the notebook wrote outside out_dir"

    # It ends with the issue it would attach, rendered, and the command that writes the SGLang repro.
    (issue,) = markdown_outputs(notebook)
    assert issue == (out_dir / "issue.md").read_text(encoding="utf-8")
    assert "**rank 0 fails**" in issue
    assert "| image | file | size |" in issue and "Drag `summary.png`" in issue
    last = notebook.cells[-1]["outputs"][0]["text"]
    assert f"kimi-viz triage {manifest} --code-path post-fix --device cpu --emit-repro {out_dir}/repro" in last
    (repro,) = (out_dir / "repro").glob("test_kimi_k3_repro_*.py")
    assert f"wrote {repro}; run it where SGLang is installed: python -m pytest {out_dir / 'repro'}" in last


def test_triage_notebook_parameters_change_the_replay(tmp_path):
    # S1 needs attention-TP >= 2: the same pre-fix code at TP 1 replays cleanly.
    manifest = write_manifest(get_scenario("s1-cpu").build(), tmp_path / "captured")
    out_dir = tmp_path / "report-tp1"
    notebook, text = execute(
        tmp_path, manifest=str(manifest), code_path="pre-fix", tp=1, device="cpu", out_dir=str(out_dir)
    )

    assert "tp = 1" in injected_parameters(notebook)
    assert "outcome: ok (SGLang raises nothing in get_image_feature)" in text
    assert "rank 0: images [0, 1, 2] -> ok" in text
    assert LENGTH_MESSAGE not in text
    assert json.loads((out_dir / "trace.json").read_text())["outcome"] == "ok"
    assert (out_dir / "report.html").is_file()


def test_triage_notebook_defaults_follow_the_recorded_release(tmp_path):
    """A capture from SGLang 0.5.18 is replayed on 0.5.18's pre-fix path with the default parameters."""
    batch = get_scenario("s1-cpu").build()
    batch.sglang_version, batch.code_path, batch.code_path_source = "0.5.18", "post-fix", PathSource.ASSUMED
    manifest = write_manifest(batch, tmp_path / "captured")
    notebook, text = execute(tmp_path, manifest=str(manifest), device="cpu", out_dir=str(tmp_path / "out"))

    assert "code_path = None" in notebook.cells[1].source and "sglang_version = None" in notebook.cells[1].source
    assert "replayed: SGLang 0.5.18 (pre-fix path)" in text
    assert (
        'fixed in 0.5.19: SGLang PR #35305 (Fix "wrong grids" crash in DP-sharded vision preprocessing; '
        "models/kimi_k3.py materialize_item_features)"
    ) in text
    assert f"rank 1: images [1, 2] -> ValueError: {LENGTH_MESSAGE}" in text


def test_a_capture_the_replay_does_not_reproduce_is_impossible_to_miss(tmp_path):
    """An S1 capture that raised on 0.5.18, replayed as 0.5.23: the amber status leads the verdict."""
    from kimi_viz.split.batch import RecordedOutcome
    from kimi_viz.split.cause import ErrorInfo

    batch = get_scenario("s1-cpu").build()
    batch.sglang_version = "0.5.18"
    batch.recorded = RecordedOutcome("error", ErrorInfo("ValueError", LENGTH_MESSAGE))
    manifest = write_manifest(batch, tmp_path / "captured")
    _, text = execute(
        tmp_path, manifest=str(manifest), sglang_version="0.5.23", device="cpu", out_dir=str(tmp_path / "out")
    )
    assert f"? NOT REPRODUCED — the capture recorded ValueError: {LENGTH_MESSAGE}; this replay raises nothing" in text
    assert "status: not-reproduced (exit 4)" in text
    assert json.loads((tmp_path / "out" / "trace.json").read_text())["status"] == "not-reproduced"


@pytest.mark.parametrize("bad_code_path", ["post_fix"])
def test_triage_notebook_fails_loudly_on_a_bad_parameter(tmp_path, bad_code_path):
    manifest = write_manifest(get_scenario("s2-cpu").build(), tmp_path / "captured")
    with pytest.raises(papermill.PapermillExecutionError, match="code_path"):
        execute(
            tmp_path,
            manifest=str(manifest),
            code_path=bad_code_path,
            tp=None,
            device="cpu",
            out_dir=str(tmp_path / "out"),
        )
