"""Which request and image each item of one ``get_image_feature`` call came from: :func:`draw_call_requests`.

One strip per request of the forward pass (top to bottom in SGLang's request order), in token
positions of the request's prompt: the part already in the KV cache (the prefix) dotted grey, this
forward's window ``[prefix, prefix + extend)`` boxed in blue, and each image's placeholder run
(SGLang's ``item.offsets``) on it. The call's items are filled in their image colour and labelled
``item k``; the images the call did not hold are white, hatched, and labelled why ("cache hit",
"same as item 0", "outside window", "not in call"), so colour is never the only signal. Each request
is named on the left with its rid, prefix and extend length.

``draw_call_requests(context, *, ax=None) -> Axes`` uses no pyplot state; the fills are a few
PolyCollections whatever the number of requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from ..split.forward_context import ContextImage, ContextRequest, ForwardContext, plural
from .palette import LINK_COLOR, color_for
from .rows import LABEL_GAP_PT, LINE_HEIGHT_EM, clip_text, draw_row_track, plan_labels, text_size_px

FONT = 9.0  # run labels and request names (pt)
TITLE_FONT = 10.5
STRIP_PT = 16.0  # a request's strip
WINDOW_PAD_PT = 3.5  # the window box reaches this far above and below the strip
ROW_GAP_PT = 14.0
WIDTH_IN = 10.0
RIGHT_IN = 0.3
BOTTOM_IN = 0.75
MAX_REQUESTS = 16  # requests drawn; the rest are counted under the figure
DPI = 100.0
PROMPT_COLOR = "#E8E8E8"
PREFIX_COLOR = "#B8B8B8"
OTHER_COLOR = "#FFFFFF"


def run_label(image: ContextImage) -> str:
    """Return the label of an image's run: ``"item 1"`` for a call item, else why the call did not hold it."""
    if image.status == "in-call":
        return f"item {image.call_item}"
    if image.status == "same-image":
        return "same as item ?" if image.call_item is None else f"same as item {image.call_item}"
    return {"cache-hit": "cache hit", "outside-window": "outside window"}.get(image.status, "not in call")


def request_label(index: int, request: ContextRequest) -> str:
    """Return a request's name on the left: ``"request 0 · rid a1"`` over ``"prefix 0, extend 22"``."""
    head = f"request {index}" + ("" if request.rid is None else f" · rid {clip_text(request.rid, 24)}")
    prefix = "?" if request.prefix_len is None else str(request.prefix_len)
    extend = "?" if request.extend_len is None else str(request.extend_len)
    return f"{head}\nprefix {prefix}, extend {extend}"


def _extent(request: ContextRequest) -> int:
    """Return the tokens of the request's prompt the figure knows: up to its window's end or its last image."""
    ends = [end + 1 for image in request.images for _, end in image.offsets]
    window = request.window
    return max([1, *ends, *(() if window is None else (window[1],))])


def _runs(request: ContextRequest) -> tuple[list[tuple[float, float]], list[str], list[int], list[str]]:
    """Return each placeholder run of a request: ``(start, end)`` half-open, label, style index and fill."""
    spans, labels, styles, fills = [], [], [], []
    for image in request.images:
        in_call = image.status == "in-call" and image.call_item is not None
        item = image.call_item if in_call and image.call_item is not None else 1
        for start, end in image.offsets:
            spans.append((float(start), float(end + 1)))
            labels.append(run_label(image))
            styles.append(item)
            fills.append(color_for(item) if in_call else OTHER_COLOR)
    return spans, labels, styles, fills


def _boxes(rows: Sequence[tuple[float, float, float, float]]) -> np.ndarray:
    """Return PolyCollection vertices for ``(x0, x1, y0, y1)`` rectangles."""
    verts = np.empty((len(rows), 4, 2))
    for k, (x0, x1, y0, y1) in enumerate(rows):
        verts[k] = ((x0, y0), (x1, y0), (x1, y1), (x0, y1))
    return verts


def _add_boxes(
    ax: Axes,
    boxes: Sequence[tuple[float, float, float, float]],
    gid: str,
    *,
    face: str,
    edge: str,
    width: float,
    zorder: float,
    hatch: str | None = None,
) -> None:
    """Add one PolyCollection of ``(x0, x1, y0, y1)`` rectangles (nothing when there are none)."""
    if not boxes:
        return
    collection = PolyCollection(
        cast(Sequence[np.ndarray], _boxes(boxes)),
        facecolors=face,
        edgecolors=edge,
        linewidths=width,
        hatch=hatch,
        zorder=zorder,
        gid=gid,
    )
    ax.add_collection(collection, autolim=False)


_Run = tuple[list[tuple[float, float]], list[str], list[int], list[str]]  # one request's runs, as _runs returns


def _label_room(names: list[str], runs: list[_Run], x0: float, x1: float) -> tuple[float, list[int]]:
    """Return the left margin (inches) the request names need on a new figure, and each strip's
    number of outside-label levels at that figure's width."""
    left_in = max([1.0, *(text_size_px(name, FONT, DPI)[0] / DPI + 0.25 for name in names)])
    width_px = (WIDTH_IN - left_in - RIGHT_IN) * DPI

    def to_px(x: float) -> float:
        return (x - x0) / (x1 - x0) * width_px

    levels = [
        plan_labels(
            spans,
            labels,
            x_to_px=to_px,
            axes_width_px=width_px,
            track_height_px=STRIP_PT * DPI / 72.0,
            fontsize=FONT,
            dpi=DPI,
        )[1]
        for spans, labels, _, _ in runs
    ]
    return left_in, levels


