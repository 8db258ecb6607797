"""The figures: their content (segments, labels, highlights, markers), not just that they exist."""

from __future__ import annotations

import io
import itertools
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from kimi_viz.plots import (
    PALETTE,
    draw_grid_to_rows,
    draw_patch_grid,
    draw_pixel_diff,
    draw_processor_output,
    draw_row_spans,
)
from kimi_viz.plots.palette import color_for, edge_style_for, hatch_for, text_color_on
from kimi_viz.plots.patches import OVERLAY_SUBPIXELS
from kimi_viz.plots.rows import draw_row_track
from kimi_viz.preprocess.layout import BatchLayout, LayoutLookupError
from kimi_viz.preprocess.records import ImageRecord, ProcessorOutput, image_span
from kimi_viz.preprocess.resize import ResizeConfig

REAL_BATCH = ("astronaut.png", "coffee.png", "text.png")
PATCH = 14


def find(ax: Axes, gid: str):
    """Return the one artist of ``ax`` with this gid."""
    found = [a for a in ax.get_children() if a.get_gid() == gid]
    assert len(found) == 1, f"expected one artist with gid {gid!r}, found {len(found)}"
    return found[0]


def texts_with_prefix(ax: Axes, prefix: str) -> dict[str, str]:
    """Return ``{gid: text}`` of every Text/Annotation whose gid starts with ``prefix``."""
    return {t.get_gid(): t.get_text() for t in ax.texts if (t.get_gid() or "").startswith(prefix)}


def png_bytes(ax: Axes) -> bytes:
    buffer = io.BytesIO()
    ax.figure.savefig(buffer, format="png", dpi=72, metadata={"Software": None})
    return buffer.getvalue()


