"""A Kimi checkpoint's tokenizer as data: the BPE ranks of ``tiktoken.model`` and the 256 special tokens after them.

Kimi-K3 (like Kimi-K2.5) ships its tokenizer as Python code in the model folder: the ``TikTokenTokenizer`` class
of the checkpoint's ``tokenization_kimi`` module, which SGLang loads with ``trust_remote_code``. The kit never
runs that code. :func:`read_tokenizer` reads the two files the class reads and builds the same
``tiktoken.Encoding`` from them:

* **the ranks** (:func:`read_ranks`): ``tiktoken.model``, one ``<base64 bytes> <rank>`` line per token, read
  strictly and within bounds (:data:`MAX_RANKS_FILE_BYTES`, :data:`MAX_RANKS`, :data:`MAX_TOKEN_BYTES`): a file
  that is binary, malformed, holds a token or a rank twice, a rank outside ``0..n-1`` or misses one of the 256
  single bytes is refused in one line naming the file (tiktoken itself would panic on some of these);
* **the special tokens** (:func:`read_tokenizer_config`): the 256 ids right after the ranks (163584..163839 for
  Kimi-K3's 163584 ranks, so ``<|media_pad|>`` is 163605 and the vocabulary 163840), each named by
  ``added_tokens_decoder`` in ``tokenizer_config.json`` and ``<|reserved_token_{id}|>`` otherwise; the
  ``bos``/``eos``/``pad``/``unk`` tokens must be among them, or the checkpoint's class fails to load;
* **the pre-tokenizer** (:data:`PAT_STR`), the class's own pattern.

:meth:`KimiTokenizer.encode` is the class's ``_encode_text_piece``: a control piece (a chat segment with
``allow_special``) turns ``<|...|>`` names into their special ids, any other piece encodes them as ordinary
bytes; text is cut into chunks of 400,000 characters and runs of at most 25,000 white-space or
non-white-space characters, as the class does. :data:`K3_SPECIAL_TOKENS` names the specials of a tokenizer built
without a ``tokenizer_config.json`` (Kimi-K3's own names).

There is no cache: tiktoken's own loader keeps a copy of each file it reads under a temporary folder keyed
by the file's path, so a file rewritten at the same path would read back stale; the kit reads the file each
time it is asked. ``tiktoken`` is imported by :func:`build_tokenizer`, the one function that needs it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from .._records import frozen
from ..errors import TokenizerError
from ..files import file_kind
from ..preprocess.config import read_json_file

RANKS_FILE = "tiktoken.model"
CONFIG_FILE = "tokenizer_config.json"
TOKENIZER_CLASS = "TikTokenTokenizer"
TOKENIZER_MODULE = "tokenization_kimi"

MAX_RANKS_FILE_BYTES = 64 << 20  # Kimi-K3's is about 2.8 MB
MAX_RANKS = 1 << 20  # Kimi-K3 has 163584
MAX_TOKEN_BYTES = 1024  # one token's bytes
MAX_SPECIAL_NAME = 1024  # characters of one special token's name
RESERVED_SPECIAL_TOKENS = 256  # TikTokenTokenizer.num_reserved_special_tokens
ENCODE_CHUNK_CHARS = 400_000  # TIKTOKEN_MAX_ENCODE_CHARS in _encode_text_piece
MAX_RUN_CHARS = 25_000  # MAX_NO_WHITESPACES_CHARS in _encode_text_piece

#: TikTokenTokenizer.pat_str: the pre-tokenizer pattern (Han runs, cased words with English contractions,
#: 1-3 digit runs, punctuation runs, line breaks, white space).
PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

#: Kimi-K3's special tokens by offset from the first special id (its ``tokenizer_config.json``); every other
#: offset is ``<|reserved_token_{id}|>``.
K3_SPECIAL_TOKENS: dict[int, str] = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|end_of_msg|>",
    3: "<|open|>",
    4: "<|close|>",
    5: "<|sep|>",
    6: "[start_header_id]",
    7: "[end_header_id]",
    9: "[EOT]",
    18: "<|media_begin|>",
    19: "<|media_content|>",
    20: "<|media_end|>",
    21: "<|media_pad|>",
    65: "<osagent_mode>",
    254: "[UNK]",
    255: "[PAD]",
}
K3_ROLE_TOKENS = {"bos": "[BOS]", "eos": "[EOS]", "pad": "[PAD]", "unk": "[UNK]"}

_RANK = re.compile(rb"[0-9]{1,12}")
_B64 = re.compile(rb"[A-Za-z0-9+/]+={0,2}")


def reserved_name(token_id: int) -> str:
    """Return the name TikTokenTokenizer gives a special id no ``added_tokens_decoder`` entry names."""
    return f"<|reserved_token_{token_id}|>"


# --- tiktoken.model ---------------------------------------------------------------------------------------------
def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise TokenizerError(f"{path}: cannot be read ({reason}); check the path") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenizerError(f"{path}: is {file_kind(info.st_mode)}; expected {what}")
    if info.st_size > limit:
        raise TokenizerError(f"{path}: is {info.st_size} bytes, over the {limit}-byte limit for {what}")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot be read ({exc.strerror}); check the path and permissions") from None
    if len(data) > limit:
        raise TokenizerError(f"{path}: grew past the {limit}-byte limit for {what} while it was read")
    return data


def _rank_lines(path: Path, data: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield ``(line number, base64 token, rank)`` of each non-empty line, refusing a malformed one."""
    if b"\x00" in data or not data.isascii():
        raise TokenizerError(
            f"{path}: is not text (binary bytes found); expected tiktoken BPE ranks, one '<base64> <rank>' a line "
            "(a sentencepiece tokenizer.model is another format)"
        )
    if data.count(b"\n") > MAX_RANKS + 1:
        raise TokenizerError(f"{path}: has more than {MAX_RANKS} lines; expected the BPE ranks of a Kimi checkpoint")
    for number, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2 or not _B64.fullmatch(fields[0]) or not _RANK.fullmatch(fields[1]):
            shown = line[:40].decode("ascii", "replace")
            raise TokenizerError(f"{path}: line {number} is {shown!r}; expected '<base64 token> <rank>' — fix the file")
        yield number, fields[0], fields[1]


