"""Recognise the messages SGLang raises or logs on the Kimi vision path in a log, and say what each means.

An on-call engineer usually starts from a log line, not a batch. :func:`explain` finds every known
message in a piece of text — each entry of :data:`kimi_viz.message_catalogue.CATALOGUE`, the
messages of 0.5.17–0.5.23 from the chat request to the spliced prompt and the EPD transfer — by its
text, whatever the release that printed it. For each it returns the stage, where SGLang emits it
(file, function, releases), what it means, the numbers it carries read out, what SGLang did next (for
a logged warning: that the request went on, and with which features), the scenario classes and
catalogue scenarios behind it, and what to run next. The patterns are derived from the catalogue's
templates, so the replay, the catalogue and recognition never disagree on a string. Only the literal
text around the fields decides a match: a field may hold anything a release prints there; it is read
as numbers where it can be, and the answer notes each field that holds no number where one belongs.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cache, cached_property
from itertools import accumulate
from typing import Any

from . import message_catalogue
from .messages import FIELD_FORMS, Message, Stage

CAPTURE_KEY = "capture-manifest"  # the kit's own capture line, so explain can point at its manifests
NEXT_STEP = (
    "record the failing batch with `kimi-viz capture --out DIR -- <server command>` and run "
    "`kimi-viz triage DIR/<capture>` to name the image, both counts and the cause"
)
NEXT_SPLIT = (
    NEXT_STEP + "; when it appears only under load, requests prefilled together may share one call (on 0.5.18 "
    "at attention-TP >= 2 two single-image requests whose grids differ fail like S1): check with "
    "`kimi-viz whatif IMAGE... --together --sglang-version V --tp N`"
)
NEXT_LOAD = (
    "replay the prefill batch the server held: `kimi-viz whatif IMAGE... --together --sglang-version V --tp N` "
    "(one request per image) or `--requests FILE` (several images per request, text lengths, chunked prefill)"
)
NEXT_BY_STAGE = {
    Stage.REQUEST: "replay the client's request body (chat completions or /generate JSON) through the release's "
    "request-side checks: `kimi-viz whatif --chat REQUEST.json --sglang-version V` (add `--image-prompts ignored` "
    "when the checkpoint's chat template writes its own image marker instead of <|media_pad|>)",
    Stage.PROCESSOR: "`kimi-viz inspect IMAGE...` shows each image's resize, grid and token span; `kimi-viz whatif "
    "IMAGE... --sglang-version V` builds the items the request side makes for them",
    Stage.CALL: NEXT_STEP,
    Stage.SPLIT: NEXT_STEP + "; `kimi-viz whatif IMAGE... --sglang-version V --tp N` replays the split for a request",
    Stage.ENCODER: "`kimi-viz encode IMAGE...` runs the vision tower on each image (rows in, feature rows out); "
    + NEXT_STEP,
    Stage.SPLICE: NEXT_LOAD,
    Stage.EPD: "`kimi-viz whatif IMAGE... --serving epd-encoder --sglang-version V --tp N` builds the items the "
    "encode server builds and replays them; to record the encode server's own calls run it under "
    "`kimi-viz capture --out DIR -- <encode server command>` and `kimi-viz triage DIR/<capture>`",
}
# The kit's links for a message: scenario classes (docs/pipeline.md §7, §10), the catalogue scenarios
# that reproduce it (kimi-viz scenario run NAME), and a next step other than its stage's.
LINKS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str | None]] = {
    "feature-length": (("S1", "S2", "S6"), ("s1-cpu", "s2-cpu", "s6-stacked"), NEXT_SPLIT),
    "gpu-wrong-grids": (("S1", "S2", "S8"), ("s1-gpu", "s2-gpu", "s8-t2"), NEXT_SPLIT),
    "cpu-wrong-grids": (("S4",), ("s4-cpu",), None),
    "one-grid": (("S9",), ("s9-two-grids",), None),
    "mix-local": (("S3",), ("s3-mixed-local",), None),
    "mix-deferred-old": (("S3",), ("s3-mixed-local",), None),
    "processor-length": (("S6",), ("s6-stacked",), NEXT_STEP),
    "trailing-shapes": (("S6",), ("s6-stacked-feature",), None),
    "list-shape": (("S6",), ("s6-list",), None),
    "channel-count": (("S11", "S12"), ("s11-cpu-two-channels",), None),
    "broadcast-alpha": (("S11",), ("s11-two-channels",), None),
    "zero-division": (("S13",), ("s13-zero-size",), None),
    "insufficient-embedding": (("S10", "S16", "S17"), ("s17-stale-eager-epd-fewer", "s16-stale-cache-entry"), None),
    "token-mismatch": (("S10", "S16", "S17"), ("s17-stale-eager-epd-fewer", "s16-stale-cache-entry"), None),
    "raise-chunk-hint": (("S10", "S17"), ("s17-stale-eager-epd-more",), None),
    "discard-cached": (("S16",), ("s16-stale-cache-entry",), None),
    "split-sizes": (("S10", "S17"), ("s17-stale-eager-split",), None),
    "encoder-produced": (("S10",), ("s10-stale-eager",), None),
}


@dataclass(frozen=True)
class KnownMessage:
    """One message SGLang raises or logs on the Kimi vision path, with what it means and where it belongs."""

    key: str
    exception: str  # the exception type(s), or the log level ("warning", "error", ...)
    pattern: str  # a regular expression; named groups are the numbers it carries
    raised_in: str  # SGLang file(s), function(s), kinds and releases
    meaning: str
    classes: tuple[str, ...] = ()  # scenario classes (docs/pipeline.md §7) that produce it
    scenarios: tuple[str, ...] = ()  # catalogue scenarios that reproduce it (kimi-viz scenario run NAME)
    next_step: str = NEXT_STEP
    stage: str | None = None  # a Stage value; None for the kit's own capture line
    releases: tuple[str, ...] = ()
    sites: tuple[dict[str, Any], ...] = ()  # {file, function, kind, releases} per site
    after: str = ""  # what SGLang does next
    logged: bool = False  # SGLang logs it and goes on, never raises it
    template: str | None = None
    origin: str = "sglang"  # or "torch", "python": who raises the text; "kimi-viz" for the capture line

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """Return the compiled pattern (compiled once, on first use)."""
        return re.compile(self.pattern)


@dataclass
class Recognised:
    """A known message found in the text, with the values it carries and a reading of them."""

    message: KnownMessage
    text: str  # the matched part of the input
    line: int  # 1-based line number in the input
    values: dict[str, Any] = field(default_factory=dict)
    reading: str = ""  # the numbers put into words, when the message has any
    numbers: dict[str, Any] = field(default_factory=dict)  # each field read as a number or a list of numbers
    notes: tuple[str, ...] = ()  # the fields that hold no number where SGLang prints one ("field X holds ...")
    traceback_from: int | None = None  # the line its traceback starts on, when it ends one (explain --follow)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready description of this match."""
        known = self.message
        return {
            "key": known.key,
            "exception": known.exception,
            "matched": self.text,
            "line": self.line,
            "values": self.values,
            "reading": self.reading,
            "numbers": self.numbers,
            "notes": list(self.notes),
            "traceback_from": self.traceback_from,
            "raised_in": known.raised_in,
            "meaning": known.meaning,
            "classes": list(known.classes),
            "scenarios": list(known.scenarios),
            "next_step": known.next_step,
            "stage": known.stage,
            "releases": list(known.releases),
            "sites": [dict(site, releases=list(site["releases"])) for site in known.sites],
            "logged": known.logged,
            "after": known.after,
            "template": known.template,
            "origin": known.origin,
        }


