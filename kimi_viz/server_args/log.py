"""A server's log as input: the start-up lines that say what the server ran, and the prefill passes it logged.

What a Kimi-K3 server writes about itself (spec §12; the same text in every release 0.5.17–0.5.23):

* ``server_args=…`` once at start-up (``entrypoints/engine.py``): the arguments as the server resolved them,
  read by :func:`~.literal.read_arguments` (never evaluated);
* on TP rank 0, the scheduler's pool line (``managers/scheduler.py``): ``max_total_num_tokens=…,
  chunked_prefill_size=…, max_prefill_tokens=…, max_running_requests=…, context_len=…, available_gpu_mem=… GB``;
* the mamba pool (``mem_cache/memory_pool.py``): ``Mamba Cache is allocated. max_mamba_cache_size: N, …``;
* each prefill pass (``managers/scheduler_components/metrics_reporter.py``): ``Prefill batch, #new-seq: N,
  #new-token: T, #cached-token: C, …``;
  the last one before a traceback describes the pass that raised;
* a retraction: ``KV cache pool is full. Retract requests. #retracted_reqs: N, …``.

No line says the release; a version a person or tool wrote into the log (``sglang==0.5.23``,
``sglang: 0.5.23``, an image tag ``sglang:v0.5.23``) is taken when present. :class:`LogReader` takes the log a
line at a time (:meth:`LogReader.feed`), keeping only the newest start-up and a bounded tail of prefill
passes, so a log of any size is read in bounded memory; :func:`read_server_log` streams a file through it.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from .._records import frozen
from ..errors import ServerInputError
from ..files import file_kind
from ..terminal import escape_value
from .literal import Arguments, read_arguments

BLOCK = 1 << 20  # bytes read at a time
MAX_LINE = 8 << 20  # a longer line (no start-up line is near it: 0.5.23's is ~30 KB) is skipped, not kept
KEPT_PREFILLS = 64  # the prefill lines kept (the newest)
_ARGS = "server_args="
_POOL = re.compile(
    r"max_total_num_tokens=(?P<kv>\d+), chunked_prefill_size=(?P<chunk>-?\d+|None), "
    r"max_prefill_tokens=(?P<prefill>\d+), max_running_requests=(?P<rows>\d+), context_len=(?P<context>\d+)"
    r"(?:, available_(?:gpu|cpu)_mem=(?P<mem>[\d.]+) GB)?"
)
_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+)")
_PREFILL = re.compile(
    r"Prefill batch(?: \[(?P<iter>\d+)\])?, #new-seq: (?P<seqs>\d+), #new-token: (?P<new>\d+), "
    r"#cached-token: (?P<cached>\d+)(?:, .*?#running-req: (?P<running>\d+), #queue-req: (?P<queue>\d+))?"
)
_RETRACT = re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: (?P<reqs>\d+)")
_VERSION = re.compile(
    r"(?:\bsglang(?:==|\s*:\s*|\s+version\s+|\s+v?|:v)|\bSGLang\s+(?:version\s+)?v?)(?P<version>\d+\.\d+\.\d+(?:\.post\d+)?)",
    re.IGNORECASE,
)
_TP_RANK = re.compile(r"\bTP(\d+)\b")


@frozen
class StartupArguments:
    """The ``server_args=`` line of one start-up."""

    line: int
    arguments: Arguments


@frozen
class PoolLine:
    """The scheduler's pool line: the memory the server runs with, as it resolved it."""

    line: int
    max_total_num_tokens: int
    chunked_prefill_size: int | None  # None or -1 printed: chunking off
    max_prefill_tokens: int
    max_running_requests: int
    context_len: int
    available_mem_gb: float | None


@frozen
class MambaPoolLine:
    """The mamba pool line: the linear-attention state slots."""

    line: int
    max_mamba_cache_size: int


@frozen
class PrefillLine:
    """One ``Prefill batch`` line: how many requests the pass took, their new and cached tokens."""

    line: int
    new_seq: int
    new_token: int
    cached_token: int
    running_req: int | None
    queue_req: int | None


