"""``report.html``: one self-contained page a triager can attach to an issue.

Top to bottom: the verdict (its status badge, the headline, "N of M ranks fail", the release and
fix release, an amber banner when the capture recorded an error this replay does not raise), the
failing ranks first with healthy ranks summarised, the summary figure, the forward pass around the
call when the capture recorded it ("this call held 2 images from 2 requests", drawn and tabled by
:mod:`.context`), every image with its one
identity (global index, file, source size, mode, backend, thumbnail) and its expected and produced
rows, the stepper, the batch, where it comes from, and the whole trace as embedded JSON
(``<script type="application/json" id="kv-trace">``). CSS and JS are inline and the page
references nothing outside itself, so it opens from disk in any browser, with or without a network.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from .._records import frozen
from ..files import prepare_folder, write_file
from ..plots.palette import color_for
from ..split.batch import Batch
from ..split.verdict import Fixes, Status, Verdict, image_sentence, release_lines
from .context import forward_context_html
from .page import badge_html, defuse_urls, escape, json_for_script, page_css, png_data_uri
from .rows import image_lines

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
MAX_RANK_ROWS = 16


def _error_text(error: Any) -> str:
    return "ok" if error is None else f"{error.type}: {error.message}"


def ranks_html(verdict: Verdict) -> str:
    """Return the ranks table: failing ranks first; more than a few healthy ranks are summarised in one row."""
    failing = [r for r in verdict.ranks if r.outcome == "error"]
    healthy = [r for r in verdict.ranks if r.outcome != "error"]
    rows = [
        f'<tr class="kv-mismatch kv-rank-fail" data-rank="{r.rank}"><td class="num">{r.rank}</td>'
        f'<td class="mono">{escape(r.image_indices)}</td><td class="kv-fail">FAIL</td>'
        f'<td class="mono">{escape(_error_text(r.error))}</td></tr>'
        for r in failing[:MAX_RANK_ROWS]
    ]
    if len(failing) > MAX_RANK_ROWS:
        rows.append(f'<tr><td colspan="4">… {len(failing) - MAX_RANK_ROWS} more failing ranks (trace JSON)</td></tr>')
    if len(healthy) <= 4:
        rows += [
            f'<tr class="kv-rank-ok" data-rank="{r.rank}"><td class="num">{r.rank}</td>'
            f'<td class="mono">{escape(r.image_indices)}</td><td class="kv-pass">ok</td><td>—</td></tr>'
            for r in healthy
        ]
    else:
        numbers = ", ".join(str(r.rank) for r in healthy[:24]) + (" …" if len(healthy) > 24 else "")
        rows.append(
            f'<tr class="kv-rank-ok kv-collapsed"><td colspan="4">{len(healthy)} healthy ranks '
            f"({escape(numbers)}) pass</td></tr>"
        )
    return (
        '<table class="kv-ranks"><thead><tr><th>rank</th><th>image_indices</th><th>outcome</th>'
        f"<th>error</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def verdict_html(verdict: Verdict, *, heading: str, subtitle: str = "", fixes: Fixes | None = None) -> str:
    """Return the verdict block: status badge, headline, ranks (failing first), release (and the fixing release
    from the answer's ``fixes``) and the divergence facts."""
    status = verdict.status
    error = verdict.error
    message = (
        f"<code>{escape(error.type)}: {escape(error.message)}</code>"
        if error
        else "SGLang raises nothing in <code>get_image_feature</code> for this batch."
    )
    banner = ""
    if status is Status.NOT_REPRODUCED and verdict.recorded is not None:
        banner = (
            f'<div class="kv-banner" role="alert" id="kv-not-reproduced"><b>Not reproduced.</b> The capture '
            f"recorded <code>{escape(str(verdict.recorded.error))}</code>, but "
            f"this replay ({escape(verdict.release.label)}) raises nothing. "
            f"{escape(verdict.style.wording)}</div>"
        )
    elif status is Status.RECORDED_OK_REPLAY_FAILS:
        banner = (
            f'<div class="kv-banner" role="alert" id="kv-replay-fails"><b>The capture recorded success.</b> '
            f"{escape(verdict.style.wording)}</div>"
        )
    elif verdict.recorded_differs and verdict.recorded is not None:
        banner = (
            f'<div class="kv-banner" role="alert"><b>A different error.</b> The capture recorded '
            f"<code>{escape(str(verdict.recorded.error))}</code>.</div>"
        )
    div = verdict.divergence
    facts = []

    def fact(name: str, value: Any, mono: bool = False) -> None:
        if value is None or value == "":
            return
        body = f"<code>{escape(value)}</code>" if mono else escape(value)
        facts.append(f"<dt>{escape(name)}</dt><dd>{body}</dd>")

    if div.scenario_class:
        fact("scenario class", f"{div.scenario_class}{' (silent: SGLang raises nothing)' if div.silent else ''}")
    if div.first_image is not None:
        where = f" on rank {div.rank}" if div.rank is not None else ""
        fact("first diverging image", f"{image_sentence(verdict, div.first_image)}{where}")
        fact("rows of that image", f"expected {div.expected_rows}, produced {div.produced_rows}")
        if div.expected_grid is not None or div.produced_grid is not None:
            fact("grids of that image", f"expected {div.expected_grid}, produced {div.produced_grid}", mono=True)
        if div.grid_read_from is not None:
            fact("grid read from", f"the grid of image {div.grid_read_from}, read for image {div.first_image}")
    if div.expected_total is not None or div.produced_total is not None:
        fact("counts", f"expected {div.expected_total} rows, produced {div.produced_total}")
    fact("wrong expectation from", div.wrong_expectation)
    fact("index mapping", div.index_mapping, mono=True)
    fact("why", div.explanation)
    fact("fix", div.fix)
    release = "".join(f'<p class="kv-release">{escape(line)}</p>' for line in release_lines(verdict, fixes))
    return (
        f'<section class="kv-verdict kv-{status.value}" id="kv-verdict" data-status="{status.value}">'
        f"<h1>{badge_html(status)}{escape(heading)}</h1>"
        + banner
        + f'<p class="kv-summary" id="kv-rank-summary">{escape(verdict.rank_summary)}</p>'
        + f'<p class="kv-message">{message}</p>'
        + f'<p class="kv-note">{escape(verdict.style.wording)} (exit code {verdict.exit_code})</p>'
        + release
        + (f'<p class="kv-note">{escape(subtitle)}</p>' if subtitle else "")
        + ranks_html(verdict)
        + (f'<dl class="kv-facts">{"".join(facts)}</dl>' if facts else "")
        + "</section>"
    )


def _thumbnail(batch: Batch, image: int) -> str:
    """Return a 96-px PNG thumbnail of an item's image as an ``<img>``, or "" for features without pixels."""
    from PIL import Image

    feature = batch.items[image].feature
    picture = None
    if feature.image is not None:
        picture = feature.image
    elif (
        feature.tensor is not None
        and feature.layout in ("chw", "hwc")
        and feature.dtype == "uint8"
        and feature.tensor.dim() == 3
    ):
        array = feature.tensor
        array = array.permute(1, 2, 0) if feature.layout == "chw" else array
        if array.shape[-1] in (1, 3, 4) and min(array.shape[0], array.shape[1]) > 0:
            picture = Image.fromarray(
                array[..., :3].squeeze(-1).contiguous().numpy()
                if array.shape[-1] == 1
                else array[..., :3].contiguous().numpy()
            )
    if picture is None or 0 in picture.size:
        return ""
    thumb = picture.convert("RGBA") if picture.mode not in ("RGB", "RGBA", "L") else picture.copy()
    thumb.thumbnail((96, 96))
    buffer = io.BytesIO()
    thumb.save(buffer, format="PNG")
    return f'<img class="kv-thumb" alt="thumbnail of image {image}" src="{png_data_uri(buffer.getvalue())}">'


def images_table_html(verdict: Verdict, batch: Batch | None = None) -> str:
    """Return one row per image: identity (number, file, size, mode, backend, thumbnail), rank, grids and rows."""
    head = (
        "<tr><th>image</th><th></th><th>file / label</th><th>source</th><th>backend</th><th>rank</th>"
        "<th>grid source</th><th>grid row read</th><th>expected grid</th><th>expected rows</th>"
        "<th>produced grid</th><th>produced rows</th><th>match</th></tr>"
    )
    body = []
    for line in image_lines(verdict):
        who, row = line.who, line.row
        thumb = _thumbnail(batch, who.image) if batch is not None else ""
        swatch = f'<span class="kv-swatch" style="background:{color_for(who.image)}"></span>'
        cells = [
            f'<td class="num">{swatch}{who.image}</td>',
            f"<td>{thumb}</td>",
            f"<td>{escape(who.label)}</td>",
            f'<td class="mono">{escape(line.size_text)} {escape(who.mode or "")}</td>',
            f"<td>{escape(who.backend or 'eager')}</td>",
            f'<td class="num">{escape("" if row is None else row.rank)}</td>',
            f'<td class="mono">{escape("" if row is None else row.grid_source)}</td>',
            f'<td class="num">{escape(line.read_text)}</td>',
            f'<td class="mono">{escape("" if row is None else row.expected_grid)}</td>',
            f'<td class="num">{escape("" if row is None else row.expected_rows)}</td>',
            f'<td class="mono">{escape("" if row is None else row.produced_grid)}</td>',
            f'<td class="num">{escape("" if row is None else row.produced_rows)}</td>',
            f"<td>{line.match_text}</td>",
        ]
        body.append(
            f'<tr class="{"kv-mismatch" if line.flagged else ""}" data-image="{who.image}">{"".join(cells)}</tr>'
        )
    return f'<table class="kv-images"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def batch_table_html(batch: Batch) -> str:
    """Return a table of the batch's items: grids, feature, deferred backend and resize config."""
    body = []
    for i, item in enumerate(batch.items):
        grids = "; ".join(f"{k}={v}" for k, v in item.grids.items()) or "(none)"
        feature = item.feature.describe()
        resize = (item.deferred or {}).get("resize_config")
        resize_text = (
            (
                f"{resize.get('new_width')}x{resize.get('new_height')} + pad "
                f"{resize.get('pad_width')}x{resize.get('pad_height')}"
            )
            if isinstance(resize, dict)
            else ""
        )
        size = "" if item.original_size is None else f"{item.original_size[0]}x{item.original_size[1]}"
        body.append(
            f'<tr><td class="num">{i}</td><td>{escape(item.label)}</td><td class="mono">{escape(grids)}</td>'
            f'<td class="mono">{escape(feature)}</td><td>{escape(item.backend or "eager")}</td>'
            f'<td>{"yes" if item.local_preprocessed else "no"}</td><td class="mono">{escape(size)}</td>'
            f'<td class="mono">{escape(resize_text)}</td></tr>'
        )
    head = (
        "<tr><th>image</th><th>label</th><th>grids</th><th>feature</th><th>backend</th>"
        "<th>local preprocessed</th><th>original size</th><th>resize_config</th></tr>"
    )
    return f'<table class="kv-batch"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _table_rows(lines: list[str], start: int) -> int:
    """Return where the text table whose header is ``lines[start]`` ends (its separator next, its rows padded so
    the separator's gaps are spaces), or ``start`` when no table starts there."""
    if start + 1 >= len(lines) or not set(lines[start + 1]) <= {"-", " "} or "-" not in lines[start + 1]:
        return start
    gaps = [k for k, c in enumerate(lines[start + 1]) if c == " "]
    end = start + 2
    while end < len(lines) and lines[end].strip() and all(k >= len(lines[end]) or lines[end][k] == " " for k in gaps):
        end += 1
    return end


def question_html(text: str) -> str:
    """Return the question's text as HTML: its tables in blocks that scroll sideways inside the page, every other
    line wrapped at the page's width (nothing runs off the right edge)."""
    lines, blocks, prose = text.splitlines(), [], []
    k = 0
    while k < len(lines):
        end = _table_rows(lines, k)
        if end == k:
            prose.append(lines[k])
            k += 1
            continue
        if prose:
            blocks.append(f'<pre class="kv-question">{escape(chr(10).join(prose))}</pre>')
            prose = []
        blocks.append(f'<pre class="kv-question-table">{escape(chr(10).join(lines[k:end]))}</pre>')
        k = end
    if prose:
        blocks.append(f'<pre class="kv-question">{escape(chr(10).join(prose))}</pre>')
    return "".join(blocks)


def _facts_html(facts: Mapping[str, Any]) -> str:
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts.items() if v not in (None, ""))
    return f'<dl class="kv-facts">{rows}</dl>'