def synthetic_record(grid=(1, 256, 256), *, rows_start=0, index=0, resized=None) -> ImageRecord:
    """A record with no processor behind it (no pixels unless given), all content, no padding."""
    t, h, w = grid
    n = t * h * w
    return ImageRecord(
        index,
        f"/synthetic/grid_{h}x{w}.png",
        (w * PATCH, h * PATCH),
        "RGB",
        {},
        ResizeConfig(w * PATCH, h * PATCH, 0, 0, (h // 2) * (w // 2), grid),
        image_span(
            index,
            f"/synthetic/grid_{h}x{w}.png",
            grid,
            (rows_start, rows_start + n),
            (0, (h // 2) * (w // 2)),
            np.zeros((h, w), np.int8),
        ),
        resized,
    )


@pytest.fixture(scope="module")
def real_output():
    from kimi_viz.data import sample_path
    from kimi_viz.preprocess.processor import Processor

    return Processor("kimi-k3").preprocess([sample_path(n) for n in REAL_BATCH])


@pytest.fixture(scope="module")
def chelsea_output():
    from kimi_viz.data import sample_path
    from kimi_viz.preprocess.processor import Processor

    return Processor("kimi-k3").preprocess([sample_path("astronaut.png"), sample_path("chelsea.png")])


@pytest.fixture(scope="module")
def expected_spans(pixel_goldens):
    """(start, end, grid) per image of the real batch, from the goldens' grids and row counts."""
    entries = {e["file"]: e for e in pixel_goldens["images"]["kimi_k3"] if not e["exif_transpose"]}
    spans, start = [], 0
    for name in REAL_BATCH:
        rows = entries[name]["rows"]
        spans.append((start, start + rows, tuple(entries[name]["grid_thws"][0])))
        start += rows
    return spans


# --- palette ---------------------------------------------------------------------------------------
def test_palette_is_okabe_ito_and_alternates_styles():
    assert PALETTE[:3] == ("#E69F00", "#56B4E9", "#009E73") and len(PALETTE) == 8
    assert color_for(0) != color_for(1) and color_for(0) == color_for(7)
    assert hatch_for(0) != hatch_for(1) and edge_style_for(0) != edge_style_for(1)
    assert text_color_on("#000000") == "#FFFFFF" and text_color_on("#F0E442") == "#000000"


# --- draw_patch_grid ------------------------------------------------------------------------------
def test_patch_grid_lattice_and_merge_lines(real_output):
    ax = draw_patch_grid(real_output, 1)
    t, h, w = real_output.records[1].grid_thw
    lattice = find(ax, "patch-lattice").get_segments()
    assert len(lattice) == (h + 1) + (w + 1)
    horizontal = [s for s in lattice if s[0][1] == s[1][1]]
    vertical = [s for s in lattice if s[0][0] == s[1][0]]
    assert sorted(s[0][1] for s in horizontal) == [PATCH * i for i in range(h + 1)]
    assert sorted(s[0][0] for s in vertical) == [PATCH * j for j in range(w + 1)]
    assert all(s[0][0] == 0 and s[1][0] == w * PATCH for s in horizontal)  # full length
    assert all(s[0][1] == 0 and s[1][1] == h * PATCH for s in vertical)
    merge = find(ax, "merge-lines").get_segments()
    assert len(merge) == (h // 2 + 1) + (w // 2 + 1)
    assert sorted({s[0][0] for s in merge if s[0][0] == s[1][0]}) == [28 * j for j in range(w // 2 + 1)]
    assert "coffee.png" in ax.get_title() and "1×30×44" in ax.get_title() and "[1444, 2764)" in ax.get_title()


def test_patch_grid_on_a_256x256_grid_without_pixels_is_still_one_collection():
    ax = draw_patch_grid(synthetic_record())
    assert len(find(ax, "patch-lattice").get_segments()) == 257 + 257
    assert len(find(ax, "merge-lines").get_segments()) == 129 + 129
    labels = texts_with_prefix(ax, "row-label-")
    assert 2 <= len(labels) <= 48
    assert {"row-label-0", f"row-label-{256 * 256 - 1}"} <= set(labels)
    assert len(ax.images) == 1 and ax.images[0].get_array().shape[:2] == (1, 1)  # blank canvas


def test_patch_grid_downsamples_the_big_sample(pixel_goldens):
    from kimi_viz.data import sample_path
    from kimi_viz.preprocess.processor import Processor

    output = Processor("kimi-k3").preprocess([sample_path("rocket_4200x3150.jpg")])
    ax = draw_patch_grid(output)
    assert len(find(ax, "patch-lattice").get_segments()) == 223 + 297
    shown = find(ax, "image").get_array()
    assert shown.shape[1] < output.records[0].resized.shape[1] / 2  # reduced before imshow
    assert find(ax, "image").get_extent() == [0.0, 296 * PATCH, 222 * PATCH, 0.0]


def test_row_numbers_sit_on_their_patches(real_output):
    layout = BatchLayout.from_output(real_output)
    ax = draw_patch_grid(real_output, 1, max_labels=30)
    labels = [t for t in ax.texts if (t.get_gid() or "").startswith("row-label-")]
    assert 2 <= len(labels) <= 30
    rows = set()
    for text in labels:
        x, y = text.get_position()
        patch_y, patch_x = int(y // PATCH), int(x // PATCH)
        assert layout.patch_to_row(1, patch_y, patch_x) == int(text.get_text())
        rows.add(int(text.get_text()))
    assert {1444, 2763} <= rows  # first and last patch


def test_padding_overlay_matches_the_pad_mask(chelsea_output):
    record = chelsea_output.records[1]
    assert (record.pad_mask > 0).any()
    ax = draw_patch_grid(chelsea_output, 1)
    overlay = find(ax, "padding-overlay")
    assert isinstance(overlay, AxesImage)
    alpha = np.asarray(overlay.get_array())[..., 3]
    h, w = record.pad_mask.shape
    per_patch = alpha.reshape(h, OVERLAY_SUBPIXELS, w, OVERLAY_SUBPIXELS).max(axis=(1, 3))
    assert np.array_equal(per_patch > 0, record.pad_mask > 0)
    cells = alpha.reshape(h, OVERLAY_SUBPIXELS, w, OVERLAY_SUBPIXELS).transpose(0, 2, 1, 3)
    full, partial = cells[record.pad_mask == 2], cells[record.pad_mask == 1]
    assert len(full) and len(partial)
    assert all(np.unique(cells).size == 1 for cells in full)  # uniform wash
    assert all(np.unique(cells).size == 2 for cells in partial)  # striped texture
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"fully padding: {int((record.pad_mask == 2).sum())} patches" in legend
    assert any(f"{int((record.pad_mask == 1).sum())} patches" in t and "partly" in t for t in legend)


def test_highlighted_rows_map_to_the_right_patches(real_output):
    layout = BatchLayout.from_output(real_output)
    rng = np.random.default_rng(3)
    rows = rng.integers(1444, 2764, size=7).tolist()
    ax = draw_patch_grid(real_output, 1, highlight_rows=rows, highlight_patches=[(29, 43)])
    polygons = find(ax, "highlight").get_paths()
    assert len(polygons) == len(rows) + 1
    found = []
    for path in polygons:
        corner = path.vertices[:4].min(axis=0)
        size = path.vertices[:4].max(axis=0) - corner
        assert np.allclose(size, PATCH)
        found.append(layout.patch_to_row(1, int(corner[1] // PATCH), int(corner[0] // PATCH)))
    assert found == rows + [2763]
    labels = texts_with_prefix(ax, "highlight-label-")
    for row in rows:
        _, _, y, x = layout.row_to_patch(row)
        assert labels[f"highlight-label-{row}"] == f"row {row} → ({y}, {x})"
    assert labels["highlight-label-2763"] == "row 2763 → (29, 43)"


def test_highlight_outside_the_image_is_rejected(real_output):
    with pytest.raises(
        LayoutLookupError, match=r"row 5 is not a row of image 1 \(coffee\.png\), whose rows are \[1444, 2764\)"
    ):
        draw_patch_grid(real_output, 1, highlight_rows=[5])
    with pytest.raises(LayoutLookupError, match=r"patch \(y=30, x=0\) is outside image 1"):
        draw_patch_grid(real_output, 1, highlight_patches=[(30, 0)])
    with pytest.raises(LayoutLookupError, match=r"image index 3 is outside the output's 3 images"):
        draw_patch_grid(real_output, 3)


def test_draw_functions_use_the_given_axes(real_output):
    fig = Figure()
    ax = fig.add_subplot()
    assert draw_patch_grid(real_output, 0, ax=ax) is ax
    ax2 = Figure().add_subplot()
    assert draw_row_spans(BatchLayout.from_output(real_output), ax=ax2) is ax2


# --- draw_row_spans -------------------------------------------------------------------------------
def test_row_span_labels_carry_the_golden_numbers(real_output, expected_spans):
    ax = draw_row_spans(BatchLayout.from_output(real_output))
    labels = texts_with_prefix(ax, "span-label-")
    assert len(labels) == 3
    for i, (start, end, (t, h, w)) in enumerate(expected_spans):
        text = labels[f"span-label-{i}"]
        assert f"[{start}, {end})" in text
        assert f"{t}×{h}×{w}" in text
        assert f"{end - start} patches" in text
        assert REAL_BATCH[i] in text
    tokens = texts_with_prefix(ax, "token-label-")
    assert [
        f"{h * w // 4} tokens" in tokens[f"token-label-{i}"] for i, (_, _, (_, h, w)) in enumerate(expected_spans)
    ] == [True] * 3
    assert not [a for a in ax.get_children() if a.get_gid() == "divergence-marker"]


def test_span_labels_are_anchored_on_their_spans():
    layout = BatchLayout.from_grids([(1, 38, 38), (1, 2, 2), (1, 222, 296), (1, 8, 8)])
    ax = draw_row_spans(layout)
    for text in ax.texts:
        gid = text.get_gid() or ""
        if not gid.startswith("span-label-"):
            continue
        span = layout.spans[int(gid.rsplit("-", 1)[1])]
        x = text.xy[0] if hasattr(text, "xy") else text.get_position()[0]  # annotation anchor or centre
        assert x == pytest.approx((span.rows[0] + span.rows[1]) / 2)
    # the narrow spans are labelled outside, with a leader line
    assert hasattr([t for t in ax.texts if t.get_gid() == "span-label-1"][0], "arrow_patch")


def test_fills_alternate_hatch_and_edge_style():
    ax = Figure().add_subplot()
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 10)
    track = draw_row_track(ax, [(0, 10), (10, 50), (50, 100)], y=1, height=2, labels=["a", "b", "c"])
    even, odd = track.fills
    assert len(even.get_paths()) == 2 and len(odd.get_paths()) == 1
    assert even.get_hatch() in (None, "") and odd.get_hatch() == "///"
    assert even.get_linestyle() != odd.get_linestyle()
    assert [t.get_text() for t in track.labels] == ["a", "b", "c"]


def test_divergence_marker_sits_at_the_first_differing_image(real_output):
    expected = BatchLayout.from_output(real_output)
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 38, 38), (1, 14, 32)], labels=list(REAL_BATCH))
    ax = draw_row_spans(expected, produced=produced)
    marker = find(ax, "divergence-marker")
    assert list(marker.get_xdata()) == [expected.spans[1].rows[0]] * 2 == [1444, 1444]
    label = find(ax, "divergence-label").get_text()
    assert "image 1 (coffee.png)" in label and "expected 1320 rows, produced 1444" in label
    assert "expected 3212 rows, produced 3336" in label
    produced_labels = texts_with_prefix(ax, "produced-label-")
    assert "[1444, 2888)" in produced_labels["produced-label-1"]
    outlined = find(ax, "divergent-spans").get_paths()
    assert [p.vertices[:4, 0].min() for p in outlined] == [1444, 2888]


def test_divergence_marker_for_a_missing_image(real_output):
    expected = BatchLayout.from_output(real_output)
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44)], labels=list(REAL_BATCH[:2]))
    ax = draw_row_spans(expected, produced=produced)
    assert list(find(ax, "divergence-marker").get_xdata()) == [2764, 2764]
    assert "expected 448 rows, produced none" in find(ax, "divergence-label").get_text()


def test_png_output_is_deterministic(real_output):
    expected = BatchLayout.from_output(real_output)
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 38, 38), (1, 14, 32)])
    first = [
        png_bytes(draw_patch_grid(real_output, 1, highlight_rows=[1500])),
        png_bytes(draw_row_spans(expected, produced=produced)),
    ]
    second = [
        png_bytes(draw_patch_grid(real_output, 1, highlight_rows=[1500])),
        png_bytes(draw_row_spans(expected, produced=produced)),
    ]
    assert first == second
    assert first[0].startswith(b"\x89PNG") and first[0] != first[1]


# --- draw_grid_to_rows ----------------------------------------------------------------------------
def test_grid_to_rows_links_patches_to_their_row_positions(real_output):
    layout = BatchLayout.from_output(real_output)
    rows = [1444, 1444 + 44, 2000, 2763]
    ax = draw_grid_to_rows(real_output, layout, rows, index=1)
    width = 44 * PATCH
    links = find(ax, "row-links").get_segments()
    assert len(links) == len(rows)
    for row, (patch_end, track_end) in zip(rows, links):
        y, x = int(patch_end[1] // PATCH), int(patch_end[0] // PATCH)
        assert layout.patch_to_row(1, y, x) == row
        assert track_end[0] == pytest.approx((row - 1444 + 0.5) * width / 1320)
        assert track_end[1] > 30 * PATCH  # the track is below the grid
    labels = texts_with_prefix(ax, "link-label-")
    assert labels["link-label-1488"] == "row 1488 ← (1, 0)"
    assert len(find(ax, "zoom-lines").get_segments()) == 2


def test_grid_to_rows_default_rows_and_layout_mismatch(real_output):
    ax = draw_grid_to_rows(real_output.records[2], real_output)
    labels = texts_with_prefix(ax, "link-label-")
    assert "link-label-2764" in labels and "link-label-3211" in labels  # first and last patch
    other = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44), (1, 16, 32)])
    with pytest.raises(LayoutLookupError, match=r"image 2 \(text\.png\) has grid 1×14×32"):
        draw_grid_to_rows(real_output.records[2], other)


