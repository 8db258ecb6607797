"""The gallery: small PNGs for the sample images plus a self-contained index.html."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import pytest
from PIL import Image

from kimi_viz.report.gallery import default_images, write_gallery

NAMES = ("astronaut.png", "chelsea.png", "text.png")


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, sample):
    out = tmp_path_factory.mktemp("gallery")
    return out, write_gallery(out, [sample(n) for n in NAMES])


def test_gallery_writes_every_figure_and_the_page(gallery):
    out, paths = gallery
    assert paths[-1] == out / "index.html"
    pngs = [p for p in paths if p.suffix == ".png"]
    assert len(pngs) == len(paths) - 1
    names = {p.name for p in pngs}
    assert {"batch.png", "row_spans.png", "row_spans_vs_other_preset.png", "grid_to_rows_astronaut.png"} <= names
    assert {f"patch_grid_{i:02d}_{n.split('.')[0]}.png" for i, n in enumerate(NAMES)} <= names
    assert any(n.startswith("pixel_diff_") for n in names)
    for png in pngs:
        with Image.open(png) as image:
            assert image.format == "PNG"
            assert 200 <= image.width <= 1200 and image.height <= 1400  # small figures
        assert png.stat().st_size < 1_500_000


def test_gallery_page_is_self_contained_and_links_every_png(gallery):
    out, paths = gallery
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page and "//" not in re.sub(r"<!DOCTYPE html>", "", page)
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert sources == [p.name for p in paths if p.suffix == ".png"]
    assert all((out / s).is_file() for s in sources)
    # the table carries the real spans: astronaut 1444 rows, chelsea 748, text 448
    assert "[0, 1444)" in page and "[1444, 2192)" in page and "[2192, 2640)" in page


def test_gallery_png_output_is_deterministic(gallery, tmp_path, sample):
    out, paths = gallery
    again = write_gallery(tmp_path, [sample(n) for n in NAMES])
    assert [p.name for p in again] == [p.name for p in paths]
    for first, second in zip(paths, again):
        assert first.read_bytes() == second.read_bytes(), first.name


def test_default_images_are_the_sample_photos_and_the_big_sample():
    names = [p.name for p in default_images()]
    assert names[:8] == [
        "astronaut.png",
        "chelsea.png",
        "coffee.png",
        "rocket.jpg",
        "hubble_deep_field.jpg",
        "retina.jpg",
        "horse.png",
        "camera.png",
    ]
    assert names[-1] == "rocket_4200x3150.jpg"
