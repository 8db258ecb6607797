"""Processor configuration: the ``media_proc_cfg`` of a checkpoint's ``preprocessor_config.json``.

Two presets ship with the kit (``kimi-k3`` and ``kimi-k25``); any other configuration can be read
from a local checkpoint folder. Every invalid value raises :class:`~kimi_viz.errors.ConfigError`
naming the key, what was expected and which file to fix. Every size has a declared limit
(:data:`LIMITS`), checked before anything is allocated from it: a ``patch_size`` of 8000 or a merge
kernel of 10**6 is refused by name, not discovered by running out of memory. JSON files are read
strictly (:func:`read_json_file`): a regular file of at most :data:`MAX_JSON_FILE_BYTES`, UTF-8,
no NaN, no absurd nesting or integer length.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from .._records import frozen
from ..errors import CheckpointError, ConfigError
from ..files import file_kind

BACKGROUND_PATTERNS = ("white", "black", "gray", "chessboard")
BACKENDS = ("checkpoint", "torch")  # the processor's pixel paths (kimi_viz.preprocess.processor)
FILL_STAGES = ("before_resize", "after_resize")

# Declared limits of a processor config (Kimi-K3 itself: patch 14, kernel 2, 65536 patches, 512 a side).
LIMITS = {
    "patch_size": 64,
    "merge_kernel_size": 8,
    "in_patch_limit": 1 << 18,
    "patch_limit_on_one_side": 2048,
    "fixed_output_tokens": 1 << 18,
    "chessboard_square_size": 1 << 14,
}
MAX_RESIZED_SIDE = 1 << 14  # patch_limit_on_one_side x patch_size: the longest side a resize may produce
MAX_JSON_FILE_BYTES = 16 << 20  # a preprocessor_config.json, config.json or shard index

# The checkpoint's TransparentBgConfig defaults, used for keys missing from transparent_bg_config.
BACKGROUND_DEFAULTS: dict[str, Any] = {
    "pattern": "black",
    "chessboard_square_size": 16,
    "chessboard_square_on_top_left": True,
    "chessboard_white_value": 255,
    "chessboard_gray_value": 200,
}


@frozen
class ProcessorConfig:
    """The NaViT processor settings that decide grids, token counts and pixel values."""

    name: str
    patch_size: int = 14
    merge_kernel_size: int = 2
    in_patch_limit: int = 65536
    patch_limit_on_one_side: int = 512
    fixed_output_tokens: int | None = None
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    transparent_bg_config: dict[str, Any] | None = field(default=None, hash=False, compare=True)
    transparent_bg_fill_stage: str | None = None

    @property
    def fill_stage(self) -> str:
        """Return the effective fill stage (the checkpoint defaults to ``before_resize``)."""
        return self.transparent_bg_fill_stage or "before_resize"

    def background(self) -> dict[str, Any] | None:
        """Return ``transparent_bg_config`` with the checkpoint's defaults filled in, or None."""
        if self.transparent_bg_config is None:
            return None
        return {**BACKGROUND_DEFAULTS, **self.transparent_bg_config}

    def to_media_proc_cfg(self) -> dict[str, Any]:
        """Return the ``media_proc_cfg`` dict (the transparency keys only when set)."""
        cfg: dict[str, Any] = {
            "in_patch_limit": self.in_patch_limit,
            "patch_size": self.patch_size,
            "merge_kernel_size": self.merge_kernel_size,
            "patch_limit_on_one_side": self.patch_limit_on_one_side,
            "fixed_output_tokens": self.fixed_output_tokens,
            "image_mean": list(self.image_mean),
            "image_std": list(self.image_std),
        }
        if self.transparent_bg_config is not None:
            cfg["transparent_bg_config"] = dict(self.transparent_bg_config)
        if self.transparent_bg_fill_stage is not None:
            cfg["transparent_bg_fill_stage"] = self.transparent_bg_fill_stage
        return cfg

    def with_name(self, name: str) -> ProcessorConfig:
        """Return a copy of this config under another name."""
        return replace(self, name=name)

    @classmethod
    def from_media_proc_cfg(
        cls, cfg: Mapping[str, Any], *, name: str = "custom", source: str = "preprocessor_config.json"
    ) -> ProcessorConfig:
        """Return a validated config from a ``media_proc_cfg`` dict (``source`` names the file in errors)."""
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"media_proc_cfg: expected a JSON object, got {type(cfg).__name__}; fix {source}")
        for key in (
            "patch_size",
            "merge_kernel_size",
            "in_patch_limit",
            "patch_limit_on_one_side",
            "image_mean",
            "image_std",
        ):
            if key not in cfg:
                raise ConfigError(f"media_proc_cfg.{key}: missing (a required key); fix {source}")
        fixed = cfg.get("fixed_output_tokens")
        config = cls(
            name=name,
            patch_size=_positive_int(cfg["patch_size"], "patch_size", source),
            merge_kernel_size=_merge_kernel_size(cfg["merge_kernel_size"], "media_proc_cfg.merge_kernel_size", source),
            in_patch_limit=_positive_int(cfg["in_patch_limit"], "in_patch_limit", source),
            patch_limit_on_one_side=_positive_int(cfg["patch_limit_on_one_side"], "patch_limit_on_one_side", source),
            fixed_output_tokens=None if fixed is None else _positive_int(fixed, "fixed_output_tokens", source),
            image_mean=_three_floats(cfg["image_mean"], "image_mean", source, nonzero=False),
            image_std=_three_floats(cfg["image_std"], "image_std", source, nonzero=True),
            transparent_bg_config=_background(cfg.get("transparent_bg_config"), source),
            transparent_bg_fill_stage=_fill_stage(cfg.get("transparent_bg_fill_stage"), source),
        )
        side = config.patch_limit_on_one_side * config.patch_size
        if side > MAX_RESIZED_SIDE:
            raise ConfigError(
                f"media_proc_cfg.patch_limit_on_one_side: {config.patch_limit_on_one_side} patches of "
                f"{config.patch_size} px give {side}-px sides, over the limit of {MAX_RESIZED_SIDE}; fix {source}"
            )
        return config


