"""One forward pass drawn: each request's prompt and window, the ``get_image_feature`` call, where the rows land.

:func:`draw_forward_pass` draws a :class:`~kimi_viz.forward.embedding.ForwardTrace` on one Axes whose
x axis counts tokens. Per request of the batch, top to bottom:

* **prompt**: text tokens in light grey and each image's ``<|media_pad|>`` run in that image's colour,
  labelled ``r1:0 chelsea.png`` with its pad count; the pass's window ``[prefix, prefix + extend)`` is a
  thick dashed outline labelled with its bounds; the radix prefix the request started from,
  ``[0, matched)`` (cached, never prefilled: an image wholly inside it never reaches the call), is
  cross-hatched over the prompt and labelled ``radix prefix (cached)`` (with what it shared when Kimi-K3's
  hybrid tree cut the hit back to a saved state), with a legend entry (drawn only where a request has one,
  so a pass without a cached prefix is drawn as before); every saved linear-attention state on the
  prompt (where the tree held one when the request was matched, and where the request saved its own) is
  a dotted tick across the track, with its legend entry;
* **rows landed**: which image's feature rows were written on each pad token (labelled with the rows'
  image and row numbers); the first pad token that receives another image's row is marked in
  vermillion with both names.

A request retracted before the pass says so in its track's name, and what memory did since the previous
pass (retractions, evictions, NO_TOKEN) is the title's second line.

Below them the **call**: the items of the one ``get_image_feature`` call in order (``item k`` and the
request and image it is), laid out by the tokens each should yield, and the items that did **not** go
into the call: cache hits, duplicates and discarded stale entries, grey and labelled with what they
are. When the pass raises, the title says where and the message is printed under the call.
Every span carries its text, so colour is never the only signal.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..preprocess.layout import spans_of
from .axes import sized_axes
from .palette import DIVERGENCE_COLOR, TEXT_COLOR, color_for
from .rows import LABEL_FONT, LABEL_PAD_PX, draw_row_track, text_size_px
from .tracks import GAP, TEXT_FILL, TRACK, TrackRun, error_text, run_columns, track_axes, track_name

if TYPE_CHECKING:  # pragma: no cover
    from ..forward.rows import Source
    from ..forward.trace import CallItem, ForwardTrace, Lookup

OUTSIDE_FILL = "#BBBBBB"
OUTPUT_FILL = "#F2F2F2"  # a retracted request's earlier outputs, prefilled again
CACHED_HATCH = "xx"  # the radix prefix: cross-hatched, unlike any span's hatch (none or ///)
CACHED_WORDS = "radix prefix (cached)"
CACHED_LEGEND = f"{CACHED_WORDS}: reused from the tree, never prefilled"
STATE_STYLE = (0, (1.5, 1.5))  # a saved state: a dotted tick across the prompt track
STATE_LEGEND = "saved linear-attention state (Kimi-K3's hybrid tree resumes only here)"
LEGEND_ROOM = 0.9  # data units added below the tracks for the legend, only when a prefix is cached
CACHED_ROOM = 0.6  # data units added under a prompt with a cached prefix: a second line of labels
_LOOKUP_WORDS = {
    "hit": "cache hit",
    "stale-hit": "cached, other length: used",
    "discarded": "stale entry discarded",
    "duplicate": "duplicate: encoded once",
    "found": "already found",
}


def _styles(trace: ForwardTrace) -> dict[tuple[int, int], int]:
    """Return a palette index per (request, image) of the batch, in batch order."""
    order: dict[tuple[int, int], int] = {}
    for request in trace.batch:
        for item in request.items:
            order.setdefault((item.source.request, item.source.image), len(order))
    return order


def _name(source: Source) -> str:
    return f"{source.rid}:{source.image} {source.label}" if source.request >= 0 else source.label


def draw_forward_pass(trace: ForwardTrace, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw one forward pass (prompts, windows, the call, rows onto pad tokens) and return the Axes."""
    requests = list(trace.batch)
    tracks = 2 * len(requests) + 2
    cached = sum(1 for r in requests if r.matched > 0)
    legend = cached or any(r.states for r in requests)
    room = (LEGEND_ROOM if legend else 0.0) + CACHED_ROOM * cached  # data units, only for a cached prefix
    ax = sized_axes(ax, (11.0, 1.4 + 0.95 * (tracks + room / (TRACK + GAP))))
    styles = _styles(trace)
    call_items = [i for call in trace.calls for i in call.items]
    outside = [u for u in trace.lookups if u.outcome != "miss"]
    tokens = {(i.source.request, i.source.image): i.tokens for r in requests for i in r.items}
    width = max(
        [max(r.length, r.window[1]) for r in requests]
        + [sum(i.tokens for i in call_items), sum(tokens.get((u.source.request, u.source.image), 0) for u in outside)]
        + [1]
    )
    top = tracks * (TRACK + GAP) + CACHED_ROOM * cached
    bottom = -1.4 - (LEGEND_ROOM if legend else 0.0)
    track_axes(ax, width, (bottom, top + 0.4), "token position (prompt tracks) / feature row (call tracks)")
    y = top - TRACK - GAP + 0.2
    first_wrong = trace.misplaced()[:1]
    for request in requests:
        _draw_prompt(ax, request, styles, y)
        y -= TRACK + GAP + (CACHED_ROOM if request.matched > 0 else 0.0)
        _draw_landed(ax, trace, request.index, styles, y, first_wrong)
        y -= TRACK + GAP
    _draw_call_track(ax, trace, call_items, styles, y)
    y -= TRACK + GAP
    _draw_outside_track(ax, trace, outside, tokens, y)
    _draw_forward_heading(ax, trace, len(requests), title)
    handles: list = []
    if cached:
        handles.append(Patch(facecolor="white", edgecolor=TEXT_COLOR, hatch=CACHED_HATCH, label=CACHED_LEGEND))
    if any(r.states for r in requests):
        handles.append(Line2D([], [], color=TEXT_COLOR, linestyle=STATE_STYLE, linewidth=2.0, label=STATE_LEGEND))
    if handles:
        ax.legend(handles=handles, loc="lower right", fontsize=LABEL_FONT, framealpha=1.0).set_gid("cached-legend")
    return ax


