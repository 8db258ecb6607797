"""What every page the kit writes shares: the CSS, the status badges, safe text, embedded JSON and PNGs.

The report, the static stepper, the demo index and the gallery are self-contained HTML: no
``http://`` or ``https://`` string survives in them (:func:`defuse_urls`), JSON goes into
``<script type="application/json">`` escaped so no ``</script>`` or ``<!--`` can end it
(:func:`json_for_script`), figures are PNG data URIs written without software metadata
(:func:`figure_png`), and text from a manifest is escaped with its control characters made visible
(:func:`escape`). The status badge of every verdict comes from :func:`badge_html`, coloured and
worded by :data:`kimi_viz.split.verdict.STATUS_STYLES`.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from typing import Any

from ..split.verdict import STATUS_STYLES, Status

URL_PATTERN = re.compile(r"(?i)\b(https?):(?=//)")
PNG_METADATA = {"Software": None}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape(value: Any) -> str:
    """Return ``value`` as HTML text: escaped, with control and bidi characters shown as ``\\xNN`` / ``\\uNNNN``."""
    text = "" if value is None else str(value)
    text = _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )
    return html.escape(text, quote=True)


def json_for_script(data: Any) -> str:
    """Return JSON safe to embed in a ``<script type="application/json">`` element (no ``<``, no URLs)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return URL_PATTERN.sub(lambda m: m.group(1) + "\\u003a", text)


def defuse_urls(page: str) -> str:
    """Return ``page`` with every ``http://``/``https://`` in text turned inert (``https&#58;//``).

    Inside ``<script>`` elements the colon becomes the JS/JSON escape ``\\u003a`` instead, so the
    page still parses; URLs can only come from free text (notes, error messages) in a trace.
    """
    parts = re.split(r"(<script\b[^>]*>.*?</script>)", page, flags=re.S | re.I)
    out = []
    for part in parts:
        if part[:7].lower() == "<script":
            out.append(URL_PATTERN.sub(lambda m: m.group(1) + "\\u003a", part))
        else:
            out.append(URL_PATTERN.sub(lambda m: m.group(1) + "&#58;", part))
    return "".join(out)


def png_data_uri(png: bytes) -> str:
    """Return a ``data:image/png;base64,...`` URI for PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def figure_png(figure: Any, *, dpi: int = 100) -> bytes:
    """Return a matplotlib Figure as PNG bytes (no software metadata, so the bytes are reproducible)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata=PNG_METADATA, pil_kwargs={"compress_level": 1})
    return buffer.getvalue()


def status_css() -> str:
    """Return the CSS of every status: badge colours and the verdict panel's left border."""
    return "\n".join(
        f".kv-badge.kv-{status.value} {{ background: {style.color}; color: {style.text_color}; }}\n"
        f".kv-verdict.kv-{status.value} {{ border-color: {style.color}; }}"
        for status, style in STATUS_STYLES.items()
    )


def badge_html(status: Status) -> str:
    """Return the status badge: its symbol and text, coloured by the status (colour is never the only signal)."""
    style = STATUS_STYLES[status]
    return (
        f'<span class="kv-badge kv-{status.value}" data-status="{status.value}">'
        f'<span aria-hidden="true">{style.symbol}</span> {escape(style.badge)}</span>'
    )


