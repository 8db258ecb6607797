"""The kit's tour for a new user: replay the healthy batch and the key failure scenarios, then the load
scenarios (workloads through the scheduler, a chat's second turn among them), then two answers read from what a
user has (a server's log, a checkpoint folder); write a report for each plus the figure gallery, and one
``index.html`` that links everything.

Each single-call scenario folder holds the scenario's manifest (``manifest/``, to practise ``kimi-viz
triage`` on) and the triage outputs (``report.html``, ``summary.png``, ``trace.json`` and ``issue.md``, the
issue body to paste). Each load scenario folder holds what ``kimi-viz scenario run NAME --out DIR`` writes:
``answer.json`` and a ``report.html`` with the forward-pass figure of the pass that decides it. Each input folder
holds its input (``server.log``, the kit's sample log; or ``chat.json`` and ``checkpoint/``, the synthetic demo
checkpoint) and what ``kimi-viz whatif … --server-log server.log --out DIR`` (or ``--chat chat.json
--model-path checkpoint``) writes there. Every page is self-contained and opens from disk.
"""

from __future__ import annotations

import html
import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .data import sample_log
from .files import prepare_folder, write_file
from .manifest import write_manifest
from .report.page import badge_html, page_css
from .request.demo_checkpoint import write_demo_checkpoint
from .request.model_folder import read_model_folder
from .scenarios import DEMO_INPUTS, DEMO_LOAD_SCENARIOS, DEMO_SCENARIOS
from .split.verdict import STATUS_STYLES, Status, Verdict

# The chat the demo tokenizes with the synthetic checkpoint (--model-path) and counts without it: on 0.5.18 at
# attention-TP 2 with a chunk of 512, counting puts both images in pass 1 (they meet in one call and the call
# raises), the tokenized prompt lands rocket.jpg across passes 1-2 and astronaut.png in pass 2 alone (clean).
DEMO_CHAT = {
    "model": "kimi-k3",
    "messages": [
        {"role": "system", "content": "You are Kimi."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do these pictures show?"},
                {"type": "image_url", "image_url": {"url": "rocket.jpg"}},
                {"type": "image_url", "image_url": {"url": "astronaut.png"}},
            ],
        },
    ],
}
LOG_IMAGES = ("chelsea.png", "microaneurysms.png")  # the two requests of the sample log's failing pass
CHAT_DEPLOYMENT = ("--sglang-version", "0.5.18", "--tp", "2", "--chunked-prefill-size", "512")


def _say(message: str) -> None:
    print(message, flush=True)


def run_demo(
    out_dir: str | Path = "demo-out",
    *,
    scenarios: Sequence[str] = (*DEMO_SCENARIOS, *DEMO_LOAD_SCENARIOS, *DEMO_INPUTS),
    gallery: bool = True,
    progress: Callable[[str], None] | None = _say,
) -> Path:
    """Write a report per scenario, the figure gallery and ``index.html`` under ``out_dir``; return the index path.

    ``scenarios`` names single-call scenarios (``kimi_viz.SCENARIOS``), load scenarios (``kimi_viz.LOAD_SCENARIOS``)
    and the answers read from a user's inputs (``DEMO_INPUTS``) alike; the index lists each kind in its own table.
    """
    from ._triage import triage_batch
    from .scenarios.catalogue import get_scenario
    from .scenarios.under_load import LOAD_SCENARIOS

    say = progress or (lambda _message: None)
    out = prepare_folder(out_dir)
    rows = []
    started = time.perf_counter()
    load_names = [name for name in scenarios if name.strip().lower() in LOAD_SCENARIOS]
    input_names = [name.strip() for name in scenarios if name.strip() in DEMO_INPUTS]
    width = max((len(name.strip()) for name in (*scenarios, "gallery")), default=0)
    for name in (name for name in scenarios if name not in load_names and name.strip() not in input_names):
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
    input_rows = [_input_row(name, out, say, width) for name in input_names]
    gallery_index = None
    if gallery:
        from .report.gallery import write_gallery

        t0 = time.perf_counter()
        gallery_index = write_gallery(out / "gallery")[-1]
        figures = len(list((out / "gallery").glob("*.png")))
        say(_progress_line("gallery", f"{figures} figures", time.perf_counter() - t0, width))
    page = _index_html(rows, gallery_index, out, load_rows, input_rows)
    index = write_file(out / "index.html", page.encode("utf-8"))
    reports = len(rows) + len(load_rows) + len(input_rows)
    say(f"wrote {reports} reports in {time.perf_counter() - started:.1f} s; open {index}")
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


