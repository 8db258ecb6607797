"""The shared layout of the token-track figures (the forward pass, the prompt): tracks of token spans
stacked from the top, each named above it, an x axis of token positions, an error line at the bottom."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from matplotlib.axes import Axes

from .palette import DIVERGENCE_COLOR
from .rows import LABEL_FONT, LABEL_PAD_PX, text_size_px

TRACK = 1.0  # a track's height (data units)
GAP = 1.9  # room above a track for its name and outside labels
TEXT_FILL = "#E6E6E6"  # the spans of ordinary text tokens
TrackRun = tuple[tuple[int, int], str | None, str, int]  # one span of a track: (span, label, colour, style index)


def run_columns(runs: Sequence[TrackRun]) -> tuple[list[tuple[int, int]], list[str | None], list[str], list[int]]:
    """Return ``(span, label, colour, style index)`` runs as four lists: spans, labels, colours and style indices."""
    return [r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs], [r[3] for r in runs]


def track_axes(ax: Axes, width: float, ylim: tuple[float, float], xlabel: str) -> None:
    """Set ``ax`` up for tracks ``width`` tokens wide: a 1 % margin, ``ylim``, no y ticks, only the x axis line."""
    ax.set_xlim(-0.01 * width, width * 1.01)
    ax.set_ylim(*ylim)
    ax.set_yticks([])
    ax.spines[["left", "right", "top"]].set_visible(False)
    ax.set_xlabel(xlabel)


NAME_BOLD = 1.12  # a bold name is about this much wider than text_size_px's estimate


def track_name(ax: Axes, y: float, text: str, gid: str, *, color: str | None = None) -> float:
    """Write a track's name in bold just above the track whose bottom is at ``y``; return its width in pixels
    (to keep the track's labels off it)."""
    ax.text(0, y + TRACK + 0.08, text, fontsize=LABEL_FONT + 1, fontweight="bold", va="bottom", color=color, gid=gid)
    return text_size_px(text, LABEL_FONT + 1, ax.figure.dpi)[0] * NAME_BOLD + LABEL_PAD_PX


def error_text(ax: Axes, y: float, text: str, gid: str) -> None:
    """Write SGLang's error at ``y`` in the divergence colour, wrapped at 150 characters a line."""
    message = "\n".join(textwrap.wrap(text, 150))
    ax.text(0, y, message, fontsize=LABEL_FONT, color=DIVERGENCE_COLOR, va="bottom", gid=gid)


__all__ = ["TRACK", "GAP", "TEXT_FILL", "TrackRun", "run_columns", "track_axes", "track_name", "error_text"]
