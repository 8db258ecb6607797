"""Which scheduler flag would change a workload's outcome: each flag of the deployment changed alone, replayed.

A workload's passes depend on the server's scheduler flags and on the embedding cache's size (the rows
of :data:`~kimi_viz.scheduler.flags.FLAGS`). :func:`flag_search` replays the same workload on the same
release and attention-TP size with each of them changed alone (to the values
:func:`~kimi_viz.scheduler.flags.alternatives` gives: the values an operator would try first; one the
release resolves to the server it already runs, or refuses for Kimi-K3, is not tried) and keeps those
that give another status: a failing conversation that runs clean with ``--page-size 1`` names the
page floor as part of the story, and a clean one that fails without the radix cache names what keeps it
safe.
"""

from __future__ import annotations

from dataclasses import replace

from ..answer import Answer, FlagChange, FlagSearch
from ..devices import DeviceLike
from ..errors import WhatIfError
from ..releases import Release
from ..request.settings import Mode
from ..scheduler.flags import LoadSettings, alternatives
from ..scheduler.server_config import ServerConfig, resolve_server
from .protocol import Question
from .questions import PreparedWorkload


def flag_search(
    question: Question, answer: Answer, mode: Mode = "shapes", device: DeviceLike = "auto"
) -> FlagSearch | None:
    """Return the flags that change ``answer``'s status when changed alone (None for a question without a workload)."""
    load = question.load_settings
    if load is None:
        return None
    tried, changes = [], []
    same = _server_of(load, answer.release)
    base = answer.workload
    for flag, other in alternatives(load):
        scheduler_only = (other.cache_mb, other.platform) == (load.cache_mb, load.platform)
        if same is not None and scheduler_only and _server_of(other, answer.release) == same:
            continue  # the server resolves it to what it runs already
        try:
            prepared = question.with_load(other).prepare(answer.release, mode)
            forward_only = replace(other, cache_mb=load.cache_mb, platform=load.platform) == load
            if forward_only and base is not None and isinstance(prepared, PreparedWorkload):
                prepared.planned = base.schedule  # the scheduler reads neither: its passes are the answer's
            status = prepared.status(answer.tp_size, mode=mode, device=device)
        except WhatIfError:  # a combination the release or the kit refuses: not a change to suggest
            continue
        tried.append(flag)
        if status is not answer.status:
            changes.append(FlagChange(flag, status))
    return FlagSearch(tuple(tried), tuple(changes))


def _server_of(load: LoadSettings, release: Release) -> ServerConfig | None:
    """Return the scheduler config ``release`` resolves ``load`` to, without its sentences (None: refused)."""
    try:
        return replace(resolve_server(load, release), resolved=())
    except WhatIfError:
        return None


__all__ = ["flag_search"]