def _draw_call_track(
    ax: Axes, trace: ForwardTrace, call_items: list[CallItem], styles: dict[tuple[int, int], int], y: float
) -> None:
    """Draw the call's items in order, sized by the tokens each should yield, or why there is no call;
    returns nothing."""
    name = _track_name(ax, y, f"get_image_feature call ({len(call_items)} item{'s' if len(call_items) != 1 else ''})")
    if call_items:
        draw_row_track(
            ax,
            spans_of(item.tokens for item in call_items),
            y=y,
            height=TRACK,
            labels=[f"item {k}: {_name(i.source)}\n{i.tokens} tokens" for k, i in enumerate(call_items)],
            style_indices=[styles.get((i.source.request, i.source.image), 0) for i in call_items],
            gid_prefix="call",
            name_px=name,
        )
    else:
        none = (
            "no call: the precomputed path cuts the encode server's rows"
            if trace.path == "precomputed"
            else "no call: every overlapping image was found"
        )
        ax.text(0, y + TRACK / 2, none, va="center", fontsize=LABEL_FONT)


def _draw_outside_track(
    ax: Axes, trace: ForwardTrace, outside: list[Lookup], tokens: dict[tuple[int, int], int], y: float
) -> None:
    """Draw the looked-up images that stayed out of the call, grey and labelled with what they are;
    returns nothing."""
    name = _track_name(ax, y, "not in the call")
    if outside:
        draw_row_track(
            ax,
            spans_of(tokens.get((u.source.request, u.source.image), 1) for u in outside),
            y=y,
            height=TRACK,
            labels=[f"{_name(u.source)}\n{_LOOKUP_WORDS[u.outcome]}" for u in outside],
            colors=[OUTSIDE_FILL] * len(outside),
            gid_prefix="outside",
            name_px=name,
        )
    else:
        none = (
            "none: nothing is looked up" if trace.path == "precomputed" else "none: every overlapping image is a miss"
        )
        ax.text(0, y + TRACK / 2, none, va="center", fontsize=LABEL_FONT)


