"""A client's own request as the request side receives it: the body it sends, and the token ids
the image processor receives (:mod:`.checks` replays SGLang's checks on them and expands the prompt).

Three entry points reach ``KimiK3ImageProcessor.process_mm_data_async``, and all three hand it **token
ids** (``prefer_tokenized_input = True``), never text:

* **chat** — ``/v1/chat/completions`` with an OpenAI ``messages`` list. With the ``kimi_k3`` chat
  encoding (every release) SGLang does not render a Jinja template: ``_prepare_kimi_k3_messages``
  escapes ``<|kimi_image_placeholder|>`` in text to ``<| kimi_image_placeholder |>``, counts the
  ``image_url`` parts and asks the checkpoint tokenizer's ``apply_chat_template`` for token ids with
  ``image_prompts = ["<|media_pad|>"] * image_count``; the ``image_url`` parts are then collected, in
  message and part order, as the request's ``image_data``.
* **generate-text** — ``/generate`` with ``text`` and ``image_data``: the tokenizer manager encodes
  the text (an empty text with images gives no ids at all).
* **generate-ids** — ``/generate`` with ``input_ids`` and ``image_data``: the ids go straight on.

What the checkpoint's tokenizer does is its remote code, not SGLang's, and the kit models the two
choices that decide the placeholder count (:class:`Renderer`): whether ``apply_chat_template`` puts
each ``image_prompts`` entry at its image part (if it ignores them it renders its own marker, and the
ids reach the processor with no ``<|media_pad|>``), and whether media-token text a client wrote
(``<|media_pad|>``) encodes to the token's id.

**Token ids.** The media tokens and their ids are exact (:data:`~.prompt.MEDIA_TOKEN_IDS`), and so is
every id of a ``/generate`` request that sends ``input_ids``. Ordinary text is counted, not tokenized
(:func:`text_tokens`): a run of ASCII letters is one token per 8 letters, a run of digits one per 3,
other ASCII punctuation one per 2 characters, any other character one token, a single space joins the
word after it and any other run of white space is one token. Each chat message adds 4 tokens of role
framing and the generation prompt 3, and the ``image {W}x{H}`` caption is :func:`~.prompt.caption_tokens`
tokens. The real tokenizer's counts differ by some percent: that moves offsets, never which check
fires, its message, or any media token.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from .._records import frozen
from ..errors import WhatIfError
from ..preprocess.config import read_json_file
from .images import RequestImage, decode_data_url, probe_image, resolve_image
from .prompt import MEDIA_PAD_ID, MEDIA_TOKEN_IDS

Entry = Literal["chat", "generate-text", "generate-ids"]

MAX_CHAT_BYTES = 64 << 20  # the request file
MAX_MESSAGES = 1024
MAX_PARTS = 4096  # content parts over all messages
MAX_CHAT_IMAGES = 64
MAX_INPUT_IDS = 1 << 20
MAX_TOKEN_ID = (1 << 31) - 1

#: The marker the K3 renderer draws for an image when no ``image_prompts`` are given (``KimiK3Config``).
KIMI_IMAGE_PLACEHOLDER = "<|kimi_image_placeholder|>"
#: What SGLang's chat layer turns that marker into in every text a client wrote (``serving_chat.py``).
KIMI_IMAGE_PLACEHOLDER_ESCAPED = "<| kimi_image_placeholder |>"
ROLE_FRAMING_TOKENS = 4  # <|im_{role}|>, the role, <|im_middle|>, <|im_end|>
GENERATION_PROMPT_TOKENS = 3  # serving_chat._KIMI_K3_GENERATION_STUB_TOKENS
ROLES = ("system", "developer", "user", "assistant", "tool")
PART_TYPES = ("text", "image_url", "video_url", "audio_url")

_MEDIA_TEXT = re.compile("(" + "|".join(re.escape(t) for t in MEDIA_TOKEN_IDS) + ")")
_PIECE = re.compile(r"[A-Za-z]+|[0-9]+|[!-/:-@\[-`{-~]+|[^\x00-\x7f]|\s+")


def text_tokens(text: str) -> int:
    """Return the kit's count of ordinary text tokens in ``text`` (the rule in the module docstring)."""
    count = 0
    for match in _PIECE.finditer(text):
        piece = match.group()
        if piece.isspace():
            count += 0 if piece == " " else 1
        elif not piece.isascii():
            count += 1
        elif piece.isalpha():
            count += math.ceil(len(piece) / 8)
        elif piece.isdigit():
            count += math.ceil(len(piece) / 3)
        else:
            count += math.ceil(len(piece) / 2)
    return count


