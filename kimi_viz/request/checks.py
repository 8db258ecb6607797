"""The request side's own checks on a client's request, in SGLang's order, with SGLang's exact messages.

:func:`check_request` takes the ids a request reaches ``KimiK3ImageProcessor.process_mm_data_async``
as (:func:`~.chat.render_request`) and replays what one release does with them, in SGLang's order:

* no image, video or audio data → the tokenizer manager never calls the processor;
* video or audio data → ``Kimi-K3 supports image input only``;
* on 0.5.23, caller-supplied ``mm_hashes`` → ``Caller-supplied mm_hashes are not supported for Kimi.``;
* ``<|media_pad|>`` ids ≠ images → ``Kimi image placeholders must map one-to-one to image data:
  expected N, found M token(s)``;
* the images are loaded (0.5.17 and the uncached path count what loaded: ``… expected N, loaded M``);
* ``_expand_k3_image_prompt_token_ids`` checks the sizes and the placeholder count again
  (``Expected N image placeholder token(s), found M.``, equal by then on the id path) and frames each
  pad as ``<|media_begin|>image {W}x{H}<|media_content|>`` + ``num_tokens`` × ``<|media_pad|>`` +
  ``<|media_end|>``;
* from 0.5.18, ``compose_request`` checks one pad run per image (``Expected one Kimi-K3 image span
  for each image``).

Where a check differs between releases, :class:`~kimi_viz.releases.RequestSide` says so
(``rejects_caller_identity``, ``checks_spans``, ``one_to_one_line``). The result is a
:class:`RequestOutcome`: SGLang's exception type and message, or the expanded prompt with each image's
media span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._records import frozen
from ..errors import WhatIfError
from ..message_catalogue.messages import (
    MSG_CALLER_MM_HASHES,
    MSG_IMAGE_ONLY,
    MSG_K3_SPANS,
    MSG_ONE_TO_ONE,
    MSG_ONE_TO_ONE_LOADED,
    MSG_ORIGINAL_SIZES,
    MSG_PLACEHOLDER_TOKENS,
)
from ..preprocess.config import get_config
from ..preprocess.resize import resize_config
from ..release_changes.rules import releases_where
from ..releases import RELEASES, Release, release_for
from ..split.cause import ErrorInfo
from .chat import KIMI_IMAGE_PLACEHOLDER, ChatRequest, Rendered, Renderer, render_request
from .images import RequestImage
from .prompt import (
    MEDIA_BEGIN,
    MEDIA_CONTENT,
    MEDIA_END,
    MEDIA_PAD_ID,
    MEDIA_TOKEN_IDS,
    Prompt,
    Segment,
    SegmentKind,
    caption_tokens,
)
from .settings import ServerSettings
from .sides import BuildPath, build_path

CheckOutcome = Literal["passed", "raised", "skipped"]

_CHAT_FILE = "entrypoints/openai/serving_chat.py"
_K3_FILE = "multimodal/processors/kimi_k3.py"


@frozen
class Check:
    """One check on the way from the body to the processor's output: where, and how it ended."""

    name: str
    where: str  # file and function (line for the one-to-one check)
    outcome: CheckOutcome
    detail: str

    def to_json(self) -> dict[str, str]:
        """Return ``{"name", "where", "outcome", "detail"}``."""
        return {"name": self.name, "where": self.where, "outcome": self.outcome, "detail": self.detail}


@frozen
class RequestError:
    """What the request side raises: the exception (its type and SGLang's exact message), and where."""

    error: ErrorInfo
    where: str

    def to_json(self) -> dict[str, str]:
        """Return ``{"type", "message", "where"}``."""
        return {**self.error.to_json(), "where": self.where}


@frozen
class MediaSpan:
    """One image's block in the expanded prompt: where each of its media tokens sits."""

    image: int
    label: str
    size: tuple[int, int]
    begin: int  # position of <|media_begin|>
    caption: tuple[int, int]  # [start, end) of the "image {W}x{H}" text (counted)
    content: int  # position of <|media_content|>
    pads: tuple[int, int]  # SGLang's inclusive (start, end) offsets of the <|media_pad|> run
    end: int  # position of <|media_end|>

    @property
    def caption_text(self) -> str:
        """Return the original-size text SGLang writes: ``image {W}x{H}``."""
        return f"image {self.size[0]}x{self.size[1]}"

    @property
    def pad_count(self) -> int:
        """Return the image's ``<|media_pad|>`` count (its ``num_tokens``)."""
        return self.pads[1] - self.pads[0] + 1

    def to_json(self) -> dict[str, Any]:
        """Return the span's positions, size text and pad count."""
        return {
            "image": self.image,
            "label": self.label,
            "size": list(self.size),
            "caption": self.caption_text,
            "media_begin": self.begin,
            "caption_tokens": list(self.caption),
            "media_content": self.content,
            "pads": list(self.pads),
            "pad_count": self.pad_count,
            "media_end": self.end,
        }


