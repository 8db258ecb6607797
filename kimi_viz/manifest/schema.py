"""The manifest format itself: its constants, the shipped JSON Schema, and the checks of ``manifest.json``.

:func:`validate_manifest_json` checks a parsed ``manifest.json`` against
``kimi_viz/manifest/manifest-v1.schema.json`` (draft 2020-12, with ``integer`` excluding ``1.0`` and
booleans), rewrites the first error in the kit's own words naming the JSON path
(``items[3].deferred.resize_config.pad_width``), reports unknown keys as warnings, and then checks
what the schema cannot say (ranks and indices inside their ranges, and a ``forward_context`` that fits
the call's items). :func:`parse_json` reads the bytes of ``manifest.json`` strictly (UTF-8, no
NaN/Infinity, no absurd nesting).

A manifest holds at most :data:`MAX_ITEMS` items (refused before validation). Items that plainly
follow the schema (:func:`~kimi_viz.manifest.fastcheck.item_is_plainly_valid`) skip ``jsonschema``,
which validates the rest of the document and every other item, so validation is linear and cheap; when
the rest plainly follows it too (:func:`~kimi_viz.manifest.fastcheck.document_is_plainly_valid`),
``jsonschema`` is not even imported.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ManifestError
from .fastcheck import document_is_plainly_valid, item_is_plainly_valid
from .format import FORMAT, MAX_ITEMS, VERSION


class ManifestWarning(UserWarning):
    """An unknown key (or another harmless oddity) in a manifest; the message names the JSON path."""


# ------------------------------------------------------------------------------------------
# JSON paths and value descriptions for error messages
# ------------------------------------------------------------------------------------------
def json_path(parts: Iterable[Any]) -> str:
    """Return a JSON path such as ``items[3].deferred.resize_config.pad_width`` for the given parts."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(str(part))}]"
    return text or "(top level)"


def _describe(value: Any) -> str:
    """Return a short description of a JSON value, e.g. ``the string '1'``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"the integer {value}" if abs(value) < 10**30 else "a huge integer"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)} entries"
    if isinstance(value, dict):
        return f"an object with {len(value)} keys"
    return type(value).__name__


_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


# ------------------------------------------------------------------------------------------
# Schema validation
# ------------------------------------------------------------------------------------------
def schema_path() -> Path:
    """Return the path of the shipped JSON Schema (draft 2020-12) for manifest version 1."""
    return Path(__file__).resolve().parent / "manifest-v1.schema.json"


def _import_jsonschema():
    """Import jsonschema without its optional ``rfc3987_syntax`` format checker (it builds a grammar at
    import, about 2.5 s; the manifest schema uses no ``format``). A later import of it still works."""
    blocked = "rfc3987_syntax" not in sys.modules
    if blocked:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]
    try:
        import jsonschema
    finally:
        if blocked and sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]
    return jsonschema


@lru_cache(maxsize=1)
def _validator():
    """Return a draft 2020-12 validator whose ``integer`` excludes floats like 1.0 and booleans."""
    jsonschema = _import_jsonschema()

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ).redefine(
        "number",
        lambda _checker, value: (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ),
    )
    strict = jsonschema.validators.extend(base, type_checker=checker)
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    return strict(schema)


def _schema_error_message(error) -> tuple[str, str]:
    """Return ``(json_path, message)`` in the kit's own words for one jsonschema error."""
    path = list(getattr(error, "kv_path", error.absolute_path))
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required":
        missing = [key for key in expected if key not in value]
        key = missing[0] if missing else "?"
        return json_path(path + [key]), f"missing required key {key!r}; add it (see the manifest format)"
    if kind == "type":
        names = [expected] if isinstance(expected, str) else list(expected)
        wanted = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
        return json_path(path), f"expected {wanted}, got {_describe(value)}"
    if kind == "const":
        return json_path(path), f"expected {json.dumps(expected)}, got {_describe(value)}"
    if kind == "enum":
        options = ", ".join(json.dumps(v) for v in expected)
        return json_path(path), f"expected one of {options}, got {_describe(value)}"
    if kind == "minimum":
        return json_path(path), f"expected a value >= {expected}, got {_describe(value)}"
    if kind == "maximum":
        return json_path(path), f"expected a value <= {expected}, got {_describe(value)}"
    if kind in ("minItems", "maxItems"):
        if error.schema.get("minItems") == error.schema.get("maxItems"):
            wanted = f"exactly {expected}"
        else:
            wanted = f"at least {expected}" if kind == "minItems" else f"at most {expected}"
        return json_path(path), f"expected a list of {wanted} entries, got {len(value)}"
    if kind in ("minLength", "maxLength"):
        wanted = f"at least {expected}" if kind == "minLength" else f"at most {expected}"
        return json_path(path), f"expected a string of {wanted} characters, got {len(value)}"
    return json_path(path), f"invalid value {_describe(value)} ({kind})"


