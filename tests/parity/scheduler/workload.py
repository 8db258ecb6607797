"""The scheduler lane's workload: the kit's ``Req`` records and server flags, plus what only the lane draws.

Both sides read the same :class:`Workload`: the kit's model (:func:`kit_passes`, the package's
:func:`kimi_viz.scheduler.event_loop.schedule`) and SGLang's own scheduler (``real_scheduler.py``, through
:meth:`Workload.to_json`). ``tree_cache`` and ``exact_chunk_fill`` exist for the real side only: which of
the release's tree classes to build (the plain ``RadixCache`` or 0.5.23's default ``UnifiedRadixCache``
with the FULL component, which must form the same passes) and whether to force
``SGLANG_EXACT_CHUNK_FILL``'s path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from kimi_viz.releases import RELEASES
from kimi_viz.request.prompt import MEDIA_PAD_ID
from kimi_viz.scheduler.event_loop import Pass, schedule
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Image, Part, Req, Window


@dataclass(frozen=True)
class Workload:
    """Server flags and the requests, in arrival order (ties keep this order, as the queue does)."""

    settings: LoadSettings
    requests: tuple[Req, ...]
    max_steps: int = 10_000
    tree_cache: str = field(default="radix")  # "radix" or "default" (0.5.23's UnifiedRadixCache, FULL only)
    exact_chunk_fill: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the workload as the real scheduler reads it."""
        data = reqs_to_json(self.settings, list(self.requests), self.max_steps)
        data["settings"] |= {"tree_cache": self.tree_cache, "exact_chunk_fill": self.exact_chunk_fill}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        """Return the workload :meth:`to_json` wrote."""
        settings, reqs, max_steps = reqs_from_json(data)
        lane = data.get("settings", {})
        return cls(
            settings, tuple(reqs), max_steps, lane.get("tree_cache", "radix"), lane.get("exact_chunk_fill", False)
        )


def _part_to_json(part: Part) -> Any:
    return {"image": part.image_hash, "length": part.length} if isinstance(part, Image) else int(part)


def _part_from_json(value: Any) -> Part:
    if isinstance(value, dict):
        return Image(int(value["image"]), int(value["length"]))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return Image(int(value[0]), int(value[1]))
    return int(value)


def reqs_to_json(settings: LoadSettings, reqs: list[Req], max_steps: int) -> dict[str, Any]:
    """Return the settings and requests as JSON-able data (images as ``{"image": hash, "length": n}``)."""
    return {
        "settings": settings.to_json(),
        "max_steps": max_steps,
        "requests": [
            {
                "rid": r.rid,
                "parts": [_part_to_json(p) for p in r.parts],
                "arrival": r.arrival,
                "after": r.after,
                "max_new_tokens": r.max_new_tokens,
                "output_ids": None if r.generated_ids is None else list(r.generated_ids),
            }
            for r in reqs
        ],
    }


def reqs_from_json(data: dict[str, Any]) -> tuple[LoadSettings, list[Req], int]:
    """Return the settings, requests and step limit :func:`reqs_to_json` wrote (an image may be ``[hash, n]``)."""
    known = {f.name for f in fields(LoadSettings)}
    settings = LoadSettings(**{k: v for k, v in data.get("settings", {}).items() if k in known})
    reqs = [
        Req(
            str(r["rid"]),
            tuple(_part_from_json(p) for p in r["parts"]),
            arrival=int(r.get("arrival", 0)),
            after=r.get("after"),
            max_new_tokens=int(r.get("max_new_tokens", 1)),
            generated_ids=None if r.get("output_ids") is None else tuple(int(t) for t in r["output_ids"]),
        )
        for r in data["requests"]
    ]
    return settings, reqs, int(data.get("max_steps", 10_000))


def passes_to_json(passes: list[Pass]) -> list[dict[str, Any]]:
    """Return the passes as JSON-able data."""
    return [
        {
            "step": p.step,
            "windows": [
                {"rid": w.rid, "prefix_len": w.prefix_len, "extend_input_len": w.extend_input_len} for w in p.windows
            ],
            "chunked": p.chunked,
            "decoding": list(p.decoding),
            "finished": list(p.finished),
            "release": p.release,
        }
        for p in passes
    ]


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


def token_ids(request: Req) -> list[int]:
    """Return the prompt with each image run as ``<|media_pad|>`` tokens (what the processor emits)."""
    ids: list[int] = []
    for part in request.parts:
        ids.extend([MEDIA_PAD_ID] * part.length if isinstance(part, Image) else [int(part)])
    return ids


def image_offsets(request: Req) -> list[tuple[int, int, int]]:
    """Return ``(image_hash, start, end_inclusive)`` per image run (SGLang's item offsets)."""
    spans, pos = [], 0
    for part in request.parts:
        if isinstance(part, Image):
            spans.append((part.image_hash, pos, pos + part.length - 1))
            pos += part.length
        else:
            pos += 1
    return spans


def kit_passes(workload: Workload, release: str) -> list[Pass]:
    """Return the passes the kit's model of ``release``'s scheduler forms for ``workload``."""
    rules = RELEASES[release].scheduler
    return schedule(list(workload.requests), workload.settings, rules, release, workload.max_steps)


def chat_turn(previous: Req, answer: list[int], new_parts: list[Part], rid: str, **kw: Any) -> Req:
    """Return the next chat turn: ``previous``'s prompt, its answer, then ``new_parts``, arriving after it."""
    return Req(rid, (*previous.parts, *answer, *new_parts), after=previous.rid, **kw)


def text_requests(lengths: list[int], arrivals: list[int] | None = None) -> list[Req]:
    """Return text-only requests ``r0``, ``r1``, ... of ``lengths`` tokens, arriving at ``arrivals`` (default step 0),
    every token distinct so no two share a prefix."""
    requests, start = [], 0
    for k, length in enumerate(lengths):
        arrival = 0 if arrivals is None else arrivals[k]
        requests.append(Req(f"r{k}", tuple(range(start, start + length)), arrival=arrival))
        start += length
    return requests