@frozen
class VersionLine:
    """A line naming the SGLang release (written by a person or a tool: the server prints none)."""

    line: int
    version: str


@frozen
class ServerStart:
    """What one start-up of the server printed about itself (each part None when the log lacks its line)."""

    arguments: StartupArguments | None
    pool: PoolLine | None
    mamba: MambaPoolLine | None
    version: VersionLine | None

    @property
    def first_line(self) -> int:
        """Return the line of its first start-up line (0 when it has none)."""
        lines = [p.line for p in (self.arguments, self.pool, self.mamba) if p is not None]
        return min(lines) if lines else 0

    @property
    def empty(self) -> bool:
        """Return True when no start-up line was read."""
        return self.arguments is None and self.pool is None and self.mamba is None


NO_START = ServerStart(None, None, None, None)


@frozen
class ServerLog:
    """What a server's log says about the server: its newest start-up, the prefill passes it logged last."""

    source: str  # the log as the user named it
    start: ServerStart  # the newest start-up (NO_START when the log has none)
    starts: int  # how many start-ups the log holds
    prefills: tuple[PrefillLine, ...]  # the newest prefill lines, oldest first
    retractions: int  # "KV cache pool is full. Retract requests." lines
    lines: int  # lines read
    skipped_lines: int  # lines over MAX_LINE, not read

    @property
    def last_prefill(self) -> PrefillLine | None:
        """Return the newest ``Prefill batch`` line, or None."""
        return self.prefills[-1] if self.prefills else None


@dataclass
class LogReader:
    """Reads a log a line at a time: the newest start-up's lines, a bounded tail of prefill lines.

    A start-up's ``server_args=`` line begins a new start-up; the pool and mamba lines that follow belong to it.
    """

    source: str = "the log"
    start: ServerStart = NO_START
    starts: int = 0
    prefills: deque[PrefillLine] = field(default_factory=lambda: deque(maxlen=KEPT_PREFILLS))
    retractions: int = 0
    lines: int = 0
    skipped_lines: int = 0
    version: VersionLine | None = None  # a version line, wherever it stands (kept across start-ups)

    def feed(self, number: int, text: str) -> None:
        """Read line ``number`` (its text without the line end)."""
        self.lines = max(self.lines, number)
        if _ARGS in text:
            arguments = read_arguments(text[text.index(_ARGS) + len(_ARGS) :])
            if arguments is not None:
                self.starts += 1
                self.prefills.clear()
                self.retractions = 0
                self.start = ServerStart(StartupArguments(number, arguments), None, None, self.version)
                return
        if "max_total_num_tokens=" in text and (match := _POOL.search(text)):
            rank = _TP_RANK.search(text[: match.start()])
            if rank is None or rank.group(1) == "0":
                chunk = None if match["chunk"] == "None" or int(match["chunk"]) <= 0 else int(match["chunk"])
                pool = PoolLine(
                    number,
                    int(match["kv"]),
                    chunk,
                    int(match["prefill"]),
                    int(match["rows"]),
                    int(match["context"]),
                    None if match["mem"] is None else float(match["mem"]),
                )
                self._startup(pool=pool)
            return
        if "Mamba Cache" in text and (match := _MAMBA.search(text)):
            rank = _TP_RANK.search(text[: match.start()])
            if rank is None or rank.group(1) == "0":  # every rank allocates its pool; rank 0's line speaks for them
                self._startup(mamba=MambaPoolLine(number, int(match["slots"])))
            return
        if "Prefill batch" in text and (match := _PREFILL.search(text)):
            running, queue = match["running"], match["queue"]
            self.prefills.append(
                PrefillLine(
                    number,
                    int(match["seqs"]),
                    int(match["new"]),
                    int(match["cached"]),
                    None if running is None else int(running),
                    None if queue is None else int(queue),
                )
            )
            return
        if "Retract requests" in text and _RETRACT.search(text):
            self.retractions += 1
            return
        if ("sglang" in text or "SGLang" in text) and (match := _VERSION.search(text)):
            self.version = VersionLine(number, match["version"])
            self.start = ServerStart(self.start.arguments, self.start.pool, self.start.mamba, self.version)

    def _startup(self, *, pool: PoolLine | None = None, mamba: MambaPoolLine | None = None) -> None:
        start = self.start
        if start.empty:
            self.starts += 1
        # a second pool line without a new server_args= line is another start-up's (the args line was lost)
        if (pool is not None and start.pool is not None) or (mamba is not None and start.mamba is not None):
            self.starts += 1
            self.prefills.clear()
            self.retractions = 0
            start = ServerStart(None, None, None, self.version)
        self.start = ServerStart(
            start.arguments,
            pool if pool is not None else start.pool,
            mamba if mamba is not None else start.mamba,
            self.version,
        )

    def result(self) -> ServerLog:
        """Return what was read so far."""
        return ServerLog(
            self.source,
            self.start,
            self.starts,
            tuple(self.prefills),
            self.retractions,
            self.lines,
            self.skipped_lines,
        )