# --- draw_pixel_diff -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def both_backends():
    from kimi_viz.data import sample_path
    from kimi_viz.preprocess.processor import Processor

    paths = [sample_path("astronaut.png"), sample_path("coffee.png")]
    return Processor("kimi-k3").preprocess(paths), Processor("kimi-k3", backend="torch", device="cpu").preprocess(paths)


def test_pixel_diff_shows_per_patch_max(both_backends, pixel_goldens):
    checkpoint, torch_path = both_backends
    ax = draw_pixel_diff(checkpoint, torch_path, index=1)
    shown = np.asarray(find(ax, "pixel-diff").get_array())
    assert shown.shape == (30, 44)
    a = checkpoint.image_rows(1).double().numpy().reshape(30, 44, -1)
    b = torch_path.image_rows(1).double().numpy().reshape(30, 44, -1)
    assert np.array_equal(shown, np.abs(a - b).max(axis=2))
    golden = next(e for e in pixel_goldens["images"]["kimi_k3"] if e["file"] == "coffee.png")
    assert shown.max() == pytest.approx(golden["gpu_path"]["max_abs_diff_vs_cpu_path"], rel=0, abs=1e-9)
    summary = find(ax, "diff-summary").get_text()
    assert f"max |Δ| = {shown.max():.6g}" in summary and "grids equal: 1×30×44" in summary
    assert len(ax.figure.axes) == 2  # the colorbar


