"""A real browser opens a generated ``report.html`` from disk: no console errors, no network, a working stepper.

Uses the system Chromium (``/usr/bin/chromium``) through Playwright; the test installs nothing. Without
Chromium it skips, unless ``KIMI_VIZ_REQUIRE_BROWSER=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimi_viz.manifest import write_manifest
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.triage import triage

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("KIMI_VIZ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing but KIMI_VIZ_REQUIRE_BROWSER=1 (install Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    manifest = write_manifest(SCENARIOS["s1-cpu"].build(), root / "manifest")
    return triage(manifest, out_dir=root / "out", variant="both").outputs["report"]


def test_report_opens_from_disk_and_the_stepper_moves(browser, report):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.resolve().as_uri())
    page.wait_for_load_state("load")

    assert page.title().startswith("kimi-viz triage")
    verdict = page.locator("#kv-verdict").first
    assert "ERROR REPRODUCED" in verdict.inner_text()
    assert "ValueError: Kimi-K3 deferred feature length does not match image grids" in verdict.inner_text()
    # every image rendered (the data: URIs decoded)
    widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
    assert widths and all(w > 0 for w in widths)

    stepper = page.locator(".kv-stepper").first
    counts = stepper.locator(".kv-counts")
    slider = stepper.locator("input.kv-slider")
    first = counts.inner_text()
    first_frame = stepper.locator("img.kv-frame").get_attribute("src")
    stepper.locator("button.kv-next").click()
    second = counts.inner_text()
    assert second != first
    assert "2 of" in second
    last = int(slider.get_attribute("max"))
    slider.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", str(last))
    final = counts.inner_text()
    assert final not in (first, second)
    assert "ValueError" in final              # the last step is where SGLang raises
    assert stepper.locator("img.kv-frame").get_attribute("src") != first_frame

    # the trace JSON is embedded and parses in the page
    ranks = page.evaluate("JSON.parse(document.getElementById('kv-trace').textContent).ranks.length")
    assert ranks == 2
    page.click("#kv-show-trace")
    assert '"outcome": "error"' in page.locator("#kv-trace-text").inner_text()

    BUILD.mkdir(exist_ok=True)
    shot = BUILD / "report_browser.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    assert problems == []
    assert requests and all(url.startswith(("file://", "data:")) for url in requests), requests
    page.close()