def _lines(stream: BinaryIO, reader: LogReader) -> Iterator[tuple[int, str]]:
    """Yield ``(number, text)`` for every line of ``stream``, a block at a time; a line over MAX_LINE is counted
    as skipped and never held whole."""
    number = 0
    carry = b""
    dropping = False
    while block := stream.read(BLOCK):
        if isinstance(block, str):
            block = block.encode("utf-8", "surrogateescape")
        data = carry + block
        parts = data.split(b"\n")
        carry = parts.pop()
        for part in parts:
            number += 1
            if dropping or len(part) > MAX_LINE:
                dropping = False
                reader.skipped_lines += 1
                continue
            yield number, part.decode("utf-8", "replace").rstrip("\r")
        if len(carry) > MAX_LINE:
            carry, dropping = b"", True
    if carry or dropping:
        number += 1
        if dropping:
            reader.skipped_lines += 1
        else:
            yield number, carry.decode("utf-8", "replace").rstrip("\r")


def read_log_stream(stream: BinaryIO, *, source: str) -> ServerLog:
    """Return what the log ``stream`` says about its server, read a block at a time in bounded memory.

    Raise ServerInputError when the stream is binary (a NUL byte in its first block).
    """
    reader = LogReader(source)
    first = True
    for number, text in _lines(stream, reader):
        if first and "\x00" in text:
            raise ServerInputError(f"{source}: holds NUL bytes, so it is no text log; expected a server's log file")
        first = False
        reader.feed(number, text)
    return reader.result()


LOOKED_FOR = (
    "the start-up line 'server_args=…' (entrypoints/engine.py), the scheduler's pool line "
    "'max_total_num_tokens=…, chunked_prefill_size=…' and the mamba pool line 'max_mamba_cache_size: …'"
)


def read_server_log(path: str | os.PathLike[str], *, option: str = "--server-log") -> ServerLog:
    """Return what the log file ``path`` says about its server; raise ServerInputError (one line) for a missing,
    unreadable, binary file or one with no start-up line."""
    shown = f"{option} {escape_value(str(path))!r}"
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        raise ServerInputError(f"{shown}: no such file; expected the log a server wrote at start-up") from None
    if not stat.S_ISREG(info.st_mode):
        raise ServerInputError(f"{shown}: is {file_kind(info.st_mode)}; expected a regular log file")
    try:
        with open(path, "rb") as handle:
            log = read_log_stream(handle, source=shown)
    except OSError as exc:
        raise ServerInputError(f"{shown}: cannot be read ({exc.strerror or exc}); check its permissions") from None
    if log.start.empty:
        raise ServerInputError(
            f"{shown}: no start-up line in its {log.lines} line(s); looked for {LOOKED_FOR} — pass the log from the "
            "server's start, or give the launch command with --server"
        )
    return log


__all__ = [
    "KEPT_PREFILLS",
    "LOOKED_FOR",
    "MAX_LINE",
    "LogReader",
    "MambaPoolLine",
    "NO_START",
    "PoolLine",
    "PrefillLine",
    "ServerLog",
    "ServerStart",
    "StartupArguments",
    "VersionLine",
    "read_log_stream",
    "read_server_log",
]
