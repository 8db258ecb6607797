"""The kit's tour for a new user: replay the healthy batch and the key failure scenarios, then the load
scenarios (workloads through the scheduler, a chat's second turn among them), write a report for each plus
the figure gallery, and one ``index.html`` that links everything.

Each single-call scenario folder holds the scenario's manifest (``manifest/``, to practise ``kimi-viz
triage`` on) and the triage outputs (``report.html``, ``summary.png``, ``trace.json`` and ``issue.md``, the
issue body to paste). Each load scenario folder holds what ``kimi-viz scenario run NAME --out DIR`` writes:
``answer.json`` and a ``report.html`` with the forward-pass figure of the pass that decides it. Every page
is self-contained and opens from disk.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .files import prepare_folder, write_file
from .manifest import write_manifest
from .report.page import badge_html, page_css
from .scenarios import DEMO_LOAD_SCENARIOS, DEMO_SCENARIOS
from .split.verdict import STATUS_STYLES, Status, Verdict


def _say(message: str) -> None:
    print(message, flush=True)


def run_demo(
    out_dir: str | Path = "demo-out",
    *,
    scenarios: Sequence[str] = (*DEMO_SCENARIOS, *DEMO_LOAD_SCENARIOS),
    gallery: bool = True,
    progress: Callable[[str], None] | None = _say,
) -> Path:
    """Write a report per scenario, the figure gallery and ``index.html`` under ``out_dir``; return the index path.

    ``scenarios`` names single-call scenarios (``kimi_viz.SCENARIOS``) and load scenarios
    (``kimi_viz.LOAD_SCENARIOS``) alike; the index lists each kind in its own table.
    """
    from ._triage import triage_batch
    from .scenarios.catalogue import get_scenario
    from .scenarios.under_load import LOAD_SCENARIOS

    say = progress or (lambda _message: None)
    out = prepare_folder(out_dir)
    rows = []
    started = time.perf_counter()
    load_names = [name for name in scenarios if name.strip().lower() in LOAD_SCENARIOS]
    width = max((len(name.strip()) for name in (*scenarios, "gallery")), default=0)
    for name in (name for name in scenarios if name not in load_names):
        scenario = get_scenario(name)
        t0 = time.perf_counter()
        batch = scenario.build()
        folder = out / scenario.name
        manifest = write_manifest(batch, folder / "manifest")
        result = triage_batch(
            batch,
            out_dir=folder,
            mode="pixels",
            source=str(manifest),
            title=f"{scenario.name}: {scenario.title}",
            reproduce=f"kimi-viz triage {manifest} --out {folder / 'triage'}",
            manifest=manifest,
        )
        verdict = result.verdict
        expected = scenario.expected
        message = None if verdict.error is None else verdict.error.message
        matches = verdict.outcome == expected.outcome and message == (
            None if expected.error is None else expected.error.message
        )
        rows.append((scenario, verdict, matches))
        say(_progress_line(scenario.name, _outcome_text(verdict), time.perf_counter() - t0, width))
    load_rows = [_load_row(name, out, say, width) for name in load_names]
    gallery_index = None
    if gallery:
        from .report.gallery import write_gallery

        t0 = time.perf_counter()
        gallery_index = write_gallery(out / "gallery")[-1]
        figures = len(list((out / "gallery").glob("*.png")))
        say(_progress_line("gallery", f"{figures} figures", time.perf_counter() - t0, width))
    index = write_file(out / "index.html", _index_html(rows, gallery_index, out, load_rows).encode("utf-8"))
    say(f"wrote {len(rows) + len(load_rows)} reports in {time.perf_counter() - started:.1f} s; open {index}")
    return index


@dataclass
class _LoadRow:
    """A load scenario as the demo shows it: its answer, whether it is as catalogued, and the files written."""

    scenario: Any
    answer: Any
    matches: bool
    files: list[str]


def _progress_line(name: str, text: str, seconds: float, width: int) -> str:
    """Return one progress line: the name padded to ``width``, the outcome cut to fit 120 columns, the time."""
    room = max(40, 120 - width - 12)
    return f"  {name:<{width}} {text:<{room}.{room}} {seconds:5.1f} s"


def _load_row(name: str, out: Path, say: Callable[[str], None], width: int) -> _LoadRow:
    """Replay load scenario ``name`` on its own deployment and write its answer and report into ``out/NAME``."""
    from ._whatif.outputs import write_answer
    from ._whatif.under_load import run_load_scenario
    from .scenarios.under_load import get_load_scenario

    t0 = time.perf_counter()
    scenario = get_load_scenario(name)
    answer = run_load_scenario(scenario.name)
    folder = out / scenario.name
    reproduce = f"kimi-viz scenario run {scenario.name} --out {folder}"
    written = write_answer(answer, folder, reproduce=reproduce, title=f"{scenario.name}: {scenario.title}")
    expected = scenario.expected
    matches = answer.status is expected.status and answer.error == expected.error
    files = [path.relative_to(out).as_posix() for key, path in written.items() if key not in ("text", "report")]
    say(_progress_line(scenario.name, _status_text(answer.status, answer.error), time.perf_counter() - t0, width))
    return _LoadRow(scenario, answer, matches, files)


def _outcome_text(verdict: Verdict) -> str:
    """Return the status (symbol and badge, so a silent mismatch never reads as "ok") and the error, if any."""
    return _status_text(verdict.status, verdict.error)


def _status_text(status: Status, error: Any) -> str:
    style = STATUS_STYLES[status]
    badge = f"{style.symbol} {style.badge}"
    return badge if error is None else f"{badge}: {error}"


def _load_html(load_rows: Sequence[_LoadRow]) -> str:
    """Return the index's second table: every load scenario, its answer on its deployment and its files."""
    body = []
    for row in load_rows:
        scenario, answer = row.scenario, row.answer
        links = " · ".join(f'<a href="{html.escape(f)}">{html.escape(f.rpartition("/")[2])}</a>' for f in row.files)
        body.append(
            f'<tr class="{"" if row.matches else "kv-mismatch"}" data-status="{answer.status.value}">'
            f'<td><a href="{html.escape(scenario.name)}/report.html">{html.escape(scenario.name)}</a></td>'
            f"<td>{html.escape(scenario.title)}<br><code>{html.escape(scenario.load.flags())}</code></td>"
            f"<td>{badge_html(answer.status)}</td>"
            f"<td>{html.escape(scenario.scenario_class.value)}</td><td>{scenario.tp_size}</td>"
            f"<td>{html.escape(scenario.sglang_version)}</td>"
            f"<td><code>{html.escape('—' if answer.error is None else str(answer.error))}</code></td>"
            f"<td>{'yes' if row.matches else 'NO'}</td><td>{links}</td></tr>"
        )
    return (
        "<h2>Under load: workloads through the scheduler</h2>\n"
        "<p>Each row is a workload of several requests (or a chat's turns) on one deployment, replayed pass by pass "
        "the way SGLang's scheduler prefills it: which requests share a pass, each one's radix prefix and window, the "
        "embedding cache, one <code>get_image_feature</code> call per pass and the rows spliced onto the pad tokens. "
        "Each report shows the forward pass that decides it. <code>kimi-viz scenario run NAME</code> replays one.</p>\n"
        "<table><thead><tr><th>scenario</th><th>what (scheduler and cache)</th><th>status</th><th>class</th>"
        "<th>TP</th><th>release</th><th>SGLang raises</th><th>as catalogued</th><th>files</th></tr></thead>\n"
        "<tbody>\n" + "\n".join(body) + "\n</tbody></table>\n"
    )