def test_pixel_diff_with_different_grids_draws_no_map(both_backends):
    checkpoint, torch_path = both_backends
    swapped = ProcessorOutput(torch_path.pixel_values, torch_path.grid_thws, torch_path.records[::-1], "torch")
    ax = draw_pixel_diff(checkpoint, swapped, index=0)
    assert not ax.images
    assert "grids differ" in ax.get_title() and "1×38×38" in ax.get_title() and "1×30×44" in ax.get_title()


# --- draw_processor_output ------------------------------------------------------------------------
def test_batch_has_a_thumbnail_per_image_above_the_track(real_output, expected_spans):
    track = draw_processor_output(real_output)
    fig = track.figure
    thumbs = [a for a in fig.axes if (a.get_gid() or "").startswith("thumbnail-")]
    assert len(thumbs) == 3 and len(fig.axes) == 4
    for i, thumb in enumerate(thumbs):
        start, end, _ = expected_spans[i]
        assert f"rows [{start}, {end})" in thumb.get_title()
        assert thumb.get_position().y0 > track.get_position().y1
    assert len(texts_with_prefix(track, "span-label-")) == 3


def test_batch_into_a_given_subplot(real_output):
    fig = Figure(figsize=(10, 6))
    ax = fig.add_subplot()
    assert draw_processor_output(real_output, ax=ax) is ax
    assert len(fig.axes) == 4


