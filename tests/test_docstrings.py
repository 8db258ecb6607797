"""Every package module's docstring names only modules, functions, classes and files that exist.

Each module docstring in ``kimi_viz/`` is read from its source (nothing is imported). Every Sphinx
reference (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``, ``:obj:``)
and every dotted ``kimi_viz.x`` written as code must resolve: a relative one (``.x``) against the
module's package, an absolute one against the package tree, a bare one against the names the module
defines or imports (its lazy exports included), and ``Class.member`` against the class body. Every
``name.py`` path must be a file beside the module, under ``kimi_viz/`` or under the repository root,
unless it is one of SGLang's own files (a path under ``SGLANG_PREFIXES`` or a name in ``SGLANG_FILES``).
Modules in ``PENDING`` are expected to fail until their docstrings are fixed.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kimi_viz"

# SGLang's (and the model repository's) own source files, which docstrings cite by path.
SGLANG_PREFIXES = (
    "sglang/",
    "srt/",
    "managers/",
    "multimodal/",
    "models/",
    "layers/",
    "disaggregation/",
    "entrypoints/",
    "mem_cache/",
    "model_executor/",
)
SGLANG_FILES = {
    "mm_utils.py",
    "server_args.py",
    "media_utils.py",  # the checkpoint's own, in the model repository
    "schedule_policy.py",
    "scheduler.py",
    "kimi_k3_image_processing.py",
    "kimi_k25.py",
    "kimi_k3.py",
}

# Modules whose docstrings are stale and are being rewritten: module -> what was found. Remove an
# entry once its docstring resolves (the xfail is not strict, so a fixed one passes quietly meanwhile).
PENDING: dict[str, str] = {}  # module -> the stale reference it still holds (none today)

ROLE = re.compile(r":(mod|func|class|meth|attr|data|exc|obj):`(?:[^`<]*<)?~?!?([^`>]+)>?`")
LITERAL = re.compile(r"``(kimi_viz(?:\.\w+)+)(?:\(\))?``")  # a dotted name written as code
TOKEN = re.compile(r"[^\s`'\"(),;:\[\]]+")


def module_name(path: Path) -> str:
    """Return the dotted module name of a file under ``kimi_viz/``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(name: str) -> Path | None:
    """Return the source file of package module ``name`` (a module or a package), or None."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def bindings(name: str) -> dict[str, ast.AST | str | None]:
    """Return the names module ``name`` binds at top level: defined, imported, exported lazily or in ``__all__``.

    Each maps to its class, its import's source (``module:name``) or None.
    """
    path = module_file(name)
    assert path is not None, name
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, ast.AST | str | None] = {}
    is_package = path.name == "__init__.py"

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[node.name] = node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = None
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            found.setdefault(leaf.id, None)
                value = node.value
                for leaf in ast.walk(value) if value is not None else ():
                    # lazy exports and __all__: string keys of dicts, strings in lists and tuples
                    if isinstance(leaf, ast.Dict):
                        for key in leaf.keys:
                            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                                found.setdefault(key.value, None)
                    elif isinstance(leaf, (ast.List, ast.Tuple)):
                        for elt in leaf.elts:
                            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                                found.setdefault(elt.value, None)
            elif isinstance(node, ast.ImportFrom):
                package = name if is_package else name.rpartition(".")[0]
                source = absolute(node.module or "", node.level, package)
                for alias in node.names:
                    found[alias.asname or alias.name] = f"{source}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    found[alias.asname or alias.name.split(".")[0]] = None
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return found


def absolute(module: str, level: int, package: str) -> str:
    """Return the absolute name of a ``level``-dots relative ``module`` seen from ``package``."""
    if level == 0:
        return module
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def class_members(node: ast.ClassDef) -> set[str]:
    """Return the names a class body defines: methods, properties, fields and class attributes."""
    names: set[str] = set()
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
            names.add(child.target.id)
        elif isinstance(child, ast.Assign):
            names.update(t.id for t in child.targets if isinstance(t, ast.Name))
    return names


def resolves_in(module: str, parts: list[str], depth: int = 0) -> bool:
    """Return True when ``parts`` (a name, then attributes) names something module ``module`` holds."""
    if not parts:
        return True
    if depth > 10:
        return False
    head, rest = parts[0], parts[1:]
    if module_file(f"{module}.{head}") is not None:
        return resolves_in(f"{module}.{head}", rest, depth + 1)
    bound = bindings(module)
    if head not in bound:
        return False
    target = bound[head]
    if isinstance(target, ast.ClassDef):
        return not rest or rest[0] in class_members(target) or bool(target.bases)
    if isinstance(target, str):
        source, _, original = target.partition(":")
        if not source.startswith("kimi_viz"):
            return True  # a third-party import
        if module_file(source) is None:
            return False
        return resolves_in(source, [original, *rest], depth + 1)
    return True  # a function, a constant or a lazy export: its attributes are not checked


def resolves(reference: str, module: str, is_package: bool) -> bool:
    """Return True when a docstring reference, as written in ``module``, names something that exists."""
    reference = reference.strip().rstrip("()")
    package = module if is_package else module.rpartition(".")[0]
    if reference.startswith("."):
        level = len(reference) - len(reference.lstrip("."))
        reference = absolute(reference.lstrip("."), level, package)
    parts = reference.split(".")
    if parts[0] == "kimi_viz":
        for cut in range(len(parts), 0, -1):
            if module_file(".".join(parts[:cut])) is not None:
                return resolves_in(".".join(parts[:cut]), parts[cut:])
        return False
    if resolves_in(module, parts):
        return True
    return parts[0] not in ("", "kimi_viz") and importlib.util.find_spec(parts[0]) is not None  # third party


def paths_in(doc: str) -> list[str]:
    """Return the ``name.py`` paths a docstring mentions (templated names like ``repro_<slug>.py`` left out)."""
    out = []
    for token in TOKEN.findall(doc):
        token = token.rstrip(".")
        if token.endswith(".py") and not any(c in token for c in "<>{}*") and "://" not in token:
            out.append(token)
    return out


def path_exists(path: str, source: Path) -> bool:
    """Return True when ``path`` is a file beside ``source``, under ``kimi_viz/`` or the repository, or SGLang's."""
    if path.startswith(SGLANG_PREFIXES) or path in SGLANG_FILES:
        return True
    return any((base / path).is_file() for base in (source.parent, PACKAGE, ROOT))


