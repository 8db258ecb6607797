"""Reading the vision part of a local Kimi checkpoint: ``config.json``, the shard index, the shards.

:func:`read_config` turns ``config.json``'s ``vision_config`` into a :class:`VisionConfig`;
:func:`read_weight_map` reads ``model.safetensors.index.json`` (or lists one ``model.safetensors``);
:func:`load_vision_weights` copies the ``vision_tower.*`` and ``mm_projector.*`` tensors into a
model, opening only the shards that hold them (the language model's shards are never opened), and
returns a :class:`LoadReport`. ``VisionEncoder.from_checkpoint`` chains the three.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError
from ..preprocess.config import read_vision_config
from .config import VisionConfig
from .model import init_weights

VISION_PREFIXES = ("vision_tower.", "mm_projector.")


@dataclass
class LoadReport:
    """What ``from_checkpoint`` read: tensors loaded, keys missing or unexpected, shards opened."""

    folder: str
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shards_opened: list[str] = field(default_factory=list)
    shards_skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the report as a plain dict."""
        return asdict(self)

    def summary(self) -> str:
        """Return a one-line summary."""
        return (
            f"{len(self.loaded)} tensors from {len(self.shards_opened)} shard(s) "
            f"({self.shards_skipped} other shard(s) left unopened); "
            f"{len(self.missing)} missing, {len(self.unexpected)} unexpected"
        )


def read_config(folder: str | Path) -> VisionConfig:
    """Return the :class:`VisionConfig` of a checkpoint folder's ``config.json``."""
    folder = Path(folder)
    vision_config, model_type = _read_vision_config_json(folder)
    return VisionConfig.from_dict(vision_config, model_type=model_type, source=str(folder / "config.json"))


def _read_vision_config_json(folder: Path) -> tuple[dict[str, Any], str | None]:
    """Return ``(vision_config, model_type)`` from ``folder/config.json``; a missing
    ``text_hidden_size`` is taken from ``text_config.hidden_size``, as SGLang does."""
    file = folder / "config.json"
    if not file.is_file():
        raise CheckpointError(
            f"{file} does not exist; expected a Kimi checkpoint folder holding config.json, "
            "model.safetensors.index.json and its shards (or use VisionEncoder.random() without weights)"
        )
    vision = read_vision_config(folder)  # validates the JSON and normalises merge_kernel_size
    data = json.loads(file.read_text(encoding="utf-8"))
    text = data.get("text_config")
    if vision.get("text_hidden_size") is None and isinstance(text, dict) and text.get("hidden_size"):
        vision["text_hidden_size"] = text["hidden_size"]
    return vision, data.get("model_type")


def read_weight_map(folder: Path) -> dict[str, str]:
    """Return ``{tensor name: shard file}`` from ``model.safetensors.index.json`` (or one ``model.safetensors``)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        single = folder / "model.safetensors"
        if single.is_file():
            from safetensors import safe_open

            with safe_open(str(single), framework="pt", device="cpu") as f:
                return dict.fromkeys(f.keys(), single.name)
        raise CheckpointError(
            f"{index} does not exist; expected the sharded checkpoint's index next to config.json "
            "(download model.safetensors.index.json with the shards, or point at the right folder)"
        )
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{index}: not valid JSON ({exc.msg} at line {exc.lineno}); re-download it") from exc
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: has no weight_map object; expected {{'weight_map': {{name: shard}}}}")
    return weight_map


def load_vision_weights(
    model: nn.Module, folder: str | Path, weight_map: dict[str, str], *, strict: bool = False
) -> LoadReport:
    """Copy the checkpoint's vision tensors into ``model`` (a VisionModel) and return what was read.

    Only the shards ``weight_map`` names for ``vision_tower.*`` and ``mm_projector.*`` keys the
    model has are opened (with ``safetensors.safe_open``); shapes are checked before any data is
    read. Parameters the checkpoint lacks get a seed-0 random initialisation; with ``strict=True``
    a missing or unexpected key raises CheckpointError instead.
    """
    from safetensors import safe_open

    folder = Path(folder)
    config: Any = model.config
    device: Any = model.device
    params = dict(model.state_dict(keep_vars=True))

    wanted = {k: v for k, v in weight_map.items() if k.startswith(VISION_PREFIXES)}
    report = LoadReport(folder=str(folder))
    report.missing = sorted(k for k in params if k not in wanted)
    report.unexpected = sorted(k for k in wanted if k not in params)
    if report.missing:  # what the checkpoint lacks keeps the seed-0 random values
        init_weights(model, torch.Generator(device=device).manual_seed(0))
    if strict and (report.missing or report.unexpected):
        raise CheckpointError(
            f"{folder / 'model.safetensors.index.json'}: {len(report.missing)} missing vision key(s) "
            f"(first: {report.missing[:1]}) and {len(report.unexpected)} unexpected (first: "
            f"{report.unexpected[:1]}); the checkpoint does not match vision config {config.name!r}"
        )
    by_shard: dict[str, list[str]] = {}
    for key, shard in wanted.items():
        if key in params:
            by_shard.setdefault(shard, []).append(key)
    all_shards = set(weight_map.values())
    report.shards_skipped = len(all_shards - set(by_shard))
    with torch.no_grad():
        for shard in sorted(by_shard):
            path = folder / shard
            if not path.is_file():
                raise CheckpointError(
                    f"{path} does not exist but model.safetensors.index.json maps "
                    f"{by_shard[shard][0]} to it; download the missing shard"
                )
            report.shards_opened.append(shard)
            with safe_open(str(path), framework="pt", device="cpu") as f:
                available = set(f.keys())
                for key in sorted(by_shard[shard]):
                    if key not in available:
                        raise CheckpointError(
                            f"{path}: has no tensor {key} although model.safetensors.index.json says "
                            "it does; the index and the shard disagree (re-download both)"
                        )
                    target = params[key]
                    shape = tuple(f.get_slice(key).get_shape())
                    if shape != tuple(target.shape):
                        raise CheckpointError(
                            f"{path}: tensor {key} has shape {list(shape)} but vision config "
                            f"{config.name!r} expects {list(target.shape)}; the config.json and the "
                            "shards come from different models"
                        )
                    target.copy_(f.get_tensor(key))
                    report.loaded.append(key)
    report.loaded.sort()
    return report