def _draw_forward_heading(ax: Axes, trace: ForwardTrace, requests: int, title: str | None) -> None:
    """Set the pass's title (release, TP size, requests, path, what it raises) and print its error;
    returns nothing."""
    heading = title or (
        f"SGLang {trace.release.version}, attention-TP {trace.tp_size}: one forward pass, "
        f"{requests} request{'s' if requests != 1 else ''}, {trace.path} path"
    )
    if trace.error is not None:
        heading += f" — raises {trace.error.type} ({trace.stage})"
        failing = next((c.trace for c in trace.calls if c.trace is not None and c.trace.error is not None), None)
        ranks = [] if failing is None else [r.rank for r in failing.ranks if r.error is not None]
        where = (
            ""
            if not ranks
            else f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of {trace.tp_size}: "
        )
        error_text(ax, -1.2, f"{where}{trace.error.type}: {trace.error.message}", "forward-error")
    if trace.memory:
        heading += "\n" + "\n".join(textwrap.wrap(f"memory since the previous pass: {trace.memory}", 130))
    ax.set_title(heading, fontsize=LABEL_FONT + 3, loc="left")


def _track_name(ax: Axes, y: float, text: str) -> float:
    return track_name(ax, y, text, f"track-{text.split(' ')[0]}", color=TEXT_COLOR)


def _draw_prompt(ax: Axes, request, styles: dict[tuple[int, int], int], y: float) -> None:
    """Draw a request's prompt (text grey, pad runs in their image's colour) and its window."""
    runs: list[TrackRun] = []
    cursor = 0
    for item in sorted(request.items, key=lambda i: i.offsets[0]):
        start, end = item.offsets
        if start > cursor:
            runs.append(((cursor, start), None, TEXT_FILL, 0))
        index = styles[(item.source.request, item.source.image)]
        runs.append(
            ((start, end + 1), f"{_name(item.source)}\n{item.tokens} pads {start}..{end}", color_for(index), index)
        )
        cursor = end + 1
    if cursor < request.length:
        runs.append(((cursor, request.length), None, TEXT_FILL, 0))
    end = request.window[1]
    if end > request.length:  # a retracted request prefills its earlier outputs again
        runs.append(((request.length, end), f"its {end - request.length} outputs so far", OUTPUT_FILL, 0))
    spans, labels, colors, indices = run_columns(runs)
    again = ""
    if request.retracted:
        steps = ", ".join(str(step) for step in request.retracted)
        again = f", retracted at step {steps}: prefilled again"
    _track_name(ax, y + GAP * 0.45, f"{request.rid} prompt ({request.length} tokens{again})")
    draw_row_track(
        ax,
        spans,
        y=y,
        height=TRACK,
        labels=labels,
        style_indices=indices,
        colors=colors,
        gid_prefix=f"prompt-{request.rid}",
    )
    _draw_cached(ax, request, y)
    _draw_states(ax, request, y)
    lo, hi = request.window
    ax.add_patch(
        Rectangle(
            (lo, y - 0.15),
            max(hi - lo, 0),
            TRACK + 0.3,
            fill=False,
            linewidth=2.0,
            linestyle="--",
            edgecolor=TEXT_COLOR,
            zorder=5,
            gid=f"window-{request.rid}",
        )
    )
    window_ha = "right" if hi > 0.15 * max(request.length, 1) else "left"
    ax.text(hi, y - 0.2, f"window [{lo}, {hi})", ha=window_ha, va="top", fontsize=LABEL_FONT, zorder=6)
    if request.matched > 0:
        _label_cached(ax, request, y, (hi, window_ha, f"window [{lo}, {hi})"))


