"""A request's prompt drawn: its text, and each image's block of media tokens as the request side builds it.

:func:`draw_prompt` draws a :class:`~kimi_viz.request.prompt.Prompt` (or the
:class:`~kimi_viz.request.checks.RequestOutcome` of a client's request, which also names each image and
its original size) on one Axes:

* **the prompt, to scale** (x counts tokens): text in light grey, each image's whole block
  (``<|media_begin|>`` … ``<|media_end|>``) in that image's colour, labelled with the image, its
  ``image {W}x{H}`` text and its ``<|media_pad|>`` count; a media token written in the request's own
  text is a small vermillion span named after the token;
* **one row per image, not to scale**: the block's five parts side by side — ``<|media_begin|>``,
  the ``image {W}x{H}`` caption, ``<|media_content|>``, the pad run and ``<|media_end|>`` — each with
  its token id and position (SGLang's inclusive offsets for the pad run).

When the request side refused the request there is no expanded prompt: the ids it received are drawn
instead (text grey, every ``<|media_pad|>`` or written media token vermillion and named by where it
came from, a renderer's own image marker sky blue) with SGLang's exception under them. Every span
carries its text, so colour is never the only signal.
"""

from __future__ import annotations

from typing import Any

from matplotlib.axes import Axes

from ..preprocess.layout import spans_of
from ..request.chat import KIMI_IMAGE_PLACEHOLDER
from ..request.checks import RequestOutcome
from ..request.prompt import MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD, MEDIA_PAD_ID, MEDIA_TOKEN_IDS, Prompt
from .axes import sized_axes
from .palette import DIVERGENCE_COLOR, color_for
from .rows import LABEL_FONT, draw_row_track
from .tracks import GAP, TEXT_FILL, TRACK, TrackRun, error_text, run_columns, track_axes, track_name

MARKER_FILL = "#56B4E9"  # sky blue: the renderer's own image marker
MAX_BLOCK_ROWS = 8
# The block's parts, not to scale: share of the row's width.
_PART_WIDTHS = (("media_begin", 0.16), ("caption", 0.18), ("media_content", 0.16), ("pads", 0.34), ("media_end", 0.16))
_TOKEN_NAMES = {token: name for name, token in MEDIA_TOKEN_IDS.items()}
_PART_TOKENS = {"media_begin": MEDIA_BEGIN, "media_content": MEDIA_CONTENT, "media_end": MEDIA_END}


