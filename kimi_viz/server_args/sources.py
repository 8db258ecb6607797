"""Where each value of the server a replay runs came from: typed, the launch command, the server's log, a default.

Every answer says it, in the text and in the JSON (``server.sources``): ``page_size 64 (server log line 3)``,
``chunked_prefill_size 8192 (SGLang's default for this GPU)``. :class:`ServerReport` is that part of an answer:
each modelled value with its :class:`Source`, the flags given that the kit does not model (with the one line
saying what each could change), and how the release and the attention-TP size were found.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from .._records import frozen


class SourceKind(str, Enum):
    """Where a value came from, strongest first: what was typed wins over the log, the log over the command."""

    TYPED = "typed"  # a kimi-viz option on the command line (or an argument of the Python call)
    LOG = "log"  # the server's log (--server-log): what the server ran
    COMMAND = "command"  # the launch command (--server): what was asked of the server
    DEFAULT = "default"  # SGLang's default for the release
    GPU_DEFAULT = "gpu-default"  # SGLang's default for the GPU (the chunk size by its memory, the page by its backend)
    KIT = "kit"  # the kit's stand-in where SGLang sizes a value from the machine (memory unbounded)

    def __str__(self) -> str:
        return self.value


@frozen
class Source:
    """One value's origin, as an answer says it (``server log line 3``, ``--page-size (typed)``)."""

    kind: SourceKind
    where: str

    def __str__(self) -> str:
        return self.where


@frozen
class ServerValue:
    """One value of the server replayed, under SGLang's name, and where it came from."""

    name: str  # SGLang's name: "page_size", "tp_size", "SGLANG_VLM_CACHE_SIZE_MB"
    value: Any
    source: Source

    @property
    def text(self) -> str:
        """Return e.g. ``"page_size 64 (server log line 3)"`` (off and unset said in words)."""
        return f"{self.name} {show_value(self.value)} ({self.source})"

    def to_json(self) -> dict[str, Any]:
        """Return ``{"value", "source", "from"}`` (``from``: the source's kind)."""
        return {"value": self.value, "source": self.source.where, "from": self.source.kind.value}


@frozen
class NotModelled:
    """A flag the server was given that the kit does not model, and what it could change."""

    option: str  # as SGLang spells it: "--enable-hierarchical-cache", "SGLANG_FOO"
    value: Any
    effect: str  # the table's one line
    source: Source

    @property
    def text(self) -> str:
        """Return e.g. ``"--dcp-size 2 (the launch command): splits the KV cache …"``."""
        shown = "" if self.value is True else f" {show_value(self.value)}"
        return f"{self.option}{shown} ({self.source}): {self.effect}"

    def to_json(self) -> dict[str, Any]:
        """Return ``{"option", "value", "effect", "source"}``."""
        return {"option": self.option, "value": self.value, "effect": self.effect, "source": self.source.where}


@frozen
class ServerReport:
    """The server an answer replayed: its values and their sources, the flags it ignores, its release and TP."""

    values: tuple[ServerValue, ...]
    not_modelled: tuple[NotModelled, ...] = ()
    release: str = ""  # how the release was found, one sentence
    tp: str = ""  # how the attention-TP size was found, one sentence
    inputs: tuple[str, ...] = ()  # what was read: "--server", "--server-log server.log"
    notes: tuple[str, ...] = ()  # what else the inputs said (a cut start-up line, several start-ups, a conflict)

    def value(self, name: str) -> ServerValue | None:
        """Return the value named ``name``, or None."""
        return next((v for v in self.values if v.name == name), None)

    @property
    def from_inputs(self) -> bool:
        """Return True when a launch command or a log was read."""
        return bool(self.inputs)

    def could_change(self) -> str | None:
        """Return the sentence a clean verdict carries when flags the kit does not model were given, else None."""
        if not self.not_modelled:
            return None
        names = ", ".join(item.option for item in self.not_modelled)
        return f"the kit does not model {names}: {'it' if len(self.not_modelled) == 1 else 'each'} could change this"

    def lines(self, *, clean: bool) -> list[str]:
        """Return the report as text: what was read, how the release and TP were found, each value not left at
        SGLang's default with where it came from, the flags the kit does not model (and, under a ``clean`` verdict,
        that they could change it), then the notes."""
        lines = [f"server ({', '.join(self.inputs) or 'typed options'}):", f"  release: {self.release}"]
        lines += [f"  {self.tp}"] if self.tp else []
        defaults = (SourceKind.DEFAULT, SourceKind.GPU_DEFAULT, SourceKind.KIT)
        lines += [f"  {v.text}" for v in self.values if v.source.kind not in defaults]
        left = [v.name for v in self.values if v.source.kind in defaults]
        if left:
            lines.append(f"  the other {len(left)} value(s): SGLang's defaults ({', '.join(left)})")
        if self.not_modelled:
            lines.append("  not modelled:")
            lines += [f"    {item.text}" for item in self.not_modelled]
            could = self.could_change()
            if clean and could is not None:
                lines.append(f"  ⚠ {could}")
        lines += [f"  note: {note}" for note in self.notes]
        return lines

    def to_json(self) -> dict[str, Any]:
        """Return ``{"inputs", "release", "tp", "sources", "not_modelled", "notes"}``."""
        return {
            "inputs": list(self.inputs),
            "release": self.release,
            "tp": self.tp,
            "sources": {v.name: v.to_json() for v in self.values},
            "not_modelled": [item.to_json() for item in self.not_modelled],
            "notes": list(self.notes),
        }


def show_value(value: Any) -> str:
    """Return a value as an answer writes it: ``None`` as ``unset``, booleans as ``on``/``off``."""
    if value is None:
        return "unset"
    if value is True:
        return "on"
    if value is False:
        return "off"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


__all__ = ["NotModelled", "ServerReport", "ServerValue", "Source", "SourceKind", "show_value"]