# --- the request -------------------------------------------------------------------------------------------
@frozen
class ChatPart:
    """One content part of a chat message: text, or an image / video / audio reference."""

    kind: Literal["text", "image", "video", "audio"]
    text: str = ""  # a text part's text
    image: int | None = None  # an image part: its position in ChatRequest.images


@frozen
class ChatMessage:
    """One chat message: its role and its parts (a string content is one text part)."""

    role: str
    parts: tuple[ChatPart, ...]


@frozen
class ChatRequest:
    """A client's request as the kit read it: the entry point, the text or messages or ids, and the media."""

    entry: Entry
    source: str
    messages: tuple[ChatMessage, ...] = ()
    text: str | None = None
    input_ids: tuple[int, ...] | None = None
    images: tuple[RequestImage, ...] = ()
    videos: int = 0
    audios: int = 0
    mm_hashes: bool = False  # /generate's mm_hashes was given
    ignored: tuple[str, ...] = ()  # keys of the body that change nothing on the request side
    body: Mapping[str, Any] | None = field(default=None, compare=False)  # a chat's JSON body as sent (tokenized by a
    # checkpoint's tokenizer; derived from the same JSON as the fields above, so not compared)

    @property
    def endpoint(self) -> str:
        """Return ``/v1/chat/completions`` or ``/generate``."""
        return "/v1/chat/completions" if self.entry == "chat" else "/generate"

    def summary(self) -> str:
        """Return one line: the endpoint, the messages or ids, the images with their sizes, videos and audios."""
        what = {
            "chat": f"{len(self.messages)} message{'s' if len(self.messages) != 1 else ''}",
            "generate-text": f"text of {len(self.text or '')} characters",
            "generate-ids": f"{len(self.input_ids or ())} input_ids",
        }[self.entry]
        images = ", ".join(f"{im.label} {im.width}×{im.height}" for im in self.images) or "none"
        media = "".join(
            f", {n} {kind}{'s' if n != 1 else ''}" for n, kind in ((self.videos, "video"), (self.audios, "audio")) if n
        )
        return f"{self.endpoint}: {what}; {len(self.images)} image(s): {images}{media}"

    def to_json(self) -> dict[str, Any]:
        """Return the request as read: entry, endpoint, messages (roles and part kinds), images, media counts."""
        return {
            "entry": self.entry,
            "endpoint": self.endpoint,
            "source": self.source,
            "messages": [{"role": m.role, "parts": [p.kind for p in m.parts]} for m in self.messages],
            "input_ids": None if self.input_ids is None else len(self.input_ids),
            "images": [im.to_json() for im in self.images],
            "videos": self.videos,
            "audios": self.audios,
            "mm_hashes": self.mm_hashes,
            "ignored": list(self.ignored),
        }


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else type(value).__name__


class _Reader:
    """Reads one body: resolves image references, counts parts, names every fault by its JSON path."""

    def __init__(self, source: str, folder: Path | None):
        self.source = source
        self.folder = folder
        self.images: list[RequestImage] = []
        self.parts = 0

    def fail(self, where: str, message: str) -> WhatIfError:
        return WhatIfError(f"{self.source}: {where}: {message}")

    def image(self, url: Any, where: str) -> int:
        if not isinstance(url, str) or not url:
            raise self.fail(where, f"expected an image URL string, got {_kind(url)}")
        if len(self.images) >= MAX_CHAT_IMAGES:
            raise self.fail(where, f"more than {MAX_CHAT_IMAGES} images in one request; split the request")
        label = f"image {len(self.images)}"
        scheme = url.split(":", 1)[0].lower() if ":" in url[:12] else ""
        if scheme in ("http", "https"):
            raise self.fail(
                where,
                "an http(s) URL; kimi-viz has no network access: save the image and pass its local path "
                "(or a data: URL) instead",
            )
        if scheme == "data":
            image = decode_data_url(url, label=f"{self.source}: {where} ({label})")
            media_type = url[5:].split(";", 1)[0].split(",", 1)[0][:40] or "data"
            self.images.append(replace(image, label=f"{media_type} data URL"))
            return len(self.images) - 1
        if scheme == "file":
            path: Any = Path(unquote(urlparse(url).path))
        elif scheme and len(scheme) > 1:
            raise self.fail(where, f"a {scheme}: URL; expected a data: URL, a file:// URL or a local path")
        else:
            path = resolve_image(url, self.folder)
        image = probe_image(path, label=os.path.basename(str(path)) or label)
        self.images.append(image)
        return len(self.images) - 1


