"""Shared fixtures: the golden files and the sample images, found relative to this folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GOLDENS = Path(__file__).resolve().parent / "goldens"
PRESET_OF_GOLDEN_KEY = {"kimi_k3": "kimi-k3", "kimi_k25": "kimi-k25"}


@pytest.fixture(scope="session")
def pixel_goldens() -> dict:
    """The checkpoint and torch-path pixel goldens (tests/goldens/pixel_goldens.json)."""
    return json.loads((GOLDENS / "pixel_goldens.json").read_text())


@pytest.fixture(scope="session")
def resize_goldens() -> dict:
    """The NaViT resize cases (tests/goldens/resize_cases.json)."""
    return json.loads((GOLDENS / "resize_cases.json").read_text())


@pytest.fixture(scope="session")
def sample():
    """Return a function mapping a sample file name to its path."""
    from kimi_viz.data import sample_path

    return sample_path


# ------------------------------------------------------------------------------------------------
# Why tests were skipped: the run ends naming each reason, how many tests it skipped and what enables them.
# ------------------------------------------------------------------------------------------------
DEV_EXTRAS = "pip install -e '.[dev]' (make test installs them into .venv)"
#: (a word the skip reason holds, lower case) -> the command that would run those tests; first match wins.
ENABLE_BY_REASON: tuple[tuple[str, str], ...] = (
    # tests/browser.py's one skip reason, whether Chromium or playwright is the missing half.
    (
        "chromium",
        "apt-get install -y chromium, and pip install -e '.[dev]' for playwright"
        " (KIMI_VIZ_REQUIRE_BROWSER=1 turns this skip into a failure)",
    ),
    ("playwright", DEV_EXTRAS),
    ("ipywidgets", DEV_EXTRAS),
    ("ruff", DEV_EXTRAS),
    ("torch", "make test (its .venv has a CPU torch from constraints/cpu-torch.txt)"),
    ("real-sglang lane", "make parity (a venv per SGLang release under .venv-sglang/)"),
    ("without kimi_viz installed", "run from a venv whose base interpreter does not have kimi_viz installed"),
    ("/proc", "run on Linux"),
)


def skip_reason(report: pytest.TestReport) -> str:
    """Return the reason a skipped test report gives, without pytest's ``Skipped:`` prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return text.removeprefix("Skipped: ").strip() or "no reason given"


def enabling_command(reason: str) -> str:
    """Return the command that would run the tests skipped for ``reason`` (or a pointer to the reason itself)."""
    lowered = reason.lower()
    return next((command for word, command in ENABLE_BY_REASON if word in lowered), "see the reason above")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """End the run by naming what was skipped and why, grouped by reason, with the command that enables it."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts: dict[str, int] = {}
    for report in skipped:
        reason = skip_reason(report)
        counts[reason] = counts.get(reason, 0) + 1
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, by reason")
    for reason, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{count} skipped: {reason}")
        terminalreporter.write_line(f"    to run them: {enabling_command(reason)}")