def test_lattice_of_big_thumbnails_is_downsampled():
    record = synthetic_record((1, 240, 240))
    output = ProcessorOutput(torch.empty((240 * 240, 0)), torch.tensor([[1, 240, 240]]), [record], "checkpoint")
    track = draw_processor_output(output)
    thumb = [a for a in track.figure.axes if a.get_gid() == "thumbnail-0"][0]
    segments = find(thumb, "patch-lattice").get_segments()
    assert len(segments) == 2 * (240 // 10 + 1)
    assert re.search(r"every 10 patches", thumb.get_xlabel())


# --- no pyplot ------------------------------------------------------------------------------------
def test_figures_never_touch_pyplot():
    code = (
        "import sys, numpy as np\n"
        "from kimi_viz.preprocess.layout import BatchLayout\n"
        "from kimi_viz.plots import draw_row_spans, draw_patch_grid\n"
        "from kimi_viz.preprocess.records import ImageRecord\n"
        "from kimi_viz.preprocess.resize import resize_config\n"
        "from kimi_viz.preprocess.records import image_span\n"
        "span = image_span(0, 'x.png', (1, 2, 2), (0, 4), (0, 1), np.zeros((2, 2), np.int8))\n"
        "r = ImageRecord(0, 'x.png', (28, 28), 'RGB', {}, resize_config(28, 28), span)\n"
        "import io; draw_patch_grid(r).figure.savefig(io.BytesIO(), format='png')\n"
        "draw_row_spans(BatchLayout.from_grids([(1, 2, 2)])).figure.savefig(io.BytesIO(), format='png')\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_patch_grid_with_frames_labels_rows_by_frame():
    record = synthetic_record((2, 4, 6), rows_start=100)
    row = 100 + 24 + 1 * 6 + 5  # frame 1, y=1, x=5
    ax = draw_patch_grid(record, highlight_rows=[row])
    (polygon,) = find(ax, "highlight").get_paths()
    assert np.allclose(polygon.vertices[:4].min(axis=0), (5 * PATCH, 1 * PATCH))
    assert texts_with_prefix(ax, "highlight-label-")[f"highlight-label-{row}"] == f"row {row} → (1, 1, 5)"
    assert "frame 0 of 2" in ax.get_title()
    labels = texts_with_prefix(ax, "row-label-")
    assert "row-label-100" in labels and "row-label-123" in labels  # frame 0: first and last patch


def test_crowded_batches_keep_labels_readable():
    rng = np.random.default_rng(0)
    grids = [(1, 2 * int(a), 2 * int(b)) for a, b in rng.integers(1, 40, size=(256, 2))]
    layout = BatchLayout.from_grids(grids)
    ax = draw_row_spans(layout, max_label_levels=6)
    labels = texts_with_prefix(ax, "span-label-")
    assert 2 <= len(labels) < 256
    assert {"span-label-0", "span-label-255"} <= set(labels)
    for gid, text in labels.items():
        assert text == gid.rsplit("-", 1)[1] or text.startswith(gid.rsplit("-", 1)[1] + ": ")
    assert ax.figure.get_size_inches()[1] < 8  # levels capped


def test_grid_to_rows_of_a_lone_record_keeps_its_global_rows(real_output):
    record = real_output.records[2]  # text.png: rows [2764, 3212), grid 1×14×32
    rows = [2764, 2764 + 32 + 5, 3211]
    ax = draw_grid_to_rows(record, rows=rows)
    width = 32 * PATCH
    links = find(ax, "row-links").get_segments()
    for row, (patch_end, track_end) in zip(rows, links):
        assert (int(patch_end[1] // PATCH), int(patch_end[0] // PATCH)) == divmod(row - 2764, 32)
        assert track_end[0] == pytest.approx((row - 2764 + 0.5) * width / 448)  # on the image's own track
    assert texts_with_prefix(ax, "link-label-")["link-label-2801"] == "row 2801 ← (1, 5)"
    assert "rows [2764, 3212)" in ax.get_title()
    # the batch track places the span at its real rows, inside [0, 3212)
    batch_fills = [c for c in ax.collections if (c.get_gid() or "").startswith("batch-rows-fills")]
    (span,) = [path.vertices[:4, 0] for fills in batch_fills for path in fills.get_paths()]
    assert (span.min(), span.max()) == pytest.approx((2764 * width / 3212, width))
    assert any("only image 2 is known" in t.get_text() for t in ax.texts)


def test_grid_to_rows_refuses_a_record_outside_the_layout(real_output):
    with pytest.raises(LayoutLookupError, match=r"image 2 \(text\.png\) is outside the layout's 1 images"):
        draw_grid_to_rows(real_output.records[2], BatchLayout.from_grids([(1, 38, 38)]))


def test_highlights_take_one_row_one_pair_or_whole_floats_and_refuse_malformed_patches(real_output):
    ax = draw_patch_grid(real_output, 1, highlight_rows=1500, highlight_patches=(29.0, 43.0))
    assert set(texts_with_prefix(ax, "highlight-label-")) == {"highlight-label-1500", "highlight-label-2763"}
    with pytest.raises(
        LayoutLookupError,
        match=r"patches form an array of shape \(2, 3\) \(int64\); pass patches "
        r"of image 1 \(coffee\.png\) as \(y, x\) integer pairs",
    ):
        draw_patch_grid(real_output, 1, highlight_patches=[(0, 1, 2), (3, 4, 5)])
    with pytest.raises(LayoutLookupError, match=r"patches have different lengths"):
        draw_patch_grid(real_output, 1, highlight_patches=[(0, 1), (2,)])
    with pytest.raises(LayoutLookupError, match=r"rows must be integers, got float64 values"):
        draw_patch_grid(real_output, 1, highlight_rows=[1500.5])


def test_row_spans_accept_a_processor_output_or_grids(real_output, expected_spans):
    from_output = texts_with_prefix(draw_row_spans(real_output), "span-label-")
    from_grids = texts_with_prefix(draw_row_spans([grid for _, _, grid in expected_spans]), "span-label-")
    assert len(from_output) == len(from_grids) == 3
    for i, (start, end, _) in enumerate(expected_spans):
        assert f"[{start}, {end})" in from_output[f"span-label-{i}"]
        assert f"[{start}, {end})" in from_grids[f"span-label-{i}"]


# --- image numbers, connectors, font sizes ----------------------------------------------------------
def _agg(fig):
    """Return the figure's Agg renderer after one draw (the figures here never touch pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _text_boxes(fig):
    """Return ``(text artist, window extent of its text)`` for every visible, non-empty text of ``fig``.

    ``Text.get_window_extent`` is called unbound so an annotation's extent is its text only."""
    from matplotlib.text import Text

    renderer = _agg(fig)
    undrawn = set()  # labels of ticks outside the view limits: never drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            slack = 1e-9 * max(1.0, high - low)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - slack <= tick.get_loc() <= high + slack:
                    undrawn.update({id(tick.label1), id(tick.label2)})
    return [
        (t, Text.get_window_extent(t, renderer))
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in undrawn
    ]


def test_spans_are_labelled_and_coloured_by_their_image_numbers():
    expected = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44)], labels=["a.png", "b.png"], numbers=[3, 6])
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 38, 38)], labels=["a.png", "b.png"], numbers=[3, 6])
    ax = draw_row_spans(expected, produced=produced)
    labels = texts_with_prefix(ax, "span-label-")
    assert labels["span-label-0"].startswith("3: a.png") and labels["span-label-1"].startswith("6: b.png")
    assert texts_with_prefix(ax, "token-label-")["token-label-1"].startswith("6: [361, ")
    assert "first divergence: image 6 (b.png)" in find(ax, "divergence-label").get_text()
    fills = {c.get_gid(): c for c in ax.collections if (c.get_gid() or "").startswith("span-fills-")}
    # 3 is odd (hatched), 6 even (plain): the style follows the number, not the position
    assert set(fills) == {"span-fills-even", "span-fills-odd"}
    assert matplotlib.colors.to_hex(fills["span-fills-odd"].get_facecolor()[0]) == color_for(3).lower()
    assert matplotlib.colors.to_hex(fills["span-fills-even"].get_facecolor()[0]) == color_for(6).lower()
    assert fills["span-fills-odd"].get_hatch() == "///" and fills["span-fills-even"].get_hatch() in (None, "")


