"""The prompt a request side renders for a request: text, then each image's block with its ``<|media_pad|>`` run.

Kimi-K3's image block (pipeline spec §8) is ``<|media_begin|>image {W}x{H}<|media_content|>`` followed
by one ``<|media_pad|>`` per merged token of the image and ``<|media_end|>``; ``W×H`` is the upload's
size. SGLang records each image's run of pads as the item's ``offsets``: one inclusive
``(start, end)`` pair in the request's full token sequence, which the forward pass reads to decide
which images a prefill chunk touches and which feature row lands on which token.

The media tokens and their ids are exact. Ordinary text is counted, not tokenized: a request says how
many text tokens stand before, between and after its images, and the ``image {W}x{H}`` caption is
counted as :func:`caption_tokens` tokens (the real tokenizer's count may differ by a token or two,
which moves every later offset alike and changes no outcome the kit reports). A prompt rendered from a
client's chat request (:mod:`.chat`) counts its text the same way, and keeps any media token the
client wrote into the text as a ``typed`` segment with its id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .._records import frozen
from ..errors import ArgumentError

MEDIA_BEGIN = "<|media_begin|>"
MEDIA_CONTENT = "<|media_content|>"
MEDIA_END = "<|media_end|>"
MEDIA_PAD = "<|media_pad|>"
#: Token ids of Kimi-K3's media tokens (``media_placeholder_token_id`` is SGLang's name for the pad's).
MEDIA_TOKEN_IDS = {MEDIA_BEGIN: 163602, MEDIA_CONTENT: 163603, MEDIA_END: 163604, MEDIA_PAD: 163605}
MEDIA_PAD_ID = MEDIA_TOKEN_IDS[MEDIA_PAD]

SegmentKind = Literal["text", "media_begin", "caption", "media_content", "pads", "media_end", "typed"]


def caption_tokens(width: int, height: int) -> int:
    """Return the tokens counted for the ``image {W}x{H}`` caption: ``image``, the width, ``x``, the height."""
    return 1 + len(str(width)) // 3 + 1 + 1 + len(str(height)) // 3 + 1


@frozen
class Segment:
    """A run of one kind of token in a prompt: ``[start, start + length)``, and the image it belongs to."""

    kind: SegmentKind
    start: int
    length: int
    image: int | None = None  # the request's image, for the media tokens
    token: int | None = None  # a ``typed`` segment's id: a media token written in the request's own text

    @property
    def end(self) -> int:
        """Return the first position after the segment."""
        return self.start + self.length


@frozen
class Prompt:
    """One request's prompt as positions: its segments in order, each image's pad run, and its length."""

    segments: tuple[Segment, ...]

    @property
    def length(self) -> int:
        """Return the number of tokens."""
        return self.segments[-1].end if self.segments else 0

    @property
    def pad_runs(self) -> list[tuple[int, int]]:
        """Return each image's ``<|media_pad|>`` run as SGLang's inclusive ``(start, end)`` offsets, image order."""
        return [(s.start, s.end - 1) for s in self.segments if s.kind == "pads"]

    @property
    def pad_tokens(self) -> int:
        """Return the number of ``<|media_pad|>`` tokens in the prompt."""
        return sum(s.length for s in self.segments if s.kind == "pads")


def render_prompt(
    image_tokens: list[int],
    sizes: list[tuple[int, int]],
    *,
    before: int = 32,
    between: int | Sequence[int] = 8,
    after: int = 32,
) -> Prompt:
    """Return the :class:`Prompt` of a request: ``before`` text tokens, each image's block (``between`` text
    tokens apart), then ``after`` text tokens; ``image_tokens[k]`` pads for image ``k`` of upload size ``sizes[k]``.

    ``between`` is one count for every gap, or one count per gap (``len(image_tokens) - 1`` of them).
    """
    gaps = [between] * max(0, len(image_tokens) - 1) if isinstance(between, int) else list(between)
    if len(gaps) != max(0, len(image_tokens) - 1):
        raise ArgumentError(
            f"render_prompt: between has {len(gaps)} gaps for {len(image_tokens)} images; expected one per gap"
        )
    segments: list[Segment] = []
    position = 0

    def add(kind: SegmentKind, length: int, image: int | None = None) -> None:
        nonlocal position
        if length > 0:
            segments.append(Segment(kind, position, length, image))
            position += length

    add("text", before)
    for k, (tokens, (width, height)) in enumerate(zip(image_tokens, sizes)):
        if k:
            add("text", gaps[k - 1])
        add("media_begin", 1, k)
        add("caption", caption_tokens(width, height), k)
        add("media_content", 1, k)
        add("pads", tokens, k)
        add("media_end", 1, k)
    add("text", after)
    return Prompt(tuple(segments))


__all__ = [
    "MEDIA_BEGIN",
    "MEDIA_CONTENT",
    "MEDIA_END",
    "MEDIA_PAD",
    "MEDIA_TOKEN_IDS",
    "MEDIA_PAD_ID",
    "Segment",
    "Prompt",
    "caption_tokens",
    "render_prompt",
]
