"""Nothing private in a public issue: ``issue.md`` and the emitted repro name no absolute local path, no user, no host.

The unit tests hold :func:`kimi_viz.report.public_paths.public_path` to its rule (relative below the current
folder, else the name alone; never ``~``, the home folder, the user or the host). The CLI test runs a
triage from a folder named like a home directory (``home/alice-smith/work``) on a manifest beside it
(``home/alice-smith/captures/real-0.5.18-tp4-rank3``), given by its absolute path, and reads every
file a tracker gets; then one from the folder above the manifest, whose "replay it" command must run
as printed.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_viz.report.public_paths import UNNAMED, private_names, public_command, public_path, public_text

MANIFEST = "real-0.5.18-tp4-rank3"


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "kimi_viz", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def _word(name: str) -> re.Pattern[str]:
    """A name as a word of its own (a short user or host name, e.g. ``vm``, is inside many words)."""
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-])")


def _leaks(text: str, root: Path) -> list[str]:
    found = [word for word in (str(root), str(root.resolve()), "alice-smith", "~/") if word in text]
    found += [name for name in {getpass.getuser(), socket.gethostname()} if _word(name).search(text)]
    return found


def test_a_path_below_the_current_folder_stays_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert public_path(tmp_path / "captures" / MANIFEST) == f"captures/{MANIFEST}"
    assert public_path(f"./captures/{MANIFEST}") == f"captures/{MANIFEST}"
    assert public_path(tmp_path) == "."


def test_a_path_elsewhere_is_its_name_alone(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert public_path(tmp_path / "captures" / MANIFEST) == MANIFEST
    assert public_path(f"../captures/{MANIFEST}.zip") == f"{MANIFEST}.zip"
    assert public_path("/") == UNNAMED


def test_the_home_folder_the_user_and_the_host_are_never_named(tmp_path, monkeypatch):
    home = tmp_path / "home" / "alice-smith"
    (home / "captures").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)  # the home folder lies below the current folder
    assert "alice-smith" in private_names()
    assert public_path(home / "captures" / MANIFEST) == MANIFEST
    assert public_path(f"~/captures/{MANIFEST}") == MANIFEST
    assert public_path("~") == UNNAMED
    host = socket.gethostname()
    assert public_path(tmp_path / host / "x") == "x"


def test_commands_and_text_name_their_paths_publicly(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    far = tmp_path / "captures" / "my run"
    command = f"kimi-viz triage {shlex.quote(str(far))} --tp 4 --out={tmp_path / 'out'}"
    assert public_command(command) == "kimi-viz triage 'my run' --tp 4 --out=out"
    assert public_command("kimi-viz whatif a.png --tp 2") == "kimi-viz whatif a.png --tp 2"
    text = f"PRs #35305/#36265  see https://example.org/a and {tmp_path / 'pics' / 'x.png'}"
    assert public_text(text) == "PRs #35305/#36265  see https://example.org/a and x.png"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """``home/alice-smith`` with ``captures/real-0.5.18-tp4-rank3`` (s1-cpu, written by scenario run) and ``work``."""
    home = tmp_path_factory.mktemp("public") / "home" / "alice-smith"
    (home / "work").mkdir(parents=True)
    done = _run(home / "work", "scenario", "run", "s1-cpu", "--manifest-out", f"../captures/{MANIFEST}")
    assert (home / "captures" / MANIFEST / "manifest.json").is_file(), done.stderr
    return home


def test_issue_and_repro_of_a_triage_name_nothing_private(home):
    work = home / "work"
    done = _run(work, "triage", str(home / "captures" / MANIFEST), "--out", "out", "--emit-repro", "repro")
    assert done.returncode == 1, done.stderr  # s1-cpu reproduces the error
    issue = (work / "out" / "issue.md").read_text(encoding="utf-8")
    repro = {path.name: path.read_text(encoding="utf-8") for path in (work / "repro").glob("test_*")}
    assert {Path(name).suffix for name in repro} == {".py", ".json"}
    root = home.parent.parent
    for name, text in {"issue.md": issue, **repro}.items():
        assert _leaks(text, root) == [], name
        assert MANIFEST in text, name
    assert f"replay it: `kimi-viz triage {MANIFEST}`" in issue
    assert f"SGLang repro: `kimi-viz triage {MANIFEST} --emit-repro DIR`" in issue


def test_the_replay_command_runs_from_the_folder_the_triage_ran_in(home):
    done = _run(home, "triage", str(home / "captures" / MANIFEST), "--format", "markdown")
    assert done.returncode == 1, done.stderr
    assert _leaks(done.stdout, home.parent.parent) == []
    command = re.search(r"replay it: `([^`]+)`", done.stdout)
    assert command is not None and command.group(1) == f"kimi-viz triage captures/{MANIFEST}"
    again = _run(home, *shlex.split(command.group(1))[1:], "--json")
    assert again.returncode == 1, again.stderr
