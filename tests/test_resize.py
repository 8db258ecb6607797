"""NaViT resize maths: the golden cases and the properties that hold for every size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_viz.errors import EmptyImageError
from kimi_viz.preprocess.config import PROCESSOR_PRESETS
from kimi_viz.preprocess.resize import ResizeConfig, resize_config

GOLDEN_PRESETS = {"kimi_k3": "kimi-k3", "kimi_k25": "kimi-k25"}


@pytest.mark.parametrize("key", sorted(GOLDEN_PRESETS))
def test_every_golden_case(resize_goldens, key):
    cases = resize_goldens["cases"][key]
    assert len(cases) == 182
    for case in cases:
        got = resize_config(case["width"], case["height"], GOLDEN_PRESETS[key])
        expected = {k: case[k] for k in ("new_width", "new_height", "pad_width", "pad_height", "num_tokens")}
        expected["grid_thw"] = list(case["grid_thw"])
        assert got.to_json() == expected, (case["width"], case["height"])
        assert got.patches == got.grid[1] * got.grid[2] == case["patches"]
        assert ResizeConfig.from_sglang(got.to_sglang()) == got  # the dict SGLang carries gives it back


def test_golden_configs_are_the_presets(resize_goldens):
    for key, preset in GOLDEN_PRESETS.items():
        assert PROCESSOR_PRESETS[preset].to_media_proc_cfg() == resize_goldens["configs"][key]


def test_known_sizes():
    # over the K3 budget before padding is applied: 4200x3150 -> 65712 patches
    assert resize_config(4200, 3150).grid == (1, 222, 296)
    assert resize_config(4200, 3150, "kimi-k25").grid == (1, 112, 148)
    # the per-side limit: 8000x100 -> 7168 px wide, 512 patches
    assert resize_config(8000, 100) == ResizeConfig(
        new_width=7168, new_height=89, pad_width=0, pad_height=23, tokens=1024, grid=(1, 8, 512)
    )
    assert resize_config(8000, 100).to_sglang() == {
        "num_tokens": 1024,
        "new_width": 7168,
        "new_height": 89,
        "pad_width": 0,
        "pad_height": 23,
    }
    # the smallest image is one merged token
    assert resize_config(1, 1).grid == (1, 2, 2)
    assert resize_config(451, 300).padded_size == (476, 308)


def test_fixed_output_tokens_override_the_count():
    cfg = {**PROCESSOR_PRESETS["kimi-k3"].to_media_proc_cfg(), "fixed_output_tokens": 64}
    got = resize_config(451, 300, cfg)
    assert got.tokens == 64 and got.grid == (1, 22, 34)


def test_budget_uses_floor_patch_counts_of_the_original():
    """The budget scales the ORIGINAL floor patch counts, so the resized floor counts can exceed it."""
    got = resize_config(8256, 25044, "kimi-k3")
    assert (got.new_width, got.new_height) == (2059, 6247)
    assert (got.new_width // 14) * (got.new_height // 14) == 65562 > 65536


@pytest.mark.parametrize("width,height", [(0, 10), (10, 0), (0, 0), (-5, 10)])
def test_zero_or_negative_size_is_an_empty_image(width, height):
    with pytest.raises(EmptyImageError, match=r"resize_config: (width|height) is -?\d+; .*ZeroDivisionError"):
        resize_config(width, height)


def test_non_integer_size_is_refused():
    with pytest.raises(TypeError, match="width must be an int, got float"):
        resize_config(10.0, 10)
    with pytest.raises(TypeError, match="height must be an int, got bool"):
        resize_config(10, True)
    with pytest.raises(TypeError, match="width must be an int, got float64"):
        resize_config(np.float64(10.0), 10)


def test_numpy_integer_sizes_are_ints():
    got = resize_config(np.int64(4200), np.uint16(3150))
    assert got == resize_config(4200, 3150)
    assert all(type(v) is int for v in got.to_sglang().values()) and all(type(v) is int for v in got.grid)


@settings(max_examples=300, deadline=None)
@given(
    width=st.integers(1, 100_000),
    height=st.integers(1, 100_000),
    preset=st.sampled_from(sorted(PROCESSOR_PRESETS)),
)
def test_properties(width, height, preset):
    cfg = PROCESSOR_PRESETS[preset]
    p = cfg.patch_size
    got = resize_config(width, height, preset)
    t, h, w = got.grid
    new_w, new_h = got.new_width, got.new_height
    assert t == 1
    assert h % 2 == 0 and w % 2 == 0
    assert 2 <= h <= 512 and 2 <= w <= 512
    assert 1 <= new_w <= width and 1 <= new_h <= height  # never upscales
    assert new_w + got.pad_width == w * p and new_h + got.pad_height == h * p
    assert 0 <= got.pad_width < 2 * p and 0 <= got.pad_height < 2 * p
    assert got.tokens * 4 == h * w
    # The patch budget, before padding: scale^2 * floor(W/p) * floor(H/p) <= in_patch_limit,
    # with scale <= new/old on each side; in integers:
    assert new_w * new_h * max(1, width // p) * max(1, height // p) <= cfg.in_patch_limit * width * height
    # an image already inside the budget and the side limit is not resized
    if (width // p) * (height // p) <= cfg.in_patch_limit and max(width, height) <= 512 * p:
        assert (new_w, new_h) == (width, height)
