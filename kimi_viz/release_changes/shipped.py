"""What each SGLang release shipped over the one before, one :class:`Change` per change of the release table's rules.

Each :class:`~kimi_viz.releases.Release` entry holds the changes it shipped (its ``shipped``); this module holds
them, beside the table, as :mod:`kimi_viz.scheduler_rules` holds the scheduler's rules. Every rule that differs
between two consecutive releases (:func:`~kimi_viz.release_changes.rules.rule_differences`: the code path, a field
of the request side, of the forward pass or of the scheduler) is covered by exactly one change of the later
release, and a change names only rules that differ there (``tests/test_fix_changes.py``). The fix search names the
changes that end a failure from here (:func:`~kimi_viz.release_changes.fix_search.first_fixing_release`).

Which change shipped where is read from the releases' own code (the diff of each release's files against the one
before) and SGLang's pull requests: a change names the pull requests that made it, or none where none was
identified, and then the file and function that changed say what it is. A change ships in the first release
whose code has it (the pull requests' threads give no merge dates). PR titles drop their ``[tag]``.
"""

from __future__ import annotations

from typing import Any

from .._records import frozen


@frozen
class Change:
    """One change a release shipped: the rules of the table it changed, the SGLang pull requests that made it,
    what it did and where in SGLang's code it is."""

    rules: tuple[str, ...]  # "code_path", "request_side.defers", "forward.discards_stale_cache", "scheduler.wide_pads"
    prs: tuple[int, ...]  # the pull requests that made it; () when none was identified
    title: str  # the pull request's title, else what the change does
    where: str  # the file under sglang/srt and the function that changed
    note: str = ""  # how the pull requests share it, how sure the attribution is

    @property
    def pr_text(self) -> str:
        """Return ``"SGLang PR #36595"``, ``"SGLang PRs #33899 / #33936"`` or ``"no SGLang PR identified"``."""
        if not self.prs:
            return "no SGLang PR identified"
        numbers = " / ".join(f"#{number}" for number in self.prs)
        return f"SGLang PR{'s' if len(self.prs) > 1 else ''} {numbers}"

    @property
    def text(self) -> str:
        """Return e.g. ``"SGLang PR #36595 (Re-encode multimodal embeddings after cache mismatch; managers/...)"``;
        a change without a pull request names its file and function first."""
        if not self.prs:
            return f"{self.where} ({self.title}; {self.pr_text})"
        return f"{self.pr_text} ({self.title}; {self.where})"

    def to_json(self) -> dict[str, Any]:
        """Return ``{"rules", "prs", "title", "where", "note"}``."""
        return {
            "rules": list(self.rules),
            "prs": list(self.prs),
            "title": self.title,
            "where": self.where,
            "note": self.note,
        }


_ONE_TO_ONE_MOVED = "the line moved with the code around it; the check itself is unchanged"

