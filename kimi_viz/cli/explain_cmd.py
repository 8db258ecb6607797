"""``kimi-viz explain``: recognise Kimi-K3 vision errors in a log line, a traceback or a whole log."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import KimiVizError
from ..explain import KNOWN_MESSAGES, explain, format_explanations


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``explain`` sub-command."""
    parser = subparsers.add_parser(
        "explain",
        help="say what a Kimi-K3 vision error in a log means and how to reproduce it",
        description="Find every known Kimi-K3 vision error in the text (arguments, --file, or standard input): "
        "where SGLang raises it, the numbers it carries, the scenario classes that cause it, the catalogue "
        "scenarios that reproduce it, and what to do next. Exit status: 0 something known was found, "
        "1 nothing known, 2 bad input.",
    )
    parser.add_argument("text", nargs="*", metavar="TEXT", help="log text (quote it); omit to read --file or stdin")
    parser.add_argument("--file", metavar="LOG", help="read the text from this log file")
    parser.add_argument("--list", action="store_true", help="list the messages the kit recognises")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def _read_text(args: argparse.Namespace) -> str:
    if args.text:
        return " ".join(args.text)
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise KimiVizError(f"--file {args.file}: no such file; expected a log file to read")
        return path.read_text(encoding="utf-8", errors="replace")
    if sys.stdin is None or sys.stdin.isatty():
        raise KimiVizError("no text given; pass the log line as TEXT, use --file LOG, or pipe the log into stdin")
    return sys.stdin.read()


def run(args: argparse.Namespace) -> int:
    """Print what the known messages in the text mean; return 0 when one was found, else 1."""
    if args.list:
        rows = [
            {
                "key": m.key,
                "exception": m.exception,
                "pattern": m.pattern,
                "raised_in": m.raised_in,
                "classes": list(m.classes),
                "scenarios": list(m.scenarios),
            }
            for m in KNOWN_MESSAGES
        ]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for row in rows:
                classes = ",".join(row["classes"]) or "-"
                print(f"{row['key']:<24} {row['exception']:<18} {classes:<12} {row['raised_in']}")
        return 0
    found = explain(_read_text(args))
    if args.json:
        print(json.dumps([item.to_json() for item in found], indent=2))
    else:
        print(format_explanations(found))
    return 0 if found else 1
