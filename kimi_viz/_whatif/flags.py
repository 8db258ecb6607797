"""Which scheduler flag would change a workload's outcome: each flag of the deployment changed alone, replayed.

A workload's passes depend on the server's scheduler flags and on the embedding cache's size (the rows
of :data:`~kimi_viz.scheduler.flags.FLAGS`). :func:`flag_search` replays the same workload on the same
release and attention-TP size with each of them changed alone (to the values
:func:`~kimi_viz.scheduler.flags.alternatives` gives: the values an operator would try first) and keeps
those that give another status: a failing conversation that runs clean with ``--page-size 1`` names the
page floor as part of the story, and a clean one that fails without the radix cache names what keeps it
safe.
"""

from __future__ import annotations

from typing import Any

from ..answer import Answer, FlagChange, FlagSearch
from ..errors import WhatIfError
from ..request.settings import Mode
from ..scheduler.flags import alternatives
from .fix import answer_on
from .protocol import Question


def flag_search(question: Question, answer: Answer, mode: Mode = "shapes", device: Any = "auto") -> FlagSearch | None:
    """Return the flags that change ``answer``'s status when changed alone (None for a question without a workload)."""
    load = question.load_settings
    if load is None:
        return None
    tried, changes = [], []
    for flag, other in alternatives(load):
        try:
            status = answer_on(question.with_load(other), answer.release, answer.tp_size, mode, device).status
        except WhatIfError:  # a combination the release or the kit refuses: not a change to suggest
            continue
        tried.append(flag)
        if status is not answer.status:
            changes.append(FlagChange(flag, status))
    return FlagSearch(tuple(tried), tuple(changes))


__all__ = ["flag_search"]
