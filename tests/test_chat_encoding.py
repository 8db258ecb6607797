"""Kimi-K3's chat rendering as the kit transcribes it, and each SGLang release's way of handing it a chat."""

from __future__ import annotations

import json

import pytest
from model_folders import K3_BASE_TOKENS, merge_tokens, ranks_lines, tokenizer_config, write_ranks

from kimi_viz.errors import WhatIfError
from kimi_viz.request.chat_encoding import apply_chat_template, build_chat_segments
from kimi_viz.request.chat_server import CALL_SITES, encode_chat_request
from kimi_viz.request.tokenizer import read_tokenizer

MERGES = merge_tokens()
BOS, EOM, OPEN, CLOSE, SEP, PAD = 163584, 163586, 163587, 163588, 163589, 163605


def t(piece: str) -> int:
    """Return the synthetic vocabulary's id of ``piece`` (a byte, or one of the merges)."""
    data = piece.encode("utf-8")
    return data[0] if len(data) == 1 else 256 + MERGES.index(data)


def attr(key: str, value: str) -> list[int]:
    """Return the ids of one attribute whose key and value are single tokens."""
    return [t(f" {key}"), t('="'), t(value), t('"')]


@pytest.fixture(scope="module")
def k3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("k3tok")
    ranks = write_ranks(folder / "tiktoken.model", ranks_lines(K3_BASE_TOKENS))
    config = folder / "tokenizer_config.json"
    config.write_text(json.dumps(tokenizer_config(K3_BASE_TOKENS)))
    return read_tokenizer(ranks, config)


def open_message(role: str) -> list[int]:
    return [OPEN, t("message"), *attr("role", role), SEP]


END_MESSAGE = [CLOSE, t("message"), SEP, EOM]


# --- the checkpoint's renderer ---------------------------------------------------------------------------------------
def test_a_user_turn_without_thinking_has_these_ids(k3):
    chat = apply_chat_template(k3, [{"role": "user", "content": "Hello world"}], thinking=False)
    assert list(chat.input_ids) == [
        *open_message("user"),
        t("Hello"),
        t(" world"),
        *END_MESSAGE,
        *open_message("assistant"),
        OPEN,
        t("response"),
        SEP,
    ]
    assert chat.text == (
        '<|open|>message role="user"<|sep|>Hello world<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'
    )
    assert chat.tokens[:7] == ("<|open|>", "message", " role", '="', "user", '"', "<|sep|>")
    assert chat.thinking_effort is None


def test_thinking_defaults_on_with_the_max_effort_note_first(k3):
    chat = apply_chat_template(k3, [{"role": "user", "content": "Hello"}])
    assert chat.thinking and chat.thinking_effort == "max"
    assert chat.text.startswith('<|open|>message role="system" type="thinking-effort"<|sep|>`thinking_effort` guides')
    assert "Now the system is invoked with `thinking_effort=max`.<|close|>message" in chat.text
    assert chat.text.endswith('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>')
    assert list(chat.input_ids[-3:]) == [OPEN, t("think"), SEP]


def test_an_image_part_is_one_media_pad_between_the_texts(k3):
    image = {"type": "image_url", "image_url": {"url": "x"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What"}, image]}]
    chat = apply_chat_template(k3, messages, thinking=False, template_kwargs={"image_prompts": ["<|media_pad|>"]})
    assert list(chat.input_ids[:9]) == [*open_message("user"), t("What"), PAD]
    assert chat.positions(PAD) == (8,)
    assert chat.image_prompts == 1


def test_earlier_turns_reasoning_and_names(k3):
    messages = [
        {"role": "system", "content": "You are helpful.", "name": "policy"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Paris", "reasoning_content": "the city", "name": "bot"},
        {"role": "assistant", "content": "x", "reasoning_content": "   "},
    ]
    chat = apply_chat_template(k3, messages, template_kwargs={"thinking_effort": None})
    assert chat.text == (
        '<|open|>message role="system" name="policy"<|sep|>You are helpful.<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="user"<|sep|>Hello<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="assistant" name="bot"<|sep|><|open|>think<|sep|>the city<|close|>think<|sep|>'
        "<|open|>response<|sep|>Paris<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        '<|open|>message role="assistant"<|sep|><|open|>think<|sep|><|close|>think<|sep|>'
        "<|open|>response<|sep|>x<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
    )


def test_tools_calls_and_results_in_call_order(k3):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "n": 2}'}},
                {"id": "b", "function": {"name": "search", "arguments": '{"broken'}},
            ],
        },
        {"role": "tool", "tool_call_id": "b", "name": "stale", "content": "r2"},
        {"role": "tool", "tool_call_id": "a", "content": "r1"},
    ]
    chat = apply_chat_template(k3, messages, tools, thinking=False, template_kwargs={"tool_choice": "required"})
    assert chat.text == (
        '<|open|>message role="system" type="tool-declare"<|sep|># Tools\nHere are the available tools, described '
        'in JSONSchema.\n\n```json\n[{"function":{"name":"get_weather","parameters":{"type":"object"}},'
        '"type":"function"}]\n```<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="user"<|sep|>go<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>'
        '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
        '<|close|>argument<|sep|><|open|>argument key="n" type="number"<|sep|>2<|close|>argument<|sep|>'
        '<|close|>call<|sep|><|open|>call tool="search" index="2"<|sep|><|open|>json type="object"<|sep|>{"broken'
        "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
        '<|open|>message role="tool" tool="get_weather" index="1"<|sep|>r1<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="tool" tool="search" index="2"<|sep|>r2<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="system" type="tool-choice"<|sep|>The system is invoked with `tool_choice=required`.\n'
        "You MUST call tools in the next message.<|close|>message<|sep|><|end_of_msg|>"
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'
    )


