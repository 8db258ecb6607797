"""A SYNTHETIC Kimi-K3-shaped checkpoint folder, for demos, notebooks and tests: ``--model-path`` without weights.

:func:`write_demo_checkpoint` writes the four files a Kimi server reads from a checkpoint folder before any weight
— ``config.json``, ``preprocessor_config.json``, ``tokenizer_config.json`` and ``tiktoken.model`` — with the real
names and keys, and a made-up vocabulary: the 256 single bytes, then merges this module defines (every prefix of
each word in :data:`WORDS`, so each word is reachable by BPE), then filler tokens that no text can reach
(``\\xff\\xfe`` + 3 bytes: never UTF-8) up to Kimi-K3's 163584 ranks, so that the special ids land where Kimi-K3's
do (``<|media_pad|>`` 163605, ``<|media_begin|>`` 163602, the vocabulary 163840). The media and role tokens, their
ids and the chat's framing are Kimi-K3's; every other id is NOT the real vocabulary's, and ordinary text splits
into other tokens than the real tokenizer's (a word outside :data:`WORDS` falls apart into single bytes). So a
prompt tokenized with this folder is as long as this tokenizer makes it, not as long as Kimi-K3's would be: use
it to see what tokenizing (rather than counting) changes, never to read a real prompt's length. The folder holds
no weights and no code, and its ``SYNTHETIC.md`` says all this.

:func:`write_checkpoint_folder` is the builder behind it, with the knobs the tests turn (another architecture,
no ``media_placeholder_token_id``, a small vocabulary, other special names, another preset).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..preprocess.config import PROCESSOR_PRESETS
from .tokenizer import CONFIG_FILE, K3_SPECIAL_TOKENS, RANKS_FILE

K3_BASE_TOKENS = 163584  # Kimi-K3's BPE ranks: its 256 special ids follow them
NOTE_FILE = "SYNTHETIC.md"
WORDS = (
    "message",
    " role",
    "role",
    "user",
    "assistant",
    "system",
    "tool",
    "tools",
    "think",
    "response",
    "call",
    "argument",
    "json",
    "type",
    "key",
    "index",
    "name",
    "object",
    "string",
    "number",
    "boolean",
    "array",
    "null",
    "Hello",
    " world",
    " the",
    " image",
    " is",
    " what",
    "What",
    " this",
    "weather",
    "get_weather",
    " Paris",
    "Paris",
    "city",
    " a",
    " of",
    "helpful",
    " You",
    " are",
    "Tools",
    " tools",
    "available",
    "thinking",
    "_effort",
    "effort",
    " max",
    " low",
    " high",
    "function",
    "parameters",
    "properties",
    "description",
    "required",
    "kimi",
    "_image",
    "_placeholder",
    "media",
    "_pad",
    "The",
    " The",
    " system",
    " invoked",
    " with",
    " MUST",
    " call",
    " in",
    " next",
    " message",
    "\n\n",
    "\n",
    "```",
    '="',
    '"',
    '{"',
    '":',
    '","',
    # merges across an attribute's segments (' key', '="', value, '"'): a renderer joining them differs here
    '="_',
    "_bot",
    ';"',
    '="&',
    "&quot;",
    "&amp;",
)


def merge_tokens(words: Iterable[str] = WORDS) -> list[bytes]:
    """Return the synthetic merges: every prefix (two bytes or longer) of each word, first seen first."""
    seen: dict[bytes, None] = {}
    for word in words:
        data = word.encode("utf-8")
        for end in range(2, len(data) + 1):
            seen.setdefault(data[:end], None)
    return list(seen)


def ranks_lines(base_tokens: int | None = K3_BASE_TOKENS, words: Iterable[str] = WORDS) -> list[bytes]:
    """Return the tokens in rank order: the 256 bytes, the merges, then fillers up to ``base_tokens`` (None: none)."""
    tokens = [bytes([b]) for b in range(256)] + merge_tokens(words)
    if base_tokens is not None:
        tokens += [b"\xff\xfe" + k.to_bytes(3, "big") for k in range(base_tokens - len(tokens))]
    return tokens


def write_ranks(path: str | os.PathLike, tokens: list[bytes]) -> Path:
    """Write ``tokens`` as a ``tiktoken.model`` file (rank = position) and return its path."""
    path = Path(path)
    path.write_bytes(b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for r, t in enumerate(tokens)))
    return path


def tokenizer_config(base: int, names: Mapping[int, str] = K3_SPECIAL_TOKENS) -> dict[str, Any]:
    """Return a ``tokenizer_config.json`` naming the specials after ``base`` ranks, as the checkpoint's does."""
    return {
        "added_tokens_decoder": {
            str(base + offset): {
                "content": name,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for offset, name in names.items()
        },
        "additional_special_tokens": ["<|end_of_msg|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "model_max_length": 1048576,
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
    }


def model_config(
    architecture: str = "KimiK3ForConditionalGeneration", placeholder: int | None = 163605
) -> dict[str, Any]:
    """Return a small ``config.json`` with the real keys of a Kimi-K3 (or K2.5) checkpoint."""
    k3 = architecture.startswith("KimiK3")
    config: dict[str, Any] = {
        "architectures": [architecture],
        "auto_map": {"AutoConfig": f"configuration_{'kimi_k3.KimiK3' if k3 else 'kimi_k25.KimiK25'}Config"},
        "model_type": "kimi_k3" if k3 else "kimi_k25",
        "text_config": {"vocab_size": 163840, "hidden_size": 64},
        "vision_config": {"patch_size": 14, "merge_kernel_size": [2, 2]},
        "bos_token_id": 163584,
        "eos_token_id": 163585,
        "pad_token_id": 163839,
    }
    if placeholder is not None:
        config["media_placeholder_token_id"] = placeholder
    return config


def write_checkpoint_folder(
    folder: str | os.PathLike,
    *,
    architecture: str = "KimiK3ForConditionalGeneration",
    base_tokens: int | None = K3_BASE_TOKENS,
    placeholder: int | None = 163605,
    names: Mapping[int, str] = K3_SPECIAL_TOKENS,
    preset: str = "kimi-k3",
) -> Path:
    """Write a synthetic checkpoint folder (config, preprocessor config, tokenizer config, ranks) and return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = ranks_lines(base_tokens)
    write_ranks(folder / RANKS_FILE, tokens)
    (folder / CONFIG_FILE).write_text(json.dumps(tokenizer_config(len(tokens), names), indent=2), encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(model_config(architecture, placeholder), indent=2), encoding="utf-8")
    media = PROCESSOR_PRESETS[preset].to_media_proc_cfg()
    (folder / "preprocessor_config.json").write_text(json.dumps({"media_proc_cfg": media}, indent=2), encoding="utf-8")
    return folder


SYNTHETIC_NOTE = """\
# A synthetic Kimi-K3-shaped checkpoint folder (written by kimi-viz)

Not a model: no weights, no code. The files carry the real names and keys of a Kimi-K3 checkpoint
(`config.json`, `preprocessor_config.json` with Kimi-K3's limits, `tokenizer_config.json`, `tiktoken.model`),
and the special tokens sit at Kimi-K3's ids (`<|media_pad|>` 163605, the vocabulary 163840). The BPE
vocabulary is made up: the 256 bytes, the prefixes of a few words, then fillers no text reaches. Every
ordinary text id, and so every prompt's length, is NOT what the real tokenizer gives. kimi-viz uses it to
show what tokenizing a chat (`--model-path`) rather than counting its text changes.
"""


def write_demo_checkpoint(folder: str | os.PathLike | None = None) -> Path:
    """Write the SYNTHETIC Kimi-K3-shaped checkpoint folder (``--model-path``'s four files and ``SYNTHETIC.md``,
    no weights) into ``folder`` (None: a new temporary folder) and return its path; its special ids are Kimi-K3's,
    its text ids are not."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="kimi-viz-")) / "Kimi-K3-synthetic"
    path = write_checkpoint_folder(folder)
    (path / NOTE_FILE).write_text(SYNTHETIC_NOTE, encoding="utf-8")
    return path


__all__ = [
    "K3_BASE_TOKENS",
    "NOTE_FILE",
    "WORDS",
    "merge_tokens",
    "model_config",
    "ranks_lines",
    "tokenizer_config",
    "write_checkpoint_folder",
    "write_demo_checkpoint",
    "write_ranks",
]
