"""The catalogue's messages as :class:`KnownMessage` s: each with its pattern, its links and what to run next.

:data:`KNOWN_MESSAGES` holds every entry of :data:`kimi_viz.message_catalogue.CATALOGUE` and the kit's
own ``kimi-viz capture`` line (:data:`CAPTURE_KEY`). :func:`pattern_for` derives a message's regular
expression from its template, so the replay, the catalogue and recognition never disagree on a
string: only the literal text around the fields decides a match. :data:`LINKS` ties a message to the
scenario classes and catalogue scenarios behind it, :data:`NEXT_BY_STAGE` says what to run next.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

from .. import message_catalogue
from .._records import frozen
from ..message_catalogue.messages import FIELD_FORMS, Message, Stage
from ..release_changes.rules import releases_where
from ..releases import RELEASE_RANGE, release_span

CAPTURE_KEY = "capture-manifest"  # the kit's own capture line, so explain can point at its manifests
NEXT_STEP = (
    "record the failing batch with `kimi-viz capture --out DIR -- <server command>` and run "
    "`kimi-viz triage DIR/<capture>` to name the image, both counts and the cause"
)
NEXT_SPLIT = (
    NEXT_STEP + "; when it appears only under load, requests prefilled together may share one call (on "
    f"{release_span(releases_where('code_path', lambda path: path == 'pre-fix'))} at attention-TP >= 2 two "
    "single-image requests whose grids differ fail like S1): check with "
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


@frozen
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
    tail_regex = re.escape(tail[:-1]) + r"\.?" if tail.endswith(".") else re.escape(tail)
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
        raised_in="; ".join(message_catalogue.where(message)) or f"no release {RELEASE_RANGE}",
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
