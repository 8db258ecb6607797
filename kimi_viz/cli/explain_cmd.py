"""``kimi-viz explain``: recognise Kimi-K3 vision errors in a log line, a traceback or a whole log."""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, TextIO

from ..errors import KimiVizError
from ..files import file_kind
from ..message_catalogue import STAGE_WHAT
from ..message_catalogue.messages import Stage
from ..releases import RELEASE_RANGE, release_span
from ..server_args.command import command_start
from ..server_args.log import LogReader, read_server_log
from ..terminal import escape_value
from . import emit
from .server_input import add_server_input, model_from_args

if TYPE_CHECKING:
    from .._explain import LiveEvent, LiveExplainer

STDIN = "-"
POLL_S = 0.2  # how often a followed file is checked for new lines, rotation and truncation


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``explain`` sub-command."""
    parser = subparsers.add_parser(
        "explain",
        help="say what a Kimi-K3 vision error in a log means and how to reproduce it",
        description=f"Find every message SGLang {RELEASE_RANGE} raises or logs on the Kimi vision path in the text "
        "(arguments, --file, or standard input), by its text whatever the release: its stage (request, "
        "processor, call, split, encoder, splice, EPD transfer), where SGLang emits it and in which releases, "
        "what it means, the numbers it carries, what SGLang did next (a logged warning: the request went on), "
        "the scenario classes and catalogue scenarios behind it, and what to run next. With --follow, each "
        "message is explained as its line arrives (one answer per incident, repeats folded with a count, a "
        "traceback joined to its final line) until the input ends or Ctrl-C, then a summary. Exit status: 0 "
        "something known was found, 1 nothing known, 2 bad input.",
    )
    parser.add_argument("text", nargs="*", metavar="TEXT", help="log text (quote it); omit to read --file or stdin")
    parser.add_argument("--file", metavar="LOG", help="read the text from this log file")
    parser.add_argument(
        "--follow",
        nargs="?",
        const=STDIN,
        metavar="LOG",
        help="explain a live log as it grows: standard input (no LOG) or the file LOG, followed through rotation "
        "and truncation like tail -F; Ctrl-C ends it with a summary of the incidents",
    )
    parser.add_argument("--list", action="store_true", help="list the messages the kit recognises, by stage")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_server_input(parser)
    parser.set_defaults(func=run)


def _log_status(name: str, option: str, purpose: str, pipe: str) -> os.stat_result:
    """Return the status of the log file ``name``; KimiVizError when it is missing or no regular file."""
    shown = repr(escape_value(name))
    try:
        info = os.stat(name)
    except (OSError, ValueError):
        raise KimiVizError(f"{option} {shown}: no such file; expected a log file {purpose}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = file_kind(info.st_mode, fifo=f"pipe it into stdin instead: {pipe}")
        raise KimiVizError(f"{option} {shown}: is {kind}; expected a regular log file")
    return info


def _explain_file(name: str, server: LogReader | None = None, replay_with: str | None = None) -> list:
    """Return the known messages in the log file ``name``: a regular file of at most MAX_LOG_BYTES, streamed, each
    with the server its start-up lines (or ``server``'s) describe."""
    from .._explain import MAX_LOG_BYTES, explain_stream

    shown = repr(escape_value(name))
    info = _log_status(name, "--file", "to read", "kimi-viz explain < FIFO")
    if info.st_size > MAX_LOG_BYTES:
        raise KimiVizError(
            f"--file {shown}: is {info.st_size} bytes, over the {MAX_LOG_BYTES >> 20} MiB limit; "
            f"pass its tail instead, e.g. tail -c 100M {shown} | kimi-viz explain"
        )
    try:
        with open(name, "rb") as handle:
            return explain_stream(handle, source=f"--file {shown}", server=server, replay_with=replay_with)
    except OSError as exc:
        raise KimiVizError(f"--file {shown}: cannot be read ({exc.strerror or exc}); check its permissions") from None


def _open_log(name: str) -> tuple[io.FileIO, os.stat_result]:
    """Return the log file ``name`` opened for reading, with its status; a bad path raises KimiVizError."""
    shown = repr(escape_value(name))
    _log_status(name, "--follow", "to follow", "kimi-viz explain --follow < FIFO")
    try:
        handle = open(name, "rb", buffering=0)  # noqa: SIM115 - kept open while the file is followed
    except OSError as exc:
        raise KimiVizError(f"--follow {shown}: cannot be read ({exc.strerror or exc}); check its permissions") from None
    return handle, os.fstat(handle.fileno())


def _follow_file(name: str, live: LiveExplainer, show: Callable[[list[LiveEvent]], None], shown: str) -> None:
    """Explain the file ``name`` from its start and as it grows, through rotation and truncation (tail -F)."""
    from .._explain import MAX_LINE

    handle, info = _open_log(name)
    emit(f"kimi-viz explain: following {shown}; Ctrl-C ends it with a summary", err=True)
    try:
        while True:
            block = handle.read(MAX_LINE)
            if block:
                show(live.feed(block))
                continue
            try:
                now = os.stat(name)
            except OSError:
                now = None  # renamed away and not made again yet: keep the old file
            if now is not None and (now.st_ino, now.st_dev) != (info.st_ino, info.st_dev):
                try:
                    fresh = open(name, "rb", buffering=0)  # noqa: SIM115 - kept open while followed
                except OSError:  # made again but not readable yet: try again after a pause
                    time.sleep(POLL_S)
                    continue
                show(live.restart())  # the old file is read to its end: take the new one from its start
                handle.close()
                handle, info = fresh, os.fstat(fresh.fileno())
                emit(f"kimi-viz explain: {shown} was replaced; following the new file", err=True)
                continue
            if os.fstat(handle.fileno()).st_size < handle.tell():
                show(live.restart())
                handle.seek(0)
                emit(f"kimi-viz explain: {shown} was truncated; reading it from its start", err=True)
                continue
            time.sleep(POLL_S)
    finally:
        handle.close()


def _follow_stream(stream: BinaryIO | TextIO, live: LiveExplainer, show: Callable[[list[LiveEvent]], None]) -> None:
    """Explain a stream (standard input) as its lines arrive, to its end."""
    from .._explain import MAX_LINE

    read = getattr(stream, "read1", None) or stream.read
    while block := read(MAX_LINE):
        if isinstance(block, str):  # a text stream (e.g. a replaced sys.stdin)
            block = block.encode("utf-8", "surrogateescape")
        show(live.feed(block))
    show(live.close())


def _follow(args: argparse.Namespace) -> int:
    """Explain a live log until it ends or Ctrl-C, then print the summary; return 0 when something was found."""
    from .._explain import LiveExplainer, replay_option

    if args.text or args.file:
        raise KimiVizError("--follow reads a live log; pass the file as --follow LOG, without TEXT or --file")
    server, replay_with = _server(args)
    if replay_with is None and args.follow != STDIN:
        replay_with = replay_option("--server-log", args.follow)
    live = LiveExplainer(replay_with, server)

    def show(events: list[LiveEvent]) -> None:
        for event in events:
            emit(json.dumps(event.to_json()) if args.json else event.text() + ("" if event.repeat else "\n"))
        if events:
            sys.stdout.flush()

    what = "standard input" if args.follow == STDIN else repr(escape_value(args.follow))
    try:
        if args.follow == STDIN:
            if sys.stdin is None or sys.stdin.isatty():
                raise KimiVizError("--follow: nothing piped into stdin; pipe the log in or name it: --follow LOG")
            emit(f"kimi-viz explain: following {what}; Ctrl-C ends it with a summary", err=True)
            _follow_stream(getattr(sys.stdin, "buffer", None) or sys.stdin, live, show)
        else:
            _follow_file(args.follow, live, show, what)
    except KeyboardInterrupt:
        show(live.close())
    emit(json.dumps(live.summary_json()) if args.json else live.summary())
    sys.stdout.flush()
    return 0 if live.found else 1


def _server(args: argparse.Namespace) -> tuple[LogReader | None, str | None]:
    """Return a log reader holding the server --server-log or --server describes (None: neither given), and the
    whatif option that names that server."""
    from .._explain import replay_option

    if args.server_log is not None and args.server is not None:
        raise KimiVizError("--server-log with --server: give the one that describes the server (the log wins)")
    if args.server_log is not None:
        reader = LogReader(args.server_log)
        reader.start = read_server_log(args.server_log).start
        return reader, replay_option("--server-log", args.server_log)
    if args.server is not None:
        reader = LogReader("--server")
        reader.start = command_start(args.server)
        return reader, replay_option("--server", args.server)
    return None, None


def _find(args: argparse.Namespace) -> list:
    from .._explain import explain, explain_stream, replay_option

    server, replay_with = _server(args)
    if args.text:
        return explain(" ".join(args.text), server=server, replay_with=replay_with)
    if args.file:
        return _explain_file(args.file, server, replay_with or replay_option("--server-log", args.file))
    if sys.stdin is None or sys.stdin.isatty():
        raise KimiVizError("no text given; pass the log line as TEXT, use --file LOG, or pipe the log into stdin")
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    return explain_stream(stream, source="standard input", server=server, replay_with=replay_with)


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
    from .._explain import KNOWN_MESSAGES, format_explanations

    if args.list:
        rows = [_listed(known) for known in KNOWN_MESSAGES]
        if args.json:
            emit(json.dumps(rows, indent=2))
        else:
            _print_list(rows)
        return 0
    model = model_from_args(args)
    if args.follow is not None:
        return _follow(args)
    found = _find(args)
    note = None if model is None else f"{model.architecture} ({model.asked}): {model.facts.note}"
    if args.json:
        emit(json.dumps([{**item.to_json(), "model": note} for item in found], indent=2))
    else:
        emit(("" if note is None else f"model: {note}\n\n") + format_explanations(found))
    return 0 if found else 1
