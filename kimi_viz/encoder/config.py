"""The vision tower's shapes: :class:`VisionConfig`, the presets, and which processor feeds each.

``ENCODER_PRESETS`` holds ``kimi-k3`` (SGLang's ``KimiK3VisionConfig`` defaults), ``kimi-k25`` and
``tiny`` (the same code with small widths, for CPU tests and notebooks). A checkpoint's own
``config.json`` is read with :meth:`VisionConfig.from_dict`. :func:`processor_preset_for` names
the processor preset whose grids a config's tower expects.

Nothing here needs torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from .._records import frozen
from ..errors import ConfigError
from ..preprocess.config import get_config

Grid = tuple[int, int, int]

# The default processor config: the tower consumes its patches, so its patch size and merge kernel are the tower's.
_PROCESSOR = get_config()

# nn.RMSNorm(dim) with eps=None: the accumulation type's epsilon, torch.finfo(torch.float32).eps,
# for fp32, bf16 and fp16 inputs alike (the tests check the two agree).
TORCH_RMSNORM_DEFAULT_EPS = 2.0**-23

# Declared limits of a vision config, checked before anything is allocated (Kimi-K3: 1024 wide, 27 layers).
VISION_LIMITS = {
    "patch_size": 64,
    "hidden_size": 16384,
    "num_heads": 256,
    "num_layers": 256,
    "intermediate_size": 65536,
    "qkv_hidden_size": 16384,
    "pos_emb_height": 1024,
    "pos_emb_width": 1024,
    "pos_emb_time": 64,
    "merge_kernel_size": 8,
    "text_hidden_size": 65536,
    "rope_max_size": 4096,
}
MAX_PARAMETERS = 4 * 10**9  # the tower and projector together (Kimi-K3: about 0.45 billion)


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return "a huge integer"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# The activations the MLP knows (``activation_func``); kimi_viz.encoder.model.ACTIVATIONS maps each to code.
ACTIVATION_NAMES = ("gelu_pytorch_tanh", "gelu")


@frozen
class VisionConfig:
    """Shapes and choices of one vision tower + projector (field names follow SGLang's config)."""

    name: str = "kimi-k3"
    patch_size: int = _PROCESSOR.patch_size
    hidden_size: int = 1024  # vt_hidden_size (D)
    num_heads: int = 12  # vt_num_attention_heads
    num_layers: int = 27  # vt_num_hidden_layers
    intermediate_size: int = 4096  # vt_intermediate_size
    qkv_hidden_size: int = 1536  # width of q, k and v each (heads × head_dim)
    pos_emb_height: int = 64  # init_pos_emb_height
    pos_emb_width: int = 64  # init_pos_emb_width
    pos_emb_time: int = 4  # init_pos_emb_time (frames of the sin/cos time table)
    pos_emb_interpolation: str = "bilinear"  # pos_emb_interpolation_mode
    norm_type: str = "rmsnorm"  # "rmsnorm" or "layernorm"
    norm_eps: float = TORCH_RMSNORM_DEFAULT_EPS
    attn_bias: bool = False
    linear_bias: bool = False  # MLP biases
    patch_embed_bias: bool = False  # patch_embed_proj_bias
    activation: str = "gelu_pytorch_tanh"  # activation_func
    merge_kernel_size: int = _PROCESSOR.merge_kernel_size
    projector_type: str = "patchmergerv2"  # mm_projector_type ("patchmerger" in K2.5)
    mm_hidden_size: int | None = None  # defaults to hidden_size
    projector_ln_eps: float = 1e-5
    text_hidden_size: int = 7168  # projector output width
    rope_max_size: int = 512  # the rotary table covers grids up to 512 × 512
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        """Return the width of one attention head."""
        return self.qkv_hidden_size // self.num_heads

    @property
    def merged_width(self) -> int:
        """Return the projector's input width (``k·k·mm_hidden_size``)."""
        return (self.mm_hidden_size or self.hidden_size) * self.merge_kernel_size**2

    @property
    def out_dim(self) -> int:
        """Return the width of one output feature row."""
        return self.text_hidden_size

    def to_dict(self) -> dict[str, Any]:
        """Return the config as a plain dict (JSON-ready)."""
        return asdict(self)

    def validate(self, source: str = "the vision config") -> VisionConfig:
        """Return ``self`` after checking the values the code relies on (ConfigError otherwise)."""

        def bad(key: str, expected: str, value: Any) -> ConfigError:
            return ConfigError(f"vision_config.{key}: expected {expected}, got {_shown(value)}; fix {source}")

        for key in (
            "patch_size",
            "hidden_size",
            "num_heads",
            "num_layers",
            "intermediate_size",
            "qkv_hidden_size",
            "pos_emb_height",
            "pos_emb_width",
            "pos_emb_time",
            "merge_kernel_size",
            "text_hidden_size",
            "rope_max_size",
        ):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise bad(key, "a positive int", value)
            if value > VISION_LIMITS[key]:
                raise bad(key, f"a positive int of at most {VISION_LIMITS[key]}", value)
        for key in ("norm_eps", "projector_ln_eps", "rope_theta"):
            value = getattr(self, key)
            if not isinstance(value, float) or not math.isfinite(value) or value <= 0:
                raise bad(key, "a positive finite number", value)
        for key in ("name", "norm_type", "activation", "projector_type", "pos_emb_interpolation"):
            if not isinstance(getattr(self, key), str):
                raise bad(key, "a string", getattr(self, key))
        if self.mm_hidden_size is not None and (
            not isinstance(self.mm_hidden_size, int) or isinstance(self.mm_hidden_size, bool)
        ):
            raise bad("mm_hidden_size", "an int or null", self.mm_hidden_size)
        if self.qkv_hidden_size % self.num_heads:
            raise bad("qkv_hidden_size", f"a multiple of num_heads={self.num_heads}", self.qkv_hidden_size)
        if self.head_dim % 4:
            raise bad("qkv_hidden_size", "heads whose width is a multiple of 4 (2-D RoPE)", self.qkv_hidden_size)
        if self.norm_type not in ("rmsnorm", "layernorm"):
            raise bad("norm_type", "'rmsnorm' or 'layernorm'", self.norm_type)
        if self.activation not in ACTIVATION_NAMES:
            raise bad("activation_func", f"one of {sorted(ACTIVATION_NAMES)}", self.activation)
        if self.projector_type not in ("patchmergerv2", "patchmerger"):
            raise bad("mm_projector_type", "'patchmergerv2' (K3) or 'patchmerger' (K2.5)", self.projector_type)
        if self.pos_emb_interpolation not in ("bilinear", "bicubic"):
            raise bad("pos_emb_interpolation_mode", "'bilinear' or 'bicubic'", self.pos_emb_interpolation)
        if (self.mm_hidden_size or self.hidden_size) != self.hidden_size:
            raise bad("mm_hidden_size", f"the tower width {self.hidden_size}", self.mm_hidden_size)
        estimate = self.estimated_parameters()
        if estimate > MAX_PARAMETERS:
            raise ConfigError(
                f"vision_config: these sizes give about {estimate:.3g} parameters, over the limit of "
                f"{MAX_PARAMETERS:.3g} for a vision tower; fix {source}"
            )
        return self

    def estimated_parameters(self) -> int:
        """Return an upper estimate of the tower's and projector's parameter count (no allocation)."""
        d, q, i = self.hidden_size, self.qkv_hidden_size, self.intermediate_size
        layer = 3 * d * q + q * d + 2 * d * i + 3 * q + 2 * d + i + 4 * d
        merged = d * self.merge_kernel_size**2
        embed = 3 * self.patch_size**2 * d + d + self.pos_emb_height * self.pos_emb_width * d
        projector = merged * merged + merged * self.text_hidden_size + 4 * merged + self.text_hidden_size
        return self.num_layers * layer + embed + projector + 2 * d

    @classmethod
    def from_dict(
        cls, vision_config: Mapping[str, Any], *, model_type: str | None = None, source: str = "config.json"
    ) -> VisionConfig:
        """Return the config described by a checkpoint's ``config.json`` ``vision_config`` dict.

        Keys use SGLang's names (``vt_hidden_size``, ``vt_num_attention_heads``, ``qkv_hidden_size``,
        ``norm_type``, ``init_pos_emb_height``, ``mm_projector_type``, ``text_hidden_size``, ...).
        Missing keys take the Kimi-K3 defaults, or the Kimi-K2.5 ones when ``model_type`` or
        ``mm_projector_type`` says K2.5.
        """
        if not isinstance(vision_config, Mapping):
            raise ConfigError(
                f"vision_config: expected a JSON object, got {type(vision_config).__name__}; fix {source}"
            )
        keys = _VisionKeys(dict(vision_config), source)
        d = keys.values
        family = str(model_type or d.get("model_type") or "").lower()
        is_k25 = "k25" in family or "k2_5" in family or d.get("mm_projector_type") == "patchmerger"
        base = ENCODER_PRESETS["kimi-k25" if is_k25 else "kimi-k3"]
        for key, allowed in _FIXED_CHOICES:
            keys.fixed(key, allowed)
        merge = keys.merge_kernel_size(base.merge_kernel_size)
        hidden = keys.hidden_size(base.hidden_size)
        pick, number, flag = keys.pick, keys.number, keys.flag
        config = replace(
            base,
            name=str(pick("name", default=f"{base.name} ({source})")),
            patch_size=pick("patch_size", default=base.patch_size),
            hidden_size=hidden,
            num_heads=pick("vt_num_attention_heads", "num_attention_heads", default=base.num_heads),
            num_layers=pick("vt_num_hidden_layers", "num_hidden_layers", default=base.num_layers),
            intermediate_size=pick("vt_intermediate_size", "intermediate_size", default=base.intermediate_size),
            qkv_hidden_size=pick("qkv_hidden_size", default=base.qkv_hidden_size if not is_k25 else hidden),
            pos_emb_height=pick("init_pos_emb_height", default=base.pos_emb_height),
            pos_emb_width=pick("init_pos_emb_width", default=base.pos_emb_width),
            pos_emb_time=pick("init_pos_emb_time", default=base.pos_emb_time),
            pos_emb_interpolation=pick("pos_emb_interpolation_mode", default=base.pos_emb_interpolation),
            norm_type=pick("norm_type", default=base.norm_type),
            norm_eps=number("norm_eps", default=base.norm_eps),
            attn_bias=flag("attn_bias", base.attn_bias),
            linear_bias=flag("linear_bias", base.linear_bias),
            patch_embed_bias=flag("patch_embed_proj_bias", base.patch_embed_bias),
            activation=pick("activation_func", default=base.activation),
            merge_kernel_size=merge,
            projector_type=pick("mm_projector_type", default=base.projector_type),
            mm_hidden_size=pick("mm_hidden_size", default=None),
            projector_ln_eps=number("projector_ln_eps", default=base.projector_ln_eps),
            text_hidden_size=pick("text_hidden_size", default=base.text_hidden_size),
        )
        if config.norm_type == "layernorm" and "norm_eps" not in d:
            config = replace(config, norm_eps=1e-5)  # nn.LayerNorm's default
        return config.validate(source)


# Keys of a vision_config that name a fixed choice: Kimi's tower supports only this value.
_FIXED_CHOICES = (
    ("pos_emb_type", "divided_fixed"),
    ("merge_type", "sd2_tpool"),
    ("mlp_type", "mlp2"),
    ("projector_hidden_act", "gelu"),
)


@frozen
class _VisionKeys:
    """A checkpoint's ``vision_config`` dict read key by key, each fault named with ``source``."""

    values: dict[str, Any]
    source: str

    def pick(self, *keys: str, default: Any) -> Any:
        """Return the value of the first of ``keys`` that is set (not null), else ``default``."""
        for key in keys:
            if self.values.get(key) is not None:
                return self.values[key]
        return default

    def fixed(self, key: str, allowed: str) -> None:
        """Raise ConfigError when ``key`` is present with another value than ``allowed``; returns nothing."""
        if key in self.values and self.values[key] != allowed:
            raise ConfigError(f"vision_config.{key}: expected {allowed!r}, got {self.values[key]!r}; fix {self.source}")

    def number(self, *keys: str, default: float) -> float:
        """Return the picked value as a finite float (ConfigError otherwise)."""
        value = self.pick(*keys, default=default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"vision_config.{keys[0]}: expected a number, got {_shown(value)}; fix {self.source}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        """Return the picked value as a bool (ConfigError unless it is true or false)."""
        value = self.pick(key, default=default)
        if not isinstance(value, bool):
            raise ConfigError(f"vision_config.{key}: expected true or false, got {_shown(value)}; fix {self.source}")
        return value

    def merge_kernel_size(self, default: int) -> Any:
        """Return the merge kernel from ``k`` or ``[k, k]`` (a non-square pair raises ConfigError)."""
        merge = self.pick("merge_kernel_size", default=default)
        if isinstance(merge, (list, tuple)):
            if len(merge) != 2 or merge[0] != merge[1]:
                raise ConfigError(
                    f"vision_config.merge_kernel_size: expected k or [k, k], got {_shown(merge)}; fix {self.source}"
                )
            merge = merge[0]
        return merge

    def hidden_size(self, default: int) -> int:
        """Return the tower width (``vt_hidden_size`` or ``hidden_size``); ConfigError unless it is an int."""
        hidden = self.pick("vt_hidden_size", "hidden_size", default=default)
        if isinstance(hidden, bool) or not isinstance(hidden, int):
            raise ConfigError(
                f"vision_config.vt_hidden_size: expected a positive int, got {_shown(hidden)}; fix {self.source}"
            )
        return hidden


ENCODER_PRESETS: dict[str, VisionConfig] = {
    # Kimi-K3 (SGLang KimiK3VisionConfig defaults, §5 of the pipeline spec): ≈447 M parameters.
    "kimi-k3": VisionConfig(),
    # Kimi-K2.5 (SGLang kimi_k25.py): LayerNorm (eps 1e-5) everywhere, biases everywhere, bicubic
    # position table, qkv width = hidden width, projector LayerNorm(1152) before the MLP, no post-norm.
    "kimi-k25": VisionConfig(
        name="kimi-k25",
        hidden_size=1152,
        num_heads=16,
        intermediate_size=4304,
        qkv_hidden_size=1152,
        pos_emb_interpolation="bicubic",
        norm_type="layernorm",
        norm_eps=1e-5,
        attn_bias=True,
        linear_bias=True,
        patch_embed_bias=True,
        projector_type="patchmerger",
    ),
    # Same code, small widths: for fast CPU tests. The 8 × 8 table is resized both up and down.
    "tiny": VisionConfig(
        name="tiny",
        hidden_size=64,
        num_heads=2,
        num_layers=2,
        intermediate_size=128,
        qkv_hidden_size=64,
        pos_emb_height=8,
        pos_emb_width=8,
        text_hidden_size=96,
    ),
}


def get_vision_config(preset: str | VisionConfig) -> VisionConfig:
    """Return a preset's config (``kimi-k3``, ``kimi-k25``, ``tiny``) or the config given."""
    if isinstance(preset, VisionConfig):
        return preset.validate()
    key = str(preset).strip().lower().replace("_", "-")
    if key not in ENCODER_PRESETS:
        raise ConfigError(f"unknown vision preset {preset!r}; expected one of {', '.join(ENCODER_PRESETS)}")
    return ENCODER_PRESETS[key]


# Each encoder preset's processor: K2.5's tower takes K2.5's grids; tiny stands in for kimi-k3.
_PROCESSOR_OF_PROJECTOR = {"patchmergerv2": "kimi-k3", "patchmerger": "kimi-k25"}


def processor_preset_for(config: str | VisionConfig) -> str:
    """Return the processor preset (``kimi-k3`` or ``kimi-k25``) whose grids this encoder expects.

    A preset name or a config: the ``patchmerger`` projector (Kimi-K2.5) pairs with the ``kimi-k25``
    processor, ``patchmergerv2`` (Kimi-K3, and ``tiny``) with ``kimi-k3``.
    """
    return _PROCESSOR_OF_PROJECTOR[get_vision_config(config).projector_type]
