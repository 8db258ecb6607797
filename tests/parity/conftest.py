"""The real-SGLang lane: runs where the real ``sglang`` imports (``make parity`` builds those venvs).

Elsewhere every test here skips — unless ``KIMI_VIZ_REQUIRE_SGLANG=1`` (``make parity`` sets it),
which turns a missing SGLang into a failure, so the lane can never pass by skipping. Each suite
records what it compared (``lane.record(suite, cases=..., disagreements=...)``); the counts per release
are printed at the end of the run and, with ``KIMI_VIZ_PARITY_REPORT=FILE``, appended to that JSON
file, one object per suite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .lane import COUNTS, RELEASE

REQUIRE = os.environ.get("KIMI_VIZ_REQUIRE_SGLANG") == "1"


ONLY_ON = {"test_encoder_parity.py": "0.5.23"}  # the encoder lane is 0.5.23's own tower


def pytest_collection_modifyitems(config, items):
    if RELEASE is not None:
        other = [item for item in items if ONLY_ON.get(Path(str(item.fspath)).name, RELEASE) != RELEASE]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if item not in other]
        return
    here = Path(__file__).resolve().parent
    mine = [item for item in items if Path(str(item.fspath)).resolve().is_relative_to(here)]
    if REQUIRE and mine:
        raise pytest.UsageError(
            "KIMI_VIZ_REQUIRE_SGLANG=1 but `import sglang` fails in this interpreter; "
            "run the lane with `make parity` (it builds .venv-sglang/<release>)"
        )
    skip = pytest.mark.skip(reason="the real-SGLang lane runs where sglang imports (make parity)")
    for item in mine:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def release() -> str:
    """The installed SGLang release (e.g. "0.5.23")."""
    assert RELEASE is not None
    return RELEASE


def pytest_terminal_summary(terminalreporter):
    if not COUNTS:
        return
    terminalreporter.section(f"real-SGLang lane: SGLang {RELEASE}")
    for entry in COUNTS:
        facts = ", ".join(f"{k} {v}" for k, v in entry.items() if k not in ("release", "suite"))
        terminalreporter.write_line(f"  {entry['suite']:<14} {facts}")
