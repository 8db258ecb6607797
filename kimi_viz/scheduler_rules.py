"""How each release's scheduler runs Kimi-K3, where releases differ: one :class:`SchedulerRules` entry per change.

Each :class:`~kimi_viz.releases.Release` entry holds one of these (its ``scheduler``); the model's modules
(:mod:`kimi_viz.scheduler`: ``server_args``, ``tree``, ``policy``, ``event_loop``) read only them; this module sits
beside the release table, below the model. Which release
follows which rule is read from each release's own code (``docs/hybrid-tree-notes.md`` §8,
``docs/release-rules-0.5.19-0.5.22.md``).
"""

from __future__ import annotations

from dataclasses import replace

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
    changes: str


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
    changes="no cutlass_mla, no --mamba-scheduler-strategy",
)
SCHEDULER_0_5_22 = replace(
    SCHEDULER_0_5_20,
    version="0.5.22",
    skips_finishing_inflight=True,
    chunk_cache_without_radix=False,
    changes="rows finishing in flight not decoded or mixed again; --disable-radix-cache keeps a disabled hybrid tree",
)
SCHEDULER_0_5_23 = replace(
    SCHEDULER_0_5_22,
    version="0.5.23",
    wide_pads=True,
    budget_state_before_candidate=True,
    filters_running_every_step=True,
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