def pattern_for(message: Message) -> str:
    """Return the regular expression that finds ``message`` in a log line, whatever its fields hold.

    Only the literal text around the fields decides a match: each ``{}`` becomes a named group that
    takes any value (a number, a list, a shape, an id, ``None``, text with colons). A field's form
    (FIELD_FORMS) is only tried first, so the value read out ends where that form ends when the line
    goes on after it. A field that starts the template takes the word (or bracketed value) before the
    text; a field after another with only spaces between them may be empty (a release that prints
    nothing there). A sentence after the last field of a bounded form (``... {}. This is an internal
    error``) is optional, as a quoted line often drops it, and a final full stop always is. A template
    that starts with a letter or digit must start a word.
    """
    texts = (message.template, *message.aliases)
    return "|".join(_one_pattern(text, message.field_names, message.field_forms) for text in texts)


_VALUE_END = "(?=\\s*$|[\"'])"  # a last value read by its form: at the line's end, or a quote closes it


_BRACKETED = r"(?:\[[^\[\]]*\]|\([^()]*\)|[^\[(])*?"  # any text whose brackets, if any, close again


def _one_pattern(text: str, names: tuple[str, ...], forms: tuple[str, ...]) -> str:
    parts = text.split("{}")
    last = len(names) - 1
    tail = parts[-1]
    if tail.endswith("."):
        tail_regex = re.escape(tail[:-1]) + r"\.?"
    else:
        tail_regex = re.escape(tail)
    optional_tail = not tail or tail == "." or (tail.startswith(". ") and bool(names) and forms[last] != "text")
    if tail.startswith(". ") and optional_tail:
        tail_regex = f"(?:{tail_regex})?"  # a sentence after the last number: a quoted line often drops it
    pattern = "(?<!\\w)" if re.match(r"\w", text) else ""
    for index, part in enumerate(parts[:-1]):
        joined = index > 0 and _joined(part)
        if not joined:
            pattern += re.escape(part)
        form = forms[index]
        bounded = "" if form == "text" else FIELD_FORMS[form][0]
        if index == 0 and not part:  # the template starts with this field: the word before the text
            regex = f"(?:{bounded})|\\S+" if bounded else "\\S+"
        elif index == 0 and not re.search(r"\w", part):  # "[{}] ...": no opening bracket of its own in it
            regex = f"(?:{bounded})|{_BRACKETED}" if bounded else _BRACKETED
        elif index == last and optional_tail:  # the rest of the line, less the optional tail
            rest = f".*?(?={tail_regex}\\s*$)" if tail else ".*?(?=\\s*$)"
            end = f"(?={tail_regex}(?:\\s*$|[\"']))" if tail else _VALUE_END
            regex = f"(?:{bounded}){end}|{rest}" if bounded else rest
        else:  # a value whose brackets close is tried before any text up to the next literal part
            regex = f"(?:{bounded})|{_BRACKETED}|.*?" if bounded else f"{_BRACKETED}|.*?"
        group = f"(?P<{names[index]}>{regex})"
        pattern += f"(?:\\s+{group})?" if joined else group
    return pattern + tail_regex