def _string(value: Any, reader: _Reader, where: str) -> str:
    if not isinstance(value, str):
        raise reader.fail(where, f"expected a string, got {_kind(value)}")
    return value


def _part(part: Any, reader: _Reader, where: str, media: dict[str, int]) -> ChatPart:
    if not isinstance(part, dict):
        raise reader.fail(where, f"expected a content part object, got {_kind(part)}")
    kind = part.get("type")
    if kind not in PART_TYPES:
        refused = (
            " (SGLang's ChatCompletionRequest refuses it: HTTP 400)"
            if kind in ("input_text", "input_image")
            else " (not modelled)"
        )
        raise reader.fail(f"{where}.type", f"{kind!r}{refused}; expected one of {', '.join(PART_TYPES)}")
    reader.parts += 1
    if reader.parts > MAX_PARTS:
        raise reader.fail(where, f"more than {MAX_PARTS} content parts; split the request")
    if kind == "text":
        return ChatPart("text", text=_string(part.get("text"), reader, f"{where}.text"))
    key = kind  # image_url, video_url, audio_url: an object with a url
    ref = part.get(key)
    if not isinstance(ref, dict) or not isinstance(ref.get("url"), str):
        raise reader.fail(
            f"{where}.{key}", f'expected {{"url": ...}}, got {_kind(ref)} (SGLang\'s ChatCompletionRequest needs one)'
        )
    if kind == "image_url":
        detail = ref.get("detail")
        if detail not in (None, "auto", "low", "high"):
            raise reader.fail(f"{where}.image_url.detail", f"expected auto, low or high, got {detail!r}")
        return ChatPart("image", image=reader.image(ref["url"], f"{where}.image_url.url"))
    media[kind] += 1
    return ChatPart("video" if kind == "video_url" else "audio")


def _message(message: Any, reader: _Reader, where: str, media: dict[str, int]) -> ChatMessage:
    if not isinstance(message, dict):
        raise reader.fail(where, f"expected a message object, got {_kind(message)}")
    role = message.get("role")
    if role not in ROLES:
        raise reader.fail(f"{where}.role", f"expected one of {', '.join(ROLES)}, got {role!r}")
    content = message.get("content")
    parts: list[ChatPart] = []
    if isinstance(content, str):
        parts.append(ChatPart("text", text=content))
    elif isinstance(content, list):
        parts += [_part(p, reader, f"{where}.content[{k}]", media) for k, p in enumerate(content)]
    elif content is None and role != "user":
        pass
    else:
        raise reader.fail(f"{where}.content", f"expected a string or a list of parts, got {_kind(content)}")
    if role == "assistant":  # rendered by the template too: count it as text
        for key in ("reasoning_content", "tool_calls"):
            if message.get(key) is not None:
                value = message[key]
                parts.append(ChatPart("text", text=value if isinstance(value, str) else json.dumps(value)))
    return ChatMessage(role, tuple(parts))


def _media_count(value: Any) -> int:
    if value is None or value == [] or value == "":
        return 0
    return len(value) if isinstance(value, list) else 1