def test_grid_to_rows_colours_the_image_by_its_number(real_output):
    batch = BatchLayout.from_grids([tuple(r.grid_thw) for r in real_output.records], numbers=[4, 5, 6])
    ax = draw_grid_to_rows(real_output.records[1], batch)
    (own,) = [c for c in ax.collections if (c.get_gid() or "").startswith("image-rows-fills-")]
    assert own.get_gid() == "image-rows-fills-odd"
    assert matplotlib.colors.to_hex(own.get_facecolor()[0]) == color_for(5).lower()
    assert any("of image 5 ·" in t.get_text() for t in ax.texts)


def _connector_crossings(ax):
    """Return ``(line gid, text)`` for every LineCollection segment of ``ax`` that passes through a text."""
    from matplotlib.collections import LineCollection
    from matplotlib.path import Path

    boxes = _text_boxes(ax.figure)
    crossings = []
    for collection in ax.collections:
        if not isinstance(collection, LineCollection):
            continue
        transform = collection.get_transform()
        for polyline in collection.get_segments():
            points = transform.transform(polyline)
            for a, b in itertools.pairwise(points):
                for text, box in boxes:
                    if Path([a, b]).intersects_bbox(box, filled=False):
                        crossings.append((collection.get_gid(), text.get_text()))
    return crossings


