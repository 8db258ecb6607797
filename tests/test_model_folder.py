"""A checkpoint folder as input: read as data, looked up in the local Hugging Face cache, hostile ones refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from model_folders import write_folder, write_k25_folder

from kimi_viz.errors import CheckpointError, ConfigError
from kimi_viz.preprocess.config import PROCESSOR_PRESETS
from kimi_viz.releases import RELEASES
from kimi_viz.request.chat_server import encode_chat_request
from kimi_viz.request.model_folder import find_cached_model, hub_cache, read_model_folder

ROOT = Path(__file__).resolve().parent.parent
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def k3_folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("ckpt") / "Kimi-K3")


def one_line_refusal(error_type, path, expected: str) -> str:
    with pytest.raises(error_type) as caught:
        read_model_folder(path)
    message = str(caught.value)
    assert expected in message, message
    assert "\n" not in message
    return message


def test_a_kimi_k3_folder(k3_folder):
    folder = read_model_folder(k3_folder)
    assert (folder.architecture, folder.model_type, folder.family, folder.is_k3) == (
        "KimiK3ForConditionalGeneration",
        "kimi_k3",
        "kimi-k3",
        True,
    )
    assert (folder.facts.sglang_model, folder.facts.deferred_split, folder.facts.chat_encoding) == (
        "models/kimi_k3.py",
        True,
        "kimi_k3",
    )
    assert folder.placeholder.resolved == folder.placeholder.tokenizer_id == 163605
    assert folder.placeholder.mismatch is None
    assert folder.tokenizer.vocab_size == 163840 and folder.tokenizer_class == "TikTokenTokenizer"
    limits = PROCESSOR_PRESETS["kimi-k3"]
    assert (folder.processor.in_patch_limit, folder.processor.patch_size) == (limits.in_patch_limit, limits.patch_size)
    sites = dict(folder.placeholder.by_release)
    assert list(sites) == list(RELEASES)
    assert sites["0.5.17"] == "config.json media_placeholder_token_id (multimodal/processors/kimi_k3.py:309)"
    assert sites["0.5.23"] == "config.json media_placeholder_token_id (multimodal/processors/kimi_k3.py:395)"


def test_a_k3_folder_renders_a_chat_with_its_placeholder_run(k3_folder):
    folder = read_model_folder(k3_folder)
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    body = {"messages": [{"role": "user", "content": [image, {"type": "text", "text": "city"}, image]}]}
    rendered = encode_chat_request(folder.tokenizer, body)
    pads = rendered.positions(folder.placeholder.resolved)
    assert len(pads) == 2 and pads[1] - pads[0] == 2  # one pad per image, "city" (one token) between them


def test_a_kimi_k25_folder_says_which_sglang_model_serves_it(tmp_path):
    folder = read_model_folder(write_k25_folder(tmp_path / "Kimi-K2.5"))
    assert (folder.architecture, folder.family, folder.is_k3) == ("KimiK25ForConditionalGeneration", "kimi-k25", False)
    assert folder.facts.sglang_model == "models/kimi_k25.py"
    assert folder.facts.processor == "multimodal/processors/kimi_k25.py"
    assert not folder.facts.deferred_split and folder.facts.chat_encoding is None
    assert "not Kimi-K3" in folder.facts.note
    assert dict(folder.placeholder.by_release)["0.5.23"].endswith("kimi_k25.py:542)")
    assert folder.processor.in_patch_limit == PROCESSOR_PRESETS["kimi-k25"].in_patch_limit


def test_a_placeholder_id_the_tokenizer_does_not_share_is_named(tmp_path):
    folder = read_model_folder(write_k25_folder(tmp_path / "k25", media_pad_offset=18))
    assert (folder.placeholder.config_id, folder.placeholder.resolved, folder.placeholder.tokenizer_id) == (
        163605,
        163605,
        163602,
    )
    assert folder.placeholder.mismatch == (
        "the processor counts <|media_pad|> as id 163605 (config.json media_placeholder_token_id) but the tokenizer "
        "encodes it as id 163602: a chat's image prompts carry no id the processor counts, so every chat with an "
        "image fails its placeholder check (--chat replays one)"
    )


def test_a_missing_placeholder_key_is_sglangs_default(tmp_path):
    folder = read_model_folder(write_folder(tmp_path / "k3", placeholder=None))
    assert (folder.placeholder.config_id, folder.placeholder.resolved) == (None, 163605)
    assert folder.placeholder.mismatch is None


# --- the local Hugging Face cache ------------------------------------------------------------------------------------
def cached_model(cache, model_id="moonshotai/Kimi-K3", revisions=(REVISION,), ref=True, source=None):
    """Lay ``source``'s files out as the hub cache does: blobs, and snapshots linking to them."""
    repo = cache / ("models--" + model_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    for revision in revisions:
        snapshot = repo / "snapshots" / revision
        snapshot.mkdir(parents=True)
        for file in sorted(source.iterdir()):
            blob = repo / "blobs" / f"{revision[:6]}-{file.name}"
            blob.write_bytes(file.read_bytes())
            (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revisions[0])
    return repo


def test_a_model_id_is_found_in_the_hub_cache(tmp_path, k3_folder):
    cached_model(tmp_path / "hub", source=k3_folder)
    environ = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    folder = read_model_folder("moonshotai/Kimi-K3", environ=environ)
    assert folder.asked == "moonshotai/Kimi-K3" and folder.path.endswith(f"snapshots/{REVISION}")
    assert folder.architecture == "KimiK3ForConditionalGeneration"
    assert hub_cache({"HF_HOME": str(tmp_path / "home")}) == tmp_path / "home" / "hub"


def test_hf_home_and_a_single_snapshot_without_refs(tmp_path, k3_folder):
    cached_model(tmp_path / "home" / "hub", ref=False, source=k3_folder)
    found = find_cached_model("moonshotai/Kimi-K3", {"HF_HOME": str(tmp_path / "home")})
    assert found == tmp_path / "home" / "hub" / "models--moonshotai--Kimi-K3" / "snapshots" / REVISION


def test_a_model_not_in_the_cache_or_ambiguous_is_refused(tmp_path, k3_folder):
    environ = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache .*kimi-viz never downloads"):
        read_model_folder("moonshotai/Kimi-K3", environ=environ)
    cached_model(tmp_path / "hub", revisions=(REVISION, "f" * 40), ref=False, source=k3_folder)
    with pytest.raises(CheckpointError, match="2 snapshots .* pass the snapshot folder itself"):
        read_model_folder("moonshotai/Kimi-K3", environ=environ)
    with pytest.raises(CheckpointError, match="nor a model id"):
        read_model_folder("org/..", environ=environ)


# --- hostile folders: each refused in one line, nothing run ---------------------------------------------------------
def test_a_huge_or_binary_tiktoken_model_is_refused(tmp_path):
    folder = write_folder(tmp_path / "huge", base_tokens=None)
    with open(folder / "tiktoken.model", "wb") as handle:
        handle.truncate((64 << 20) + 1)
    one_line_refusal(CheckpointError, folder, "over the 67108864-byte limit")
    (folder / "tiktoken.model").write_bytes(b"\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02" * 50)  # sentencepiece-like
    one_line_refusal(CheckpointError, folder, "is not text")


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"{not json", "not valid JSON"),
        (b"[" * 200000 + b"]" * 200000, "nested too deeply"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"architectures": ["LlamaForCausalLM"], "vision_config": {}}', "is not a Kimi-K3 or Kimi-K2.5 model"),
        (b'{"architectures": ["KimiK3ForConditionalGeneration"]}', "vision_config: missing"),
    ],
)
def test_a_config_that_is_not_a_kimi_config_is_refused(tmp_path, content, expected):
    folder = write_folder(tmp_path / "bad", base_tokens=None)
    (folder / "config.json").write_bytes(content)
    one_line_refusal((CheckpointError, ConfigError), folder, expected)


