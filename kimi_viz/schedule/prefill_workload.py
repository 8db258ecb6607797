"""A prefill-scheduling workload and the passes it produced, as plain JSON-able records (no SGLang here).

A :class:`Workload` is server settings plus requests. A request's prompt is a list of *parts*: a plain
token id (``int``), or an :class:`Image` segment ``(image_hash, length)`` standing for an image's run
of ``length`` ``<|media_pad|>`` tokens. SGLang's ``pad_input_ids`` replaces each run by the release's
pad values derived from the hash (:func:`kimi_viz.schedule.prefix.padded_ids` models it; the
real-SGLang lane hands the segments to SGLang's own code), so two images share a radix prefix exactly
when SGLang would let them. A prompt that already carries pad values is given as plain ints.

Time is counted in scheduler *steps* (one event-loop iteration: one forward pass, prefill, mixed or
decode). A request joins the waiting queue at step ``arrival``, or — with ``after`` — at the first
step not before ``arrival`` that follows the finish of request ``after`` (a chat's next turn).
It generates ``max_new_tokens`` tokens (``output_ids`` when given, else distinct stand-ins below
the pad range), the first one by its last prefill pass, one more per decode step.

The same records describe what the kit's model (:func:`kimi_viz.schedule.steps.schedule_steps`) and
SGLang's own scheduler (``tests/parity/scheduler/real_scheduler.py``) make of a workload: a list of
:class:`Pass`. Everything serialises with :func:`workload_to_json` / :func:`workload_from_json` and
:func:`passes_to_json` / :func:`passes_from_json`.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict
from typing import Any, Literal

from .._records import frozen

DEFAULT_CHUNKED_PREFILL = 8192  # --chunked-prefill-size on an H200 (resolved from GPU memory)
DEFAULT_MAX_PREFILL = 16384  # --max-prefill-tokens
SchedulePolicy = Literal["fcfs", "lpm"]
SCHEDULE_POLICIES: tuple[SchedulePolicy, ...] = ("fcfs", "lpm")  # --schedule-policy values the kit models
MEDIA_PAD = 163605  # <|media_pad|>, Kimi-K3's image token id
OUTPUT_BASE = 600_000  # stand-in output ids live in [OUTPUT_BASE, OUTPUT_BASE + 300_000): below every pad value


@frozen
class Image:
    """An image's pad run in a prompt: ``length`` pad tokens under the item hash ``image_hash``."""

    image_hash: int
    length: int

    def __post_init__(self) -> None:
        if self.length <= 0:
            raise ValueError(f"an image run needs at least one token, got {self.length}")
        if not 0 <= self.image_hash < 1 << 64:
            raise ValueError(f"image_hash must fit in 64 unsigned bits, got {self.image_hash}")


Part = int | Image


@frozen
class Request:
    """One request: its prompt parts, when it arrives and what it generates."""

    rid: str
    parts: tuple[Part, ...]
    arrival: int = 0
    after: str | None = None  # arrive only once this request has finished
    max_new_tokens: int = 1
    output_ids: tuple[int, ...] | None = None  # the tokens it generates (len == max_new_tokens)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"{self.rid}: max_new_tokens must be >= 1")
        if self.output_ids is not None and len(self.output_ids) != self.max_new_tokens:
            raise ValueError(f"{self.rid}: {len(self.output_ids)} output ids for max_new_tokens={self.max_new_tokens}")

    @property
    def length(self) -> int:
        """Return the prompt length in tokens."""
        return sum(p.length if isinstance(p, Image) else 1 for p in self.parts)

    def outputs(self) -> list[int]:
        """Return the tokens this request generates, in order."""
        if self.output_ids is not None:
            return list(self.output_ids)
        return [OUTPUT_BASE + zlib.crc32(f"{self.rid}:{k}".encode()) % 300_000 for k in range(self.max_new_tokens)]

    def token_ids(self) -> list[int]:
        """Return the prompt with each image run as ``<|media_pad|>`` tokens (what the processor emits)."""
        ids: list[int] = []
        for part in self.parts:
            ids.extend([MEDIA_PAD] * part.length if isinstance(part, Image) else [int(part)])
        return ids

    def images(self) -> list[tuple[int, int, int]]:
        """Return ``(image_hash, start, end_inclusive)`` per image run (SGLang's item offsets)."""
        spans, pos = [], 0
        for part in self.parts:
            if isinstance(part, Image):
                spans.append((part.image_hash, pos, pos + part.length - 1))
                pos += part.length
            else:
                pos += 1
        return spans


@frozen
class Settings:
    """The server flags that shape prefill passes (None: the flag's meaning of "off", see the notes)."""

    page_size: int = 1
    disable_radix_cache: bool = False
    schedule_policy: str = "fcfs"
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL
    chunked_prefill_size: int | None = DEFAULT_CHUNKED_PREFILL  # None or <= 0: no chunking
    enable_mixed_chunk: bool = False
    # Which tree cache to build: "radix" = RadixCache (ChunkCache for --disable-radix-cache where the
    # release has one), "default" = what the release's default factory builds for a full-attention
    # model (0.5.23: UnifiedRadixCache with the FULL component).
    tree_cache: str = "radix"
    exact_chunk_fill: bool = False  # force SGLANG_EXACT_CHUNK_FILL's path (0.5.20+, gfx95-only in SGLang)


