"""BatchLayout: spans, lookups between rows / patches / merged tokens, and layout comparison."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_viz.errors import KimiVizError, RowCountError
from kimi_viz.preprocess.layout import (
    BatchLayout,
    ImageSpan,
    LayoutLookupError,
    compare_layouts,
    layout_of,
    source_label,
)
from kimi_viz.preprocess.records import (
    PATCH_FULLY_PADDING,
    PATCH_PARTLY_PADDING,
    ProcessorOutput,
)

REAL_BATCH = ("astronaut.png", "coffee.png", "text.png")


def golden_grids(pixel_goldens, names):
    """Return the Kimi-K3 grids and row counts the goldens record for these sample files."""
    entries = {e["file"]: e for e in pixel_goldens["images"]["kimi_k3"] if not e["exif_transpose"]}
    return [tuple(entries[n]["grid_thws"][0]) for n in names], [entries[n]["rows"] for n in names]


def merge_groups(t: int, h: int, w: int) -> np.ndarray:
    """Return ``[h/2 * w/2, t * 4]`` local rows per merged token, built the way the tower merges:
    ``view(t, h/2, 2, w/2, 2)``, then tokens ordered ``(h/2, w/2)`` with the four patches ``(2, 2)``."""
    ids = torch.arange(t * h * w).view(t, h // 2, 2, w // 2, 2).permute(1, 3, 0, 2, 4)
    return ids.reshape((h // 2) * (w // 2), t * 4).numpy()


@pytest.fixture(scope="module")
def real_output():
    from kimi_viz.data import sample_path
    from kimi_viz.preprocess.processor import Processor

    return Processor("kimi-k3").preprocess([sample_path(n) for n in REAL_BATCH])


# --- construction ---------------------------------------------------------------------------------
def test_from_output_matches_golden_rows_and_records(real_output, pixel_goldens):
    grids, counts = golden_grids(pixel_goldens, REAL_BATCH)
    layout = BatchLayout.from_output(real_output)
    starts = np.concatenate([[0], np.cumsum(counts)])
    assert [s.rows for s in layout.spans] == [(int(starts[i]), int(starts[i + 1])) for i in range(3)]
    assert [s.rows for s in layout.spans] == [(0, 1444), (1444, 2764), (2764, 3212)]
    assert [s.grid_thw for s in layout.spans] == grids
    assert [s.label for s in layout.spans] == list(REAL_BATCH)
    assert layout.total_rows == sum(counts) == real_output.pixel_values.shape[0]
    assert [s.num_tokens for s in layout.spans] == [h * w // 4 for _, h, w in grids]
    assert layout.total_tokens == sum(h * w // 4 for _, h, w in grids)
    for span, record in zip(layout.spans, real_output.records):
        assert span.token_span == tuple(record.token_span)
        assert span.padding_full == int((record.pad_mask == PATCH_FULLY_PADDING).sum())
        assert span.padding_partial == int((record.pad_mask == PATCH_PARTLY_PADDING).sum())


def test_from_grids_accepts_tensor_and_list_alike(pixel_goldens):
    grids, _ = golden_grids(pixel_goldens, REAL_BATCH)
    from_list = BatchLayout.from_grids(grids)
    from_tensor = BatchLayout.from_grids(torch.tensor(grids, dtype=torch.int64))
    assert [s.rows for s in from_list.spans] == [s.rows for s in from_tensor.spans]
    assert [s.token_span for s in from_list.spans] == [s.token_span for s in from_tensor.spans]
    assert from_list.spans[0].label == "image 0"
    assert from_list.spans[0].padding_full is None


def test_from_grids_t_greater_than_one_counts_rows_per_frame_and_tokens_once():
    layout = BatchLayout.from_grids([(3, 4, 6), (1, 2, 2)])
    assert layout.spans[0].rows == (0, 72) and layout.spans[1].rows == (72, 76)
    assert layout.spans[0].token_span == (0, 6) and layout.spans[1].token_span == (6, 7)


@pytest.mark.parametrize("bad", [[(1, 0, 4)], [(1, 4)], [(1, -2, 4)], [("a", 2, 2)]])
def test_from_grids_rejects_malformed_grids(bad):
    with pytest.raises(RowCountError, match=r"grid of image 0 is .*expected three positive integers"):
        BatchLayout.from_grids(bad)


def test_from_output_rejects_rows_that_do_not_fit_the_grid(real_output):
    records = list(real_output.records)
    broken = replace(records[1], span=replace(records[1].span, rows=(1444, 2888)))
    output = ProcessorOutput(
        real_output.pixel_values, real_output.grid_thws, [records[0], broken, records[2]], "checkpoint"
    )
    with pytest.raises(RowCountError, match=r"image 1 \(coffee\.png\) records rows \[1444, 2888\).*\[1444, 2764\)"):
        BatchLayout.from_output(output)
    short = ProcessorOutput(real_output.pixel_values[:-1], real_output.grid_thws, records, "checkpoint")
    with pytest.raises(RowCountError, match=r"pixel_values has 3211 rows but the records' grids add up to 3212"):
        BatchLayout.from_output(short)


# --- lookups -----------------------------------------------------------------------------------
def test_row_to_patch_scalar_and_vectorised_agree_with_raster_order():
    layout = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44), (2, 4, 6)])
    assert layout.row_to_patch(0) == (0, 0, 0, 0)
    assert layout.row_to_patch(1444) == (1, 0, 0, 0)
    assert layout.row_to_patch(1444 + 44 + 3) == (1, 0, 1, 3)
    assert layout.row_to_patch(2764 + 24 + 6 + 5) == (2, 1, 1, 5)
    rows = np.arange(layout.total_rows)
    image, frame, y, x = layout.row_to_patch(rows)
    assert image.shape == rows.shape
    for k in (0, 37, 1443, 1444, 2000, 2763, 2764, 2787, 2788, layout.total_rows - 1):
        assert layout.row_to_patch(int(k)) == (image[k], frame[k], y[k], x[k])
    assert np.array_equal(layout.image_of_row(rows), image)


@settings(max_examples=60, deadline=None)
@given(
    grids=st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 20).map(lambda v: 2 * v), st.integers(1, 20).map(lambda v: 2 * v)),
        min_size=1,
        max_size=6,
    ),
    data=st.data(),
)
def test_lookups_round_trip_for_random_rows(grids, data):
    layout = BatchLayout.from_grids(grids)
    rows = np.array(data.draw(st.lists(st.integers(0, layout.total_rows - 1), min_size=1, max_size=30)))
    image, frame, y, x = layout.row_to_patch(rows)
    for k, row in enumerate(rows):
        assert layout.patch_to_row(int(image[k]), int(y[k]), int(x[k]), int(frame[k])) == row
        token = layout.row_to_token(int(row))
        assert row in layout.token_to_rows(token)
    tokens = layout.row_to_token(rows)
    assert np.array_equal(tokens, [layout.row_to_token(int(r)) for r in rows])


def test_tokens_follow_the_towers_2x2_merge_order():
    grids = [(1, 6, 8), (2, 4, 6), (1, 2, 2)]
    layout = BatchLayout.from_grids(grids)
    token = 0
    for span in layout.spans:
        groups = merge_groups(*span.grid_thw)
        assert len(groups) == span.num_tokens
        for local in groups:
            rows = layout.token_to_rows(token)
            assert rows.tolist() == (span.rows[0] + local).tolist()
            assert len(rows) == 4 * span.grid_thw[0]
            assert np.all(layout.row_to_token(rows) == token)
            token += 1
    assert token == layout.total_tokens


def test_token_rows_are_the_2x2_block_in_reading_order():
    layout = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44)])
    # token (ty=1, tx=2) of coffee groups patches (2,4), (2,5), (3,4), (3,5)
    token = 361 + 1 * 22 + 2
    expected = [layout.patch_to_row(1, y, x) for y, x in ((2, 4), (2, 5), (3, 4), (3, 5))]
    assert layout.token_to_rows(token).tolist() == expected


def test_odd_grid_rows_outside_a_full_merge_group_have_no_token():
    layout = BatchLayout.from_grids([(1, 3, 4)])
    assert layout.total_tokens == 2
    assert layout.row_to_token(layout.patch_to_row(0, 2, 1)) == -1
    assert layout.row_to_token(layout.patch_to_row(0, 1, 3)) == 1


def test_patch_to_row_vectorised():
    layout = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44)])
    ys, xs = np.array([0, 29, 5]), np.array([0, 43, 7])
    assert layout.patch_to_row(1, ys, xs).tolist() == [1444 + y * 44 + x for y, x in zip(ys, xs)]


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda lay: lay.row_to_patch(3212), r"row 3212 is outside the batch's 3212 rows \[0, 3212\)"),
        (lambda lay: lay.row_to_patch(np.array([1, -1])), r"row -1 is outside"),
        (lambda lay: lay.token_to_rows(803), r"token 803 is outside the batch's 803 merged tokens"),
        (
            lambda lay: lay.patch_to_row(1, 30, 0),
            r"y=30 is outside image 1 \(image 1, grid 1×30×44\); expected 0 <= y < 30",
        ),
        (lambda lay: lay.patch_to_row(3, 0, 0), r"image 3 is outside the batch's 3 images"),
        (lambda lay: lay.patch_to_row("1", 0, 0), r"image '1' is not an integer; pass one image index"),
        (lambda lay: lay.token_to_rows(2.0), r"token 2.0 is not an integer"),
    ],
)
def test_lookups_outside_the_layout_raise_with_the_bad_value(call, pattern):
    layout = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44), (1, 14, 32)])
    with pytest.raises(LayoutLookupError, match=pattern) as info:
        call(layout)
    assert isinstance(info.value, (KimiVizError, IndexError))


def test_to_json_is_serialisable_and_complete(real_output):
    data = json.loads(json.dumps(BatchLayout.from_output(real_output).to_json()))
    assert data["total_rows"] == 3212 and data["images"] == 3 and data["merge"] == 2
    assert data["spans"][1]["rows"] == [1444, 2764] and data["spans"][1]["grid_thw"] == [1, 30, 44]
    assert data["spans"][1]["label"] == "coffee.png"
    assert data["total_tokens"] == sum(s["tokens"] for s in data["spans"])


# --- comparison --------------------------------------------------------------------------------
LABELS = list(REAL_BATCH)


def test_compare_layouts_names_the_first_divergent_image_with_both_counts():
    expected = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44), (1, 14, 32)], labels=LABELS)
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 38, 38), (1, 14, 32)], labels=LABELS)
    result = compare_layouts(expected, produced)
    assert not result.equal
    assert result.first_divergent_image == 1
    assert (result.expected_rows, result.produced_rows) == (1320, 1444)
    assert (result.expected_total, result.produced_total) == (3212, 3336)
    assert result.message.startswith(
        "image 1 (coffee.png): expected 1320 rows [1444, 2764), produced 1444 rows [1444, 2888)"
    )
    assert [row["equal"] for row in result.table] == [True, False, False]
    assert result.table[2]["produced_rows"] == [2888, 3336]
    json.dumps(result.to_json())


def test_compare_layouts_with_a_missing_image():
    expected = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44), (1, 14, 32)], labels=LABELS)
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44)], labels=LABELS[:2])
    result = compare_layouts(expected, produced)
    assert result.first_divergent_image == 2
    assert (result.expected_rows, result.produced_rows) == (448, None)
    assert "image 2 (text.png): expected 448 rows [2764, 3212), produced none" in result.message
    assert "has 2 images, expected 3" in result.message
    assert result.table[2]["produced_rows"] is None


def test_compare_layouts_with_an_extra_produced_image():
    expected = BatchLayout.from_grids([(1, 38, 38)], labels=LABELS[:1])
    produced = BatchLayout.from_grids([(1, 38, 38), (1, 2, 2)], labels=["astronaut.png", "tiny.png"])
    result = compare_layouts(expected, produced)
    assert result.first_divergent_image == 1
    assert (result.expected_rows, result.produced_rows) == (None, 4)
    assert result.message.startswith("image 1 (tiny.png): expected none")


def test_compare_layouts_same_count_different_grid_is_a_divergence():
    expected = BatchLayout.from_grids([(1, 38, 38)], labels=LABELS[:1])
    produced = BatchLayout.from_grids([(1, 19, 76)], labels=LABELS[:1])
    result = compare_layouts(expected, produced)
    assert not result.equal and result.first_divergent_image == 0
    assert "expected grid 1×38×38, produced grid 1×19×76, both 1444 rows [0, 1444)" in result.message


def test_compare_layouts_equal():
    a = BatchLayout.from_grids([(1, 38, 38), (1, 30, 44)])
    result = compare_layouts(a, BatchLayout.from_grids(torch.tensor([[1, 38, 38], [1, 30, 44]])))
    assert result.equal and result.first_divergent_image is None
    assert result.message == "layouts agree: 2 images, 2764 rows"


def test_image_span_properties():
    span = ImageSpan(0, "x", (2, 4, 6), (10, 58), (3, 9))
    assert (span.patches, span.num_tokens, span.grid_text) == (48, 6, "2×4×6")
    assert (span.grid_thw, span.token_span, span.number) == ((2, 4, 6), (3, 9), 0)  # number defaults to index
    assert ImageSpan(1, "y", (1, 2, 2), (0, 4), (0, 1), number=7).number == 7
    # the JSON keys stay as they were: "tokens" is the count, "token_span" the span
    assert span.to_json() == {
        "index": 0,
        "label": "x",
        "grid_thw": [2, 4, 6],
        "rows": [10, 58],
        "patches": 48,
        "token_span": [3, 9],
        "tokens": 6,
        "padding_patches": {"full": None, "partial": None},
    }


def test_from_grids_numbers_each_span_as_shown():
    layout = BatchLayout.from_grids([(1, 2, 2), (1, 4, 4)], numbers=[3, 5])
    assert [(s.index, s.number) for s in layout.spans] == [(0, 3), (1, 5)]
    assert [s.number for s in BatchLayout.from_grids([(1, 2, 2), (1, 4, 4)]).spans] == [0, 1]
    with pytest.raises(RowCountError, match=r"numbers has 1 entries for 2 grids; pass one number per grid"):
        BatchLayout.from_grids([(1, 2, 2), (1, 4, 4)], numbers=[3])


def test_record_counts_its_tokens_as_num_tokens(real_output):
    record = real_output.records[1]
    assert record.num_tokens == record.token_span[1] - record.token_span[0] == 330
    assert record.to_json()["tokens"] == 330 and record.to_json()["token_span"] == list(record.token_span)


def test_source_label_is_the_file_name_or_the_index():
    assert source_label("/data/images/coffee.png", 1) == "coffee.png"
    assert source_label("C:\\photos\\cat.jpg", 2) == "cat.jpg"
    assert source_label("<bytes>", 3) == "image 3"
    assert source_label("", 4) == source_label(None, 4) == "image 4"


def test_layout_of_accepts_a_layout_an_output_or_grids(real_output):
    layout = BatchLayout.from_output(real_output)
    assert layout_of(layout) is layout
    assert [s.rows for s in layout_of(real_output).spans] == [s.rows for s in layout.spans]
    assert [s.rows for s in layout_of([s.grid_thw for s in layout.spans]).spans] == [s.rows for s in layout.spans]
