"""How each release's scheduler runs Kimi-K3, where releases differ: one :class:`SchedulerRules` entry per change.

Each :class:`~kimi_viz.releases.Release` entry holds one of these (its ``scheduler``); the model's modules
(:mod:`kimi_viz.scheduler`: ``server_config``, ``prefix``, ``policy``, ``event_loop``) read only them; this module sits
beside the release table, below the model. Which release
follows which rule is read from each release's own code (``docs/hybrid-tree-notes.md`` §8,
``docs/release-rules-0.5.19-0.5.22.md``).
"""

from __future__ import annotations

from dataclasses import fields, replace

from ._records import frozen


@frozen
class SchedulerRules:
    """How one release's scheduler runs Kimi-K3, where releases differ (``docs/scheduler-notes.md``,
    ``docs/hybrid-tree-notes.md``): its flags' resolution, its hybrid tree, its event loop, its adder.

    Only the rules that change which requests share a pass, where a window starts or what the tree keeps
    are held.
    """

    version: str  # the first release with these rules
    wide_pads: bool  # four sha256-derived pad sentinels cycled over a run (_compute_pad_values), else one value
    budget_state_before_candidate: bool  # stop the walk before a candidate once budget_state() is not CONTINUE
    filters_running_every_step: bool  # get_next_batch_to_run drops finished rows before the adder counts them
    skips_finishing_inflight: bool  # overlap: a row its queued result finishes is neither decoded nor mixed again
    decode_track_on_checkpoint_grid: bool  # decode saves on lcm(G, --mamba-track-interval), else on the interval
    state_chunk_is_fla: bool  # a prefill save is read on FLA's 64-token chunk, else on the mamba cache chunk
    chunk_cache_without_radix: bool  # --disable-radix-cache with chunking builds a ChunkCache (and asserts page 1)
    attention_backends: tuple[str, ...]  # the MLA backends --attention-backend accepts
    page_forcing_backends: tuple[tuple[str, int], ...]  # the backends that set the page size
    strategy_alias: str | None  # a second spelling of --mamba-radix-cache-strategy
    # memory (docs/memory-notes.md §6)
    split_keeps_recency: bool  # a node split leaves the lower state's place in the MAMBA LRU (else it becomes MRU)
    exact_mamba_need: bool  # alloc_req_slots evicts exactly the states it lacks (else 3 per request less the free)
    no_token_fills_only_if_busy: bool  # NO_TOKEN sets batch_is_full only with something admitted or running
    clears_full_when_empty: bool  # an empty running batch clears batch_is_full every pass
    touches_waiting_prefixes: bool  # fcfs refreshes the first 128 waiting prefixes' recency every 32nd pass
    at_least_one_row: bool  # --max-running-requests per rank is max(1, flag)
    counts_held_rows: bool  # the request-row check adds back the rows admitted requests already hold
    locked_token_check_first: bool  # add_one_req tests the KV budget (prefix locked) before the input budget
    mixed_checks_decode_mem: bool  # a mixed pass checks the decode rows' memory first; they sit out when short
    changes: str

    def seen_under(self, *, memory_bounded: bool, backend_given: bool) -> tuple[object, ...]:
        """Return the rules that can change a workload's passes under its flags: the memory rules only with a
        bounded pool, the attention backends only with ``--attention-backend`` given, never the flag's old
        spelling (releases alike under these answer alike)."""
        skip = {"version", "changes", "strategy_alias"}
        if not memory_bounded:
            skip |= set(MEMORY_RULES)
        if not backend_given:
            skip |= {"attention_backends", "page_forcing_backends"}
        return tuple(getattr(self, name) for name in _FIELDS if name not in skip)