def problems(path: Path) -> list[str]:
    """Return each reference or path in ``path``'s module docstring that resolves to nothing."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
    module = module_name(path)
    is_package = path.name == "__init__.py"
    found = [f":{role}:`{ref}`" for role, ref in ROLE.findall(doc) if not resolves(ref, module, is_package)]
    found += [f"``{ref}``" for ref in LITERAL.findall(doc) if not resolves(ref, module, is_package)]
    found += [f"``{p}``" for p in paths_in(doc) if not path_exists(p, path)]
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=PENDING[module_name(p)], strict=False))
        if module_name(p) in PENDING
        else p
        for p in MODULES
    ],
    ids=lambda p: module_name(p),
)
def test_module_docstring_names_what_exists(path):
    assert problems(path) == []


def test_the_checker_rejects_what_does_not_exist(tmp_path):
    """The resolver tells a real reference from a stale one (so an empty list above means something)."""
    assert resolves(".batch.Batch", "kimi_viz.split.state", False)
    assert resolves("kimi_viz.split.gpu_group.preprocess_gpu", "kimi_viz.split", True)
    assert resolves("RankState.tracks", "kimi_viz.split.state", False)
    assert resolves(".split", "kimi_viz", True)
    assert not resolves(".no_such_module", "kimi_viz.split.state", False)
    assert not resolves("kimi_viz.split.no_such_name", "kimi_viz", True)
    assert not resolves("no_such_function", "kimi_viz.split.state", False)
    assert not resolves("RankState.no_such_method", "kimi_viz.split.state", False)
    source = PACKAGE / "split" / "state.py"
    assert path_exists("gpu_group.py", source) and path_exists("split/batch.py", source)
    assert path_exists("tests/test_docstrings.py", source) and path_exists("managers/mm_utils.py", source)
    assert not path_exists("no_such_file.py", source) and not path_exists("split/no_such_file.py", source)
    assert paths_in("see ``split/batch.py``, repro_<slug>.py and kimi_k3_repro.py.tmpl.") == ["split/batch.py"]
