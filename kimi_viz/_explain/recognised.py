"""What explain answers: a :class:`Recognised` message as JSON, and :func:`format_explanations`, the text.

A :class:`Recognised` is one known message found in a log, with its line, the values it carries
and their reading; :meth:`Recognised.to_json` is what ``explain --json`` prints for it.
:func:`format_explanations` is the text ``explain`` prints for a list of them: stage, where SGLang
emits it, meaning, numbers, what SGLang did next, scenario classes, and what to run next (the
log's own ``kimi-viz capture`` manifests when it names any).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..message_catalogue.messages import Stage
from .known import CAPTURE_KEY, KnownMessage
from .server import ServerContext


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
    server: ServerContext | None = None  # the server the log's start-up lines describe at this line, and its pass

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
            "server": None if self.server is None else self.server.to_json(),
        }


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
        if item.server is not None:
            lines += item.server.lines()
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
