"""A checkpoint folder as input: a chat tokenized as the server tokenizes it, its limits, Kimi-K2.5 told apart."""

from __future__ import annotations

import json

import pytest
from model_folders import write_folder, write_k25_folder

from kimi_viz.cli import main
from kimi_viz.request.chat_server import encode_chat_request
from kimi_viz.request.model_folder import read_model_folder

IMAGE = {"type": "image_url", "image_url": {"url": "astronaut.png"}}
OTHER = {"type": "image_url", "image_url": {"url": "chelsea.png"}}
TURN_1 = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "what"}, IMAGE]},
]
CHAT = {
    "messages": [
        *TURN_1,
        {"role": "assistant", "content": "an astronaut in a white suit"},
        {"role": "user", "content": [{"type": "text", "text": "and this one"}, OTHER]},
    ]
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    chat = root / "chat.json"
    chat.write_text(json.dumps(CHAT))
    return write_folder(root / "k3"), write_k25_folder(root / "k25"), chat


def answer_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["whatif", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_a_chat_is_tokenized_by_the_checkpoints_tokenizer_as_each_release_passes_it(folders, capsys):
    k3, _, chat = folders
    code, found = answer_json(
        capsys, "--chat", str(chat), "--model-path", str(k3), "--sglang-version", "0.5.23", "--tp", "2"
    )
    assert code == 0
    rendered = found["request_side"]["rendered"]
    expected = encode_chat_request(read_model_folder(k3).tokenizer, CHAT, release="0.5.23")
    assert rendered["by"] == f"tokenized by {k3}"
    assert rendered["input_ids"] == list(expected.input_ids)
    assert rendered["tokens"] == list(expected.tokens)
    assert rendered["length"] == len(expected.input_ids)
    assert rendered["input_ids"].count(163605) == 2 == rendered["placeholders"]  # one <|media_pad|> per image
    sources = found["server"]["sources"]
    assert sources["preprocessor_config.json"]["source"] == f"--model-path {k3}"


def test_without_a_folder_the_text_is_counted_and_said_so(folders, capsys):
    _, _, chat = folders
    code, found = answer_json(capsys, "--chat", str(chat), "--sglang-version", "0.5.23", "--tp", "2")
    assert code == 0
    rendered = found["request_side"]["rendered"]
    assert rendered["by"] == "counted (no --model-path)"
    assert rendered["tokens"] is None and rendered["input_ids"] is None


def test_a_later_turn_continues_the_earlier_one_by_the_tokens_its_answer_took(folders, capsys):
    k3, _, chat = folders
    tokenizer = read_model_folder(k3).tokenizer
    first = encode_chat_request(tokenizer, {"messages": TURN_1}, release="0.5.18").input_ids
    whole = encode_chat_request(tokenizer, CHAT, release="0.5.18").input_ids
    assert whole[: len(first)] == first  # the renderer writes the earlier turn again id for id
    code, found = answer_json(
        capsys, "--chat", str(chat), "--model-path", str(k3), "--sglang-version", "0.5.18", "--tp", "1"
    )
    assert code == 0
    turns = {r["id"]: r for r in found["load"]["requests"]}
    assert set(turns) == {"turn1", "turn2"}
    answer_tokens = turns["turn1"]["output"]
    assert 1 < answer_tokens < 40  # the assistant's words and its closing tokens, not the counted guess
    assert turns["turn1"]["prompt_length"] + answer_tokens <= turns["turn2"]["prompt_length"]
    assert turns["turn2"]["continues"] == "turn1"


def test_a_kimi_k25_folder_is_never_replayed_as_kimi_k3(folders, capsys):
    _, k25, chat = folders
    assert (
        main(["whatif", "--chat", str(chat), "--model-path", str(k25), "--sglang-version", "0.5.23", "--tp", "2"]) == 2
    )
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "config.json names KimiK25ForConditionalGeneration" in error
    assert "models/kimi_k25.py" in error and "--producer-config kimi-k25" in error


def test_kimi_k25_limits_on_kimi_k3_code_say_which_code_runs(capsys):
    code, found = answer_json(
        capsys, "rocket.jpg", "--producer-config", "kimi-k25", "--sglang-version", "0.5.23", "--tp", "1"
    )
    assert code == 0
    assert any(
        note.startswith("--producer-config / --consumer-config kimi-k25: this replays Kimi-K3's code")
        for note in found["notes"]
    )


def test_a_missing_or_hostile_folder_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    assert main(["whatif", "rocket.jpg", "--model-path", str(folder), "--sglang-version", "0.5.23", "--tp", "1"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "config.json" in error


def test_a_placeholder_id_the_tokenizer_does_not_write_fails_the_chat_as_the_processor_counts(
    folders, tmp_path, capsys
):
    _, _, chat = folders
    mismatched = write_folder(tmp_path / "k3-other-id", placeholder=163600)  # the config names another id
    code, found = answer_json(
        capsys, "--chat", str(chat), "--model-path", str(mismatched), "--sglang-version", "0.5.23", "--tp", "1"
    )
    assert code == 1 and found["status"] == "error-reproduced" and found["stage"] == "request side"
    assert found["request_side"]["rendered"]["placeholders"] == 0  # the tokenizer's 163605 is no placeholder here
    assert found["request_side"]["rendered"]["input_ids"].count(163605) == 1  # turn 1, as the tokenizer wrote it
    assert any("a chat's image prompts carry no id the processor counts" in note for note in found["server"]["notes"])
