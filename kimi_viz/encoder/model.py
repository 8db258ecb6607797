"""The Kimi-K3 vision encoder: MoonViT3d tower + ``patchmergerv2`` projector, as one nn.Module.

Read it top to bottom:

1. Position helpers: the learned 2-D table resized to each grid, the sin/cos time table, and the
   2-D rotary embedding (RoPE), all plain functions so they can be read and tested on their own.
2. Attention confined to each image: one SDPA call per image, a block-diagonal mask, or one
   packed varlen FlashAttention call; :class:`AttentionLayout` says where each image's rows are.
3. The modules, named exactly like the checkpoint's tensors::

       vision_tower.patch_embed.proj.weight              Conv2d(3 -> D, k=14, s=14)
       vision_tower.patch_embed.pos_emb.weight           (64, 64, D) learned table
       vision_tower.encoder.blocks.{i}.norm0 / norm1     RMSNorm (K3) or LayerNorm (K2.5)
       vision_tower.encoder.blocks.{i}.wqkv / wo         attention projections
       vision_tower.encoder.blocks.{i}.mlp.fc0 / fc1     GELU(tanh) MLP
       vision_tower.encoder.final_layernorm
       mm_projector.proj.0 / proj.2                      Linear -> GELU -> Linear
       mm_projector.post_norm (K3) / pre_norm (K2.5)

4. :class:`VisionModel`: tower + projector, ``forward(pixel_rows, layout)``; random
   initialisation; parameter and FLOP counts.

Around it, not in it: the shapes live in :mod:`.config` (:class:`VisionConfig`, the presets);
reading a checkpoint in :mod:`.checkpoint`; and :mod:`.runtime` holds
:class:`~kimi_viz.encoder.runtime.VisionEncoder`, the class to use (``random()``,
``from_checkpoint()``, ``encode()`` with its input checks, chunking, layout cache and CUDA graphs).

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..preprocess.layout import spans_of
from .config import Grid, VisionConfig, get_vision_config


# =============================================================================================
# 1. Positions: learned table, time table, 2-D RoPE
# =============================================================================================
def resize_position_table(table: torch.Tensor, height: int, width: int, mode: str) -> torch.Tensor:
    """Return the ``(H0, W0, D)`` table resized to ``(height, width)`` as ``[height·width, D]`` rows
    in raster order (row ``y·width + x``), interpolated in fp32 with ``align_corners=False``.

    SGLang interpolates in the weight dtype; for bf16 weights the two agree up to the final bf16
    rounding (the kernels accumulate in fp32 either way)."""
    if (height, width) == tuple(table.shape[:2]):
        return table.reshape(height * width, -1).float()
    grid = table.float().permute(2, 0, 1).unsqueeze(0)  # [1, D, H0, W0]
    resized = F.interpolate(grid, size=(height, width), mode=mode, align_corners=False)
    return resized[0].permute(1, 2, 0).reshape(height * width, -1)  # [h·w, D]


def time_table(dim: int, frames: int) -> torch.Tensor:
    """Return the fixed 1-D sin/cos table ``[frames, dim]`` (``[sin(t·ω), cos(t·ω)]``, float32)."""
    omega = np.arange(dim // 2, dtype=np.float32)  # in numpy float32, as the reference computes it
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
    freqs = rope_frequencies(head_dim, theta)  # [hd/4]
    rows = torch.arange(height, dtype=torch.float32)
    cols = torch.arange(width, dtype=torch.float32)
    col_angles = torch.outer(cols, freqs)  # [w, hd/4]
    row_angles = torch.outer(rows, freqs)  # [h, hd/4]
    angles = torch.stack(
        (col_angles.unsqueeze(0).expand(height, -1, -1), row_angles.unsqueeze(1).expand(-1, width, -1)),
        dim=-1,
    )  # [h, w, hd/4, 2]
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
# 2. Attention within each image
# =============================================================================================
def varlen_kernel() -> Callable | None:
    """Return ``torch.nn.attention.varlen.varlen_attn`` when this torch has it, else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def attention_per_image(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: Sequence[tuple[int, int]]
) -> torch.Tensor:
    """Return ``[N, heads·head_dim]``: one non-causal SDPA call per image span (SGLang's way)."""
    pieces = []
    for start, end in spans:
        piece = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1).unsqueeze(0),
            k[start:end].transpose(0, 1).unsqueeze(0),
            v[start:end].transpose(0, 1).unsqueeze(0),
        )  # [1, H, L, hd]
        pieces.append(piece[0].transpose(0, 1).reshape(end - start, -1))
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def attention_block_diagonal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: Sequence[tuple[int, int]]
) -> torch.Tensor:
    """Return ``[N, heads·head_dim]``: one SDPA call over all rows with a block-diagonal mask."""
    n = q.shape[0]
    image_of_row = torch.empty(n, dtype=torch.int32, device=q.device)
    for index, (start, end) in enumerate(spans):
        image_of_row[start:end] = index
    mask = image_of_row[:, None] == image_of_row[None, :]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
    )
    return out[0].transpose(0, 1).flatten(1)