def draw_prompt(prompt: Prompt | RequestOutcome, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw a prompt: the text and each image's media block to scale, then each block's tokens; return the Axes."""
    outcome = prompt if isinstance(prompt, RequestOutcome) else None
    if outcome is not None and outcome.prompt is None:
        return _draw_refused(outcome, ax=ax, title=title)
    drawn: Prompt = outcome.prompt if outcome is not None and outcome.prompt is not None else prompt  # type: ignore[assignment]
    labels: dict[int, str] = {}
    sizes: dict[int, tuple[int, int]] = {}
    if outcome is not None:
        for k, request_image in enumerate(outcome.request.images):
            labels[k], sizes[k] = request_image.label, request_image.size
    blocks = _blocks(drawn)
    rows = min(len(blocks), MAX_BLOCK_ROWS)
    ax = sized_axes(ax, (11.0, 1.6 + 1.1 * (1 + rows)))
    width = max(drawn.length, 1)
    top = (1 + rows) * (TRACK + GAP)
    ylim = (-0.6 if len(blocks) <= rows else -1.2, top + 0.4)
    track_axes(ax, width, ylim, "token position (the top track; the rows below are not to scale)")
    y = top - TRACK - GAP + 0.2
    how = "text counted" if outcome is None else f"text {outcome.rendered.by}"
    track_name(ax, y + GAP * 0.45, f"the prompt ({drawn.length} tokens, {how})", "track-prompt")
    runs: list[TrackRun] = []
    for kind, start, end, image, token in _runs(drawn, blocks):
        if kind == "text":
            runs.append(((start, end), None, TEXT_FILL, 0))
        elif kind == "typed":
            runs.append(((start, end), f"written {_TOKEN_NAMES.get(token or 0, token)}", DIVERGENCE_COLOR, 1))
        else:
            assert image is not None
            pads = blocks[image]["pads"]
            size = sizes.get(image)
            caption = f"image {size[0]}x{size[1]}, " if size else ""
            name = f"image {image}: {labels[image]}" if labels.get(image) else f"image {image}"
            runs.append(((start, end), f"{name}\n{caption}{pads[1] - pads[0]} pads", color_for(image), image))
    spans, names, colors, styles = run_columns(runs)
    draw_row_track(ax, spans, y=y, height=TRACK, labels=names, style_indices=styles, colors=colors, gid_prefix="prompt")
    for image in sorted(blocks)[:rows]:
        y -= TRACK + GAP
        _draw_block(ax, image, blocks[image], sizes.get(image), labels.get(image, ""), y, width)
    if len(blocks) > rows:
        ax.text(0, -1.0, f"… and {len(blocks) - rows} more image block(s), not drawn", fontsize=LABEL_FONT)
    heading = title or (
        f"SGLang {outcome.release.version}: the prompt the request side builds, {len(blocks)} image block(s)"
        if outcome is not None
        else f"the prompt: {len(blocks)} image block(s)"
    )
    ax.set_title(heading, fontsize=LABEL_FONT + 3, loc="left")
    return ax


def _blocks(prompt: Prompt) -> dict[int, dict[str, tuple[int, int]]]:
    """Return each image's parts: kind -> [start, end) positions."""
    out: dict[int, dict[str, tuple[int, int]]] = {}
    for segment in prompt.segments:
        if segment.image is not None:
            out.setdefault(segment.image, {})[segment.kind] = (segment.start, segment.end)
    return out


def _runs(prompt: Prompt, blocks: dict[int, dict[str, tuple[int, int]]]) -> list[tuple[str, int, int, Any, Any]]:
    """Return the top track's spans: text, written media tokens, and each image's whole block."""
    runs: list[tuple[str, int, int, Any, Any]] = []
    for segment in prompt.segments:
        if segment.image is None:
            runs.append((segment.kind, segment.start, segment.end, None, segment.token))
        elif segment.kind == "media_begin":
            parts = blocks[segment.image]
            first, last = min(p[0] for p in parts.values()), max(p[1] for p in parts.values())
            runs.append(("block", first, last, segment.image, None))
    return runs


def _draw_block(
    ax: Axes,
    image: int,
    parts: dict[str, tuple[int, int]],
    size: tuple[int, int] | None,
    label: str,
    y: float,
    width: float,
) -> None:
    """Draw one image's block, its five parts side by side (not to scale), each with its id and position."""
    track_name(ax, y + GAP * 0.45, f"image {image}{': ' + label if label else ''} — its block", f"track-image-{image}")
    spans, names, cursor = [], [], 0.0
    for kind, share in _PART_WIDTHS:
        start, end = parts.get(kind, (0, 0))
        spans.append((cursor, cursor + share * width))
        cursor += share * width
        if kind == "caption":
            text = f"image {size[0]}x{size[1]}" if size else "image WxH"
            names.append(f"{text}\n{end - start} tokens (counted)")
        elif kind == "pads":
            names.append(f"{end - start} × {MEDIA_PAD} {MEDIA_PAD_ID}\noffsets ({start}, {end - 1})")
        else:
            names.append(f"{_PART_TOKENS[kind]}\n{MEDIA_TOKEN_IDS[_PART_TOKENS[kind]]} at {start}")
    draw_row_track(
        ax,
        spans,
        y=y,
        height=TRACK,
        labels=names,
        style_indices=[image] * len(spans),
        colors=[color_for(image)] * len(spans),
        gid_prefix=f"block-{image}",
    )


def _draw_refused(outcome: RequestOutcome, *, ax: Axes | None, title: str | None) -> Axes:
    """Draw the ids the processor received (its <|media_pad|> ids marked) and the exception it raised."""
    rendered = outcome.rendered
    ax = sized_axes(ax, (11.0, 3.2))
    width = max(rendered.length, 1)
    track_axes(ax, width, (-1.6, TRACK + GAP + 0.4), "token position in the ids handed to process_mm_data_async")
    y = 0.2
    track_name(
        ax,
        y + GAP * 0.45,
        f"the ids received ({rendered.length}, {rendered.by}): {rendered.placeholders} <|media_pad|> id(s) "
        f"for {len(outcome.request.images)} image(s)",
        "track-ids",
    )
    spans = spans_of(piece.length for piece in rendered.pieces)
    names: list[str | None] = []
    colors: list[str] = []
    for piece in rendered.pieces:
        if piece.kind == "text":
            names.append(None)
            colors.append(TEXT_FILL)
        elif piece.kind == "marker":
            names.append(f"{KIMI_IMAGE_PLACEHOLDER}\n{piece.origin}: not <|media_pad|>")
            colors.append(MARKER_FILL)
        else:
            names.append(f"{_TOKEN_NAMES.get(piece.token or 0, piece.token)}\n{piece.origin}")
            colors.append(DIVERGENCE_COLOR)
    if spans:
        special = iter(range(len(spans)))
        styles = [0 if name is None else next(special) for name in names]  # text plain, the marked ids alternate
        draw_row_track(
            ax, spans, y=y, height=TRACK, labels=names, style_indices=styles, colors=colors, gid_prefix="ids"
        )
    else:
        ax.text(0, y + TRACK / 2, "no ids at all (an empty prompt)", va="center", fontsize=LABEL_FONT)
    error = outcome.error
    assert error is not None
    error_text(ax, -1.4, f"{error.error} ({error.where})", "request-error")
    heading = title or f"SGLang {outcome.release.version}: the request side refuses the request"
    ax.set_title(heading, fontsize=LABEL_FONT + 3, loc="left")
    return ax


__all__ = ["draw_prompt"]
