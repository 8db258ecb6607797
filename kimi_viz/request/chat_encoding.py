"""Kimi-K3's chat rendering, transcribed: the messages a server hands the tokenizer, as segments and token ids.

Kimi-K3 has no Jinja chat template. Its tokenizer's ``apply_chat_template`` calls ``build_chat_segments`` of the
checkpoint's ``encoding_k3`` module, which writes the chat in XTML: an XML-like markup whose brackets are four
special tokens, ``<|open|>tag attr="value"<|sep|>…<|close|>tag<|sep|>`` with ``<|end_of_msg|>`` after each
message. It returns a list of segments, each a text and whether it may hold special tokens, and the tokenizer
encodes them one by one (:meth:`~.tokenizer.KimiTokenizer.encode`). The kit's own code here does the same, read
off the checkpoint's; it never imports or runs a checkpoint's files.

:func:`build_chat_segments`, in the checkpoint's order:

1. tool results are put in the order of the assistant's ``tool_calls`` they answer (matched by
   ``tool_call_id``; a run with an unmatched result is left as it is) and take the called tool's name;
   tool-call ``arguments`` given as a JSON string are parsed (a string that is not JSON is kept as a raw
   ``json`` block); tool declarations are sorted by key, recursively;
2. the request's tools, as a system message ``type="tool-declare"`` with their compact JSON;
3. with thinking on and a ``thinking_effort`` (``low``, ``high`` or ``max``; anything else is refused), a
   system message ``type="thinking-effort"``;
4. each message: ``system``/``user`` (with a ``name`` attribute when named), a ``system`` message carrying
   ``tools`` as a "New Tools Available" declaration, ``assistant`` (its ``think`` channel when thinking is on,
   its ``response`` channel, its ``tools`` calls with one typed ``argument`` per key), ``tool`` (named by
   ``tool``/``name`` or by the position of the call it answers); a message of any other role is skipped;
5. ``tool_choice`` ``required``/``none`` and ``response_format`` ``json_object``/``json_schema`` as system messages
   after the conversation;
6. the generation prompt: an open assistant message and an open ``think`` (``response`` without thinking) channel.

An image part, or ``<|kimi_image_placeholder|>`` in text when ``image_prompts`` are given, takes the next image
prompt as a control segment (SGLang passes one ``<|media_pad|>`` per image); a count that does not match is
refused. Attribute values escape ``&`` then ``"``; each attribute is four text segments (`` key``, ``="``, the
value, ``"``), which matters because BPE never merges across segments. :func:`apply_chat_template` is the
tokenizer's method around it: ``thinking`` defaults to on and ``thinking_effort`` to ``max``. A chat the
checkpoint's code refuses raises :class:`~kimi_viz.errors.WhatIfError` (SGLang answers such a request with HTTP 400).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._records import frozen
from ..errors import WhatIfError
from .tokenizer import KimiTokenizer

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"
IMAGE_PLACEHOLDER = "<|kimi_image_placeholder|>"
THINKING_EFFORTS = ("high", "low", "max")  # _VALID_THINKING_EFFORTS, sorted as the refusal lists them
DEFAULT_THINKING_EFFORT = "max"  # apply_chat_template: kwargs.setdefault("thinking_effort", "max")

_EFFORT_NOTE = (
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), "
    "supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort={}`."
)
_TOOLS_NOTE = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n{}\n```"
_NEW_TOOLS_NOTE = (
    "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n"
    "```json\n{}\n```"
)
_TOOL_CHOICE_NOTE = "The system is invoked with `tool_choice={}`.\nYou MUST {} in the next message."
_JSON_NOTE = (
    "The system is invoked with `response_format={}`.\nYour response must be raw JSON data without markdown "
    "code blocks (```json) or any additional formatting."
)
_SCHEMA_NOTE = "\nThe JSON data must match the following schema:\n```json\n{}\n```"


def _refused(reason: str) -> WhatIfError:
    """Return the error for a chat the checkpoint's renderer raises on (SGLang answers it with HTTP 400)."""
    return WhatIfError(f"the checkpoint's chat renderer refuses this chat: {reason} (SGLang answers HTTP 400)")


