"""SGLang's scheduler, as the kit models it for Kimi-K3: which requests share a prefill pass, and each one's window.

A map of SGLang's parts (``python/sglang/srt/``, 0.5.17–0.5.23) to the kit's modules:

==================================================================  =========================================
SGLang                                                              kimi-viz
==================================================================  =========================================
``server_args.py``: the scheduler's flags and their defaults        :mod:`.flags` (``FLAGS``, ``LoadSettings``)
``arg_groups/``: what a Kimi-K3 server resolves them to             :mod:`.server_config` (``ServerConfig``)
``managers/schedule_batch.py`` ``Req``; ``pad_input_ids``           :mod:`.req` (``Req``, image runs, windows)
``managers/mm_utils.py`` pad values; the match's record             :mod:`.prefix` (``padded_ids``, ``PrefixMatch``)
``mem_cache/unified_cache/`` ``UnifiedTreeNode``                    :mod:`.node` (``Node``)
``mem_cache/unified_radix_cache.py`` (FULL + MAMBA), its eviction   :mod:`.radix_cache` (``RadixCache``)
``mem_cache/kv_cache_configurator.py`` pools; ``new_token_ratio``   :mod:`.memory` (``MemoryConfig``, ``Pools``)
``mem_cache/allocator/paged.py``; ``managers/schedule_batch.py``   :mod:`.batch` (``ScheduleState``)
pages, batches, ``retract_decode``; the inserts
``managers/schedule_policy.py`` ``SchedulePolicy``,                 :mod:`.policy` (``PrefillAdder``,
``PrefillAdder``, ``AddReqResult``                                  ``AddReqResult``, the order)
``managers/scheduler.py`` ``process_input_requests``                :mod:`.arrivals` (``Arrivals``)
``managers/scheduler.py`` the event loop,                           :mod:`.event_loop` (``Scheduler``,
``get_new_batch_prefill``, ``process_batch_result_prefill``         ``schedule``, ``Pass``, ``SchedulerStep``)
(the kit's own: runs of decode steps jumped over)                   :mod:`.decode_run` (``DecodeRun``)
==================================================================  =========================================

What differs between releases is each release's :class:`~kimi_viz.scheduler_rules.SchedulerRules`. The
requests come from :mod:`kimi_viz.request.token_ids` (a workload's prompts as token ids); the passes
go to :mod:`kimi_viz.forward` (each pass's ``get_embedding_and_mask``). ``docs/scheduler-notes.md``
holds the rules and where SGLang keeps them. Names are imported lazily.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "FLAGS": "flags",
    "LoadSettings": "flags",
    "Req": "req",
    "Pass": "event_loop",
    "schedule": "event_loop",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