def parse_request(data: Any, *, folder: Path | None = None, source: str = "the request") -> ChatRequest:
    """Return the :class:`ChatRequest` a parsed JSON body describes (image paths relative to ``folder``).

    A body with ``messages`` is a chat completions request; one with ``text`` or ``input_ids`` a
    ``/generate`` request (its ``image_data`` a URL or a list of URLs). Images are ``data:`` URLs (base64),
    ``file://`` URLs, local paths or sample image names; each is read from its header within the image
    limits. Raises :class:`~kimi_viz.errors.WhatIfError` (or an image error) naming the field at fault.
    """
    reader = _Reader(source, folder)
    if not isinstance(data, dict):
        raise reader.fail(
            "the body", f'expected an object with "messages" (or "text" / "input_ids"), got {_kind(data)}'
        )
    if "messages" in data:
        messages = data["messages"]
        if not isinstance(messages, list) or not messages:
            raise reader.fail("messages", f"expected a non-empty list of messages, got {_kind(messages)}")
        if len(messages) > MAX_MESSAGES:
            raise reader.fail("messages", f"{len(messages)} messages, over the limit of {MAX_MESSAGES}")
        media = {"video_url": 0, "audio_url": 0}
        parsed = tuple(_message(m, reader, f"messages[{k}]", media) for k, m in enumerate(messages))
        ignored = tuple(sorted(set(data) - {"messages"}))
        return ChatRequest(
            "chat",
            source,
            messages=parsed,
            images=tuple(reader.images),
            videos=media["video_url"],
            audios=media["audio_url"],
            ignored=ignored,
            body=data,
        )
    has_text, has_ids = "text" in data, "input_ids" in data
    if has_text == has_ids:
        raise reader.fail(
            "the body",
            "expected a chat body with messages, or a /generate body with exactly one of text and input_ids",
        )
    text, ids = None, None
    if has_text:
        text = data["text"]
        if not isinstance(text, str):
            raise reader.fail("text", f"expected one prompt string, got {_kind(text)} (send one request at a time)")
    else:
        raw = data["input_ids"]
        if not isinstance(raw, list) or (raw and isinstance(raw[0], list)):
            raise reader.fail("input_ids", f"expected one list of token ids, got {_kind(raw)}")
        if len(raw) > MAX_INPUT_IDS:
            raise reader.fail("input_ids", f"{len(raw)} ids, over the limit of {MAX_INPUT_IDS}")
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_TOKEN_ID for i in raw):
            raise reader.fail("input_ids", f"expected token ids from 0 to {MAX_TOKEN_ID}")
        ids = tuple(raw)
    urls = data.get("image_data")
    if urls is None:
        urls = []
    elif isinstance(urls, str):
        urls = [urls]
    elif not isinstance(urls, list) or any(isinstance(u, list) for u in urls):
        raise reader.fail("image_data", f"expected an image URL or a list of them, got {_kind(urls)}")
    for k, url in enumerate(urls):
        reader.image(url, f"image_data[{k}]")
    hashes = data.get("mm_hashes")
    known = {"text", "input_ids", "image_data", "video_data", "audio_data", "mm_hashes"}
    return ChatRequest(
        "generate-text" if has_text else "generate-ids",
        source,
        text=text,
        input_ids=ids,
        images=tuple(reader.images),
        videos=_media_count(data.get("video_data")),
        audios=_media_count(data.get("audio_data")),
        mm_hashes=bool(hashes),
        ignored=tuple(sorted(set(data) - known)),
    )


def read_request(path: str | os.PathLike) -> ChatRequest:
    """Return the :class:`ChatRequest` of a JSON file (``--chat FILE``), read strictly and within limits."""
    path = Path(path)
    data = read_json_file(path, error=WhatIfError, limit=MAX_CHAT_BYTES)
    return parse_request(data, folder=path.parent, source=str(path))


# --- rendering ---------------------------------------------------------------------------------------------
@frozen
class Renderer:
    """The checkpoint tokenizer's two choices that decide the placeholder count (its remote code, not SGLang's)."""

    image_prompts: bool = True  # apply_chat_template puts each image_prompts entry (<|media_pad|>) at its image part
    typed_tokens: bool = True  # media-token text a client wrote encodes to the token's id

    def describe(self) -> str:
        """Return one sentence saying what is assumed."""
        first = (
            "apply_chat_template puts SGLang's image_prompts ('<|media_pad|>', one per image part) where the "
            "image parts are"
            if self.image_prompts
            else f"apply_chat_template ignores image_prompts and renders its own {KIMI_IMAGE_PLACEHOLDER} for each "
            "image part (not the <|media_pad|> id)"
        )
        second = (
            "media tokens written in text encode to their ids"
            if self.typed_tokens
            else "media tokens written in text encode as ordinary text"
        )
        return f"{first}; {second}"

    def to_json(self) -> dict[str, bool]:
        """Return ``{"image_prompts", "typed_tokens"}``."""
        return {"image_prompts": self.image_prompts, "typed_tokens": self.typed_tokens}