def _joined(before: str) -> bool:
    """Whether a field follows the one before it after spaces only (and so may be left out)."""
    return bool(before) and not before.strip()


def _known(message: Message) -> KnownMessage:
    classes, scenarios, next_step = LINKS.get(message.key, ((), (), None))
    return KnownMessage(
        key=message.key,
        exception="/".join(message.kinds) or "ValueError",
        pattern=pattern_for(message),
        raised_in="; ".join(message_catalogue.where(message)) or "no release 0.5.17–0.5.23",
        meaning=message.meaning,
        classes=classes,
        scenarios=scenarios,
        next_step=next_step or NEXT_BY_STAGE[message.stage],
        stage=message.stage.value,
        releases=message.releases,
        sites=tuple(
            {"file": f"sglang/srt/{s.file}", "function": s.function, "kind": s.kind, "releases": s.releases}
            for s in message.sites
        ),
        after=message.after,
        logged=message.logged,
        template=message.template,
        origin=message.origin,
    )


KNOWN_MESSAGES: tuple[KnownMessage, ...] = (
    *(_known(message) for message in message_catalogue.CATALOGUE),
    # Not SGLang's: the line `kimi-viz capture` prints when it has recorded a failing call
    # (kimi_viz/capture/record.py). A log that holds it already has the manifest to triage.
    KnownMessage(
        CAPTURE_KEY,
        "kimi-viz capture",
        r"kimi-viz capture: wrote (?P<manifest>.+?)(?: \((?P<error>[A-Za-z_][\w.]*: .*)\))?$",
        "kimi_viz/capture/record.py, record_call (under `kimi-viz capture`)",
        "kimi-viz capture recorded this get_image_feature call as a manifest folder (relative to the "
        "server's working folder): the batch, both grid keys, the deferred configs and the release.",
        next_step="kimi-viz triage MANIFEST names the image, both counts, the cause and the fixing release",
        origin="kimi-viz",
    ),
)


