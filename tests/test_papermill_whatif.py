"""papermill runs notebooks/05_whatif.ipynb with a deployment's parameters, the way an engineer asks the question.

Each case executes the notebook in ``tmp_path`` with some of ``server_log``, ``server``, ``images``,
``sglang_version``, ``tp``, ``serving``, ``epd_backend``, ``mm_feature_transport``, ``embedding_cache_hits`` and
``device`` injected, then checks the server read, the verdict, the sweep and the minimal set the executed notebook
shows. By default the notebook starts from the kit's sample log (SGLang 0.5.18 at attention-TP 2).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import papermill

from kimi_viz.data import sample_path

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_whatif.ipynb"
LOGS = Path(__file__).resolve().parent / "data" / "server_logs"
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


def test_whatif_notebook_starts_from_the_sample_log_by_default(tmp_path):
    _, text = execute(tmp_path, device="cpu")
    rows = re.sub(r" {2,}", "  ", text)  # table columns: two spaces apart
    # what the log says happened: the error, the server, the pass that raised and the class it fits
    assert (
        "7  Kimi-K3 deferred GPU preprocessing produced wrong grids  SGLang 0.5.18 (the arguments of line 1 fit it), "
        "attention-TP 2 (tp_size 2), page 1, chunk 2048" in rows
    )
    assert "line 4: #new-seq 2, #new-token 875, #cached-token 0  S14: #new-seq 2" in rows
    # which server: release, attention-TP, page and pools, each with its line
    assert "release  0.5.18  SGLang 0.5.18: the arguments of server log line 1 are 0.5.18's" in rows
    assert "attention-TP  2  attention-TP 2 = tp_size 2 (server log line 1)" in rows
    assert "page_size  1  server log line 1" in rows and "max_total_tokens  7000  server log line 3" in rows
    assert "max_mamba_cache_size  96  server log line 2" in rows
    # the whatif on that server, alone and as the two requests of one pass under the log's own flags
    assert "ERROR REPRODUCED" in text and "rank 1: images [1]" in text
    assert "error-reproduced  ValueError: Kimi-K3 deferred GPU preprocessing produced wrong grids  r1, r2" in rows
    assert "--chunked-prefill-size 2048 --page-size 1 --mamba-radix-cache-strategy no_buffer" in rows


def test_whatif_notebook_reads_another_servers_log_and_names_what_it_does_not_model(tmp_path):
    _, text = execute(tmp_path, server_log=str(LOGS / "kimi-k3-0.5.23-dp-attention.log"), device="cpu")
    rows = re.sub(r" {2,}", "  ", text)
    assert "attention-TP  4  attention-TP 4 = tp_size 8 / attention-DP 2 (server log line 1)" in rows
    assert "page_size  64  server log line 1" in rows
    assert "not modelled: --dcp-size  2  server log line 1: context parallelism" in rows
    assert "Kimi-K3 deferred feature length does not match image grids  SGLang 0.5.23" in rows
    assert "CLEAN REPLAY" in text and "all 4 ranks pass" in text
    # under load the two requests share one pass on the log's own scheduler: page 64 and its pools
    assert "clean  —  r1, r2  --chunked-prefill-size 8192 --page-size 64 --max-total-tokens 1185024" in rows


def test_whatif_notebook_takes_a_launch_command_without_a_log(tmp_path):
    command = "python -m sglang.launch_server --model-path /models/Kimi-K3 --tp 4 --mm-feature-transport cuda_ipc"
    _, text = execute(tmp_path, server_log=None, server=command, sglang_version="0.5.23", device="cpu")
    rows = re.sub(r" {2,}", "  ", text)
    assert "no known Kimi-K3 vision error (or no log)" in rows
    assert "attention-TP  4  attention-TP 4 = tp_size 4 (the launch command: --tp)" in rows
    assert "mm_feature_transport  cuda_ipc  the launch command: --mm-feature-transport" in rows
    assert "CLEAN REPLAY" in text and "cuda_ipc transport never defers" in text


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
    rows = re.sub(r" {2,}", "  ", text)  # typed over the sample log
    assert "release  0.5.23  SGLang 0.5.23: --sglang-version (typed)" in rows
    assert "mm_feature_transport  cuda_ipc  transport (typed)" in rows
