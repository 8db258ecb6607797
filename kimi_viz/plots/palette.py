"""Colours and line styles shared by every figure.

Fills come from the Okabe–Ito palette, which stays distinguishable under the common forms of colour
blindness. Figures never rely on colour alone: neighbouring spans also alternate hatch and edge
style (:func:`hatch_for`, :func:`edge_style_for`), and every span carries a text label.
"""

from __future__ import annotations

from typing import Literal

EdgeStyle = Literal["solid", "dashed"]  # the edge line styles figures use (matplotlib style names)

# Okabe & Ito (2008), "Color Universal Design": orange, sky blue, bluish green, yellow, blue,
# vermillion, reddish purple, black.
PALETTE: tuple[str, ...] = (
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#F0E442",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
    "#000000",
)

# Fills cycle through the seven colours; black is kept for lines and text.
FILL_COLORS: tuple[str, ...] = PALETTE[:7]

HATCHES: tuple[str, ...] = ("", "///")
EDGE_STYLES: tuple[EdgeStyle, ...] = ("solid", "dashed")

LATTICE_COLOR = "#FFFFFF"  # 14-px patch lattice, drawn over the image
MERGE_COLOR = "#E69F00"  # 28-px merge groups (orange)
HIGHLIGHT_COLOR = "#56B4E9"  # highlighted patches (sky blue)
DIVERGENCE_COLOR = "#D55E00"  # first divergence marker (vermillion)
LINK_COLOR = "#0072B2"  # patch-to-row links (blue)
TEXT_COLOR = "#000000"

# Padding overlay (RGBA, 0..1): fully padded patches darker and more opaque than partly padded ones.
PAD_FULL_RGBA = (0.0, 0.0, 0.0, 0.55)
PAD_PARTIAL_RGBA = (0.80, 0.47, 0.65, 0.45)  # reddish purple


def color_for(i: int) -> str:
    """Return the fill colour of item ``i`` (cycling through the seven Okabe–Ito fills)."""
    return FILL_COLORS[int(i) % len(FILL_COLORS)]


def hatch_for(i: int) -> str:
    """Return the hatch of item ``i``: none for even items, diagonal lines for odd ones."""
    return HATCHES[int(i) % len(HATCHES)]


def edge_style_for(i: int) -> EdgeStyle:
    """Return the edge line style of item ``i``: solid for even items, dashed for odd ones."""
    return EDGE_STYLES[int(i) % len(EDGE_STYLES)]


def text_color_on(fill: str) -> str:
    """Return black or white, whichever reads better on ``fill`` (a ``#RRGGBB`` colour)."""
    r, g, b = (int(fill[k : k + 2], 16) / 255 for k in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#000000" if luminance > 0.4 else "#FFFFFF"