@dataclass
class _InputRow:
    """An answer read from a user's inputs: what was asked, the answer, whether it is as expected, the files."""

    name: str
    title: str
    command: str  # the kimi-viz command that asks it again, from the folder the demo ran in
    answer: Any
    matches: bool
    files: list[str]


def _quoted(*words: str | Path) -> str:
    return " ".join(shlex.quote(str(word)) for word in words)


def _from_server_log(folder: Path) -> tuple[Any, str, str, tuple[Status, str | None]]:
    """Ask the sample log's server whether its failing pass's two requests fail: copy the log into ``folder`` and
    replay them on the deployment it describes; return the answer, its title, its command and what is expected."""
    from ._whatif.ask import whatif
    from ._whatif.deployment import DeploymentInput, read_deployment
    from .request.workload import together

    log = write_file(folder / "server.log", sample_log().read_bytes())
    deployment = read_deployment(DeploymentInput(server_log=str(log)))
    assert deployment.sglang_version is not None and deployment.tp_size is not None  # the log names both
    answer = whatif(
        together(list(LOG_IMAGES)),
        sglang_version=deployment.sglang_version,
        tp_size=deployment.tp_size,
        settings=deployment.settings,
        load=deployment.load,
        server=deployment.report,
    )
    title = (
        f"the kit's sample server log ({deployment.report.release}; {deployment.report.tp}): "
        f"{' and '.join(LOG_IMAGES)} as the two requests of its failing pass, on the server it describes"
    )
    command = f"kimi-viz whatif {_quoted(*LOG_IMAGES)} --together --server-log {_quoted(log)}"
    return answer, title, command, (Status.ERROR_REPRODUCED, "Kimi-K3 deferred GPU preprocessing produced wrong grids")


def _chat_with_model_path(folder: Path) -> tuple[Any, str, str, tuple[Status, str | None]]:
    """Ask whether a chat fails when the synthetic checkpoint tokenizes it, and say what counting would have said;
    return the answer, its title, its command and what is expected."""
    from ._whatif.ask import whatif
    from ._whatif.deployment import DeploymentInput, read_deployment
    from .request.chat import read_request

    chat = write_file(folder / "chat.json", (json.dumps(DEMO_CHAT, indent=1) + "\n").encode("utf-8"))
    checkpoint = write_demo_checkpoint(folder / "checkpoint")
    version, tp_size, chunk = CHAT_DEPLOYMENT[1], int(CHAT_DEPLOYMENT[3]), int(CHAT_DEPLOYMENT[5])
    model = read_model_folder(checkpoint)
    deployment = read_deployment(
        DeploymentInput(
            model=model, sglang_version=version, tp_size=tp_size, typed_load={"chunked_prefill_size": chunk}
        )
    )
    answer = whatif(
        read_request(chat),
        sglang_version=version,
        tp_size=tp_size,
        load=deployment.load,
        settings=deployment.settings,
        model=model,
        server=deployment.report,
    )
    counted = whatif(  # the same chat, its text counted: where the chunk cuts it moves
        read_request(chat),
        sglang_version=version,
        tp_size=tp_size,
        load=deployment.load,
        find_fix=False,
        try_flags=False,
    )
    title = (
        f"a chat of two images tokenized by the synthetic Kimi-K3 checkpoint (its special ids are Kimi-K3's, its text "
        f"ids are made up), SGLang {version} at attention-TP {tp_size}, --chunked-prefill-size {chunk}; counted "
        f"instead of tokenized, the same chat is {_status_text(counted.status, counted.error)}"
    )
    command = f"kimi-viz whatif --chat {_quoted(chat)} --model-path {_quoted(checkpoint)} {' '.join(CHAT_DEPLOYMENT)}"
    return answer, title, command, (Status.CLEAN, None)


