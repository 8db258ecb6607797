"""The values a matched message carries, read as numbers and put into words.

:func:`parse_value` reads one matched field (an int, a float, else its text); :func:`read_numbers`
reads each field as numbers where its form (:data:`kimi_viz.message_catalogue.messages.FIELD_FORMS`) promises them and
notes each that holds something else; :func:`in_words` puts a message's numbers into a sentence
("3 image(s) sent, 2 <|media_pad|> placeholder(s) ...: 1 placeholder(s) missing").
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from .. import message_catalogue
from .known import CAPTURE_KEY


def _gap(have: Any, need: Any, unit: str) -> str:
    """Return "N missing" / "N too many" for two counts, or "" when either is not a number."""
    if not (isinstance(have, int) and isinstance(need, int)) or have == need:
        return ""
    return f": {need - have} {unit} missing" if need > have else f": {have - need} {unit} too many"


def in_words(key: str, values: dict[str, Any]) -> str:
    """Return the numbers of a matched message put into words."""
    v = values
    if key in ("one-to-one", "placeholder-tokens", "placeholder-text"):
        where = "token ids" if key != "placeholder-text" else "text"
        return (
            f"{v['images']} image(s) sent, {v['placeholders']} <|media_pad|> placeholder(s) in the prompt's {where}"
            + _gap(v["placeholders"], v["images"], "placeholder(s)")
        )
    if key == "one-to-one-loaded":
        return f"{v['images']} image(s) sent, {v['loaded']} loaded from the text's placeholders"
    if key == "prompt-has-placeholders":
        return f"{v['placeholders']} {v['placeholder_modality']} placeholder(s) in the text, {v['inputs']} sent"
    if key == "processor-length":
        produced, expected = v["produced"], v["expected"]
        if not (isinstance(produced, int) and isinstance(expected, int)):
            return f"pixel_values has {produced} rows, the grids need {expected}"
        return (
            f"pixel_values has {produced} rows, the grids need {expected} "
            f"({'+' if produced >= expected else ''}{produced - expected} rows)"
        )
    if key == "insufficient-embedding":
        tokens, rows = v["prompt_tokens"], v["feature_rows"]
        return f"the prompt has {tokens} <|media_pad|> tokens but the embedding has {rows} rows" + (
            f" ({tokens - rows} missing)" if isinstance(tokens, int) and isinstance(rows, int) else ""
        )
    if key == "token-mismatch":
        tokens, rows = v["prompt_tokens"], v["feature_rows"]
        if not (isinstance(tokens, int) and isinstance(rows, int)):
            return f"{tokens} pad tokens in the window, {rows} rows"
        if rows > tokens:
            return (
                f"{tokens} pad tokens in the window, {rows} rows: SGLang keeps the last {tokens} rows and drops the "
                f"first {rows - tokens} (no error; the images may be spliced with other images' rows)"
            )
        return (
            f"{tokens} pad tokens in the window, {rows} rows: {tokens - rows} missing, the Insufficient error follows"
        )
    if key == "discard-cached":
        return (
            f"the cache held {v['cached']} rows under key {v['cache_key']} for an image of "
            f"{v['expected']} pad tokens: dropped and encoded again"
        )
    if key == "split-sizes":
        sizes = [int(x) for x in str(v["sizes"]).strip("[]").split(",") if x.strip().isdigit()]
        if not isinstance(v["rows"], int):
            return f"the call returned {v['rows']} rows; its item(s) need {sizes}"
        rows, need = v["rows"], sum(sizes)
        gap = f"{need - rows} missing" if need > rows else f"{rows - need} too many"
        return f"the call returned {rows} rows; its {len(sizes)} item(s) need {need} ({sizes}): {gap}"
    if key == "encoder-produced":
        return (
            f"the encoder produced {v['produced']} feature rows, the preprocessing metadata expects {v['expected']}"
            + _gap(v["produced"], v["expected"], "row(s)")
        )
    if key == "epd-rows-vs-offsets":
        return f"the prompt's offsets cover {v['expected']} pad tokens, the encoder sent {v['got']} rows" + _gap(
            v["got"], v["expected"], "row(s)"
        )
    if key == "epd-rows-consumed":
        return f"the encoder sent {v['received']} rows, the request's items use {v['consumed']}"
    if key == "per-item-count":
        return f"{v['embeddings']} embedding(s) for {v['items']} cache-miss item(s)"
    if key == CAPTURE_KEY:
        error = v.get("error")
        return f"a manifest of the call that raised {error}" if error else "a manifest of a recorded call"
    if key == "channel-count":
        return f"a tensor was read with {v['channels']} channels"
    if key == "broadcast-alpha":
        return f"alpha had {v['a']} channels against {v['b']} colour channels"
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in v.items() if value not in (None, ""))


def parse_value(text: str | None) -> Any:
    """Return a matched field as an int or a float when it is one, else as its text (None: not matched)."""
    if text is not None and re.fullmatch(r"-?\d+", text):
        return int(text)
    if text is not None and re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    return text


# What a field of each numeric form holds when SGLang prints it: the words for a note when it holds else.
NUMERIC_FORMS = {"n": "a number", "list": "a list of numbers", "shape": "a shape"}
_NUMBER_LIST = re.compile(r"(?:torch\.Size\()?[\[(]\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*,?\s*[\])]\)?")


def read_numbers(forms: dict[str, str], values: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return each field's value read as numbers where its form promises them, and a note for each that is not.

    A count (form ``n``) reads as an int or a float; a list or a shape (``[2, 1]``, ``(2, 1)``,
    ``torch.Size([3, 14])``) as a list of ints. A field that holds something else (``None``, an id,
    text) keeps its text in the values and gets a note: "field layout holds '111', not a list of numbers".
    """
    numbers: dict[str, Any] = {}
    notes: list[str] = []
    for name, value in values.items():
        form = forms.get(name, "text")
        if form not in NUMERIC_FORMS:
            continue
        if value is None or value == "":
            notes.append(f"field {name} is empty, not {NUMERIC_FORMS[form]}")
        elif form == "n" and isinstance(value, (int, float)):
            numbers[name] = value
        elif form != "n" and (match := _NUMBER_LIST.fullmatch(str(value))):
            numbers[name] = [int(x) for x in (match.group(1) or "").replace(" ", "").split(",") if x]
        else:
            notes.append(f"field {name} holds {str(value)!r}, not {NUMERIC_FORMS[form]}")
    return numbers, tuple(notes)


@cache
def field_forms(key: str) -> dict[str, str]:
    """Return the form of each field of the message ``key`` (none for the kit's capture line)."""
    message = message_catalogue.BY_KEY.get(key)
    return dict(zip(message.field_names, message.field_forms)) if message else {}