@dataclass
class RequestOutcome:
    """One request on one release's request side: the ids rendered, each check, and the error or the prompt."""

    request: ChatRequest
    release: Release
    renderer: Renderer
    rendered: Rendered
    checks: tuple[Check, ...]
    error: RequestError | None
    prompt: Prompt | None  # the prompt after expansion (None when a check raises)
    image_tokens: tuple[int, ...]  # each image's <|media_pad|> count
    notes: tuple[str, ...] = ()
    processed: bool = True  # False: no multimodal data, the image processor is never called

    @property
    def failed(self) -> bool:
        """Return True when the request side raises."""
        return self.error is not None

    @property
    def raised_check(self) -> str | None:
        """Return the name of the check that raised (``"one-to-one"``, ``"caller identities"``, ...), or None."""
        return self.checks[-1].name if self.error is not None else None

    def error_info(self) -> ErrorInfo | None:
        """Return what the request side raises as an :class:`~kimi_viz.split.cause.ErrorInfo`, or None."""
        return None if self.error is None else self.error.error

    def media_spans(self) -> list[MediaSpan]:
        """Return each image's block in the expanded prompt (empty when a check raised)."""
        if self.prompt is None:
            return []
        spans = []
        by_image: dict[int, dict[str, Segment]] = {}
        for segment in self.prompt.segments:
            if segment.image is not None:
                by_image.setdefault(segment.image, {})[segment.kind] = segment
        for k, parts in sorted(by_image.items()):
            image = self.request.images[k]
            pads = parts["pads"]
            spans.append(
                MediaSpan(
                    k,
                    image.label,
                    image.size,
                    parts["media_begin"].start,
                    (parts["caption"].start, parts["caption"].end),
                    parts["media_content"].start,
                    (pads.start, pads.end - 1),
                    parts["media_end"].start,
                )
            )
        return spans

    def token_ids(self) -> list[int | None]:
        """Return the expanded ids: media tokens exact, text exact only for ``input_ids`` (else None)."""
        out: list[int | None] = []
        pads = 0
        for piece in self.rendered.pieces:
            if piece.kind == "text":
                out.extend(piece.ids if piece.ids is not None else [None] * piece.length)
            elif piece.kind == "pad" and self.prompt is not None and self.processed:
                width, height = self.request.images[pads].size
                out.append(MEDIA_TOKEN_IDS[MEDIA_BEGIN])
                out.extend([None] * caption_tokens(width, height))
                out.append(MEDIA_TOKEN_IDS[MEDIA_CONTENT])
                out.extend([MEDIA_PAD_ID] * self.image_tokens[pads])
                out.append(MEDIA_TOKEN_IDS[MEDIA_END])
                pads += 1
            else:
                out.append(piece.token)
        return out

    def workload_text(self) -> tuple[int, list[int], int]:
        """Return the text tokens before the first image block, between consecutive blocks, and after the last."""
        if self.prompt is None:
            raise WhatIfError("the request side raised: there is no prompt to place in a workload")
        spans = [(s.begin, s.end + 1) for s in self.media_spans()]
        if not spans:
            return self.prompt.length, [], 0
        gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
        return spans[0][0], gaps, self.prompt.length - spans[-1][1]

    def why(self) -> str:
        """Return one paragraph: what the request side does with this request, and where any error comes from."""
        n, m = len(self.request.images), self.rendered.placeholders
        side = f"SGLang {self.release.version}"
        if self.error is not None:
            raised = self.error.error
            lead = f"{side}'s request side raises {raised.type} in {self.error.where}: {raised.message}."
            if self.raised_check == "one-to-one":
                return lead + " " + _placeholder_story(self, n, m)
            return lead + " The request is refused before any image is loaded; nothing reaches the scheduler."
        if not self.processed:
            extra = (
                f" Its {m} <|media_pad|> id(s) go on as ordinary prompt tokens with no image behind them." if m else ""
            )
            return f"The request carries no image, video or audio: {side} never calls the image processor.{extra}"
        return (
            f"{side}'s request side accepts the request: {m} <|media_pad|> id(s) for {n} image(s), each expanded to "
            "its block (<|media_begin|>image WxH<|media_content|>, num_tokens × <|media_pad|>, <|media_end|>)."
        )

    def to_json(self) -> dict[str, Any]:
        """Return the outcome: release, renderer, checks, error, the rendered ids' counts, media spans."""
        return {
            "sglang_version": self.release.version,
            "request_side": self.release.request_side.version,
            "renderer": self.renderer.to_json(),
            "rendered": {
                "by": self.rendered.by,
                "length": self.rendered.length,
                "tokens": None if self.rendered.tokens is None else list(self.rendered.tokens),
                "input_ids": None if self.rendered.input_ids is None else list(self.rendered.input_ids),
                "placeholders": self.rendered.placeholders,
                "placeholder_origins": self.rendered.pad_origins(),
            },
            "checks": [c.to_json() for c in self.checks],
            "error": None if self.error is None else self.error.to_json(),
            "status": "error-reproduced" if self.error is not None else "clean",
            "processed": self.processed,
            "prompt_tokens": None if self.prompt is None else self.prompt.length,
            "image_tokens": list(self.image_tokens),
            "media_spans": [s.to_json() for s in self.media_spans()],
            "why": self.why(),
            "notes": list(self.notes),
        }


