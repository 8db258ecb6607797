"""Every notebook cell can be run twice in a row: a reader re-running one cell must never get an error.

Each notebook runs in a fresh kernel from a temporary folder (as a reader's would), top to bottom, with
every code cell executed twice before the next one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
STEMS = ["01_image_to_patches", "02_encoder_rows", "03_deferred_split", "04_triage", "05_whatif", "06_under_load"]


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_every_cell_runs_twice_in_a_row(stem, tmp_path):
    shutil.copy(NOTEBOOKS / f"{stem}.ipynb", tmp_path / f"{stem}.ipynb")
    notebook = nbformat.read(tmp_path / f"{stem}.ipynb", as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            for attempt in (1, 2):
                client.execute_cell(cell, index)  # raises CellExecutionError on any error
                errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                assert not errors, f"{stem} cell {index}, run {attempt}: {errors[0]['ename']}: {errors[0]['evalue']}"
