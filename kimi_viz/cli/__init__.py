"""The ``kimi-viz`` command: one sub-command per module in this package.

Each sub-command module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the handler. The kit's own errors become a one-line message and exit 2;
so do argument errors (:class:`OneLineParser`). Everything printed goes through
:mod:`kimi_viz.terminal` (:func:`emit`), so no label, file name or log line can drive the terminal,
and stdout/stderr never fail on characters their encoding lacks. Warnings are one line each.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import warnings
from typing import Any, NoReturn

from .. import __version__
from ..errors import KimiVizError
from ..terminal import escape_value, safe_text, setup_streams

SUBCOMMANDS = ("inspect", "encode", "scenario", "triage", "whatif", "capture", "explain", "demo")
COMMAND_DEST = "kimi_viz_command"  # not "command": a sub-command may have an argument of that name


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``kimi-viz CMD: error: ...``, and exit 2."""

    def error(self, message: str) -> NoReturn:
        hint = f"see `{self.prog} --help`"
        self.exit(2, f"{escape_value(self.prog)}: error: {escape_value(message)}; {hint}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Return the top-level argument parser with every sub-command registered, or the sub-command ``only``.

    A command line that starts with a sub-command's name parses the same with that sub-command alone
    (:func:`main` builds it so, and imports no other sub-command's module); ``--help`` lists them all.
    """
    parser = OneLineParser(
        prog="kimi-viz",
        description="Investigate how SGLang turns images into Kimi-K3 vision features.",
    )
    parser.add_argument("--version", action="version", version=f"kimi-viz {__version__}")
    subparsers = parser.add_subparsers(dest=COMMAND_DEST, metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        importlib.import_module(f"{__name__}.{name}_cmd").register(subparsers)
    return parser


def emit(text: Any = "", *, err: bool = False) -> None:
    """Print ``text`` with control characters escaped (its own newlines kept), to stdout or stderr."""
    print(safe_text(text), file=sys.stderr if err else sys.stdout)


def _one_line_warnings(command: str):
    def show(message, category, filename, lineno, file=None, line=None):
        try:
            print(f"kimi-viz {command}: warning: {escape_value(message)}", file=sys.stderr)
        except (OSError, ValueError):
            pass

    return show


def again(argv: list[str]) -> str:
    """Return the command that asks the same question again: as typed, without the options that write files."""
    kept, skip = [], False
    for index, arg in enumerate(argv):
        if arg == "--":  # every word after it is an operand (an image named like an option): kept as typed
            kept += argv[index:]
            break
        if skip:
            skip = False
        elif arg in ("--out", "--emit-repro"):
            skip = True
        elif arg != "--json" and not arg.startswith(("--out=", "--emit-repro=")):
            kept.append(arg)
    return "kimi-viz " + " ".join(shlex.quote(a) for a in kept)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (0 ok, 1 reproduced error, 2 bad input, 3-5 triage verdicts)."""
    setup_streams()
    typed = list(sys.argv[1:] if argv is None else argv)  # as typed: a command a report says to run again
    parser = build_parser(typed[0] if typed and typed[0] in SUBCOMMANDS else None)
    args = parser.parse_args(typed)
    args.command_line = typed  # the words as typed, for a report to say how to ask again
    command = getattr(args, COMMAND_DEST, None) or "?"
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    saved = warnings.showwarning
    warnings.showwarning = _one_line_warnings(command)
    try:
        return int(args.func(args) or 0)
    except KimiVizError as exc:
        print(f"kimi-viz {command}: error: {escape_value(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`kimi-viz explain --json LOG | head`): stop quietly, as a shell tool does,
        # and point stdout at /dev/null so the interpreter's final flush does not raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe
    finally:
        warnings.showwarning = saved


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