def _placeholder_story(outcome: RequestOutcome, n: int, m: int) -> str:
    """Return how the ids came to hold ``m`` placeholders for ``n`` images, for this entry point and renderer."""
    request, renderer = outcome.request, outcome.renderer
    origins = outcome.rendered.pad_origins()
    written = [o for o in origins if "written" in o or o.startswith("input_ids")]
    if request.entry == "chat":
        parts = sum(1 for msg in request.messages for p in msg.parts if p.kind == "image")
        typed = (
            f"{len(written)} <|media_pad|> written in the text count too" if written else "no <|media_pad|> was written"
        )
        if not renderer.image_prompts:
            cause = (
                f"SGLang asks the renderer for one <|media_pad|> at each of the {parts} image part(s) (image_prompts), "
                f"but this renderer ignores them and draws its own {KIMI_IMAGE_PLACEHOLDER}; {typed}"
            )
        else:
            cause = f"SGLang's renderer put one <|media_pad|> at each of the {parts} image part(s), and {typed}"
    elif request.entry == "generate-text":
        cause = (
            "/generate encodes the text as it is: only a <|media_pad|> written in the text becomes a placeholder"
            + (" (the text is empty, so the processor gets no ids at all)" if not request.text else "")
        )
    else:
        cause = "/generate passes input_ids on unchanged: only the id 163605 (<|media_pad|>) is a placeholder"
    return (
        f"The processor counts the <|media_pad|> id ({MEDIA_PAD_ID}) in the token ids it receives: {m}, "
        f"for {n} image(s). {cause}. The request is refused before any image is loaded; nothing reaches "
        "the scheduler."
    )


@dataclass
class _Checking:
    """One request's checks while they run: what its outcome is built from, and the checks and notes so far."""

    request: ChatRequest
    release: Release
    renderer: Renderer
    rendered: Rendered
    tokens: tuple[int, ...]  # each image's num_tokens under the producer's config
    notes: list[str]
    checks: list[Check] = field(default_factory=list)

    def done(self, error: RequestError | None, prompt: Prompt | None, processed: bool = True) -> RequestOutcome:
        """Return the outcome of the checks so far, with SGLang's ``error`` or the ``prompt``."""
        return RequestOutcome(
            self.request,
            self.release,
            self.renderer,
            self.rendered,
            tuple(self.checks),
            error,
            prompt,
            self.tokens,
            tuple(self.notes),
            processed,
        )

    def raised(self, name: str, where: str, message: str) -> RequestOutcome:
        """Return the outcome of check ``name`` raising SGLang's ValueError ``message`` at ``where``."""
        error = ErrorInfo("ValueError", message)
        self.checks.append(Check(name, where, "raised", str(error)))
        return self.done(RequestError(error, where), None)


