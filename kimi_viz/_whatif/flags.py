"""Which scheduler flag would change a workload's outcome: each flag of the deployment changed alone, replayed.

A workload's passes depend on the server's scheduler flags (``--page-size``, ``--disable-radix-cache``,
``--chunked-prefill-size``, ``--enable-mixed-chunk``, ``--schedule-policy``) and on the embedding
cache's size. :func:`flag_search` replays the same workload on the same release and attention-TP size
with each of them changed alone (to the values an operator would try first) and keeps those that give
another status: a failing conversation that runs clean with ``--page-size 1`` names the page floor
as part of the story, and a clean one that fails without the radix cache names what keeps it safe.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..answer import Answer, FlagChange, FlagSearch
from ..errors import WhatIfError
from ..releases import Release
from ..request.producer import Mode
from ..schedule.cache import DEFAULT_CACHE_MB
from ..schedule.prefill_workload import DEFAULT_CHUNKED_PREFILL, SCHEDULE_POLICIES
from ..schedule.scheduler import check_chunk_size
from ..schedule.workload_replay import LoadSettings
from .fix import answer_on
from .questions import Question

PAGE_SIZES = (1, 16, 64)  # the page sizes attention backends commonly force (docs/scheduler-notes.md §7)


def alternatives(load: LoadSettings) -> list[tuple[str, LoadSettings]]:
    """Return each single-flag change worth trying from ``load``: the flag as SGLang spells it, and the settings."""
    out: list[tuple[str, LoadSettings]] = []
    radix = "--disable-radix-cache" if not load.disable_radix_cache else "radix cache on (no --disable-radix-cache)"
    out.append((radix, replace(load, disable_radix_cache=not load.disable_radix_cache)))
    chunk = check_chunk_size(load.chunked_prefill_size)
    for page in PAGE_SIZES:
        if page != load.page_size and (chunk is None or chunk % page == 0):
            out.append((f"--page-size {page}", replace(load, page_size=page)))
    other_chunk = -1 if chunk is not None else DEFAULT_CHUNKED_PREFILL
    if other_chunk == -1 or other_chunk % load.page_size == 0:
        out.append((f"--chunked-prefill-size {other_chunk}", replace(load, chunked_prefill_size=other_chunk)))
    if chunk is not None:
        mixed = "--enable-mixed-chunk" if not load.enable_mixed_chunk else "no --enable-mixed-chunk"
        out.append((mixed, replace(load, enable_mixed_chunk=not load.enable_mixed_chunk)))
    policy = next(p for p in SCHEDULE_POLICIES if p != load.schedule_policy)
    out.append((f"--schedule-policy {policy}", replace(load, schedule_policy=policy)))
    cache = 0.0 if load.cache_mb else float(DEFAULT_CACHE_MB)
    out.append((f"SGLANG_VLM_CACHE_SIZE_MB={cache:g}", replace(load, cache_mb=cache)))
    return out


def flag_search(question: Question, answer: Answer, mode: Mode = "shapes", device: Any = "auto") -> FlagSearch | None:
    """Return the flags that change ``answer``'s status when changed alone (None for a question without a workload)."""
    if not hasattr(question, "load"):  # a workload's question (a chat's too) carries its scheduler settings
        return None
    asked: Any = question
    load = asked.load if asked.load is not None else LoadSettings()
    release: Release = answer.release
    tried, changes = [], []
    for flag, other in alternatives(load):
        try:
            status = answer_on(replace(asked, load=other), release, answer.tp_size, mode, device).status
        except WhatIfError:  # a combination the release or the kit refuses: not a change to suggest
            continue
        tried.append(flag)
        if status is not answer.status:
            changes.append(FlagChange(flag, status))
    return FlagSearch(tuple(tried), tuple(changes))


__all__ = ["PAGE_SIZES", "alternatives", "flag_search"]
