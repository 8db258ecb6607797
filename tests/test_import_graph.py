"""The package's import graph: no cycles anywhere, and every sub-package points only downward.

Every ``import`` and ``from ... import`` in ``kimi_viz`` counts — module level and inside
functions alike (a deferred import is still a dependency) — except those under
``if TYPE_CHECKING:``. The layers below are the pipeline a newcomer reads: a module may import
its own layer's lower modules and anything in a lower layer, never a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kimi_viz"

# Ground first. A name is a top-level module or sub-package of kimi_viz.
LAYERS = [
    {"_lazy", "errors", "messages", "message_catalogue", "releases", "devices", "data", "files", "terminal"},
    {"preprocess"},
    {"encoder", "split"},
    {"request"},
    {"schedule"},
    {"scenarios", "manifest", "plots"},
    {"capture", "report"},
    {"_explain", "_triage", "_whatif", "_demo", "repro"},
    {"cli", "__main__", "__init__"},
]
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Return the kimi_viz modules ``path`` imports (resolved, outside TYPE_CHECKING blocks)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("kimi_viz"):
                    found.add(_known(alias.name, modules))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("kimi_viz"):
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in modules else _known(target, modules))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def _known(name: str, modules: set[str]) -> str:
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def _graph() -> dict[str, set[str]]:
    files = [p for p in PACKAGE.rglob("*.py") if "_shim" not in p.parts]
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_cycles():
    graph = _graph()
    # A module importing its own package's __init__ is how Python loads it anyway: not a cycle of the design.
    pruned = {m: {t for t in targets if t not in _parents(m)} for m, targets in graph.items()}
    assert _cycles(pruned) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    if part not in LAYER_OF:
        pytest.fail(f"{module}: the sub-package or module {part!r} has no layer in tests/test_import_graph.py")
    return LAYER_OF[part]


def test_every_import_points_down_or_sideways_within_a_layer():
    upward = []
    for module, targets in _graph().items():
        if module == "kimi_viz":
            continue
        for target in targets:
            if target == "kimi_viz":
                continue
            if _layer(target) > _layer(module):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_no_module_is_over_about_600_lines_but_the_encoder_model():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 620 and p.name != "model.py"
    }
    assert long == {}


def test_every_kit_module_the_ci_scripts_name_exists():
    """The CI and GPU scripts import kit modules by name (the parity venvs' import check); a module
    renamed in the package must be renamed there too, or the lane fails before it starts."""
    import importlib
    import re

    root = Path(__file__).resolve().parent.parent
    scripts = [
        root / ".ci" / "sglang-envs.sh",
        root / ".ci" / "wheel-check.sh",
        root / "benchmarks" / "run_gpu_checks.sh",
    ]
    named = set()
    for script in scripts:
        named |= set(re.findall(r"\b(kimi_viz(?:\.[a-z_0-9]+)+)\b", script.read_text()))
    assert named, "the scripts name no kit module: the pattern is wrong"
    missing = []
    for name in sorted(named):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            parent, _, attr = name.rpartition(".")
            if not (parent and hasattr(importlib.import_module(parent), attr)):
                missing.append(name)
    assert not missing, missing
