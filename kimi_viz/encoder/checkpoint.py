"""Reading the vision part of a local Kimi checkpoint: ``config.json``, the shard index, the shards.

:func:`read_config` turns ``config.json``'s ``vision_config`` into a :class:`VisionConfig`;
:func:`read_weight_map` reads ``model.safetensors.index.json`` (or lists one ``model.safetensors``);
:func:`load_vision_weights` copies the ``vision_tower.*`` and ``mm_projector.*`` tensors into a
model, opening only the shards that hold them (the language model's shards are never opened), and
returns a :class:`LoadReport`. ``VisionEncoder.from_checkpoint`` chains the three.

Everything read is checked first: the JSON files strictly (size, UTF-8, nesting, types; see
:func:`kimi_viz.preprocess.config.read_json_file`), every shard name stays inside the folder (no
absolute paths, no ``..``, no links out of it), and every shard must start like a safetensors file
(:func:`check_safetensors_file`) before safetensors opens it: a pickle renamed ``.safetensors`` is
refused by name, never unpickled, and a damaged shard is a :class:`~kimi_viz.errors.CheckpointError`.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError
from ..preprocess.config import read_checkpoint_config, read_json_file
from .config import VisionConfig
from .model import init_weights

VISION_PREFIXES = ("vision_tower.", "mm_projector.")
MAX_WEIGHT_MAP_ENTRIES = 1 << 20  # tensors named in one shard index
MAX_SAFETENSORS_HEADER = 100 << 20  # safetensors' own limit on the JSON header


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
    if not os.path.lexists(file):
        raise CheckpointError(
            f"{file} does not exist; expected a Kimi checkpoint folder holding config.json, "
            "model.safetensors.index.json and its shards (or use VisionEncoder.random() without weights)"
        )
    data, vision = read_checkpoint_config(folder)  # strict JSON; merge_kernel_size normalised
    text = data.get("text_config")
    if vision.get("text_hidden_size") is None and isinstance(text, dict) and text.get("hidden_size"):
        vision["text_hidden_size"] = text["hidden_size"]
    model_type = data.get("model_type")
    return vision, model_type if isinstance(model_type, str) else None


def shard_path(folder: Path, name: Any, where: str) -> Path:
    """Return ``folder/name`` for a shard name from the index, refusing names that leave the folder."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise CheckpointError(f"{where}: expected a shard file name, got {json.dumps(name)[:60]}; fix the index")
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts:
        raise CheckpointError(
            f"{where}: shard name {name!r} leaves the checkpoint folder; expected a file name inside it"
        )
    path = folder.joinpath(*parts)
    try:
        real, root = path.resolve(), folder.resolve()
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"{where}: shard {name!r} cannot be resolved ({exc}); replace the link") from None
    if not real.is_relative_to(root):
        raise CheckpointError(
            f"{where}: shard {name!r} resolves to {real}, outside the checkpoint folder {root}; refusing to read it"
        )
    return path


def check_safetensors_file(path: Path) -> None:
    """Raise CheckpointError unless ``path`` is a regular file that starts like a safetensors file.

    Only the first 8 bytes and the JSON header are read: a pickle or a ``torch.save`` archive renamed
    ``.safetensors``, a truncated download or an HTML error page is refused here, before safetensors opens it.
    """
    try:
        info = os.stat(path)
    except OSError:
        raise CheckpointError(f"{path} does not exist; download the missing shard") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(
            f"{path}: is not a regular file (a folder, FIFO or device?); expected a safetensors shard"
        )
    try:
        with open(path, "rb") as handle:
            start = handle.read(8)
            (length,) = struct.unpack("<Q", start) if len(start) == 8 else (0,)
            plausible = 2 <= length <= min(MAX_SAFETENSORS_HEADER, info.st_size - 8)
            header = handle.read(length) if plausible else b""
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from None
    kind = "a pickle (torch.save?)" if start[:1] == b"\x80" or start[:2] == b"PK" else "not a safetensors file"
    if not plausible or not header.lstrip().startswith(b"{"):
        raise CheckpointError(
            f"{path}: is {kind}, expected a safetensors shard (8-byte header length, then a JSON header); "
            "weights are read only from safetensors files, never unpickled — re-download or convert the shard"
        )
    try:
        parsed = json.loads(header.decode("utf-8"))
    except (ValueError, RecursionError):
        raise CheckpointError(f"{path}: has a damaged safetensors header (not JSON); re-download the shard") from None
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{path}: has a damaged safetensors header (not an object); re-download the shard")


