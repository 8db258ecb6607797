"""The synthetic checkpoint folder the demo and the notebooks tokenize a chat with: Kimi-K3's files and special ids,
a made-up vocabulary, and a note saying so."""

from __future__ import annotations

import json
from dataclasses import replace

from kimi_viz import get_config, read_model_folder, write_demo_checkpoint
from kimi_viz.request.demo_checkpoint import K3_BASE_TOKENS, NOTE_FILE, WORDS, merge_tokens


def test_the_folder_holds_the_files_a_kimi_server_reads_and_the_note(tmp_path):
    folder = write_demo_checkpoint(tmp_path / "ckpt")
    assert folder == tmp_path / "ckpt"
    assert sorted(p.name for p in folder.iterdir()) == [
        NOTE_FILE,
        "config.json",
        "preprocessor_config.json",
        "tiktoken.model",
        "tokenizer_config.json",
    ]
    note = (folder / NOTE_FILE).read_text()
    assert note.startswith("# A synthetic Kimi-K3-shaped checkpoint folder") and "NOT what the real tokenizer" in note
    assert len((folder / "tiktoken.model").read_bytes().splitlines()) == K3_BASE_TOKENS
    assert json.loads((folder / "config.json").read_text())["media_placeholder_token_id"] == 163605


def test_it_reads_as_a_kimi_k3_checkpoint_whose_special_ids_are_kimi_k3s(tmp_path):
    model = read_model_folder(write_demo_checkpoint(tmp_path / "ckpt"))
    assert model.is_k3 and model.architecture == "KimiK3ForConditionalGeneration"
    assert model.facts.sglang_model == "models/kimi_k3.py" and model.tokenizer_class == "TikTokenTokenizer"
    assert (model.placeholder.config_id, model.placeholder.tokenizer_id, model.placeholder.mismatch) == (
        163605,
        163605,
        None,
    )
    tokenizer = model.tokenizer
    assert tokenizer.base_tokens == K3_BASE_TOKENS and tokenizer.vocab_size == 163840
    assert [tokenizer.special_id(n) for n in ("<|media_begin|>", "<|media_content|>", "<|media_end|>")] == [
        163602,
        163603,
        163604,
    ]
    assert replace(model.processor, name="kimi-k3") == get_config("kimi-k3")  # Kimi-K3's limits, read back


def test_its_vocabulary_is_made_up_a_listed_word_is_one_token_another_falls_into_bytes(tmp_path):
    tokenizer = read_model_folder(write_demo_checkpoint(tmp_path / "ckpt")).tokenizer
    assert len(tokenizer.encode("assistant", allow_special=False)) == 1
    assert tokenizer.encode("assistant", allow_special=False) == [256 + merge_tokens().index(b"assistant")]
    assert "pictures" not in WORDS and len(tokenizer.encode("pictures", allow_special=False)) > 3
    assert tokenizer.encode("<|media_pad|>", allow_special=True) == [163605]


def test_without_a_folder_it_writes_a_new_temporary_one():
    first, second = write_demo_checkpoint(), write_demo_checkpoint()
    assert first != second and first.name == second.name == "Kimi-K3-synthetic"
    assert (first / "tiktoken.model").is_file() and (second / NOTE_FILE).is_file()
