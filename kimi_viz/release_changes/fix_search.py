"""The one fix search: the first later release that runs a question clean, and the changes that end its failure.

:func:`first_fixing_release` walks the releases after the failing one that look different to the question; on
the first that runs it clean, each change shipped since (:class:`~kimi_viz.release_changes.shipped.Change`) that
the question sees is applied alone to the failing release (:func:`~kimi_viz.release_changes.rules.with_rules`) and
asked the same way. A :class:`FixRelease` names the changes that alone run it clean, or, when none does, every one
of them, together: a failure is never said to be fixed by another failure's change.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from .._records import frozen
from ..releases import RELEASES, CodePath, Release, ordered_releases
from .rules import shipped_in, with_rules
from .shipped import Change


@frozen
class FixRelease:
    """The first later release whose code runs a failing question clean, and the changes that make the difference:
    each alone runs it clean on the failing release, or (``together``) none alone does and these are every change
    in between that the question sees."""

    release: str
    code_path: CodePath
    changes: tuple[Change, ...]
    together: bool = False

    @property
    def summary(self) -> str:
        """Return the release's code-path summary."""
        return RELEASES[self.release].summary

    @property
    def change(self) -> str:
        """Return the changes as one phrase, e.g. ``"SGLang PR #N (its title; models/kimi_k3.py ...)"``; a change
        an earlier release shipped says which."""
        if not self.changes:
            return f"its {self.code_path} path (no change of the release table identified)"
        texts = []
        for change in self.changes:
            release = shipped_in(change)
            texts.append(change.text if release == self.release else f"{change.text}, shipped in {release}")
        if self.together:
            return f"{' and '.join(texts)}, together"
        return " or ".join(texts) + (", each alone" if len(texts) > 1 else "")

    @property
    def text(self) -> str:
        """Return e.g. ``"fixed in 0.5.19: SGLang PR #N (Re-encode multimodal embeddings after cache mismatch;
        managers/mm_schedule.py ...)"``."""
        return f"fixed in {self.release}: {self.change}"

    def to_json(self) -> dict[str, object]:
        """Return ``{"release", "change", "code_path", "summary", "changes", "together"}`` (each change as
        :meth:`~kimi_viz.release_changes.shipped.Change.to_json` writes it, with the ``release`` that shipped it)."""
        return {
            "release": self.release,
            "change": self.change,
            "code_path": self.code_path,
            "summary": self.summary,
            "changes": [{**change.to_json(), "release": shipped_in(change)} for change in self.changes],
            "together": self.together,
        }


@frozen
class FixSearch:
    """What the one fix search found for a failing question: the first later release that runs it clean, or None
    when no release the kit knows does. An answer without one was not searched."""

    found: FixRelease | None

    def to_json(self) -> dict[str, object] | None:
        """Return the release found as :meth:`FixRelease.to_json` writes it, or None."""
        return None if self.found is None else self.found.to_json()


def _fixing_changes(
    current: Release,
    fixed: Release,
    runs_clean: Callable[[Release], bool],
    seen_as: Callable[[Release], Hashable],
) -> tuple[tuple[Change, ...], bool]:
    """Return the changes shipped after ``current`` up to ``fixed`` that each alone run the question clean on
    ``current``, and False; else every one of them the question sees (it changes what ``seen_as`` returns), and
    True: they end the failure together."""
    ordered = ordered_releases()
    between = ordered[ordered.index(current) + 1 : ordered.index(fixed) + 1]
    seen = seen_as(current)
    candidates = [
        (change, alone)
        for release in between
        for change in release.shipped
        if seen_as(alone := with_rules(current, change.rules, release)) != seen
    ]
    clean = tuple(change for change, alone in candidates if runs_clean(alone))
    if clean:
        return clean, False
    if not candidates:  # no change alone looks different to the question: every change in between, together
        return tuple(change for release in between for change in release.shipped), True
    return tuple(change for change, _ in candidates), True


def first_fixing_release(
    current: Release, runs_clean: Callable[[Release], bool], seen_as: Callable[[Release], Hashable]
) -> FixRelease | None:
    """Return the first release after ``current`` on which ``runs_clean`` holds, with the changes that end the
    failure, or None.

    The one fix search every question uses (:func:`kimi_viz._whatif.fix.with_fix`). ``seen_as`` says what of a
    release the question sees (its code path for a captured batch; request side, code path, forward pass and
    scheduler rules for a workload): a release that looks like one already tried, or like ``current``, is not
    asked again. ``runs_clean`` returns False for a release that refuses the question's settings. Once a release
    runs clean, each change shipped since ``current`` that the question sees is applied alone to ``current``
    (:func:`~kimi_viz.release_changes.rules.with_rules`) and asked the same way: the changes that alone run it
    clean are named; when none does, every one of them is, together.
    """
    tried = {seen_as(current)}
    ordered = ordered_releases()
    for release in ordered[ordered.index(current) + 1 :]:
        key = seen_as(release)
        if key in tried:
            continue
        tried.add(key)
        if runs_clean(release):
            changes, together = _fixing_changes(current, release, runs_clean, seen_as)
            return FixRelease(release.version, release.code_path, changes, together)
    return None


__all__ = ["FixRelease", "FixSearch", "first_fixing_release"]
