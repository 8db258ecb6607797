"""The one place the browser tests learn whether a real Chromium can be driven, and how to launch it.

The browser tests use Debian's ``/usr/bin/chromium`` through Playwright and install nothing. When either is
missing they skip with :data:`SKIP_REASON` (one reason, so the run's skip summary counts them together),
unless ``KIMI_VIZ_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets), in which case they fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SKIP_REASON = f"the browser tests need Debian's chromium at {CHROMIUM} and the playwright package"


def sync_playwright_or_skip():
    """Return Playwright's ``sync_playwright``; skip when Chromium or playwright is missing (fail if required)."""
    missing = [] if CHROMIUM.exists() else [f"{CHROMIUM} is missing"]
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("playwright is not installed")
    if missing:
        if os.environ.get("KIMI_VIZ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{SKIP_REASON}, and KIMI_VIZ_REQUIRE_BROWSER=1: {'; '.join(missing)}")
        pytest.skip(SKIP_REASON)
    return sync_playwright
