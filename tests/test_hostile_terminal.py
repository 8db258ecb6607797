"""Text reaching a terminal: labels, file names and log lines carrying ANSI escapes or newlines are escaped.

A file name such as ``evil\\x1b]0;pwned\\x07\\x1b[2J\\n.png`` or a label with escape sequences used to be
printed raw: it retitled and cleared the terminal and forged lines. Every text output now escapes
control characters inside values (``\\x1b``, ``\\n``), keeps its own line breaks, and never fails on a
stdout that is not UTF-8 (names with undecodable bytes included). :mod:`kimi_viz.terminal` does it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_hostile_support import Case, assert_no_control_characters, check_case, run_cases

from kimi_viz.data import sample_path
from kimi_viz.terminal import escape_value, safe_text

ANSI = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
EVIL_NAME = f"evil{ANSI}\nFAKE LINE.png"
BYTES_NAME = b"caf\xe9-\xff\xfe.png"  # not UTF-8


def image_named(folder: Path, name: str | bytes) -> bytes:
    path = os.path.join(os.fsencode(folder), os.fsencode(name) if isinstance(name, str) else name)
    shutil.copyfile(sample_path("chelsea.png"), path)
    return path


def escaped(*words: str, lines: int | None = None):
    def check(run, folder):
        assert_no_control_characters(run)
        for word in words:
            assert word in run.out + run.err, f"{word!r} not shown: " + run.describe()
        if lines is not None:
            assert len(run.out.splitlines()) == lines, run.describe()

    return check


def label_manifest(folder: Path) -> Path:
    from test_hostile_manifests import manifest

    return manifest(folder, label=f"<b>{ANSI}label\nFAKE: status clean\r")


CASES = [
    Case(
        "missing-file-with-ansi-name",
        lambda f: ["inspect", str(f / EVIL_NAME)],
        words=("\\x1b]0;pwned", "\\n"),
        check=escaped(),
    ),
    Case(
        "image-with-ansi-name",
        lambda f: ["inspect", image_named(f, EVIL_NAME)],
        code=0,
        check=escaped("\\x1b[2J", "\\nFAKE LINE.png", lines=4),
    ),
    Case(
        "image-with-undecodable-name",
        lambda f: ["inspect", image_named(f, BYTES_NAME)],
        code=0,
        check=escaped("\\xe9-\\xff\\xfe"),
    ),
    Case(
        "undecodable-name-on-an-ascii-stdout",
        lambda f: ["inspect", image_named(f, BYTES_NAME)],
        code=0,
        env={"PYTHONIOENCODING": "ascii"},
        check=escaped("\\xe9"),
    ),
    Case(
        "missing-undecodable-name-on-a-latin1-stdout",
        lambda f: ["inspect", os.path.join(os.fsencode(f), BYTES_NAME)],
        env={"PYTHONIOENCODING": "latin-1"},
        words=("\\xff\\xfe.png", "no such file"),
        check=escaped(),
    ),
    Case(
        "json-output-with-ansi-name",
        lambda f: ["inspect", "--json", image_named(f, EVIL_NAME)],
        code=0,
        check=escaped("\\u001b"),
    ),
    Case(
        "explain-text-with-ansi",
        lambda f: ["explain", f"ValueError: Unsupported Kimi-K3 deferred preprocessing backend: {ANSI}gpu"],
        code=0,
        check=escaped("\\x1b"),
    ),
    Case(
        "explain-log-with-ansi",
        lambda f: ["explain", "--file", str(_write(f / "server.log", f"{ANSI}\nKeyError: 'backend'{ANSI}\n".encode()))],
        code=0,
        check=escaped("KeyError: 'backend'", "line 2"),
    ),
    Case(
        "explain-stdin-with-ansi-and-bad-utf8",
        lambda f: ["explain"],
        stdin=f"{ANSI}\xff".encode("latin-1") + b"\xff\n",
        code=1,
        check=escaped(),
    ),
    Case("unknown-scenario-with-ansi", lambda f: ["scenario", "run", f"s1{ANSI}"], words=("\\x1b",), check=escaped()),
    Case(
        "capture-missing-command-with-ansi",
        lambda f: ["capture", "--out", str(f / "c"), "--", f"srv{ANSI}"],
        code=127,
        error_line=True,
        words=("\\x1b",),
        check=escaped(),
    ),
    Case(
        "argparse-error-with-ansi",
        lambda f: ["triage", "m", "--tp", f"2{ANSI}"],
        words=("--tp", "\\x1b"),
        check=escaped(),
    ),
    Case(
        "triage-labels-with-ansi",
        lambda f: ["triage", str(label_manifest(f))],
        code=(0, 1),
        one_line=False,
        check=escaped(),
    ),
    Case(
        "triage-labels-with-ansi-json",
        lambda f: ["triage", "--json", str(label_manifest(f))],
        code=(0, 1),
        one_line=False,
        check=escaped(),
    ),
]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-terminal"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_terminal_text(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)


def test_escape_value_and_safe_text():
    assert escape_value("a\nb\x1b[2J\x07\r\t") == "a\\nb\\x1b[2J\\x07\\r\\t"
    assert safe_text("line 1\nline 2\x1b[31m\tok\r") == "line 1\nline 2\\x1b[31m\tok\\r"
    assert escape_value(os.fsdecode(b"\xff.png")) == "\\xff.png"
    assert escape_value("\u202eevil\u2028x\x9b") == "\\u202eevil\\u2028x\\x9b"
    assert escape_value("plain — ünïcode ✓") == "plain — ünïcode ✓"


def test_every_known_message_contains_a_needle():
    """Every message's own text (not a field, not its optional last sentence) holds a needle, so the skim never
    drops it, and each message's sample line is found by it."""
    from kimi_viz._explain import CAPTURE_KEY, KNOWN_MESSAGES, NEEDLES, explain, needle_of
    from kimi_viz.message_catalogue import BY_KEY

    samples = {known.key: BY_KEY[known.key].sample() for known in KNOWN_MESSAGES if known.key != CAPTURE_KEY}
    samples[CAPTURE_KEY] = "kimi-viz capture: wrote captures/20261129-031502-12345-1 (ValueError: x)"
    assert [k.key for k in KNOWN_MESSAGES if needle_of(k) is None] == []
    for alias in BY_KEY["zero-division"].aliases:  # every text of a message is found, not only its template
        assert [f.message.key for f in explain(alias)] == ["zero-division"]
    found = {key: {f.message.key for f in explain(text)} for key, text in samples.items()}
    assert {key for key, keys in found.items() if key not in keys} == set()
    assert all(any(n in text for n in NEEDLES) for text in samples.values())


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path):
    """`kimi-viz explain --json LOG | head -1`: the pipe closes early; the kit stops quietly with 141."""
    import subprocess
    import sys

    log = tmp_path / "server.log"
    # 2000 distinct capture lines: far more JSON than a pipe buffers, so the writer must meet the close
    log.write_text("".join(f"kimi-viz capture: wrote captures/c-{i} (ValueError: x)\n" for i in range(2000)))
    child = subprocess.Popen(
        [sys.executable, "-m", "kimi_viz", "explain", "--file", str(log), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.read(10)
    child.stdout.close()  # the reader goes away after ten bytes
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 141, err
    assert "Traceback" not in err and err == "", err
