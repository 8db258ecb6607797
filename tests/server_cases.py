"""The modelled server flags the server-input tests set, each with a value the kit replays (main suite and lane)."""

from __future__ import annotations

# Every modelled flag, with a value other than its default that the kit replays: (dest, value, kit field, kit value).
CASES = [
    ("chunked_prefill_size", 4096, "load.chunked_prefill_size", 4096),
    ("page_size", 16, "load.page_size", 16),
    ("disable_radix_cache", True, "load.disable_radix_cache", True),
    ("schedule_policy", "lpm", "load.schedule_policy", "lpm"),
    ("max_prefill_tokens", 8192, "load.max_prefill_tokens", 8192),
    ("enable_mixed_chunk", True, "load.enable_mixed_chunk", True),
    ("mamba_radix_cache_strategy", "extra_buffer", "load.mamba_radix_cache_strategy", "extra_buffer"),
    ("mamba_track_interval", 128, "load.mamba_track_interval", 128),
    ("disable_overlap_schedule", True, "load.disable_overlap_schedule", True),
    ("attention_backend", "flashinfer", "load.attention_backend", "flashinfer"),
    ("max_total_tokens", 50_000, "load.max_total_tokens", 50_000),
    ("max_running_requests", 64, "load.max_running_requests", 64),
    ("max_mamba_cache_size", 40, "load.max_mamba_cache_size", 40),
    ("schedule_conservativeness", 2.0, "load.schedule_conservativeness", 2.0),
    ("encoder_only", True, "settings.serving", "epd-encoder"),
    ("mm_feature_transport", "cuda_ipc", "settings.transport", "cuda_ipc"),
    ("mm_preprocess_cache_size_mb", 0, "settings.preprocess_cache_mb", 0),
    ("tp_size", 4, "tp", 4),
]
