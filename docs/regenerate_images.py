"""Regenerate the README's pictures from ``make demo``'s output: ``python docs/regenerate_images.py DEMO_OUT``.

Copies the figures the README shows out of a fresh demo folder into ``docs/images/`` and, with the
system Chromium (``/usr/bin/chromium``) through Playwright, takes screenshots of two of its reports
as a person sees them: the S1 capture at attention-TP 2 (a failing rank first) and the S4 silent
mismatch (its own badge). ``make screenshots`` runs the demo and then this script.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"
COPIES = {
    "s2-cpu/summary.png": "s2_summary.png",
    "gallery/patch_grid_01_chelsea.png": "patch_grid_chelsea.png",
    "gallery/row_spans_vs_other_preset.png": "row_spans.png",
}
SCREENSHOTS = {"s1-cpu/report.html": "report_s1.png", "s4-gpu/report.html": "report_s4.png"}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            "usage: python docs/regenerate_images.py DEMO_OUT  (a folder written by `kimi-viz demo`)", file=sys.stderr
        )
        return 2
    demo = Path(argv[0])
    IMAGES.mkdir(exist_ok=True)
    for source, target in COPIES.items():
        shutil.copyfile(demo / source, IMAGES / target)
        print(f"{demo / source} -> docs/images/{target}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for source, target in SCREENSHOTS.items():
            page.goto((demo / source).resolve().as_uri())
            page.screenshot(path=str(IMAGES / target))
            print(f"{demo / source} (1280x900, as Chromium shows it) -> docs/images/{target}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