def read_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Return the BPE ranks of a ``tiktoken.model`` file: token bytes -> rank, ranks exactly ``0..n-1``.

    Raises :class:`~kimi_viz.errors.TokenizerError`, naming the file and the line, for a file that is not a
    regular text file within :data:`MAX_RANKS_FILE_BYTES`, a malformed line, a token or rank given twice, a rank
    outside ``0..n-1``, more than :data:`MAX_RANKS` ranks, or a missing single byte.
    """
    path = Path(path)
    data = _read_bounded(path, MAX_RANKS_FILE_BYTES, "a tiktoken.model file of BPE ranks")
    ranks: dict[bytes, int] = {}
    seen: dict[int, int] = {}  # rank -> line
    for number, token_b64, rank_text in _rank_lines(path, data):
        try:
            token = base64.b64decode(token_b64, validate=True)
        except (binascii.Error, ValueError):
            raise TokenizerError(f"{path}: line {number}: the token is not valid base64; fix the file") from None
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise TokenizerError(
                f"{path}: line {number}: a token of {len(token)} bytes; expected 1 to {MAX_TOKEN_BYTES} bytes"
            )
        rank = int(rank_text)
        if token in ranks:
            raise TokenizerError(f"{path}: line {number}: the token {token!r} is listed twice; fix the file")
        if rank in seen:
            raise TokenizerError(f"{path}: line {number}: rank {rank} was already given on line {seen[rank]}")
        ranks[token] = rank
        seen[rank] = number
    count = len(ranks)
    if not count:
        raise TokenizerError(f"{path}: holds no ranks; expected tiktoken BPE ranks, one '<base64> <rank>' a line")
    over = next((rank for rank in seen if rank >= count), None)
    if over is not None:
        raise TokenizerError(
            f"{path}: rank {over} (line {seen[over]}) is out of range for {count} ranks; expected ranks 0..{count - 1}"
        )
    missing = [value for value in range(256) if bytes([value]) not in ranks]
    if missing:
        raise TokenizerError(
            f"{path}: the single byte {bytes([missing[0]])!r} has no rank ({len(missing)} of 256 missing); "
            "tiktoken needs every byte to encode any text"
        )
    return ranks


# --- tokenizer_config.json --------------------------------------------------------------------------------------
@frozen
class TokenizerConfig:
    """What ``TikTokenTokenizer`` reads from ``tokenizer_config.json``: its class, special names and role tokens."""

    source: str
    tokenizer_class: str
    auto_map: str | None  # auto_map.AutoTokenizer's slow class, e.g. tokenization_kimi.TikTokenTokenizer
    added_tokens: tuple[tuple[int, str], ...]  # added_tokens_decoder: id -> name, id order
    bos_token: str | None
    eos_token: str | None
    pad_token: str | None
    unk_token: str | None


def _token_text(value: Any, key: str, source: str) -> str | None:
    """Return a role token's text: a string, or an AddedToken object's ``content``."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = value.get("content")
    if not isinstance(value, str) or not value or len(value) > MAX_SPECIAL_NAME:
        raise TokenizerError(f"{source}: {key}: expected a token string, got {type(value).__name__}; fix the file")
    return value