@frozen
class ChatSegment:
    """One piece of the rendered chat: its text, and whether special-token names in it become special ids."""

    text: str
    control: bool = False  # EncodeSegment.allow_special


@frozen
class RenderedChat:
    """A chat as the checkpoint's ``apply_chat_template(..., tokenize=True)`` returns it, with how it was made."""

    segments: tuple[ChatSegment, ...]
    input_ids: tuple[int, ...]  # exactly what apply_chat_template returns (plus an assistant prefix, if any)
    tokens: tuple[str, ...]  # each id as text (KimiTokenizer.token_text)
    thinking: bool
    thinking_effort: str | None  # the effort note rendered, or None
    image_prompts: int  # image prompts handed in (one per image part)
    release: str | None = None  # the SGLang release whose request side passed the chat (chat_server)
    notes: tuple[str, ...] = ()  # what the request side did on the way that a reader should know

    @property
    def text(self) -> str:
        """Return the rendered prompt as one string (what ``apply_chat_template(tokenize=False)`` returns)."""
        return "".join(segment.text for segment in self.segments)

    def positions(self, token_id: int) -> tuple[int, ...]:
        """Return the positions of ``token_id`` in :attr:`input_ids`."""
        return tuple(k for k, token in enumerate(self.input_ids) if token == token_id)


# --- segment builders --------------------------------------------------------------------------------------------
def _text(value: Any) -> list[ChatSegment]:
    text = str(value)
    return [ChatSegment(text)] if text else []


def _control(text: str) -> list[ChatSegment]:
    return [ChatSegment(text, True)] if text else []


def _escape(value: Any) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _open(tag: str, attrs: Sequence[tuple[str, Any]] = ()) -> list[ChatSegment]:
    out = _control(OPEN) + _text(tag)
    for key, value in attrs:
        out += _text(f" {key}") + _text('="') + _text(_escape(value)) + _text('"')
    return out + _control(SEP)


