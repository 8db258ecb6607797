"""Answers as JSON: one shape for every question, its sweep and its shrinking (``--json``, ``docs/whatif.md``).

:func:`answer_json` gives every answer the same top-level fields (``question``, ``sglang_version``,
``tp_size``, ``status``, ``exit_code``, ``stage``, ``error``, ``failing_ranks``, ``why``, ``fixed_in``,
``notes``, ``verdict``) plus what its question replayed: a request's items and call, a workload's
passes, a chat request's checks. :func:`cell_json` is one sweep cell, :func:`minimized_json` a shrunk
failure. Presenters import the answer; the answer imports none of them.
"""

from __future__ import annotations

from typing import Any

from ..answer import Answer, Cell, FlagSearch, Minimized, PairHint
from ..split.cause import ErrorInfo
from .answer_views import advice, culprit_unit, failing_pass


def _error(error: ErrorInfo | None) -> dict[str, str] | None:
    """Return ``{"type", "message"}`` or None."""
    return None if error is None else error.to_json()


def hint_json(hint: PairHint) -> dict[str, Any]:
    """Return ``{"partner", "partner_size", "error", "failing_ranks", "tried", "command"}``."""
    return {
        "partner": hint.partner.label,
        "partner_size": [hint.partner.width, hint.partner.height],
        "error": _error(hint.answer.error),
        "failing_ranks": hint.answer.failing_ranks,
        "tried": hint.tried,
        "command": hint.command,
    }


def _replay_json(answer: Answer) -> dict[str, Any]:
    """Return what the question replayed: a request's items and call, a workload's passes, a chat's checks."""
    request, workload, chat = answer.request, answer.workload, answer.chat
    if request is not None:
        built = request.built
        return {
            "request_side": built.request_side.version,
            "settings": built.settings.to_json(),
            "images": [im.to_json() for im in built.images],
            "built": built.to_json(),
            "call": request.call.to_json(),
            "culprit": request.culprit(answer.verdict),
            "under_load": None if answer.under_load is None else hint_json(answer.under_load),
        }
    if chat is not None:
        return {
            "request": chat.outcome.request.to_json(),
            "request_side": chat.outcome.to_json(),
            "advice": advice(chat.outcome),
            "load": None if workload is None else workload.to_json(),
        }
    if workload is not None:
        data = workload.to_json()
        for key in ("sglang_version", "tp_size", "status", "error", "notes"):
            data.pop(key)
        return data
    return {}


def answer_json(answer: Answer) -> dict[str, Any]:
    """Return the answer as JSON: the fields every question shares, then what its question replayed.

    ``server`` is the server read from a launch command or a log (``inputs``, ``release``, ``tp``, ``sources``,
    ``not_modelled``, ``notes``; null when none was read); a workload's replay has a ``server`` of its own (what the
    release resolves the flags to: ``tree``, ``strategy``, ``memory``, …), and the two are one object then."""
    document: dict[str, Any] = {
        "question": answer.kind,
        "sglang_version": answer.release.version,
        "tp_size": answer.tp_size,
        "status": answer.status.value,
        "exit_code": answer.exit_code,
        "stage": answer.stage,
        "error": _error(answer.error),
        "failing_ranks": answer.failing_ranks,
        "why": answer.why,
        "fixed_in": None if answer.fixed_in is None else answer.fixed_in.to_json(),
        "notes": list(answer.notes),
        "verdict": None if answer.verdict is None else answer.verdict.to_json(answer.fixes),
        "flags": None if answer.flags is None else flags_json(answer.flags),
        "server": None if answer.server is None else answer.server.to_json(),
    }
    replay = _replay_json(answer)
    resolved = replay.pop("server", None)
    if resolved is not None:  # a workload's: the server the flags resolve to, with where its values came from
        document["server"] = {**resolved, **(document["server"] or {})}
    return {**document, **replay}


def flags_json(search: FlagSearch) -> dict[str, Any]:
    """Return ``{"tried": [flag, ...], "changes": [{"flag", "status"}, ...]}``."""
    return {
        "tried": list(search.tried),
        "changes": [{"flag": c.flag, "status": c.status.value} for c in search.changes],
    }


def cell_json(cell: Cell) -> dict[str, Any]:
    """Return one sweep cell: its releases, TP size, status, error, ranks, failing pass, scenario class and why."""
    answer = cell.answer
    verdict = None if answer is None else answer.verdict
    return {
        "release": cell.releases[0].version,
        "releases": [r.version for r in cell.releases],
        "request_side": cell.releases[0].request_side.version,
        "code_path": cell.releases[0].code_path,
        "tp_size": cell.tp_size,
        "status": cell.status.value,
        "stage": None if answer is None else answer.stage,
        "error": _error(cell.error),
        "failing_ranks": [] if answer is None else answer.failing_ranks,
        "failing_pass": failing_pass(answer),
        "ranks": None if verdict is None else [r.to_json() for r in verdict.ranks],
        "scenario_class": None if verdict is None else verdict.divergence.scenario_class,
        "culprit": None if answer is None or answer.request is None else answer.request.culprit(verdict),
        "headline": None if verdict is None else verdict.headline(),
        "why": cell.reason if answer is None else answer.why,
    }


def minimized_json(found: Minimized) -> dict[str, Any]:
    """Return the minimal set: the error kept, the kept images (request, position, label), the culprit, the orders."""
    culprit = culprit_unit(found)
    return {
        "sglang_version": found.answer.release.version,
        "tp_size": found.answer.tp_size,
        "error": _error(found.target),
        "kept": [{"request": found.units[k].request, "image": found.units[k].position} for k in found.kept],
        "labels": [found.units[k].label for k in found.kept],
        "culprit": None if culprit is None else found.units[culprit].position,
        "culprit_label": None if culprit is None else found.units[culprit].label,
        "tests": found.tests,
        "order_matters": found.order_matters,
        "orders": [{"order": list(order), "fails": fails} for order, fails in found.orders],
        "answer": answer_json(found.answer),
    }


__all__ = ["answer_json", "cell_json", "hint_json", "minimized_json"]