# --- validation helpers ----------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """Return ``repr(value)`` cut to a readable length (a 5000-digit integer is not printed whole)."""
    if _is_int(value) and abs(value) >= 10**30:
        return "a huge integer"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _positive_int(value: Any, key: str, source: str) -> int:
    limit = LIMITS.get(key.rpartition(".")[2])
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"media_proc_cfg.{key}: expected a positive int, got {_shown(value)}; fix {source}")
    if limit is not None and value > limit:
        raise ConfigError(
            f"media_proc_cfg.{key}: expected a positive int of at most {limit}, got {_shown(value)}; fix {source}"
        )
    return int(value)


def _merge_kernel_size(value: Any, key: str, source: str) -> int:
    """Return the merge kernel as an int from ``2`` or ``[2, 2]``; non-square kernels are refused."""
    limit = LIMITS["merge_kernel_size"]
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(_is_int(v) and 0 < v <= limit for v in value):
            raise ConfigError(
                f"{key}: expected a positive int or [k, k], got {_shown(value)} (k at most {limit}); fix {source}"
            )
        if value[0] != value[1]:
            raise ConfigError(
                f"{key}: expected a square kernel [k, k], got {list(value)!r} "
                f"(Kimi's NaViT merge uses one size for both sides); fix {source}"
            )
        return int(value[0])
    if not _is_int(value) or not 0 < value <= limit:
        raise ConfigError(
            f"{key}: expected a positive int or [k, k], got {_shown(value)} (k at most {limit}); fix {source}"
        )
    return int(value)