def _gap(have: Any, need: Any, unit: str) -> str:
    """Return "N missing" / "N too many" for two counts, or "" when either is not a number."""
    if not (isinstance(have, int) and isinstance(need, int)) or have == need:
        return ""
    return f": {need - have} {unit} missing" if need > have else f": {have - need} {unit} too many"


def _reading(key: str, values: dict[str, Any]) -> str:
    """Return the numbers of a matched message put into words."""
    v = values
    if key in ("one-to-one", "placeholder-tokens", "placeholder-text"):
        where = "token ids" if key != "placeholder-text" else "text"
        return (
            f"{v['images']} image(s) sent, {v['placeholders']} <|media_pad|> placeholder(s) in the prompt's {where}"
            + _gap(v["placeholders"], v["images"], "placeholder(s)")
        )
    if key == "one-to-one-loaded":
        return f"{v['images']} image(s) sent, {v['loaded']} loaded from the text's placeholders"
    if key == "prompt-has-placeholders":
        return f"{v['placeholders']} {v['placeholder_modality']} placeholder(s) in the text, {v['inputs']} sent"
    if key == "processor-length":
        produced, expected = v["produced"], v["expected"]
        if not (isinstance(produced, int) and isinstance(expected, int)):
            return f"pixel_values has {produced} rows, the grids need {expected}"
        return (
            f"pixel_values has {produced} rows, the grids need {expected} "
            f"({'+' if produced >= expected else ''}{produced - expected} rows)"
        )
    if key == "insufficient-embedding":
        tokens, rows = v["prompt_tokens"], v["feature_rows"]
        return f"the prompt has {tokens} <|media_pad|> tokens but the embedding has {rows} rows" + (
            f" ({tokens - rows} missing)" if isinstance(tokens, int) and isinstance(rows, int) else ""
        )
    if key == "token-mismatch":
        tokens, rows = v["prompt_tokens"], v["feature_rows"]
        if not (isinstance(tokens, int) and isinstance(rows, int)):
            return f"{tokens} pad tokens in the window, {rows} rows"
        if rows > tokens:
            return (
                f"{tokens} pad tokens in the window, {rows} rows: SGLang keeps the last {tokens} rows and drops the "
                f"first {rows - tokens} (no error; the images may be spliced with other images' rows)"
            )
        return (
            f"{tokens} pad tokens in the window, {rows} rows: {tokens - rows} missing, the Insufficient error follows"
        )
    if key == "discard-cached":
        return (
            f"the cache held {v['cached']} rows under key {v['cache_key']} for an image of "
            f"{v['expected']} pad tokens: dropped and encoded again"
        )
    if key == "split-sizes":
        sizes = [int(x) for x in str(v["sizes"]).strip("[]").split(",") if x.strip().isdigit()]
        if not isinstance(v["rows"], int):
            return f"the call returned {v['rows']} rows; its item(s) need {sizes}"
        rows, need = v["rows"], sum(sizes)
        gap = f"{need - rows} missing" if need > rows else f"{rows - need} too many"
        return f"the call returned {rows} rows; its {len(sizes)} item(s) need {need} ({sizes}): {gap}"
    if key == "encoder-produced":
        return (
            f"the encoder produced {v['produced']} feature rows, the preprocessing metadata expects {v['expected']}"
            + _gap(v["produced"], v["expected"], "row(s)")
        )
    if key == "epd-rows-vs-offsets":
        return f"the prompt's offsets cover {v['expected']} pad tokens, the encoder sent {v['got']} rows" + _gap(
            v["got"], v["expected"], "row(s)"
        )
    if key == "epd-rows-consumed":
        return f"the encoder sent {v['received']} rows, the request's items use {v['consumed']}"
    if key == "per-item-count":
        return f"{v['embeddings']} embedding(s) for {v['items']} cache-miss item(s)"
    if key == CAPTURE_KEY:
        error = v.get("error")
        return f"a manifest of the call that raised {error}" if error else "a manifest of a recorded call"
    if key == "channel-count":
        return f"a tensor was read with {v['channels']} channels"
    if key == "broadcast-alpha":
        return f"alpha had {v['a']} channels against {v['b']} colour channels"
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in v.items() if value not in (None, ""))


