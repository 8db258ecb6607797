"""Hostile checkpoints through ``kimi-viz encode --checkpoint``: a pickled or damaged shard instead of safetensors.

A pickle (or a ``torch.save`` archive) renamed ``.safetensors`` is refused by name and never
unpickled (a marker file proves it), a truncated shard, an HTML error page saved as a shard, a shard
that is a FIFO or lies outside the folder are refused with one line naming the shard: exit 2,
bounded in time and memory. The tiny tower is used so a valid checkpoint loads in a second.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from test_hostile_support import Case, check_case, run_cases

from kimi_viz.data import sample_path

IMAGE = str(sample_path("chelsea.png"))
SHARD = "model-00001-of-00001.safetensors"


def vision_config_json() -> dict:
    from kimi_viz.encoder import ENCODER_PRESETS

    c = ENCODER_PRESETS["tiny"]
    return {
        "patch_size": c.patch_size,
        "init_pos_emb_height": c.pos_emb_height,
        "init_pos_emb_width": c.pos_emb_width,
        "init_pos_emb_time": c.pos_emb_time,
        "vt_num_attention_heads": c.num_heads,
        "vt_num_hidden_layers": c.num_layers,
        "vt_hidden_size": c.hidden_size,
        "vt_intermediate_size": c.intermediate_size,
        "merge_kernel_size": [2, 2],
        "mm_projector_type": "patchmergerv2",
        "qkv_hidden_size": c.qkv_hidden_size,
        "text_hidden_size": c.text_hidden_size,
    }


def write_checkpoint(folder: Path) -> Path:
    """Write a valid tiny checkpoint: config.json, the index and one shard with every vision tensor."""
    from safetensors.torch import save_file

    from kimi_viz.encoder import VisionEncoder

    folder.mkdir(parents=True)
    model = VisionEncoder.random("tiny", seed=1, device="cpu")
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(folder / SHARD))
    (folder / "config.json").write_text(json.dumps({"vision_config": vision_config_json()}))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict.fromkeys(tensors, SHARD)}))
    return folder


class Pwned:
    """Unpickling this creates a marker file; a safe reader never unpickles anything."""

    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def with_shard(make):
    def build(folder: Path) -> list[str]:
        root = write_checkpoint(folder / "ckpt")
        make(root / SHARD, folder)
        return ["encode", "--preset", "tiny", "--checkpoint", str(root), IMAGE]

    return build


def pickled(path: Path, folder: Path) -> None:
    Pwned.marker = str(folder / "pwned")
    path.write_bytes(pickle.dumps({"vision_tower.x": Pwned()}))


def torch_saved(path: Path, folder: Path) -> None:
    import torch

    torch.save({"vision_tower.x": torch.zeros(3)}, path)


def truncated(path: Path, folder: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def header_lies(path: Path, folder: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:8] = (2**60).to_bytes(8, "little")
    path.write_bytes(bytes(data))


def html_page(path: Path, folder: Path) -> None:
    path.write_bytes(b"<!DOCTYPE html><html><body>rate limited</body></html>")


def fifo_shard(path: Path, folder: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def not_unpickled(run, folder):
    assert not (folder / "pwned").exists(), "the pickle was unpickled"


def outside_index(folder: Path) -> list[str]:
    root = write_checkpoint(folder / "ckpt")
    secret = folder / "outside.safetensors"
    secret.write_bytes((root / SHARD).read_bytes())
    index = json.loads((root / "model.safetensors.index.json").read_text())
    index["weight_map"] = dict.fromkeys(index["weight_map"], "../outside.safetensors")
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return ["encode", "--preset", "tiny", "--checkpoint", str(root), IMAGE]


def linked_out(folder: Path) -> list[str]:
    root = write_checkpoint(folder / "ckpt")
    secret = folder / "outside.safetensors"
    os.replace(root / SHARD, secret)
    os.symlink(secret, root / SHARD)
    return ["encode", "--preset", "tiny", "--checkpoint", str(root), IMAGE]


def single_pickled(folder: Path) -> list[str]:
    root = folder / "single"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"vision_config": vision_config_json()}))
    Pwned.marker = str(folder / "pwned")
    (root / "model.safetensors").write_bytes(pickle.dumps(Pwned()))
    return ["encode", "--preset", "tiny", "--checkpoint", str(root), IMAGE]


CASES = [
    Case("valid-tiny-checkpoint", with_shard(lambda p, f: None), code=0),
    Case("pickled-shard", with_shard(pickled), words=(SHARD, "pickle", "never unpickled"), check=not_unpickled),
    Case("fifo-shard", with_shard(fifo_shard), words=(SHARD, "regular file")),
    Case("shard-outside-the-folder", outside_index, words=("outside.safetensors", "leaves the checkpoint folder")),
    Case("shard-linked-outside-the-folder", linked_out, words=(SHARD, "outside the checkpoint folder")),
    Case("single-file-checkpoint-pickled", single_pickled, words=("model.safetensors", "pickle"), check=not_unpickled),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-checkpoints"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_checkpoint(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)


@pytest.mark.parametrize(
    "make,words", [(torch_saved, "pickle"), (truncated, ""), (header_lies, "safetensors"), (html_page, "safetensors")]
)
def test_damaged_shards_are_refused_before_safetensors_opens_them(tmp_path, make, words):
    """The same checks as the CLI cases above, in-process (each CLI run of encode pays for importing torch)."""
    from kimi_viz.encoder import VisionEncoder
    from kimi_viz.errors import CheckpointError

    root = write_checkpoint(tmp_path / "ckpt")
    make(root / SHARD, tmp_path)
    with pytest.raises(CheckpointError) as caught:
        VisionEncoder.from_checkpoint(root, device="cpu")
    assert SHARD in str(caught.value) and words in str(caught.value), caught.value
