"""Matching a log against the catalogue: :func:`scan` finds the known messages in a piece of text.

A line can only hold a known message when it holds one of :data:`NEEDLES` in the message's own
words, so a long log is skimmed a block at a time and a line tries only the messages whose needles
it holds (:func:`needle_of`, :func:`required_text`). Where several messages match one line, the one
with the most literal text wins, unless one is quoted inside a field of the other.
:func:`explain_stream` reads a binary stream (a log file, stdin) a block at a time, in bounded memory;
:func:`drop_repeats` folds the echoes of one message with the same values.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cache
from itertools import accumulate
from typing import Any

from .. import message_catalogue
from ..errors import KimiVizError
from ..server_args.log import LogReader
from .known import CAPTURE_KEY, KNOWN_MESSAGES, KnownMessage
from .numbers import field_forms, in_words, parse_value, read_numbers
from .recognised import Recognised
from .server import ServerContext

# A line can only hold a known message if it holds one of these in the message's own text (every
# message has one; tests/test_hostile_terminal.py checks it), so a long log is skimmed a block at a
# time and a line tries only the messages whose needles it holds.
NEEDLES = (
    "Kimi",
    "kimi",
    "odal",  # modality, multimodal, Multimodal
    "mbedding",
    "ncode",  # encoder, Encoder, encoding
    "mage",  # image, Image
    "rror",  # error, Error (the EPD's wrappers, KeyError, ZeroDivisionError)
    "laceholder",
    "rtifact",
    "grid",
    "feature",
    "pixel",
    "ensor",  # tensor, Tensor
    "ailed",
    "data ",
    "part",
    "_thw",
    "MM ",
    "num_frames",
    "out of bounds",
    "not found in",
    "must be a list",
    "content hash",
    "mm_content_hashes",
    "batch layout",
    "chunked_prefill_size",
    "Number of elements",
    "background pattern",
    "'list' object has no attribute",
    "input_ids",
    "retokenize",
    "mm_hashes",
    "exceeds limit",
    "Timeout!",
    "request state",  # the EPD encoder's "No request state exists while encoding request"
)
# The lines that say what the server is (kimi_viz.server_args.log): its start-up, its pools, its passes.
SERVER_NEEDLES = (
    "server_args=",
    "max_total_num_tokens=",
    "Mamba Cache",
    "Prefill batch",
    "Retract requests",
    "sglang",
    "SGLang",
)
MAX_LOG_BYTES = 1 << 30  # the most explain reads from one log (a file or stdin)
BLOCK = 1 << 20  # bytes read at a time; a line longer than this is read in pieces


def required_text(known: KnownMessage) -> list[list[str]]:
    """Return, for each text of ``known`` (its template, then its aliases), the literal pieces every match of
    that text contains: the optional last sentence and the final full stop left out."""
    if known.key == CAPTURE_KEY:
        return [["kimi-viz capture: wrote "]]
    message = message_catalogue.BY_KEY[known.key]
    variants = []
    for text in (message.template, *message.aliases):
        parts = text.split("{}")
        if message.fields and message.field_forms[-1] != "text" and parts[-1].startswith(". "):
            parts = parts[:-1]
        variants.append([piece for part in parts if (piece := part.removesuffix("."))])
    return variants


def needle_of(known: KnownMessage) -> str | None:
    """Return the most specific needle every text of ``known`` holds in its own words (None: none does)."""
    variants = required_text(known)
    held = [n for n in NEEDLES if all(any(n in piece for piece in pieces) for pieces in variants)]
    return max(held, key=len) if held else None


@cache
def _index() -> tuple[dict[str, list[KnownMessage]], dict[str, tuple[str, ...]]]:
    """Return, once: the messages each needle stands for (their most specific needle) and their longest pieces."""
    by_needle: dict[str, list[KnownMessage]] = {needle: [] for needle in NEEDLES}
    pieces: dict[str, tuple[str, ...]] = {}
    for known in KNOWN_MESSAGES:
        needle = needle_of(known)
        if needle is not None:
            by_needle[needle].append(known)
        pieces[known.key] = tuple(max(variant, key=len) for variant in required_text(known))
    return by_needle, pieces


@cache
def _candidates(needles: frozenset[str]) -> list[KnownMessage]:
    """Return the messages a line holding these needles may hold (cached per set of needles)."""
    by_needle = _index()[0]
    return [k for n in NEEDLES if n in needles for k in by_needle[n]]


def _hit_lines(text: str, needles: tuple[str, ...] = NEEDLES) -> dict[int, set[str]]:
    """Return the index of every line (as ``str.splitlines`` cuts them) holding one of ``needles``, with its needles.

    The line ends are only worked out once a needle is found: most blocks of a long log hold none.
    """
    ends: list[int] = []
    hits: dict[int, set[str]] = {}
    for needle in needles:
        start = text.find(needle)
        if start >= 0 and not ends:
            ends = list(accumulate(len(line) for line in text.splitlines(keepends=True)))
        while start >= 0:
            line = bisect_right(ends, start)
            hits.setdefault(line, set()).add(needle)
            start = text.find(needle, ends[line]) if line < len(ends) else -1
    return hits


def scan(text: str, first_line: int) -> list[Recognised]:
    """Return the known messages in ``text``, in line order, its first line numbered ``first_line``."""
    found: list[Recognised] = []
    hits = _hit_lines(text)
    if not hits:
        return found
    lines = text.splitlines() or [text]
    pieces = _index()[1]
    for index, needles in sorted(hits.items()):
        line, number = lines[index], first_line + index
        matches = []
        for known in _candidates(frozenset(needles)):
            match = known.regex.search(line) if any(piece in line for piece in pieces[known.key]) else None
            if match is not None:
                fields = [match.span(name) for name, value in match.groupdict().items() if value is not None]
                literal = len(match.group(0)) - sum(end - start for start, end in fields)
                matches.append((literal, known, match, fields))
        kept: list[tuple[int, KnownMessage, re.Match[str], list[tuple[int, int]]]] = []
        for entry in sorted(matches, key=lambda m: -m[0]):
            if all(_compatible(entry, other) for other in kept):
                kept.append(entry)
        for _, known, match, _ in sorted(kept, key=lambda m: m[2].start()):
            values = {name: parse_value(value) for name, value in match.groupdict().items()}
            numbers, notes = read_numbers(field_forms(known.key), values)
            reading = in_words(known.key, values)
            found.append(Recognised(known, match.group(0), number, values, reading, numbers, notes))
    return found


def _compatible(one: tuple, other: tuple) -> bool:
    """Whether two matches on one line are both kept: apart, or one quoted inside a field of the other."""
    a, b = one[2].span(), other[2].span()
    if a[1] <= b[0] or b[1] <= a[0]:
        return True
    return any(s <= a[0] and a[1] <= e for s, e in other[3]) or any(s <= b[0] and b[1] <= e for s, e in one[3])


def read_server_lines(
    reader: LogReader, text: str, first_line: int, found: list[Recognised], replay_with: str | None
) -> None:
    """Feed ``text``'s server lines (start-up, pools, prefill passes; its first line numbered ``first_line``) to
    ``reader`` in line order, giving each message of ``found`` (in that text, in line order) the server in force at
    its line: :class:`~.server.ServerContext`."""
    hits = sorted(_hit_lines(text, SERVER_NEEDLES))
    lines = text.splitlines() if hits else []
    fed = 0
    for item in found:
        while fed < len(hits) and first_line + hits[fed] < item.line:
            reader.feed(first_line + hits[fed], lines[hits[fed]])
            fed += 1
        if not reader.start.empty:
            item.server = ServerContext(
                reader.start, reader.prefills[-1] if reader.prefills else None, reader.retractions, replay_with
            )
    for index in hits[fed:]:
        reader.feed(first_line + index, lines[index])


def explain_stream(
    stream: Any,
    *,
    limit: int = MAX_LOG_BYTES,
    source: str = "the log",
    replay_with: str | None = None,
    server: LogReader | None = None,
) -> list[Recognised]:
    """Return the known messages in a binary stream (a log file, stdin), read a block at a time.

    Memory stays bounded by the block size whatever the log's size; more than ``limit`` bytes raise
    :class:`~kimi_viz.errors.KimiVizError` naming ``source``. Bytes that are not UTF-8 are replaced. The log's
    start-up and prefill lines go to ``server`` (a fresh reader by default), and each message found is given the
    server in force at its line; ``replay_with`` is the whatif option that names this server (``--server-log
    PATH``; None for standard input).
    """
    reader = server if server is not None else LogReader(source)
    found: list[Recognised] = []
    line = 1
    carry = b""
    total = 0
    while block := stream.read(BLOCK):
        if isinstance(block, str):  # a text stream (e.g. a replaced sys.stdin)
            block = block.encode("utf-8", "surrogateescape")
        total += len(block)
        if total > limit:
            raise KimiVizError(
                f"{source}: more than {limit} bytes; expected a log of at most {limit >> 20} MiB — "
                "pass its tail instead, e.g. tail -c 100M LOG | kimi-viz explain"
            )
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0 and len(data) < BLOCK:
            carry = data
            continue
        head, carry = (data[: cut + 1], data[cut + 1 :]) if cut >= 0 else (data, b"")
        text = head.decode("utf-8", "replace")
        block_found = scan(text, line)
        read_server_lines(reader, text, line, block_found, replay_with)
        found.extend(block_found)
        line += len(text.splitlines()) - (0 if cut >= 0 else 1)
    if carry:
        text = carry.decode("utf-8", "replace")
        block_found = scan(text, line)
        read_server_lines(reader, text, line, block_found, replay_with)
        found.extend(block_found)
    return drop_repeats(found)


def drop_repeats(found: list[Recognised]) -> list[Recognised]:
    """Return the matches with repeats of the same message and values (a traceback echoes them) removed."""
    seen: set[tuple[str, tuple]] = set()
    unique = []
    for item in found:
        signature = (item.message.key, tuple(sorted(item.values.items())))
        if signature not in seen:
            seen.add(signature)
            unique.append(item)
    return unique