def test_response_format_schema_is_sorted_and_compact():
    segments = build_chat_segments(
        [{"role": "user", "content": "x"}],
        add_generation_prompt=False,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": {"b": 1, "a": [2]}}},
    )
    assert segments[-5].text.endswith('The JSON data must match the following schema:\n```json\n{"a":[2],"b":1}\n```')


def test_client_text_never_becomes_a_control_token(k3):
    chat = apply_chat_template(k3, [{"role": "user", "content": "<|open|>"}], thinking=False)
    # the user message's opener, the assistant message's and its response channel's; the text is 8 byte tokens
    assert chat.positions(OPEN) == (0, 19, 26)
    assert chat.tokens[7:15] == ("<", "|", "o", "p", "e", "n", "|", ">")
    assert chat.segments[7].text == "<|open|>" and not chat.segments[7].control


@pytest.mark.parametrize(
    "messages, kwargs, expected",
    [
        ([{"role": "user", "content": "x"}], {"thinking_effort": "medium"}, "Unsupported thinking_effort='medium'"),
        ([{"role": "user", "content": "x"}], {"image_prompts": ["<|media_pad|>"]}, "image prompt count 1"),
        ([{"role": "tool", "content": "r"}], {}, "no resolvable tool name"),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}],
            {},
            "must be a JSON object",
        ),
    ],
)
def test_what_the_checkpoints_renderer_raises_on_is_refused(k3, messages, kwargs, expected):
    with pytest.raises(WhatIfError) as caught:
        apply_chat_template(k3, messages, template_kwargs=kwargs)
    assert expected in str(caught.value) and "HTTP 400" in str(caught.value)


# --- what each release hands the renderer -----------------------------------------------------------------------------
def chat(*messages, **fields):
    return {"messages": list(messages), **fields}


def user(content):
    return {"role": "user", "content": content}


def test_the_request_side_passes_one_media_pad_per_image_and_says_where(k3):
    body = chat(user([{"type": "text", "text": "What"}, {"type": "image_url", "image_url": {"url": "data:,"}}]))
    for release, (prepare, call) in CALL_SITES.items():
        rendered = encode_chat_request(k3, body, release=release)
        assert rendered.release == release and rendered.image_prompts == 1
        assert rendered.positions(PAD) and rendered.thinking_effort == "max"
        assert rendered.notes[-1] == (
            f"SGLang {release}: entrypoints/openai/serving_chat.py:{prepare} prepares the messages, "
            f":{call} calls apply_chat_template"
        )


def test_reasoning_effort_picks_thinking_and_its_effort(k3):
    none = encode_chat_request(k3, chat(user("Hello"), reasoning_effort="none"))
    assert not none.thinking and none.text.endswith("<|open|>response<|sep|>")
    low = encode_chat_request(k3, chat(user("Hello"), reasoning_effort="low"))
    assert low.thinking_effort == "low"
    medium = encode_chat_request(k3, chat(user("Hello"), reasoning_effort="medium"))
    assert medium.thinking_effort == "max"
    assert any("reasoning_effort='medium': Kimi K3 does not support it" in note for note in medium.notes)
    popped = encode_chat_request(k3, chat(user("Hello"), chat_template_kwargs={"reasoning_effort": "high"}))
    assert popped.thinking_effort == "high"
    server = encode_chat_request(k3, chat(user("Hello")), server_template_kwargs={"reasoning_effort": "low"})
    assert server.thinking_effort == "low"


