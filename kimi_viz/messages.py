"""SGLang's own exception messages on the Kimi-K3 vision path, copied literally, each with its source.

One catalogue for the whole kit: the replay raises these texts, :mod:`kimi_viz._explain` recognises
them in logs, and the tests compare them with what the real SGLang raises. ``{}`` marks a part
SGLang formats in. The comment above each names the file and function that raises it. The texts are
the same in 0.5.18 to 0.5.23; 0.5.17 raises the grid-loop, tensor-type and ``mm_utils`` ones only.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------------------
# The exceptions SGLang 0.5.23 raises on this path, copied literally. ``{}`` marks a formatted part.
# ------------------------------------------------------------------------------------------------
# sglang/srt/models/kimi_k3.py, get_image_feature: the grid loop (ValueError).
MSG_ONE_GRID = (
    "Kimi-K3 expects one vision grid per MultimodalDataItem; split aggregated encoder inputs before get_image_feature()"
)
# kimi_k3.py, materialize_item_features: some but not all selected items are encoder-local (ValueError).
MSG_MIX_LOCAL = "Kimi-K3 cannot mix local preprocessed and deferred images"
# kimi_k3.py, materialize_item_features: a non-deferred item whose feature is no tensor (TypeError).
MSG_FEATURE_TYPE = "Kimi-K3 image feature must be a torch.Tensor, got {}"
# kimi_k3.py, materialize_item_features: gpu group grids != grid_thws_host[global_indices] (ValueError).
MSG_GPU_WRONG_GRIDS = "Kimi-K3 deferred GPU preprocessing produced wrong grids"
# kimi_k3.py, materialize_item_features: a backend other than "gpu" / "cpu" (ValueError).
MSG_UNSUPPORTED_BACKEND = "Unsupported Kimi-K3 deferred preprocessing backend: {}"
# kimi_k3.py, materialize_item_features: sum(patch_counts) != pixel_values.shape[0] (ValueError).
MSG_LENGTH = "Kimi-K3 deferred feature length does not match image grids"
# sglang/srt/multimodal/kimi_k3_image_processing.py, materialize_kimi_k3_cpu_features (ValueError):
# the checkpoint processor's grids != cat(item.model_specific_data["grid_thws"]).
MSG_CPU_WRONG_GRIDS = "Kimi-K3 deferred CPU preprocessing produced wrong grids"
# kimi_k3_image_processing.py, materialize_kimi_k3_cpu_features: neither PIL nor uint8 tensor (TypeError).
MSG_CPU_INPUT_TYPE = "Kimi-K3 deferred CPU preprocessing expects PIL or uint8 tensors"
# kimi_k3_image_processing.py, materialize_kimi_k3_cpu_features: HWC channels not 1/3/4 (ValueError).
MSG_CHANNEL_COUNT = "Unsupported Kimi-K3 image channel count: {}"
# kimi_k3_image_processing.py, to_chw_uint8 (the gpu group's staging): a non-uint8 tensor (ValueError).
MSG_RAW_UINT8 = "Kimi-K3 preprocessing expects raw uint8 pixels, got {}"
# kimi_k3_image_processing.py, fill_transparent_bg: an unknown background pattern (ValueError).
MSG_BG_PATTERN = "Invalid background pattern: {}"
# sglang/srt/multimodal/mm_utils.py, materialize_multimodal_features (ValueError / TypeError).
MSG_TRAILING_SHAPES = "multimodal feature tensors must have matching trailing shapes: expected {}, got {}"
MSG_LEADING_DIM = "multimodal feature tensors must have a leading dimension"
MSG_EXPECTED_TENSOR = "expected torch.Tensor, got {}"

# Strings worth recognising in logs of other versions (not raised by the 0.5.23 code path replayed here).
MSG_PROCESSOR_LENGTH = "Kimi-K3 processor feature length does not match image grids: {} != {}"
MSG_MIX_DEFERRED_OLD = "Kimi-K3 cannot mix deferred and preprocessed image features"

# ------------------------------------------------------------------------------------------------
# The forward pass: sglang/srt/managers/mm_schedule.py (managers/mm_utils.py in 0.5.17), every release.
# ------------------------------------------------------------------------------------------------
# _adjust_embedding_length: rows != the window's pad tokens (logger.warning, then rows trimmed or raised).
MSG_TOKEN_MISMATCH = (
    "Number of tokens in multimodal embedding does not match those in the input text. "
    "Got {} tokens in the text but {} tokens from multimodal embeddings."
)
# _adjust_embedding_length: more rows than tokens and chunked prefill on (logger.warning).
MSG_RAISE_CHUNK = "You may want to avoid this issue by raising `chunked_prefill_size`, or disabling chunked prefill"
# _adjust_embedding_length: fewer rows than tokens (RuntimeError).
MSG_INSUFFICIENT = (
    "Insufficient multimodal embedding length: num_mm_tokens_in_input_ids={} vs num_mm_tokens_in_embedding={}. "
    "This is an internal error"
)
# _discard_mismatched_cached_embedding, 0.5.19+: a cached entry of another length (logger.warning, %-args).
MSG_DISCARD = (
    "Discarding cached multimodal embedding due to a token-count mismatch: cache_key={}, expected_tokens={}, "
    "cached_tokens={}. Recomputing embedding."
)
# _get_precomputed_embedding: some requests precomputed, others not (NotImplementedError).
MSG_ONLY_SOME_PRECOMPUTED = "MM inputs where only some items are precomputed."
# get_embedding_and_mask, 0.5.18+, only with SGLANG_ENABLE_ASYNC_ASSERT: maybe_assert_sum (RuntimeError on CPU).
MSG_ASYNC_ASSERT = "MM placeholder count derived from offsets does not match input_ids"
# torch's own messages on that path (torch 2.13): torch.split of the call's rows by the items' token counts
# (RuntimeError), masked_scatter_ (0.5.17-0.5.18, RuntimeError), _scatter_mm_embedding (0.5.19+: IndexError
# from index_copy_, RuntimeError from scatter_).
MSG_SPLIT_SIZES = (
    "split_with_sizes expects split_sizes to sum exactly to {} (input tensor's size at dimension 0), but got "
    "split_sizes={}"
)
MSG_MASKED_SCATTER = "Number of elements of source < number of ones in mask"
MSG_INDEX_COPY = "index_copy_(): index {} is out of bounds for dimension 0 with size {}"
MSG_SCATTER_INDEX = "index {} is out of bounds for dimension 0 with size {}"