def _stop_before_loading(run: _Checking) -> RequestOutcome | None:
    """Run the checks before any image loads; return the outcome when one of them ends the request, else None."""
    request, release, rendered = run.request, run.release, run.rendered
    side = release.request_side
    n, m = len(request.images), rendered.placeholders
    where_fn = f"{_K3_FILE} KimiK3ImageProcessor.process_mm_data_async"
    if request.entry == "chat":
        images_parts = sum(1 for msg in request.messages for p in msg.parts if p.kind == "image")
        run.checks.append(
            Check(
                "image prompts",
                f"{_CHAT_FILE} _prepare_kimi_k3_messages / _encode_messages",
                "passed",
                f"{images_parts} image part(s): apply_chat_template is asked for token ids with image_prompts = "
                f"['<|media_pad|>'] × {images_parts}; the rendered ids carry {m} <|media_pad|> id(s)",
            )
        )
    if not (request.images or request.videos or request.audios):
        run.checks.append(
            Check(
                "multimodal input",
                "managers/tokenizer_manager.py _tokenize_one_request",
                "skipped",
                "no image, video or audio data: contains_mm_input() is False and the image processor is never called",
            )
        )
        return run.done(None, _unexpanded(rendered), processed=False)
    if request.videos or request.audios:
        return run.raised("image input only", where_fn, MSG_IMAGE_ONLY)
    run.checks.append(Check("image input only", where_fn, "passed", "no video or audio data"))
    if side.rejects_caller_identity:
        identity_where = "multimodal/processors/kimi_common.py reject_caller_image_identity"
        if request.mm_hashes:
            return run.raised("caller identities", identity_where, MSG_CALLER_MM_HASHES)
        run.checks.append(Check("caller identities", identity_where, "passed", "no mm_hashes and no dict image items"))
    elif request.mm_hashes:
        run.notes.append(
            f"SGLang {release.version} has no reject_caller_image_identity (it came in "
            f"{releases_where('request_side.rejects_caller_identity')[0]}): the mm_hashes are "
            "taken as the items' hashes"
        )
    one_to_one = f"{_K3_FILE}:{side.one_to_one_line} KimiK3ImageProcessor.process_mm_data_async"
    if m != n:
        return run.raised("one-to-one", one_to_one, MSG_ONE_TO_ONE.format(n, m))
    run.checks.append(Check("one-to-one", one_to_one, "passed", f"{m} <|media_pad|> id(s) for {n} image(s)"))
    return None


def _record_loading(run: _Checking, path: BuildPath) -> None:
    """Record the images loading on the request side's ``path`` (it never raises once the counts agree)."""
    n = len(run.request.images)
    if path == "cached":
        run.checks.append(
            Check("load", f"{_K3_FILE} prepare_media_artifacts", "passed", f"{n} image(s) decoded (headers read)")
        )
    else:
        where = "process_mm_data_async" if path == "no-cache" else "_process_mm_data_uncached"
        run.checks.append(
            Check(
                "images loaded",
                f"{_K3_FILE} KimiK3ImageProcessor.{where}",
                "passed",
                f"{n} of {n} image(s) loaded: '{MSG_ONE_TO_ONE_LOADED.format(n, n)}' is not raised",
            )
        )


def _expand_prompt(run: _Checking, path: BuildPath) -> RequestOutcome:
    """Return the outcome of expanding the placeholders into media spans and checking one pad run per image."""
    request, rendered, tokens = run.request, run.rendered, run.tokens
    images = request.images
    n, m = len(images), rendered.placeholders
    expand = f"{_K3_FILE} _expand_k3_image_prompt_token_ids"
    if len(tokens) != len(images):  # pragma: no cover - one count per image by construction
        return run.raised("original sizes", expand, MSG_ORIGINAL_SIZES)
    if m != len(tokens):  # pragma: no cover - equal once the one-to-one check passed
        return run.raised("placeholder tokens", expand, MSG_PLACEHOLDER_TOKENS.format(len(tokens), m))
    run.checks.append(
        Check(
            "placeholder tokens",
            expand,
            "passed",
            f"{len(tokens)} original size(s), {m} placeholder id(s): each framed as "
            "<|media_begin|>image WxH<|media_content|> + num_tokens × <|media_pad|> + <|media_end|>",
        )
    )
    prompt = _expanded(rendered, images, tokens)
    if (
        request.entry == "chat"
        and run.renderer.image_prompts
        and not any("written" in o for o in rendered.pad_origins())
    ):
        run.notes.append(
            "no <|media_pad|> has to be written for a chat request: SGLang asks the renderer for one per image part. "
            "'expected N, found 0 token(s)' comes from a renderer that ignores image_prompts (--image-prompts "
            "ignored) or from /generate text or input_ids without <|media_pad|>"
        )
    runs = len(_pad_runs(prompt))
    if run.release.request_side.checks_spans and path == "cached":
        where = f"{_K3_FILE} KimiK3ImageProcessor.compose_request"
        if runs != n:  # pragma: no cover - framing keeps every image's run apart
            return run.raised("image spans", where, MSG_K3_SPANS)
        run.checks.append(Check("image spans", where, "passed", f"{runs} <|media_pad|> run(s) for {n} image(s)"))
    return run.done(None, prompt)


