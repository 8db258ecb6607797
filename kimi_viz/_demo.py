"""The kit's tour for a new user: replay the healthy batch and the key failure scenarios, write a report
for each plus the figure gallery, and one ``index.html`` that links everything.

Each scenario folder holds the scenario's manifest (``manifest/``, to practise ``kimi-viz triage`` on)
and the triage outputs (``report.html``, ``summary.png``, ``trace.json`` and ``issue.md``, the issue
body to paste). Every page is self-contained and opens from disk.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__
from .files import prepare_folder, write_file
from .manifest import write_manifest
from .report.page import badge_html, page_css
from .scenarios import DEMO_SCENARIOS
from .split.verdict import STATUS_STYLES, Verdict


def _say(message: str) -> None:
    print(message, flush=True)


def run_demo(
    out_dir: str | Path = "demo-out",
    *,
    scenarios: Sequence[str] = DEMO_SCENARIOS,
    gallery: bool = True,
    progress: Callable[[str], None] | None = _say,
) -> Path:
    """Write a report per scenario, the figure gallery and ``index.html`` under ``out_dir``; return the index path."""
    from ._triage import triage_batch
    from .scenarios.catalogue import get_scenario

    say = progress or (lambda _message: None)
    out = prepare_folder(out_dir)
    rows = []
    started = time.perf_counter()
    for name in scenarios:
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
        say(f"  {scenario.name:<16} {_outcome_text(verdict):<90.90} {time.perf_counter() - t0:5.1f} s")
    gallery_index = None
    if gallery:
        from .report.gallery import write_gallery

        t0 = time.perf_counter()
        gallery_index = write_gallery(out / "gallery")[-1]
        say(
            f"  {'gallery':<16} {len(list((out / 'gallery').glob('*.png')))} figures{'':<78} "
            f"{time.perf_counter() - t0:5.1f} s"
        )
    index = write_file(out / "index.html", _index_html(rows, gallery_index, out).encode("utf-8"))
    say(f"wrote {len(rows)} reports in {time.perf_counter() - started:.1f} s; open {index}")
    return index


def _outcome_text(verdict: Verdict) -> str:
    """Return the status (symbol and badge, so a silent mismatch never reads as "ok") and the error, if any."""
    style = STATUS_STYLES[verdict.status]
    badge = f"{style.symbol} {style.badge}"
    return badge if verdict.error is None else f"{badge}: {verdict.error}"


def _index_html(rows, gallery_index: Path | None, root: Path) -> str:
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
        "<h1>kimi-viz demo: SGLang's deferred split, healthy and broken</h1>\n"
        "<p>Each row is a batch built from the sample images, replayed step by step the way SGLang's "
        "<code>KimiK3ForConditionalGeneration.get_image_feature</code> runs it. Open a report for the verdict, the "
        "rows expected against the rows produced, and a stepper through every step. Each scenario's manifest "
        "sits next to its report: <code>kimi-viz triage SCENARIO/manifest</code> replays it again.</p>\n"
        "<table><thead><tr><th>scenario</th><th>what</th><th>status</th><th>class</th><th>TP</th><th>replayed as</th>"
        "<th>SGLang raises</th><th>as catalogued</th><th>files</th></tr></thead>\n<tbody>\n"
        + "\n".join(body)
        + "\n</tbody></table>\n"
        + gallery
        + f"\n<p>Written by kimi-viz {html.escape(__version__)}; every page opens from disk.</p>\n</body>\n</html>\n"
    )
