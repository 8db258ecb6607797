"""draw_step figures and the Stepper: frames, counts, the static HTML (also in a real browser) and the widget."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest
from matplotlib.axes import Axes

from kimi_viz.errors import ConfigError
from kimi_viz.plots import draw_step
from kimi_viz.scenarios import run_scenario
from kimi_viz.stepper import COLUMNS, Stepper

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def s1():
    return run_scenario("s1-cpu", mode="shapes")


@pytest.fixture(scope="module")
def s1_stepper(s1):
    return Stepper(s1)


def _gids(ax: Axes) -> set[str]:
    return {a.get_gid() for a in ax.figure.findobj() if a.get_gid()}


def test_draw_step_marks_the_divergence_on_the_failing_step(s1):
    ax = draw_step(s1, -1, rank=1)
    gids = _gids(ax)
    assert {"divergence-marker", "divergence-label", "step-text", "expected-label-0", "produced-label-0"} <= gids
    texts = {t.get_gid(): t.get_text() for t in ax.figure.findobj() if hasattr(t, "get_text") and t.get_gid()}
    assert texts["divergence-label"] == "first divergence: image 1 (microaneurysms.png)\nexpected 748 rows, produced 64"
    assert texts["expected-label-0"] == "1: 1×22×34 (row 0)\n748 rows"
    assert texts["produced-label-0"] == "1: 1×8×8\n64 rows"
    assert texts["step-text"].startswith("Step 6 of 6 · §6.6")
    body = "\n".join(t for g, t in texts.items() if g.startswith("step-text"))
    assert "check [FAIL] sum(patch_counts) == pixel_values.shape[0]: expected 812, actual 68" in body
    assert "SGLang raises ValueError: Kimi-K3 deferred feature length does not match image grids" in body


def test_draw_step_without_divergence_and_into_a_given_axes(s1):
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    assert draw_step(s1, 6 - 1, rank=0, ax=ax) is ax             # rank 0: its last step concatenates cleanly
    assert "divergence-marker" not in _gids(ax)
    early = draw_step(s1, 0, rank=1)                             # before assignment: the whole batch
    texts = [t.get_text() for t in early.figure.findobj() if getattr(t, "get_gid", lambda: None)() == "rank-images"]
    assert texts == ["rank 1 materializes images [1, 2]"]


def test_draw_step_refuses_a_missing_step(s1):
    with pytest.raises(ConfigError, match="step 6 does not exist"):
        draw_step(s1, 6, rank=1)
    with pytest.raises(ConfigError, match="rank 3 was not replayed"):
        draw_step(s1, 0, rank=3)


def test_stepper_picks_the_failing_rank_and_makes_one_png_per_step(s1_stepper):
    assert s1_stepper.rank.rank == 1 and len(s1_stepper) == 6
    frames = s1_stepper.frames()
    assert len(frames) == 6 and all(f.startswith(PNG) for f in frames)
    assert len(set(frames)) == 6


def test_stepper_counts_change_from_step_to_step(s1_stepper):
    first, last = s1_stepper.counts(0), s1_stepper.counts(5)
    assert (first["images"], first["expected_rows"], first["produced_rows"]) == (3, 816, None)
    assert (last["images"], last["expected_rows"], last["produced_rows"]) == (2, 812, 68)
    assert (last["check"], last["check_detail"]) == ("FAIL", "expected 812, actual 68")
    assert last["error"] == "ValueError: Kimi-K3 deferred feature length does not match image grids"
    assert s1_stepper.counts(-1) == last
    with pytest.raises(ConfigError):
        s1_stepper.counts(6)


def test_static_html_is_self_contained(s1_stepper):
    page = s1_stepper.to_html()
    assert "http://" not in page and "https://" not in page
    assert len(re.findall(r"data:image/png;base64,", page)) == 6 + 1     # 6 frames in the data, the first in <img>
    for hook in ('class="kv-stepper"', 'input type="range" class="kv-slider"', 'class="kv-prev"',
                 'class="kv-next"', 'class="kv-play"', 'class="kv-counts"', 'class="kv-frame"', 'max="5"'):
        assert hook in page
    assert "<script" in page and "<style>" in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(?!data:)", page)
    ids = re.findall(r'id="(kv-stepper-\d+)"', page + s1_stepper.to_html())
    assert len(set(ids)) == 2                                           # two steppers on a page do not clash


def test_mime_bundle_carries_the_static_fallback(s1_stepper):
    bundle = s1_stepper._repr_mimebundle_()
    assert bundle["text/plain"].startswith("Stepper(rank 1 of TP 2, 6 steps, error)")
    assert "kv-stepper" in bundle["text/html"] and "https://" not in bundle["text/html"]


def test_live_widget_controls_update_the_counts(s1):
    pytest.importorskip("ipywidgets")
    stepper = Stepper(s1)
    box = stepper.widget()
    assert "kv-stepper" in box._dom_classes
    controls, title, counts, image = box.children
    prev_button, slider, next_button, play = controls.children
    assert "kv-slider" in slider._dom_classes and "kv-next" in next_button._dom_classes
    assert "kv-prev" in prev_button._dom_classes and "kv-play" in play._dom_classes
    assert "kv-counts" in counts._dom_classes and "kv-frame" in image._dom_classes
    before = counts.value
    next_button.click()
    assert slider.value == 1 and counts.value != before
    slider.value = 5
    assert "812" in counts.value and "68" in counts.value and image.value == stepper.frame(5)
    prev_button.click()
    assert slider.value == 4


def test_widget_and_static_page_show_the_same_counts(s1):
    pytest.importorskip("ipywidgets")
    stepper = Stepper(s1)
    page = stepper.to_html()
    data = json.loads(re.search(r'<script type="application/json" class="kv-data">(.*?)</script>', page).group(1))
    assert data["counts"] == [stepper.counts(k) for k in range(len(stepper))]    # what the page's script shows

    def cells(markup: str) -> dict[str, str]:
        return dict(re.findall(r'<td class="[\w-]*" data-key="(\w+)">([^<]*)</td>', markup))

    controls, _title, counts, _image = stepper.widget().children
    slider = controls.children[1]
    static_first = cells(page.split("</table>")[0])
    for k, shown in enumerate(data["counts"]):
        slider.value = k
        expected = {key: html.escape("—" if shown[key] is None else str(shown[key])) for key, _ in COLUMNS}
        assert cells(counts.value) == expected
        if k == 0:
            assert static_first == expected
    assert 'class="kv-fail" data-key="check">FAIL<' in counts.value              # step 6 fails in both forms


@pytest.mark.browser
def test_static_stepper_in_a_real_browser(s1_stepper, tmp_path):
    if not CHROMIUM.exists():
        if os.environ.get("KIMI_VIZ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing (KIMI_VIZ_REQUIRE_BROWSER=1)")
        pytest.skip(f"{CHROMIUM} is missing; install Debian's chromium")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    page_file = tmp_path / "stepper.html"
    page_file.write_text("<!doctype html><html><head><meta charset='utf-8'><title>stepper</title></head><body>"
                         + s1_stepper.to_html() + "</body></html>", encoding="utf-8")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
            page.goto(page_file.as_uri())
            counts = page.locator(".kv-counts")
            first = counts.inner_text()
            page.click("button.kv-next")
            assert page.input_value("input.kv-slider") == "1"
            assert counts.inner_text() != first
            page.eval_on_selector("input.kv-slider", "e => { e.value = 5; e.dispatchEvent(new Event('input')); }")
            assert "expected 812, actual 68" in counts.inner_text()
            assert page.locator(".kv-title").inner_text().startswith("Step 6 of 6")
            page.click("button.kv-prev")
            assert page.input_value("input.kv-slider") == "4"
            shot = ROOT / "build" / "static_stepper.png"
            shot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            assert not errors and not requests
        finally:
            browser.close()
