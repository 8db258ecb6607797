"""Which requests share a prefill pass, and each one's window: a workload's prompts through the scheduler's model.

SGLang's scheduler never sees the kit's workload: it sees token ids. :func:`scheduled_requests` writes
each request's prompt as the ids its radix tree compares (:mod:`.prefill_workload`): a system prompt
is the same ids for every request with the same count, a chat's later turn repeats its earlier turn's
prompt and generated tokens id for id, every other text token is the request's own, and each image's
``<|media_pad|>`` run is an image part under the image's hash (the release's ``pad_input_ids`` turns
it into pad values, :mod:`.prefix`). :func:`plan_passes` then runs the kit's model of that release's
scheduler (:func:`~.steps.schedule_steps`: the radix prefix floored to the page, the chunked request
first, the policy's order, page-ceiled budgets, the cut at the budget, arrivals by scheduler step,
decoding requests) and returns each prefill pass as windows over the workload's requests.

``docs/scheduler-notes.md`` holds the rules and where SGLang keeps them; ``docs/whatif.md`` lists
what stays simplified (memory never short, no retraction, the plain radix tree).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from .._records import frozen
from ..errors import WhatIfError
from ..request.prompt import MEDIA_TOKEN_IDS, Prompt
from . import prefill_workload as pw
from .prefill_workload import DEFAULT_CHUNKED_PREFILL, DEFAULT_MAX_PREFILL
from .steps import schedule_steps
from .workload import Workload

TEXT_ID_SPAN = 500_000  # stand-in text ids live in [0, TEXT_ID_SPAN): below the output stand-ins and every pad value
OUTPUT_BASE = TEXT_ID_SPAN  # generated ids: [TEXT_ID_SPAN, 2 * TEXT_ID_SPAN), still below every pad value


@frozen
class Window:
    """One request's part of a pass: tokens ``[prefix, prefix + extend)`` of its prompt."""

    request: int  # the request's index in the workload
    prefix: int
    extend: int


@frozen
class PassPlan:
    """One prefill pass: each request's window in the batch's order, its scheduler step and who decodes in it."""

    windows: tuple[Window, ...]
    step: int
    decoding: tuple[int, ...] = ()  # requests decoding one token inside this pass (--enable-mixed-chunk)

    def to_json(self) -> dict[str, object]:
        """Return ``{"step", "windows": [{"request", "prefix_length", "extend_length"}], "decoding"}``."""
        return {
            "step": self.step,
            "windows": [
                {"request": w.request, "prefix_length": w.prefix, "extend_length": w.extend} for w in self.windows
            ],
            "decoding": list(self.decoding),
        }


def check_chunk_size(value: int | None, name: str = "--chunked-prefill-size") -> int | None:
    """Return the chunk size (None: chunking off, for None or any value <= 0, as SGLang reads it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise WhatIfError(f"{name}: expected a token count (or -1 for no chunking), got {value!r}")
    return value if value > 0 else None


class _Ids:
    """Hands out stand-in text ids: a fresh block per text, the same block for the same shared text."""

    def __init__(self) -> None:
        self.next = 0
        self.shared: dict[str, tuple[int, ...]] = {}

    def fresh(self, count: int) -> tuple[int, ...]:
        ids = tuple((self.next + k) % TEXT_ID_SPAN for k in range(count))
        self.next += count
        return ids

    def named(self, name: str, count: int) -> tuple[int, ...]:
        if name not in self.shared:
            self.shared[name] = self.fresh(count)
        return self.shared[name]


def _image_hash(key: str) -> int:
    """Return an image's item hash as a 64-bit number (its digest's first 16 hex digits)."""
    try:
        return int(key[:16], 16)
    except ValueError:
        return zlib.crc32(key.encode())


def _own_parts(prompt: Prompt, keys: Sequence[str], start: int, ids: _Ids) -> list[pw.Part]:
    """Return the parts of ``prompt`` from ``start`` on: fresh text ids, media tokens, captions, image runs."""
    parts: list[pw.Part] = []
    for segment in prompt.segments:
        lo = max(segment.start, start)
        if lo >= segment.end:
            continue
        if segment.kind == "pads":
            assert lo == segment.start, "a continued prefix ends on a text token"
            parts.append(pw.Image(_image_hash(keys[segment.image or 0]), segment.length))
        elif segment.kind in ("media_begin", "media_content", "media_end"):
            parts.append(MEDIA_TOKEN_IDS["<|" + segment.kind + "|>"])
        elif segment.kind == "caption":  # the same image size writes the same caption
            name = f"caption:{segment.image}:{segment.length}:{keys[segment.image or 0]}"
            parts.extend(ids.named(name, segment.length)[lo - segment.start :])
        else:
            parts.extend(ids.fresh(segment.end - lo))
    return parts


def scheduled_requests(
    workload: Workload, prompts: Sequence[Prompt], keys: Sequence[Sequence[str]]
) -> list[pw.Request]:
    """Return each request as the scheduler's model reads it: its prompt's ids and image runs, when it arrives,
    which turn it follows and the ids it generates. ``prompts`` and ``keys`` (each image's hash) are of each
    request written out whole (:meth:`Workload.whole`)."""
    ids = _Ids()
    out: list[pw.Request] = []
    by_rid: dict[str, int] = {}
    for k, (request, prompt) in enumerate(zip(workload.requests, prompts)):
        parts: list[pw.Part]
        if request.continues is not None:
            earlier = out[by_rid[request.continues]]
            parts = [*earlier.parts, *(earlier.output_ids or ())]
        else:
            parts = list(ids.named(f"system:{request.system}", request.system)) if request.system else []
        start = sum(p.length if isinstance(p, pw.Image) else 1 for p in parts)
        parts += _own_parts(prompt, keys[k], start, ids)
        outputs = tuple(OUTPUT_BASE + t for t in ids.fresh(request.output))
        out.append(
            pw.Request(
                request.rid,
                tuple(parts),
                arrival=request.arrival,
                after=request.continues,
                max_new_tokens=request.output,
                output_ids=outputs,
            )
        )
        by_rid[request.rid] = k
    return out


def passes_of(requests: Sequence[pw.Request], settings: pw.Settings, release: str) -> list[PassPlan]:
    """Return the prefill passes the kit's model of ``release``'s scheduler forms, windows by request index."""
    index = {r.rid: k for k, r in enumerate(requests)}
    steps = 1000 + sum(r.max_new_tokens + r.length for r in requests)
    passes = schedule_steps(pw.Workload(settings, tuple(requests), max_steps=steps), release)
    return [
        PassPlan(
            tuple(Window(index[w.rid], w.prefix_len, w.extend_input_len) for w in p.windows),
            p.step,
            tuple(index[rid] for rid in p.decoding),
        )
        for p in passes
    ]


def plan_passes(
    workload: Workload, prompts: Sequence[Prompt], keys: Sequence[Sequence[str]], settings: pw.Settings, release: str
) -> list[PassPlan]:
    """Return the prefill passes of ``workload`` (its requests' whole ``prompts``, each image's hash in ``keys``)."""
    return passes_of(scheduled_requests(workload, prompts, keys), settings, release)


__all__ = [
    "DEFAULT_CHUNKED_PREFILL",
    "DEFAULT_MAX_PREFILL",
    "Window",
    "PassPlan",
    "check_chunk_size",
    "passes_of",
    "plan_passes",
    "scheduled_requests",
]
