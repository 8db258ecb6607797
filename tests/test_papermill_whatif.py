"""papermill runs notebooks/05_whatif.ipynb with a deployment's parameters, the way an engineer asks the question.

Each case executes the notebook in ``tmp_path`` with ``images``, ``sglang_version``, ``tp``, ``serving``,
``epd_backend``, ``mm_feature_transport``, ``embedding_cache_hits`` and ``device`` injected, then checks
the verdict, the sweep and the minimal set the executed notebook shows.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill

from kimi_viz.data import sample_path

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_whatif.ipynb"
GPU_GRIDS = "Kimi-K3 deferred GPU preprocessing produced wrong grids"


def execute(tmp_path: Path, notebook: Path = NOTEBOOK, **parameters) -> tuple[nbformat.NotebookNode, str]:
    """Run ``notebook`` (05 by default) with ``parameters``; return it and the text of all its outputs."""
    executed = tmp_path / "executed.ipynb"
    papermill.execute_notebook(
        str(notebook),
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


def test_whatif_notebook_answers_for_0518_at_tp2_with_file_paths(tmp_path):
    images = [str(sample_path("chelsea.png")), str(sample_path("microaneurysms.png"))]
    notebook, text = execute(tmp_path, images=images, sglang_version="0.5.18", tp=2, device="cpu")
    injected = [c for c in notebook.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'sglang_version = "0.5.18"' in injected[0].source
    assert "ERROR REPRODUCED" in text and GPU_GRIDS in text and "rank 1: images [1]" in text
    assert "fails on 0.5.18 at TP ≥ 2 (A); clean from 0.5.19" in text
    assert "look at this one" in text and "hubble_deep_field.jpg" in text  # the minimal set
    assert any(o.get("data", {}).get("image/png") for c in notebook.cells for o in c.get("outputs", []))


def test_whatif_notebook_explains_a_clean_eager_deployment(tmp_path):
    _, text = execute(
        tmp_path,
        images=["chelsea.png", "coffee.png"],
        sglang_version="0.5.23",
        tp=4,
        mm_feature_transport="cuda_ipc",
        device="cpu",
    )
    assert "CLEAN REPLAY" in text and "cuda_ipc transport never defers" in text
    assert "no failure to shrink" in text  # 0.5.23 passes the six-photo request too
