"""The gpu group's fill-and-normalise probe answers what torch raises, without importing torch.

``_fill_probe`` works out, by torch's broadcasting rule, what ``fill_transparent_bg``'s alpha composite and
the normalisation's ``addcmul`` raise for an image of 0-7 channels, with no background config and with
each background pattern (plus an unknown pattern, which SGLang rejects before any torch operation). Each
answer -- nothing, or the exception type, exact message and cause -- must equal what the same operations
raise when they run on real torch tensors.
"""

from __future__ import annotations

from typing import Any

import pytest

from kimi_viz.message_catalogue.messages import MSG_BG_PATTERN
from kimi_viz.split.gpu_group import _broadcast, _BroadcastError, _fill_probe, alpha_composite
from kimi_viz.split.state import SGLangRaise, probe_torch, raises
from kimi_viz.split.trace import CauseKind

torch = pytest.importorskip("torch")

BACKGROUNDS: list[dict[str, Any] | None] = [
    None,
    {},  # no pattern key: SGLang's default, black
    {"pattern": "black"},
    {"pattern": "white"},
    {"pattern": "gray"},
    {"pattern": "chessboard"},
    {"pattern": "checkerboard"},  # unknown: SGLang's own ValueError
]


def _torch_fill_probe(channels: int, background: dict[str, Any] | None, image: int) -> None:
    """Raise what the same operations raise on real torch tensors (the probe as it ran on torch)."""
    if channels == 3:
        return
    rgb = min(channels, 3)
    if background is not None:
        pattern = background.get("pattern", "black")
        if pattern not in ("chessboard", "white", "black", "gray"):
            raise raises("ValueError", MSG_BG_PATTERN.format(pattern), CauseKind.BACKGROUND, image)
        alpha = max(0, min(channels, 4) - 3)
        x_alpha, x_rgb, bg = torch.zeros(1, alpha, 1, 1), torch.zeros(1, rgb, 1, 1), torch.zeros(3, 1, 1)
        probe = probe_torch(lambda: alpha_composite(x_alpha, x_rgb, bg), CauseKind.CHANNELS, image, channels=channels)
        if probe is not None:
            raise probe
        out = alpha_composite(x_alpha, x_rgb, bg).shape[1]
    else:
        out = rgb
    probe = probe_torch(
        lambda: torch.addcmul(torch.zeros(1, 3, 1, 1), torch.zeros(1, out, 1, 1), torch.zeros(1, 3, 1, 1)),
        CauseKind.CHANNELS,
        image,
        channels=channels,
    )
    if probe is not None:
        raise probe


def _outcome(probe: Any, channels: int, background: dict[str, Any] | None) -> tuple[str, str, Any] | None:
    """Return what ``probe`` raises as (type, message, cause), or None when it raises nothing."""
    try:
        probe(channels, background, 7)
    except SGLangRaise as exc:
        return exc.info.type, exc.info.message, exc.cause
    return None


@pytest.mark.parametrize("background", BACKGROUNDS, ids=lambda b: "none" if b is None else b.get("pattern", "default"))
@pytest.mark.parametrize("channels", range(8))
def test_fill_probe_matches_torch(channels, background):
    assert _outcome(_fill_probe, channels, background) == _outcome(_torch_fill_probe, channels, background)


def test_the_cases_cover_both_answers():
    """Both a clean answer and each kind of raise occur among the cases compared above."""
    answers = {_outcome(_fill_probe, c, b) is None for c in range(8) for b in BACKGROUNDS}
    kinds = {o[2].kind for c in range(8) for b in BACKGROUNDS if (o := _outcome(_fill_probe, c, b)) is not None}
    assert answers == {True, False}
    assert kinds == {CauseKind.CHANNELS, CauseKind.BACKGROUND}


SHAPES = [(), (0,), (1,), (2,), (3,), (2, 3), (3, 1), (1, 3, 1, 1), (1, 0, 1, 1), (4, 2, 3), (2, 1, 3), (5, 1)]


@pytest.mark.parametrize("a", SHAPES, ids=str)
@pytest.mark.parametrize("b", SHAPES, ids=str)
def test_broadcast_matches_torch(a, b):
    """The broadcast shape, or torch's exact message for a clash, for a left operand ``a`` and ``b``."""
    try:
        expected: Any = tuple((torch.zeros(a) * torch.zeros(b)).shape)
    except RuntimeError as exc:
        expected = str(exc)
    try:
        got: Any = _broadcast(a, b)
    except _BroadcastError as exc:
        got = str(exc)
    assert got == expected
