"""The verdict's views: summary figures numbered and coloured by global image, failing ranks first, the silent
mismatch drawn, notebook tables and verdicts, and files never written through links."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from kimi_viz.errors import OutputError
from kimi_viz.files import prepare_folder, write_file
from kimi_viz.plots.palette import color_for
from kimi_viz.plots.summary import draw_grid_mismatch, draw_rank_rows, draw_verdict_banner
from kimi_viz.report.summary import summary_panels, summary_png
from kimi_viz.report.tables import VerdictView, batch_table, images_table, ranks_table
from kimi_viz.report.text_table import Table
from kimi_viz.scenarios import SCENARIOS, get_scenario, run_scenario
from kimi_viz.split._replay import replay
from kimi_viz.split.verdict import STATUS_STYLES, Status, build_verdict


@pytest.fixture(scope="module")
def s1_tp4():
    return replay(SCENARIOS["s1-cpu"].build(), tp_size=4, sglang_version="0.5.18", mode="shapes")


def _texts(ax) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for t in ax.figure.findobj() if hasattr(t, "get_text") and t.get_gid()}


def test_rank_panels_number_images_globally_and_name_the_grid_read(s1_tp4):
    rank2 = s1_tp4.rank_trace(2)  # one image: global image 2, read row 0
    texts = _texts(draw_rank_rows(s1_tp4, rank2))
    expected = next(v for k, v in texts.items() if k.startswith("span-label"))
    assert expected.startswith("2: astronaut_tiny_20x5.png; grid of image 0, read for image 2")
    produced = next(v for k, v in texts.items() if k.startswith("produced-label"))
    assert produced.startswith("2: astronaut_tiny_20x5.png")


def test_an_image_keeps_its_colour_across_panels():
    trace = run_scenario("healthy-tp2", mode="shapes")
    seen: dict[int, set[str]] = {}
    for rank in trace.ranks:
        ax = draw_rank_rows(trace, rank)
        for row, color in zip(rank.images, _fill_colors_by_span(ax)):
            seen.setdefault(row.image, set()).add(color)
    assert all(colors == {color_for(image).lower()} for image, colors in seen.items())


def _fill_colors_by_span(ax) -> list[str]:
    from matplotlib.colors import to_hex

    spans = []
    for collection in ax.collections:
        if (collection.get_gid() or "").startswith("span-fills"):
            for path, color in zip(collection.get_paths(), collection.get_facecolors()):
                spans.append((path.vertices[:, 0].min(), to_hex(color)))
    return [color for _, color in sorted(spans)]


def test_summary_puts_the_verdict_and_failing_ranks_first(s1_tp4):
    verdict = build_verdict(s1_tp4)
    panels = summary_panels(s1_tp4, verdict)
    assert len(panels) == 1 + 2 + 2  # banner, the 2 failing ranks, the 2 healthy ones
    banner = _texts(draw_verdict_banner(verdict))
    assert banner["status-badge"].strip() == "✗ ERROR REPRODUCED"
    sheet = Image.open(io.BytesIO(summary_png(s1_tp4, verdict)))
    assert sheet.width >= 1000


def test_many_healthy_ranks_are_summarised_not_drawn():
    trace = replay(SCENARIOS["s1-cpu"].build(), tp_size=8, sglang_version="0.5.18", mode="shapes")
    verdict = build_verdict(trace)
    assert verdict.rank_summary == "2 of 8 ranks fail"
    assert len(summary_panels(trace, verdict)) == 1 + 2 + 1  # banner, failing ranks, one summary line


def test_a_silent_mismatch_draws_the_producers_grid_against_the_consumers():
    trace = run_scenario("s4-gpu", mode="shapes")
    verdict = build_verdict(trace)
    assert verdict.status is Status.SILENT_MISMATCH
    ax = draw_grid_mismatch(verdict)
    boxes = {p.get_gid(): (p.get_width(), p.get_height()) for p in ax.patches if p.get_gid()}
    assert boxes == {"grid-0": (148, 112), "grid-1": (296, 222)}  # producer's 112x148 against consumer's 222x296
    words = " ".join(t.get_text() for t in ax.texts)
    assert "16576 patches" in words and "65712 patches" in words
    assert len(summary_panels(trace, verdict)) == 1 + 1 + 1  # banner, the grids, the rank


@pytest.mark.parametrize("name", ["healthy-tp2", "s1-cpu", "s4-gpu", "s9-two-grids"])
def test_no_figure_text_under_10_px(name):
    trace = run_scenario(name, mode="shapes")
    verdict = build_verdict(trace)
    axes = [draw_verdict_banner(verdict)] + [draw_rank_rows(trace, r) for r in trace.ranks]
    if verdict.divergence.silent:
        axes.append(draw_grid_mismatch(verdict))
    for ax in axes:
        sizes = [t.get_fontsize() for t in ax.figure.findobj() if hasattr(t, "get_fontsize") and t.get_text()]
        assert min(sizes) * 100 / 72 >= 10, (name, min(sizes))  # summary.png is written at 100 dpi


@pytest.mark.parametrize("name", ["s1-cpu", "s2-cpu", "healthy-tp2"])
def test_panel_titles_fit_their_figure_and_overlap_no_other_text(name):
    """A failing rank's three-line title (rank, error, counts) stays inside its figure and clear of the labels."""
    trace = run_scenario(name, mode="shapes")
    for rank in trace.ranks:
        ax = draw_rank_rows(trace, rank)
        figure = ax.figure
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        renderer = FigureCanvasAgg(figure).get_renderer()
        figure.draw(renderer)
        sheet = figure.bbox
        titles = [t for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
        assert len(titles) == 1, [t.get_text() for t in titles]
        box = titles[0].get_window_extent(renderer)
        assert sheet.x0 <= box.x0 and box.x1 <= sheet.x1 + 1 and sheet.y0 <= box.y0 and box.y1 <= sheet.y1, (
            name,
            rank.rank,
            titles[0].get_text(),
        )
        others = [t for t in figure.findobj() if hasattr(t, "get_text") and t.get_text() and t is not titles[0]]
        for text in others:
            if text.get_visible() and text.axes is ax and text not in (ax.title, ax._right_title):
                assert not box.overlaps(text.get_window_extent(renderer)), (name, rank.rank, text.get_text())


def test_notebook_tables_and_verdicts(s1_tp4):
    verdict = build_verdict(s1_tp4)
    ranks = ranks_table(verdict)
    assert [row[0] for row in ranks.rows] == [1, 2, 0, 3]  # failing ranks first
    assert ranks.caption == "2 of 4 ranks fail"
    assert "<td>FAIL</td>" in ranks._repr_html_()
    images = images_table(verdict)
    assert images.rows[1][:3] == [1, "microaneurysms.png", "102×102 L, cpu backend"]
    assert images.rows[1][4] == "0 (image 0's grid)"
    view = VerdictView(verdict)
    assert "✗ ERROR REPRODUCED" in repr(view)
    html = view._repr_html_()
    assert 'data-status="error-reproduced"' in html and "body {" not in html  # no page-wide CSS in a notebook
    text = repr(Table(["t ms"], [[152.30835900001694]]))
    assert "152.3" in text and "152.308" not in text


def test_a_text_table_has_no_padding_after_its_last_column():
    text = repr(Table(["name", "detail"], [["a", "a long detail"], ["bb", "x"]]))
    assert text.splitlines() == ["name  detail", "----  -------------", "a     a long detail", "bb    x"]


def test_every_status_has_a_distinct_badge_colour_symbol_and_word_and_its_exit_code():
    styles = list(STATUS_STYLES.values())
    for attribute in ("badge", "symbol", "color", "word", "mark"):
        values = [getattr(s, attribute) for s in styles]
        assert len(set(values)) == len(values), attribute
    assert {status.value: style.exit_code for status, style in STATUS_STYLES.items()} == {
        "clean": 0,
        "error-reproduced": 1,
        "silent-mismatch": 3,
        "not-reproduced": 4,
        "recorded-ok-replay-fails": 5,
        "no-call": 0,  # nothing reaches get_image_feature: nothing can fail there
        "not-applicable": 0,  # a sweep's cell whose release refuses a setting
    }


# --- writing files -------------------------------------------------------------------------------------
def test_write_file_replaces_a_link_instead_of_writing_through_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    folder = prepare_folder(tmp_path / "out")
    (folder / "report.html").symlink_to(outside)
    write_file(folder / "report.html", b"new")
    assert outside.read_text() == "keep me"
    assert not (folder / "report.html").is_symlink() and (folder / "report.html").read_bytes() == b"new"


def test_an_output_folder_that_is_a_link_a_file_or_under_a_file_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OutputError, match="is a symbolic link"):
        prepare_folder(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is the file"):
        prepare_folder(tmp_path / "file")
    with pytest.raises(OutputError, match="lies under the file"):
        prepare_folder(tmp_path / "file" / "sub")
    assert os.listdir(real) == []


def test_a_silent_mismatch_flags_its_image_with_the_consumers_expectation():
    """One meaning of "expected rows": for S4 the consumer's grid, in the verdict, its table and the figure."""
    from kimi_viz.report.html import images_table_html

    verdict = build_verdict(run_scenario("s4-gpu", mode="shapes"))
    row = verdict.divergence.images[0]
    assert row.silent and row.match is False
    assert (row.expected_grid, row.expected_rows, row.produced_grid, row.produced_rows) == (
        [1, 222, 296],
        65712,
        [1, 112, 148],
        16576,
    )
    assert (verdict.divergence.expected_rows, verdict.divergence.produced_rows) == (65712, 16576)
    table = images_table(verdict)
    assert table.rows[0][5:] == [65712, 16576, "NO (silent: SGLang raised nothing)"] and table.highlight == [True]
    html = images_table_html(verdict)
    assert 'class="kv-mismatch" data-image="0"' in html and ">yes<" not in html
    # S12: the counts agree (both follow the same wrong reading), but the verdict names the image: flagged anyway
    s12 = build_verdict(run_scenario("s12-hwc", mode="shapes"))
    flagged = [r for r in s12.divergence.images if r.silent]
    assert [r.image for r in flagged] == [1] and flagged[0].match_text() == "yes, but mis-encoded (silent)"
    assert images_table(s12).highlight == [False, True]


def test_the_silent_mismatch_figure_keeps_every_label_clear_of_the_others():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    ax = draw_grid_mismatch(build_verdict(run_scenario("s4-gpu", mode="shapes")))
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    ax.figure.draw(renderer)
    texts = [t for t in ax.figure.findobj() if hasattr(t, "get_text") and t.get_text() and t.get_visible()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    assert len(boxes) >= 5  # the title, two key lines, two counts
    overlapping = [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1 :] if box.overlaps(other)]
    assert overlapping == []
    sheet = ax.figure.bbox
    assert all(sheet.x0 <= box.x0 and box.x1 <= sheet.x1 + 1 for _, box in boxes)


def test_every_table_names_a_feature_readably():
    from kimi_viz.report.html import batch_table_html

    s2 = get_scenario("s2-cpu").build()  # cpu items hold PIL images
    assert s2.items[1].feature.describe() == "PIL image 451×300 RGB"
    assert "image image" not in batch_table_html(s2) and "PIL image 451×300 RGB" in batch_table_html(s2)
    assert batch_table(s2).rows[1][4] == "PIL image 451×300 RGB"
    gpu = get_scenario("s2-gpu").build().items[1].feature
    assert gpu.describe() == "chw tensor [3, 300, 451] uint8"
    assert gpu.redacted().describe() == "shape only: chw [3, 300, 451] uint8"
    eager = get_scenario("s10-stale-eager").build().items[1].feature
    assert eager.describe() == "eager rows [4, 3, 14, 14] float32"
