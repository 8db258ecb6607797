"""Shared fixtures: the golden files and the sample images, found relative to this folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GOLDENS = Path(__file__).resolve().parent / "goldens"
PRESET_OF_GOLDEN_KEY = {"kimi_k3": "kimi-k3", "kimi_k25": "kimi-k25"}


@pytest.fixture(scope="session")
def pixel_goldens() -> dict:
    """The checkpoint and torch-path pixel goldens (tests/goldens/pixel_goldens.json)."""
    return json.loads((GOLDENS / "pixel_goldens.json").read_text())


@pytest.fixture(scope="session")
def resize_goldens() -> dict:
    """The NaViT resize cases (tests/goldens/resize_cases.json)."""
    return json.loads((GOLDENS / "resize_cases.json").read_text())


@pytest.fixture(scope="session")
def sample():
    """Return a function mapping a sample file name to its path."""
    from kimi_viz.data import sample_path

    return sample_path