def test_a_huge_config_is_refused_unread(tmp_path):
    folder = write_folder(tmp_path / "big", base_tokens=None)
    with open(folder / "config.json", "wb") as handle:
        handle.truncate((16 << 20) + 1)
    one_line_refusal(ConfigError, folder, "over the 16777216-byte limit")


@pytest.mark.parametrize("name", ["config.json", "tiktoken.model", "tokenizer_config.json", "preprocessor_config.json"])
def test_a_link_out_of_the_folder_is_refused(tmp_path, name):
    folder = write_folder(tmp_path / "linked", base_tokens=None)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / name).write_bytes((folder / name).read_bytes())
    (folder / name).unlink()
    (folder / name).symlink_to(outside / name)
    message = one_line_refusal(CheckpointError, folder, f"is a link to {outside / name}, outside the checkpoint folder")
    assert str(folder / name) in message


@pytest.mark.parametrize(
    "other, expected",
    [
        ("tokenizer.json", "it holds tokenizer.json (a Hugging Face tokenizers file)"),
        ("tokenizer.model", "it holds tokenizer.model (a sentencepiece model)"),
    ],
)
def test_a_tokenizer_of_another_format_is_refused(tmp_path, other, expected):
    folder = write_folder(tmp_path / "other", base_tokens=None)
    (folder / "tiktoken.model").unlink()
    (folder / other).write_bytes(b"{}")
    one_line_refusal(CheckpointError, folder, expected)


def test_a_tokenizer_class_the_kit_does_not_know_is_refused(tmp_path):
    folder = write_folder(tmp_path / "fast", base_tokens=None)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "LlamaTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    one_line_refusal(CheckpointError, folder, "the tokenizer class is 'LlamaTokenizerFast'")


def test_a_folder_that_is_a_file_or_missing_parts_is_refused(tmp_path):
    folder = write_folder(tmp_path / "parts", base_tokens=None)
    one_line_refusal(CheckpointError, folder / "config.json", "is a file")
    (folder / "preprocessor_config.json").unlink()
    one_line_refusal(CheckpointError, folder, "preprocessor_config.json does not exist")


HARMFUL = textwrap.dedent(
    """
    import pathlib
    pathlib.Path({marker!r}).write_text("imported")
    raise SystemExit("the checkpoint's code ran")
    """
)


def test_the_folders_python_files_are_never_run(tmp_path):
    """The checkpoint's .py files write a marker and exit when imported; reading the folder and rendering a chat
    through it (in a fresh interpreter) leaves no marker and imports none of them."""
    folder = write_folder(tmp_path / "Kimi-K3", base_tokens=None)
    marker = tmp_path / "ran"
    for name in ("tokenization_kimi.py", "encoding_k3.py", "configuration_kimi_k3.py", "kimi_k3_processor.py"):
        (folder / name).write_text(HARMFUL.format(marker=str(marker)))
    script = textwrap.dedent(
        f"""
        import sys
        from kimi_viz.request.model_folder import read_model_folder
        from kimi_viz.request.chat_server import encode_chat_request
        folder = read_model_folder({str(folder)!r})
        ids = encode_chat_request(folder.tokenizer, {{"messages": [{{"role": "user", "content": "Hello"}}]}}).input_ids
        assert ids, "no ids"
        names = ("tokenization_kimi", "encoding_k3", "configuration_kimi_k3", "kimi_k3_processor")
        assert not [m for m in sys.modules if m.split(".")[-1] in names], "a checkpoint module was imported"
        print("read", len(ids))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("read ")
    assert not marker.exists()