@frozen
class Piece:
    """A run of the ids handed to the image processor: text, a ``<|media_pad|>``, another media token, or the
    renderer's own image marker (``marker``: one id, not the pad's)."""

    kind: Literal["text", "pad", "typed", "marker"]
    length: int
    origin: str  # where in the body it comes from
    token: int | None = None  # a pad's or typed media token's id
    ids: tuple[int, ...] | None = None  # a text run's exact ids (/generate with input_ids)


COUNTED = "counted (no --model-path)"


@frozen
class Rendered:
    """The ids SGLang hands ``process_mm_data_async``, as runs: text counted (media tokens exact), or every id
    exact when the checkpoint's tokenizer rendered them (``by`` says which, ``input_ids`` and ``tokens`` hold them)."""

    pieces: tuple[Piece, ...]
    notes: tuple[str, ...] = ()
    by: str = COUNTED  # "tokenized by DIR" or COUNTED
    input_ids: tuple[int, ...] | None = None  # what apply_chat_template returns (tokenized only)
    tokens: tuple[str, ...] | None = None  # each id as text (tokenized only)

    @property
    def length(self) -> int:
        """Return the number of ids."""
        return sum(p.length for p in self.pieces)

    @property
    def placeholders(self) -> int:
        """Return the number of ``<|media_pad|>`` ids (what ``count_image_placeholders`` counts)."""
        return sum(1 for p in self.pieces if p.kind == "pad")

    def pad_origins(self) -> list[str]:
        """Return where each ``<|media_pad|>`` id comes from, in order."""
        return [p.origin for p in self.pieces if p.kind == "pad"]


class _Builder:
    def __init__(self, renderer: Renderer):
        self.renderer = renderer
        self.pieces: list[Piece] = []
        self.notes: list[str] = []

    def text(self, count: int, origin: str) -> None:
        if count > 0:
            last = self.pieces[-1] if self.pieces else None
            if last is not None and last.kind == "text" and last.ids is None:
                self.pieces[-1] = Piece("text", last.length + count, last.origin)
            else:
                self.pieces.append(Piece("text", count, origin))

    def token(self, token: int, origin: str) -> None:
        self.pieces.append(Piece("pad" if token == MEDIA_PAD_ID else "typed", 1, origin, token))

    def written(self, text: str, origin: str, *, chat: bool) -> None:
        """Add text a client wrote: media-token text becomes the token's id (when the tokenizer allows it)."""
        if chat and KIMI_IMAGE_PLACEHOLDER in text:
            text = text.replace(KIMI_IMAGE_PLACEHOLDER, KIMI_IMAGE_PLACEHOLDER_ESCAPED)
            self.notes.append(
                f"{origin}: {KIMI_IMAGE_PLACEHOLDER} written in the text is escaped by SGLang to "
                f"{KIMI_IMAGE_PLACEHOLDER_ESCAPED} (neutralize_kimi_k3_image_placeholder): it stays text and "
                "places no image"
            )
        elif not chat and KIMI_IMAGE_PLACEHOLDER in text:
            self.notes.append(
                f"{origin}: {KIMI_IMAGE_PLACEHOLDER} written in the text is not an image placeholder for SGLang: "
                "only the <|media_pad|> id counts"
            )
        if not self.renderer.typed_tokens:
            self.text(text_tokens(text), origin)
            return
        for chunk in _MEDIA_TEXT.split(text):
            if chunk in MEDIA_TOKEN_IDS:
                self.token(MEDIA_TOKEN_IDS[chunk], f"{origin} (written {chunk})")
            elif chunk:
                self.text(text_tokens(chunk), origin)