def attention_varlen(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int
) -> torch.Tensor:
    """Return ``[N, heads·head_dim]``: one packed variable-length flash-attention call (CUDA, bf16/fp16)."""
    varlen_attn = varlen_kernel()
    assert varlen_attn is not None, "this torch has no varlen_attn: packed_varlen runs only where varlen_available()"
    out = varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens, cu_seqlens, max_len, max_len)
    return out.flatten(1)


@dataclass
class AttentionLayout:
    """Where each image's rows sit in a packed batch, with its RoPE turns (built once per grid list).

    The blocks read it; :meth:`build` makes one (``VisionEncoder.layout`` caches them).
    """

    grids: tuple[Grid, ...]
    spans: tuple[tuple[int, int], ...]
    rotations: torch.Tensor  # [N, head_dim/2] complex64: RoPE turn of each channel pair
    cu_seqlens: torch.Tensor  # [n+1] int32, on the device
    max_len: int
    attn_impl: str  # "per_image", "packed_varlen" or "packed_mask"

    @classmethod
    def build(
        cls, grids: Sequence[Grid], config: VisionConfig, device: torch.device, attn_impl: str = "per_image"
    ) -> AttentionLayout:
        """Return the row spans, RoPE rotations and cu_seqlens of images with these grids, in order."""
        grids = tuple((t, h, w) for t, h, w in grids)
        spans, angles = spans_of(t * h * w for t, h, w in grids), []
        per_hw: dict[tuple[int, int], torch.Tensor] = {}
        for t, h, w in grids:
            if (h, w) not in per_hw:
                per_hw[(h, w)] = rope_angles(h, w, config.head_dim, config.rope_theta)
            angles.append(per_hw[(h, w)].repeat(t, 1))
        angle = (angles[0] if len(angles) == 1 else torch.cat(angles)).to(device)
        bounds = [0] + [end for _, end in spans]
        return cls(
            grids=grids,
            spans=tuple(spans),
            rotations=rope_rotations(angle),
            cu_seqlens=torch.tensor(bounds, dtype=torch.int32, device=device),
            max_len=max(end - begin for begin, end in spans),
            attn_impl=attn_impl,
        )


# =============================================================================================
# 3. Modules (attribute names = checkpoint names)
# =============================================================================================
def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


# Keys: config.ACTIVATION_NAMES (what VisionConfig.validate accepts).
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

    time_weight: torch.Tensor  # a non-persistent buffer (registered in __init__)

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
        return torch.cat(
            [
                add_linear(r, self.act(self.fc0(piece)), self.fc1)
                for r, piece in zip(residual.split(self.chunk_rows), x.split(self.chunk_rows))
            ]
        )


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

    def attention(self, x: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
        """Return ``attention(rope(q), rope(k), v)`` ``[N, heads·head_dim]``, confined to each image."""
        qkv = self.wqkv(x).view(x.shape[0], 3, self.num_heads, self.head_dim)
        q, k = apply_rope(qkv[:, :2], layout.rotations).unbind(1)  # q and k turned together, in fp32
        v = qkv[:, 2]
        if layout.attn_impl == "packed_varlen":
            return attention_varlen(q, k, v, layout.cu_seqlens, layout.max_len)
        if layout.attn_impl == "packed_mask":
            return attention_block_diagonal(q, k, v, layout.spans)
        return attention_per_image(q, k, v, layout.spans)

    def forward(self, x: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
        x = add_linear(x, self.attention(self.norm0(x), layout), self.wo)  # x + wo(attention(...))
        return self.mlp.add_to(x, self.norm1(x))  # x + fc1(gelu(fc0(...)))


class Encoder(nn.Module):
    """The stack of blocks and the final norm."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.num_layers))
        self.final_layernorm = make_norm(config, config.hidden_size)

    def forward(self, x: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
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

    def merge_patches(self, x: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
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
# 4. Tower + projector
# =============================================================================================
class VisionModel(nn.Module):
    """Vision tower + projector. ``state_dict()`` keys are the checkpoint's own names.

    ``forward(pixel_rows, layout)`` maps already-checked rows ``[Σ t·h·w, 3·14·14]`` to features
    ``[Σ h·w/4, out_dim]``. To run images, use :class:`~kimi_viz.encoder.runtime.VisionEncoder`,
    which is this module plus the checks, caches and loading around it.
    """

    def __init__(self, config: VisionConfig | str = "kimi-k3"):
        super().__init__()
        self.config = get_vision_config(config)
        self.vision_tower = VisionTower(self.config)
        self.mm_projector = Projector(self.config)

    def forward(self, pixel_rows: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
        """Return the projected features ``[Σ h·w/4, out_dim]`` of already-checked rows."""
        x = self.vision_tower.patch_embed(pixel_rows, layout.grids)
        x = self.vision_tower.encoder(x, layout)
        return self.mm_projector(self.vision_tower.merge_patches(x, layout))

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


def count_parameters(config: VisionConfig | str) -> int:
    """Return the parameter count of a config without allocating any weight (built on ``meta``)."""
    with torch.device("meta"):
        model = VisionModel(config)
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
