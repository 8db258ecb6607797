"""Every command the kit prints for the user to run runs as printed, from the folder the kit ran in.

The kit prints commands in several places: the under-load hint's ``Check it with: kimi-viz whatif …
--together …`` (or, for a multi-image request, ``printf '%s' '{json}' > pair.json && kimi-viz whatif
--requests pair.json …``), ``issue.md``'s ``replay it`` line and ``report.html``'s ``Reproduce:`` line
(triage, whatif ``--out``), and whatif ``--emit-repro``'s ``run it with: python -m pytest DIR``. Each
test runs the CLI in a fresh interpreter whose current folder is a temporary one holding copies of two
sample images under their own names, takes the command from what the kit printed or wrote, runs it
exactly as printed with ``bash -c`` from the same folder, and checks its exit status and its answer.
``kimi-viz`` and ``python`` are found on ``PATH`` as two small scripts that run this interpreter, since
the virtual environment's scripts may not be on it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_viz.data import images_dir

HANG_S = 120  # a guard against a hang, never a timing assertion
DEPLOYMENT = ["--sglang-version", "0.5.18", "--tp", "2"]
IMAGES = ("chelsea.png", "coffee_palette_transparent.png")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding copies of two sample images under their own names, and ``bin/`` with the shims."""
    work = tmp_path / "work"
    work.mkdir()
    for name in IMAGES:
        shutil.copyfile(images_dir() / name, work / name)
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, run in (("kimi-viz", f'"{sys.executable}" -m kimi_viz'), ("python", f'"{sys.executable}"')):
        script = shims / name
        script.write_text(f'#!/bin/sh\nexec {run} "$@"\n', encoding="utf-8")
        script.chmod(0o755)
    return work


def _env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND")}
    env["PATH"] = f"{folder.parent / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    return env