def _close(tag: str) -> list[ChatSegment]:
    return _control(CLOSE) + _text(tag) + _control(SEP)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _deep_sort(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _deep_sort(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [_deep_sort(item) for item in value]
    return value


def _get(value: Any, key: str, default: Any = None) -> Any:
    return value.get(key, default) if isinstance(value, dict) else getattr(value, key, default)


class _Images:
    """Hands out the image prompts in order (``_ImagePromptState``)."""

    def __init__(self, prompts: Sequence[str] | None):
        self.prompts = prompts
        self.used = 0

    def next(self) -> str:
        if self.prompts is None:
            return IMAGE_PLACEHOLDER
        if self.used >= len(self.prompts):
            raise _refused("More image placeholders than image prompts.")
        self.used += 1
        return self.prompts[self.used - 1]

    def check(self) -> None:
        if self.prompts is not None and self.used != len(self.prompts):
            raise _refused(f"image prompt count {len(self.prompts)} != consumed placeholder count {self.used}")


def _append(out: list[ChatSegment], value: Any, images: _Images) -> None:
    text = str(value)
    if not text:
        return
    if images.prompts is None or IMAGE_PLACEHOLDER not in text:
        out += _text(text)
        return
    pieces = text.split(IMAGE_PLACEHOLDER)
    for k, piece in enumerate(pieces):
        out += _text(piece)
        if k < len(pieces) - 1:
            out += _control(images.next())


def _content(content: Any, images: _Images) -> list[ChatSegment]:
    out: list[ChatSegment] = []
    if isinstance(content, str):
        _append(out, content, images)
    elif content is not None:
        for part in content:
            if part["type"] in ("image", "image_url"):
                out += _control(images.next())
            else:
                _append(out, part["text"], images)
    return out


def _system_note(kind: str, body: str) -> list[ChatSegment]:
    return (
        _open("message", [("role", "system"), ("type", kind)])
        + _text(body.strip())
        + _close("message")
        + _control(END_OF_MSG)
    )


# --- normalisation -----------------------------------------------------------------------------------------------
def _arguments(arguments: Any) -> tuple[dict[str, Any], str | None]:
    """Return a call's arguments as a dict, and the raw text when they are a string that is not JSON."""
    if arguments is None:
        return {}, None
    if isinstance(arguments, dict):
        return arguments, None
    if not isinstance(arguments, str):
        raise _refused("Kimi K3 tool call arguments must be a dict or a JSON object string.")
    if not arguments.strip():
        return {}, None
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return {}, arguments
    except RecursionError:
        raise _refused("tool call arguments nest too deeply to parse") from None
    if not isinstance(parsed, dict):
        raise _refused("Kimi K3 tool call arguments must be a JSON object.")
    return parsed, None


def _normalized(message: Any) -> Any:
    """Return ``message`` with its tools sorted and its calls' arguments parsed (``_normalize_message``)."""
    if not isinstance(message, dict):
        return message
    out = dict(message)
    if out.get("tools") is not None:
        out["tools"] = _deep_sort(out["tools"])
    calls = out.get("tool_calls")
    if not calls:
        return out
    normalized = []
    for call in calls:
        call = dict(call)
        function = dict(call.get("function", call))
        function["arguments"], raw = _arguments(function.get("arguments"))
        if raw is not None:
            function["_xtml_json_block"] = raw
        if "function" in call:
            call["function"] = function
        else:
            call = function
        normalized.append(call)
    out["tool_calls"] = normalized
    return out


def _tool_run(messages: Sequence[Any], start: int, calls: Mapping[str, tuple[int, Any]]) -> tuple[list[Any], int]:
    """Return one run of consecutive tool results in call order (unchanged when one is unmatched), and its end."""
    run: list[tuple[int, Any]] = []
    unmatched = False
    end = start
    while end < len(messages) and isinstance(messages[end], dict) and messages[end].get("role") == "tool":
        message = messages[end]
        call_id = message.get("tool_call_id", message.get("id"))
        target = calls.get(str(call_id)) if call_id is not None else None
        if target is None:
            unmatched = True
            run.append((0, message))
        else:
            position, name = target
            resolved = dict(message)
            if name is not None:
                resolved["tool"] = name
                if "name" in resolved:
                    resolved["name"] = name
            run.append((position, resolved))
        end += 1
    if unmatched:
        return [message for _, message in run], end
    return [message for _, message in sorted(run, key=lambda item: item[0])], end


def order_tool_results(messages: Sequence[Any]) -> list[Any]:
    """Return ``messages`` with each run of tool results in the order of the calls they answer
    (``normalize_xtml_tool_result_messages``)."""
    out: list[Any] = []
    calls: dict[str, tuple[int, Any]] = {}
    index = 0
    while index < len(messages):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "tool":
            run, index = _tool_run(messages, index, calls)
            out += run
            continue
        if isinstance(message, dict) and message.get("role") == "assistant":
            calls = {}
            for position, call in enumerate(message.get("tool_calls") or [], start=1):
                function = call.get("function", call)
                if call.get("id") is not None:
                    calls.setdefault(str(call.get("id")), (position, function.get("name")))
        out.append(message)
        index += 1
    return out


# --- rendering ---------------------------------------------------------------------------------------------------
def _xtml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def _calls(calls: Sequence[Any], images: _Images) -> list[ChatSegment]:
    out = _open("tools")
    for index, call in enumerate(calls, start=1):
        function = call.get("function", call)
        out += _open("call", [("tool", function["name"]), ("index", index)])
        raw = function.get("_xtml_json_block")
        if raw is not None:
            out += _open("json", [("type", "object")])
            _append(out, raw, images)
            out += _close("json")
        else:
            for key, value in function.get("arguments", {}).items():
                out += _open("argument", [("key", key), ("type", _xtml_type(value))])
                _append(out, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), images)
                out += _close("argument")
        out += _close("call")
    return out + _close("tools")


def _assistant(message: Mapping[str, Any], images: _Images, thinking: bool) -> list[ChatSegment]:
    out: list[ChatSegment] = []
    if thinking:
        out += _open("think")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning is not None and str(reasoning).strip():
            _append(out, reasoning, images)
        out += _close("think")
    out += _open("response") + _content(message.get("content"), images) + _close("response")
    if message.get("tool_calls"):
        out += _calls(message["tool_calls"], images)
    return out


def _named(role: str, message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    attrs: list[tuple[str, Any]] = [("role", role)]
    if message.get("name"):
        attrs.append(("name", message["name"]))
    return attrs


class _Conversation:
    """Walks the messages: which tool result answers which call (``prior_calls``/``tool_index``)."""

    def __init__(self, images: _Images, thinking: bool):
        self.images = images
        self.thinking = thinking
        self.calls: Any = None
        self.tool_index = 0

    def render(self, message: Mapping[str, Any]) -> list[ChatSegment]:
        role = message["role"]
        if role == "system" and message.get("tools"):
            return _system_note("tool-declare", _NEW_TOOLS_NOTE.format(_compact(message["tools"])))
        if role in ("user", "system"):
            body = _content(message.get("content"), self.images)
        elif role == "assistant":
            self.calls = message.get("tool_calls")
            self.tool_index = 0
            body = _assistant(message, self.images, self.thinking)
        elif role == "tool":
            return self.tool(message)
        else:
            return []  # a role the checkpoint does not know is skipped
        return _open("message", _named(role, message)) + body + _close("message") + _control(END_OF_MSG)

    def tool(self, message: Mapping[str, Any]) -> list[ChatSegment]:
        self.tool_index += 1
        name = message.get("tool", message.get("name"))
        if name is None and self.calls and self.tool_index <= len(self.calls):
            call = self.calls[self.tool_index - 1]
            name = call.get("function", call)["name"]
        if name is None:
            raise _refused("Kimi K3 tool message has no resolvable tool name.")
        attrs = [("role", "tool"), ("tool", name), ("index", self.tool_index)]
        body = _content(message.get("content"), self.images)
        return _open("message", attrs) + body + _close("message") + _control(END_OF_MSG)


def _request_notes(kwargs: Mapping[str, Any]) -> list[ChatSegment]:
    out: list[ChatSegment] = []
    choice = kwargs.get("tool_choice")
    if choice in ("required", "none"):
        must = "call tools" if choice == "required" else "NOT call any tools"
        out += _system_note("tool-choice", _TOOL_CHOICE_NOTE.format(choice, must))
    response_format = kwargs.get("response_format")
    kind = _get(response_format, "type", response_format) if isinstance(response_format, dict) else response_format
    if kind == "json_object":
        out += _system_note("response-format", _JSON_NOTE.format("json_object"))
    elif kind == "json_schema":
        if "response_schema" in kwargs:
            schema = kwargs["response_schema"]
        else:
            inner = _get(response_format, "json_schema")
            schema = None if inner is None else _get(inner, "schema", _get(inner, "json_schema", inner))
        body = _JSON_NOTE.format("json_schema") + _SCHEMA_NOTE.format(_compact(_deep_sort(schema)))
        out += _system_note("response-format", body)
    return out


def build_chat_segments(
    messages: Sequence[Any],
    tools: Sequence[Any] | None = None,
    *,
    add_generation_prompt: bool = True,
    thinking: Any = True,
    image_prompts: Sequence[str] | None = None,
    **kwargs: Any,
) -> tuple[ChatSegment, ...]:
    """Return the segments the checkpoint's ``build_chat_segments`` renders for ``messages`` (OpenAI message dicts,
    as SGLang passes them) and ``tools``; ``kwargs`` are the template's (``thinking_effort``, ``tool_choice``,
    ``response_format``, ``response_schema``; others are ignored, as there). Raises
    :class:`~kimi_viz.errors.WhatIfError` where the checkpoint's code raises."""
    try:
        return _build(messages, tools, add_generation_prompt, thinking, image_prompts, kwargs)
    except (KeyError, TypeError, AttributeError) as exc:  # the checkpoint's code fails the same way on such data
        raise _refused(f"the chat cannot be rendered ({type(exc).__name__}: {str(exc)[:80]})") from None
    except RecursionError:
        raise _refused("the chat nests too deeply to render") from None


def _build(
    messages: Sequence[Any],
    tools: Any,
    add_generation_prompt: bool,
    thinking: Any,
    image_prompts: Sequence[str] | None,
    kwargs: Mapping[str, Any],
) -> tuple[ChatSegment, ...]:
    messages = [_normalized(message) for message in order_tool_results(messages)]
    tools = _deep_sort(tools)
    images = _Images(image_prompts)
    out: list[ChatSegment] = []
    if tools:
        out += _system_note("tool-declare", _TOOLS_NOTE.format(_compact(tools)))
    effort = kwargs.get("thinking_effort")
    if thinking and effort is not None and effort not in THINKING_EFFORTS:
        raise _refused(f"Unsupported thinking_effort={effort!r}; supported values are {list(THINKING_EFFORTS)}.")
    if thinking and effort:
        out += _system_note("thinking-effort", _EFFORT_NOTE.format(effort))
    walk = _Conversation(images, bool(thinking))
    for message in messages:
        if isinstance(message, dict):
            out += walk.render(message)
    out += _request_notes(kwargs)
    if add_generation_prompt:
        out += _open("message", [("role", "assistant")]) + _open("think" if thinking else "response")
    images.check()
    return tuple(out)


def encode_segments(tokenizer: KimiTokenizer, segments: Sequence[ChatSegment]) -> list[int]:
    """Return the ids of ``segments``, each encoded on its own (``_encode_chat_segments``)."""
    ids: list[int] = []
    for segment in segments:
        ids += tokenizer.encode(segment.text, allow_special=segment.control)
    return ids


def apply_chat_template(
    tokenizer: KimiTokenizer,
    messages: Sequence[Any],
    tools: Sequence[Any] | None = None,
    *,
    add_generation_prompt: bool = True,
    thinking: Any = True,
    template_kwargs: Mapping[str, Any] | None = None,
) -> RenderedChat:
    """Return what the checkpoint tokenizer's ``apply_chat_template(messages, tools, tokenize=True, ...)`` returns
    for one chat, as a :class:`RenderedChat`: ``image_prompts`` and the other template arguments come in
    ``template_kwargs``, and ``thinking_effort`` defaults to ``max`` as there."""
    kwargs = dict(template_kwargs or {})
    prompts = kwargs.pop("image_prompts", None)
    kwargs.setdefault("thinking_effort", DEFAULT_THINKING_EFFORT)
    segments = build_chat_segments(
        messages, tools, add_generation_prompt=add_generation_prompt, thinking=thinking, image_prompts=prompts, **kwargs
    )
    ids = encode_segments(tokenizer, segments)
    effort = kwargs.get("thinking_effort")
    return RenderedChat(
        segments=segments,
        input_ids=tuple(ids),
        tokens=tuple(tokenizer.token_text(token) for token in ids),
        thinking=bool(thinking),
        thinking_effort=str(effort) if thinking and effort else None,
        image_prompts=len(prompts or ()),
    )


__all__ = [
    "OPEN",
    "CLOSE",
    "SEP",
    "END_OF_MSG",
    "IMAGE_PLACEHOLDER",
    "THINKING_EFFORTS",
    "ChatSegment",
    "RenderedChat",
    "order_tool_results",
    "build_chat_segments",
    "encode_segments",
    "apply_chat_template",
]