def _strips_axes(left_in: float, total: float) -> Axes:
    """Return a new Axes ``total`` points tall on a Figure sized for it, the names' ``left_in`` margin and the title."""
    top_in = (2 * LINE_HEIGHT_EM * TITLE_FONT + 10.0) / 72.0
    height_in = total / 72.0 + top_in + BOTTOM_IN
    figure = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    figure.subplots_adjust(
        left=left_in / WIDTH_IN,
        right=1 - RIGHT_IN / WIDTH_IN,
        bottom=BOTTOM_IN / height_in,
        top=1 - top_in / height_in,
    )
    return figure.add_subplot()


def _strip_bottoms(rooms: list[float], total: float) -> list[float]:
    """Return each request strip's bottom (points), top down, leaving each strip's label room above it."""
    bottoms, cursor = [], total
    for room in rooms:
        cursor -= room + WINDOW_PAD_PT + STRIP_PT
        bottoms.append(cursor)
        cursor -= WINDOW_PAD_PT + ROW_GAP_PT
    return bottoms


def _draw_prompt_boxes(ax: Axes, requests: list[ContextRequest], bottoms: list[float]) -> None:
    """Draw each request's prompt strip, its cached prefix band and its window box; returns nothing."""
    prompts, prefixes, windows = [], [], []
    for request, bottom in zip(requests, bottoms):
        prompts.append((0.0, float(_extent(request)), bottom, bottom + STRIP_PT))
        window = request.window
        if window is None:
            continue
        if window[0] > 0:
            prefixes.append((0.0, float(window[0]), bottom, bottom + STRIP_PT))
        windows.append((float(window[0]), float(window[1]), bottom - WINDOW_PAD_PT, bottom + STRIP_PT + WINDOW_PAD_PT))
    _add_boxes(ax, prompts, "prompt-strips", face=PROMPT_COLOR, edge="#000000", width=0.6, zorder=1.0)
    _add_boxes(ax, prefixes, "prefix-bands", face=PREFIX_COLOR, edge="none", width=0.0, zorder=1.2, hatch="..")
    _add_boxes(ax, windows, "windows", face="none", edge=LINK_COLOR, width=1.8, zorder=1.5)


def _draw_call_requests_text(
    ax: Axes, context: ForwardContext, names: list[str], bottoms: list[float], shown: int
) -> None:
    """Name each strip on the y axis and write the x label (with the requests not drawn) and the title;
    returns nothing."""
    ax.set_yticks([bottom + STRIP_PT / 2 for bottom in bottoms], names, fontsize=FONT)
    ax.tick_params(axis="y", length=0)
    ax.spines[["top", "right", "left"]].set_visible(False)
    note = ""
    if len(context.requests) > shown:
        note = f"\n{plural(len(context.requests) - shown, 'more request')} not drawn (see the table)"
    ax.set_xlabel(f"token position in the request's prompt (images: SGLang's item.offsets){note}", fontsize=FONT)
    ax.set_title(
        f"get_image_feature: {context.summary()}\nblue box: this forward's window [prefix, prefix + extend); "
        "dotted grey: the prefix already in the KV cache",
        loc="left",
        fontsize=TITLE_FONT,
    )


def draw_call_requests(context: ForwardContext, *, ax: Axes | None = None) -> Axes:
    """Return an Axes with each request's prompt as a strip: its window, its images' runs, the call's items numbered.

    With ``ax`` None a Figure is sized so every label fits (outside labels stack above their strip);
    on a given ``ax`` the rows share its height.
    """
    shown = list(enumerate(context.requests))[:MAX_REQUESTS]
    extent = max([1, *(_extent(request) for _, request in shown)])
    x0, x1 = -0.01 * extent, 1.01 * extent
    names = [request_label(r, request) for r, request in shown]
    runs = [_runs(request) for _, request in shown]
    level_pt = LINE_HEIGHT_EM * FONT + 3.0
    left_in, levels = _label_room(names, runs, x0, x1) if ax is None else (0.0, [0] * len(shown))
    rooms = [0.0 if n == 0 else LABEL_GAP_PT + n * level_pt for n in levels]
    total = sum(room + STRIP_PT + 2 * WINDOW_PAD_PT + ROW_GAP_PT for room in rooms) + ROW_GAP_PT / 2
    if ax is None:
        ax = _strips_axes(left_in, total)
    ax.set_xlim(x0, x1)
    ax.set_ylim(0.0, total)
    bottoms = _strip_bottoms(rooms, total)
    _draw_prompt_boxes(ax, [request for _, request in shown], bottoms)
    for (r, _), (spans, labels, styles, fills), bottom in zip(shown, runs, bottoms):
        if spans:
            draw_row_track(
                ax,
                spans,
                y=bottom,
                height=STRIP_PT,
                labels=labels,
                style_indices=styles,
                colors=fills,
                fontsize=FONT,
                gid_prefix=f"request{r}",
            )
    _draw_call_requests_text(ax, context, names, bottoms, len(shown))
    return ax


__all__ = ["draw_call_requests", "request_label", "run_label", "MAX_REQUESTS"]