@pytest.mark.parametrize("case", ["notebook rows", "default rows", "every third row"])
def test_grid_to_rows_connectors_never_cross_a_label(chelsea_output, case):
    """Notebook 01's patch-to-row figure on chelsea.png: no link, tick or zoom line runs through any text."""
    record = chelsea_output.records[1]  # chelsea.png, rows [1444, 2192), grid 1×22×34
    start, end = record.rows
    rows = {
        "notebook rows": [start, start + 1, start + 34, (start + end) // 2, end - 1],
        "default rows": None,
        "every third row": list(range(start, start + 34, 3)) + [end - 1],
    }[case]
    ax = draw_grid_to_rows(record, BatchLayout.from_output(chelsea_output), rows)
    assert {c.get_gid() for c in ax.collections} >= {"row-links", "row-ticks", "zoom-lines"}
    assert _connector_crossings(ax) == []


def test_grid_to_rows_connectors_clear_labels_on_narrow_and_wide_grids():
    for grid in [(1, 64, 8), (1, 8, 64), (2, 4, 6)]:
        assert _connector_crossings(draw_grid_to_rows(synthetic_record(grid, rows_start=100))) == [], grid


def test_no_text_is_under_8_pt_and_labels_do_not_overlap(real_output, both_backends):
    from kimi_viz.encoder import VisionEncoder
    from kimi_viz.plots import draw_feature_map, draw_token_norms

    layout = BatchLayout.from_output(real_output)
    checkpoint, torch_path = both_backends
    encoded = VisionEncoder.random("tiny", device="cpu").encode(real_output.pixel_values, real_output.grid_thws)
    figures = {
        "patch grid": draw_patch_grid(real_output, 1, highlight_rows=list(range(1444, 2764, 97))),
        "row spans": draw_row_spans(layout, produced=BatchLayout.from_grids([(1, 38, 38), (1, 38, 38), (1, 14, 32)])),
        "grid to rows": draw_grid_to_rows(real_output, layout, index=1),
        "pixel diff": draw_pixel_diff(checkpoint, torch_path, index=1),
        "processor output": draw_processor_output(real_output),
        "feature map": draw_feature_map(encoded, real_output, index=1),
        "token norms": draw_token_norms(encoded),
    }
    for name, ax in figures.items():
        assert ax.figure.dpi == 100, name
        boxes = _text_boxes(ax.figure)
        small = [(t.get_text(), t.get_fontsize()) for t, _ in boxes if t.get_fontsize() < 8]
        assert small == [], name
        overlapping = [
            (a.get_text(), b.get_text())
            for i, (a, box_a) in enumerate(boxes)
            for b, box_b in boxes[i + 1 :]
            if box_a.overlaps(box_b)
        ]
        assert overlapping == [], name
