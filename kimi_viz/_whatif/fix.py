"""The one fix search: the first later release that runs a question clean, and the answer that names it.

Every question (a request, a workload, a chat request, a captured batch) is asked the same way:
:func:`answer_on` one release, :func:`fixing_release` walks the later releases that look different
to the question (:func:`~kimi_viz.releases.first_fixing_release`), :func:`with_fix` puts the release
found in the answer and its verdict.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..answer import Answer
from ..errors import SettingNotInReleaseError
from ..releases import FixRelease, Release, first_fixing_release
from ..request.producer import Mode
from ..split.verdict import Status
from .questions import Question


def answer_on(
    question: Question, release: Release, tp_size: int, mode: Mode = "shapes", device: Any = "auto"
) -> Answer:
    """Return ``question``'s answer on ``release`` at ``tp_size`` (no fix search)."""
    return question.ask(release, tp_size, question.prepare(release, mode), mode=mode, device=device)


def runs_clean(answer: Answer) -> bool:
    """Return True when nothing raises and nothing is encoded wrongly (a fix)."""
    return not answer.failed and answer.status is not Status.SILENT_MISMATCH


def fixing_release(question: Question, answer: Answer) -> FixRelease | None:
    """Return the first release after ``answer``'s that runs ``question`` clean at the same TP size, or None."""

    def clean_on(release: Release) -> bool:
        try:
            return runs_clean(answer_on(question, release, answer.tp_size))
        except SettingNotInReleaseError:  # a setting this release refuses: look further
            return False

    return first_fixing_release(answer.release, clean_on, question.sees)


def with_fix(question: Question, answer: Answer) -> Answer:
    """Return ``answer`` with its fixing release (in its verdict too); a clean answer is returned as it is."""
    if runs_clean(answer):
        return answer
    fix = fixing_release(question, answer)
    verdict = None if answer.verdict is None else replace(answer.verdict, fixed_in=fix)
    return replace(answer, fixed_in=fix, verdict=verdict)


__all__ = ["answer_on", "runs_clean", "fixing_release", "with_fix"]