def _three_floats(value: Any, key: str, source: str, *, nonzero: bool) -> tuple[float, float, float]:
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 3
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    )
    if not ok:
        raise ConfigError(f"media_proc_cfg.{key}: expected a list of 3 numbers, got {_shown(value)}; fix {source}")
    if not all(math.isfinite(v) for v in value):
        raise ConfigError(f"media_proc_cfg.{key}: expected finite values, got {list(value)!r}; fix {source}")
    if nonzero and any(float(v) == 0.0 for v in value):
        raise ConfigError(f"media_proc_cfg.{key}: expected non-zero values, got {list(value)!r}; fix {source}")
    return (float(value[0]), float(value[1]), float(value[2]))


def _background(value: Any, source: str) -> dict[str, Any] | None:
    if value is None:
        return None
    key = "media_proc_cfg.transparent_bg_config"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected an object or null, got {_shown(value)}; fix {source}")
    unknown = sorted(str(k) for k in set(value) - set(BACKGROUND_DEFAULTS))
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}: unknown key; expected one of {sorted(BACKGROUND_DEFAULTS)}; fix {source}"
        )
    pattern = value.get("pattern", BACKGROUND_DEFAULTS["pattern"])
    if not isinstance(pattern, str) or pattern not in BACKGROUND_PATTERNS:
        raise ConfigError(
            f"{key}.pattern: expected one of {list(BACKGROUND_PATTERNS)}, got {_shown(pattern)}; fix {source}"
        )
    if "chessboard_square_size" in value:
        square = value["chessboard_square_size"]
        limit = LIMITS["chessboard_square_size"]
        if not _is_int(square) or not 0 < square <= limit:
            raise ConfigError(
                f"{key}.chessboard_square_size: expected a positive int of at most {limit}, got {_shown(square)}; "
                f"fix {source}"
            )
    for shade in ("chessboard_white_value", "chessboard_gray_value"):
        if shade in value:
            level = value[shade]
            if not _is_int(level) or not 0 <= level <= 255:
                raise ConfigError(f"{key}.{shade}: expected an int in 0..255, got {_shown(level)}; fix {source}")
    if "chessboard_square_on_top_left" in value and not isinstance(value["chessboard_square_on_top_left"], bool):
        raise ConfigError(
            f"{key}.chessboard_square_on_top_left: expected true or false, "
            f"got {_shown(value['chessboard_square_on_top_left'])}; fix {source}"
        )
    return dict(value)


