"""A workload's requests as SGLang's scheduler receives them: token ids, image runs by hash, arrivals, outputs.

SGLang's scheduler never sees the kit's workload: it sees token ids. :func:`scheduled_requests` writes
each request's prompt as the ids its radix tree compares (:class:`~kimi_viz.scheduler.req.Req`): a
system prompt is the same ids for every request with the same count, a chat's later turn repeats its
earlier turn's prompt and generated tokens id for id, every other text token is the request's own, and
each image's ``<|media_pad|>`` run is an image part under the image's hash (the release's
``pad_input_ids`` turns it into pad values, :mod:`kimi_viz.scheduler.prefix`). Text ids are stand-ins
below :data:`~kimi_viz.scheduler.req.OUTPUT_BASE`, generated ids stand-ins above it, both below every
pad value.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..scheduler.req import OUTPUT_BASE, Image, Part, Req, prompt_length
from .images import RequestImage
from .prompt import MEDIA_TOKEN_IDS, Prompt
from .workload import Workload


class _Ids:
    """Hands out stand-in ids: a fresh block per text, the same block for the same shared text; generated ids from
    their own count, each request's as one run (a ``range``: a long answer costs no memory)."""

    def __init__(self) -> None:
        self.next = 0
        self.next_output = 0
        self.shared: dict[str, tuple[int, ...]] = {}

    def outputs(self, count: int) -> range:
        """Return a fresh run of ``count`` generated ids in ``[OUTPUT_BASE, 2 * OUTPUT_BASE)`` (starting over from
        the bottom when the run would pass the top)."""
        if self.next_output + count > OUTPUT_BASE:
            self.next_output = 0
        start = OUTPUT_BASE + self.next_output
        self.next_output += count
        return range(start, start + count)

    def fresh(self, count: int) -> tuple[int, ...]:
        ids = tuple((self.next + k) % OUTPUT_BASE for k in range(count))
        self.next += count
        return ids

    def named(self, name: str, count: int) -> tuple[int, ...]:
        if name not in self.shared:
            self.shared[name] = self.fresh(count)
        return self.shared[name]


def image_hash(image: RequestImage) -> int:
    """Return the number the scheduler's model hashes an image's run by: its digest's first 16 hex digits (equal
    bytes, equal hashes, as SGLang's ``item.hash``)."""
    return int(image.digest[:16], 16)


def _own_parts(prompt: Prompt, images: Sequence[RequestImage], start: int, ids: _Ids) -> list[Part]:
    """Return the parts of ``prompt`` from ``start`` on: fresh text ids, media tokens, captions, image runs."""
    parts: list[Part] = []
    for segment in prompt.segments:
        lo = max(segment.start, start)
        if lo >= segment.end:
            continue
        if segment.kind == "pads":
            assert lo == segment.start, "a continued prefix ends on a text token"
            parts.append(Image(image_hash(images[segment.image or 0]), segment.length))
        elif segment.kind in ("media_begin", "media_content", "media_end"):
            parts.append(MEDIA_TOKEN_IDS["<|" + segment.kind + "|>"])
        elif segment.kind == "caption":  # "image WxH": the same upload size writes the same caption
            width, height = images[segment.image or 0].size
            parts.extend(ids.named(f"caption:{width}x{height}", segment.length)[lo - segment.start :])
        else:
            parts.extend(ids.fresh(segment.end - lo))
    return parts


def scheduled_requests(
    workload: Workload, prompts: Sequence[Prompt], images: Sequence[Sequence[RequestImage]]
) -> list[Req]:
    """Return each request as the scheduler reads it: its prompt's ids and image runs, when it arrives, which turn
    it follows and the ids it generates. ``prompts`` and ``images`` are of each request written out whole
    (:meth:`Workload.whole`)."""
    ids = _Ids()
    out: list[Req] = []
    by_rid: dict[str, int] = {}
    for k, (request, prompt) in enumerate(zip(workload.requests, prompts)):
        parts: list[Part]
        if request.continues is not None:
            earlier = out[by_rid[request.continues]]
            parts = [*earlier.parts, *(earlier.generated_ids or ())]
        else:
            parts = list(ids.named(f"system:{request.system}", request.system)) if request.system else []
        parts += _own_parts(prompt, images[k], prompt_length(parts), ids)
        outputs = ids.outputs(request.output)
        out.append(
            Req(
                request.rid,
                tuple(parts),
                arrival=request.arrival,
                after=request.continues or request.waits_for,
                max_new_tokens=request.output,
                generated_ids=outputs,
            )
        )
        by_rid[request.rid] = k
    return out


__all__ = ["image_hash", "scheduled_requests"]
