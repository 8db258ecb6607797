"""Recognise the messages SGLang raises or logs on the Kimi vision path in a log, and say what each means.

An on-call engineer usually starts from a log line, not a batch. :func:`explain` finds every known
message in a piece of text — each entry of :data:`kimi_viz.message_catalogue.CATALOGUE`, the
messages of 0.5.17–0.5.23 from the chat request to the spliced prompt and the EPD transfer — by its
text, whatever the release that printed it. For each it returns the stage, where SGLang emits it
(file, function, releases), what it means, the numbers it carries read out, what SGLang did next (for
a logged warning: that the request went on, and with which features), the scenario classes and
catalogue scenarios behind it, and what to run next. Only the literal text around the fields decides
a match: a field may hold anything a release prints there; it is read as numbers where it can be, and
the answer notes each field that holds no number where one belongs.

The modules, one job each: :mod:`.known` (the catalogue's messages with their patterns, links and
next steps), :mod:`.numbers` (the values a match carries, read as numbers and put into words),
:mod:`.matching` (matching a log against the catalogue, a block at a time), :mod:`.recognised` (the
answer for one match, as JSON and as text) and :mod:`.follow` (a live log, ``explain --follow``).
"""

from __future__ import annotations

from ..server_args.log import LogReader
from .follow import MAX_INCIDENTS, MAX_LINE, Incident, LiveEvent, LiveExplainer, Tally
from .known import CAPTURE_KEY, KNOWN_MESSAGES, LINKS, NEXT_BY_STAGE, NEXT_STEP, KnownMessage, pattern_for
from .matching import (
    MAX_LOG_BYTES,
    NEEDLES,
    drop_repeats,
    explain_stream,
    needle_of,
    read_server_lines,
    required_text,
    scan,
)
from .numbers import NUMERIC_FORMS, read_numbers
from .recognised import Recognised, format_explanations
from .server import ServerContext, replay_option


def explain(text: str, *, server: LogReader | None = None, replay_with: str | None = None) -> list[Recognised]:
    """Return every known message found in ``text`` (a log line, a traceback or a whole log), each with the server
    the text's start-up lines (or ``server``, a reader that already read another log) describe at its line."""
    found = scan(text, 1) if text else []
    if text:
        read_server_lines(server if server is not None else LogReader("the text"), text, 1, found, replay_with)
    return drop_repeats(found)


__all__ = [
    "CAPTURE_KEY",
    "KNOWN_MESSAGES",
    "LINKS",
    "MAX_INCIDENTS",
    "MAX_LINE",
    "MAX_LOG_BYTES",
    "NEEDLES",
    "NEXT_BY_STAGE",
    "NEXT_STEP",
    "NUMERIC_FORMS",
    "Incident",
    "KnownMessage",
    "LiveEvent",
    "LiveExplainer",
    "Recognised",
    "ServerContext",
    "Tally",
    "explain",
    "explain_stream",
    "format_explanations",
    "needle_of",
    "pattern_for",
    "read_numbers",
    "read_server_lines",
    "replay_option",
    "required_text",
]