@frozen
class Workload:
    """Server settings and the requests, in arrival order (ties keep this order, as the queue does)."""

    settings: Settings
    requests: tuple[Request, ...]
    max_steps: int = 10_000

    def __post_init__(self) -> None:
        rids = [r.rid for r in self.requests]
        if len(set(rids)) != len(rids):
            raise ValueError("request ids must be unique")
        for r in self.requests:
            if r.after is not None and r.after not in rids:
                raise ValueError(f"{r.rid}: after={r.after!r} names no request")


@frozen
class Window:
    """One request's part of a pass: its tokens ``[prefix_len, prefix_len + extend_input_len)``."""

    rid: str
    prefix_len: int
    extend_input_len: int


@frozen
class Pass:
    """One prefill (or mixed) forward: its windows in batch order, the request left chunked, the decoding rows."""

    step: int
    windows: tuple[Window, ...]
    chunked: str | None = None  # the request cut by this pass (continued first in the next one)
    decoding: tuple[str, ...] = ()  # requests decoding one token inside this pass (--enable-mixed-chunk)
    finished: tuple[str, ...] = ()  # requests that finished at the end of this pass
    release: str = ""  # the SGLang release that produced it


def _part_to_json(part: Part) -> Any:
    return {"image": part.image_hash, "length": part.length} if isinstance(part, Image) else int(part)


def _part_from_json(value: Any) -> Part:
    if isinstance(value, dict):
        return Image(int(value["image"]), int(value["length"]))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return Image(int(value[0]), int(value[1]))
    return int(value)


def workload_to_json(workload: Workload) -> dict[str, Any]:
    """Return the workload as JSON-able data (images as ``{"image": hash, "length": n}``)."""
    return {
        "settings": asdict(workload.settings),
        "max_steps": workload.max_steps,
        "requests": [
            {
                "rid": r.rid,
                "parts": [_part_to_json(p) for p in r.parts],
                "arrival": r.arrival,
                "after": r.after,
                "max_new_tokens": r.max_new_tokens,
                "output_ids": None if r.output_ids is None else list(r.output_ids),
            }
            for r in workload.requests
        ],
    }


def workload_from_json(data: dict[str, Any]) -> Workload:
    """Return the workload :func:`workload_to_json` wrote (an image may also be ``[hash, length]``)."""
    requests = tuple(
        Request(
            rid=str(r["rid"]),
            parts=tuple(_part_from_json(p) for p in r["parts"]),
            arrival=int(r.get("arrival", 0)),
            after=r.get("after"),
            max_new_tokens=int(r.get("max_new_tokens", 1)),
            output_ids=None if r.get("output_ids") is None else tuple(int(t) for t in r["output_ids"]),
        )
        for r in data["requests"]
    )
    return Workload(Settings(**data.get("settings", {})), requests, int(data.get("max_steps", 10_000)))


def passes_to_json(passes: list[Pass]) -> list[dict[str, Any]]:
    """Return the passes as JSON-able data."""
    return [asdict(p) for p in passes]


def passes_from_json(data: list[dict[str, Any]]) -> list[Pass]:
    """Return the passes :func:`passes_to_json` wrote."""
    return [
        Pass(
            step=int(p["step"]),
            windows=tuple(Window(**w) for w in p["windows"]),
            chunked=p.get("chunked"),
            decoding=tuple(p.get("decoding", ())),
            finished=tuple(p.get("finished", ())),
            release=p.get("release", ""),
        )
        for p in data
    ]


def text_requests(lengths: list[int], arrivals: list[int] | None = None) -> list[Request]:
    """Return text-only requests ``r0``, ``r1``, ... of ``lengths`` tokens, arriving at ``arrivals`` (default step 0),
    every token distinct so no two share a prefix."""
    requests, start = [], 0
    for k, length in enumerate(lengths):
        arrival = 0 if arrivals is None else arrivals[k]
        requests.append(Request(f"r{k}", tuple(range(start, start + length)), arrival=arrival))
        start += length
    return requests


def chat_turn(previous: Request, answer: list[int], new_parts: list[Part], rid: str, **kw: Any) -> Request:
    """Return the next chat turn: ``previous``'s prompt, its answer, then ``new_parts``, arriving after it."""
    return Request(rid=rid, parts=(*previous.parts, *answer, *new_parts), after=previous.rid, **kw)


__all__ = [
    "DEFAULT_CHUNKED_PREFILL",
    "DEFAULT_MAX_PREFILL",
    "SCHEDULE_POLICIES",
    "SchedulePolicy",
    "MEDIA_PAD",
    "Image",
    "Part",
    "Pass",
    "Request",
    "Settings",
    "Window",
    "Workload",
    "chat_turn",
    "text_requests",
    "passes_from_json",
    "passes_to_json",
    "workload_from_json",
    "workload_to_json",
]
