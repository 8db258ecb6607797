"""The ``server_args=`` start-up line read as literals, never evaluated.

A server prints its arguments once at start-up (``entrypoints/engine.py``): 0.5.17 and 0.5.18 as the
dataclass repr, ``server_args=ServerArgs(model_path='…', tp_size=8, …)``; 0.5.19 and later as the dict
``server_args={'model_path': '…', 'tp_size': 8, …}`` (0.5.22 on with secrets redacted). :func:`read_arguments`
splits the text after ``server_args=`` at its top-level commas, tracking quotes and brackets, and reads each
value with :func:`ast.literal_eval` on that value alone: a value that is no literal (an enum's repr, an
object) is kept as its text and named unreadable, and a line cut short (a log that truncates long lines)
keeps every argument before the cut. Nothing in the text is evaluated, and the work is linear in its length.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from .._records import frozen

Form = Literal["repr", "dict", "command"]  # "command": a launch command's flags, not a printed line
MAX_VALUE = 1 << 20  # one value's text: longer ones are not parsed (kept unreadable)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPEN = {"(": ")", "[": "]", "{": "}"}


@frozen
class Arguments:
    """What one ``server_args=`` line says: each argument's value, and what could not be read."""

    form: Form  # "repr": ServerArgs(...) (0.5.17, 0.5.18); "dict": {...} (0.5.19 and later); "command": --server
    values: dict[str, object]  # SGLang's field name -> the value the server ran with
    unreadable: tuple[str, ...]  # fields whose value is no Python literal (kept out of ``values``)
    cut: bool  # the line ended before its closing bracket: the arguments after the cut are missing


def _pieces(body: str) -> tuple[list[str], bool]:
    """Return the top-level comma-separated pieces of ``body`` (the text inside the outer brackets) and whether
    the text ended inside a quote or a bracket (a cut line)."""
    pieces: list[str] = []
    stack: list[str] = []
    quote = ""
    start = 0
    index = 0
    length = len(body)
    while index < length:
        char = body[index]
        if quote:
            if char == "\\":
                index += 2
                continue
            if body.startswith(quote, index):
                index += len(quote)
                quote = ""
                continue
        elif char in "'\"":
            quote = char * 3 if body.startswith(char * 3, index) else char
            index += len(quote)
            continue
        elif char in _OPEN:
            stack.append(_OPEN[char])
        elif char in ")]}":
            if not stack:  # the closing bracket of the whole: what follows is not an argument
                pieces.append(body[start:index])
                return pieces, False
            if stack[-1] == char:
                stack.pop()
        elif char == "," and not stack:
            pieces.append(body[start:index])
            start = index + 1
        index += 1
    pieces.append(body[start:])
    return pieces, True


def _value(text: str) -> tuple[bool, object]:
    text = text.strip()
    if not text or len(text) > MAX_VALUE:
        return False, None
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def read_arguments(text: str) -> Arguments | None:
    """Return the arguments of the text after ``server_args=`` (``ServerArgs(...)`` or ``{...}``), or None when
    it is neither form."""
    text = text.strip()
    if text.startswith("ServerArgs("):
        form: Form = "repr"
        body = text[len("ServerArgs(") :]
    elif text.startswith("{"):
        form = "dict"
        body = text[1:]
    else:
        return None
    pieces, cut = _pieces(body)
    values: dict[str, object] = {}
    unreadable: list[str] = []
    for number, piece in enumerate(pieces):
        if not piece.strip():
            continue
        if form == "repr":
            key, equals, raw = piece.partition("=")
            key = key.strip()
        else:
            key_text, colon, raw = piece.partition(":")
            ok, key_value = _value(key_text)
            key, equals = (key_value if ok and isinstance(key_value, str) else ""), colon
        if not equals or not _KEY.fullmatch(key):
            continue
        last = number == len(pieces) - 1
        ok, value = _value(raw)
        if ok and not (cut and last):
            values[key] = value
        elif not (cut and last):
            unreadable.append(key)
    return Arguments(form, values, tuple(unreadable), cut)


__all__ = ["Arguments", "Form", "read_arguments"]
