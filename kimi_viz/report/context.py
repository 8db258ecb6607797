"""The report's section on the forward pass around the call: "this call held 2 images from 2 requests".

Only for a manifest that records a :class:`~kimi_viz.split.forward_context.ForwardContext`: the
sentence, the figure of :func:`kimi_viz.plots.call_requests.draw_call_requests`, a table of the
call's items (request, rid, image, placeholder runs, prefix, extend, window), the forward's other
images and why the call did not hold them, where each fact was read, and the context as JSON
(``<script type="application/json" id="kv-forward-context">``).
"""

from __future__ import annotations

from ..plots.palette import color_for
from ..split.forward_context import ForwardContext
from .page import escape, figure_png, json_for_script, png_data_uri


def _cell(value: object, *, mono: bool = False, num: bool = False) -> str:
    text = "not recorded" if value is None else str(value)
    css = " ".join(name for name, on in (("mono", mono), ("num", num)) if on)
    return f'<td class="{css}">{escape(text)}</td>' if css else f"<td>{escape(text)}</td>"


def call_items_html(context: ForwardContext) -> str:
    """Return the table of the call's items: where each came from in the forward pass."""
    head = (
        "<tr><th>call item</th><th>request</th><th>rid</th><th>image of the request</th>"
        "<th>pad tokens [start, end]</th><th>tokens</th><th>prefix</th><th>extend</th><th>window</th></tr>"
    )
    body = []
    for row in context.item_rows():
        runs = None if row["offsets"] is None else ", ".join(f"[{s}, {e}]" for s, e in row["offsets"])
        window = None if row["window"] is None else f"[{row['window'][0]}, {row['window'][1]})"
        swatch = f'<span class="kv-swatch" style="background:{color_for(row["item"])}"></span>'
        body.append(
            f'<tr data-item="{row["item"]}"><td class="num">{swatch}{row["item"]}</td>'
            + _cell(row["request"], num=True)
            + _cell(row["rid"], mono=True)
            + _cell(row["image"], num=True)
            + _cell(runs, mono=True)
            + _cell(row["tokens"], num=True)
            + _cell(row["prefix_len"], num=True)
            + _cell(row["extend_len"], num=True)
            + _cell(window, mono=True)
            + "</tr>"
        )
    return f'<table class="kv-call-items"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def others_html(context: ForwardContext) -> str:
    """Return the list of the forward's images the call did not hold, and why ("" when there are none)."""
    rows = [
        f"<li>{escape(context.requests[r].name(r))}, image {i} (pad tokens "
        f"<code>{escape(', '.join(f'[{s}, {e}]' for s, e in image.offsets))}</code>): {escape(image.describe())}</li>"
        for r, i, image in context.others()
    ]
    if not rows:
        return ""
    return f'<p>Images of these requests that the call did not hold:</p><ul class="kv-not-in-call">{"".join(rows)}</ul>'


def forward_context_html(context: ForwardContext, first_image: int | None = None) -> str:
    """Return the report section: the sentence, the figure, the items table, the other images and the sources.

    ``first_image``: the verdict's first diverging image (a call item), named with the request it came from.
    """
    from ..plots.call_requests import draw_call_requests

    chunked_text = context.chunked_text()
    origin = None if first_image is None else context.origin(first_image)
    first = (
        ""
        if origin is None
        else f'<p id="kv-forward-first">The first diverging image, call item {first_image}, came from '
        f"{escape(origin)}.</p>"
    )
    png = figure_png(draw_call_requests(context).figure)
    figure = (
        '<figure><img alt="each request of the forward pass as a strip of its prompt: its window, its images, '
        f'the call\'s items numbered" src="{png_data_uri(png)}">'
        "<figcaption>Each request's prompt (token positions) with the prefix already in the KV cache dotted, "
        "this forward's window boxed, and each image's placeholder run: the call's items numbered in their "
        "image colour, the other images white and labelled why the call did not hold them.</figcaption></figure>"
    )
    source = f'<p class="kv-note">Recorded from: {escape(context.source)}</p>' if context.source else ""
    data = f'<script type="application/json" id="kv-forward-context">{json_for_script(context.report_json())}</script>'
    return (
        '<section id="kv-forward-context-section"><h2>The forward pass around this call</h2>'
        f'<p class="kv-summary" id="kv-forward-summary">{escape(context.summary())}</p>'
        f"<p>Chunked-prefill size: {escape(chunked_text)}.</p>"
        + first
        + figure
        + call_items_html(context)
        + others_html(context)
        + source
        + data
        + "</section>"
    )


__all__ = ["forward_context_html", "call_items_html", "others_html"]
