"""The one fix search: the first later release that runs a question clean, and the answer that names it.

Every question (a request, a workload, a chat request, a captured batch) is asked the same way:
:func:`answer_on` one release, :func:`fixing_release` walks the later releases that look different
to the question and names the changes that end its failure, each applied alone to the failing release
(:func:`~kimi_viz.release_changes.fix_search.first_fixing_release`), :func:`with_fix` puts what it found
in the answer (:attr:`~kimi_viz.answer.Answer.fix`, its one home). A question needs a fix when SGLang
raises or an image is encoded wrongly; a release fixes it when neither happens there. ``triage`` asks
a captured batch the same way.
"""

from __future__ import annotations

from dataclasses import replace

from ..answer import Answer
from ..devices import DeviceLike
from ..errors import SettingNotInReleaseError
from ..release_changes.fix_search import FixRelease, FixSearch, first_fixing_release
from ..releases import Release
from ..request.settings import Mode
from ..split.verdict import Status
from .protocol import Question


def answer_on(
    question: Question, release: Release, tp_size: int, mode: Mode = "shapes", device: DeviceLike = "auto"
) -> Answer:
    """Return ``question``'s answer on ``release`` at ``tp_size`` (no fix search)."""
    return question.prepare(release, mode).ask(tp_size, mode=mode, device=device)


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
    """Return ``answer`` with what the fix search found; a clean answer is returned as it is (nothing to fix)."""
    if runs_clean(answer):
        return answer
    return replace(answer, fix=FixSearch(fixing_release(question, answer)))


__all__ = ["answer_on", "runs_clean", "fixing_release", "with_fix"]
