"""The test run ends by naming what it skipped and why, grouped by reason, with the command that enables it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from browser import SKIP_REASON

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

PLANTED = f"""
import pytest


@pytest.mark.parametrize("n", range(3))
def test_browser(n):
    pytest.skip({SKIP_REASON!r})


def test_widgets():
    pytest.importorskip("nosuchmod")


@pytest.mark.skip(reason="the real-SGLang lane runs where sglang imports (make parity)")
def test_lane():
    pass


def test_passes():
    pass
"""


def test_the_run_ends_with_each_skip_reason_its_count_and_the_enabling_command(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_planted.py").write_text(PLANTED, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,  # a hang guard only
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "5 skipped, by reason" in line)
    assert lines[start + 1 : start + 7] == [
        f"3 skipped: {SKIP_REASON}",
        "    to run them: apt-get install -y chromium, and pip install -e '.[dev]' for playwright"
        " (KIMI_VIZ_REQUIRE_BROWSER=1 turns this skip into a failure)",
        "1 skipped: could not import 'nosuchmod': No module named 'nosuchmod'",
        "    to run them: see the reason above",
        "1 skipped: the real-SGLang lane runs where sglang imports (make parity)",
        "    to run them: make parity (a venv per SGLang release under .venv-sglang/)",
    ]
    assert lines[-1].startswith("1 passed, 5 skipped")


def test_a_run_without_skips_says_nothing_more(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0 and "by reason" not in result.stdout
