"""The notebooks' .py (jupytext percent, the reviewed source) and .ipynb must say the same thing.

Also checks what every notebook promises its reader: outputs stripped from the committed .ipynb,
a first code cell tagged ``parameters`` with ``device = "auto"``, only ``kimi_viz`` imported, and no
helper functions or classes defined in cells.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXPECTED = (
    "01_image_to_patches",
    "02_encoder_rows",
    "03_deferred_split",
    "04_triage",
    "05_whatif",
    "06_under_load",
)


def cell_summary(notebook) -> list[tuple[str, str, list[str]]]:
    """Return ``(cell type, source without trailing blanks, tags)`` for every cell."""
    return [
        (cell.cell_type, cell.source.rstrip(), sorted(cell.get("metadata", {}).get("tags", [])))
        for cell in notebook.cells
    ]


def python_lines(source: str) -> str:
    """Return a code cell's source with IPython magics (``%...``, ``!...``) removed."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def read_pair(stem: str):
    """Return ``(notebook from the .py, notebook from the .ipynb)``."""
    from_py = jupytext.read(NOTEBOOKS / f"{stem}.py")
    from_ipynb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    return from_py, from_ipynb


def test_every_notebook_is_a_pair_and_nothing_else_is_there():
    ipynbs = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    pys = sorted(p.stem for p in NOTEBOOKS.glob("*.py"))
    assert ipynbs == list(EXPECTED), f"notebooks/*.ipynb: {ipynbs}"
    assert pys == list(EXPECTED), f"notebooks/*.py: {pys} (each .ipynb needs its jupytext .py and vice versa)"


def test_pairing_is_configured_for_jupytext():
    config = (NOTEBOOKS / "jupytext.toml").read_text(encoding="utf-8")
    assert 'formats = "ipynb,py:percent"' in config
    for stem in EXPECTED:
        assert (NOTEBOOKS / f"{stem}.py").read_text(encoding="utf-8").startswith("# ---\n# jupyter:\n"), stem


@pytest.mark.parametrize("stem", EXPECTED)
def test_py_and_ipynb_have_the_same_cells(stem):
    from_py, from_ipynb = read_pair(stem)
    py_cells, ipynb_cells = cell_summary(from_py), cell_summary(from_ipynb)
    for position, (a, b) in enumerate(zip(py_cells, ipynb_cells)):
        assert a == b, (
            f"{stem}: cell {position} differs between .py and .ipynb; "
            f"run `jupytext --sync notebooks/{stem}.py` and strip outputs\n.py:    {a}\n.ipynb: {b}"
        )
    assert len(py_cells) == len(ipynb_cells), f"{stem}: {len(py_cells)} cells in .py, {len(ipynb_cells)} in .ipynb"


@pytest.mark.parametrize("stem", EXPECTED)
def test_ipynb_is_committed_without_outputs(stem):
    _, notebook = read_pair(stem)
    for position, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{stem}: cell {position} has outputs; strip them (nbstripout)"
            assert cell.execution_count is None, f"{stem}: cell {position} has an execution count"
    assert notebook.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("stem", EXPECTED)
def test_first_code_cell_is_the_papermill_parameters(stem):
    notebook, _ = read_pair(stem)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    first = code_cells[0]
    assert first.metadata.get("tags") == ["parameters"], f"{stem}: first code cell is not tagged parameters"
    assigned = {
        target.id: ast.literal_eval(node.value)
        for node in ast.parse(first.source).body
        if isinstance(node, ast.Assign)
        for target in node.targets
    }
    assert assigned.get("device") == "auto", f"{stem}: parameters must set device = 'auto'"
    for cell in code_cells[1:]:
        assert "parameters" not in cell.metadata.get("tags", []), f"{stem}: only one parameters cell"


def test_triage_notebook_parameters():
    notebook, _ = read_pair("04_triage")
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assigned = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(first.source).body
        if isinstance(node, ast.Assign)
    }
    # The release and code path follow the capture unless asked: no default may replay another release.
    assert assigned == {
        "manifest": None,
        "sglang_version": None,
        "code_path": None,
        "tp": None,
        "device": "auto",
        "out_dir": "build/triage",
    }


@pytest.mark.parametrize("stem", EXPECTED)
def test_cells_import_kimi_viz_only_and_define_no_helpers(stem):
    notebook, _ = read_pair(stem)
    for position, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(python_lines(cell.source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = []
            for name in names:
                assert name == "kimi_viz" or name.startswith("kimi_viz."), f"{stem}: cell {position} imports {name}"
            assert not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)), (
                f"{stem}: cell {position} defines a helper; put it in kimi_viz instead"
            )


def figure_calls(source: str) -> int:
    """Return how many ``draw_*`` calls a code cell makes."""
    count = 0
    for node in ast.walk(ast.parse(python_lines(source))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            count += name.startswith("draw_")
    return count


@pytest.mark.parametrize("stem", EXPECTED)
def test_each_cell_draws_at_most_one_figure_and_the_story_opens_with_a_question(stem):
    notebook, _ = read_pair(stem)
    for position, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            draws = figure_calls(cell.source)
            assert draws <= 1, f"{stem}: cell {position} draws {draws} figures; one figure per cell"
        else:
            assert cell.source.strip(), f"{stem}: cell {position} is an empty markdown cell"
    assert notebook.cells[0].cell_type == "markdown", f"{stem}: a notebook opens with its question"
    assert "?" in notebook.cells[0].source, f"{stem}: the first markdown cell should ask the question"
