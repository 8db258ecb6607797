"""``--out DIR`` for any question: the answer for a tracker, written as a triage writes a captured batch's.

:func:`write_answer` writes ``answer.json`` and, where one ``get_image_feature`` call decides the answer,
that call's ``report.html``, ``summary.png``, ``trace.json`` and ``issue.md`` (with the question's text and,
for a workload, the forward-pass figure of the pass that decides it); otherwise ``answer.txt`` and, for a
workload, ``forward.png`` and a ``report.html`` that shows the answer with that figure, and the answer's own
``issue.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import __version__
from .._triage import TriageResult, write_triage_outputs
from ..answer import Answer
from ..files import prepare_folder, write_file
from ..forward.workload_replay import LoadResult
from ..plots.forward import draw_forward_pass
from ..report.answer_documents import answer_json
from ..report.answer_views import answer_text
from ..report.html import ReportFigure
from ..report.markdown import answer_issue_markdown
from ..report.page import badge_html, defuse_urls, escape, figure_png, json_for_script, page_css, png_data_uri


def _deciding_pass(answer: Answer) -> tuple[LoadResult, int] | None:
    """Return a workload's replay and the index of the pass that decides its answer (the failing one, else the
    last), or None for another question."""
    result = answer.workload
    if result is None or not result.passes:
        return None
    return result, result.failing_pass if result.failing_pass is not None else len(result.passes) - 1


def _forward_figure(answer: Answer) -> ReportFigure | None:
    """Return the forward-pass figure of the pass that decides a workload's answer (its last pass), or None."""
    deciding = _deciding_pass(answer)
    if deciding is None:
        return None
    result, k = deciding
    ax = draw_forward_pass(result.passes[k], title=f"prefill pass {k + 1} of {len(result.plans)}")
    png = figure_png(ax.figure)
    caption = (
        f"Prefill pass {k + 1}: each request's prompt and window, the images of the get_image_feature call, and "
        "the rows spliced onto pad tokens."
    )
    return ReportFigure("The forward pass", caption, png)


def answer_page(answer: Answer, figure: ReportFigure, *, title: str, reproduce: str) -> str:
    """Return a self-contained page for an answer no single call decides: its status and error, the forward-pass
    figure, the answer as the terminal shows it, and the command that replays it."""
    style = answer.style
    error = answer.error
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(style.symbol)} {escape(style.badge)} — {escape(title)}</title>\n"
        f"<style>{page_css()}</style>\n</head>\n<body>\n",
        f'<section class="kv-verdict kv-{answer.status.value}"><h1>{escape(title)}</h1>'
        f"<p>{badge_html(answer.status)}"
        f"{'' if error is None else f'<code class=kv-message>{escape(error)}</code>'}</p>"
        f'<p class="kv-summary">{escape(answer.why)}</p></section>',
        f"<h2>{escape(figure.heading)}</h2><figure>"
        f'<img alt="{escape(figure.caption)}" src="{png_data_uri(figure.png)}">'
        f"<figcaption>{escape(figure.caption)}</figcaption></figure>",
        f"<h2>The question</h2><pre>{escape(answer_text(answer))}</pre>",
        f"<p>Reproduce: <code>{escape(reproduce)}</code></p>" if reproduce else "",
        f'<script type="application/json" id="kv-answer-json">{json_for_script(answer_json(answer))}</script>',
        f"<footer>Written by kimi-viz {escape(__version__)}. This page is self-contained: it loads "
        "nothing from disk or network.</footer>\n</body>\n</html>\n",
    ]
    return defuse_urls("".join(parts))


def write_answer(
    answer: Answer, out_dir: str | os.PathLike, *, reproduce: str, title: str | None = None
) -> dict[str, Path]:
    """Write the answer's files into ``out_dir``; return their paths by name. ``title`` heads the report (default:
    the release and attention-TP size asked)."""
    title = title or f"kimi-viz whatif — SGLang {answer.release.version} at attention-TP {answer.tp_size}"
    out = prepare_folder(out_dir)
    document = json.dumps(answer_json(answer), indent=1, default=str) + "\n"
    written = {"answer": write_file(out / "answer.json", document.encode("utf-8"))}
    figure = _forward_figure(answer)
    trace = answer.call_trace
    if trace is None or answer.verdict is None:
        written["text"] = write_file(out / "answer.txt", (answer_text(answer) + "\n").encode("utf-8"))
        if figure is not None:
            written["forward"] = write_file(out / "forward.png", figure.png)
            page = answer_page(answer, figure, title=title, reproduce=reproduce)
            written["report"] = write_file(out / "report.html", page.encode("utf-8"))
        issue = answer_issue_markdown(answer, reproduce=reproduce, figure=None if figure is None else "forward.png")
        written["issue"] = write_file(out / "issue.md", issue.encode("utf-8"))
        return written
    path = trace.release.code_path
    source = f"whatif on SGLang {answer.release.version}"
    result = TriageResult(
        batch=trace.batch,
        source=source,
        code_path=path,
        traces={path: trace},
        tp_size=trace.tp_size,
        rank=None,
        mode=trace.mode,
        fixes=answer.fixes,
    )
    figures = () if figure is None else (figure,)
    text = answer_text(answer)
    deciding = _deciding_pass(answer)
    forward = None if deciding is None else deciding[0].passes[deciding[1]]
    written.update(
        write_triage_outputs(
            result, out, title=title, reproduce=reproduce, question=text, figures=figures, forward=forward
        )
    )
    return written


__all__ = ["answer_page", "write_answer"]
