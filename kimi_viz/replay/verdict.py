"""The verdict of a replay, in the one schema ``kimi-viz scenario run --json`` and ``kimi-viz triage --json`` share.

::

    {"outcome": "ok" | "error",
     "error": {"type": ..., "message": ...} | null,          # the first failing rank's exception
     "ranks": [{"rank", "image_indices", "outcome", "error"}],
     "divergence": {...}}                                    # see kimi_viz.divergence

:func:`build_verdict` makes it from a :class:`~kimi_viz.deferred.Trace`, :data:`VERDICT_SCHEMA`
describes it (JSON Schema), :func:`format_verdict` writes it for people and :func:`exit_code` maps
it to the CLI's exit status (0 clean, 1 an error reproduced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .deferred import Trace

_ERROR = {
    "type": ["object", "null"],
    "required": ["type", "message"],
    "additionalProperties": False,
    "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
}

VERDICT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "kimi-viz verdict",
    "type": "object",
    "required": ["outcome", "error", "ranks", "divergence", "release"],
    "properties": {
        "outcome": {"enum": ["ok", "error"]},
        "release": {
            "type": "object",
            "required": ["sglang_version", "code_path", "chosen_by", "note", "fixed_in"],
            "properties": {
                "sglang_version": {"type": "string"},
                "code_path": {"enum": ["no-split", "pre-fix", "post-fix"]},
                "chosen_by": {"enum": ["asked", "recorded", "detected", "variant", "assumed"]},
                "asked": {"type": ["string", "null"]},
                "note": {"type": "string"},
                "fixed_in": {
                    "type": ["object", "null"],
                    "required": ["release", "change", "code_path"],
                    "properties": {"release": {"type": "string"}, "change": {"type": "string"},
                                   "code_path": {"type": "string"}, "summary": {"type": "string"}},
                },
            },
        },
        "error": _ERROR,
        "ranks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rank", "image_indices", "outcome", "error"],
                "additionalProperties": False,
                "properties": {
                    "rank": {"type": "integer", "minimum": 0},
                    "image_indices": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}},
                    "outcome": {"enum": ["ok", "error"]},
                    "error": _ERROR,
                },
            },
        },
        "divergence": {
            "type": "object",
            "required": ["scenario_class", "silent", "first_image", "expected_rows", "produced_rows",
                         "expected_total", "produced_total", "wrong_expectation", "explanation", "fix", "images"],
            "properties": {
                "scenario_class": {"type": "string", "pattern": "^(S[0-9]+|skew|none|unknown)$"},
                "silent": {"type": "boolean"},
                "first_image": {"type": ["integer", "null"]},
                "expected_rows": {"type": ["integer", "null"]},
                "produced_rows": {"type": ["integer", "null"]},
                "expected_total": {"type": ["integer", "null"]},
                "produced_total": {"type": ["integer", "null"]},
                "wrong_expectation": {"type": ["string", "null"]},
                "explanation": {"type": "string"},
                "fix": {"type": ["string", "null"]},
                "images": {"type": "array"},
            },
        },
    },
}


def build_verdict(trace: "Trace") -> dict[str, Any]:
    """Return the verdict dict of a replay (plain JSON data)."""
    error = trace.error
    return {
        "outcome": trace.outcome,
        "error": None if error is None else error.to_json(),
        "ranks": [
            {"rank": r.rank, "image_indices": r.image_indices, "outcome": r.outcome,
             "error": None if r.error is None else r.error.to_json()}
            for r in trace.ranks
        ],
        "divergence": trace.divergence,
        "release": release_json(trace),
    }


def release_json(trace: "Trace") -> dict[str, Any]:
    """Return the ``release`` block: which SGLang release and code path were replayed, how chosen, and the fix release."""
    from .releases import choose_release

    choice = trace.release or choose_release(variant=trace.variant)
    return {**choice.to_json(), "fixed_in": trace.fixed_in()}


def release_lines(verdict: dict[str, Any]) -> list[str]:
    """Return the lines that say which release was replayed and, for a failure a later release fixes, which."""
    release = verdict.get("release")
    if not release:
        return []
    lines = [f"replayed: SGLang {release['sglang_version']} ({release['code_path']} path) — {release['note']}"]
    fix = release.get("fixed_in")
    if fix:
        lines.append(f"fixed in {fix['release']}: {fix['change']} (its {fix['code_path']} path replays this "
                     "batch clean)")
    elif verdict.get("outcome") == "error":
        from .releases import NEWEST

        newest = release["sglang_version"] == NEWEST or release["code_path"] == "post-fix"
        lines.append("not fixed by upgrading: " + (f"SGLang {NEWEST} runs this same code path" if newest else
                                                   "no later release's code replays this batch clean")
                     + "; the fix is in the batch (see fix)")
    return lines


def validate_verdict(verdict: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``verdict`` follows :data:`VERDICT_SCHEMA`."""
    import jsonschema

    jsonschema.validate(verdict, VERDICT_SCHEMA)


def exit_code(verdict: dict[str, Any]) -> int:
    """Return 0 when the batch replays cleanly, 1 when it reproduces an error."""
    return 1 if verdict["outcome"] == "error" else 0


def format_verdict(verdict: dict[str, Any], *, title: str | None = None) -> str:
    """Return the verdict as a few lines of plain text for a terminal."""
    lines = [title] if title else []
    lines += release_lines(verdict)
    error = verdict["error"]
    if error is None:
        lines.append("outcome: ok (SGLang raises nothing in get_image_feature)")
    else:
        lines.append(f"outcome: error — {error['type']}: {error['message']}")
    for rank in verdict["ranks"]:
        what = "ok" if rank["error"] is None else f"{rank['error']['type']}: {rank['error']['message']}"
        lines.append(f"  rank {rank['rank']}: images {rank['image_indices']} -> {what}")
    div = verdict.get("divergence") or {}
    cls = div.get("scenario_class", "none")
    if cls != "none" or div.get("first_image") is not None:
        silent = " (silent)" if div.get("silent") else ""
        lines.append(f"scenario class: {cls}{silent}")
        if div.get("first_image") is not None:
            label = f" ({div['label']})" if div.get("label") else ""
            lines.append(f"first diverging image: {div['first_image']}{label} on rank {div.get('rank')}: "
                         f"expected {div.get('expected_rows')} rows, produced {div.get('produced_rows')}")
        if div.get("expected_total") is not None or div.get("produced_total") is not None:
            lines.append(f"counts: expected {div.get('expected_total')}, produced {div.get('produced_total')}")
        if div.get("wrong_expectation"):
            lines.append(f"wrong expectation from: {div['wrong_expectation']}")
    if div.get("explanation"):
        lines.append(f"why: {div['explanation']}")
    if div.get("fix"):
        lines.append(f"fix: {div['fix']}")
    return "\n".join(lines)


__all__ = ["VERDICT_SCHEMA", "build_verdict", "validate_verdict", "exit_code", "format_verdict", "release_json",
           "release_lines"]
