"""How each SGLang release hands a client's chat to the Kimi-K3 tokenizer (``entrypoints/openai/serving_chat.py``).

A ``/v1/chat/completions`` body goes through three layers of SGLang before the checkpoint's renderer sees it
(:mod:`.chat_encoding`), and :func:`encode_chat_request` replays them for the release asked:

* ``entrypoints/openai/protocol.py`` parses the body into ``ChatCompletionRequest``: which roles, content parts
  and reasoning efforts a release accepts (:data:`CHAT_RULES`), its validators (``reasoning_effort`` and
  ``reasoning`` set ``chat_template_kwargs.thinking``; ``tool_choice`` defaults to ``none`` without tools and
  ``auto`` with them), and the fields a message keeps (a user message only its role and content; a ``name`` or a
  ``reasoning`` key it does not know is dropped). A body it refuses is answered with HTTP 400, and so here with
  :class:`~kimi_viz.errors.WhatIfError` naming the field;
* ``entrypoints/openai/serving_chat.py`` checks the request (tools for ``tool_choice``, unique tool names, a
  ``json_schema`` with a schema), pops ``chat_template_kwargs.reasoning_effort`` onto the request, merges the
  server's default template arguments, dumps each message and parses tool-call arguments that are JSON objects;
* ``_prepare_kimi_k3_messages`` keeps each message's text and ``image_url`` parts (video, audio, thinking and
  tool-reference parts are dropped from what the renderer sees), writes ``<|kimi_image_placeholder|>`` a client
  typed as ``<| kimi_image_placeholder |>``, turns ``developer`` into ``system``, gives a system message its
  declared tools, and splits off a final assistant message under ``continue_final_message``. ``_encode_messages``
  then calls the tokenizer's ``apply_chat_template`` with ``image_prompts`` (one ``<|media_pad|>`` per image
  part), ``thinking_effort`` (``reasoning_effort`` low/high/max), ``tool_choice`` (required/none with tools),
  ``response_format`` and the request's tools; an assistant prefix is encoded after it.

The K3 branch of ``_encode_messages`` is the same code in every release from 0.5.17 to 0.5.23; what differs is
what reaches it (:class:`ChatRules`). The sampling side (tool-call and output constraints) is not modelled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._records import frozen
from ..errors import WhatIfError
from ..releases import NEWEST, release_for, rule_in_force
from .chat_encoding import IMAGE_PLACEHOLDER, RenderedChat, apply_chat_template
from .tokenizer import KimiTokenizer

IMAGE_PLACEHOLDER_ESCAPED = "<| kimi_image_placeholder |>"  # neutralize_kimi_k3_image_placeholder
MEDIA_PAD = "<|media_pad|>"
MAX_MESSAGES = 1024
MAX_TOOLS = 1024
MAX_IMAGE_PARTS = 64
BASE_ROLES = ("system", "assistant", "tool", "function", "developer", "latest_reminder")
BASE_TIERS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
BASE_PARTS = ("text", "thinking", "reasoning", "image_url", "video_url", "audio_url", "tool_reference")
#: Template arguments that change what apply_chat_template returns (a batch, tensors, a cut): not modelled.
OUTPUT_SHAPING = ("padding", "truncation", "max_length", "return_tensors")
#: Template arguments SGLang's call passes itself: one in chat_template_kwargs is a TypeError there.
FIXED_ARGUMENTS = ("conversation", "tools", "add_generation_prompt")


@frozen
class ChatRules:
    """What one range of releases accepts on the way to the renderer (each row starts at ``version``)."""

    version: str
    roles: tuple[str, ...]  # _GenericMessageRole ("user" is its own model)
    tiers: tuple[str, ...]  # ReasoningEffortTier
    parts: tuple[str, ...]  # the content part types ChatCompletionMessageContentPart accepts
    strict_null: bool  # Function.strict accepts null (Optional[bool]); before, bool = False
    details: tuple[str, ...]  # image_url.detail values (0.5.23 reads "default" as "auto")
    tool_roles: tuple[str, ...]  # roles whose message-level tools count as tools (_effective_tools)
    template_in_kwargs: bool  # chat_template_kwargs.chat_template is passed on (later: refused by default)
    change: str


CHAT_RULES: tuple[ChatRules, ...] = (
    ChatRules(
        "0.5.17",
        BASE_ROLES,
        BASE_TIERS,
        BASE_PARTS,
        strict_null=False,
        details=("auto", "low", "high"),
        tool_roles=("system", "developer"),
        template_in_kwargs=True,
        change="the first Kimi-K3 chat path",
    ),
    ChatRules(
        "0.5.19",
        BASE_ROLES,
        BASE_TIERS,
        (*BASE_PARTS, "input_audio"),
        strict_null=False,
        details=("auto", "low", "high"),
        tool_roles=("system", "developer"),
        template_in_kwargs=True,
        change="protocol.py accepts input_audio parts (turned into audio_url)",
    ),
    ChatRules(
        "0.5.23",
        (*BASE_ROLES, "root"),
        (*BASE_TIERS[:-1], "ultra", "max"),
        (*BASE_PARTS, "input_audio"),
        strict_null=True,
        details=("auto", "low", "high", "default"),
        tool_roles=("root", "system", "developer"),
        template_in_kwargs=False,
        change=(
            "protocol.py accepts the root role and the ultra effort, a null function.strict and image detail "
            '"default"; serving_chat.py refuses chat_template_kwargs.chat_template by default'
        ),
    ),
)

#: Where each release prepares the messages and calls the tokenizer: serving_chat.py lines.
CALL_SITES: dict[str, tuple[int, int]] = {
    "0.5.17": (366, 541),
    "0.5.18": (374, 549),
    "0.5.19": (424, 599),
    "0.5.20": (441, 616),
    "0.5.21": (491, 666),
    "0.5.22": (506, 681),
    "0.5.23": (652, 799),
}


class _Body:
    """One request body being read: the release's rules, where to say a fault is, and the notes gathered."""

    def __init__(self, rules: ChatRules, release: str, source: str):
        self.rules = rules
        self.release = release
        self.source = source
        self.notes: list[str] = []
        self.images = 0

    def fail(self, where: str, message: str) -> WhatIfError:
        return WhatIfError(f"{self.source}: {where}: {message} (SGLang {self.release} answers HTTP 400)")


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else type(value).__name__


