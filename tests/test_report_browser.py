"""A real browser opens a generated ``report.html`` from disk: no console errors, no network, a working stepper.

Uses the system Chromium (``/usr/bin/chromium``) through Playwright; the test installs nothing. Without
Chromium it skips, unless ``KIMI_VIZ_REQUIRE_BROWSER=1`` (CI) makes that a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright_or_skip
from test_plots import _text_boxes

from kimi_viz._triage import triage
from kimi_viz.manifest import write_manifest
from kimi_viz.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    sync_playwright = sync_playwright_or_skip()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    manifest = write_manifest(SCENARIOS["s1-cpu"].build(), root / "manifest")
    return triage(manifest, out_dir=root / "out", code_path="both").outputs["report"]


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(90_000)  # a hang guard only: a busy machine renders slowly, never wrongly
    problems: list[str] = []
    requests: list[str] = []
    page.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, problems, requests


def test_report_opens_from_disk_and_the_stepper_moves(browser, report):
    page, problems, requests = _open(browser, report)
    assert page.title() == "✗ ERROR REPRODUCED — kimi-viz triage — SGLang 0.5.18 (pre-fix path)"
    verdict = page.locator("#kv-verdict").first
    assert "ERROR REPRODUCED" in verdict.inner_text()
    assert "ValueError: Kimi-K3 deferred feature length does not match image grids" in verdict.inner_text()
    # every image rendered (the data: URIs decoded)
    widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
    assert widths and all(w > 0 for w in widths)

    stepper = page.locator(".kv-stepper").first
    counts = stepper.locator(".kv-counts")
    slider = stepper.locator("input.kv-slider")
    assert slider.input_value() == slider.get_attribute("max")  # opens at the step that raises
    last = counts.inner_text()
    assert "ValueError" in last
    last_frame = stepper.locator("img.kv-frame").get_attribute("src")
    stepper.locator("button.kv-prev").click()
    before = counts.inner_text()
    assert before != last and stepper.locator(".kv-position").inner_text() == "Step 5 of 6"
    slider.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", "1")
    first = counts.inner_text()
    assert first not in (last, before)
    assert stepper.locator("img.kv-frame").get_attribute("src") != last_frame

    # the trace JSON is embedded and parses in the page
    ranks = page.evaluate("JSON.parse(document.getElementById('kv-trace').textContent).trace.ranks.length")
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


# --- one status each, told the same way -----------------------------------------------------------------
def _with_recording(name: str, outcome: str) -> object:
    from kimi_viz.split.batch import RecordedOutcome
    from kimi_viz.split.cause import ErrorInfo

    batch = SCENARIOS[name].build()
    if outcome == "error":
        error = SCENARIOS[name].expected.error
        batch.recorded = RecordedOutcome(
            "error", error or ErrorInfo("ValueError", "Kimi-K3 deferred feature length does not match image grids")
        )
    else:
        batch.recorded = RecordedOutcome("ok")
    return batch


STATUS_CASES = {
    # status: (manifest batch, triage options)
    "clean": (lambda: SCENARIOS["healthy-tp2"].build(), {}),
    "error-reproduced": (lambda: SCENARIOS["s1-cpu"].build(), {}),
    "silent-mismatch": (lambda: SCENARIOS["s4-gpu"].build(), {}),
    # a pre-fix capture that raised, replayed as a post-fix release: the amber case
    "not-reproduced": (lambda: _with_recording("s1-cpu", "error"), {"sglang_version": "0.5.23"}),
    # a capture that recorded success whose replay raises
    "recorded-ok-replay-fails": (lambda: _with_recording("s2-cpu", "ok"), {}),
}


@pytest.fixture(scope="module")
def status_reports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("statuses")
    out = {}
    for status, (build, options) in STATUS_CASES.items():
        manifest = write_manifest(build(), root / status / "manifest")
        result = triage(manifest, out_dir=root / status / "out", mode="shapes", **options)
        assert result.verdict.status.value == status
        out[status] = result.outputs["report"]
    return out


def _rgb(hex_color: str) -> str:
    r, g, b = (int(hex_color[k : k + 2], 16) for k in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


@pytest.mark.parametrize("status", list(STATUS_CASES))
def test_each_status_has_its_badge_text_and_colour(browser, status_reports, status):
    from kimi_viz.split.verdict import STATUS_STYLES, Status

    style = STATUS_STYLES[Status(status)]
    page, problems, _ = _open(browser, status_reports[status])
    badge = page.locator("#kv-verdict .kv-badge").first
    assert badge.inner_text().strip() == f"{style.symbol} {style.badge}"
    assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == _rgb(style.color)
    assert badge.evaluate("e => getComputedStyle(e).color") == _rgb(style.text_color)
    assert page.title().startswith(f"{style.symbol} {style.badge}")
    banner = page.locator("#kv-not-reproduced")
    if status == "not-reproduced":
        assert banner.is_visible()
        assert (
            "The capture recorded ValueError: Kimi-K3 deferred feature length does not match image grids"
            in banner.inner_text()
        )
        assert banner.evaluate("e => getComputedStyle(e).borderTopColor") == _rgb("#E69F00")
        assert banner.bounding_box()["y"] < 300  # in the first screen, above everything else
    else:
        assert banner.count() == 0
    if status == "recorded-ok-replay-fails":
        assert page.locator("#kv-replay-fails").is_visible()
    assert problems == []
    page.close()


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    """S1's three images at attention-TP 4 on 0.5.18: ranks 1 and 2 read another image's grid; 0 and 3 pass."""
    root = tmp_path_factory.mktemp("tp4")
    manifest = write_manifest(SCENARIOS["s1-cpu"].build(), root / "manifest")
    return triage(manifest, out_dir=root / "out", tp=4, rank="all", sglang_version="0.5.18").outputs["report"]


def test_failing_ranks_first_and_one_numbering_for_images(browser, four_ranks):
    page, problems, _ = _open(browser, four_ranks)
    assert page.locator("#kv-rank-summary").inner_text() == "2 of 4 ranks fail"
    rows = page.locator("table.kv-ranks tbody tr")
    assert rows.nth(0).get_attribute("data-rank") == "1" and rows.nth(1).get_attribute("data-rank") == "2"
    assert "FAIL" in rows.nth(0).inner_text()
    facts = page.locator("#kv-verdict dl.kv-facts").inner_text()
    assert "image 1 (microaneurysms.png; 102×102 L, cpu backend) on rank 1" in facts
    assert "the grid of image 0, read for image 1" in facts
    table_row = page.locator('table.kv-images tr[data-image="1"]')
    assert "microaneurysms.png" in table_row.inner_text() and "kv-mismatch" in table_row.get_attribute("class")
    assert table_row.locator("img.kv-thumb").count() == 1
    # the stepper (the first failing rank) names the same image number in its HTML text
    assert "Rank 1 of attention-TP 4" in page.locator(".kv-stepper .kv-heading").inner_text()
    assert problems == []
    page.close()


@pytest.fixture(scope="module")
def workload_report(tmp_path_factory) -> Path:
    from kimi_viz.cli import main

    out = tmp_path_factory.mktemp("workload") / "out"
    argv = ["whatif", "astronaut_tiny_20x5.png", "rocket.jpg", "--together", "--sglang-version", "0.5.18"]
    assert main([*argv, "--tp", "2", "--out", str(out)]) == 1  # S14: the two grids differ on 0.5.18
    return out / "report.html"


def test_a_workload_reports_question_and_its_calls_label_show_whole(browser, workload_report):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(workload_report.as_uri())
    # nothing runs off the page's right edge: the prose wraps, each table scrolls inside the page
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    blocks = page.evaluate(
        """() => Array.from(document.querySelectorAll('pre.kv-question, pre.kv-question-table')).map(e => ({
            cls: e.className, right: e.getBoundingClientRect().right, scroll: e.scrollWidth, client: e.clientWidth,
            overflow: getComputedStyle(e).overflowX, text: e.innerText }))"""
    )
    assert {b["cls"] for b in blocks} == {"kv-question", "kv-question-table"}
    assert all(b["right"] <= 1280 for b in blocks)
    assert all(b["scroll"] <= b["client"] for b in blocks if b["cls"] == "kv-question")
    assert all(b["overflow"] == "auto" for b in blocks if b["cls"] == "kv-question-table")
    text = "\n".join(b["text"] for b in blocks)
    # the whole question is there, its longest line included (the flag search's)
    assert "no single scheduler flag changes the outcome (tried: --disable-radix-cache" in text
    assert "SGLANG_VLM_CACHE_SIZE_MB=0)" in text
    # the forward pass's figure: the call's track name is not covered by its first item's label
    from kimi_viz import whatif
    from kimi_viz.plots import draw_forward_pass
    from kimi_viz.request.workload import together

    answer = whatif(together(["astronaut_tiny_20x5.png", "rocket.jpg"]), sglang_version="0.5.18", tp_size=2)
    ax = draw_forward_pass(answer.replay.passes[0])
    boxes = {t.get_gid(): (t, box) for t, box in _text_boxes(ax.figure) if t.get_gid()}
    name, box = boxes["track-get_image_feature"]
    assert name.get_text() == "get_image_feature call (2 items)"
    labels = [b for gid, (_, b) in boxes.items() if gid.startswith("call-label")]
    assert len(labels) == 2 and not any(box.overlaps(b) for b in labels)
    assert ax.figure.bbox.contains(box.x0, box.y0) and ax.figure.bbox.contains(box.x1, box.y1)
    page.close()
