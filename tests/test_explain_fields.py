"""`kimi-viz explain` recognises a message by SGLang's own words around its fields, whatever the fields hold.

Every catalogue entry is filled with one kind of value in all its fields — a count, a list, a shape, a
request id, ``None``, text with a colon — and must be recognised as that entry and nothing else. A
field that holds no number where SGLang prints one is said so in the answer.
"""

from __future__ import annotations

import pytest

from kimi_viz._explain import explain, format_explanations, pattern_for, read_numbers
from kimi_viz.message_catalogue import BY_KEY, CATALOGUE

KINDS = {
    "int": "2",
    "list": "[2, 1]",
    "shape": "torch.Size([3, 14])",
    "id": "req-1",
    "none": "None",
    "colon": "a: b",
}


def _ambiguous(template: str, value: str) -> set[int]:
    """Return the fields whose bounds the text cannot tell when every field holds ``value``.

    Only the words around a field mark where it ends: a value that holds the words after its field
    (``a: b`` before ``: ``), a field that starts the template (only the word before the text is read)
    and two fields with only a space between them can be cut elsewhere, and so can the field after.
    """
    parts = template.split("{}")
    out: set[int] = set()
    for index in range(len(parts) - 1):
        after = parts[index + 1].rstrip(".")
        if (after.strip() and after in value) or (index == 0 and not parts[0] and " " in value):
            out.update({index, index + 1})
        if index > 0 and parts[index] and not parts[index].strip() and " " in value:
            out.update({index - 1, index})
    return out


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("message", CATALOGUE, ids=[m.key for m in CATALOGUE])
def test_every_entry_is_recognised_whatever_its_fields_hold(message, kind):
    value = KINDS[kind]
    text = message.sample(tuple(value for _ in message.fields))
    prefix = "[2026-02-03 04:05:06 TP1] " + ("WARNING " if message.logged else f"{'/'.join(message.kinds)}: ")
    found = explain(prefix + text + "\n")
    assert [f.message.key for f in found] == [message.key], text
    unclear = _ambiguous(message.template, value)
    for index, name in enumerate(message.field_names):
        if index not in unclear:
            assert str(found[0].values[name]) == value, (text, name, found[0].values)


def test_a_layout_that_is_one_number_is_recognised_and_said_to_be_no_list():
    [item] = explain("InternalError: Batch layout 111 expects 148 grids, but the processor produced 2")
    assert item.message.key == "epd-batch-grids"
    assert item.values == {"layout": 111, "expected": 148, "produced": 2}
    assert item.numbers == {"expected": 148, "produced": 2}
    assert item.notes == ("field layout holds '111', not a list of numbers",)
    assert "  note:      field layout holds '111', not a list of numbers" in format_explanations([item]).splitlines()


def test_a_count_that_holds_none_is_said_so():
    [item] = explain("ValueError: Invalid batch layout None for None requests")
    assert item.message.key == "epd-batch-layout"
    assert item.values == {"layout": "None", "requests": "None"}
    assert item.numbers == {}
    assert item.notes == (
        "field layout holds 'None', not a list of numbers",
        "field requests holds 'None', not a number",
    )
    assert item.to_json()["notes"] == list(item.notes)


def test_lists_and_shapes_are_read_as_numbers():
    [item] = explain("Invalid batch layout [2, 1] for 3 requests")
    assert item.numbers == {"layout": [2, 1], "requests": 3} and item.notes == ()
    [meta] = explain(
        "InternalError: Embedding metadata mismatch for req-1: expected=torch.Size([111, 7168])/torch.bfloat16, "
        "actual=(185, 7168)/torch.float16"
    )
    assert meta.message.key == "epd-embedding-metadata"
    assert meta.values == {
        "request": "req-1",
        "expected_shape": "torch.Size([111, 7168])",
        "expected_dtype": "torch.bfloat16",
        "shape": "(185, 7168)",
        "dtype": "torch.float16",
    }
    assert meta.numbers == {"expected_shape": [111, 7168], "shape": [185, 7168]}


def test_the_issue_lines_are_recognised():
    lines = {
        "Embedding metadata mismatch for req-1: expected=111/148, actual=185/222": "epd-embedding-metadata",
        "Preprocessor returned 2 token counts for 3 grid entries": "epd-token-counts",
        "Kimi image item needs one [t, h, w] grid, got [1, 2, 3, 4]": "identity-one-grid",
        "EPD multimodal items must contain tensor embeddings; got list for image": "epd-items-not-tensors",
    }
    for line, key in lines.items():
        assert [f.message.key for f in explain(line)] == [key], line
    [counts] = explain("Preprocessor returned 2 token counts for 3 grid entries")
    assert counts.values == {"counts": 2, "grids": 3, "modality": None}
    [grid] = explain("ValueError: Kimi image item needs one [t, h, w] grid, got [[1, 2, 3], [1, 4, 4]]")
    assert grid.values == {"grid": "[[1, 2, 3], [1, 4, 4]]"}


def test_a_value_read_by_its_form_stops_where_the_line_goes_on():
    [item] = explain('{"msg": "Kimi-K3 image feature must be a torch.Tensor, got <class \'list\'>", "level": 40}')
    assert item.values == {"type": "<class 'list'>"}


def test_read_numbers_notes_only_numeric_forms():
    forms = {"a": "n", "b": "word", "c": "shape", "d": "list"}
    numbers, notes = read_numbers(forms, {"a": 3.5, "b": "7x", "c": "torch.Size([])", "d": None})
    assert numbers == {"a": 3.5, "c": []}
    assert notes == ("field d is empty, not a list of numbers",)


def test_the_pattern_has_one_group_per_field():
    message = BY_KEY["epd-embedding-metadata"]
    assert pattern_for(message).count("(?P<") == len(message.fields)