@frozen
class ReportFigure:
    """A figure the report shows after its summary: a heading, a caption said in words, the PNG bytes."""

    heading: str
    caption: str
    png: bytes


def render_report(
    *,
    verdict: Verdict,
    trace_json: Any,
    batch: Batch,
    summary_png: bytes | None = None,
    stepper_html: str = "",
    title: str = "kimi-viz triage",
    facts: Mapping[str, Any] | None = None,
    reproduce: str = "",
    question: str = "",
    figures: Sequence[ReportFigure] = (),
    fixes: Fixes | None = None,
) -> str:
    """Return the whole report page as a string (self-contained HTML5, no network references).

    ``question`` is a what-if's answer as the terminal shows it (the call is part of a larger question);
    ``figures`` are more figures after the summary (a workload's forward pass); ``fixes`` the answer's fix
    search by code path.
    """
    style = verdict.style
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(style.symbol)} {escape(style.badge)} — {escape(title)}</title>\n"
        f"<style>{page_css()}</style>\n</head>\n<body>\n",
        verdict_html(verdict, heading=title, subtitle=(facts or {}).get("replay", ""), fixes=fixes),
    ]
    for name, other in verdict.code_paths.items():
        parts.append(f"<h2>The same batch under the {escape(name)} code path</h2>")
        parts.append(verdict_html(other, heading=f"{name} code path", fixes=fixes))
    if summary_png:
        parts.append(
            "<h2>Rows: expected against produced</h2><figure>"
            f'<img alt="the verdict, and expected against produced pixel_values rows of the failing ranks" '
            f'src="{png_data_uri(summary_png)}">'
            "<figcaption>The verdict, then the failing ranks first: each span is one image's rows in that "
            "rank's pixel_values, numbered and coloured by global image, the rows its grid expects above "
            "the rows produced, the first divergence marked.</figcaption></figure>"
        )
    for figure in figures:
        parts.append(
            f"<h2>{escape(figure.heading)}</h2><figure>"
            f'<img alt="{escape(figure.caption)}" src="{png_data_uri(figure.png)}">'
            f"<figcaption>{escape(figure.caption)}</figcaption></figure>"
        )
    if question:
        parts.append(f"<h2>The question</h2>{question_html(question)}")
    if batch.forward_context is not None:
        parts.append(forward_context_html(batch.forward_context, verdict.divergence.first_image))
    parts += ["<h2>Every image</h2>", images_table_html(verdict, batch)]
    if stepper_html:
        parts += ["<h2>Step through get_image_feature</h2>", stepper_html]
    parts += ["<h2>The batch</h2>", batch_table_html(batch)]
    if facts:
        parts += ["<h2>Where it comes from</h2>", _facts_html(facts)]
    if reproduce:
        parts.append(f"<p>Reproduce: <code>{escape(reproduce)}</code></p>")
    parts.append(
        '<h2>Trace</h2><p><button type="button" id="kv-show-trace">Show the trace JSON</button></p>'
        '<pre id="kv-trace-text" hidden></pre>'
    )
    parts.append(f'<script type="application/json" id="kv-trace">{json_for_script(trace_json)}</script>')
    parts.append(
        f'<script type="application/json" id="kv-verdict-json">{json_for_script(verdict.to_json(fixes))}</script>'
    )
    parts.append(f"<script>{SCRIPT}</script>")
    parts.append(
        f"<footer>Written by kimi-viz {escape(__version__)}. This page is self-contained: it loads "
        "nothing from disk or network.</footer>\n</body>\n</html>\n"
    )
    return defuse_urls("".join(parts))


def write_report(path: str | Path, **kwargs: Any) -> Path:
    """Write :func:`render_report` to ``path`` (a file, or ``report.html`` inside a folder); return it."""
    path = Path(path)
    if path.is_dir() or not path.suffix:
        path = path / "report.html"
    prepare_folder(path.parent)
    return write_file(path, render_report(**kwargs).encode("utf-8"))


__all__ = [
    "ReportFigure",
    "render_report",
    "write_report",
    "verdict_html",
    "ranks_html",
    "images_table_html",
    "batch_table_html",
]
