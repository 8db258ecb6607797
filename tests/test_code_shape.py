"""Readable units: no function or method of the package is longer than MAX_FUNCTION_LINES.

A function's length is counted as ``ast`` sees it: from its ``def`` line to its last line, inclusive
(decorators not counted, its docstring and nested functions counted). A longer function is split into
named parts, and a catalogue becomes data: a table of rows walked by a short function.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kimi_viz"
MAX_FUNCTION_LINES = 80


def long_functions(source: str, path: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Return ``path:function:lines`` for each function (nested ones too) in ``source`` over ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None  # set by ast.parse
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append(f"{path}:{node.name}:{lines}")
    return found


def test_no_function_is_longer_than_the_limit():
    root = PACKAGE.parent
    too_long = [
        entry
        for path in sorted(PACKAGE.rglob("*.py"))
        for entry in long_functions(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix())
    ]
    assert too_long == [], f"split these into named parts (at most {MAX_FUNCTION_LINES} lines each):\n" + "\n".join(
        too_long
    )


def _function(name: str, lines: int, indent: str = "") -> str:
    """Return the source of a function exactly ``lines`` long, its def and return lines included."""
    body = "".join(f"{indent}    x{k} = {k}\n" for k in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_the_checker_catches_a_planted_long_function():
    source = _function("fits", MAX_FUNCTION_LINES) + "\n\nclass Holder:\n" + _function("planted", 81, "    ")
    assert long_functions(source, "kimi_viz/planted.py") == ["kimi_viz/planted.py:planted:81"]