def _draw_cached(ax: Axes, request, y: float) -> None:
    """Cross-hatch the request's radix prefix ``[0, matched)`` over its prompt track (above the spans' fills,
    under their labels); returns nothing. Draws nothing when no prefix was cached."""
    if request.matched <= 0:
        return
    matched = min(request.matched, request.length)
    corners = [[(0, y), (matched, y), (matched, y + TRACK), (0, y + TRACK)]]
    ax.add_collection(
        PolyCollection(
            corners,
            facecolors="none",
            edgecolors=TEXT_COLOR,
            linewidths=1.6,
            hatch=CACHED_HATCH,
            zorder=2.5,
            gid=f"cached-{request.rid}",
        ),
        autolim=False,
    )


def _draw_states(ax: Axes, request, y: float) -> None:
    """Tick every saved linear-attention state on the request's prompt (dotted, above the spans); returns nothing.
    Draws nothing for a request with none (a plain tree, or nothing saved)."""
    if not request.states:
        return
    ticks = [[(d, y - 0.3), (d, y + TRACK + 0.3)] for d in request.states]  # past the window outline
    ax.add_collection(
        LineCollection(
            ticks, colors=TEXT_COLOR, linestyles=[STATE_STYLE], linewidths=2.0, zorder=5.5, gid=f"states-{request.rid}"
        ),
        autolim=False,
    )


def _label_cached(ax: Axes, request, y: float, window: tuple[float, str, str]) -> None:
    """Write ``radix prefix (cached) [0, matched)`` under the prompt track from its left edge, beside the window's
    label, or a line lower (in the room left for it) when it would run into that label; returns nothing."""
    text = f"{CACHED_WORDS} [0, {request.matched})"
    if request.shared > request.matched:
        text += f": {request.shared} shared, cut back to the saved state"
    x0, x1 = ax.get_xlim()
    tokens_per_px = (x1 - x0) / ax.bbox.width
    dpi = ax.figure.dpi
    at, ha, words = window
    window_px = text_size_px(words, LABEL_FONT, dpi)[0]
    window_left = at - (window_px * tokens_per_px if ha == "right" else 0.0)
    clash = window_left < (text_size_px(text, LABEL_FONT, dpi)[0] + 2 * LABEL_PAD_PX) * tokens_per_px
    ax.text(
        0,
        y - 0.2 - (CACHED_ROOM if clash else 0.0),
        text,
        ha="left",
        va="top",
        fontsize=LABEL_FONT,
        zorder=6,
        gid=f"cached-{request.rid}-label",
    )


def _draw_landed(ax: Axes, trace: ForwardTrace, request: int, styles, y: float, first_wrong) -> None:
    """Draw which image's rows landed on the request's pad tokens, and mark the first wrong one."""
    rid = next(r.rid for r in trace.batch if r.index == request)
    placements = [p for p in trace.placements if p.request == request]
    _track_name(ax, y + GAP * 0.45, f"{rid} rows landed on its pad tokens")
    if not placements:
        why = "nothing written: the pass raised first" if trace.error is not None else "no pad token in the window"
        ax.text(0, y + TRACK / 2, why, va="center", fontsize=LABEL_FONT)
        return
    spans = [(p.start, p.start + p.run.count) for p in placements]
    labels = [f"{_name(p.run.source)}\nrows {p.run.start}..{p.run.start + p.run.count - 1}" for p in placements]
    indices = [styles.get((p.run.source.request, p.run.source.image), len(styles)) for p in placements]
    draw_row_track(ax, spans, y=y, height=TRACK, labels=labels, style_indices=indices, gid_prefix=f"landed-{rid}")
    for owner, item, placement in first_wrong:
        if owner.index != request:
            continue
        x = placement.start
        ax.plot([x, x], [y - 0.3, y + TRACK + 0.3], color=DIVERGENCE_COLOR, linewidth=2.5, zorder=7, gid="first-wrong")
        ax.text(
            x,
            y - 0.35,
            f"first wrong pad {x}: {_name(placement.run.source)} row {placement.run.start}, "
            f"should be {_name(item.source)} row {x - item.offsets[0]}",
            color=DIVERGENCE_COLOR,
            fontsize=LABEL_FONT,
            va="top",
            ha="left" if x < 0.6 * ax.get_xlim()[1] else "right",
            zorder=7,
            gid="first-wrong-label",
        )


__all__ = ["draw_forward_pass"]