#: 0.5.18 over 0.5.17: the deferred split, deferred preprocessing, the preprocessing cache, CUDA VMM, mm_schedule.py.
SHIPPED_0_5_18: tuple[Change, ...] = (
    Change(
        ("code_path",),
        (33921, 34206),
        "the deferred split in get_image_feature: deferred items preprocessed on the vision owner",
        "models/kimi_k3.py materialize_item_features",
        "#33921 (Preprocess CPU-transport images on the vision owner) defers preprocessing to the owner rank; "
        "#34206 (Pipeline owner-only multimodal preprocessing) added the backend groups; the shard-local grid "
        "read (S1) came with #34404 (Cache Kimi-K3 per-image processor artifacts), as #35305 says",
    ),
    Change(
        ("request_side.defers",),
        (33921, 33936),
        "Preprocess CPU-transport images on the vision owner",
        "multimodal/processors/kimi_k3.py _should_defer_gpu_preprocessing",
        "#33936 (auto-select CUDA VMM on multi-node MNNVL) extends the deferral to CUDA IPC and CUDA VMM",
    ),
    Change(
        ("request_side.preprocess_cache",),
        (34398,),
        "Add content-addressed preprocessing cache infrastructure",
        "server_args.py mm_preprocess_cache_size_mb; multimodal/media_artifacts",
        "Kimi-K3 uses it through #34404 (Cache Kimi-K3 per-image processor artifacts)",
    ),
    Change(
        ("request_side.transports",),
        (33899, 33936),
        "Add CUDA VMM multimodal feature transport; auto-select CUDA VMM on multi-node MNNVL",
        "server_args.py mm_feature_transport; model_loader/utils.py supports_cuda_vmm_feature_transport",
        "#33899 adds the transport, #33936 opts Kimi-K3 in",
    ),
    Change(
        ("request_side.auto_transport",),
        (),
        "an unset --mm-feature-transport resolves to cpu on one node (it was cuda_ipc)",
        "server_args.py mm_feature_transport 'auto' resolution",
        "#33936 still keeps one-node serving on cuda_ipc; the change that moved it to cpu is not found",
    ),
    Change(
        ("request_side.encoder_defers",),
        (34206,),
        "Pipeline owner-only multimodal preprocessing",
        "multimodal/kimi_k3_image_processing.py prepare_kimi_k3_encoder_inputs; "
        "multimodal/encoder_preprocessing.py EncoderPreprocessOutput",
    ),
    Change(
        ("request_side.identity", "request_side.checks_spans"),
        (34404,),
        "Cache Kimi-K3 per-image processor artifacts",
        "multimodal/processors/kimi_k3.py compose_request, the artifact path's feature hash",
        "the same span check in _build_deferred_output may come from #33921 (not confirmed)",
    ),
    Change(
        ("request_side.one_to_one_line",),
        (),
        "the one-to-one check's line moves from 348 to 725",
        "multimodal/processors/kimi_k3.py process_mm_data_async",
        _ONE_TO_ONE_MOVED,
    ),
    Change(
        ("forward.source",),
        (32415,),
        "Split multimodal scheduling from mm_utils",
        "managers/mm_schedule.py get_embedding_and_mask (moved from managers/mm_utils.py)",
    ),
    Change(
        ("forward.count_from_offsets", "forward.async_assert"),
        (34995,),
        "Avoid synchronizing multimodal placeholder counts",
        "managers/mm_schedule.py _count_mm_tokens_in_extend, get_embedding_and_mask (maybe_assert_sum)",
    ),
    Change(
        ("forward.by_item_platforms",),
        (),
        "XPU encodes once per request, as HIP and NPU do",
        "managers/mm_schedule.py _get_chunked_prefill_embedding",
    ),
)

#: 0.5.19 over 0.5.18: the grid-index fix, the cache-length fix, index_copy_, the decode checkpoint grid.
SHIPPED_0_5_19: tuple[Change, ...] = (
    Change(
        ("code_path",),
        (35305,),
        'Fix "wrong grids" crash in DP-sharded vision preprocessing',
        "models/kimi_k3.py materialize_item_features",
        "#36265 backports the same fix to release/v0.5.18 only: no release the kit knows ships it",
    ),
    Change(
        ("request_side.one_to_one_line",),
        (),
        "the one-to-one check's line moves from 725 to 723",
        "multimodal/processors/kimi_k3.py process_mm_data_async",
        _ONE_TO_ONE_MOVED,
    ),
    Change(
        ("forward.dedupe_by_tokens", "forward.discards_stale_cache"),
        (36595,),
        "Re-encode multimodal embeddings after cache mismatch",
        "managers/mm_schedule.py _discard_mismatched_cached_embedding, _batch_encode_per_image_misses",
    ),
    Change(
        ("forward.index_copy_scatter",),
        (37070,),
        "Scatter mm embeddings with row index_copy_ instead of masked_scatter_",
        "managers/mm_utils.py _scatter_mm_embedding",
    ),
    Change(
        ("scheduler.decode_track_on_checkpoint_grid",),
        (35412,),
        "Land the decode mamba checkpoint depth on the tree page under DCP",
        "managers/schedule_batch.py prepare_for_decode",
    ),
    Change(
        ("scheduler.state_chunk_is_fla",),
        (),
        "a prefill's saved state is read on FLA's chunk, relative to the extend start",
        "managers/schedule_batch.py _mamba_radix_cache_v2_req_prepare_for_extend",
    ),
)

#: 0.5.20 over 0.5.19: cutlass_mla and --mamba-scheduler-strategy gone; a node split keeps its recency.
SHIPPED_0_5_20: tuple[Change, ...] = (
    Change(
        ("scheduler.attention_backends", "scheduler.page_forcing_backends"),
        (),
        "the cutlass_mla attention backend is removed",
        "layers/attention/cutlass_mla_backend.py (removed); arg_groups/overrides.py _mla_backend_page_constraints",
        "decided in the RFC issue #32111 (Deprecate CUTLASS MLA attention backend); the removing PR is not found",
    ),
    Change(
        ("scheduler.strategy_alias",),
        (),
        "the --mamba-scheduler-strategy spelling is removed",
        "server_args.py --mamba-scheduler-strategy",
        "the alias dates from the rename in issue #27418",
    ),
    Change(
        ("scheduler.split_keeps_recency",),
        (38482,),
        "Preserve aux LRU recency when splitting nodes",
        "mem_cache/unified_cache/unified_tree_core.py UnifiedTreeCore._split_node",
    ),
    Change(
        ("scheduler.locked_token_check_first",),
        (),
        "add_one_req tests the KV budget with the prefix locked before the input budget",
        "managers/schedule_policy.py PrefillAdder._select_prefill_admission",
        "perhaps #32888 (Fill the chunked-prefill compute budget exactly): not confirmed",
    ),
)