def rendered_from_ids(
    ids: tuple[int, ...],
    *,
    origin: str,
    by: str,
    tokens: tuple[str, ...] | None = None,
    notes: tuple[str, ...] = (),
    placeholder: int = MEDIA_PAD_ID,
) -> Rendered:
    """Return exact ``ids`` (a ``/generate`` body's, or a chat tokenized by the checkpoint's tokenizer) as the runs
    the processor receives: media tokens one each, the ids between them as exact text runs. ``placeholder`` is the
    id the processor counts as ``<|media_pad|>`` (the config's ``media_placeholder_token_id``): where a checkpoint's
    tokenizer writes another id, that one is no placeholder to the processor, and the count says so."""
    build = _Builder(Renderer())
    run: list[int] = []
    for k, given in enumerate(ids):
        # the processor's placeholder id is the kit's pad; the kit's pad id, when it is not the processor's, is not
        token = MEDIA_PAD_ID if given == placeholder else placeholder if given == MEDIA_PAD_ID else given
        if token in MEDIA_TOKEN_IDS.values():
            if run:
                build.pieces.append(Piece("text", len(run), origin, ids=tuple(run)))
                run = []
            build.token(token, f"{origin}[{k}]")
        else:
            run.append(token)
    if run:
        build.pieces.append(Piece("text", len(run), origin, ids=tuple(run)))
    exact = by != "as sent (input_ids)"
    return Rendered(tuple(build.pieces), notes, by, ids if exact else None, tokens)


def render_request(request: ChatRequest, renderer: Renderer | None = None) -> Rendered:
    """Return the ids SGLang's request side hands ``process_mm_data_async`` for ``request`` (text counted).

    The chat layer is the same in every release from 0.5.17 to 0.5.23 for everything that decides
    these ids, so one rendering serves all of them.
    """
    renderer = renderer if renderer is not None else Renderer()
    build = _Builder(renderer)
    if request.entry == "generate-ids":
        return rendered_from_ids(request.input_ids or (), origin="input_ids", by="as sent (input_ids)")
    if request.entry == "generate-text":
        build.written(request.text or "", "text", chat=False)
        return Rendered(tuple(build.pieces), tuple(build.notes))
    images = 0
    for m, message in enumerate(request.messages):
        build.text(ROLE_FRAMING_TOKENS - 1, f"messages[{m}] ({message.role})")
        for p, part in enumerate(message.parts):
            origin = f"messages[{m}].content[{p}]"
            if part.kind == "text":
                build.written(part.text, origin, chat=True)
            elif part.kind == "image":
                if renderer.image_prompts:
                    build.token(MEDIA_PAD_ID, f"{origin} (image part {images}: image_prompts[{images}])")
                else:
                    build.pieces.append(Piece("marker", 1, f"{origin} (image part {images})"))
                images += 1
            else:  # video_url / audio_url: dropped by _prepare_kimi_k3_messages, never rendered
                build.notes.append(
                    f"{origin}: a {part.kind} part is dropped from what the renderer sees "
                    "(_prepare_kimi_k3_messages keeps text and image_url parts only), but still sent as "
                    f"{part.kind}_data"
                )
        build.text(1, f"messages[{m}] ({message.role})")
    build.text(GENERATION_PROMPT_TOKENS, "the generation prompt")
    if images and not renderer.image_prompts:
        build.notes.append(
            f"the renderer ignores image_prompts: its {images} image part(s) render as {KIMI_IMAGE_PLACEHOLDER}, "
            "which is not the <|media_pad|> id"
        )
    return Rendered(tuple(build.pieces), tuple(build.notes))


__all__ = [
    "Entry",
    "MAX_CHAT_BYTES",
    "MAX_CHAT_IMAGES",
    "KIMI_IMAGE_PLACEHOLDER",
    "KIMI_IMAGE_PLACEHOLDER_ESCAPED",
    "text_tokens",
    "ChatPart",
    "ChatMessage",
    "ChatRequest",
    "parse_request",
    "read_request",
    "Renderer",
    "Piece",
    "Rendered",
    "COUNTED",
    "render_request",
    "rendered_from_ids",
]