def _unknown_keys(error) -> list[str]:
    """Return the keys an ``additionalProperties`` error complains about."""
    known = set(error.schema.get("properties", {}))
    return [key for key in error.instance if key not in known]


def _check_header_fields(obj: Any) -> None:
    """Refuse anything that is not a version-1 kimi-viz manifest, naming the field."""
    if not isinstance(obj, dict):
        raise ManifestError(
            f"expected a JSON object at the top level of manifest.json, got {_describe(obj)}", json_path="(top level)"
        )
    if "format" not in obj:
        raise ManifestError(
            'missing required key "format"; a kimi-viz manifest starts with "format": "kimi-viz-manifest"',
            json_path="format",
        )
    if obj["format"] != FORMAT:
        raise ManifestError(
            f"unknown format {_describe(obj['format'])}; expected {json.dumps(FORMAT)} (is this a kimi-viz manifest?)",
            json_path="format",
        )
    if "version" not in obj:
        raise ManifestError('missing required key "version"; expected "version": 1', json_path="version")
    version = obj["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ManifestError(
            f'expected the integer 1, got {_describe(version)} (write "version": 1)', json_path="version"
        )
    if version != VERSION:
        raise ManifestError(
            f"unsupported manifest version {version}; this kimi-viz reads version {VERSION} "
            "only (upgrade kimi-viz, or re-export the manifest as version 1)",
            json_path="version",
        )


def _check_semantics(obj: dict) -> None:
    """Check what the schema cannot say: ranks and indices inside their ranges, the forward context's links."""
    runtime = obj.get("runtime") or {}
    size = runtime.get("attn_tp_size", 1)
    rank = runtime.get("attn_tp_rank")
    if rank is not None and rank >= size:
        raise ManifestError(
            f"rank {rank} does not exist with attn_tp_size {size}; expected 0..{size - 1} or null for all ranks",
            json_path="runtime.attn_tp_rank",
        )
    indices = runtime.get("image_indices")
    if indices is not None:
        count = len(obj["items"])
        for k, index in enumerate(indices):
            if index >= count:
                raise ManifestError(
                    f"image index {index} is out of range for {count} items",
                    json_path=json_path(["runtime", "image_indices", k]),
                )
    if isinstance(obj.get("forward_context"), dict):
        _check_forward_context(obj["forward_context"], len(obj["items"]))