def check_request(
    request: ChatRequest,
    sglang_version: str | Release,
    *,
    renderer: Renderer | None = None,
    settings: ServerSettings | None = None,
    rendered: Rendered | None = None,
) -> RequestOutcome:
    """Return the :class:`RequestOutcome` of ``request`` on one release's request side: each check in order,
    SGLang's exact exception and message when one raises, else the expanded prompt with its media spans.
    ``sglang_version`` is a version, or a release entry (a question's own, which the fix search may have changed)."""
    if isinstance(sglang_version, Release):
        release, sentence, asked = sglang_version, "", sglang_version.version
    else:
        (release, sentence), asked = release_for(sglang_version), sglang_version.strip()
    renderer = renderer if renderer is not None else Renderer()
    settings = settings if settings is not None else ServerSettings()
    if settings.epd:
        raise WhatIfError(
            "--serving epd-encoder: the request's own checks are replayed for a normal server (the EPD language "
            "side builds its ids from the encoder's grids); drop --serving, or replay the images without a request"
        )
    rendered = rendered if rendered is not None else render_request(request, renderer)
    producer = get_config(settings.producer_config)
    tokens = tuple(resize_config(im.width, im.height, producer).tokens for im in request.images)
    notes = list(rendered.notes)
    if asked != release.version:
        notes.insert(0, sentence)
    run = _Checking(request, release, renderer, rendered, tokens, notes)
    stopped = _stop_before_loading(run)
    if stopped is not None:
        return stopped
    path = build_path(release.request_side, settings)
    _record_loading(run, path)
    return _expand_prompt(run, path)


def _pad_runs(prompt: Prompt) -> list[tuple[int, int]]:
    """Return the runs of <|media_pad|> ids as SGLang finds them (get_mm_items_offset), typed pads included."""
    runs: list[tuple[int, int]] = []
    for segment in prompt.segments:
        is_pad = segment.kind == "pads" or (segment.kind == "typed" and segment.token == MEDIA_PAD_ID)
        if not is_pad:
            continue
        if runs and runs[-1][1] == segment.start - 1:
            runs[-1] = (runs[-1][0], segment.end - 1)
        else:
            runs.append((segment.start, segment.end - 1))
    return runs


def _segments(pieces: Sequence[tuple[SegmentKind, int, int | None, int | None]]) -> Prompt:
    segments: list[Segment] = []
    position = 0
    for kind, length, image, token in pieces:
        if length <= 0:
            continue
        last = segments[-1] if segments else None
        if kind == "text" and last is not None and last.kind == "text":
            segments[-1] = Segment("text", last.start, last.length + length)
        else:
            segments.append(Segment(kind, position, length, image, token))
        position += length
    return Prompt(tuple(segments))


def _unexpanded(rendered: Rendered) -> Prompt:
    return _segments(
        [("typed" if p.kind in ("pad", "typed") else "text", p.length, None, p.token) for p in rendered.pieces]
    )


def _expanded(rendered: Rendered, images: Sequence[RequestImage], tokens: Sequence[int]) -> Prompt:
    out: list[tuple[SegmentKind, int, int | None, int | None]] = []
    k = 0
    for piece in rendered.pieces:
        if piece.kind == "pad":
            width, height = images[k].size
            out += [
                ("media_begin", 1, k, MEDIA_TOKEN_IDS[MEDIA_BEGIN]),
                ("caption", caption_tokens(width, height), k, None),
                ("media_content", 1, k, MEDIA_TOKEN_IDS[MEDIA_CONTENT]),
                ("pads", tokens[k], k, MEDIA_PAD_ID),
                ("media_end", 1, k, MEDIA_TOKEN_IDS[MEDIA_END]),
            ]
            k += 1
        elif piece.kind == "typed":
            out.append(("typed", 1, None, piece.token))
        else:
            out.append(("text", piece.length, None, None))
    return _segments(out)


def check_releases(
    request: ChatRequest, *, renderer: Renderer | None = None, settings: ServerSettings | None = None
) -> dict[str, RequestOutcome]:
    """Return the :class:`RequestOutcome` of ``request`` on every known release, oldest first."""
    renderer = renderer if renderer is not None else Renderer()
    rendered = render_request(request, renderer)
    return {
        version: check_request(request, version, renderer=renderer, settings=settings, rendered=rendered)
        for version in RELEASES
    }


__all__ = [
    "CheckOutcome",
    "Check",
    "RequestError",
    "MediaSpan",
    "RequestOutcome",
    "check_request",
    "check_releases",
]
