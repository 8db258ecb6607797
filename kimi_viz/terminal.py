"""Text that is safe to print: nothing a file name, a label or a log line carries can drive the terminal.

A label such as ``"\\x1b]0;pwned\\x07\\x1b[2J"`` or a file name holding a newline would retitle or clear
the terminal, or forge extra lines, if printed raw. :func:`escape_value` makes one value safe (every
control character, newlines included, becomes a visible escape such as ``\\n`` or ``\\x1b``; bytes that
were not valid UTF-8 in a file name become ``\\xff``); :func:`safe_text` makes a whole output safe while
keeping its own line breaks (and tabs). :func:`setup_streams` makes stdout and stderr encode anything
(``backslashreplace``) so a non-UTF-8 terminal or pipe never raises ``UnicodeEncodeError``.

Nothing here imports anything heavy; the CLI calls it for everything it prints.
"""

from __future__ import annotations

import re
import sys

# C0 and C1 controls, DEL, lone surrogates (undecodable bytes of a file name under surrogateescape),
# and the Unicode line/paragraph separators and bidi overrides that reorder what a terminal shows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_value(value: object) -> str:
    """Return ``str(value)`` with every control character (newlines too) written as a visible escape."""
    return _UNSAFE.sub(_escape, str(value))


def safe_text(text: object) -> str:
    """Return ``str(text)`` safe for a terminal: control characters escaped, its own newlines and tabs kept.

    A carriage return is escaped (it would let a value overwrite the start of its line).
    """
    return _UNSAFE_KEEP_LINES.sub(_escape, str(text))


def one_line(text: object) -> str:
    """Return ``text`` as a single safe line (newlines escaped), e.g. for an error message."""
    return escape_value(text)


def setup_streams() -> None:
    """Make stdout and stderr write anything they are given: unencodable characters become escapes."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):  # a closed or detached stream: nothing to print to anyway
            pass


__all__ = ["escape_value", "one_line", "safe_text", "setup_streams"]