def _fill_stage(value: Any, source: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in FILL_STAGES:
        raise ConfigError(
            f"media_proc_cfg.transparent_bg_fill_stage: expected one of {list(FILL_STAGES)}, got {_shown(value)}; "
            f"fix {source}"
        )
    return str(value)


# --- presets -------------------------------------------------------------------------------------
PROCESSOR_PRESETS: dict[str, ProcessorConfig] = {
    "kimi-k3": ProcessorConfig(
        name="kimi-k3",
        in_patch_limit=65536,
        transparent_bg_config={
            "pattern": "chessboard",
            "chessboard_square_size": 8,
            "chessboard_square_on_top_left": True,
            "chessboard_white_value": 255,
            "chessboard_gray_value": 180,
        },
        transparent_bg_fill_stage="after_resize",
    ),
    # No transparent_bg_config: the checkpoint drops alpha with a plain convert("RGB") before resizing.
    "kimi-k25": ProcessorConfig(name="kimi-k25", in_patch_limit=16384),
}


def _preset_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def get_config(preset_or_config: Any = "kimi-k3") -> ProcessorConfig:
    """Return a :class:`ProcessorConfig` from a preset name, a config, a ``media_proc_cfg`` dict,
    a full ``preprocessor_config.json`` dict, or a path to a folder / ``preprocessor_config.json``."""
    if isinstance(preset_or_config, ProcessorConfig):
        return preset_or_config
    if isinstance(preset_or_config, Mapping):
        inner = preset_or_config.get("media_proc_cfg", preset_or_config)
        return ProcessorConfig.from_media_proc_cfg(inner, name="custom", source="the config dict")
    if isinstance(preset_or_config, (str, Path)):
        key = _preset_key(str(preset_or_config))
        if isinstance(preset_or_config, str) and key in PROCESSOR_PRESETS:
            return PROCESSOR_PRESETS[key]
        path = Path(preset_or_config)
        if path.exists():
            return load_preprocessor_config(path)
        raise ConfigError(
            f"unknown processor config {str(preset_or_config)!r}: expected a preset "
            f"({', '.join(PROCESSOR_PRESETS)}) or a path to a checkpoint folder or preprocessor_config.json"
        )
    raise ConfigError(
        "processor config: expected a preset name, ProcessorConfig, dict or path, got "
        f"{type(preset_or_config).__name__}"
    )


def _refuse_constant(name: str) -> Any:
    raise ConfigError(f"{name} is not valid JSON")


def read_json_file(path: str | os.PathLike, *, error: type = ConfigError, limit: int = MAX_JSON_FILE_BYTES) -> Any:
    """Return the parsed JSON of ``path``, strictly: a regular file of at most ``limit`` bytes, UTF-8 text,
    no NaN/Infinity, no nesting or integers too deep or long for Python; ``error`` (a KimiVizError
    class) names the file and the fault otherwise."""
    path = Path(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        raise error(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc}); check the path") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: is {file_kind(info.st_mode)}; expected a JSON file")
    if info.st_size > limit:
        raise error(
            f"{path}: is {info.st_size} bytes, over the {limit}-byte limit for a JSON file; expected a config file"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror}); check the path and permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a JSON file") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the file") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply to be a config file; fix the file") from None
    except ValueError as exc:  # NaN/Infinity, or an integer literal longer than Python converts
        reason = str(exc).split(";")[0]
        raise error(f"{path}: could not be read as JSON ({reason}); fix the file") from None


def load_preprocessor_config(path: str | Path) -> ProcessorConfig:
    """Return the config in ``media_proc_cfg`` of ``preprocessor_config.json`` (a file, or a folder holding it)."""
    path = Path(path)
    file = path if path.suffix == ".json" else path / "preprocessor_config.json"
    folder = file.parent
    if not os.path.lexists(file):
        raise CheckpointError(
            f"{file} does not exist; expected a checkpoint folder with preprocessor_config.json "
            "(or the path of that file)"
        )
    data = read_json_file(file)
    if not isinstance(data, dict) or "media_proc_cfg" not in data:
        raise ConfigError(f"media_proc_cfg: missing from {file}; expected the Kimi processor's media_proc_cfg object")
    return ProcessorConfig.from_media_proc_cfg(
        data["media_proc_cfg"], name=folder.name or str(folder), source=str(file)
    )


def read_vision_config(folder: str | Path) -> dict[str, Any]:
    """Return the ``vision_config`` dict of ``folder/config.json`` with ``merge_kernel_size`` as an int."""
    return read_checkpoint_config(folder)[1]


def read_checkpoint_config(folder: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(config.json, its vision_config)`` of a checkpoint folder, read once and strictly."""
    folder = Path(folder)
    file = folder if folder.suffix == ".json" else folder / "config.json"
    if not os.path.lexists(file):
        raise CheckpointError(f"{file} does not exist; expected a checkpoint folder with config.json")
    data = read_json_file(file)
    vision = data.get("vision_config") if isinstance(data, dict) else None
    if not isinstance(vision, dict):
        raise ConfigError(f"vision_config: missing from {file}; expected the model's vision_config object")
    vision = dict(vision)
    if "merge_kernel_size" in vision:
        vision["merge_kernel_size"] = _merge_kernel_size(
            vision["merge_kernel_size"], "vision_config.merge_kernel_size", str(file)
        )
    return data, vision
