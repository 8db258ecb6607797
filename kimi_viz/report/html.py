"""``report.html``: one self-contained page a triager can attach to an issue.

The page holds the verdict at the top, the summary figure and the step-by-step stepper as embedded
PNGs, a table of the batch and of every image's expected and produced rows, and the whole trace as
embedded JSON (``<script type="application/json" id="kv-trace">``). CSS and JS are inline and the
page references nothing outside itself — no ``http://`` or ``https://`` string appears anywhere —
so it opens from disk in any browser, with or without a network.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any, Mapping

from .batch import Batch

URL_PATTERN = re.compile(r"(?i)\b(https?):(?=//)")

CSS = """
:root { --ok: #009E73; --err: #D55E00; --warn: #E69F00; --ink: #1b1b1b; --muted: #5b5b5b;
        --line: #d0d0d0; --panel: #f6f6f4; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--ink); margin: 0 auto; max-width: 1180px; padding: 1.2rem 1.4rem 3rem; }
h1 { font-size: 1.45rem; margin: 0 0 .4rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .6rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .88em; }
.kv-verdict { border: 2px solid var(--line); border-left-width: 10px; border-radius: 6px; padding: .9rem 1.1rem;
              background: var(--panel); }
.kv-verdict.kv-error { border-color: var(--err); }
.kv-verdict.kv-ok { border-color: var(--ok); }
.kv-badge { display: inline-block; font-weight: 700; padding: .05rem .55rem; border-radius: 4px; color: #fff;
            margin-right: .5rem; letter-spacing: .03em; }
.kv-badge.kv-error { background: var(--err); }
.kv-badge.kv-ok { background: var(--ok); }
.kv-message { font-size: 1.05rem; }
dl.kv-facts { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: .8rem 0 0; }
dl.kv-facts dt { font-weight: 600; color: var(--muted); }
dl.kv-facts dd { margin: 0; }
table { border-collapse: collapse; margin: .4rem 0; width: 100%; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: var(--panel); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.kv-mismatch td { background: #fbe3d6; }
tr.kv-mismatch td:first-child::before { content: "\\2717  "; color: var(--err); font-weight: 700; }
figure { margin: .6rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: .9rem; }
.kv-note { color: var(--muted); }
details { margin: .6rem 0; }
details pre { max-height: 32rem; overflow: auto; background: var(--panel); padding: .6rem; border: 1px solid var(--line); }
footer { margin-top: 2.5rem; color: var(--muted); font-size: .85rem; }
"""

SCRIPT = """
(function () {
  var button = document.getElementById("kv-show-trace");
  if (!button) { return; }
  button.addEventListener("click", function () {
    var target = document.getElementById("kv-trace-text");
    if (!target.textContent) {
      var data = JSON.parse(document.getElementById("kv-trace").textContent);
      target.textContent = JSON.stringify(data, null, 2);
    }
    target.hidden = !target.hidden;
    button.textContent = target.hidden ? "Show the trace JSON" : "Hide the trace JSON";
  });
})();
"""


def _e(value: Any) -> str:
    """Return ``value`` as escaped HTML text."""
    return html.escape("" if value is None else str(value), quote=True)


def json_for_script(data: Any) -> str:
    """Return JSON safe to embed in a ``<script type="application/json">`` element (no ``<``, no URLs)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
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


def _error_text(error: Mapping[str, Any] | None) -> str:
    return "ok" if error is None else f"{error['type']}: {error['message']}"


def verdict_html(verdict: Mapping[str, Any], *, heading: str, subtitle: str = "") -> str:
    """Return the verdict block: outcome and exact message, every rank, and the divergence facts."""
    outcome = verdict["outcome"]
    css = "kv-error" if outcome == "error" else "kv-ok"
    badge = "ERROR REPRODUCED" if outcome == "error" else "CLEAN REPLAY"
    error = verdict.get("error")
    message = (f"<code>{_e(error['type'])}: {_e(error['message'])}</code>" if error
               else "SGLang raises nothing in <code>get_image_feature</code> for this batch.")
    rows = "".join(
        f"<tr class=\"{'kv-mismatch' if r['outcome'] == 'error' else ''}\"><td class=\"num\">{r['rank']}</td>"
        f"<td class=\"mono\">{_e(r['image_indices'])}</td><td>{_e(r['outcome'])}</td>"
        f"<td class=\"mono\">{_e(_error_text(r.get('error')))}</td></tr>"
        for r in verdict.get("ranks", [])
    )
    div = verdict.get("divergence") or {}
    facts = []

    def fact(name: str, value: Any, mono: bool = False) -> None:
        if value is None or value == "":
            return
        body = f"<code>{_e(value)}</code>" if mono else _e(value)
        facts.append(f"<dt>{_e(name)}</dt><dd>{body}</dd>")

    cls = div.get("scenario_class")
    if cls:
        fact("scenario class", f"{cls}{' (silent: SGLang raises nothing)' if div.get('silent') else ''}")
    if div.get("first_image") is not None:
        label = f" ({div['label']})" if div.get("label") else ""
        where = f" on rank {div['rank']}" if div.get("rank") is not None else ""
        fact("first diverging image", f"image {div['first_image']}{label}{where}")
        fact("rows of that image", f"expected {div.get('expected_rows')}, produced {div.get('produced_rows')}")
        if div.get("expected_grid") is not None or div.get("produced_grid") is not None:
            fact("grids of that image", f"expected {div.get('expected_grid')}, produced {div.get('produced_grid')}",
                 mono=True)
    if div.get("expected_total") is not None or div.get("produced_total") is not None:
        fact("counts", f"expected {div.get('expected_total')} rows, produced {div.get('produced_total')}")
    fact("wrong expectation from", div.get("wrong_expectation"))
    fact("index mapping", div.get("index_mapping"), mono=True)
    fact("why", div.get("explanation"))
    fact("fix", div.get("fix"))
    from .verdict import release_lines

    release = "".join(f"<p class=\"kv-release\">{_e(line)}</p>" for line in release_lines(verdict))
    return (
        f"<section class=\"kv-verdict {css}\" id=\"kv-verdict\">"
        f"<h1><span class=\"kv-badge {css}\">{badge}</span>{_e(heading)}</h1>"
        + release
        + (f"<p class=\"kv-note\">{_e(subtitle)}</p>" if subtitle else "")
        + f"<p class=\"kv-message\">{message}</p>"
        "<table class=\"kv-ranks\"><thead><tr><th>rank</th><th>image_indices</th><th>outcome</th><th>error</th>"
        f"</tr></thead><tbody>{rows}</tbody></table>"
        + (f"<dl class=\"kv-facts\">{''.join(facts)}</dl>" if facts else "")
        + "</section>"
    )


def images_table_html(verdict: Mapping[str, Any]) -> str:
    """Return the per-image table (global index order): rank, grid source, expected and produced rows."""
    images = (verdict.get("divergence") or {}).get("images") or []
    if not images:
        return "<p class=\"kv-note\">No image was materialized (SGLang raised before the backend groups).</p>"
    head = ("<tr><th>image</th><th>label</th><th>rank</th><th>backend</th><th>grid source</th>"
            "<th>grid row read</th><th>expected grid</th><th>expected rows</th><th>produced grid</th>"
            "<th>produced rows</th><th>match</th></tr>")
    body = []
    for row in images:
        mismatch = row.get("match") is False
        match = {True: "yes", False: "NO", None: "not checked"}[row.get("match")]
        body.append(
            f"<tr class=\"{'kv-mismatch' if mismatch else ''}\"><td class=\"num\">{_e(row.get('image'))}</td>"
            f"<td>{_e(row.get('label'))}</td><td class=\"num\">{_e(row.get('rank'))}</td>"
            f"<td>{_e(row.get('backend') or 'eager')}</td><td class=\"mono\">{_e(row.get('grid_source'))}</td>"
            f"<td class=\"num\">{_e(row.get('grid_index_read'))}</td><td class=\"mono\">{_e(row.get('expected_grid'))}</td>"
            f"<td class=\"num\">{_e(row.get('expected_rows'))}</td><td class=\"mono\">{_e(row.get('produced_grid'))}</td>"
            f"<td class=\"num\">{_e(row.get('produced_rows'))}</td><td>{match}</td></tr>"
        )
    return f"<table class=\"kv-images\"><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


def batch_table_html(batch: Batch) -> str:
    """Return a table of the batch's items: grids, feature, deferred backend and resize config."""
    body = []
    for i, item in enumerate(batch.items):
        grids = "; ".join(f"{k}={v}" for k, v in item.grids.items()) or "(none)"
        feature = f"{item.feature.kind} {item.feature.layout} {list(item.feature.shape)} {item.feature.dtype}"
        resize = (item.deferred or {}).get("resize_config")
        resize_text = (f"{resize.get('new_width')}x{resize.get('new_height')} + pad "
                       f"{resize.get('pad_width')}x{resize.get('pad_height')}") if isinstance(resize, dict) else ""
        size = "" if item.original_size is None else f"{item.original_size[0]}x{item.original_size[1]}"
        body.append(
            f"<tr><td class=\"num\">{i}</td><td>{_e(item.label)}</td><td class=\"mono\">{_e(grids)}</td>"
            f"<td class=\"mono\">{_e(feature)}</td><td>{_e(item.backend or 'eager')}</td>"
            f"<td>{'yes' if item.local_preprocessed else 'no'}</td><td class=\"mono\">{_e(size)}</td>"
            f"<td class=\"mono\">{_e(resize_text)}</td></tr>"
        )
    head = ("<tr><th>item</th><th>label</th><th>grids</th><th>feature</th><th>backend</th>"
            "<th>local preprocessed</th><th>original size</th><th>resize_config</th></tr>")
    return f"<table class=\"kv-batch\"><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


def _facts_html(facts: Mapping[str, Any]) -> str:
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts.items() if v not in (None, ""))
    return f"<dl class=\"kv-facts\">{rows}</dl>"


def render_report(
    *,
    verdict: Mapping[str, Any],
    trace_json: Any,
    batch: Batch,
    summary_png: bytes | None = None,
    stepper_html: str = "",
    title: str = "kimi-viz triage",
    facts: Mapping[str, Any] | None = None,
    other_verdicts: Mapping[str, Mapping[str, Any]] | None = None,
    reproduce: str = "",
) -> str:
    """Return the whole report page as a string (self-contained HTML5, no network references)."""
    from . import __version__

    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{_e(title)} — {_e(verdict['outcome'])}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        verdict_html(verdict, heading=title, subtitle=(facts or {}).get("replay", "")),
    ]
    for name, other in (other_verdicts or {}).items():
        parts.append(f"<h2>The same batch under the {_e(name)} code</h2>")
        parts.append(verdict_html(other, heading=f"{name} code"))
    if summary_png:
        parts.append("<h2>Rows: expected against produced</h2><figure>"
                     f"<img alt=\"expected and produced pixel_values rows per image\" src=\"{png_data_uri(summary_png)}\">"
                     "<figcaption>Per replayed rank, each span is one image's rows in that rank's pixel_values "
                     "(rank order): the rows its grid expects above the rows produced, the first divergence "
                     "marked.</figcaption></figure>")
    parts.append("<h2>Every image</h2>")
    parts.append(images_table_html(verdict))
    if stepper_html:
        parts.append("<h2>Step through get_image_feature</h2>")
        parts.append(stepper_html)
    parts.append("<h2>The batch</h2>")
    parts.append(batch_table_html(batch))
    if facts:
        parts.append("<h2>Where it comes from</h2>")
        parts.append(_facts_html(facts))
    if reproduce:
        parts.append(f"<p>Reproduce: <code>{_e(reproduce)}</code></p>")
    parts.append("<h2>Trace</h2><p><button type=\"button\" id=\"kv-show-trace\">Show the trace JSON</button></p>"
                 "<pre id=\"kv-trace-text\" hidden></pre>")
    parts.append(f"<script type=\"application/json\" id=\"kv-trace\">{json_for_script(trace_json)}</script>")
    parts.append(f"<script type=\"application/json\" id=\"kv-verdict-json\">{json_for_script(dict(verdict))}</script>")
    parts.append(f"<script>{SCRIPT}</script>")
    parts.append(f"<footer>Written by kimi-viz {_e(__version__)}. This page is self-contained: it loads "
                 "nothing from disk or network.</footer>\n</body>\n</html>\n")
    return defuse_urls("".join(parts))


def write_report(path: str | Path, **kwargs: Any) -> Path:
    """Write :func:`render_report` to ``path`` (a file, or ``report.html`` inside a folder); return it."""
    path = Path(path)
    if path.is_dir() or not path.suffix:
        path = path / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(**kwargs), encoding="utf-8")
    return path
