"""The vision encoder on CPU: shapes, row accounting, independence, positions, precision.

The ``tiny`` preset runs the same code as ``kimi-k3`` with small widths. A straightforward
reference written here with explicit loops (float64) pins the positional details — which RoPE pair
turns with the column and which with the row, how the position table is resized, how 2×2 groups
are formed — and deliberately swapped variants are shown to fail that comparison.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kimi_viz.devices import resolve_device
from kimi_viz.encoder import (
    ENCODER_PRESETS,
    EncoderOutput,
    VisionConfig,
    VisionEncoder,
    count_parameters,
    matmul_flops,
    runtime,
)
from kimi_viz.encoder import model as enc
from kimi_viz.errors import (
    DeviceError,
    LayoutLookupError,
    RowCountError,
    UnsupportedImageError,
)

TINY = ENCODER_PRESETS["tiny"]


@pytest.fixture(scope="module")
def tiny() -> VisionEncoder:
    return VisionEncoder.random("tiny", seed=3, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def sharp(tiny) -> VisionEncoder:
    """The tiny model with q/k/v weights scaled up so attention logits are O(1): positions then
    change the output by a lot, which is what the position checks need."""
    model = copy.deepcopy(tiny)
    with torch.no_grad():
        for block in model.vision_tower.encoder.blocks:
            block.wqkv.weight.mul_(12.0)
    return model


def pixels(grids, seed=0) -> torch.Tensor:
    n = sum(t * h * w for t, h, w in grids)
    return torch.randn(n, 3, 14, 14, generator=torch.Generator().manual_seed(seed))


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


# --- shapes of the real model, without allocating it --------------------------------------------
def test_kimi_k3_parameter_count_from_shapes_on_meta():
    c = ENCODER_PRESETS["kimi-k3"]
    d, q, mlp, out = 1024, 1536, 4096, 7168
    assert (c.hidden_size, c.qkv_hidden_size, c.intermediate_size, c.text_hidden_size) == (d, q, mlp, out)
    block = 2 * d + d * 3 * q + q * d + d * mlp + mlp * d  # norm0, norm1, wqkv, wo, fc0, fc1
    expected = (3 * 14 * 14 * d) + (64 * 64 * d) + 27 * block + d + (4 * d) ** 2 + 4 * d * out + out
    with torch.device("meta"):
        model = VisionEncoder("kimi-k3")
    assert all(p.is_meta for p in model.parameters())
    assert count_parameters("kimi-k3") == model.num_parameters() == expected
    assert 446e6 < expected < 448e6  # "≈447 M parameters"


def test_state_dict_keys_are_the_checkpoint_names():
    with torch.device("meta"):
        k3 = VisionEncoder("kimi-k3")
        k25 = VisionEncoder("kimi-k25")
    names = ["vision_tower.patch_embed.proj.weight", "vision_tower.patch_embed.pos_emb.weight"]
    for i in range(27):
        names += [
            f"vision_tower.encoder.blocks.{i}.{m}.weight"
            for m in ("norm0", "norm1", "wqkv", "wo", "mlp.fc0", "mlp.fc1")
        ]
    names += [
        "vision_tower.encoder.final_layernorm.weight",
        "mm_projector.proj.0.weight",
        "mm_projector.proj.2.weight",
        "mm_projector.post_norm.weight",
    ]
    assert list(k3.state_dict()) == names
    shapes = {k: tuple(v.shape) for k, v in k3.state_dict().items()}
    assert shapes["vision_tower.patch_embed.proj.weight"] == (1024, 3, 14, 14)
    assert shapes["vision_tower.patch_embed.pos_emb.weight"] == (64, 64, 1024)
    assert shapes["vision_tower.encoder.blocks.0.wqkv.weight"] == (4608, 1024)
    assert shapes["vision_tower.encoder.blocks.0.wo.weight"] == (1024, 1536)
    assert shapes["mm_projector.proj.0.weight"] == (4096, 4096)
    assert shapes["mm_projector.proj.2.weight"] == (7168, 4096)
    keys25 = set(k25.state_dict())
    assert {
        "mm_projector.pre_norm.weight",
        "mm_projector.pre_norm.bias",
        "mm_projector.proj.0.bias",
        "vision_tower.patch_embed.proj.bias",
        "vision_tower.encoder.blocks.26.wqkv.bias",
        "vision_tower.encoder.blocks.0.norm0.bias",
        "vision_tower.encoder.final_layernorm.bias",
    } <= keys25
    assert "mm_projector.post_norm.weight" not in keys25
    assert tuple(k25.state_dict()["vision_tower.encoder.blocks.0.wqkv.weight"].shape) == (3 * 1152, 1152)
    assert tuple(k25.state_dict()["mm_projector.pre_norm.weight"].shape) == (1152,)


def test_rmsnorm_eps_is_what_torch_rmsnorm_uses_by_default():
    # SGLang builds nn.RMSNorm(dim) with eps=None. Small activations make the eps visible.
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(0)) * 3e-3
    for dtype in (torch.float32, torch.bfloat16):
        reference = torch.nn.RMSNorm(1024).to(dtype)(x.to(dtype))
        ours = enc.RMSNorm(1024, ENCODER_PRESETS["kimi-k3"].norm_eps).to(dtype)(x.to(dtype))
        assert torch.equal(ours, reference), dtype
    # The check can fail: bf16's own epsilon (2⁻⁷) gives visibly different rows.
    other = enc.RMSNorm(1024, 2.0**-7).to(torch.bfloat16)(x.to(torch.bfloat16))
    assert rel_l2(other.float(), reference.float()) > 0.1


# --- outputs and spans ----------------------------------------------------------------------------
def test_output_shapes_spans_and_intermediates(tiny):
    grids = [(1, 4, 6), (1, 2, 2), (2, 4, 4)]
    out = tiny.encode(pixels(grids), torch.tensor(grids), return_intermediates=True)
    assert isinstance(out, EncoderOutput)
    n = 24 + 4 + 32
    assert out.features.shape == (6 + 1 + 4, TINY.text_hidden_size)
    assert out.token_spans == [(0, 6), (6, 7), (7, 11)]
    assert out.row_spans == [(0, 24), (24, 28), (28, 60)]
    assert out.patch_embeddings.shape == (n, TINY.hidden_size)
    assert out.pre_merge.shape == (n, TINY.hidden_size)
    assert out.merged.shape == (11, 4, TINY.hidden_size)
    assert out.grid_thws.tolist() == [list(g) for g in grids]
    assert set(out.timings) == {"patch_embed_ms", "blocks_ms", "merge_ms", "projector_ms", "total_ms"}
    assert torch.equal(out.image_features(2), out.features[7:11])
    plain = tiny.encode(pixels(grids), grids)
    assert plain.pre_merge is None and plain.timings is None
    assert torch.equal(plain.features, out.features)
    assert out.to_json()["features_shape"] == [11, TINY.text_hidden_size]


def test_merge_groups_are_2x2_blocks_in_raster_order_with_time_mean(tiny):
    grids = [(2, 4, 6)]
    out = tiny.encode(pixels(grids), grids, return_intermediates=True)
    x = out.pre_merge.view(2, 4, 6, -1)  # frame, row, column
    for ty in range(2):
        for tx in range(3):
            token = ty * 3 + tx
            for slot, (dy, dx) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
                expected = x[:, 2 * ty + dy, 2 * tx + dx].mean(0)
                torch.testing.assert_close(out.merged[token, slot], expected)


def test_time_table_is_added_to_every_frame_only_when_t_above_one(tiny):
    frame = pixels([(1, 2, 4)])
    single = tiny.encode(frame, [(1, 2, 4)], return_intermediates=True).patch_embeddings
    double = tiny.encode(torch.cat([frame, frame]), [(2, 2, 4)], return_intermediates=True).patch_embeddings
    table = enc.time_table(TINY.hidden_size, TINY.pos_emb_time)
    torch.testing.assert_close(double[:8], single + table[0])  # frame 0 gets sin(0)=0, cos(0)=1
    torch.testing.assert_close(double[8:], single + table[1])
    assert table[0, : TINY.hidden_size // 2].abs().max() == 0 and table[0, TINY.hidden_size // 2 :].eq(1).all()


# --- row accounting -------------------------------------------------------------------------------
def test_too_few_rows_names_the_first_image_that_does_not_fit(tiny):
    with pytest.raises(RowCountError) as info:
        tiny.encode(torch.zeros(1400, 3, 14, 14), [(1, 38, 38)])
    assert str(info.value) == (
        "pixel_values has 1400 rows but grid_thws needs 1444 (Σ t·h·w); image 0 (grid 1×38×38) needs rows "
        "[0, 1444) and only 1400 exist; pass the pixel_values and grid_thws of the same processor output"
    )
    with pytest.raises(RowCountError) as info:
        tiny.encode(torch.zeros(30, 3, 14, 14), [(1, 2, 4), (1, 4, 4), (1, 2, 2)])
    assert str(info.value) == (
        "pixel_values has 30 rows but grid_thws needs 28 (Σ t·h·w); the last image (image 2, grid 1×2×2) ends "
        "at row 28 and 2 extra rows follow it; pass the pixel_values and grid_thws of the same processor output"
    )
    with pytest.raises(RowCountError) as info:
        tiny.encode(torch.zeros(20, 3, 14, 14), [(1, 2, 4), (1, 4, 4), (1, 2, 2)])
    assert str(info.value) == (
        "pixel_values has 20 rows but grid_thws needs 28 (Σ t·h·w); image 1 (grid 1×4×4) needs rows [8, 24) "
        "and only 20 exist; pass the pixel_values and grid_thws of the same processor output"
    )


def test_bad_grids_and_row_shapes_are_refused(tiny):
    with pytest.raises(RowCountError, match=r"image 1 has grid 1×3×4; h and w must be multiples of 2"):
        tiny.encode(torch.zeros(20, 3, 14, 14), [(1, 2, 4), (1, 3, 4)])
    with pytest.raises(RowCountError, match=r"image 0 has grid 1×2×514; h and w must be at most 512"):
        tiny.encode(torch.zeros(1028, 3, 14, 14), [(1, 2, 514)])
    with pytest.raises(RowCountError, match=r"t must be at most 4"):
        tiny.encode(torch.zeros(20, 3, 14, 14), [(5, 2, 2)])
    with pytest.raises(RowCountError, match=r"grid_thws has shape \(2,\); expected \[n_images, 3\]"):
        tiny.encode(torch.zeros(4, 3, 14, 14), torch.tensor([2, 2]))
    with pytest.raises(
        UnsupportedImageError, match=r"pixel_values has shape \(4, 3, 16, 16\); expected \[N, 3, 14, 14\]"
    ):
        tiny.encode(torch.zeros(4, 3, 16, 16), [(1, 2, 2)])
    flat = tiny.encode(pixels([(1, 2, 2)]).reshape(4, -1), [(1, 2, 2)]).features
    torch.testing.assert_close(flat, tiny.encode(pixels([(1, 2, 2)]), [(1, 2, 2)]).features)


def test_device_cuda_without_cuda_is_a_device_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(DeviceError, match=r"device 'gpu' is not a device name; expected auto, cpu or cuda"):
        resolve_device("gpu")
    assert resolve_device("auto").type == "cpu"
    assert runtime.resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert runtime.resolve_dtype(None, torch.device("cuda")) == torch.bfloat16


def test_a_cuda_index_beyond_the_devices_is_a_device_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(
        DeviceError,
        match=r"device 'cuda:3' was asked for but this machine has 1 CUDA device\(s\); "
        r"use cuda:0 to cuda:0",
    ):
        resolve_device("cuda:3")


@pytest.mark.parametrize("grids", [5, [(1, 2)], [("a", 2, 2)], [None]])
def test_malformed_grid_thws_are_a_row_count_error(tiny, grids):
    with pytest.raises(RowCountError, match=r"grid_thws is .*(t, h, w)"):
        tiny.encode(torch.zeros(4, 3, 14, 14), grids)


# --- independence ---------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["per_image", "packed"])
def test_two_images_together_equal_each_alone(tiny, impl):
    model = copy.deepcopy(tiny)
    model.attn_impl = impl
    a, b = [(1, 4, 6)], [(1, 6, 2)]
    pa, pb = pixels(a, seed=1), pixels(b, seed=2)
    together = model.encode(torch.cat([pa, pb]), a + b).features
    alone = torch.cat([model.encode(pa, a).features, model.encode(pb, b).features])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    # and the image next door matters not at all: change it, image 0 stays put
    other = model.encode(torch.cat([pa, pixels(b, seed=9)]), a + b).features
    torch.testing.assert_close(other[:6], together[:6], rtol=1e-5, atol=1e-5)


def test_packed_and_per_image_attention_agree(tiny):
    grids = [(1, 4, 6), (2, 2, 2), (1, 2, 8)]
    per_image, packed = copy.deepcopy(tiny), copy.deepcopy(tiny)
    per_image.attn_impl, packed.attn_impl = "per_image", "packed"
    assert packed.layout(grids).attn_impl == "packed_mask"  # no varlen flash kernel on CPU
    x = pixels(grids)
    torch.testing.assert_close(
        packed.encode(x, grids).features, per_image.encode(x, grids).features, rtol=1e-5, atol=1e-5
    )


def test_many_images_are_encoded_in_chunks_with_the_same_result(tiny):
    grids = [(1, 2, 2), (1, 4, 2), (1, 2, 6), (1, 4, 4)] * 3
    model = copy.deepcopy(tiny)
    whole = model.encode(pixels(grids), grids).features
    model.chunk_patches = 20
    assert runtime._chunks([t * h * w for t, h, w in grids], 20)[:3] == [(0, 2), (2, 3), (3, 5)]
    chunked = model.encode(pixels(grids), grids, progress=True).features
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)


# --- a reference with explicit loops --------------------------------------------------------------
def reference_features(model: VisionEncoder, pixel_values: torch.Tensor, grids) -> torch.Tensor:
    """Features computed the long way, in float64, from the spec's description of each step."""
    c = model.config
    W = {k: v.double() for k, v in model.state_dict().items()}
    D, H, hd = c.hidden_size, c.num_heads, c.head_dim
    freqs = [1.0 / c.rope_theta ** (4 * i / hd) for i in range(hd // 4)]

    def rms(x, w, eps):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def bilinear(table, h, w):
        H0, W0, _ = table.shape
        out = torch.empty(h, w, table.shape[2], dtype=table.dtype)
        for y in range(h):
            sy = max((y + 0.5) * H0 / h - 0.5, 0.0)
            y0 = min(int(math.floor(sy)), H0 - 1)
            y1, ly = min(y0 + 1, H0 - 1), sy - y0
            for x in range(w):
                sx = max((x + 0.5) * W0 / w - 0.5, 0.0)
                x0 = min(int(math.floor(sx)), W0 - 1)
                x1, lx = min(x0 + 1, W0 - 1), sx - x0
                out[y, x] = (
                    (1 - ly) * (1 - lx) * table[y0, x0]
                    + (1 - ly) * lx * table[y0, x1]
                    + ly * (1 - lx) * table[y1, x0]
                    + ly * lx * table[y1, x1]
                )
        return out

    def rope(v, row, col):  # v: [H, hd]
        v = v.clone()
        for pair in range(hd // 2):
            angle = (col if pair % 2 == 0 else row) * freqs[pair // 2]
            a, b = v[:, 2 * pair].clone(), v[:, 2 * pair + 1].clone()
            v[:, 2 * pair] = a * math.cos(angle) - b * math.sin(angle)
            v[:, 2 * pair + 1] = a * math.sin(angle) + b * math.cos(angle)
        return v

    features, start = [], 0
    for t, h, w in grids:
        n = t * h * w
        px = pixel_values[start : start + n].double()
        start += n
        x = F.conv2d(px, W["vision_tower.patch_embed.proj.weight"], stride=14).reshape(n, D)
        x = x + bilinear(W["vision_tower.patch_embed.pos_emb.weight"], h, w).reshape(h * w, D).repeat(t, 1)
        if t > 1:
            x = x + enc.time_table(D, c.pos_emb_time)[:t].double().repeat_interleave(h * w, 0)
        pos = [(r, col) for _ in range(t) for r in range(h) for col in range(w)]
        for i in range(c.num_layers):
            p = f"vision_tower.encoder.blocks.{i}."
            qkv = rms(x, W[p + "norm0.weight"], c.norm_eps) @ W[p + "wqkv.weight"].T
            q, k, v = qkv.view(n, 3, H, hd).unbind(1)
            q = torch.stack([rope(q[j], *pos[j]) for j in range(n)])
            k = torch.stack([rope(k[j], *pos[j]) for j in range(n)])
            att = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd), dim=-1)
            x = x + torch.einsum("hqk,khd->qhd", att, v).reshape(n, H * hd) @ W[p + "wo.weight"].T
            hidden = F.gelu(rms(x, W[p + "norm1.weight"], c.norm_eps) @ W[p + "mlp.fc0.weight"].T, approximate="tanh")
            x = x + hidden @ W[p + "mlp.fc1.weight"].T
        x = rms(x, W["vision_tower.encoder.final_layernorm.weight"], c.norm_eps).view(t, h, w, D).mean(0)
        groups = [
            torch.cat([x[2 * ty + dy, 2 * tx + dx] for dy in (0, 1) for dx in (0, 1)])
            for ty in range(h // 2)
            for tx in range(w // 2)
        ]
        y = F.gelu(torch.stack(groups) @ W["mm_projector.proj.0.weight"].T) @ W["mm_projector.proj.2.weight"].T
        features.append(rms(y, W["mm_projector.post_norm.weight"], c.projector_ln_eps))
    return torch.cat(features)


def test_matches_the_explicit_reference_on_non_square_grids(sharp):
    grids = [(1, 4, 6), (1, 6, 4), (2, 2, 4)]
    x = pixels(grids, seed=4)
    got = sharp.encode(x, grids).features
    expected = reference_features(sharp, x, grids)
    assert rel_l2(got, expected) < 1e-5


ROPE_ANGLES, RESIZE_POSITION_TABLE = enc.rope_angles, enc.resize_position_table


def _swapped_rope_angles(height, width, head_dim, theta=10000.0):
    return ROPE_ANGLES(width, height, head_dim, theta)


def _rows_for_columns_rope_angles(height, width, head_dim, theta=10000.0):
    angles = ROPE_ANGLES(height, width, head_dim, theta).view(height * width, head_dim // 4, 2)
    return angles.flip(-1).reshape(height * width, head_dim // 2)


def _swapped_position_table(table, height, width, mode):
    return RESIZE_POSITION_TABLE(table, width, height, mode)


@pytest.mark.parametrize(
    "name, patch",
    [
        ("rope_angles", _rows_for_columns_rope_angles),  # pair 2i turned by the row instead of the column
        ("rope_angles", _swapped_rope_angles),  # angles built for a (w, h) grid
        ("resize_position_table", _swapped_position_table),  # table resized to (w, h)
    ],
)
def test_a_row_column_swap_fails_the_reference_check(sharp, monkeypatch, name, patch):
    grids = [(1, 4, 6)]
    x = pixels(grids, seed=4)
    expected = reference_features(sharp, x, grids)
    assert rel_l2(sharp.encode(x, grids).features, expected) < 1e-5
    broken = copy.deepcopy(sharp)
    broken.clear_cache()
    monkeypatch.setattr(enc, name, patch)
    error = rel_l2(broken.encode(x, grids).features, expected)
    assert error > 1e-2


def test_rope_angles_follow_column_then_row():
    angles = enc.rope_angles(3, 5, 8)  # head_dim 8: f = (1, 1/100)
    f = enc.rope_frequencies(8)
    torch.testing.assert_close(f, torch.tensor([1.0, 0.01]))
    row, col = 2, 4
    torch.testing.assert_close(angles[row * 5 + col], torch.tensor([col * 1.0, row * 1.0, col * 0.01, row * 0.01]))


# --- precision ------------------------------------------------------------------------------------
def test_bf16_agrees_with_fp32_within_2e_2_relative_l2(tiny):
    """bf16 weights and activations vs fp32, same weights: relative L2 error of the features < 2e-2
    (and of the pre-merge rows < 2e-2). RoPE and norms run in fp32 in both."""
    grids = [(1, 4, 6), (1, 8, 8)]
    x = pixels(grids, seed=5)
    bf16 = copy.deepcopy(tiny).to(torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    full = tiny.encode(x, grids, return_intermediates=True)
    half = bf16.encode(x, grids, return_intermediates=True)
    assert half.features.dtype == torch.bfloat16
    assert rel_l2(half.features, full.features) < 2e-2
    assert rel_l2(half.pre_merge, full.pre_merge) < 2e-2


# --- the real shapes, once ------------------------------------------------------------------------
def test_kimi_k3_shaped_forward_on_a_2x2_grid():
    """The real 447 M-parameter shapes end to end (about 2–5 s on two CPU cores, mostly memory traffic)."""
    config = ENCODER_PRESETS["kimi-k3"]
    model = VisionEncoder._empty(config, torch.device("cpu"), torch.float32)
    block = torch.randn(1 << 16, generator=torch.Generator().manual_seed(0)) * 0.02
    with torch.no_grad():  # cheap deterministic fill (normal_ on 447 M values takes seconds)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:  # the block tiled over the tensor, without a repeat copy
                flat, size = p.view(-1), block.numel()
                full = flat.numel() // size
                flat[: full * size].view(full, size).copy_(block.expand(full, size))
                flat[full * size :].copy_(block[: flat.numel() - full * size])
    out = model.encode(pixels([(1, 2, 2)]), [(1, 2, 2)])
    assert out.features.shape == (1, 7168)
    assert torch.isfinite(out.features).all()
    assert abs(float(out.features.pow(2).mean()) - 1.0) < 0.05  # post RMSNorm with unit weight


def test_matmul_flops_counts_attention_per_image():
    c = ENCODER_PRESETS["kimi-k3"]
    one = matmul_flops([(1, 36, 46)], c)
    two = matmul_flops([(1, 36, 46), (1, 36, 46)], c)
    assert two == 2 * one  # attention is quadratic per image, not over the batch
    n, d, q = 1656, 1024, 1536
    per_layer = 2 * n * d * 3 * q + 4 * n * n * q + 2 * n * q * d + 4 * n * d * 4096
    assert one == 2 * n * 588 * d + 27 * per_layer + 2 * (n // 4) * 4096 * (4096 + 7168)


def test_each_encoder_preset_names_its_processor_preset():
    from kimi_viz.encoder import processor_preset_for

    assert {name: processor_preset_for(name) for name in ENCODER_PRESETS} == {
        "kimi-k3": "kimi-k3",
        "kimi-k25": "kimi-k25",
        "tiny": "kimi-k3",
    }
    assert processor_preset_for(ENCODER_PRESETS["kimi-k25"]) == "kimi-k25"


def test_config_constants_agree_with_torch_and_the_model():
    from kimi_viz.encoder import config

    assert torch.finfo(torch.float32).eps == config.TORCH_RMSNORM_DEFAULT_EPS
    assert set(config.ACTIVATION_NAMES) == set(enc.ACTIVATIONS)


def test_the_model_classes_hold_no_runtime_machinery():
    """Graph capture, caches and checkpoint I/O live in runtime.VisionEncoder, not in the nn.Modules."""
    for cls in (enc.VisionModel, enc.VisionTower, enc.Projector, enc.EncoderBlock):
        for name in ("_capture", "_forward_graphed", "from_checkpoint", "random", "encode", "layout"):
            assert not hasattr(cls, name), (cls.__name__, name)
    assert issubclass(VisionEncoder, enc.VisionModel)


def test_from_dict_reads_sglang_names():
    k3 = VisionConfig.from_dict(
        {
            "patch_size": 14,
            "init_pos_emb_height": 64,
            "init_pos_emb_width": 64,
            "init_pos_emb_time": 4,
            "pos_emb_type": "divided_fixed",
            "vt_num_attention_heads": 12,
            "vt_num_hidden_layers": 27,
            "vt_hidden_size": 1024,
            "vt_intermediate_size": 4096,
            "merge_kernel_size": [2, 2],
            "merge_type": "sd2_tpool",
            "mm_projector_type": "patchmergerv2",
            "projector_ln_eps": 1e-5,
            "qkv_hidden_size": 1536,
            "norm_type": "rmsnorm",
            "attn_bias": False,
            "patch_embed_proj_bias": False,
            "mlp_type": "mlp2",
            "linear_bias": False,
            "activation_func": "gelu_pytorch_tanh",
            "pos_emb_interpolation_mode": "bilinear",
            "text_hidden_size": 7168,
        }
    )
    assert {
        f: getattr(k3, f) for f in ("hidden_size", "num_heads", "qkv_hidden_size", "norm_eps", "text_hidden_size")
    } == {
        f: getattr(ENCODER_PRESETS["kimi-k3"], f)
        for f in ("hidden_size", "num_heads", "qkv_hidden_size", "norm_eps", "text_hidden_size")
    }
    k25 = VisionConfig.from_dict(
        {
            "hidden_size": 1152,
            "num_attention_heads": 16,
            "intermediate_size": 4304,
            "merge_kernel_size": [2, 2],
            "mm_projector_type": "patchmerger",
        }
    )
    assert (k25.norm_type, k25.norm_eps, k25.qkv_hidden_size, k25.pos_emb_interpolation, k25.attn_bias) == (
        "layernorm",
        1e-5,
        1152,
        "bicubic",
        True,
    )
    from kimi_viz.errors import ConfigError

    with pytest.raises(ConfigError, match="vision_config.merge_type: expected 'sd2_tpool'"):
        VisionConfig.from_dict({"merge_type": "other"})


# --- figures --------------------------------------------------------------------------------------
def test_pca_of_wide_features_matches_the_exact_svd():
    """Above EXACT_PCA_MAX rows and columns the seeded randomised SVD gives the exact answer's colours."""
    from kimi_viz.plots import features

    g = torch.Generator().manual_seed(1)
    n, width = 640, 600
    strong = torch.randn(n, 5, generator=g, dtype=torch.float64) * torch.tensor([9.0, 5, 3, 2, 1], dtype=torch.float64)
    x = (
        strong @ torch.randn(5, width, generator=g, dtype=torch.float64)
        + torch.randn(n, width, generator=g, dtype=torch.float64) * 0.5
    )
    assert min(x.shape) > features.EXACT_PCA_MAX
    colors, ratio = features.pca_colors(x)
    centred = (x - x.mean(0)).numpy()
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    assert np.allclose(ratio, s[:3] ** 2 / np.sum(s**2), rtol=1e-9, atol=0)
    for c in range(3):  # same component up to sign, before percentile scaling
        red = colors[:, c]
        assert abs(np.corrcoef(red[(red > 0) & (red < 1)], (u[:, c] * s[c])[(red > 0) & (red < 1)])[0, 1]) > 0.9999
    assert np.array_equal(features.pca_colors(x)[0], colors)  # seeded: the same figure every time


def test_pca_colors_recover_the_dominant_direction():
    from kimi_viz.plots.features import pca_colors

    g = torch.Generator().manual_seed(0)
    a = torch.linspace(-1, 1, 50)
    direction = torch.randn(32, generator=g)
    features = torch.outer(a, direction) * 10 + torch.randn(50, 32, generator=g) * 0.1
    colors, ratio = pca_colors(features)
    assert colors.shape == (50, 3) and colors.min() >= 0 and colors.max() <= 1
    assert ratio[0] > 0.95 and ratio.sum() <= 1 + 1e-9
    red = torch.tensor(colors[:, 0])
    assert abs(float(torch.corrcoef(torch.stack([red, a]))[0, 1])) > 0.99


def test_draw_feature_map_over_the_processed_image(tiny, sample):
    from matplotlib.figure import Figure

    from kimi_viz.plots import draw_feature_map
    from kimi_viz.preprocess.processor import Processor

    batch = Processor("kimi-k3").preprocess([str(sample("astronaut_tiny_20x5.png")), str(sample("chelsea.png"))])
    out = tiny.encode(batch.pixel_values, batch.grid_thws)
    ax = draw_feature_map(out, batch.records[1], index=1)
    assert isinstance(ax.figure, Figure)
    images = {im.get_gid(): im for im in ax.get_images()}
    assert images["feature-map-pca"].get_array().shape == (11, 17, 3)
    assert images["feature-map-image"].get_array().shape == batch.records[1].resized.shape
    assert "grid 1×22×34 → 11×17 tokens" in ax.get_title()
    assert "R, G, B = PCA 1, 2, 3" in ax.get_title()
    assert ax.get_xlabel().startswith("token column") and ax.get_ylabel() == "token row"
    # batch features with the record pick that image's span; a bare grid works without an image
    ax2 = draw_feature_map(out.features, batch.records[1], index=1)
    assert (ax2.get_images()[-1].get_array() == images["feature-map-pca"].get_array()).all()
    ax3 = draw_feature_map(out.image_features(1), (1, 22, 34))
    assert [im.get_gid() for im in ax3.get_images()] == ["feature-map-pca"]
    with pytest.raises(ValueError, match="image 0 has grid 1×4×4 \\(4 tokens\\) but 187 feature rows"):
        draw_feature_map(out.image_features(1), (1, 4, 4))
    with pytest.raises(RowCountError, match=r"grid 'big' is not \(t, h, w\) or \(h, w\) of positive integers"):
        draw_feature_map(out.image_features(1), "big")
    with pytest.raises(LayoutLookupError, match=r"image index 2 is outside the encoder output's 2 images; pass 0..1"):
        draw_feature_map(out, index=2)


def test_draw_token_norms_labels_each_image(tiny):
    from kimi_viz.plots import draw_token_norms

    grids = [(1, 4, 6), (1, 8, 8), (1, 2, 4)]
    out = tiny.encode(pixels(grids), grids)
    ax = draw_token_norms(out)
    lines = [c for c in ax.collections if c.get_gid() == "token-norms-lines"][0]
    assert len(lines.get_segments()) == 3
    assert [len(s) for s in lines.get_segments()] == [6, 16, 2]
    torch.testing.assert_close(
        torch.tensor(lines.get_segments()[1][:, 1]), out.image_features(1).norm(dim=1).double(), check_dtype=False
    )
    labels = {t.get_gid(): t.get_text() for t in ax.texts}
    assert labels == {
        "token-norms-label-0": "image 0\n2×3 tokens",
        "token-norms-label-1": "image 1\n4×4 tokens",
        "token-norms-label-2": "image 2\n1×2 tokens",
    }
    assert ax.get_ylabel() == "L2 norm of the feature row"
    detailed = tiny.encode(pixels(grids), grids, return_intermediates=True)
    merged = draw_token_norms(detailed, source="merged")
    segments = [c for c in merged.collections if c.get_gid() == "token-norms-lines"][0].get_segments()
    torch.testing.assert_close(
        torch.tensor(segments[0][:, 1]), detailed.merged[:6].flatten(1).norm(dim=1).double(), check_dtype=False
    )
    with pytest.raises(ValueError, match="return_intermediates=True"):
        draw_token_norms(out, source="merged")


# --- the benchmark script ---------------------------------------------------------------------------
def _bench_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_encoder.py"
    spec = importlib.util.spec_from_file_location("bench_encoder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_workloads_are_the_documented_grids(pixel_goldens):
    bench = _bench_module()
    goldens = {
        g["file"]: tuple(g["grid_thws"][0]) for g in pixel_goldens["images"]["kimi_k3"] if not g["exif_transpose"]
    }
    for name, grid in bench.PHOTO_GRIDS.items():
        assert goldens[name] == grid, name
    patches = {name: sum(t * h * w for t, h, w in grids) for name, grids in bench.WORKLOADS.items()}
    assert patches == {"640×480": 1656, "1920×1080": 10764, "8 photos": 32416, "65536 patches": 65536}


def test_benchmark_smoke_runs_on_cpu(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_encoder.py"
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [
            sys.executable,
            str(script),
            "--device",
            "cpu",
            "--preset",
            "tiny",
            "--quick",
            "--checks",
            "--workloads",
            "small,3 images",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [(r["workload"], r["variant"]) for r in result["rows"]] == [
        ("small", "baseline"),
        ("small", "packed"),
        ("small", "kimi-viz"),
        ("3 images", "baseline"),
        ("3 images", "packed"),
        ("3 images", "kimi-viz"),
    ]
    assert all(r["median_ms"] > 0 and r["tflops"] > 0 for r in result["rows"])
    assert result["rows"][0]["speedup_vs_baseline"] == 1.0
    assert result["rows"][4]["attention"] == "packed_mask"
    assert len(result["checks"]) == 8 and all(c["pass"] for c in result["checks"])
    assert "| workload | images | patches | variant |" in run.stdout
    assert out.with_suffix(".md").read_text().startswith("Vision encoder `tiny` in float32 on ")


def test_graph_cache_captures_on_the_second_sighting_and_falls_back_when_capture_fails(tiny, monkeypatch):
    """The CUDA-graph bookkeeping, run on CPU with a stand-in graph that re-runs the forward pass."""
    model = copy.deepcopy(tiny)
    model.graph_device_types = ("cpu",)
    captured = []

    class StandInGraph:
        def __init__(self, rerun):
            self.replay = rerun

    def capture(pixel_rows, layout):
        static_in = pixel_rows.clone()
        static_out = model.forward(static_in, layout)
        captured.append(layout.grids)
        return StandInGraph(lambda: static_out.copy_(model.forward(static_in, layout))), static_in, static_out

    monkeypatch.setattr(model, "_capture", capture)
    a, b = [(1, 4, 6)], [(1, 2, 2), (1, 2, 4)]
    expected_a = tiny.encode(pixels(a, 1), a).features
    first = model.encode(pixels(a, 1), a).features  # first sighting: eager
    assert captured == []
    second = model.encode(pixels(a, 1), a).features  # second: captured and replayed
    third = model.encode(pixels(a, 2), a).features  # replayed with new pixels
    assert captured == [tuple(a)]
    torch.testing.assert_close(first, expected_a)
    torch.testing.assert_close(second, expected_a)
    torch.testing.assert_close(third, tiny.encode(pixels(a, 2), a).features)
    model.graph_max_patches = 30
    model.encode(pixels(b + b + b, 3), b + b + b)  # 36 rows > 30: never graphed
    model.encode(pixels(b + b + b, 3), b + b + b)
    assert captured == [tuple(a)]

    def failing(pixel_rows, layout):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(model, "_capture", failing)
    model.clear_cache()
    model.encode(pixels(b, 4), b)
    with pytest.warns(UserWarning, match="CUDA graph capture failed"):
        out = model.encode(pixels(b, 4), b).features
    torch.testing.assert_close(out, tiny.encode(pixels(b, 4), b).features)
    assert model._graphs[(tuple(b), "per_image")] is False
    torch.testing.assert_close(model.encode(pixels(b, 5), b).features, tiny.encode(pixels(b, 5), b).features)


def test_k25_style_tower_runs_with_layernorms_biases_and_pre_norm_projector():
    from dataclasses import replace

    k25 = ENCODER_PRESETS["kimi-k25"]
    small = replace(
        TINY,
        name="tiny-k25",
        **{
            f: getattr(k25, f)
            for f in (
                "pos_emb_interpolation",
                "norm_type",
                "norm_eps",
                "attn_bias",
                "linear_bias",
                "patch_embed_bias",
                "projector_type",
            )
        },
    )
    model = VisionEncoder.random(small, seed=0, device="cpu")
    keys = set(model.state_dict())
    assert {
        "mm_projector.pre_norm.weight",
        "mm_projector.pre_norm.bias",
        "mm_projector.proj.2.bias",
        "vision_tower.encoder.blocks.1.mlp.fc0.bias",
    } <= keys
    assert isinstance(model.vision_tower.encoder.blocks[0].norm0, torch.nn.LayerNorm)
    grids = [(1, 4, 6), (1, 10, 2)]
    out = model.encode(pixels(grids), grids, return_intermediates=True)
    assert out.features.shape == (6 + 5, TINY.text_hidden_size)
    # the K2.5 projector normalises each of the four merged patches before the MLP
    p = model.mm_projector
    expected = p.proj(
        F.layer_norm(out.merged, (TINY.hidden_size,), p.pre_norm.weight, p.pre_norm.bias, 1e-5).flatten(1)
    )
    torch.testing.assert_close(out.features, expected)


def test_graph_sightings_are_counted_for_a_bounded_number_of_grid_lists(tiny):
    model = copy.deepcopy(tiny)
    model.graph_device_types, model.graph_hits_size = ("cpu",), 2
    layouts = [model.layout([(1, 2, 2 * k)]) for k in (1, 2, 3)]
    assert [model._use_graph(layout, 4) for layout in layouts] == [False, False, False]
    assert list(model._graph_hits) == [(((1, 2, 4),), "per_image"), (((1, 2, 6),), "per_image")]
    assert model._use_graph(layouts[2], 4) is True  # second sighting of the latest list
