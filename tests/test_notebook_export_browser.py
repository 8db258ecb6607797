"""An nbconvert HTML export of notebook 03, opened offline in a real browser, has a working static stepper;
where the stepper's script cannot run (a reopened, untrusted notebook), the stepper says how to get one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright_or_skip

from kimi_viz.report.stepper import Stepper
from kimi_viz.scenarios import run_scenario

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.browser


def _export(notebook: str, folder: Path) -> Path:
    """Execute a notebook with nbconvert and return its HTML export (the file a triager would attach)."""
    shutil.copy(ROOT / "notebooks" / f"{notebook}.ipynb", folder / f"{notebook}.ipynb")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            "--execute",
            f"{notebook}.ipynb",
            "--ExecutePreprocessor.timeout=300",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / f"{notebook}.html"


def _name_lines(page) -> list[tuple[str, int]]:
    """Return ``(name, lines it is set on)`` of every verdict fact's name (the label column)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('dl.kv-facts dt')].map(dt => {
            const range = document.createRange();
            range.selectNodeContents(dt);
            const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
            return [dt.innerText, tops.size];
        })"""
    )


@pytest.mark.slow
def test_the_verdict_views_labels_stay_one_line_in_an_nbconvert_export_of_notebook_05(tmp_path):
    """The notebook's own CSS floats <dt>; the verdict view's fact names must not wrap one word per line."""
    sync_playwright = sync_playwright_or_skip()
    export = _export("05_whatif", tmp_path)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(90_000)  # a hang guard only
            page.goto(export.as_uri())
            names = _name_lines(page)
            assert len(names) >= 8, names
            assert [name for name, lines in names if lines != 1] == [], names
            assert "first diverging image" in [name for name, _ in names]
        finally:
            browser.close()


@pytest.mark.slow
def test_the_static_stepper_works_in_an_nbconvert_html_export(tmp_path):
    sync_playwright = sync_playwright_or_skip()
    export = _export("03_deferred_split", tmp_path)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(90_000)  # a hang guard only
            page.route(
                "**/*", lambda route: route.abort() if route.request.url.startswith("http") else route.continue_()
            )  # offline, as a triager opening an attachment
            page.goto(export.as_uri())
            steppers = page.locator(".kv-stepper.kv-static")
            assert steppers.count() == 2  # S1's and S2's
            stepper = steppers.first
            stepper.scroll_into_view_if_needed()
            assert stepper.is_visible()
            assert stepper.locator(".kv-script-note").is_hidden()
            position = stepper.locator(".kv-position")
            assert position.inner_text() == "Step 6 of 6"
            counts = stepper.locator(".kv-counts")
            before = counts.inner_text()
            stepper.locator("button.kv-prev").click()
            assert position.inner_text() == "Step 5 of 6" and counts.inner_text() != before
        finally:
            browser.close()


def test_without_its_script_the_static_stepper_says_how_to_get_a_working_one(tmp_path):
    sync_playwright = sync_playwright_or_skip()
    page_file = tmp_path / "stepper.html"
    page_file.write_text(
        "<!doctype html><meta charset='utf-8'><body>"
        + Stepper(run_scenario("s1-cpu", mode="shapes")).to_html()
        + "</body>",
        encoding="utf-8",
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(java_script_enabled=False).new_page()
            page.set_default_timeout(90_000)  # a hang guard only
            page.goto(page_file.as_uri())
            note = page.locator(".kv-script-note")
            assert note.is_visible()
            assert "Re-run the cell for the live stepper" in note.inner_text()
            assert page.locator("img.kv-frame").is_visible()  # the step shown is still there
        finally:
            browser.close()