INPUT_ANSWERS = {"from-server-log": _from_server_log, "chat-model-path": _chat_with_model_path}


def _input_row(name: str, out: Path, say: Callable[[str], None], width: int) -> _InputRow:
    """Ask the question ``name`` reads from a user's input and write its answer and report into ``out/NAME``."""
    from ._whatif.outputs import write_answer

    t0 = time.perf_counter()
    folder = prepare_folder(out / name)
    answer, title, command, (status, message) = INPUT_ANSWERS[name](folder)
    written = write_answer(answer, folder, reproduce=f"{command} --out {_quoted(folder)}", title=f"{name}: {title}")
    matches = answer.status is status and (None if answer.error is None else answer.error.message) == message
    inputs = sorted(p.name for p in folder.iterdir() if p.name in ("server.log", "chat.json"))
    files = [(folder / p).relative_to(out).as_posix() for p in inputs]
    files += [path.relative_to(out).as_posix() for key, path in written.items() if key not in ("text", "report")]
    say(_progress_line(name, _status_text(answer.status, answer.error), time.perf_counter() - t0, width))
    return _InputRow(name, title, command, answer, matches, files)


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


def _input_html(input_rows: Sequence[_InputRow]) -> str:
    """Return the index's third table: the answers read from a server's log and a checkpoint folder."""
    body = []
    for row in input_rows:
        answer = row.answer
        links = " · ".join(f'<a href="{html.escape(f)}">{html.escape(f.rpartition("/")[2])}</a>' for f in row.files)
        body.append(
            f'<tr class="{"" if row.matches else "kv-mismatch"}" data-status="{answer.status.value}">'
            f'<td><a href="{html.escape(row.name)}/report.html">{html.escape(row.name)}</a></td>'
            f"<td>{html.escape(row.title)}<br><code>{html.escape(row.command)}</code></td>"
            f"<td>{badge_html(answer.status)}</td><td>{answer.tp_size}</td>"
            f"<td>{html.escape(answer.release.version)}</td>"
            f"<td><code>{html.escape('—' if answer.error is None else str(answer.error))}</code></td>"
            f"<td>{'yes' if row.matches else 'NO'}</td><td>{links}</td></tr>"
        )
    return (
        "<h2>Your deployment as input: a server's log, a checkpoint folder</h2>\n"
        "<p>Paste your server's command or log: <code>kimi-viz whatif IMAGE... --server-log server.log</code> reads "
        "the release, the attention-TP size and the scheduler's flags and pools from the log's start-up lines "
        "(each value with the line it came from; typed options win over the log, the log over the launch command "
        "<code>--server</code>), and <code>--model-path DIR</code> tokenizes a <code>--chat</code> body with the "
        "checkpoint's own tokenizer instead of counting its text. Each folder holds its input beside the answer.</p>\n"
        "<table><thead><tr><th>answer</th><th>what (the command)</th><th>status</th><th>TP</th><th>release</th>"
        "<th>SGLang raises</th><th>as expected</th><th>files</th></tr></thead>\n"
        "<tbody>\n" + "\n".join(body) + "\n</tbody></table>\n"
    )


def _index_html(
    rows,
    gallery_index: Path | None,
    root: Path,
    load_rows: Sequence[_LoadRow] = (),
    input_rows: Sequence[_InputRow] = (),
) -> str:
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
        + (_input_html(input_rows) if input_rows else "")
        + gallery
        + f"\n<p>Written by kimi-viz {html.escape(__version__)}; every page opens from disk.</p>\n</body>\n</html>\n"
    )
