"""Hostile ``kimi-viz capture`` invocations: a missing or non-executable command, no command, a bad ``--out``.

A command that does not exist exits 127 and one that cannot be executed 126 (the shell's codes), each
with one line ``kimi-viz capture: error: ...`` naming the program and saying what to do; no command
at all exits 2 with the right prefix (it used to print ``kimi-viz []: error``); an output folder that is
a file, lies under a file or is a link exits 2 before anything runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_hostile_support import Case, check_case, run_cases


def out(folder: Path) -> str:
    return str(folder / "captures")


def not_executable(folder: Path) -> str:
    path = folder / "server.sh"
    path.write_text("#!/bin/sh\necho hi\n")
    path.chmod(0o644)
    return str(path)


def a_file(folder: Path) -> Path:
    path = folder / "a-file"
    path.write_text("x")
    return path


def linked(folder: Path) -> str:
    (folder / "real").mkdir()
    os.symlink(folder / "real", folder / "link")
    return str(folder / "link")


CASES = [
    Case(
        "command-not-found",
        lambda f: ["capture", "--out", out(f), "--", "no-such-server-xyz", "--port", "1"],
        code=127,
        error_line=True,
        words=("no-such-server-xyz", "not found", "PATH"),
    ),
    Case(
        "path-not-found",
        lambda f: ["capture", "--out", out(f), "--", str(f / "missing" / "python")],
        code=127,
        error_line=True,
        words=("missing/python", "does not exist"),
    ),
    Case(
        "not-executable",
        lambda f: ["capture", "--out", out(f), "--", not_executable(f)],
        code=126,
        error_line=True,
        words=("server.sh", "not executable", "chmod"),
    ),
    Case(
        "a-folder-as-command",
        lambda f: ["capture", "--out", out(f), "--", str(f)],
        code=126,
        error_line=True,
        words=("is a folder",),
    ),
    Case("no-command", lambda f: ["capture", "--out", out(f)], words=("no command given", "--")),
    Case("only-the-separator", lambda f: ["capture", "--out", out(f), "--"], words=("no command given",)),
    Case("out-is-a-file", lambda f: ["capture", "--out", str(a_file(f)), "--", "true"], words=("--out", "is the file")),
    Case("out-under-a-file", lambda f: ["capture", "--out", str(a_file(f) / "x"), "--", "true"], words=("lies under",)),
    Case("out-is-a-link", lambda f: ["capture", "--out", linked(f), "--", "true"], words=("--out", "symbolic link")),
    Case("no-out", lambda f: ["capture", "--", "true"], words=("--out",)),
    Case("a-command-that-runs", lambda f: ["capture", "--out", out(f), "--", "true"], code=0),
    Case("the-command-exit-code-is-kept", lambda f: ["capture", "--out", out(f), "--", "false"], code=1),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-capture"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_capture(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)