BASE_CSS = """
:root { --ink: #1b1b1b; --muted: #4f4f4f; --line: #c8c8c8; --panel: #f6f6f4; --fail: #B34000; --pass: #006B4F;
        --amber: #E69F00; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--ink); margin: 0 auto; max-width: 1180px; padding: 1.2rem 1.4rem 3rem; }
h1 { font-size: 1.45rem; margin: 0 0 .4rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .6rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .9em; }
.kv-verdict { border: 2px solid var(--line); border-left-width: 10px; border-radius: 6px; padding: .9rem 1.1rem;
              background: var(--panel); }
.kv-badge { display: inline-block; font-weight: 700; padding: .1rem .6rem; border-radius: 4px;
            margin-right: .5rem; letter-spacing: .03em; }
.kv-banner { border: 3px solid var(--amber); background: #fff3d6; padding: .8rem 1rem; border-radius: 6px;
             font-size: 1.05rem; margin: .6rem 0; }
.kv-message { font-size: 1.05rem; }
.kv-summary { font-size: 1.1rem; font-weight: 600; }
dl.kv-facts { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: .8rem 0 0; }
dl.kv-facts dt { font-weight: 600; color: var(--muted); float: none; width: auto; white-space: nowrap; }
dl.kv-facts dd { margin: 0; float: none; }
table { border-collapse: collapse; margin: .4rem 0; width: 100%; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: var(--panel); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.kv-mismatch td { background: #fbe3d6; }
tr.kv-mismatch td:first-child::before { content: "\\2717  "; color: var(--fail); font-weight: 700; }
img.kv-thumb { width: 48px; height: 48px; object-fit: contain; border: 1px solid var(--line); background: #fff; }
.kv-swatch { display: inline-block; width: .9em; height: .9em; border: 1px solid #000; vertical-align: -.1em;
             margin-right: .3em; }
figure { margin: .6rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: .95rem; }
.kv-note { color: var(--muted); }
.kv-fail { color: var(--fail); font-weight: 600; }
.kv-pass { color: var(--pass); }
pre.kv-question { white-space: pre-wrap; overflow-wrap: anywhere; margin: .3rem 0; }
pre.kv-question-table { overflow-x: auto; max-width: 100%; margin: .3rem 0; padding-bottom: .3rem; }
details { margin: .6rem 0; }
details pre { max-height: 32rem; overflow: auto; background: var(--panel); padding: .6rem;
              border: 1px solid var(--line); }
footer { margin-top: 2.5rem; color: var(--muted); font-size: .9rem; }
"""


VERDICT_CSS = """
.kv-verdict { border: 2px solid #c8c8c8; border-left-width: 10px; border-radius: 6px; padding: .9rem 1.1rem;
              background: #f6f6f4; color: #1b1b1b; font-size: 15px; line-height: 1.45; }
.kv-verdict .kv-badge { display: inline-block; font-weight: 700; padding: .1rem .6rem; border-radius: 4px;
            margin-right: .5rem; letter-spacing: .03em; }
.kv-verdict .kv-banner { border: 3px solid #E69F00; background: #fff3d6; padding: .8rem 1rem; border-radius: 6px;
             font-size: 1.05rem; margin: .6rem 0; }
.kv-verdict .kv-summary { font-size: 1.1rem; font-weight: 600; }
.kv-verdict table { border-collapse: collapse; margin: .4rem 0; }
.kv-verdict th, .kv-verdict td { border: 1px solid #c8c8c8; padding: .25rem .5rem; text-align: left; }
.kv-verdict .kv-fail { color: #B34000; font-weight: 600; }
.kv-verdict .kv-pass { color: #006B4F; }
.kv-verdict dl.kv-facts { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
/* A notebook's own CSS (JupyterLab, nbconvert) floats dt; the facts' names stay one line in their column. */
.kv-verdict dl.kv-facts dt { font-weight: 600; color: #4f4f4f; float: none; width: auto; white-space: nowrap; }
.kv-verdict dl.kv-facts dd { margin: 0; float: none; }
"""


def page_css() -> str:
    """Return the whole CSS of a kit page: the base rules and every status's colours."""
    return BASE_CSS + status_css() + "\n"


def verdict_css() -> str:
    """Return CSS for a verdict block embedded in another page (a notebook): every rule scoped to it."""
    return VERDICT_CSS + status_css() + "\n"


__all__ = [
    "escape",
    "json_for_script",
    "defuse_urls",
    "png_data_uri",
    "figure_png",
    "PNG_METADATA",
    "status_css",
    "badge_html",
    "page_css",
    "verdict_css",
    "BASE_CSS",
    "URL_PATTERN",
]
