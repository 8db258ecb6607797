"""The rules a release entry holds, by name, and what the table's releases run of each.

A rule is ``"code_path"`` or ``"<group>.<field>"`` of a release's rule records (``request_side``, ``forward``,
``scheduler``): :func:`rule_names` lists them, :func:`rule_value` reads one, :func:`rule_differences` says which two
releases run otherwise (each covered by one :class:`~kimi_viz.release_changes.shipped.Change` of the later one),
:func:`with_rules` builds a release as one change alone would make it, and :func:`releases_where` answers "which
releases do this": help and messages name releases from there, never from a written number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any

from ..releases import NEWEST, RELEASES, Release, ordered_releases
from .shipped import Change

#: The rule records of a release, each a group of rules named ``"<group>.<field>"``.
RULE_GROUPS = ("request_side", "forward", "scheduler")
_NOT_RULES = ("version", "changes")  # a record's first release and its sentence: not rules it runs


def rule_names() -> tuple[str, ...]:
    """Return every rule a release entry holds: ``"code_path"``, then ``"<group>.<field>"`` of each rule record."""
    records = RELEASES[NEWEST]
    return ("code_path",) + tuple(
        f"{group}.{f.name}"
        for group in RULE_GROUPS
        for f in fields(getattr(records, group))
        if f.name not in _NOT_RULES
    )


def rule_value(release: Release, rule: str) -> object:
    """Return the value ``release`` runs for ``rule`` (``"code_path"`` or ``"<group>.<field>"``)."""
    group, _, name = rule.partition(".")
    return getattr(getattr(release, group), name) if name else getattr(release, group)


def rule_differences(old: Release, new: Release) -> tuple[str, ...]:
    """Return the rules ``new`` runs otherwise than ``old``, in :func:`rule_names` order."""
    return tuple(rule for rule in rule_names() if rule_value(old, rule) != rule_value(new, rule))


def releases_where(rule: str, holds: Callable[[Any], bool] = bool) -> tuple[str, ...]:
    """Return the releases, oldest first, whose value of ``rule`` ``holds`` (by default: is true); e.g. those that
    discard a cached embedding of another length, ``releases_where("forward.discards_stale_cache")``. Help and
    messages take the releases they name from here, never from a written number."""
    return tuple(r.version for r in ordered_releases() if holds(rule_value(r, rule)))


def with_rules(release: Release, rules: Sequence[str], source: Release) -> Release:
    """Return ``release`` running ``source``'s value of each of ``rules`` and its own of the others: what
    ``release`` would be with one change alone (the records replaced, the table untouched)."""
    grouped: dict[str, dict[str, object]] = {}
    for rule in rules:
        group, _, name = rule.partition(".")
        grouped.setdefault(group, {})
        if name:
            grouped[group][name] = rule_value(source, rule)
    changed: dict[str, object] = {}
    for group, values in grouped.items():
        changed[group] = replace(getattr(release, group), **values) if values else getattr(source, group)
    return replace(release, **changed)  # type: ignore[arg-type]


def shipped_in(change: Change) -> str:
    """Return the release whose entry shipped ``change``."""
    return next(r.version for r in ordered_releases() if any(c is change for c in r.shipped))


__all__ = [
    "RULE_GROUPS",
    "rule_names",
    "rule_value",
    "rule_differences",
    "releases_where",
    "with_rules",
    "shipped_in",
]
