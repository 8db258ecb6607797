"""The kit's MoonViT3d tower and patchmergerv2 projector against SGLang's own, on the CPU in fp32.

SGLang's ``KimiK3VisionTower`` and ``KimiK3MultiModalProjector`` (``models/kimi_k3_vl.py``, 0.5.23) are
built from a ``KimiK3VisionConfig`` of the kit preset's shapes; the kit's random weights are copied
into them by checkpoint name (``vision_tower.*`` -> tower, ``mm_projector.*`` -> projector) with a
strict load, so every name must map one to one. Features must agree within 1e-5 relative L2 on a
non-square grid, a grid of exactly 64x64 patches (the position table's own size), a packed batch of
three images (reduced depth), and one small image through all 27 layers. A swapped RoPE axis
planted in the kit must fail the same comparison.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
import torch

from kimi_viz.encoder import ENCODER_PRESETS, VisionEncoder

from .lane import module, record

TOLERANCE = 1e-5
CASES = {  # name: (grids, layers)
    "non-square 6x10": ([[1, 6, 10]], 2),
    "exactly 64x64": ([[1, 64, 64]], 2),
    "packed batch of three": ([[1, 4, 6], [1, 8, 4], [1, 10, 10]], 2),
    "one small image, all 27 layers": ([[1, 8, 10]], 27),
}
RESULTS: dict[str, float] = {}


def _sglang_pair(layers: int):
    configs = module("sglang.srt.configs.kimi_k3")
    vl = module("sglang.srt.models.kimi_k3_vl")
    preset = ENCODER_PRESETS["kimi-k3"]
    config = configs.KimiK3VisionConfig(vt_num_hidden_layers=layers, text_hidden_size=preset.text_hidden_size)
    with mock.patch.object(vl, "_get_mm_attention_backend", return_value="sdpa"):
        tower = vl.KimiK3VisionTower(config)
    return tower.float().eval(), vl.KimiK3MultiModalProjector(config).float().eval()


def _copy_weights(kit: VisionEncoder, tower, projector) -> None:
    state = kit.state_dict()
    tower_state = {k[len("vision_tower.") :]: v for k, v in state.items() if k.startswith("vision_tower.")}
    projector_state = {k[len("mm_projector.") :]: v for k, v in state.items() if k.startswith("mm_projector.")}
    assert set(state) == {f"vision_tower.{k}" for k in tower_state} | {f"mm_projector.{k}" for k in projector_state}
    tower.load_state_dict(tower_state, strict=True)  # every name maps one to one, or this raises
    projector.load_state_dict(projector_state, strict=True)


def relative_l2(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """Return ``|ours - theirs| / |theirs|`` over all elements."""
    return float((ours.double() - theirs.double()).norm() / theirs.double().norm())


def compare(name: str, grids: list[list[int]], layers: int) -> float:
    """Return the relative L2 between the kit's features and SGLang's for these grids and depth."""
    preset = dataclasses.replace(ENCODER_PRESETS["kimi-k3"], num_layers=layers)
    kit = VisionEncoder.random(preset, seed=layers, device="cpu", dtype=torch.float32)
    tower, projector = _sglang_pair(layers)
    _copy_weights(kit, tower, projector)
    generator = torch.Generator().manual_seed(len(name))
    rows = sum(t * h * w for t, h, w in grids)
    pixel_values = torch.randn(rows, 3, 14, 14, generator=generator)
    grid_thws = torch.tensor(grids, dtype=torch.int64)
    with torch.no_grad():
        ours = kit.encode(pixel_values, grid_thws).features
        theirs = projector(tower(pixel_values, grid_thws))
    assert ours.shape == theirs.shape == (rows // 4, preset.text_hidden_size)
    return relative_l2(ours, theirs)


@pytest.mark.parametrize("name", list(CASES))
def test_features_agree_within_1e_5_relative_l2(name):
    grids, layers = CASES[name]
    RESULTS[name] = compare(name, grids, layers)
    assert RESULTS[name] < TOLERANCE, f"{name}: relative L2 {RESULTS[name]:.3g}"
    if len(RESULTS) == len(CASES):
        record(
            "encoder",
            grids=sum(len(g) for g, _ in CASES.values()),
            cases=len(CASES),
            worst_relative_l2=f"{max(RESULTS.values()):.2e}",
            disagreements=0,
        )


def test_a_planted_rope_axis_swap_is_caught(monkeypatch):
    """The comparison is sharp enough: swapping the RoPE table's axes in the kit fails it on a non-square grid."""
    import kimi_viz.encoder.model as model

    original = model.rope_angles

    def swapped(height, width, head_dim, theta=10000.0):  # each pair turned by the other axis
        angles = original(height, width, head_dim, theta)
        return angles.reshape(height * width, -1, 2).flip(-1).reshape(height * width, head_dim // 2)

    monkeypatch.setattr(model, "rope_angles", swapped)
    error = compare("non-square 6x10", [[1, 6, 10]], 2)
    record("planted-bug", plant="RoPE axes swapped", relative_l2=f"{error:.2e}", disagreements=int(error > TOLERANCE))
    assert error > 1e-3
