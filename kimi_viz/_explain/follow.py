"""A live log (``explain --follow``): :class:`LiveExplainer` explains it as it arrives, one answer per incident.

An incident is one known message with its values; its repeated lines are folded into a count and
shown at milestones (:class:`LiveEvent`). A Python traceback is joined to its final line. Memory
stays bounded whatever the log's length: :data:`MAX_INCIDENTS` incidents are remembered, a line
longer than :data:`MAX_LINE` is explained a piece at a time. :meth:`LiveExplainer.summary` closes it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .. import message_catalogue
from .._records import frozen
from ..server_args.log import LogReader
from .matching import BLOCK, read_server_lines, scan
from .recognised import Recognised, format_explanations

TRACEBACK_START = "Traceback (most recent call last):"
MAX_INCIDENTS = 1024  # the incidents a follower remembers to fold repeats into (the oldest forgotten first)
MAX_TRACEBACK_LINES = 10_000  # a traceback longer than this is taken as ordinary lines
MAX_LINE = BLOCK  # a line longer than this is explained a piece at a time
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


@frozen
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

    def __init__(self, replay_with: str | None = None, server: LogReader | None = None) -> None:
        self.replay_with = replay_with  # the whatif option naming the followed log's server (None: standard input)
        self.server = server if server is not None else LogReader("the log")  # its start-up and prefill lines
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
            events = self._items(self._scan(text, first))  # most blocks of a long log hold no needle at all
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

    def _scan(self, text: str, first: int) -> list[Recognised]:
        """Return the messages in ``text`` (its first line numbered ``first``), each with the server at its line."""
        found = scan(text, first)
        read_server_lines(self.server, text, first, found, self.replay_with)
        return found

    def _piece(self, data: bytes) -> list[LiveEvent]:
        return self._items(self._scan(data.decode("utf-8", "replace"), self.lines + 1))

    def _line(self, line: str, number: int) -> list[LiveEvent]:
        if self._traceback_from is not None:
            if line[:1] in (" ", "\t") or not line.strip():
                self._traceback_lines += 1
                if self._traceback_lines > MAX_TRACEBACK_LINES:
                    self._traceback_from = None
                return []
            start, self._traceback_from = self._traceback_from, None
            return self._items(self._scan(line, number), traceback_from=start)
        if line.rstrip().endswith(TRACEBACK_START):
            self._traceback_from, self._traceback_lines = number, 0
            return []
        return self._items(self._scan(line, number) if line else [])

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