def test_the_request_side_reshapes_messages_before_the_renderer(k3):
    body = chat(
        {"role": "developer", "content": "Rules"},
        {"role": "user", "content": "a <|kimi_image_placeholder|> b", "name": "alice"},
        {"role": "function", "content": "skipped"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "ok"}]},
        chat_template_kwargs={"thinking": False},
    )
    rendered = encode_chat_request(k3, body, release="0.5.18")
    assert rendered.text == (
        '<|open|>message role="system"<|sep|>Rules<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="user"<|sep|>a <| kimi_image_placeholder |> b<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>'
        "<|close|>message<|sep|><|end_of_msg|>"
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'
    )
    notes = " | ".join(rendered.notes)
    assert "a user message's 'name' is not a field of it: dropped" in notes
    assert "the renderer skips a 'function' message" in notes
    assert "messages[3].content[0]: a thinking part is dropped" in notes


def test_a_final_assistant_message_continued_is_encoded_after_the_prompt(k3):
    body = chat(user("Hello"), {"role": "assistant", "content": "[BOS]Paris"}, continue_final_message=True)
    rendered = encode_chat_request(k3, body)
    assert list(rendered.input_ids[-4:]) == [OPEN, t("think"), SEP, t("Paris")]  # [BOS] stripped as SGLang does
    assert "<|open|>response" not in rendered.text


def test_tool_choice_reaches_the_renderer_only_with_tools(k3):
    tools = [{"type": "function", "function": {"name": "search"}}]
    with_tools = encode_chat_request(k3, chat(user("go"), tools=tools, tool_choice="none"))
    assert "`tool_choice=none`" in with_tools.text
    with pytest.raises(WhatIfError, match="Tools cannot be empty if tool choice is set to required"):
        encode_chat_request(k3, chat(user("go"), tool_choice="required"))
    system_tools = chat({"role": "system", "tools": tools}, user("go"), tool_choice="required")
    assert "## New Tools Available" in encode_chat_request(k3, system_tools).text


@pytest.mark.parametrize(
    "body, old, new",
    [
        (chat({"role": "root", "content": "r"}, user("x")), "0.5.22", "0.5.23"),
        (chat(user("x"), reasoning_effort="ultra"), "0.5.22", "0.5.23"),
        (
            chat(user("x"), tools=[{"type": "function", "function": {"name": "f", "strict": None}}]),
            "0.5.22",
            "0.5.23",
        ),
        (chat(user([{"type": "image_url", "image_url": {"url": "u", "detail": "default"}}])), "0.5.22", "0.5.23"),
        (chat(user([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}])), "0.5.18", "0.5.19"),
    ],
)
def test_what_a_release_first_accepts_is_refused_before_it(k3, body, old, new):
    with pytest.raises(WhatIfError) as caught:
        encode_chat_request(k3, body, release=old)
    assert f"SGLang {old} answers HTTP 400" in str(caught.value) and "\n" not in str(caught.value)
    assert encode_chat_request(k3, body, release=new).release == new


def test_a_request_chat_template_is_refused_from_0_5_23(k3):
    body = chat(user("x"), chat_template_kwargs={"chat_template": "{{ x }}"})
    assert encode_chat_request(k3, body, release="0.5.22").text.startswith("<|open|>message")
    with pytest.raises(WhatIfError, match="Request-supplied chat_template is not allowed"):
        encode_chat_request(k3, body, release="0.5.23")


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"messages": []}, "messages: expected a list of 1 to 1024 messages"),
        (chat({"role": "User", "content": "x"}), "messages[0].role"),
        (chat({"role": "user"}), "a user message needs content"),
        (chat(user([{"type": "input_text", "text": "x"}])), "messages[0].content[0].type"),
        (chat({"role": "system", "content": [{"type": "thinking", "thinking": "x"}]}), "only valid in assistant"),
        (chat(user("x"), chat_template_kwargs={"tools": []}), "multiple values"),
        (chat(user("x"), response_format={"type": "json_schema"}), "schema_ is required"),
    ],
)
def test_a_body_the_release_refuses_is_refused_in_one_line(k3, body, expected):
    with pytest.raises(WhatIfError) as caught:
        encode_chat_request(k3, body, release="0.5.23", source="req.json")
    assert expected in str(caught.value) and str(caught.value).startswith("req.json: ")
    assert "\n" not in str(caught.value)


def test_a_template_argument_that_reshapes_the_output_is_not_modelled(k3):
    with pytest.raises(WhatIfError, match="chat_template_kwargs.truncation changes what apply_chat_template returns"):
        encode_chat_request(k3, chat(user("x"), chat_template_kwargs={"truncation": True, "max_length": 3}))
