"""Small fake Kimi checkpoint folders for the tokenizer, chat-encoding and model-folder tests.

The plain Kimi-K3 folder and its builders are the package's (:mod:`kimi_viz.request.demo_checkpoint`, the one
home of the synthetic vocabulary: the 256 bytes, the prefixes of :data:`WORDS`, fillers up to Kimi-K3's 163584
ranks so the special ids land where K3's do). The variants the tests need stay here: a folder without
``media_placeholder_token_id``, a small vocabulary, other special names, and the Kimi-K2.5 folder.
"""

from __future__ import annotations

from pathlib import Path

from kimi_viz.request.demo_checkpoint import (  # noqa: F401 - re-exported for the tests
    K3_BASE_TOKENS,
    WORDS,
    merge_tokens,
    model_config,
    ranks_lines,
    tokenizer_config,
    write_checkpoint_folder,
    write_demo_checkpoint,
    write_ranks,
)
from kimi_viz.request.tokenizer import K3_SPECIAL_TOKENS

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
PLAIN = ("KimiK3ForConditionalGeneration", K3_BASE_TOKENS, 163605, K3_SPECIAL_TOKENS, "kimi-k3")  # the demo folder


def write_folder(
    folder: Path,
    *,
    architecture: str = "KimiK3ForConditionalGeneration",
    base_tokens: int | None = K3_BASE_TOKENS,
    placeholder: int | None = 163605,
    names: dict[int, str] = K3_SPECIAL_TOKENS,
    preset: str = "kimi-k3",
) -> Path:
    """Write a fake checkpoint folder and return it: the package's demo folder, or the variant asked for."""
    variant = (architecture, base_tokens, placeholder, names, preset)
    if variant == PLAIN:
        return write_demo_checkpoint(folder)
    return write_checkpoint_folder(
        folder, architecture=architecture, base_tokens=base_tokens, placeholder=placeholder, names=names, preset=preset
    )


def write_k25_folder(folder: Path, *, media_pad_offset: int = 21, placeholder: int | None = 163605) -> Path:
    """Write a fake Kimi-K2.5 folder whose tokenizer puts ``<|media_pad|>`` at 163584 + ``media_pad_offset``."""
    names = {k: v for k, v in K25_SPECIAL_TOKENS.items() if v != "<|media_pad|>"}
    names = {**{k: v for k, v in names.items() if k != media_pad_offset}, media_pad_offset: "<|media_pad|>"}
    return write_folder(
        folder, architecture="KimiK25ForConditionalGeneration", placeholder=placeholder, names=names, preset="kimi-k25"
    )