def _safe_open(path: Path):
    from safetensors import safe_open

    check_safetensors_file(path)
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for damaged files
        raise CheckpointError(f"{path}: safetensors cannot open it ({exc}); re-download the shard") from None


def read_weight_map(folder: Path) -> dict[str, str]:
    """Return ``{tensor name: shard file}`` from ``model.safetensors.index.json`` (or one ``model.safetensors``)."""
    index = folder / "model.safetensors.index.json"
    if not os.path.lexists(index):
        single = folder / "model.safetensors"
        if os.path.lexists(single):
            with _safe_open(shard_path(folder, single.name, str(single))) as f:
                return dict.fromkeys(f.keys(), single.name)
        raise CheckpointError(
            f"{index} does not exist; expected the sharded checkpoint's index next to config.json "
            "(download model.safetensors.index.json with the shards, or point at the right folder)"
        )
    data = read_json_file(index, error=CheckpointError, limit=64 << 20)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: has no weight_map object; expected {{'weight_map': {{name: shard}}}}")
    if len(weight_map) > MAX_WEIGHT_MAP_ENTRIES:
        raise CheckpointError(
            f"{index}: weight_map names {len(weight_map)} tensors, over the limit of {MAX_WEIGHT_MAP_ENTRIES}"
        )
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(
                f"{index}: weight_map[{json.dumps(name)[:80]}]: expected a shard file name, "
                f"got {json.dumps(shard)[:60]}; re-download the index"
            )
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
    folder = Path(folder)
    config: Any = model.config
    device: Any = model.device  # the model's own attribute (its first parameter's device)
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
            path = shard_path(folder, shard, f"{folder / 'model.safetensors.index.json'}: {by_shard[shard][0]}")
            if not os.path.lexists(path):
                raise CheckpointError(
                    f"{path} does not exist but model.safetensors.index.json maps "
                    f"{by_shard[shard][0]} to it; download the missing shard"
                )
            report.shards_opened.append(shard)
            with _safe_open(path) as f:
                available = set(f.keys())
                for key in sorted(by_shard[shard]):
                    if key not in available:
                        raise CheckpointError(
                            f"{path}: has no tensor {key} although model.safetensors.index.json says "
                            "it does; the index and the shard disagree (re-download both)"
                        )
                    target = params[key]
                    try:
                        shape = tuple(f.get_slice(key).get_shape())
                    except Exception as exc:  # noqa: BLE001 - safetensors' own error types
                        raise CheckpointError(
                            f"{path}: tensor {key} cannot be read ({exc}); re-download the shard"
                        ) from None
                    if shape != tuple(target.shape):
                        raise CheckpointError(
                            f"{path}: tensor {key} has shape {list(shape)} but vision config "
                            f"{config.name!r} expects {list(target.shape)}; the config.json and the "
                            "shards come from different models"
                        )
                    try:
                        tensor = f.get_tensor(key)
                    except Exception as exc:  # noqa: BLE001 - a damaged or truncated shard
                        raise CheckpointError(
                            f"{path}: tensor {key} cannot be read ({exc}); re-download the shard"
                        ) from None
                    try:
                        target.copy_(tensor)
                    except (RuntimeError, TypeError) as exc:  # e.g. a dtype torch cannot copy from
                        raise CheckpointError(
                            f"{path}: tensor {key} cannot be loaded ({exc}); re-download the shard"
                        ) from None
                    report.loaded.append(key)
    report.loaded.sort()
    return report
