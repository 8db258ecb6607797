"""The Kimi-K3 vision encoder: MoonViT3d tower + ``patchmergerv2`` projector, in one file.

Read it top to bottom:

1. :class:`VisionConfig` and ``PRESETS`` (``kimi-k3``, ``kimi-k25``, ``tiny``).
2. Position helpers: the learned 2-D table resized to each grid, the sin/cos time table, and the
   2-D rotary embedding (RoPE), all plain functions so they can be read and tested on their own.
3. Attention confined to each image: one SDPA call per image, a block-diagonal mask, or one
   packed varlen FlashAttention call.
4. The modules, named exactly like the checkpoint's tensors::

       vision_tower.patch_embed.proj.weight              Conv2d(3 -> D, k=14, s=14)
       vision_tower.patch_embed.pos_emb.weight           (64, 64, D) learned table
       vision_tower.encoder.blocks.{i}.norm0 / norm1     RMSNorm (K3) or LayerNorm (K2.5)
       vision_tower.encoder.blocks.{i}.wqkv / wo         attention projections
       vision_tower.encoder.blocks.{i}.mlp.fc0 / fc1     GELU(tanh) MLP
       vision_tower.encoder.final_layernorm
       mm_projector.proj.0 / proj.2                      Linear -> GELU -> Linear
       mm_projector.post_norm (K3) / pre_norm (K2.5)

5. :class:`EncoderOutput`, :class:`LoadReport` and the input checks (grids, row counts).
6. Dtypes, random initialisation, and reading a checkpoint's ``config.json`` and shard index.
7. :class:`VisionEncoder`: ``random()``, ``from_checkpoint()`` (reads only the vision shards of a
   sharded checkpoint) and ``encode()`` (checks the row accounting, then runs the tower).

One forward pass, per image of grid ``(t, h, w)`` (``N = Σ t·h·w`` rows in, ``Σ h·w/4`` rows out)::

    x = patch_embed(pixels) + resize(pos_table, h, w) [+ time_table for t > 1]      [N, D]
    for block in blocks:                                                             (27 in K3)
        x = x + wo(attention_within_image(rope(wqkv(norm0(x)))))
        x = x + fc1(gelu_tanh(fc0(norm1(x))))
    x = final_norm(x)
    merged = x.view(t, h/2, 2, w/2, 2, D).mean(t) -> (h/2 · w/2, 4, D)               [Σ hw/4, 4, D]
    features = post_norm(fc(gelu(fc(merged.flatten(1)))))                          [Σ hw/4, 7168]

Numerics: RoPE and every norm run in fp32 whatever the weight dtype; no autocast anywhere. The
RMSNorm eps is the one SGLang's ``nn.RMSNorm(dim)`` really uses: its ``eps=None`` resolves to the
*accumulation* type's epsilon, ``torch.finfo(torch.float32).eps`` = 2⁻²³, for bf16 and fp32 inputs
alike (checked against ``torch.nn.RMSNorm`` in the tests; the CUDA kernel is checked by
``benchmarks/run_gpu_checks.sh``). It is written into the config so fp32 and bf16 runs agree.
bf16 features match fp32 ones to a relative L2 error below 2e-2 (tested on the tiny preset).

Where the arithmetic differs from SGLang's (each by at most a bf16 rounding): the position table
is resized in fp32 and then cast; the patch Conv2d runs as the equivalent matmul; the residual adds
after ``wo`` and ``fc1`` are fused into the GEMMs (``addmm``) when there is no bias; inputs longer
than 16384 rows run the MLP in row chunks.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import read_vision_config
from .devices import resolve_device
from .errors import CheckpointError, ConfigError, RowCountError, UnsupportedImageError

Grid = tuple[int, int, int]

# nn.RMSNorm(dim) with eps=None: the accumulation type's epsilon (float32 for fp32, bf16 and fp16).
TORCH_RMSNORM_DEFAULT_EPS = float(torch.finfo(torch.float32).eps)  # 2**-23


# =============================================================================================
# 1. Configuration
# =============================================================================================
@dataclass(frozen=True)
class VisionConfig:
    """Shapes and choices of one vision tower + projector (field names follow SGLang's config)."""

    name: str = "kimi-k3"
    patch_size: int = 14
    hidden_size: int = 1024              # vt_hidden_size (D)
    num_heads: int = 12                  # vt_num_attention_heads
    num_layers: int = 27                 # vt_num_hidden_layers
    intermediate_size: int = 4096        # vt_intermediate_size
    qkv_hidden_size: int = 1536          # width of q, k and v each (heads × head_dim)
    pos_emb_height: int = 64             # init_pos_emb_height
    pos_emb_width: int = 64              # init_pos_emb_width
    pos_emb_time: int = 4                # init_pos_emb_time (frames of the sin/cos time table)
    pos_emb_interpolation: str = "bilinear"   # pos_emb_interpolation_mode
    norm_type: str = "rmsnorm"           # "rmsnorm" or "layernorm"
    norm_eps: float = TORCH_RMSNORM_DEFAULT_EPS
    attn_bias: bool = False
    linear_bias: bool = False            # MLP biases
    patch_embed_bias: bool = False       # patch_embed_proj_bias
    activation: str = "gelu_pytorch_tanh"     # activation_func
    merge_kernel_size: int = 2
    projector_type: str = "patchmergerv2"     # mm_projector_type ("patchmerger" in K2.5)
    mm_hidden_size: int | None = None    # defaults to hidden_size
    projector_ln_eps: float = 1e-5
    text_hidden_size: int = 7168         # projector output width
    rope_max_size: int = 512             # the rotary table covers grids up to 512 × 512
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

    def validate(self, source: str = "the vision config") -> "VisionConfig":
        """Return ``self`` after checking the values the code relies on (ConfigError otherwise)."""
        def bad(key: str, expected: str, value: Any) -> ConfigError:
            return ConfigError(f"vision_config.{key}: expected {expected}, got {value!r}; fix {source}")

        for key in ("patch_size", "hidden_size", "num_heads", "num_layers", "intermediate_size",
                    "qkv_hidden_size", "pos_emb_height", "pos_emb_width", "pos_emb_time",
                    "merge_kernel_size", "text_hidden_size", "rope_max_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise bad(key, "a positive int", value)
        if self.qkv_hidden_size % self.num_heads:
            raise bad("qkv_hidden_size", f"a multiple of num_heads={self.num_heads}", self.qkv_hidden_size)
        if self.head_dim % 4:
            raise bad("qkv_hidden_size", "heads whose width is a multiple of 4 (2-D RoPE)", self.qkv_hidden_size)
        if self.norm_type not in ("rmsnorm", "layernorm"):
            raise bad("norm_type", "'rmsnorm' or 'layernorm'", self.norm_type)
        if self.activation not in ACTIVATIONS:
            raise bad("activation_func", f"one of {sorted(ACTIVATIONS)}", self.activation)
        if self.projector_type not in ("patchmergerv2", "patchmerger"):
            raise bad("mm_projector_type", "'patchmergerv2' (K3) or 'patchmerger' (K2.5)", self.projector_type)
        if self.pos_emb_interpolation not in ("bilinear", "bicubic"):
            raise bad("pos_emb_interpolation_mode", "'bilinear' or 'bicubic'", self.pos_emb_interpolation)
        if (self.mm_hidden_size or self.hidden_size) != self.hidden_size:
            raise bad("mm_hidden_size", f"the tower width {self.hidden_size}", self.mm_hidden_size)
        return self

    @classmethod
    def from_dict(cls, vision_config: Mapping[str, Any], *, model_type: str | None = None,
                  source: str = "config.json") -> "VisionConfig":
        """Return the config described by a checkpoint's ``config.json`` ``vision_config`` dict.

        Keys use SGLang's names (``vt_hidden_size``, ``vt_num_attention_heads``, ``qkv_hidden_size``,
        ``norm_type``, ``init_pos_emb_height``, ``mm_projector_type``, ``text_hidden_size``, ...).
        Missing keys take the Kimi-K3 defaults, or the Kimi-K2.5 ones when ``model_type`` or
        ``mm_projector_type`` says K2.5.
        """
        if not isinstance(vision_config, Mapping):
            raise ConfigError(f"vision_config: expected a JSON object, got {type(vision_config).__name__}; fix {source}")
        d = dict(vision_config)
        family = (model_type or d.get("model_type") or "").lower()
        is_k25 = "k25" in family or "k2_5" in family or d.get("mm_projector_type") == "patchmerger"
        base = PRESETS["kimi-k25" if is_k25 else "kimi-k3"]

        def pick(*keys: str, default: Any) -> Any:
            for key in keys:
                if d.get(key) is not None:
                    return d[key]
            return default

        def fixed(key: str, allowed: str) -> None:
            if key in d and d[key] != allowed:
                raise ConfigError(f"vision_config.{key}: expected {allowed!r}, got {d[key]!r}; fix {source}")

        fixed("pos_emb_type", "divided_fixed")
        fixed("merge_type", "sd2_tpool")
        fixed("mlp_type", "mlp2")
        fixed("projector_hidden_act", "gelu")
        merge = pick("merge_kernel_size", default=base.merge_kernel_size)
        if isinstance(merge, (list, tuple)):
            if len(merge) != 2 or merge[0] != merge[1]:
                raise ConfigError(f"vision_config.merge_kernel_size: expected k or [k, k], got {merge!r}; fix {source}")
            merge = merge[0]
        hidden = int(pick("vt_hidden_size", "hidden_size", default=base.hidden_size))
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
            norm_eps=float(pick("norm_eps", default=base.norm_eps)),
            attn_bias=bool(pick("attn_bias", default=base.attn_bias)),
            linear_bias=bool(pick("linear_bias", default=base.linear_bias)),
            patch_embed_bias=bool(pick("patch_embed_proj_bias", default=base.patch_embed_bias)),
            activation=pick("activation_func", default=base.activation),
            merge_kernel_size=merge,
            projector_type=pick("mm_projector_type", default=base.projector_type),
            mm_hidden_size=pick("mm_hidden_size", default=None),
            projector_ln_eps=float(pick("projector_ln_eps", default=base.projector_ln_eps)),
            text_hidden_size=pick("text_hidden_size", default=base.text_hidden_size),
        )
        if config.norm_type == "layernorm" and "norm_eps" not in d:
            config = replace(config, norm_eps=1e-5)   # nn.LayerNorm's default
        return config.validate(source)


PRESETS: dict[str, VisionConfig] = {
    # Kimi-K3 (SGLang KimiK3VisionConfig defaults, §5 of the pipeline spec): ≈447 M parameters.
    "kimi-k3": VisionConfig(),
    # Kimi-K2.5 (SGLang kimi_k25.py): LayerNorm (eps 1e-5) everywhere, biases everywhere, bicubic
    # position table, qkv width = hidden width, projector LayerNorm(1152) before the MLP, no post-norm.
    "kimi-k25": VisionConfig(
        name="kimi-k25", hidden_size=1152, num_heads=16, intermediate_size=4304, qkv_hidden_size=1152,
        pos_emb_interpolation="bicubic", norm_type="layernorm", norm_eps=1e-5, attn_bias=True,
        linear_bias=True, patch_embed_bias=True, projector_type="patchmerger",
    ),
    # Same code, small widths: for fast CPU tests. The 8 × 8 table is resized both up and down.
    "tiny": VisionConfig(
        name="tiny", hidden_size=64, num_heads=2, num_layers=2, intermediate_size=128, qkv_hidden_size=64,
        pos_emb_height=8, pos_emb_width=8, text_hidden_size=96,
    ),
}


def get_vision_config(preset: str | VisionConfig) -> VisionConfig:
    """Return a preset's config (``kimi-k3``, ``kimi-k25``, ``tiny``) or the config given."""
    if isinstance(preset, VisionConfig):
        return preset.validate()
    key = str(preset).strip().lower().replace("_", "-")
    if key not in PRESETS:
        raise ConfigError(f"unknown vision preset {preset!r}; expected one of {', '.join(PRESETS)}")
    return PRESETS[key]


# =============================================================================================
# 2. Positions: learned table, time table, 2-D RoPE
# =============================================================================================
def resize_position_table(table: torch.Tensor, height: int, width: int, mode: str) -> torch.Tensor:
    """Return the ``(H0, W0, D)`` table resized to ``(height, width)`` as ``[height·width, D]`` rows
    in raster order (row ``y·width + x``), interpolated in fp32 with ``align_corners=False``.

    SGLang interpolates in the weight dtype; for bf16 weights the two agree up to the final bf16
    rounding (the kernels accumulate in fp32 either way)."""
    if (height, width) == tuple(table.shape[:2]):
        return table.reshape(height * width, -1).float()
    grid = table.float().permute(2, 0, 1).unsqueeze(0)                  # [1, D, H0, W0]
    resized = F.interpolate(grid, size=(height, width), mode=mode, align_corners=False)
    return resized[0].permute(1, 2, 0).reshape(height * width, -1)     # [h·w, D]


def time_table(dim: int, frames: int) -> torch.Tensor:
    """Return the fixed 1-D sin/cos table ``[frames, dim]`` (``[sin(t·ω), cos(t·ω)]``, float32)."""
    omega = np.arange(dim // 2, dtype=np.float32)     # in numpy float32, as the reference computes it
    omega /= dim / 2.0
    omega = 1.0 / 10000**omega
    angles = np.einsum("m,d->md", np.arange(frames, dtype=np.float32), omega)
    return torch.from_numpy(np.concatenate([np.sin(angles), np.cos(angles)], axis=1)).float()


def rope_frequencies(head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    """Return ``f_i = 1 / theta^(4i / head_dim)`` for ``i < head_dim/4`` (float32)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 4)[: head_dim // 4].float() / head_dim))


def rope_angles(height: int, width: int, head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    """Return the rotation angles ``[height·width, head_dim/2]`` of a grid in raster order.

    Rotation pair ``2i`` (head channels ``4i, 4i+1``) turns by ``column · f_i`` and pair ``2i+1``
    (channels ``4i+2, 4i+3``) by ``row · f_i``: the interleaved 2-D RoPE of MoonViT.
    """
    freqs = rope_frequencies(head_dim, theta)                           # [hd/4]
    rows = torch.arange(height, dtype=torch.float32)
    cols = torch.arange(width, dtype=torch.float32)
    col_angles = torch.outer(cols, freqs)                               # [w, hd/4]
    row_angles = torch.outer(rows, freqs)                               # [h, hd/4]
    angles = torch.stack(
        (col_angles.unsqueeze(0).expand(height, -1, -1), row_angles.unsqueeze(1).expand(-1, width, -1)),
        dim=-1,
    )                                                                   # [h, w, hd/4, 2]
    return angles.reshape(height * width, head_dim // 2)


def rope_rotations(angles: torch.Tensor) -> torch.Tensor:
    """Return the unit complex numbers ``cos θ + i·sin θ`` (complex64) of angles ``[N, head_dim/2]``."""
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Return ``x`` ``[N, ..., head_dim]`` with each channel pair ``(2j, 2j+1)``, read as the complex
    number ``x[2j] + i·x[2j+1]``, multiplied by ``rotations[:, j]`` (``[N, head_dim/2]``), in fp32."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    turns = rotations.view(rotations.shape[0], *([1] * (x.dim() - 2)), rotations.shape[1])
    return torch.view_as_real(pairs * turns).flatten(-2).to(x.dtype)


# =============================================================================================
# 3. Attention within each image
# =============================================================================================
ATTENTION_IMPLS = ("auto", "per_image", "packed")


def _varlen_attention() -> Callable | None:
    """Return ``torch.nn.attention.varlen.varlen_attn`` when this torch has it, else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


_VARLEN_WORKS: dict[tuple[str, torch.dtype, int], bool] = {}


def varlen_available(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Return whether the packed varlen flash-attention kernel runs here (probed once per device/dtype)."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16) or _varlen_attention() is None:
        return False
    key = (str(device), dtype, head_dim)
    if key not in _VARLEN_WORKS:
        try:
            q = torch.zeros(8, 1, head_dim, device=device, dtype=dtype)
            cu = torch.tensor([0, 3, 8], dtype=torch.int32, device=device)
            _varlen_attention()(q, q, q, cu, cu, 5, 5)
            _VARLEN_WORKS[key] = True
        except (RuntimeError, TypeError, NotImplementedError):
            _VARLEN_WORKS[key] = False
    return _VARLEN_WORKS[key]


def attention_per_image(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Return ``[N, heads·head_dim]``: one non-causal SDPA call per image span (SGLang's way)."""
    pieces = []
    for start, end in spans:
        piece = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1).unsqueeze(0),
            k[start:end].transpose(0, 1).unsqueeze(0),
            v[start:end].transpose(0, 1).unsqueeze(0),
        )                                                               # [1, H, L, hd]
        pieces.append(piece[0].transpose(0, 1).reshape(end - start, -1))
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def attention_block_diagonal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Return ``[N, heads·head_dim]``: one SDPA call over all rows with a block-diagonal mask."""
    n = q.shape[0]
    image_of_row = torch.empty(n, dtype=torch.int32, device=q.device)
    for index, (start, end) in enumerate(spans):
        image_of_row[start:end] = index
    mask = image_of_row[:, None] == image_of_row[None, :]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
    )
    return out[0].transpose(0, 1).flatten(1)


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_len: int) -> torch.Tensor:
    """Return ``[N, heads·head_dim]``: one packed variable-length flash-attention call (CUDA, bf16/fp16)."""
    varlen_attn = _varlen_attention()
    out = varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens, cu_seqlens, max_len, max_len)
    return out.flatten(1)


# =============================================================================================
# 4. Modules (attribute names = checkpoint names)
# =============================================================================================
def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu": F.gelu,
}


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * weight``, computed in fp32 and cast back (like ``nn.RMSNorm``)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps:.3g}"


def make_norm(config: VisionConfig, dim: int) -> nn.Module:
    """Return the tower's norm layer (RMSNorm for K3, LayerNorm for K2.5)."""
    if config.norm_type == "rmsnorm":
        return RMSNorm(dim, config.norm_eps)
    return nn.LayerNorm(dim, eps=config.norm_eps)


class PositionTable(nn.Module):
    """The learned ``(H0, W0, D)`` table, resized per image; plus the fixed time table for t > 1."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.mode = config.pos_emb_interpolation
        self.frames = config.pos_emb_time
        self.weight = nn.Parameter(torch.empty(config.pos_emb_height, config.pos_emb_width, config.hidden_size))
        self.register_buffer("time_weight", time_table(config.hidden_size, config.pos_emb_time), persistent=False)

    def forward(self, grids: Sequence[Grid], dtype: torch.dtype) -> torch.Tensor:
        """Return the position rows ``[Σ t·h·w, D]`` of the images, in ``dtype``."""
        rows, resized = [], {}
        for t, h, w in grids:
            if (h, w) not in resized:
                resized[(h, w)] = resize_position_table(self.weight, h, w, self.mode).to(dtype)
            table = resized[(h, w)]
            if t > 1:  # every frame gets the table plus its own time row (frame 0 included)
                table = table.unsqueeze(0) + self.time_weight[:t, None, :].to(dtype)
            rows.append(table.reshape(-1, table.shape[-1]))
        return rows[0] if len(rows) == 1 else torch.cat(rows)


class PatchEmbed(nn.Module):
    """Conv2d(3 → D, kernel = stride = patch) on each ``[3, p, p]`` row, plus position rows."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        p = config.patch_size
        self.proj = nn.Conv2d(3, config.hidden_size, kernel_size=p, stride=p, bias=config.patch_embed_bias)
        self.pos_emb = PositionTable(config)

    def forward(self, pixel_rows: torch.Tensor, grids: Sequence[Grid]) -> torch.Tensor:
        # A conv whose kernel covers the whole input is a matmul on the flattened patch.
        weight = self.proj.weight.reshape(self.proj.out_channels, -1)
        x = F.linear(pixel_rows.reshape(pixel_rows.shape[0], -1), weight, self.proj.bias)
        return x + self.pos_emb(grids, x.dtype)


def add_linear(residual: torch.Tensor, x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """Return ``residual + linear(x)``, as one GEMM with the add fused in when there is no bias."""
    if linear.bias is None and not torch.is_grad_enabled():
        return torch.addmm(residual, x, linear.weight.t())
    return residual + linear(x)


class MLP(nn.Module):
    """``fc1(act(fc0(x)))``; very long inputs run in row chunks to bound the hidden activation."""

    chunk_rows = 16384

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.fc0 = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.linear_bias)
        self.fc1 = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.linear_bias)
        self.act = ACTIVATIONS[config.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(self.act(self.fc0(x)))

    def add_to(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Return ``residual + self(x)``, in row chunks for long inputs."""
        if x.shape[0] <= self.chunk_rows:
            return add_linear(residual, self.act(self.fc0(x)), self.fc1)
        return torch.cat([add_linear(r, self.act(self.fc0(piece)), self.fc1)
                          for r, piece in zip(residual.split(self.chunk_rows), x.split(self.chunk_rows))])


@dataclass
class Layout:
    """Where each image's rows sit in a packed batch, with its RoPE angles (built once per grid list)."""

    grids: tuple[Grid, ...]
    spans: tuple[tuple[int, int], ...]
    rotations: torch.Tensor               # [N, head_dim/2] complex64: RoPE turn of each channel pair
    cu_seqlens: torch.Tensor              # [n+1] int32, on the device
    max_len: int
    attn_impl: str                        # "per_image", "packed_varlen" or "packed_mask"


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: attention within each image, then the MLP."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.norm0 = make_norm(config, config.hidden_size)
        self.norm1 = make_norm(config, config.hidden_size)
        self.wqkv = nn.Linear(config.hidden_size, 3 * config.qkv_hidden_size, bias=config.attn_bias)
        self.wo = nn.Linear(config.qkv_hidden_size, config.hidden_size, bias=config.attn_bias)
        self.mlp = MLP(config)

    def attention(self, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        """Return ``attention(rope(q), rope(k), v)`` ``[N, heads·head_dim]``, confined to each image."""
        qkv = self.wqkv(x).view(x.shape[0], 3, self.num_heads, self.head_dim)
        q, k = apply_rope(qkv[:, :2], layout.rotations).unbind(1)     # q and k turned together, in fp32
        v = qkv[:, 2]
        if layout.attn_impl == "packed_varlen":
            return attention_varlen(q, k, v, layout.cu_seqlens, layout.max_len)
        if layout.attn_impl == "packed_mask":
            return attention_block_diagonal(q, k, v, layout.spans)
        return attention_per_image(q, k, v, layout.spans)

    def forward(self, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        x = add_linear(x, self.attention(self.norm0(x), layout), self.wo)   # x + wo(attention(...))
        return self.mlp.add_to(x, self.norm1(x))                            # x + fc1(gelu(fc0(...)))


class Encoder(nn.Module):
    """The stack of blocks and the final norm."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.num_layers))
        self.final_layernorm = make_norm(config, config.hidden_size)

    def forward(self, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, layout)
        return self.final_layernorm(x)


class VisionTower(nn.Module):
    """MoonViT3d: patch embedding, encoder blocks, and the 2×2 merge with temporal mean."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.merge = config.merge_kernel_size
        self.patch_embed = PatchEmbed(config)
        self.encoder = Encoder(config)

    def merge_patches(self, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        """Return ``[Σ h·w/k², k², D]``: per image ``view(t, h/k, k, w/k, k, D)``, mean over t,
        groups in raster order of the merged grid and, inside a group, patches in raster order."""
        k = self.merge
        groups = []
        for (t, h, w), (start, end) in zip(layout.grids, layout.spans):
            v = x[start:end].view(t, h // k, k, w // k, k, -1).mean(dim=0)
            groups.append(v.permute(0, 2, 1, 3, 4).reshape((h // k) * (w // k), k * k, -1))
        return groups[0] if len(groups) == 1 else torch.cat(groups)


class Projector(nn.Module):
    """``patchmergerv2`` (K3): Linear → GELU → Linear → RMSNorm; ``patchmerger`` (K2.5):
    LayerNorm on each patch → Linear → GELU → Linear."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        width = config.merged_width
        bias = config.projector_type == "patchmerger"
        if config.projector_type == "patchmerger":
            self.pre_norm = nn.LayerNorm(config.hidden_size, eps=config.projector_ln_eps)
        self.proj = nn.Sequential(
            nn.Linear(width, width, bias=bias), nn.GELU(), nn.Linear(width, config.text_hidden_size, bias=bias)
        )
        if config.projector_type == "patchmergerv2":
            self.post_norm = RMSNorm(config.text_hidden_size, config.projector_ln_eps)

    def forward(self, merged: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "pre_norm"):
            merged = self.pre_norm(merged)
        x = self.proj(merged.reshape(merged.shape[0], -1))
        return self.post_norm(x) if hasattr(self, "post_norm") else x


# =============================================================================================
# 5. Outputs, loading report, input checks
# =============================================================================================
@dataclass
class EncoderOutput:
    """Features of a batch and where each image's rows went.

    ``features`` is ``[Σ h·w/4, out_dim]``; image ``i`` owns ``features[token_spans[i][0]:token_spans[i][1]]``
    (one row per ``<|media_pad|>`` token) and ``pixel_values[row_spans[i][0]:row_spans[i][1]]``.
    With ``return_intermediates=True`` also: ``patch_embeddings`` ``[N, D]`` (patch embed + positions),
    ``pre_merge`` ``[N, D]`` (after the final norm), ``merged`` ``[Σ h·w/4, 4, D]`` and ``timings`` (ms).
    """

    features: torch.Tensor
    token_spans: list[tuple[int, int]]
    grid_thws: torch.Tensor
    row_spans: list[tuple[int, int]] = field(default_factory=list)
    patch_embeddings: torch.Tensor | None = None
    pre_merge: torch.Tensor | None = None
    merged: torch.Tensor | None = None
    timings: dict[str, float] | None = None

    def __len__(self) -> int:
        return len(self.token_spans)

    def image_features(self, index: int) -> torch.Tensor:
        """Return the feature rows of image ``index``."""
        start, end = self.token_spans[index]
        return self.features[start:end]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready summary (shapes and spans, no tensors)."""
        return {
            "features_shape": list(self.features.shape),
            "dtype": str(self.features.dtype).replace("torch.", ""),
            "grid_thws": self.grid_thws.tolist(),
            "row_spans": [list(s) for s in self.row_spans],
            "token_spans": [list(s) for s in self.token_spans],
            "timings_ms": dict(self.timings) if self.timings else None,
        }


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
        return (f"{len(self.loaded)} tensors from {len(self.shards_opened)} shard(s) "
                f"({self.shards_skipped} other shard(s) left unopened); "
                f"{len(self.missing)} missing, {len(self.unexpected)} unexpected")


def _grid_text(grid: Grid) -> str:
    return "×".join(str(v) for v in grid)


def normalise_grids(grid_thws: Any) -> list[Grid]:
    """Return ``grid_thws`` (tensor, array or list of ``(t, h, w)``) as a list of int triples."""
    if isinstance(grid_thws, torch.Tensor):
        if grid_thws.ndim != 2 or grid_thws.shape[1] != 3:
            raise RowCountError(f"grid_thws has shape {tuple(grid_thws.shape)}; expected [n_images, 3] rows of "
                                "(t, h, w) as returned by the processor")
        values = grid_thws.tolist()
    else:
        try:
            values = [list(row) for row in grid_thws]
        except TypeError:
            values = [[]]
        if any(len(row) != 3 for row in values):
            raise RowCountError(f"grid_thws is {grid_thws!r}; its rows must be (t, h, w) triples, as returned "
                                "by the processor")
    if not values:
        raise RowCountError("grid_thws is empty; expected one (t, h, w) row per image")
    try:
        return [(int(t), int(h), int(w)) for t, h, w in values]
    except (TypeError, ValueError) as exc:
        raise RowCountError(f"grid_thws is {grid_thws!r}; expected integer (t, h, w) rows, as returned by "
                            "the processor") from exc


def check_grids(grids: Sequence[Grid], config: VisionConfig) -> None:
    """Raise RowCountError naming the first grid the tower cannot take (sizes, evenness, limits)."""
    k, limit = config.merge_kernel_size, config.rope_max_size
    for i, (t, h, w) in enumerate(grids):
        grid = _grid_text((t, h, w))
        if min(t, h, w) < 1:
            raise RowCountError(f"image {i} has grid {grid}; t, h and w must all be at least 1")
        if h % k or w % k:
            raise RowCountError(
                f"image {i} has grid {grid}; h and w must be multiples of {k} for the {k}×{k} merge "
                f"(the processor pads each side to a multiple of {k * config.patch_size} px)")
        if h > limit or w > limit:
            raise RowCountError(
                f"image {i} has grid {grid}; h and w must be at most {limit} (the rotary table is "
                f"{limit}×{limit}; the processor's patch_limit_on_one_side keeps grids within it)")
        if t > config.pos_emb_time:
            raise RowCountError(
                f"image {i} has grid {grid}; t must be at most {config.pos_emb_time} "
                f"(the time table has {config.pos_emb_time} frames)")


def check_rows(pixel_values: torch.Tensor, grids: Sequence[Grid], patch_size: int) -> None:
    """Raise if ``pixel_values`` is not ``[Σ t·h·w, 3, p, p]``, naming the first image that does not fit."""
    p = patch_size
    if not isinstance(pixel_values, torch.Tensor):
        raise UnsupportedImageError(
            f"pixel_values is a {type(pixel_values).__name__}; expected a torch.Tensor [N, 3, {p}, {p}] "
            "from the processor")
    shape = tuple(pixel_values.shape)
    if not (shape[1:] == (3, p, p) or (len(shape) == 2 and shape[1] == 3 * p * p)):
        raise UnsupportedImageError(
            f"pixel_values has shape {shape}; expected [N, 3, {p}, {p}] patch rows (or [N, {3 * p * p}]) "
            "from the processor")
    if not pixel_values.is_floating_point():
        raise UnsupportedImageError(
            f"pixel_values has dtype {pixel_values.dtype}; expected normalised float rows from the processor")
    have = shape[0]
    need = sum(t * h * w for t, h, w in grids)
    if have == need:
        return
    head = f"pixel_values has {have} rows but grid_thws needs {need} (Σ t·h·w)"
    start = 0
    for i, grid in enumerate(grids):
        end = start + grid[0] * grid[1] * grid[2]
        if end > have:
            raise RowCountError(
                f"{head}; image {i} (grid {_grid_text(grid)}) needs rows [{start}, {end}) and only {have} exist; "
                "pass the pixel_values and grid_thws of the same processor output")
        start = end
    last = len(grids) - 1
    raise RowCountError(
        f"{head}; the last image (image {last}, grid {_grid_text(grids[last])}) ends at row {need} and "
        f"{have - need} extra rows follow it; pass the pixel_values and grid_thws of the same processor output")


def _spans(counts: Iterable[int]) -> list[tuple[int, int]]:
    """Return the consecutive ``[start, end)`` spans of blocks of these sizes, starting at 0."""
    spans, start = [], 0
    for count in counts:
        spans.append((start, start + count))
        start += count
    return spans


def _chunks(patches: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """Return ``[first, last)`` image ranges whose rows add up to at most ``limit`` (one image at least)."""
    chunks, first, total = [], 0, 0
    for i, count in enumerate(patches):
        if i > first and total + count > limit:
            chunks.append((first, i))
            first, total = i, 0
        total += count
    chunks.append((first, len(patches)))
    return chunks


# =============================================================================================
# 6. Dtypes, weights, checkpoint files
# =============================================================================================
_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32,
           "fp16": torch.float16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Return the weight dtype: the one asked for, else bf16 on CUDA and fp32 on CPU."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().replace("torch.", "")
    if key not in _DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported; expected bf16, fp16 or fp32")
    return _DTYPES[key]


def init_weights(module: nn.Module, generator: torch.Generator, std: float = 0.02) -> None:
    """Fill every parameter: norm weights 1, biases 0, everything else normal(0, std)."""
    with torch.no_grad():
        for layer in module.modules():
            is_norm = isinstance(layer, (RMSNorm, nn.LayerNorm))
            for name, param in layer.named_parameters(recurse=False):
                if is_norm and name == "weight":
                    param.fill_(1.0)
                elif name == "bias":
                    param.zero_()
                else:
                    param.normal_(0.0, std, generator=generator)


def _read_vision_config(folder: Path) -> tuple[dict[str, Any], str | None]:
    """Return ``(vision_config, model_type)`` from ``folder/config.json``; a missing
    ``text_hidden_size`` is taken from ``text_config.hidden_size``, as SGLang does."""
    file = folder / "config.json"
    if not file.is_file():
        raise CheckpointError(
            f"{file} does not exist; expected a Kimi checkpoint folder holding config.json, "
            "model.safetensors.index.json and its shards (or use VisionEncoder.random() without weights)")
    vision = read_vision_config(folder)   # validates the JSON and normalises merge_kernel_size
    data = json.loads(file.read_text(encoding="utf-8"))
    text = data.get("text_config")
    if vision.get("text_hidden_size") is None and isinstance(text, dict) and text.get("hidden_size"):
        vision["text_hidden_size"] = text["hidden_size"]
    return vision, data.get("model_type")


def _read_weight_map(folder: Path) -> dict[str, str]:
    """Return ``{tensor name: shard file}`` from ``model.safetensors.index.json`` (or one ``model.safetensors``)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        single = folder / "model.safetensors"
        if single.is_file():
            from safetensors import safe_open
            with safe_open(str(single), framework="pt", device="cpu") as f:
                return {key: single.name for key in f.keys()}
        raise CheckpointError(
            f"{index} does not exist; expected the sharded checkpoint's index next to config.json "
            "(download model.safetensors.index.json with the shards, or point at the right folder)")
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{index}: not valid JSON ({exc.msg} at line {exc.lineno}); re-download it") from exc
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: has no weight_map object; expected {{'weight_map': {{name: shard}}}}")
    return weight_map


VISION_PREFIXES = ("vision_tower.", "mm_projector.")


# =============================================================================================
# 7. The encoder
# =============================================================================================
class VisionEncoder(nn.Module):
    """Vision tower + projector. ``state_dict()`` keys are the checkpoint's own names.

    Build with :meth:`random` (no weights needed) or :meth:`from_checkpoint`; run with :meth:`encode`.
    ``attn_impl`` picks the attention path: ``"per_image"`` (one SDPA call per image per layer, as
    SGLang runs it), ``"packed"`` (one varlen FlashAttention call over all images on CUDA; a
    block-diagonal mask elsewhere) or ``"auto"`` (per image: SDPA then picks its fastest kernel for
    each image). ``cuda_graphs`` (``"auto"``, True, False) replays a CUDA graph captured the second
    time a grid list is seen (up to ``graph_max_patches`` rows), which removes the kernel-launch
    overhead that dominates small images; ``"auto"`` and True only act on CUDA.
    """

    graph_max_patches = 16384     # larger batches are compute-bound: graphs buy nothing there
    graph_device_types = ("cuda",)
    graph_cache_size = 8
    graph_hits_size = 256         # grid lists whose sightings are counted
    chunk_patches = 131072        # images are encoded in groups of at most this many rows

    def __init__(self, config: VisionConfig | str = "kimi-k3"):
        super().__init__()
        self.config = get_vision_config(config)
        self.vision_tower = VisionTower(self.config)
        self.mm_projector = Projector(self.config)
        self.attn_impl = "auto"
        self.cuda_graphs: bool | str = "auto"
        self.load_report: LoadReport | None = None
        self._layouts: OrderedDict[tuple, Layout] = OrderedDict()
        self._graphs: OrderedDict[tuple, Any] = OrderedDict()
        self._graph_hits: dict[tuple, int] = {}
        self._graph_pool = None

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def _empty(cls, config: VisionConfig, device: torch.device, dtype: torch.dtype) -> "VisionEncoder":
        with torch.device("meta"):
            model = cls(config).to(dtype)
        model = model.to_empty(device=device)
        model.vision_tower.patch_embed.pos_emb.time_weight = time_table(config.hidden_size, config.pos_emb_time).to(device)
        return model.eval().requires_grad_(False)

    @classmethod
    def random(cls, preset: str | VisionConfig = "kimi-k3", seed: int = 0, device: str | torch.device = "auto",
               dtype: str | torch.dtype | None = None) -> "VisionEncoder":
        """Return an encoder with random weights (normal(0, 0.02), norms 1), drawn on ``device``
        from ``seed`` (the same seed gives the same weights on the same kind of device)."""
        config = get_vision_config(preset)
        device = resolve_device(device)
        model = cls._empty(config, device, resolve_dtype(dtype, device))
        generator = torch.Generator(device=device).manual_seed(int(seed))
        init_weights(model, generator)
        return model

    @classmethod
    def from_checkpoint(cls, folder: str | Path, device: str | torch.device = "auto",
                        dtype: str | torch.dtype | None = None, *, strict: bool = False) -> "VisionEncoder":
        """Return the encoder of a local checkpoint folder, reading only its vision tensors.

        Reads ``config.json``'s ``vision_config``, then ``model.safetensors.index.json``, and opens
        (with ``safetensors.safe_open``) only the shards that hold ``vision_tower.*`` or
        ``mm_projector.*`` tensors — the language model's shards are never opened. Shapes are checked
        before any data is read. ``.load_report`` lists loaded, missing and unexpected keys and the
        shards opened; with ``strict=True`` a missing or unexpected key raises CheckpointError.
        Parameters the checkpoint lacks keep a seed-0 random initialisation.
        """
        from safetensors import safe_open

        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"checkpoint folder {folder} does not exist; pass the folder holding config.json")
        vision_config, model_type = _read_vision_config(folder)
        config = VisionConfig.from_dict(vision_config, model_type=model_type, source=str(folder / "config.json"))
        weight_map = _read_weight_map(folder)
        device = resolve_device(device)
        model = cls._empty(config, device, resolve_dtype(dtype, device))
        params = dict(model.state_dict(keep_vars=True))

        wanted = {k: v for k, v in weight_map.items() if k.startswith(VISION_PREFIXES)}
        report = LoadReport(folder=str(folder))
        report.missing = sorted(k for k in params if k not in wanted)
        report.unexpected = sorted(k for k in wanted if k not in params)
        if report.missing:   # what the checkpoint lacks keeps the seed-0 random values
            init_weights(model, torch.Generator(device=device).manual_seed(0))
        if strict and (report.missing or report.unexpected):
            raise CheckpointError(
                f"{folder / 'model.safetensors.index.json'}: {len(report.missing)} missing vision key(s) "
                f"(first: {report.missing[:1]}) and {len(report.unexpected)} unexpected (first: "
                f"{report.unexpected[:1]}); the checkpoint does not match vision config {config.name!r}")
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
                        f"{by_shard[shard][0]} to it; download the missing shard")
                report.shards_opened.append(shard)
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    available = set(f.keys())
                    for key in sorted(by_shard[shard]):
                        if key not in available:
                            raise CheckpointError(
                                f"{path}: has no tensor {key} although model.safetensors.index.json says "
                                "it does; the index and the shard disagree (re-download both)")
                        target = params[key]
                        shape = tuple(f.get_slice(key).get_shape())
                        if shape != tuple(target.shape):
                            raise CheckpointError(
                                f"{path}: tensor {key} has shape {list(shape)} but vision config "
                                f"{config.name!r} expects {list(target.shape)}; the config.json and the "
                                "shards come from different models")
                        target.copy_(f.get_tensor(key))
                        report.loaded.append(key)
        report.loaded.sort()
        model.load_report = report
        return model

    # --- properties ---------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Return the device of the weights."""
        return self.vision_tower.patch_embed.proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """Return the dtype of the weights."""
        return self.vision_tower.patch_embed.proj.weight.dtype

    def num_parameters(self) -> int:
        """Return the number of parameters."""
        return sum(p.numel() for p in self.parameters())

    def clear_cache(self) -> None:
        """Drop cached layouts and CUDA graphs (call after replacing parameter tensors)."""
        self._layouts.clear()
        self._graphs.clear()
        self._graph_hits.clear()

    # --- layout -------------------------------------------------------------------------------
    def resolve_attn_impl(self, impl: str | None = None) -> str:
        """Return the concrete attention path (``per_image``, ``packed_varlen`` or ``packed_mask``) that
        ``impl`` (default: ``self.attn_impl``) means on this encoder's device and dtype."""
        impl = impl or self.attn_impl
        if impl not in ATTENTION_IMPLS:
            raise ConfigError(f"attn_impl {impl!r} is not known; expected one of {', '.join(ATTENTION_IMPLS)}")
        if impl == "packed":
            varlen_ok = varlen_available(self.device, self.dtype, self.config.head_dim)
            return "packed_varlen" if varlen_ok else "packed_mask"
        # "auto": per-image SDPA lets torch pick its fastest kernel (cuDNN / flash) for each image,
        # whereas the packed varlen call is always FlashAttention-2. Packing saves only launches,
        # and CUDA graphs remove those for the small batches where they matter.
        return "per_image"

    def layout(self, grids: Sequence[Grid], attn_impl: str | None = None) -> Layout:
        """Return the (cached) row spans, RoPE angles and cu_seqlens of a list of grids."""
        grids = tuple(tuple(g) for g in grids)
        impl = self.resolve_attn_impl(attn_impl)
        key = (grids, impl, str(self.device))
        hit = self._layouts.get(key)
        if hit is not None:
            self._layouts.move_to_end(key)
            return hit
        spans, angles = _spans(t * h * w for t, h, w in grids), []
        per_hw: dict[tuple[int, int], torch.Tensor] = {}
        for t, h, w in grids:
            if (h, w) not in per_hw:
                per_hw[(h, w)] = rope_angles(h, w, self.config.head_dim, self.config.rope_theta)
            angles.append(per_hw[(h, w)].repeat(t, 1))
        angle = (angles[0] if len(angles) == 1 else torch.cat(angles)).to(self.device)
        bounds = [0] + [end for _, end in spans]
        layout = Layout(
            grids=grids, spans=tuple(spans), rotations=rope_rotations(angle),
            cu_seqlens=torch.tensor(bounds, dtype=torch.int32, device=self.device),
            max_len=max(end - begin for begin, end in spans), attn_impl=impl,
        )
        self._layouts[key] = layout
        while len(self._layouts) > 32:
            self._layouts.popitem(last=False)
        return layout

    # --- forward ------------------------------------------------------------------------------
    def forward(self, pixel_rows: torch.Tensor, layout: Layout) -> torch.Tensor:
        """Return the projected features ``[Σ h·w/4, out_dim]`` of already-checked rows."""
        x = self.vision_tower.patch_embed(pixel_rows, layout.grids)
        x = self.vision_tower.encoder(x, layout)
        return self.mm_projector(self.vision_tower.merge_patches(x, layout))

    def _forward_with_intermediates(self, pixel_rows: torch.Tensor, layout: Layout,
                                    timings: dict[str, float]) -> dict[str, torch.Tensor]:
        def tick(stage: str, started: float) -> float:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            now = time.perf_counter()
            timings[stage] = timings.get(stage, 0.0) + (now - started) * 1e3
            return now

        started = time.perf_counter()
        patch = self.vision_tower.patch_embed(pixel_rows, layout.grids)
        started = tick("patch_embed_ms", started)
        pre_merge = self.vision_tower.encoder(patch, layout)
        started = tick("blocks_ms", started)
        merged = self.vision_tower.merge_patches(pre_merge, layout)
        started = tick("merge_ms", started)
        features = self.mm_projector(merged)
        tick("projector_ms", started)
        return {"features": features, "patch_embeddings": patch, "pre_merge": pre_merge, "merged": merged}

    def _use_graph(self, layout: Layout, rows: int) -> bool:
        if self.device.type not in self.graph_device_types or self.cuda_graphs is False or rows > self.graph_max_patches:
            return False
        if self.cuda_graphs is True:
            return True
        key = (layout.grids, layout.attn_impl)
        self._graph_hits[key] = self._graph_hits.pop(key, 0) + 1      # most recent last
        while len(self._graph_hits) > self.graph_hits_size:           # forget grid lists not seen lately
            del self._graph_hits[next(iter(self._graph_hits))]
        return self._graph_hits[key] >= 2 or key in self._graphs   # capture on the second sighting

    def _forward_graphed(self, pixel_rows: torch.Tensor, layout: Layout) -> torch.Tensor:
        key = (layout.grids, layout.attn_impl)
        entry = self._graphs.get(key)
        if entry is None:
            try:
                entry = self._capture(pixel_rows, layout)
            except RuntimeError as exc:  # capture unsupported here: remember, and run eagerly
                warnings.warn(f"CUDA graph capture failed ({exc}); running this grid list eagerly", stacklevel=3)
                entry = False
            self._graphs[key] = entry
            while len(self._graphs) > self.graph_cache_size:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        if entry is False:
            return self.forward(pixel_rows, layout)
        graph, static_in, static_out = entry
        static_in.copy_(pixel_rows)
        graph.replay()
        return static_out.clone()

    def _capture(self, pixel_rows: torch.Tensor, layout: Layout) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Return ``(graph, static input, static output)`` of one forward pass captured on CUDA."""
        static_in = pixel_rows.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward(static_in, layout)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._graph_pool is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._graph_pool):
            static_out = self.forward(static_in, layout)
        return graph, static_in, static_out

    def encode(self, pixel_values: torch.Tensor, grid_thws: Any, *, return_intermediates: bool = False,
               progress: bool | None = None) -> EncoderOutput:
        """Return the features of packed ``pixel_values`` ``[Σ t·h·w, 3, 14, 14]`` for ``grid_thws``.

        Checks first that every grid is valid and that the rows match ``Σ t·h·w`` (RowCountError
        names the first image that does not fit, with both counts). Images are independent: each
        attends only to its own rows. ``progress=None`` shows a bar for more than 8 images when
        stderr is a terminal.
        """
        grids = normalise_grids(grid_thws)
        check_grids(grids, self.config)
        check_rows(pixel_values, grids, self.config.patch_size)
        rows = pixel_values.reshape(pixel_values.shape[0], -1)
        patches = [t * h * w for t, h, w in grids]
        tokens = [h * w // self.config.merge_kernel_size**2 for _, h, w in grids]
        row_spans = _spans(patches)
        token_spans = _spans(tokens)

        show = progress if progress is not None else (len(grids) > 8 and sys.stderr.isatty())
        bar = None
        if show:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(grids), unit="image", desc="encode", file=sys.stderr)
        timings: dict[str, float] | None = {} if return_intermediates else None
        parts: dict[str, list[torch.Tensor]] = {}
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                limit = self.chunk_patches if bar is None else min(self.chunk_patches, max(1, sum(patches) // 20))
                for first, last in _chunks(patches, limit):   # with a bar: about 20 steps
                    chunk_grids = grids[first:last]
                    r0, r1 = row_spans[first][0], row_spans[last - 1][1]
                    chunk = rows[r0:r1].to(device=self.device, dtype=self.dtype, non_blocking=True)
                    layout = self.layout(chunk_grids)
                    if return_intermediates:
                        out = self._forward_with_intermediates(chunk, layout, timings)
                    elif self._use_graph(layout, r1 - r0):
                        out = {"features": self._forward_graphed(chunk, layout)}
                    else:
                        out = {"features": self.forward(chunk, layout)}
                    for name, value in out.items():
                        parts.setdefault(name, []).append(value)
                    if bar is not None:
                        bar.update(last - first)
        finally:
            if bar is not None:
                bar.close()
        joined = {name: (values[0] if len(values) == 1 else torch.cat(values)) for name, values in parts.items()}
        if timings is not None:
            timings["total_ms"] = (time.perf_counter() - started) * 1e3
        return EncoderOutput(
            features=joined["features"],
            token_spans=token_spans,
            grid_thws=torch.tensor(grids, dtype=torch.int64),
            row_spans=row_spans,
            patch_embeddings=joined.get("patch_embeddings"),
            pre_merge=joined.get("pre_merge"),
            merged=joined.get("merged"),
            timings=timings,
        )


def encode(encoder: VisionEncoder, pixel_values: torch.Tensor, grid_thws: Any, *,
           return_intermediates: bool = False, progress: bool | None = None) -> EncoderOutput:
    """Return ``encoder.encode(pixel_values, grid_thws, ...)``."""
    return encoder.encode(pixel_values, grid_thws, return_intermediates=return_intermediates, progress=progress)


def count_parameters(config: VisionConfig | str) -> int:
    """Return the parameter count of a config without allocating any weight (built on ``meta``)."""
    with torch.device("meta"):
        model = VisionEncoder(config)
    return model.num_parameters()


def matmul_flops(grids: Sequence[Grid], config: VisionConfig | str) -> int:
    """Return the matmul FLOPs (2 per multiply-add) of one forward pass over ``grids``: patch embed,
    qkv, attention ``QKᵀ`` and ``PV`` (quadratic in each image's own length), wo, MLP, projector."""
    c = get_vision_config(config)
    n = sum(t * h * w for t, h, w in grids)
    squares = sum((t * h * w) ** 2 for t, h, w in grids)
    tokens = sum(h * w for _, h, w in grids) // c.merge_kernel_size**2
    d, q = c.hidden_size, c.qkv_hidden_size
    per_layer = 2 * n * d * 3 * q + 4 * squares * q + 2 * n * q * d + 4 * n * d * c.intermediate_size
    patch = 2 * n * 3 * c.patch_size**2 * d
    projector = 2 * tokens * c.merged_width * (c.merged_width + c.text_hidden_size)
    return patch + c.num_layers * per_layer + projector


__all__ = [
    "ATTENTION_IMPLS", "EncoderOutput", "LoadReport", "PRESETS", "VisionConfig", "VisionEncoder",
    "apply_rope", "check_grids", "check_rows", "count_parameters", "encode", "get_vision_config",
    "matmul_flops", "normalise_grids", "resize_position_table", "resolve_device", "resolve_dtype",
    "rope_angles", "rope_frequencies", "rope_rotations", "time_table",
]
