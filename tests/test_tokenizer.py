"""A Kimi checkpoint's tokenizer read as data: tiktoken.model's ranks, the special tokens after them, no cache."""

from __future__ import annotations

import base64
import json

import pytest
from model_folders import K3_BASE_TOKENS, merge_tokens, ranks_lines, tokenizer_config, write_ranks

from kimi_viz.errors import TokenizerError
from kimi_viz.request import tokenizer as tk
from kimi_viz.request.tokenizer import read_ranks, read_tokenizer, read_tokenizer_config, split_runs

MERGES = merge_tokens()


def rank(piece: str) -> int:
    """Return the synthetic vocabulary's rank of ``piece``: a byte's value, or 256 + its place among the merges."""
    data = piece.encode("utf-8")
    return data[0] if len(data) == 1 else 256 + MERGES.index(data)


@pytest.fixture
def small(tmp_path):
    """A tokenizer of the 256 bytes and the merges only (its specials start right after them)."""
    ranks = write_ranks(tmp_path / "tiktoken.model", ranks_lines(None))
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps(tokenizer_config(256 + len(MERGES))))
    return read_tokenizer(ranks, config)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A tokenizer the size of Kimi-K3's: 163584 ranks, so its special ids are K3's."""
    folder = tmp_path_factory.mktemp("full")
    ranks = write_ranks(folder / "tiktoken.model", ranks_lines(K3_BASE_TOKENS))
    config = folder / "tokenizer_config.json"
    config.write_text(json.dumps(tokenizer_config(K3_BASE_TOKENS)))
    return read_tokenizer(ranks, config)


def test_the_special_ids_follow_the_ranks_as_in_kimi_k3(full):
    assert full.base_tokens == 163584
    assert full.vocab_size == 163840
    assert [full.special_id(n) for n in ("[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>")] == [
        163584,
        163585,
        163586,
        163587,
        163588,
        163589,
    ]
    assert full.special_id("<|media_pad|>") == 163605
    assert full.special_id("[PAD]") == 163839
    assert full.token_text(163592) == "<|reserved_token_163592|>"
    assert full.bos_token_id == 163584


def test_text_encodes_by_bpe_over_the_pretokenizer_pieces(small):
    assert small.encode("message role", allow_special=False) == [rank("message"), rank(" role")]
    assert small.encode("Hello world", allow_special=True) == [rank("Hello"), rank(" world")]
    # no merge "xy": two single bytes
    assert small.encode("xy", allow_special=False) == [ord("x"), ord("y")]
    assert [small.token_text(t) for t in small.encode("Hello world", allow_special=False)] == ["Hello", " world"]


def test_special_names_are_ids_only_in_a_control_piece(full):
    assert full.encode("<|open|>", allow_special=True) == [163587]
    as_text = full.encode("<|open|>", allow_special=False)
    assert 163587 not in as_text
    assert b"".join(bytes(full.encoding.decode_single_token_bytes(t)) for t in as_text) == b"<|open|>"
    assert full.encode("a<|media_pad|>b", allow_special=True) == [ord("a"), 163605, ord("b")]


def test_long_runs_are_cut_at_25000_characters_as_the_checkpoint_cuts_them(small):
    text = "message" * 4000  # 28000 letters in one pre-token
    ids = small.encode(text, allow_special=False)
    first, rest = text[:25000], text[25000:]
    plain = small.encoding.encode
    assert ids == plain(first, disallowed_special=()) + plain(rest, disallowed_special=())
    assert ids != plain(text, disallowed_special=())


def test_split_runs_limits_consecutive_runs_only():
    assert list(split_runs("aa  bbb", 2)) == ["aa  bb", "b"]
    assert list(split_runs("", 3)) == [""]
    assert list(split_runs("ab cd", 2)) == ["ab cd"]


def test_specials_are_named_by_added_tokens_decoder_or_reserved(tmp_path):
    ranks = write_ranks(tmp_path / "tiktoken.model", ranks_lines(None))
    base = 256 + len(MERGES)
    config = tokenizer_config(base)
    config["added_tokens_decoder"][str(base + 3)]["content"] = "<|renamed|>"
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps(config))
    tokenizer = read_tokenizer(ranks, path)
    assert tokenizer.special_id("<|renamed|>") == base + 3
    assert tokenizer.special_id("<|open|>") is None
    assert tokenizer.special_id(f"<|reserved_token_{base + 8}|>") == base + 8


def test_without_a_config_the_specials_take_kimi_k3s_names(tmp_path):
    ranks = write_ranks(tmp_path / "tiktoken.model", ranks_lines(None))
    tokenizer = read_tokenizer(ranks)
    base = 256 + len(MERGES)
    assert tokenizer.special_id("<|media_pad|>") == base + 21
    assert tokenizer.special_id("[UNK]") == base + 254


def test_the_file_is_read_again_at_the_same_path(tmp_path):
    """No path-keyed cache: the same path rewritten with other ranks gives the new ids."""
    path = tmp_path / "tiktoken.model"
    write_ranks(path, ranks_lines(None))
    before = read_tokenizer(path).encode("message", allow_special=False)
    write_ranks(path, ranks_lines(None, words=("mess", "age")))
    after = read_tokenizer(path).encode("message", allow_special=False)
    assert before == [rank("message")]
    assert after == [256 + 2, 256 + 4]  # the new merges: me, mes, mess (258), ag, age (260)
    assert read_tokenizer(path).base_tokens == 256 + 5


# --- hostile files: each refused in one line naming the file ---------------------------------------------------------
def _lines(*rows: bytes) -> bytes:
    return b"".join(base64.b64encode(bytes([b])) + b" " + str(b).encode() + b"\n" for b in range(256)) + b"".join(rows)


HOSTILE_RANKS = {
    "binary": (b"\x00\x01\x02" * 100, "is not text"),
    "not ascii": ("é 0\n".encode(), "is not text"),
    "malformed line": (_lines(b"YWI= 256 extra\n"), "line 257"),
    "bad base64": (_lines(b"!!!! 256\n"), "line 257"),
    "duplicate token": (_lines(base64.b64encode(b"a") + b" 256\n"), "listed twice"),
    "duplicate rank": (_lines(base64.b64encode(b"ab") + b" 255\n"), "rank 255 was already given"),
    "rank out of range": (_lines(base64.b64encode(b"ab") + b" 300\n"), "out of range"),
    "negative rank": (_lines(base64.b64encode(b"ab") + b" -1\n"), "line 257"),
    "missing byte": (b"".join(base64.b64encode(bytes([b])) + b" %d\n" % b for b in range(255)), "has no rank"),
    "empty": (b"\n\n", "holds no ranks"),
    "token too long": (_lines(base64.b64encode(b"a" * 2000) + b" 256\n"), "a token of 2000 bytes"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_RANKS))
def test_a_hostile_ranks_file_is_refused_in_one_line(tmp_path, case):
    data, expected = HOSTILE_RANKS[case]
    path = tmp_path / "tiktoken.model"
    path.write_bytes(data)
    with pytest.raises(TokenizerError) as caught:
        read_ranks(path)
    message = str(caught.value)
    assert expected in message and str(path) in message and "\n" not in message


def test_a_huge_or_long_ranks_file_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    path = tmp_path / "tiktoken.model"
    with open(path, "wb") as handle:
        handle.truncate(tk.MAX_RANKS_FILE_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(TokenizerError, match="over the 67108864-byte limit"):
        read_ranks(path)
    write_ranks(path, ranks_lines(None))
    monkeypatch.setattr(tk, "MAX_RANKS", 300)
    with pytest.raises(TokenizerError, match="more than 300 lines"):
        read_ranks(path)


def test_a_folder_or_a_missing_file_is_refused(tmp_path):
    with pytest.raises(TokenizerError, match="is a folder"):
        read_ranks(tmp_path)
    with pytest.raises(TokenizerError, match="cannot be read"):
        read_ranks(tmp_path / "nothing.model")


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"tokenizer_class": "PreTrainedTokenizerFast"}, "the tokenizer class is 'PreTrainedTokenizerFast'"),
        ({"auto_map": {"AutoTokenizer": ["evil.Tokenizer", None]}}, "the tokenizer class is 'evil.Tokenizer'"),
        ({"added_tokens_decoder": {"x": {"content": "a"}}}, "is not a token id"),
        ({"added_tokens_decoder": {"5": {"content": ""}}}, "non-empty 'content'"),
        ({"bos_token": 7}, "bos_token: expected a token string"),
    ],
)
def test_a_config_the_kit_does_not_read_is_refused(tmp_path, change, expected):
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({**tokenizer_config(300), **change}))
    with pytest.raises(TokenizerError) as caught:
        read_tokenizer_config(path)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_role_token_that_is_no_special_fails_as_the_checkpoints_class_fails(tmp_path):
    ranks = write_ranks(tmp_path / "tiktoken.model", ranks_lines(None))
    config = tokenizer_config(256 + len(MERGES))
    del config["pad_token"]
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match="pad_token None is not one of the special tokens"):
        read_tokenizer(ranks, path)


def test_the_config_reads_role_tokens_given_as_added_token_objects(tmp_path):
    path = tmp_path / "tokenizer_config.json"
    config = tokenizer_config(300)
    config["bos_token"] = {"__type": "AddedToken", "content": "[BOS]"}
    path.write_text(json.dumps(config))
    read = read_tokenizer_config(path)
    assert (read.bos_token, read.pad_token, read.tokenizer_class) == ("[BOS]", "[PAD]", "TikTokenTokenizer")
    assert read.auto_map == "tokenization_kimi.TikTokenTokenizer"
    assert dict(read.added_tokens)[300 + 21] == "<|media_pad|>"
