"""``kimi-viz explain``: recognise Kimi-K3 vision errors in a log line, a traceback or a whole log."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys

from .._explain import KNOWN_MESSAGES, MAX_LOG_BYTES, explain, explain_stream, format_explanations
from ..errors import KimiVizError
from ..files import file_kind
from ..terminal import escape_value
from . import emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``explain`` sub-command."""
    parser = subparsers.add_parser(
        "explain",
        help="say what a Kimi-K3 vision error in a log means and how to reproduce it",
        description="Find every message SGLang 0.5.17-0.5.23 raises or logs on the Kimi vision path in the text "
        "(arguments, --file, or standard input), by its text whatever the release: its stage (request, "
        "processor, call, split, encoder, splice, EPD transfer), where SGLang emits it and in which releases, "
        "what it means, the numbers it carries, what SGLang did next (a logged warning: the request went on), "
        "the scenario classes and catalogue scenarios behind it, and what to run next. Exit status: 0 "
        "something known was found, 1 nothing known, 2 bad input.",
    )
    parser.add_argument("text", nargs="*", metavar="TEXT", help="log text (quote it); omit to read --file or stdin")
    parser.add_argument("--file", metavar="LOG", help="read the text from this log file")
    parser.add_argument("--list", action="store_true", help="list the messages the kit recognises, by stage")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def _explain_file(name: str) -> list:
    """Return the known messages in the log file ``name``: a regular file of at most MAX_LOG_BYTES, streamed."""
    shown = repr(escape_value(name))
    try:
        info = os.stat(name)
    except (OSError, ValueError):
        raise KimiVizError(f"--file {shown}: no such file; expected a log file to read") from None
    if not stat.S_ISREG(info.st_mode):
        kind = file_kind(info.st_mode, fifo="pipe it into stdin instead: kimi-viz explain < FIFO")
        raise KimiVizError(f"--file {shown}: is {kind}; expected a regular log file")
    if info.st_size > MAX_LOG_BYTES:
        raise KimiVizError(
            f"--file {shown}: is {info.st_size} bytes, over the {MAX_LOG_BYTES >> 20} MiB limit; "
            f"pass its tail instead, e.g. tail -c 100M {shown} | kimi-viz explain"
        )
    try:
        with open(name, "rb") as handle:
            return explain_stream(handle, source=f"--file {shown}")
    except OSError as exc:
        raise KimiVizError(f"--file {shown}: cannot be read ({exc.strerror or exc}); check its permissions") from None


def _find(args: argparse.Namespace) -> list:
    if args.text:
        return explain(" ".join(args.text))
    if args.file:
        return _explain_file(args.file)
    if sys.stdin is None or sys.stdin.isatty():
        raise KimiVizError("no text given; pass the log line as TEXT, use --file LOG, or pipe the log into stdin")
    return explain_stream(getattr(sys.stdin, "buffer", sys.stdin), source="standard input")


def _listed(known) -> dict:
    return {
        "key": known.key,
        "stage": known.stage or "kimi-viz",
        "exception": known.exception,
        "logged": known.logged,
        "template": known.template,
        "pattern": known.pattern,
        "raised_in": known.raised_in,
        "releases": list(known.releases),
        "classes": list(known.classes),
        "scenarios": list(known.scenarios),
    }


def _print_list(rows: list[dict]) -> None:
    """Print the messages grouped by stage, in pipeline order (the kit's own capture line last)."""
    from ..message_catalogue import STAGE_WHAT, release_span
    from ..messages import Stage

    what = {stage.value: f"{stage.number}. {stage.value}: {STAGE_WHAT[stage]}" for stage in Stage}
    table = [
        (
            row["key"],
            row["exception"] + (" (logged)" if row["logged"] else ""),
            release_span(row["releases"]) if row["template"] else "-",
            row["template"] or row["raised_in"],
        )
        for row in rows
    ]
    widths = [max(len(cells[column]) for cells in table) for column in range(3)]
    stages = list(dict.fromkeys(row["stage"] for row in rows))
    for index, stage in enumerate(stages):
        group = [cells for row, cells in zip(rows, table) if row["stage"] == stage]
        if index:
            emit("")
        emit(f"{what.get(stage, stage)} ({len(group)})")
        for cells in group:
            emit("  " + "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)) + "  " + cells[3])


def run(args: argparse.Namespace) -> int:
    """Print what the known messages in the text mean; return 0 when one was found, else 1."""
    if args.list:
        rows = [_listed(known) for known in KNOWN_MESSAGES]
        if args.json:
            emit(json.dumps(rows, indent=2))
        else:
            _print_list(rows)
        return 0
    found = _find(args)
    if args.json:
        emit(json.dumps([item.to_json() for item in found], indent=2))
    else:
        emit(format_explanations(found))
    return 0 if found else 1
