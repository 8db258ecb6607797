"""draw_step figures and the Stepper: frames, counts, the static HTML (also in a real browser) and the widget."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright_or_skip
from matplotlib.axes import Axes

from kimi_viz.errors import ConfigError
from kimi_viz.plots import draw_step
from kimi_viz.report.stepper import COUNT_ROWS, FRAME_DPI, Stepper
from kimi_viz.scenarios import run_scenario

ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"
LENGTH = "Kimi-K3 deferred feature length does not match image grids"


@pytest.fixture(scope="module")
def s1():
    return run_scenario("s1-cpu", mode="shapes")


@pytest.fixture(scope="module")
def s1_stepper(s1):
    return Stepper(s1)


def _gids(ax: Axes) -> set[str]:
    return {a.get_gid() for a in ax.figure.findobj() if a.get_gid()}


def _texts(ax: Axes) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for t in ax.figure.findobj() if hasattr(t, "get_text") and t.get_gid()}


def test_draw_step_marks_the_divergence_on_the_failing_step(s1):
    ax = draw_step(s1, -1, rank=1)
    gids = _gids(ax)
    assert {"divergence-marker", "divergence-label", "step-text", "expected-label-0", "produced-label-0"} <= gids
    texts = _texts(ax)
    assert texts["divergence-label"] == "first divergence: image 1 (microaneurysms.png)\nexpected 748 rows, produced 64"
    assert texts["expected-label-0"] == "1: 1×22×34 (grid of image 0)\n748 rows"
    assert texts["produced-label-0"] == "1: 1×8×8\n64 rows"
    assert texts["step-text"].startswith("Step 6 of 6 · §6.6")
    assert "SGLang 0.5.18 (pre-fix path)" in texts["step-text"]
    body = "\n".join(t for g, t in texts.items() if g.startswith("step-text"))
    assert "check [FAIL] sum(patch_counts) == pixel_values.shape[0]: expected 812, actual 68" in body
    assert f"SGLang raises ValueError: {LENGTH}" in body


def test_the_wrong_read_is_drawn_at_the_grouping_step(s1):
    grouping = _texts(draw_step(s1, 3, rank=1, text=False))
    assert grouping["expected-label-0"] == "1: 1×22×34 (grid of image 0)\n748 rows"
    selecting = _texts(draw_step(s1, 2, rank=1, text=False))
    assert selecting["expected-label-0"] == "1: 1×8×8\n64 rows"


def test_stepper_frames_have_no_text_and_readable_fonts(s1):
    ax = draw_step(s1, -1, rank=1, text=False)
    assert not any(g.startswith("step-text") for g in _gids(ax))
    sizes = [t.get_fontsize() for t in ax.figure.findobj() if hasattr(t, "get_fontsize") and t.get_text()]
    assert min(sizes) * FRAME_DPI / 72 >= 12.0  # >= 12 px in the PNG, >= 10 px at the smallest shown width


def test_draw_step_without_divergence_and_into_a_given_axes(s1):
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    assert draw_step(s1, 6 - 1, rank=0, ax=ax) is ax  # rank 0: its last step concatenates cleanly
    assert "divergence-marker" not in _gids(ax)
    early = draw_step(s1, 0, rank=1)  # before assignment: the whole batch
    texts = [t.get_text() for t in early.figure.findobj() if getattr(t, "get_gid", lambda: None)() == "rank-images"]
    assert texts == ["rank 1 materializes images [1, 2]"]


def test_draw_step_refuses_a_missing_step(s1):
    with pytest.raises(ConfigError, match="step 6 does not exist"):
        draw_step(s1, 6, rank=1)
    with pytest.raises(ConfigError, match="rank 3 was not replayed"):
        draw_step(s1, 0, rank=3)


def test_stepper_picks_the_failing_rank_opens_at_the_failing_step_and_makes_one_png_per_step(s1_stepper):
    assert s1_stepper.rank.rank == 1 and len(s1_stepper) == 6
    assert s1_stepper.start == 6  # the length check raises at step 6 of 6
    frames = s1_stepper.frames()
    assert len(frames) == 6 and all(f.startswith(PNG) for f in frames)
    # The figure changes where the rows change (the text beside it changes at every step): the grouping
    # step draws the wrong read, preprocessing the produced rows.
    assert frames[0] == frames[1]  # both show the whole batch's declared rows
    assert len({frames[1], frames[2], frames[3], frames[4]}) == 4
    healthy = Stepper(run_scenario("healthy-tp2", mode="shapes"))
    assert healthy.start == 1


def test_stepper_heading_says_rank_release_and_fail(s1_stepper):
    assert s1_stepper.heading == f"Rank 1 of attention-TP 2, SGLang 0.5.18 (pre-fix path): FAIL — ValueError: {LENGTH}"
    assert 'class="kv-fail" style="color:#B34000;font-weight:700">FAIL</span>' in s1_stepper.heading_html()


def test_stepper_counts_change_from_step_to_step(s1_stepper):
    first, last = s1_stepper.counts(0), s1_stepper.counts(5)
    assert (first["images"], first["expected_rows"], first["produced_rows"]) == (3, 816, None)
    assert (last["images"], last["expected_rows"], last["produced_rows"]) == (2, 812, 68)
    assert (last["check"], last["check_detail"]) == ("FAIL", "expected 812, actual 68")
    assert last["error"] == f"ValueError: {LENGTH}"
    assert (first["position"], last["position"]) == ("Step 1 of 6", "Step 6 of 6")
    assert s1_stepper.counts(-1) == last
    with pytest.raises(ConfigError):
        s1_stepper.counts(6)


def test_variables_are_html_text_beside_the_figure(s1_stepper):
    grouping = s1_stepper.vars_html(3)
    assert '<th scope="row">backend_groups</th>' in grouping
    assert "grid_rows_read: [0, 1]" in grouping
    check = s1_stepper.vars_html(5)
    assert 'color:#B34000;font-weight:700">FAIL</span> sum(patch_counts) == pixel_values.shape[0]' in check


def test_static_html_is_self_contained_and_opens_at_the_failing_step(s1_stepper):
    page = s1_stepper.to_html()
    assert "http://" not in page and "https://" not in page
    assert len(re.findall(r"data:image/png;base64,", page)) == 6 + 1  # 6 frames in the data, the shown one in <img>
    for hook in (
        'class="kv-stepper',
        'input type="range" class="kv-slider" min="1" max="6"',
        'value="6"',
        'class="kv-prev"',
        'class="kv-next"',
        'class="kv-play"',
        'class="kv-counts"',
        'class="kv-frame"',
        'class="kv-vars"',
        '<span class="kv-position">Step 6 of 6</span>',
        'class="kv-script-note"',
    ):
        assert hook in page
    assert "<script" in page and "<style>" in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(?!data:)", page)
    ids = re.findall(r'id="(kv-stepper-\d+)"', page + s1_stepper.to_html())
    assert len(set(ids)) == 2  # two steppers on a page do not clash


def test_mime_bundle_carries_the_static_stepper(s1_stepper):
    bundle = s1_stepper._repr_mimebundle_()
    assert bundle["text/plain"].startswith("Stepper(rank 1 of TP 2, 6 steps, error)")
    assert "kv-stepper" in bundle["text/html"] and "https://" not in bundle["text/html"]


def test_live_widget_controls_update_the_counts(s1):
    pytest.importorskip("ipywidgets")
    stepper = Stepper(s1)
    box = stepper.widget()
    assert {"kv-stepper", "kv-live"} <= set(box._dom_classes)
    heading, controls, title, body, image = box.children
    counts, variables = body.children
    prev_button, slider, next_button, play, position = controls.children
    assert "kv-slider" in slider._dom_classes and "kv-next" in next_button._dom_classes
    assert "kv-prev" in prev_button._dom_classes and "kv-play" in play._dom_classes
    assert (
        "kv-counts" in counts._dom_classes and "kv-frame" in image._dom_classes and "kv-vars" in variables._dom_classes
    )
    assert (slider.min, slider.max, slider.value) == (1, 6, 6)  # counts from 1, opens where it fails
    assert position.value == "<b>Step 6 of 6</b>" and "FAIL" in heading.value
    before = counts.value
    prev_button.click()
    assert slider.value == 5 and counts.value != before and position.value == "<b>Step 5 of 6</b>"
    slider.value = 6
    assert "812" in counts.value and "68" in counts.value and image.value == stepper.frame(5)
    next_button.click()
    assert slider.value == 6


def test_widget_and_static_page_show_the_same_counts(s1):
    pytest.importorskip("ipywidgets")
    stepper = Stepper(s1)
    page = stepper.to_html()
    data = json.loads(re.search(r'<script type="application/json" class="kv-data">(.*?)</script>', page).group(1))
    assert [step["counts"] for step in data["steps"]] == [stepper.counts_html(k) for k in range(len(stepper))]

    def cells(markup: str) -> dict[str, str]:
        return dict(re.findall(r'<td class="[\w-]*" data-key="(\w+)" style="[^"]*">([^<]*)</td>', markup))

    _heading, controls, _title, body, _image = stepper.widget().children
    counts = body.children[0]
    slider = controls.children[1]
    for k in range(len(stepper)):
        slider.value = k + 1
        shown = stepper.counts(k)
        expected = {key: html.escape("—" if shown[key] is None else str(shown[key])) for key, _ in COUNT_ROWS}
        assert cells(counts.value) == expected
    assert 'class="kv-fail" data-key="check" style="color:#B34000;font-weight:700">FAIL<' in counts.value


SMALLEST_FONT_JS = """root => {
  let smallest = 1e9;
  for (const el of root.querySelectorAll('*')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || el.offsetParent === null) continue;
    smallest = Math.min(smallest, parseFloat(getComputedStyle(el).fontSize));
  }
  return smallest;
}"""


@pytest.mark.browser
def test_static_stepper_in_a_real_browser(s1_stepper, tmp_path):
    sync_playwright = sync_playwright_or_skip()
    page_file = tmp_path / "stepper.html"
    page_file.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>stepper</title></head><body>"
        + s1_stepper.to_html()
        + "</body></html>",
        encoding="utf-8",
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(90_000)  # a hang guard only
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
            page.goto(page_file.as_uri())
            root = page.locator(".kv-stepper")
            assert page.locator(".kv-script-note").is_hidden()  # the script ran
            assert page.input_value("input.kv-slider") == "6"  # opens at the failing step
            assert page.locator(".kv-position").inner_text() == "Step 6 of 6"
            counts = page.locator(".kv-counts")
            assert "expected 812, actual 68" in counts.inner_text()
            fail = page.locator('.kv-counts td[data-key="check"]')
            assert fail.inner_text() == "FAIL" and fail.evaluate("e => getComputedStyle(e).color") == "rgb(179, 64, 0)"
            page.click("button.kv-prev")
            assert page.input_value("input.kv-slider") == "5"
            assert page.locator(".kv-position").inner_text() == "Step 5 of 6"
            page.eval_on_selector("input.kv-slider", "e => { e.value = 1; e.dispatchEvent(new Event('input')); }")
            assert page.locator(".kv-title").inner_text().startswith("§6.1")
            assert root.evaluate(SMALLEST_FONT_JS) >= 10
            frame = page.locator("img.kv-frame").bounding_box()
            assert frame["width"] >= 760  # shown at >= 0.8 of its 950 px: text >= 10 px
            box = root.bounding_box()
            assert box["y"] + box["height"] <= 900 and box["x"] + box["width"] <= 1440
            shot = ROOT / "build" / "static_stepper.png"
            shot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            assert not errors and not requests
        finally:
            browser.close()


@pytest.mark.parametrize("name", ["s1-cpu", "s2-gpu", "healthy-tp2", "s4-gpu", "s9-two-grids"])
def test_steps_that_share_a_frame_draw_the_same_picture(name):
    """The stepper renders one PNG per distinct picture; rendering every step on its own gives the
    same bytes for steps with the same drawing key, and different bytes for different keys."""
    from kimi_viz.plots.steps import draw_step, step_drawing_key
    from kimi_viz.report.page import figure_png
    from kimi_viz.scenarios import run_scenario

    trace = run_scenario(name, mode="shapes")
    stepper = Stepper(trace)
    rank = stepper.rank.rank
    alone = [
        figure_png(draw_step(trace, k, rank=rank, text=False).figure, dpi=stepper.dpi) for k in range(len(stepper))
    ]
    keys = [step_drawing_key(trace, k, rank=rank) for k in range(len(stepper))]
    assert stepper.frames() == alone
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            assert (keys[i] == keys[j]) == (alone[i] == alone[j]), (name, i, j)