#: 0.5.22 over 0.5.21 (no pull request identified: these came after the PR threads the kit read).
SHIPPED_0_5_22: tuple[Change, ...] = (
    Change(
        ("forward.precomputed_per_item",),
        (),
        "precomputed rows cut per item",
        "managers/mm_schedule.py _get_precomputed_embedding",
    ),
    Change(
        ("forward.prefers_cached_after_set",),
        (),
        "after storing a miss, a cached entry of the right length is used",
        "managers/mm_schedule.py _batch_encode_per_image_misses, _get_chunked_embedding_by_item",
    ),
    Change(
        ("scheduler.skips_finishing_inflight", "scheduler.mixed_checks_decode_mem"),
        (),
        "rows finishing in flight are neither decoded nor mixed again; a mixed pass checks decode memory",
        "managers/scheduler.py _reqs_finishing_inflight, update_running_batch",
    ),
    Change(
        ("scheduler.chunk_cache_without_radix",),
        (),
        "--disable-radix-cache keeps a disabled hybrid tree (chunk_cache.py removed)",
        "mem_cache/registry.py default_radix_cache_factory",
    ),
    Change(
        ("scheduler.exact_mamba_need",),
        (),
        "alloc_req_slots evicts exactly the mamba states it lacks",
        "mem_cache/allocation.py ensure_mamba_capacity",
        "perhaps #38151 or #39787, both open in the threads read: not confirmed",
    ),
    Change(
        ("scheduler.no_token_fills_only_if_busy",),
        (),
        "NO_TOKEN marks the batch full only with something admitted or running",
        "managers/scheduler.py _get_new_batch_prefill_raw",
    ),
    Change(
        ("scheduler.clears_full_when_empty",),
        (),
        "an empty running batch clears batch_is_full every pass",
        "managers/scheduler.py _get_new_batch_prefill_raw",
    ),
    Change(
        ("scheduler.touches_waiting_prefixes",),
        (),
        "fcfs refreshes the waiting prefixes' recency every 32nd pass",
        "managers/schedule_policy.py _touch_waiting_prefixes",
    ),
)

#: 0.5.23 over 0.5.22 (no pull request identified: these came after the PR threads the kit read).
SHIPPED_0_5_23: tuple[Change, ...] = (
    Change(
        ("request_side.identity",),
        (),
        "an image's identity is the SHA-256 of its content, config and grid",
        "multimodal/processors/kimi_common.py kimi_image_identity (item.set_identity)",
    ),
    Change(
        ("request_side.rejects_caller_identity",),
        (),
        "caller-supplied mm_hashes are refused",
        "multimodal/processors/kimi_common.py reject_caller_image_identity",
    ),
    Change(
        ("request_side.one_to_one_line",),
        (),
        "the one-to-one check's line moves from 723 to 748",
        "multimodal/processors/kimi_k3.py process_mm_data_async",
        _ONE_TO_ONE_MOVED,
    ),
    Change(
        ("forward.rejects_oversized_cache_entry",),
        (),
        "an entry larger than the embedding cache is refused without evicting others",
        "mem_cache/multimodal_cache.py MultiModalStaticCache.set",
    ),
    Change(
        ("scheduler.wide_pads",),
        (),
        "four sha256-derived pad sentinels per image",
        "managers/schedule_batch.py _compute_pad_values (_MM_WIDE_PAD_TAG)",
    ),
    Change(
        ("scheduler.budget_state_before_candidate",),
        (),
        "budget_state() is checked before each waiting candidate",
        "managers/scheduler.py _get_new_batch_prefill_raw",
    ),
    Change(
        ("scheduler.filters_running_every_step",),
        (),
        "finished rows are filtered before the adder every step",
        "managers/scheduler.py get_next_batch_to_run",
    ),
    Change(
        ("scheduler.at_least_one_row",),
        (),
        "--max-running-requests per rank is at least 1",
        "mem_cache/kv_cache_configurator.py resolve_max_num_reqs",
    ),
    Change(
        ("scheduler.counts_held_rows",),
        (),
        "the request-row check adds back the rows admitted requests hold",
        "managers/scheduler.py _get_new_batch_prefill_raw",
    ),
)


__all__ = ["Change", "SHIPPED_0_5_18", "SHIPPED_0_5_19", "SHIPPED_0_5_20", "SHIPPED_0_5_22", "SHIPPED_0_5_23"]