def _added_tokens(value: Any, source: str) -> tuple[tuple[int, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise TokenizerError(f"{source}: added_tokens_decoder: expected an object of id -> token; fix the file")
    out: dict[int, str] = {}
    for key, entry in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 12):
            raise TokenizerError(f"{source}: added_tokens_decoder: key {str(key)[:20]!r} is not a token id")
        content = entry.get("content") if isinstance(entry, Mapping) else None
        if not isinstance(content, str) or not content or len(content) > MAX_SPECIAL_NAME:
            raise TokenizerError(
                f"{source}: added_tokens_decoder.{key}: expected an object with a non-empty 'content' string"
            )
        out[int(key)] = content
    return tuple(sorted(out.items()))


def _auto_map(value: Any, source: str) -> str | None:
    if value is None:
        return None
    entry = value.get("AutoTokenizer") if isinstance(value, Mapping) else None
    if isinstance(entry, (list, tuple)) and entry:
        entry = entry[0]
    if entry is not None and not isinstance(entry, str):
        raise TokenizerError(f"{source}: auto_map.AutoTokenizer: expected a 'module.Class' string; fix the file")
    return entry


def read_tokenizer_config(path: str | os.PathLike) -> TokenizerConfig:
    """Return the :class:`TokenizerConfig` of a ``tokenizer_config.json``; refuse a tokenizer class the kit does not
    read (anything but the checkpoint's own ``tokenization_kimi.TikTokenTokenizer``) in one line."""
    source = str(path)
    data = read_json_file(path, error=TokenizerError)
    if not isinstance(data, Mapping):
        raise TokenizerError(f"{source}: expected a JSON object; fix the file")
    auto_map = _auto_map(data.get("auto_map"), source)
    declared = data.get("tokenizer_class")
    if not isinstance(declared, str):
        declared = auto_map.rpartition(".")[2] if auto_map else "none"
    expected = f"{TOKENIZER_MODULE}.{TOKENIZER_CLASS}"
    if declared != TOKENIZER_CLASS or (auto_map is not None and auto_map != expected):
        shown = auto_map if auto_map and auto_map != expected else declared
        raise TokenizerError(
            f"{source}: the tokenizer class is {shown[:80]!r}; kimi-viz reads Kimi's {expected} (tiktoken.model) "
            "only — point --model-path at a Kimi-K3 or Kimi-K2.5 checkpoint"
        )
    return TokenizerConfig(
        source=source,
        tokenizer_class=declared,
        auto_map=auto_map,
        added_tokens=_added_tokens(data.get("added_tokens_decoder"), source),
        bos_token=_token_text(data.get("bos_token", "[BOS]"), "bos_token", source),
        eos_token=_token_text(data.get("eos_token", "[EOS]"), "eos_token", source),
        pad_token=_token_text(data.get("pad_token"), "pad_token", source),
        unk_token=_token_text(data.get("unk_token"), "unk_token", source),
    )


# --- the tokenizer ------------------------------------------------------------------------------------------------
@frozen
class KimiTokenizer:
    """A Kimi ``TikTokenTokenizer`` as data: its ranks' size, its special tokens and the tiktoken encoding built
    from them (not compared: two tokenizers are equal when their sources, sizes and specials are)."""

    source: str
    base_tokens: int  # len(ranks): the first special id
    special_tokens: tuple[tuple[str, int], ...]  # name -> id, as the class's dict holds them, id order
    bos_token: str
    eos_token: str
    pad_token: str
    unk_token: str
    encoding: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def vocab_size(self) -> int:
        """Return ``n_words``: the largest id plus one (163840 for Kimi-K3)."""
        return int(self.encoding.n_vocab)

    def special_id(self, name: str) -> int | None:
        """Return the id of the special token ``name``, or None when the tokenizer has no such special."""
        return dict(self.special_tokens).get(name)

    @property
    def bos_token_id(self) -> int:
        """Return the id of the ``bos`` token."""
        return dict(self.special_tokens)[self.bos_token]

    def encode(self, text: str, *, allow_special: bool) -> list[int]:
        """Return the ids of ``text`` as ``_encode_text_piece`` gives them: special names become their ids only when
        ``allow_special`` (a control segment), and text is cut into chunks and runs exactly as the class cuts it."""
        ids: list[int] = []
        for start in range(0, len(text), ENCODE_CHUNK_CHARS):
            for run in split_runs(text[start : start + ENCODE_CHUNK_CHARS], MAX_RUN_CHARS):
                if allow_special:
                    ids.extend(self.encoding.encode(run, allowed_special="all"))
                else:
                    ids.extend(self.encoding.encode(run, disallowed_special=()))
        return ids

    def token_text(self, token_id: int) -> str:
        """Return a token as text: a special's name, or an ordinary token's bytes as UTF-8 (bytes that are not
        complete UTF-8 written as ``\\xNN``)."""
        if token_id >= self.base_tokens:
            names = {i: n for n, i in self.special_tokens}
            return names.get(token_id, reserved_name(token_id))
        return bytes(self.encoding.decode_single_token_bytes(token_id)).decode("utf-8", "backslashreplace")


def split_runs(text: str, longest: int) -> Iterator[str]:
    """Yield ``text`` cut so that no piece holds more than ``longest`` consecutive white-space or non-white-space
    characters (``_split_whitespaces_or_nonwhitespaces``: an empty text yields one empty piece)."""
    run = 0
    in_space = text[0].isspace() if text else False
    start = 0
    for index, char in enumerate(text):
        space = char.isspace()
        if in_space ^ space:
            run = 1
            in_space = space
        else:
            run += 1
            if run > longest:
                yield text[start:index]
                start = index
                run = 1
    yield text[start:]


def _special_names(base: int, added: Iterable[tuple[int, str]]) -> dict[str, int]:
    """Return the class's ``special_tokens`` dict: name -> id for the 256 ids after the ranks (a later id wins)."""
    names = dict(added)
    return {names.get(i, reserved_name(i)): i for i in range(base, base + RESERVED_SPECIAL_TOKENS)}


def build_tokenizer(
    ranks: Mapping[bytes, int],
    *,
    source: str,
    config: TokenizerConfig | None = None,
) -> KimiTokenizer:
    """Return the :class:`KimiTokenizer` of ``ranks`` (from :func:`read_ranks`) and ``config``'s special names; without
    a config, Kimi-K3's own names (:data:`K3_SPECIAL_TOKENS`) and role tokens."""
    import tiktoken

    base = len(ranks)
    if config is None:
        added: Iterable[tuple[int, str]] = ((base + offset, name) for offset, name in K3_SPECIAL_TOKENS.items())
        roles: dict[str, str | None] = dict(K3_ROLE_TOKENS)
        where = "Kimi-K3's defaults"
    else:
        added = config.added_tokens
        roles = {"bos": config.bos_token, "eos": config.eos_token, "pad": config.pad_token, "unk": config.unk_token}
        where = config.source
    specials = _special_names(base, added)
    for role, name in roles.items():
        if name is None or name not in specials:
            raise TokenizerError(
                f"{where}: {role}_token {name!r} is not one of the special tokens {base}..{base + 255}; the "
                "checkpoint's TikTokenTokenizer looks it up there and fails to load — fix tokenizer_config.json"
            )
    encoding = tiktoken.Encoding(
        name=Path(source).name, pat_str=PAT_STR, mergeable_ranks=dict(ranks), special_tokens=specials
    )
    return KimiTokenizer(
        source=source,
        base_tokens=base,
        special_tokens=tuple(sorted(specials.items(), key=lambda item: item[1])),
        bos_token=str(roles["bos"]),
        eos_token=str(roles["eos"]),
        pad_token=str(roles["pad"]),
        unk_token=str(roles["unk"]),
        encoding=encoding,
    )


def read_tokenizer(ranks_file: str | os.PathLike, config_file: str | os.PathLike | None = None) -> KimiTokenizer:
    """Return the tokenizer a Kimi checkpoint's ``TikTokenTokenizer`` builds from ``ranks_file`` (``tiktoken.model``)
    and ``config_file`` (``tokenizer_config.json``; None: Kimi-K3's own special names), read afresh each call."""
    config = read_tokenizer_config(config_file) if config_file is not None else None
    return build_tokenizer(read_ranks(ranks_file), source=str(ranks_file), config=config)


__all__ = [
    "RANKS_FILE",
    "CONFIG_FILE",
    "PAT_STR",
    "K3_SPECIAL_TOKENS",
    "MAX_RANKS_FILE_BYTES",
    "MAX_RANKS",
    "TokenizerConfig",
    "KimiTokenizer",
    "read_ranks",
    "read_tokenizer_config",
    "build_tokenizer",
    "read_tokenizer",
    "split_runs",
    "reserved_name",
]
