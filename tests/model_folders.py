"""Small fake Kimi checkpoint folders for the tokenizer, chat-encoding and model-folder tests.

The files carry the real names and keys (``config.json``, ``preprocessor_config.json``, ``tokenizer_config.json``,
``tiktoken.model``) and a SYNTHETIC vocabulary: the 256 single bytes, then merges this module defines (every
prefix of each word in :data:`WORDS`, so each word is reachable by BPE), then, for a full-size vocabulary, filler
tokens that no text can reach (``\\xff\\xfe`` + 3 bytes: never UTF-8) up to Kimi-K3's 163584 ranks, so the
special ids land where K3's do (``<|media_pad|>`` 163605). No weights, and no code of any checkpoint.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from kimi_viz.preprocess.config import PROCESSOR_PRESETS
from kimi_viz.request.tokenizer import K3_SPECIAL_TOKENS

K3_BASE_TOKENS = 163584
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
K25_SPECIAL_TOKENS = {  # Kimi-K2-style names for the K2.5 fake (the K2.5 test sets <|media_pad|> where it needs)
    0: "[BOS]",
    1: "[EOS]",
    2: "<|im_end|>",
    3: "<|im_user|>",
    4: "<|im_assistant|>",
    10: "<|im_system|>",
    17: "<|im_middle|>",
    18: "<|media_begin|>",
    19: "<|media_content|>",
    20: "<|media_end|>",
    21: "<|media_pad|>",
    254: "[UNK]",
    255: "[PAD]",
}


def merge_tokens(words=WORDS) -> list[bytes]:
    """Return the synthetic merges: every prefix (two bytes or longer) of each word, first seen first."""
    seen: dict[bytes, None] = {}
    for word in words:
        data = word.encode("utf-8")
        for end in range(2, len(data) + 1):
            seen.setdefault(data[:end], None)
    return list(seen)


def ranks_lines(base_tokens: int | None = K3_BASE_TOKENS, words=WORDS) -> list[bytes]:
    """Return the tokens in rank order: the 256 bytes, the merges, then fillers up to ``base_tokens`` (None: none)."""
    tokens = [bytes([b]) for b in range(256)] + merge_tokens(words)
    if base_tokens is not None:
        tokens += [b"\xff\xfe" + k.to_bytes(3, "big") for k in range(base_tokens - len(tokens))]
    return tokens


def write_ranks(path: Path, tokens: list[bytes]) -> Path:
    """Write ``tokens`` as a ``tiktoken.model`` file (rank = position) and return its path."""
    path.write_bytes(b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for r, t in enumerate(tokens)))
    return path


def tokenizer_config(base: int, names: dict[int, str] = K3_SPECIAL_TOKENS) -> dict:
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


def model_config(architecture: str = "KimiK3ForConditionalGeneration", placeholder: int | None = 163605) -> dict:
    """Return a small ``config.json`` with the real keys of a Kimi-K3 (or K2.5) checkpoint."""
    k3 = architecture.startswith("KimiK3")
    config = {
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


def write_folder(
    folder: Path,
    *,
    architecture: str = "KimiK3ForConditionalGeneration",
    base_tokens: int | None = K3_BASE_TOKENS,
    placeholder: int | None = 163605,
    names: dict[int, str] = K3_SPECIAL_TOKENS,
    preset: str = "kimi-k3",
) -> Path:
    """Write a fake checkpoint folder (config, preprocessor config, tokenizer config, ranks) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    tokens = ranks_lines(base_tokens)
    write_ranks(folder / "tiktoken.model", tokens)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(len(tokens), names), indent=2))
    (folder / "config.json").write_text(json.dumps(model_config(architecture, placeholder), indent=2))
    media = PROCESSOR_PRESETS[preset].to_media_proc_cfg()
    (folder / "preprocessor_config.json").write_text(json.dumps({"media_proc_cfg": media}, indent=2))
    return folder


def write_k25_folder(folder: Path, *, media_pad_offset: int = 21, placeholder: int | None = 163605) -> Path:
    """Write a fake Kimi-K2.5 folder whose tokenizer puts ``<|media_pad|>`` at 163584 + ``media_pad_offset``."""
    names = {k: v for k, v in K25_SPECIAL_TOKENS.items() if v != "<|media_pad|>"}
    names = {**{k: v for k, v in names.items() if k != media_pad_offset}, media_pad_offset: "<|media_pad|>"}
    return write_folder(
        folder, architecture="KimiK25ForConditionalGeneration", placeholder=placeholder, names=names, preset="kimi-k25"
    )