def _index_html(rows, gallery_index: Path | None, root: Path, load_rows: Sequence[_LoadRow] = ()) -> str:
    body = []
    for scenario, verdict, matches in rows:
        div = verdict.divergence
        report = f"{scenario.name}/report.html"
        body.append(
            f'<tr class="{"" if matches else "kv-mismatch"}" data-status="{verdict.status.value}">'
            f'<td><a href="{html.escape(report)}">'
            f"{html.escape(scenario.name)}</a></td><td>{html.escape(scenario.title)}</td>"
            f"<td>{badge_html(verdict.status)}</td>"
            f"<td>{html.escape(div.scenario_class)}{' (silent)' if div.silent else ''}</td>"
            f"<td>{scenario.tp_size}</td><td>{html.escape(verdict.release.label)}</td>"
            f"<td><code>{html.escape('—' if verdict.error is None else str(verdict.error))}</code></td>"
            f"<td>{'yes' if matches else 'NO'}</td>"
            f'<td><a href="{html.escape(scenario.name)}/summary.png">summary.png</a> · '
            f'<a href="{html.escape(scenario.name)}/trace.json">trace.json</a> · '
            f'<a href="{html.escape(scenario.name)}/issue.md">issue.md</a> · '
            f"<code>{html.escape(scenario.name)}/manifest/</code></td></tr>"
        )
    gallery = ""
    if gallery_index is not None:
        link = gallery_index.relative_to(root).as_posix()
        gallery = (
            f'<h2>Figure gallery</h2><p><a href="{html.escape(link)}">The sample images</a>: each on its '
            "patch grid, the packed rows, the rows another preset would expect, and the pixel difference "
            "between the checkpoint and torch paths.</p>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>kimi-viz demo</title>\n<style>{page_css()}</style>\n</head>\n<body>\n"
        "<h1>kimi-viz demo: SGLang's deferred split, healthy and broken, alone and under load</h1>\n"
        "<p>Each row is a batch built from the sample images, replayed step by step the way SGLang's "
        "<code>KimiK3ForConditionalGeneration.get_image_feature</code> runs it. Open a report for the verdict, the "
        "rows expected against the rows produced, and a stepper through every step. Each scenario's manifest "
        "sits next to its report: <code>kimi-viz triage SCENARIO/manifest</code> replays it again.</p>\n"
        "<table><thead><tr><th>scenario</th><th>what</th><th>status</th><th>class</th><th>TP</th><th>replayed as</th>"
        "<th>SGLang raises</th><th>as catalogued</th><th>files</th></tr></thead>\n<tbody>\n"
        + "\n".join(body)
        + "\n</tbody></table>\n"
        + (_load_html(load_rows) if load_rows else "")
        + gallery
        + f"\n<p>Written by kimi-viz {html.escape(__version__)}; every page opens from disk.</p>\n</body>\n</html>\n"
    )