def _check_forward_context(context: dict, count: int) -> None:
    """Check that ``forward_context`` fits the call: one entry per item, every index in range, links both ways."""
    requests, items = context["requests"], context["items"]
    if len(items) != count:
        raise ManifestError(
            f"{len(items)} entr{'y' if len(items) == 1 else 'ies'} for a call of {count} "
            f"item{'' if count == 1 else 's'}; expected one per item, in call order",
            json_path="forward_context.items",
        )
    for r, request in enumerate(requests):
        for i, image in enumerate(request["images"]):
            where = ["forward_context", "requests", r, "images", i]
            for k, (start, end) in enumerate(image["offsets"]):
                if start > end:
                    raise ManifestError(
                        f"the run [{start}, {end}] ends before it starts; expected inclusive [start, end] "
                        "token positions",
                        json_path=json_path([*where, "offsets", k]),
                    )
            call_item = image.get("call_item")
            if call_item is not None and call_item >= count:
                raise ManifestError(
                    f"call item {call_item} is out of range for a call of {count} items",
                    json_path=json_path([*where, "call_item"]),
                )
            if image["status"] == "in-call" and call_item is None:
                raise ManifestError(
                    'an image "in-call" must name its call_item', json_path=json_path([*where, "call_item"])
                )
            if image["status"] == "in-call" and items[call_item] != {"request": r, "image": i}:
                raise ManifestError(
                    f"this image says it is call item {call_item}, but forward_context.items[{call_item}] "
                    f"is {json.dumps(items[call_item])}",
                    json_path=json_path([*where, "call_item"]),
                )
    for k, item in enumerate(items):
        where = ["forward_context", "items", k]
        request, image = item["request"], item["image"]
        if request is None:
            if image is not None:
                raise ManifestError(
                    f"image {image} without its request; expected both or neither", json_path=json_path(where)
                )
            continue
        if request >= len(requests):
            raise ManifestError(
                f"request {request} is out of range for {len(requests)} requests",
                json_path=json_path([*where, "request"]),
            )
        images = requests[request]["images"]
        if image is None:
            raise ManifestError(
                f"request {request} without its image; expected both or neither", json_path=json_path(where)
            )
        if image >= len(images):
            raise ManifestError(
                f"image {image} is out of range for request {request}'s {len(images)} images",
                json_path=json_path([*where, "image"]),
            )
        if images[image]["status"] != "in-call" or images[image].get("call_item") != k:
            raise ManifestError(
                f"call item {k} comes from request {request}'s image {image}, whose status is "
                f'{json.dumps(images[image]["status"])}; expected "in-call" with call_item {k}',
                json_path=json_path([*where, "image"]),
            )


def validate_manifest_json(obj: Any) -> list[str]:
    """Validate a parsed ``manifest.json``; return warnings (unknown keys), raise ManifestError on errors.

    Warnings are strings ``"<json path>: unknown key 'x' (ignored)"``; errors name the JSON path
    of the first offending field.
    """
    _check_header_fields(obj)
    items = obj.get("items")
    if isinstance(items, list) and len(items) > MAX_ITEMS:
        raise ManifestError(
            f"the manifest has {len(items)} items, more than the limit of {MAX_ITEMS} for one get_image_feature "
            "batch; split it into smaller manifests",
            json_path="items",
        )
    slow = list(range(len(items))) if isinstance(items, list) else []
    document = obj
    plain = False  # every part plainly follows the schema: nothing for jsonschema to find
    if isinstance(items, list):
        slow = [i for i, item in enumerate(items) if not item_is_plainly_valid(item)]
        document = {**obj, "items": [items[i] for i in slow]}
        plain = not slow and document_is_plainly_valid(obj)
    try:
        errors = [] if plain else list(_validator().iter_errors(document))
    except RecursionError as exc:
        raise ManifestError("manifest.json is nested too deeply to be a kimi-viz manifest") from exc
    found: list[str] = []
    hard = []
    for error in errors:
        path = list(error.absolute_path)
        if document is not obj and len(path) >= 2 and path[0] == "items" and isinstance(path[1], int):
            path[1] = slow[path[1]]  # back to the item's index in the manifest
        error.kv_path = path
        if error.validator == "additionalProperties":
            found += [f"{json_path(path + [key])}: unknown key {key!r} (ignored)" for key in _unknown_keys(error)]
        else:
            hard.append(error)
    if hard:
        hard.sort(key=lambda e: (list(map(str, e.kv_path)), e.validator != "type"))
        jsonschema = _import_jsonschema()

        best = jsonschema.exceptions.best_match(hard)
        where, message = _schema_error_message(best)
        raise ManifestError(message, json_path=where)
    _check_semantics(obj)
    return sorted(set(found))


def parse_json(data: bytes, where: str) -> Any:
    """Return parsed JSON, refusing NaN/Infinity, bad UTF-8 and absurd nesting."""

    def refuse_constant(name: str):
        raise ManifestError(f"{where}: {name} is not valid JSON; write a finite number")

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(
            f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}); expected a JSON manifest"
        ) from exc
    try:
        return json.loads(text, parse_constant=refuse_constant)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:  # an integer literal longer than Python converts
        reason = str(exc).split(";")[0]
        raise ManifestError(f"{where} could not be read as JSON ({reason}); expected a kimi-viz manifest") from None
    except RecursionError as exc:
        raise ManifestError(f"{where} is nested too deeply to be a kimi-viz manifest") from exc