def _optional_str(body: _Body, value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise body.fail(where, f"expected a string or null, got {_kind(value)}")
    return value


def _flag(body: _Body, value: Any, where: str, *, nullable: bool) -> bool | None:
    if value is None and nullable:
        return None
    if not isinstance(value, bool):
        raise body.fail(where, f"expected true or false, got {_kind(value)} (other values are not modelled)")
    return value


# --- content parts ----------------------------------------------------------------------------------------------
def _image_part(body: _Body, part: Mapping[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    if not isinstance(image, dict) or not isinstance(image.get("url"), str):
        raise body.fail(f"{where}.image_url", f'expected {{"url": "..."}}, got {_kind(image)}')
    detail = image.get("detail", "auto")
    if detail not in body.rules.details:
        raise body.fail(f"{where}.image_url.detail", f"expected one of {', '.join(body.rules.details)}, got {detail!r}")
    body.images += 1
    if body.images > MAX_IMAGE_PARTS:
        raise body.fail(where, f"more than {MAX_IMAGE_PARTS} image parts; split the request")
    dumped = {"url": image["url"], "detail": "auto" if detail == "default" else detail}
    return {"type": "image_url", "image_url": dumped}


def _part(body: _Body, part: Any, role: str, where: str) -> dict[str, Any]:
    """Return a content part as the request model dumps it, refusing what protocol.py refuses."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in body.rules.parts:
        raise body.fail(f"{where}.type", f"{kind!r}; expected one of {', '.join(body.rules.parts)}")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise body.fail(f"{where}.text", f"expected a string, got {_kind(part.get('text'))}")
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        return _image_part(body, part, where)
    if kind in ("thinking", "reasoning"):
        if role != "assistant":
            raise body.fail(where, "thinking content parts are only valid in assistant messages")
        if ("thinking" in part and part["thinking"] is not None) == ("text" in part and part["text"] is not None):
            raise body.fail(where, "thinking parts require exactly one of 'thinking' or 'text'")
    body.notes.append(f"{where}: a {kind} part is dropped from what the renderer sees (_prepare_kimi_k3_messages)")
    return {"type": kind}


def _content(body: _Body, value: Any, role: str, where: str) -> Any:
    if isinstance(value, str) or (value is None and role != "user"):
        return value
    if not isinstance(value, list):
        raise body.fail(f"{where}.content", f"expected a string or a list of parts, got {_kind(value)}")
    return [_part(body, part, role, f"{where}.content[{k}]") for k, part in enumerate(value)]


# --- tools and calls ----------------------------------------------------------------------------------------------
def _function(body: _Body, value: Any, where: str) -> dict[str, Any]:
    """Return a tool's function as ``model_dump(exclude_unset=True)`` writes it (unknown keys dropped)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise body.fail(where, f'expected an object with a "name" string, got {_kind(value)}')
    out: dict[str, Any] = {}
    for key in value:
        if key == "description":
            out[key] = _optional_str(body, value[key], f"{where}.description")
        elif key in ("name", "parameters"):
            out[key] = value[key]
        elif key == "strict":
            flag = _flag(body, value[key], f"{where}.strict", nullable=body.rules.strict_null)
            if flag is not None:
                out[key] = flag
        elif key == "defer_loading":
            flag = _flag(body, value[key], f"{where}.defer_loading", nullable=True)
            if flag is not None:
                out[key] = flag
    return out


def _tool(body: _Body, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise body.fail(where, f"expected a tool object, got {_kind(value)}")
    out: dict[str, Any] = {}
    if "type" in value:
        if not isinstance(value["type"], str):
            raise body.fail(f"{where}.type", f"expected a string, got {_kind(value['type'])}")
        out["type"] = value["type"]
    function = _function(body, value.get("function"), f"{where}.function")
    if "defer_loading" in value:
        out["defer_loading"] = _flag(body, value["defer_loading"], f"{where}.defer_loading", nullable=True)
        if out["defer_loading"] is not None and "defer_loading" not in function:
            function["defer_loading"] = out["defer_loading"]  # Tool._propagate_defer_loading
    out["function"] = function
    return {key: out[key] for key in value if key in out}


def _tools(body: _Body, value: Any, where: str) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise body.fail(where, f"expected a list of at most {MAX_TOOLS} tools, got {_kind(value)}")
    return [_tool(body, tool, f"{where}[{k}]") for k, tool in enumerate(value)]


def _call(body: _Body, value: Any, where: str) -> dict[str, Any]:
    """Return a tool call as ToolCall dumps it, its JSON-object arguments parsed (non-strict, as for K3)."""
    if not isinstance(value, dict) or not isinstance(value.get("function"), dict):
        raise body.fail(where, f'expected an object with a "function" object, got {_kind(value)}')
    if value.get("type", "function") != "function":
        raise body.fail(f"{where}.type", f"expected 'function', got {value.get('type')!r}")
    if value.get("index") is not None and (isinstance(value["index"], bool) or not isinstance(value["index"], int)):
        raise body.fail(f"{where}.index", f"expected an integer, got {_kind(value['index'])}")
    function = value["function"]
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, (str, dict)):
        raise body.fail(f"{where}.function.arguments", f"expected a string or an object, got {_kind(arguments)}")
    if isinstance(arguments, str):
        arguments = _parsed_object(arguments)
    name = _optional_str(body, function.get("name"), f"{where}.function.name")
    return {
        "id": _optional_str(body, value.get("id"), f"{where}.id"),
        "index": value.get("index"),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _calls(body: _Body, calls: list[Any], where: str) -> list[dict[str, Any]]:
    return [_call(body, call, f"{where}.tool_calls[{k}]") for k, call in enumerate(calls)]


def _parsed_object(text: str) -> Any:
    """Return ``text`` parsed when it is a JSON object, else ``text`` (normalize_assistant_tool_call_arguments)."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return parsed if isinstance(parsed, dict) else text


# --- messages -----------------------------------------------------------------------------------------------------
def _message(body: _Body, raw: Any, where: str) -> dict[str, Any]:
    """Return a message as ``msg.model_dump()`` writes it for ``_apply_jinja_template``."""
    if not isinstance(raw, dict):
        raise body.fail(where, f"expected a message object, got {_kind(raw)}")
    role = raw.get("role")
    if role == "user":
        if raw.get("content") is None:
            raise body.fail(f"{where}.content", "a user message needs content")
        for key in ("name", "reasoning_content", "tool_calls"):
            if key in raw:
                body.notes.append(f"{where}: a user message's {key!r} is not a field of it: dropped")
        return {"role": "user", "content": _content(body, raw["content"], "user", where)}
    if not isinstance(role, str) or role.lower() not in body.rules.roles:
        roles = ", ".join(("user", *body.rules.roles))
        raise body.fail(f"{where}.role", f"expected one of {roles}, got {role!r}")
    role = role.lower()
    calls = raw.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise body.fail(f"{where}.tool_calls", f"expected a list, got {_kind(calls)}")
    if "reasoning" in raw and role == "assistant":
        body.notes.append(f"{where}: 'reasoning' is not a message field (only reasoning_content is): dropped")
    return {
        "role": role,
        "content": _content(body, raw.get("content"), role, where),
        "tool_call_id": _optional_str(body, raw.get("tool_call_id"), f"{where}.tool_call_id"),
        "name": _optional_str(body, raw.get("name"), f"{where}.name"),
        "reasoning_content": _optional_str(body, raw.get("reasoning_content"), f"{where}.reasoning_content"),
        "tool_calls": None if calls is None else _calls(body, calls, where),
        "tools": _tools(body, raw.get("tools"), f"{where}.tools"),
    }


def _neutralized(value: Any) -> Any:
    """Return ``value`` with every ``<|kimi_image_placeholder|>`` in its strings escaped (dict keys kept)."""
    if isinstance(value, str):
        return value.replace(IMAGE_PLACEHOLDER, IMAGE_PLACEHOLDER_ESCAPED)
    if isinstance(value, list):
        return [_neutralized(item) for item in value]
    if isinstance(value, dict):
        return {key: _neutralized(item) for key, item in value.items()}
    return value


def _prepared(body: _Body, message: dict[str, Any], where: str) -> dict[str, Any]:
    """Return one message as ``_prepare_kimi_k3_messages`` leaves it for the renderer."""
    content = message.get("content")
    if isinstance(content, list):
        message["content"] = [
            {"type": "text", "text": _neutralized(part["text"])} if part["type"] == "text" else part
            for part in content
            if part["type"] in ("text", "image_url")
        ]
    elif isinstance(content, str):
        message["content"] = _neutralized(content)
    elif content is None:
        message["content"] = ""
    if message["role"] == "assistant":
        if "reasoning_content" in message:
            message["reasoning_content"] = _neutralized(message["reasoning_content"])
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = _neutralized(call["function"]["arguments"])
    if message["role"] not in ("user", "system", "developer", "assistant", "tool"):
        body.notes.append(f"{where}: the renderer skips a {message['role']!r} message (it knows no such role)")
    if message["role"] == "developer":
        message["role"] = "system"
    return message


# --- the request --------------------------------------------------------------------------------------------------
def _effort(body: _Body, value: Any, where: str) -> str | float | None:
    """Return a reasoning effort as ReasoningEffortType takes it: a tier of the release, or a float in [0, 0.99]."""
    if value is None or (isinstance(value, str) and value in body.rules.tiers):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 0.99:
        return float(value)
    raise body.fail(where, f"expected one of {', '.join(body.rules.tiers)} or a number in [0, 0.99], got {value!r}")


def _reasoning(body: _Body, data: Mapping[str, Any], kwargs: dict[str, Any]) -> str | float | None:
    """Return the request's reasoning_effort and set ``thinking``/``enable_thinking`` as
    ``normalize_reasoning_inputs`` does (an explicit template argument wins)."""
    effort = _effort(body, data.get("reasoning_effort"), "reasoning_effort")
    thinking = None
    reasoning = data.get("reasoning")
    if isinstance(reasoning, dict):
        given = reasoning.get("effort", reasoning.get("reasoning_effort"))
        if given is not None:
            effort = _effort(body, given, "reasoning.effort")
        enabled = reasoning.get("enabled") if reasoning.get("enabled") is not None else reasoning.get("enable", False)
        if isinstance(enabled, str):
            enabled = enabled.strip().lower() in {"1", "true", "yes", "y", "on"}
        if enabled:
            thinking = True
    if effort is not None:
        thinking = effort != "none"
    if thinking is not None:
        kwargs.setdefault("thinking", thinking)
        kwargs.setdefault("enable_thinking", thinking)
    return effort


def _tool_choice(body: _Body, data: Mapping[str, Any], has_tools: bool) -> Any:
    choice = data.get("tool_choice")
    if choice is None:
        return "auto" if has_tools else "none"
    if choice in ("none", "auto", "required"):
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name", ""), str):
        raise body.fail("tool_choice", f'expected "none", "auto", "required" or a named function, got {choice!r:.60}')
    return {"type": "function", "function": {"name": function.get("name")}}


def _response_format(body: _Body, value: Any) -> dict[str, Any] | None:
    """Return response_format as ``model_dump(exclude_unset=True, by_alias=True)`` writes it."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        raise body.fail("response_format", f"expected a type of text, json_object or json_schema, got {value!r:.60}")
    out: dict[str, Any] = {"type": value["type"]}
    schema = value.get("schema") if value["type"] == "json_schema" else None
    inner = value.get("json_schema")
    if inner is None and schema:  # set_json_schema: a top-level schema moves into json_schema
        inner = {"name": schema.get("title", "Schema"), "schema": schema, "strict": None}
    if inner is not None:
        if not isinstance(inner, dict) or not isinstance(inner.get("name"), str):
            raise body.fail("response_format.json_schema", 'expected an object with a "name" string')
        keys = ("name", "description", "schema", "strict")
        out["json_schema"] = {key: inner[key] for key in keys if key in inner}
    if value["type"] == "json_schema" and (inner is None or inner.get("schema") is None):
        raise body.fail("response_format", "schema_ is required for json_schema response format request.")
    return out


def _template_kwargs(body: _Body, data: Mapping[str, Any], server: Mapping[str, Any] | None) -> dict[str, Any]:
    kwargs = data.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise body.fail("chat_template_kwargs", f"expected an object, got {_kind(kwargs)}")
    kwargs = dict(kwargs or {})
    if "chat_template" in kwargs and not body.rules.template_in_kwargs:
        raise body.fail("chat_template_kwargs.chat_template", "Request-supplied chat_template is not allowed")
    for key in FIXED_ARGUMENTS:
        if key in kwargs:
            raise body.fail(f"chat_template_kwargs.{key}", "apply_chat_template got multiple values for it")
    for key in OUTPUT_SHAPING:
        if key in kwargs:
            raise WhatIfError(
                f"{body.source}: chat_template_kwargs.{key} changes what apply_chat_template returns; "
                "kimi-viz does not model it — remove it"
            )
    return kwargs


def _checked_tools(body: _Body, messages: Sequence[Mapping[str, Any]], tools: list[Any] | None, choice: Any) -> bool:
    """Return whether the request has tools (_effective_tools), refusing what ``_validate_request`` refuses."""
    message_tools = [
        tool for message in messages if message["role"] in body.rules.tool_roles for tool in message.get("tools") or ()
    ]
    every = [*(tools or ()), *message_tools]
    if choice == "required" and not every:
        raise body.fail("tool_choice", "Tools cannot be empty if tool choice is set to required.")
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        if not every:
            raise body.fail("tool_choice", "Tools cannot be empty if tool choice is set to a specific tool.")
        if not any(tool["function"]["name"] == name for tool in every):
            raise body.fail("tool_choice", f"Tool {name!r} not found in tools list.")
    names = [tool["function"]["name"] for tool in every]
    if message_tools and len(names) != len(set(names)):
        raise body.fail("tools", "Tool names must be unique across request and message tools.")
    return bool(every)


def _k3_template_kwargs(
    body: _Body, kwargs: dict[str, Any], effort: Any, choice: Any, has_tools: bool, response_format: Any
) -> dict[str, Any]:
    """Return the template arguments ``_encode_messages`` adds for Kimi-K3 to the request's own."""
    for key in ("tokenize", "return_dict", "image_prompts"):
        kwargs.pop(key, None)
    if body.images:
        kwargs["image_prompts"] = [MEDIA_PAD] * body.images
    if effort in ("low", "high", "max") and "thinking_effort" not in kwargs:
        kwargs["thinking_effort"] = effort
    elif effort not in (None, "none", "low", "high", "max"):
        body.notes.append(
            f"reasoning_effort={effort!r}: Kimi K3 does not support it (SGLang logs a warning); the renderer's "
            "default thinking_effort applies"
        )
    if has_tools and isinstance(choice, str) and choice in ("required", "none"):
        kwargs.setdefault("tool_choice", choice)
    if response_format is not None:
        kwargs.setdefault("response_format", response_format)
    return kwargs


def _final_assistant(messages: list[dict[str, Any]], continue_final: bool) -> tuple[list[dict[str, Any]], str | None]:
    """Return the messages and the assistant prefix ``_handle_last_assistant_message`` splits off."""
    if continue_final and messages and messages[-1].get("role") == "assistant":
        content = messages[-1].get("content")
        if isinstance(content, str):
            return messages[:-1], content
    return messages, None


def encode_chat_request(
    tokenizer: KimiTokenizer,
    data: Any,
    *,
    release: str = NEWEST,
    server_template_kwargs: Mapping[str, Any] | None = None,
    source: str = "the request",
) -> RenderedChat:
    """Return the ids an SGLang ``release`` hands the engine for the chat completions body ``data`` (parsed JSON)
    on a Kimi-K3 server whose checkpoint tokenizer is ``tokenizer``: its messages and template arguments as the
    release passes them to ``apply_chat_template`` (``server_template_kwargs``: the server's default template
    arguments). Raises :class:`~kimi_viz.errors.WhatIfError` naming the field where the release answers HTTP 400."""
    version = release_for(release)[0].version
    body = _Body(rule_in_force(CHAT_RULES, version), version, source)
    if not isinstance(data, dict):
        raise body.fail("the body", f'expected an object with "messages", got {_kind(data)}')
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_MESSAGES:
        raise body.fail("messages", f"expected a list of 1 to {MAX_MESSAGES} messages, got {_kind(raw)}")
    try:
        return _encode(tokenizer, body, data, raw, server_template_kwargs)
    except RecursionError:
        raise body.fail("the body", "nested too deeply") from None


def _encode(
    tokenizer: KimiTokenizer,
    body: _Body,
    data: Mapping[str, Any],
    raw: Sequence[Any],
    server: Mapping[str, Any] | None,
) -> RenderedChat:
    messages = [_message(body, message, f"messages[{k}]") for k, message in enumerate(raw)]
    tools = _tools(body, data.get("tools"), "tools")
    kwargs = _template_kwargs(body, data, server)
    effort = _reasoning(body, data, kwargs)
    declared = data.get("tools") is not None or any(
        m["role"] in body.rules.tool_roles and m.get("tools") for m in messages
    )
    choice = _tool_choice(body, data, declared)
    response_format = _response_format(body, data.get("response_format"))
    has_tools = _checked_tools(body, messages, tools, choice)
    popped = kwargs.pop("reasoning_effort", None)  # _convert_to_internal_request
    effort = effort if popped is None else popped
    for key, value in (server or {}).items():
        kwargs.setdefault(key, value)
    if effort is None and kwargs.get("reasoning_effort") is not None:
        effort = kwargs["reasoning_effort"]
    prepared = [_prepared(body, message, f"messages[{k}]") for k, message in enumerate(messages)]
    continue_final = _flag(body, data.get("continue_final_message", False), "continue_final_message", nullable=False)
    prepared, prefix = _final_assistant(prepared, bool(continue_final))
    kwargs = _k3_template_kwargs(body, kwargs, effort, choice, has_tools, response_format)
    thinking = kwargs.pop("thinking", True)
    rendered = apply_chat_template(tokenizer, prepared, tools, thinking=thinking, template_kwargs=kwargs)
    ids = list(rendered.input_ids)
    if prefix:
        tail = tokenizer.encode(prefix, allow_special=True)
        ids += tail[1:] if tail and tail[0] == tokenizer.bos_token_id else tail
        body.notes.append("continue_final_message: the last assistant message's text is encoded after the prompt")
    prepare, call = CALL_SITES[body.release]
    body.notes.append(
        f"SGLang {body.release}: entrypoints/openai/serving_chat.py:{prepare} prepares the messages, "
        f":{call} calls apply_chat_template"
    )
    return RenderedChat(
        segments=rendered.segments,
        input_ids=tuple(ids),
        tokens=tuple(tokenizer.token_text(token) for token in ids),
        thinking=rendered.thinking,
        thinking_effort=rendered.thinking_effort,
        image_prompts=rendered.image_prompts,
        release=body.release,
        notes=tuple(body.notes),
    )


__all__ = [
    "encode_chat_request",
    "ChatRules",
    "CHAT_RULES",
    "CALL_SITES",
    "IMAGE_PLACEHOLDER_ESCAPED",
]