def _kit(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m kimi_viz ARGV`` in ``folder``."""
    return subprocess.run(
        [sys.executable, "-m", "kimi_viz", *argv],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=_env(folder),
    )


def _run(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` exactly as printed, with bash, in ``folder``."""
    return subprocess.run(
        ["bash", "-c", command], cwd=folder, capture_output=True, text=True, timeout=HANG_S, env=_env(folder)
    )


def _hint(folder: Path, *images: str) -> tuple[str, str]:
    """Return the under-load hint's command for ``images`` on 0.5.18 at TP 2, and the error it names."""
    shown = _kit(folder, "whatif", *images, *DEPLOYMENT)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    found = re.search(r"Check it with: (.+)$", shown.stdout, re.MULTILINE)
    assert found, shown.stdout
    answer = _kit(folder, "whatif", *images, *DEPLOYMENT, "--json")
    under_load = json.loads(answer.stdout)["under_load"]
    assert under_load["command"] == found.group(1)
    return found.group(1), under_load["error"]["message"]


def _check_pair(folder: Path, command: str, error: str) -> None:
    ran = _run(folder, command)
    assert ran.returncode == 1, f"{command}\n{ran.stdout}\n{ran.stderr}"  # whatif: 1, SGLang's error reproduced
    assert error in ran.stdout, ran.stdout


def test_the_hint_for_one_image_by_a_relative_path_runs(folder):
    command, error = _hint(folder, "chelsea.png")
    assert command.startswith("kimi-viz whatif chelsea.png ") and "--together" in command
    _check_pair(folder, command, error)


def test_the_hint_for_a_path_with_a_space_runs(folder):
    (folder / "my photos").mkdir()
    shutil.copyfile(folder / "chelsea.png", folder / "my photos" / "chelsea copy.png")
    command, error = _hint(folder, "my photos/chelsea copy.png")
    assert "'my photos/chelsea copy.png'" in command
    _check_pair(folder, command, error)


def test_the_hint_for_a_multi_image_request_writes_pair_json_and_runs(folder):
    command, error = _hint(folder, *IMAGES[1:], *IMAGES[1:])
    assert command.startswith("printf '%s' ") and "kimi-viz whatif --requests pair.json" in command
    _check_pair(folder, command, error)
    requests = json.loads((folder / "pair.json").read_text(encoding="utf-8"))["requests"]
    assert [r["images"] for r in requests] == [[IMAGES[1], IMAGES[1]], ["astronaut_tiny_20x5.png"]]


def _reproduce_line(report: Path) -> str:
    found = re.search(r"<p>Reproduce: <code>(.*?)</code></p>", report.read_text(encoding="utf-8"), re.DOTALL)
    assert found, report
    return html.unescape(found.group(1))


def _replay_it_line(issue: Path) -> str:
    found = re.search(r"^- replay it: (`+) ?(.*?) ?\1$", issue.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, issue.read_text(encoding="utf-8")
    return found.group(2)


@pytest.mark.parametrize("manifest", ["s1-manifest", "my manifest"], ids=["plain", "space"])
def test_a_triaged_manifest_replays_as_its_issue_and_report_say(folder, manifest):
    wrote = _kit(folder, "scenario", "run", "s1-cpu", "--manifest-out", manifest, "--redact")
    assert wrote.returncode in (0, 1), wrote.stderr
    triaged = _kit(folder, "triage", manifest, "--out", "triage-out", "--format", "json")
    verdict = json.loads(triaged.stdout)
    assert triaged.returncode == 1 and verdict["status"] == "error-reproduced", triaged.stderr
    for command in (
        _replay_it_line(folder / "triage-out" / "issue.md"),
        _reproduce_line(folder / "triage-out" / "report.html"),
    ):
        assert command.startswith("kimi-viz triage "), command
        ran = _run(folder, command + " --format json")
        assert ran.returncode == triaged.returncode, f"{command}\n{ran.stderr}"
        again = json.loads(ran.stdout)
        assert (again["status"], again["error"]) == (verdict["status"], verdict["error"])


def test_whatif_out_reproduce_line_runs(folder):
    asked = _kit(folder, "whatif", "chelsea.png", "coffee_palette_transparent.png", *DEPLOYMENT, "--out", "w-out")
    assert asked.returncode == 1, asked.stderr
    status = re.search(r"^status: .*$", asked.stdout, re.MULTILINE)
    assert status, asked.stdout
    for command in (_reproduce_line(folder / "w-out" / "report.html"), _replay_it_line(folder / "w-out" / "issue.md")):
        assert command == f"kimi-viz whatif chelsea.png coffee_palette_transparent.png {' '.join(DEPLOYMENT)}"
        ran = _run(folder, command)
        assert ran.returncode == asked.returncode, ran.stderr
        assert status.group(0) in ran.stdout


def test_emit_repro_run_it_with_line_runs(folder):
    asked = _kit(folder, "whatif", "chelsea.png", "coffee_palette_transparent.png", *DEPLOYMENT, "--emit-repro", "rep")
    assert asked.returncode == 1, asked.stderr
    found = re.search(r"\(run it with: (.+)\)$", asked.stderr, re.MULTILINE)
    assert found, asked.stderr
    command = found.group(1)
    assert command == "python -m pytest rep"
    ran = _run(folder, command + " -q -p no:cacheprovider")
    try:
        import sglang  # noqa: F401
    except ImportError:
        # The repro needs SGLang (it runs SGLang's own get_image_feature): here it is found and collected,
        # and stops only on the missing module.
        assert ran.returncode == 2 and "No module named 'sglang'" in ran.stdout, ran.stdout
    else:  # pragma: no cover - an SGLang lane
        assert ran.returncode == 1 and " failed" in ran.stdout, ran.stdout  # 0.5.18 at TP 2 raises on this pair


def test_the_hint_for_a_file_named_like_an_option_runs(folder):
    shutil.copyfile(folder / "chelsea.png", folder / "-chelsea.png")
    shown = _kit(folder, "whatif", *DEPLOYMENT, "--", "-chelsea.png")
    assert shown.returncode == 0, shown.stderr
    command = re.search(r"Check it with: (.+)$", shown.stdout, re.MULTILINE).group(1)
    assert command.startswith("kimi-viz whatif ./-chelsea.png ")
    _check_pair(folder, command, "Kimi-K3 deferred GPU preprocessing produced wrong grids")


def test_whatif_out_reproduce_line_keeps_the_operands_after_a_double_dash(folder):
    shutil.copyfile(folder / "chelsea.png", folder / "-chelsea.png")
    asked = _kit(folder, "whatif", *DEPLOYMENT, "--out", "w-out", "--", "-chelsea.png", IMAGES[1])
    assert asked.returncode == 1, asked.stderr
    command = _reproduce_line(folder / "w-out" / "report.html")
    assert command == f"kimi-viz whatif {' '.join(DEPLOYMENT)} -- -chelsea.png {IMAGES[1]}"
    ran = _run(folder, command)
    assert ran.returncode == 1, ran.stderr


DOCS = Path(__file__).resolve().parent.parent
SERVER_LOG_DOCS = ("README.md", "docs/whatif.md")


def _doc_commands(text: str) -> list[str]:
    """Return the commands an indented block of ``text`` prints that read your server (``server.log`` or
    ``--server``): continuation lines joined, a ``$`` prompt and a trailing ``# comment`` dropped. Usage lines
    (``IMAGE...``, ``…``, ``[options]``) and a followed log (``--follow``, which waits for Ctrl-C) are left out."""
    commands, current = [], ""
    for line in text.splitlines():
        if not line.startswith("    "):
            current = ""
            continue
        word = line.strip()
        if current:
            current += " " + word
        elif word.startswith(("kimi-viz ", "$ kimi-viz ")):
            current = word.removeprefix("$ ")
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        command = re.sub(r"\s+#\s.*$", "", current)
        current = ""
        if ("server.log" in command or "--server " in command) and not any(
            mark in command for mark in ("IMAGE", "…", " [", "--follow")
        ):
            commands.append(command)
    return commands


def test_the_docs_commands_that_read_a_server_run_on_the_sample_log(folder):
    """README's and docs/whatif.md's commands on your server's log or launch command run as printed, with the
    kit's sample log as ``server.log`` (a 0.5.18 server at attention-TP 2 that raised)."""
    shutil.copyfile(DOCS / "data" / "logs" / "kimi-k3-0.5.18.log", folder / "server.log")
    commands = [command for doc in SERVER_LOG_DOCS for command in _doc_commands((DOCS / doc).read_text())]
    assert len(commands) >= 8, commands
    assert any("--server-log server.log" in c for c in commands) and any('--server "python' in c for c in commands)
    for command in commands:
        ran = _run(folder, command)
        if command.startswith("kimi-viz explain"):
            assert ran.returncode == 0 and "server:    SGLang 0.5.18" in ran.stdout, f"{command}\n{ran.stderr}"
        else:  # chelsea.png and microaneurysms.png on a 0.5.18 server at attention-TP >= 2: SGLang raises
            assert ran.returncode == 1, f"{command}\n{ran.stdout[-2000:]}\n{ran.stderr}"
            assert "Kimi-K3 deferred GPU preprocessing produced wrong grids" in ran.stdout, command