def _value(text: str | None) -> Any:
    if text is not None and re.fullmatch(r"-?\d+", text):
        return int(text)
    if text is not None and re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    return text


# What a field of each numeric form holds when SGLang prints it: the words for a note when it holds else.
NUMERIC_FORMS = {"n": "a number", "list": "a list of numbers", "shape": "a shape"}
_NUMBER_LIST = re.compile(r"(?:torch\.Size\()?[\[(]\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*,?\s*[\])]\)?")


def read_numbers(forms: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return each field's value read as numbers where its form promises them, and a note for each that is not.

    A count (form ``n``) reads as an int or a float; a list or a shape (``[2, 1]``, ``(2, 1)``,
    ``torch.Size([3, 14])``) as a list of ints. A field that holds something else (``None``, an id,
    text) keeps its text in the values and gets a note: "field layout holds '111', not a list of numbers".
    """
    numbers: dict[str, Any] = {}
    notes: list[str] = []
    for name, value in values.items():
        form = forms.get(name, "text")
        if form not in NUMERIC_FORMS:
            continue
        if value is None or value == "":
            notes.append(f"field {name} is empty, not {NUMERIC_FORMS[form]}")
        elif form == "n" and isinstance(value, (int, float)):
            numbers[name] = value
        elif form != "n" and (match := _NUMBER_LIST.fullmatch(str(value))):
            numbers[name] = [int(x) for x in (match.group(1) or "").replace(" ", "").split(",") if x]
        else:
            notes.append(f"field {name} holds {str(value)!r}, not {NUMERIC_FORMS[form]}")
    return numbers, tuple(notes)


def explain(text: str) -> list[Recognised]:
    """Return every known message found in ``text`` (a log line, a traceback or a whole log)."""
    return _drop_repeats(_scan(text, 1) if text else [])


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
)
MAX_LOG_BYTES = 1 << 30  # the most explain reads from one log (a file or stdin)
_BLOCK = 1 << 20  # bytes read at a time; a line longer than this is read in pieces


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


def _hit_lines(text: str) -> dict[int, set[str]]:
    """Return the index of every line (as ``str.splitlines`` cuts them) holding a needle, with its needles.

    The line ends are only worked out once a needle is found: most blocks of a long log hold none.
    """
    ends: list[int] = []
    hits: dict[int, set[str]] = {}
    for needle in NEEDLES:
        start = text.find(needle)
        if start >= 0 and not ends:
            ends = list(accumulate(len(line) for line in text.splitlines(keepends=True)))
        while start >= 0:
            line = bisect_right(ends, start)
            hits.setdefault(line, set()).add(needle)
            start = text.find(needle, ends[line]) if line < len(ends) else -1
    return hits


def _scan(text: str, first_line: int) -> list[Recognised]:
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
            values = {name: _value(value) for name, value in match.groupdict().items()}
            numbers, notes = read_numbers(_forms(known.key), values)
            reading = _reading(known.key, values)
            found.append(Recognised(known, match.group(0), number, values, reading, numbers, notes))
    return found


@cache
def _forms(key: str) -> dict[str, str]:
    """Return the form of each field of the message ``key`` (none for the kit's capture line)."""
    message = message_catalogue.BY_KEY.get(key)
    return dict(zip(message.field_names, message.field_forms)) if message else {}


def _compatible(one: tuple, other: tuple) -> bool:
    """Whether two matches on one line are both kept: apart, or one quoted inside a field of the other."""
    a, b = one[2].span(), other[2].span()
    if a[1] <= b[0] or b[1] <= a[0]:
        return True
    return any(s <= a[0] and a[1] <= e for s, e in other[3]) or any(s <= b[0] and b[1] <= e for s, e in one[3])


def explain_stream(stream: Any, *, limit: int = MAX_LOG_BYTES, source: str = "the log") -> list[Recognised]:
    """Return the known messages in a binary stream (a log file, stdin), read a block at a time.

    Memory stays bounded by the block size whatever the log's size; more than ``limit`` bytes raise
    :class:`~kimi_viz.errors.KimiVizError` naming ``source``. Bytes that are not UTF-8 are replaced.
    """
    from .errors import KimiVizError

    found: list[Recognised] = []
    line = 1
    carry = b""
    total = 0
    while True:
        block = stream.read(_BLOCK)
        if not block:
            break
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
        if cut < 0 and len(data) < _BLOCK:
            carry = data
            continue
        head, carry = (data[: cut + 1], data[cut + 1 :]) if cut >= 0 else (data, b"")
        text = head.decode("utf-8", "replace")
        found.extend(_scan(text, line))
        line += len(text.splitlines()) - (0 if cut >= 0 else 1)
    if carry:
        found.extend(_scan(carry.decode("utf-8", "replace"), line))
    return _drop_repeats(found)


def _drop_repeats(found: list[Recognised]) -> list[Recognised]:
    """Return the matches with repeats of the same message and values (a traceback echoes them) removed."""
    seen: set[tuple[str, tuple]] = set()
    unique = []
    for item in found:
        signature = (item.message.key, tuple(sorted(item.values.items())))
        if signature not in seen:
            seen.add(signature)
            unique.append(item)
    return unique


def format_explanations(found: list[Recognised]) -> str:
    """Return a readable report of the matches (or a note that nothing known was found).

    When the log also holds ``kimi-viz capture`` lines, every error's next step points at those
    manifests instead of asking for a capture, and the report ends with one triage command each.
    """
    if not found:
        return (
            "no known Kimi-K3 vision error in the text; the messages it knows are listed by `kimi-viz explain --list`"
        )
    manifests = [item.values["manifest"] for item in found if item.message.key == CAPTURE_KEY]
    blocks = []
    for item in found:
        known = item.message
        if known.key == CAPTURE_KEY:
            continue
        stage = Stage(known.stage)
        where = f"line {item.line}" + (f" (traceback from line {item.traceback_from})" if item.traceback_from else "")
        lines = [
            f"{where}: {known.exception}: {item.text}",
            f"  stage:     {stage.value} ({stage.number} of {len(Stage)}: {' -> '.join(s.value for s in Stage)})",
            "  raised in: " if not known.logged else "  logged in: ",
        ]
        sites = known.raised_in.split("; ")
        lines[-1] += sites[0]
        lines += [f"             {site}" for site in sites[1:]]
        lines.append(f"  meaning:   {known.meaning}")
        if item.reading:
            lines.append(f"  numbers:   {item.reading}")
        lines += [f"  note:      {note}" for note in item.notes]
        lines.append(f"  then:      {known.after}")
        if known.classes:
            lines.append(f"  classes:   {', '.join(known.classes)} (docs/pipeline.md §7, §10)")
        if known.scenarios:
            lines.append("  reproduce: " + "; ".join(f"kimi-viz scenario run {name}" for name in known.scenarios))
        if manifests:
            lines.append(f"  next:      this log names {len(manifests)} captured manifest(s); triage them (below)")
        else:
            lines.append(f"  next:      {known.next_step}")
        blocks.append("\n".join(lines))
    if manifests:
        lines = [
            f"captured by kimi-viz capture in this log ({len(manifests)}; paths are relative to the server's folder):"
        ]
        for item in found:
            if item.message.key == CAPTURE_KEY:
                error = item.values.get("error")
                lines.append(f"  line {item.line}: {item.values['manifest']}" + (f"  ({error})" if error else ""))
                lines.append(f"    kimi-viz triage {item.values['manifest']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# ------------------------------------------------------------------------------------------------
# A live log: explain --follow
# ------------------------------------------------------------------------------------------------
TRACEBACK_START = "Traceback (most recent call last):"
MAX_INCIDENTS = 1024  # the incidents a follower remembers to fold repeats into (the oldest forgotten first)
MAX_TRACEBACK_LINES = 10_000  # a traceback longer than this is taken as ordinary lines
MAX_LINE = _BLOCK  # a line longer than this is explained a piece at a time
SUMMARY_INCIDENTS = 20  # the most recent incidents the summary lists one by one


@dataclass
class Incident:
    """One known message with its values, as first seen in a live log, and how often it was seen."""

    number: int  # 1 for the first incident of the log
    first: Recognised
    count: int = 1
    last_line: int = 0


@dataclass
class Tally:
    """What a live log held of one catalogue message: incidents, lines, first and last line."""

    key: str
    incidents: int = 0
    lines: int = 0
    first_line: int = 0
    last_line: int = 0


@dataclass(frozen=True)
class LiveEvent:
    """Something a follower has to say: a new incident (its answer) or a repeat of one (folded, with a count)."""

    incident: Incident
    repeat: bool  # False: the first line of the incident; True: a repeat at a folding milestone
    line: int
    count: int  # the incident's lines so far, this one included

    def text(self) -> str:
        """Return the event as the follower prints it: the whole answer, or one line for a repeat."""
        item = self.incident.first
        if not self.repeat:
            return format_explanations([item])
        return (
            f"line {self.line}: again: incident {self.incident.number} ({item.message.key}), "
            f"{self.count} times since line {item.line}"
        )

    def to_json(self) -> dict[str, Any]:
        """Return the event as one JSON object (a JSON Lines record)."""
        if self.repeat:
            return {
                "incident": self.incident.number,
                "key": self.incident.first.message.key,
                "line": self.line,
                "count": self.count,
            }
        return {"incident": self.incident.number, **self.incident.first.to_json()}


def _milestone(count: int) -> bool:
    """Whether a repeat count is shown: the 2nd, then the 10th, 100th, 1000th ... line of an incident."""
    return count == 2 or (count >= 10 and str(count).rstrip("0") == "1")


class LiveExplainer:
    """Explain a log as it arrives, one answer per incident, in memory bounded whatever the log's length.

    Feed it bytes as they come (:meth:`feed`), at the end :meth:`close`. An incident is one known
    message with its values; its repeated lines are folded into a count. A Python traceback is joined
    to its final line (the lines in between, source lines that may quote a message, are not read).
    """

    def __init__(self) -> None:
        self.lines = 0  # complete lines read so far
        self.incidents = 0
        self.tallies: dict[str, Tally] = {}
        self._recent: OrderedDict[tuple[str, tuple], Incident] = OrderedDict()
        self._carry = b""
        self._traceback_from: int | None = None
        self._traceback_lines = 0

    @property
    def found(self) -> bool:
        """Whether any known message was seen."""
        return self.incidents > 0

    def feed(self, data: bytes) -> list[LiveEvent]:
        """Return what the complete lines in ``data`` (after what was left over before) have to say."""
        data = self._carry + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._carry = b"" if len(data) >= MAX_LINE else data
            return self._piece(data) if len(data) >= MAX_LINE else []
        head, self._carry = data[: cut + 1], data[cut + 1 :]
        text = head.decode("utf-8", "replace")
        first = self.lines + 1
        events: list[LiveEvent] = []
        if self._traceback_from is None and TRACEBACK_START not in text:
            events = self._items(_scan(text, first))  # most blocks of a long log hold no needle at all
        else:
            for index, line in enumerate(text.split("\n")[:-1]):
                events += self._line(line, first + index)
        self.lines += head.count(b"\n")
        return events

    def close(self) -> list[LiveEvent]:
        """Return what the last, unfinished line has to say (the end of the log)."""
        rest, self._carry = self._carry, b""
        return self._piece(rest) if rest else []

    def restart(self) -> list[LiveEvent]:
        """Return what the unfinished line of a file that was rotated or truncated has to say; forget it."""
        self._traceback_from = None
        return self.close()

    def _piece(self, data: bytes) -> list[LiveEvent]:
        return self._items(_scan(data.decode("utf-8", "replace"), self.lines + 1))

    def _line(self, line: str, number: int) -> list[LiveEvent]:
        if self._traceback_from is not None:
            if line[:1] in (" ", "\t") or not line.strip():
                self._traceback_lines += 1
                if self._traceback_lines > MAX_TRACEBACK_LINES:
                    self._traceback_from = None
                return []
            start, self._traceback_from = self._traceback_from, None
            return self._items(_scan(line, number), traceback_from=start)
        if line.rstrip().endswith(TRACEBACK_START):
            self._traceback_from, self._traceback_lines = number, 0
            return []
        return self._items(_scan(line, number) if line else [])

    def _items(self, found: list[Recognised], traceback_from: int | None = None) -> list[LiveEvent]:
        events = []
        for item in found:
            item.traceback_from = traceback_from
            signature = (item.message.key, tuple(sorted(item.values.items(), key=lambda kv: kv[0])))
            tally = self.tallies.setdefault(item.message.key, Tally(item.message.key, first_line=item.line))
            tally.lines += 1
            tally.last_line = item.line
            incident = self._recent.get(signature)
            if incident is not None:
                incident.count += 1
                incident.last_line = item.line
                self._recent.move_to_end(signature)
                if _milestone(incident.count):
                    events.append(LiveEvent(incident, True, item.line, incident.count))
                continue
            self.incidents += 1
            tally.incidents += 1
            incident = Incident(self.incidents, item, last_line=item.line)
            self._recent[signature] = incident
            if len(self._recent) > MAX_INCIDENTS:
                self._recent.popitem(last=False)
            events.append(LiveEvent(incident, False, item.line, 1))
        return events

    def summary(self) -> str:
        """Return the closing summary: the incidents by message, and the latest incidents with their counts."""
        if not self.incidents:
            return f"summary: no known Kimi-K3 vision error in {self.lines} line(s)"
        out = [f"summary: {self.incidents} incident(s) of {len(self.tallies)} known message(s) in {self.lines} line(s)"]
        for tally in self.tallies.values():
            stage = message_catalogue.BY_KEY[tally.key].stage.value if tally.key in message_catalogue.BY_KEY else "-"
            out.append(
                f"  {tally.key} ({stage}): {tally.incidents} incident(s), {tally.lines} line(s), "
                f"lines {tally.first_line}-{tally.last_line}"
            )
        recent = sorted(self._recent.values(), key=lambda i: i.number)[-SUMMARY_INCIDENTS:]
        out.append(f"  latest {len(recent)} incident(s):")
        out += [
            f"    incident {i.number}: {i.first.message.key} x{i.count}, line {i.first.line}"
            + (f"-{i.last_line}" if i.last_line != i.first.line else "")
            for i in recent
        ]
        return "\n".join(out)

    def summary_json(self) -> dict[str, Any]:
        """Return the closing summary as one JSON object."""
        return {
            "summary": {
                "lines": self.lines,
                "incidents": self.incidents,
                "messages": {t.key: {"incidents": t.incidents, "lines": t.lines} for t in self.tallies.values()},
            }
        }