_FIELDS = tuple(f.name for f in fields(SchedulerRules))
MEMORY_RULES = (
    "split_keeps_recency",
    "exact_mamba_need",
    "no_token_fills_only_if_busy",
    "clears_full_when_empty",
    "touches_waiting_prefixes",
    "at_least_one_row",
    "counts_held_rows",
    "locked_token_check_first",
    "mixed_checks_decode_mem",
)
_MLA_PAGES = (("flashmla", 64), ("trtllm_mla", 64), ("cutedsl_mla", 64))
#: Every MLA backend ``--attention-backend`` accepts in some release (cutlass_mla up to 0.5.19).
ATTENTION_BACKENDS = ("fa3", "flashinfer", "triton", "flashmla", "trtllm_mla", "cutedsl_mla", "cutlass_mla", "aiter")
SCHEDULER_0_5_17 = SchedulerRules(
    "0.5.17",
    wide_pads=False,
    budget_state_before_candidate=False,
    filters_running_every_step=False,
    skips_finishing_inflight=False,
    decode_track_on_checkpoint_grid=False,
    state_chunk_is_fla=False,
    chunk_cache_without_radix=True,
    attention_backends=ATTENTION_BACKENDS,
    page_forcing_backends=(*_MLA_PAGES, ("cutlass_mla", 128)),
    strategy_alias="--mamba-scheduler-strategy",
    split_keeps_recency=False,
    exact_mamba_need=False,
    no_token_fills_only_if_busy=False,
    clears_full_when_empty=False,
    touches_waiting_prefixes=False,
    at_least_one_row=False,
    counts_held_rows=False,
    locked_token_check_first=False,
    mixed_checks_decode_mem=False,
    changes="one pad value per image (1_000_000 + hash % 2**30); budget_state() checked after each admission; "
    "rows finished in a decode step still counted by the next adder; decode saves every --mamba-track-interval; "
    "--disable-radix-cache with chunking builds a ChunkCache; cutlass_mla (page 128); --mamba-scheduler-strategy",
)
SCHEDULER_0_5_19 = replace(
    SCHEDULER_0_5_17,
    version="0.5.19",
    decode_track_on_checkpoint_grid=True,
    state_chunk_is_fla=True,
    changes="decode saves on lcm(64, --mamba-track-interval); a prefill save is read on FLA's 64-token chunk",
)
SCHEDULER_0_5_20 = replace(
    SCHEDULER_0_5_19,
    version="0.5.20",
    attention_backends=tuple(b for b in ATTENTION_BACKENDS if b != "cutlass_mla"),
    page_forcing_backends=_MLA_PAGES,
    strategy_alias=None,
    split_keeps_recency=True,
    locked_token_check_first=True,
    changes="no cutlass_mla, no --mamba-scheduler-strategy; a node split keeps the lower state's recency",
)
SCHEDULER_0_5_22 = replace(
    SCHEDULER_0_5_20,
    version="0.5.22",
    skips_finishing_inflight=True,
    chunk_cache_without_radix=False,
    exact_mamba_need=True,
    no_token_fills_only_if_busy=True,
    clears_full_when_empty=True,
    touches_waiting_prefixes=True,
    mixed_checks_decode_mem=True,
    changes="rows finishing in flight not decoded or mixed again; --disable-radix-cache keeps a disabled hybrid tree; "
    "alloc_req_slots evicts the states it lacks exactly; NO_TOKEN fills the batch only when busy; fcfs refreshes "
    "waiting prefixes",
)
SCHEDULER_0_5_23 = replace(
    SCHEDULER_0_5_22,
    version="0.5.23",
    wide_pads=True,
    budget_state_before_candidate=True,
    filters_running_every_step=True,
    at_least_one_row=True,
    counts_held_rows=True,
    changes="four sha256-derived pad sentinels per image; budget_state() checked before each waiting candidate; "
    "finished rows filtered before the adder every step",
)


__all__ = [
    "ATTENTION_BACKENDS",
    "SCHEDULER_0_5_17",
    "SCHEDULER_0_5_19",
    "SCHEDULER_0_5_20",
    "SCHEDULER_0_5_22",
    "SCHEDULER_0_5_23",
    "SchedulerRules",
]
