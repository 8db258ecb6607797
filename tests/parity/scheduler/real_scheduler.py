"""Run a prefill workload through SGLang's OWN hybrid (FULL + MAMBA) tree cache and batch code on the CPU.

Kimi-K3's text model is hybrid linear attention (KDA layers), so its scheduler builds a
``UnifiedRadixCache`` with a FULL and a MAMBA component (``docs/hybrid-tree-notes.md``). This module
replays a workload in the lane's JSON form (``workload.py`` ``Workload.to_json``: the kit's
``LoadSettings.to_json`` settings and ``Req`` records) through the release installed in the current
venv (0.5.18 or 0.5.23). Run it from the repository root inside an SGLang
venv::

    PYTHONPATH=. $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python \
        -m tests.parity.scheduler.real_scheduler workload.json     # or - for stdin
    PYTHONPATH=. $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python \
        -m tests.parity.scheduler.real_scheduler --resolve         # the page-size / strategy table

or call :func:`run_workload` with the JSON dict (it returns a JSON-able dict). Nothing here imports
``kimi_viz``. Settings keys: ``page_size`` (the one given, ``None``: unset), ``resolved_page_size``
(the page the attention backend leaves: the kit's resolution, checked on its own by ``--resolve``),
``disable_radix_cache``, ``schedule_policy``, ``max_prefill_tokens``, ``chunked_prefill_size`` (``None``
or ``-1``: off), ``enable_mixed_chunk``, ``mamba_radix_cache_strategy`` (``"auto"`` (default),
``"extra_buffer"``, ``"no_buffer"`` or ``"extra_buffer_lazy"``, ``auto`` resolved by the release's own
rule), ``mamba_track_interval`` (256), ``disable_overlap_schedule`` (false); the kit's ``cache_mb``,
``platform``, ``gpu`` and ``attention_backend`` steer nothing here. Output: ``{"release", "passes",
"matches", "saves"}``: per
prefill (or mixed) pass its step, windows ``{rid, prefix_len, extend_input_len}``, the request left
chunked, the decode rows mixed in, the requests its result finished; per pass the admitted waiting
requests' match (``full_match`` = the FULL-only walk, ``prefix_len`` after the mamba cut-back,
``branching_seqlen``); and ``[step, rid, depth]`` for every mamba state the tree took in.

Real: ``ServerArgs`` published as the scheduler's, after the release's own mamba pass for Kimi-K3
(0.5.18 ``ServerArgs._handle_mamba_radix_cache``, 0.5.23 ``model_hook.handle_mamba_radix_cache``:
``auto`` resolution and the ``no_buffer`` / ``extra_buffer`` refusals); the tree that
``mem_cache/registry.py`` ``create_tree_cache`` builds for a hybrid-SSM model (``UnifiedRadixCache``
with ``ComponentType.FULL`` + ``ComponentType.MAMBA`` on the release's default tree core, Python in
0.5.18, Rust in 0.5.23; 0.5.18's ``ChunkCache`` under ``--disable-radix-cache`` with chunking);
``HybridReqToTokenPool`` with a real (tiny) KDA ``MambaPool``, its slot allocator and ping-pong track
buffers; ``Req``; ``SchedulePolicy``; ``PrefillAdder``; ``Req.init_next_round_input`` (the match and
its mamba cut-back); ``ScheduleBatch.init_new`` / ``prepare_for_extend`` (``alloc_for_extend``, the
extra-buffer track point) / ``prepare_for_decode`` (the decode track mask) / ``filter_batch`` /
``merge_batch`` / ``mix_with_running`` / ``check_decode_mem`` / ``copy``; the chunked-request stash
(0.5.18 ``maybe_cache_unfinished_req(chunked=True)``, 0.5.23 ``checkpoint_kv_cache``); and
``SchedulerBatchResultProcessor.process_batch_result_prefill`` / ``process_batch_result_decode``
(token commit, finish by length, decode track bookkeeping, the inserts and ``release_kv_cache``).

Stand-ins: the scheduler loop (``event_loop_overlap`` by default, ``event_loop_normal`` with
``disable_overlap_schedule``, and ``get_next_batch_to_run`` / ``_get_new_batch_prefill_raw`` /
``update_running_batch`` / 0.5.23 ``_reqs_finishing_inflight``, written out below in each release's
order, with the request-slot check and SGLang's own ``retract_decode``, without priority preemption, LoRA,
grammar, HiCache, PP or DP); the KV allocator when no pool is given (:class:`LargeKVAllocator`, on
``BaseTokenToKVPoolAllocator``: never short, fresh indices; with ``max_total_tokens`` the release's own
``TokenToKVPoolAllocator`` at page 1 or ``PagedTokenToKVPoolAllocator`` above it, over a tiny MLA pool
floored to whole pages); the forward (``run_batch`` only counts; a request's next token is its workload
output, committed when the result is processed); metrics / streaming / worker sinks. A request with
``after`` arrives at the first step after the one whose processed result finished its predecessor.

Patches and seeds (all scoped to a call):
- ``torch.Tensor.pin_memory`` returns the tensor and ``torch.tensor(..., pin_memory=True)`` builds an
  ordinary tensor (:func:`_patches`): CPU-only torch has no pinned allocator, and 0.5.18 pins
  unconditionally in ``set_mamba_track_indices_from_reqs``, both releases in ``prepare_for_decode``.
- 0.5.18's ``PagedTokenToKVPoolAllocator`` always launches its Triton kernels; ``alloc_extend_kernel`` /
  ``alloc_decode_kernel`` are routed to the module's own ``alloc_extend_naive`` and the same decode rule in
  PyTorch (:func:`paged_kernels_on_cpu`; 0.5.23 takes its PyTorch path itself without Triton).
- The mamba pass sees a CUDA machine: 0.5.18 ``sglang.srt.server_args.is_cuda`` returns True; 0.5.23
  ``runtime_context.override_platform(is_cuda=True)`` (SGLang's own override). 0.5.23 also
  ``configs.linear_attn_model_registry.get_linear_attn_spec`` returns None (Kimi-K3 has no spec; the
  stand-in ``hf_config`` is not a transformers config).
- Seeded, not patched: the model config memo (0.5.18 ``args.model_config``, 0.5.23
  ``args._model_config``) holds a stand-in Kimi-K3 ``hf_config``; ``args._mamba_cache_chunk_size``
  is ``max(64, page_size)`` (how the releases' own fixtures keep a dummy model from loading a
  config); ``attention_backend="torch_native"`` so ``write_cache_indices`` takes its torch path
  instead of a Triton kernel (nothing else on these paths reads the backend).
- ``--resolve`` (:func:`resolve_kimi_k3`) answers the platform probes for a GPU family: 0.5.23
  ``override_platform(...)``; 0.5.18 ``is_cuda`` / ``is_hip`` / ``is_sm100_supported`` /
  ``is_hopper_with_cuda_12_3`` / ``is_musa`` / ``is_npu`` / ``is_xpu`` / ``is_mps`` /
  ``get_device_sm`` in ``sglang.srt.server_args`` and ``sglang.srt.arg_groups.overrides``, and
  ``sglang.srt.utils.is_sm100_supported``.
"""

from __future__ import annotations

import json
import logging
import sys
import types
import warnings
import zlib
from array import array
from collections import deque
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

warnings.filterwarnings("ignore")
logging.getLogger("sglang").setLevel(logging.ERROR)

import sglang  # noqa: E402
import torch  # noqa: E402
from sglang.srt import server_args as _server_args  # noqa: E402
from sglang.srt.managers import mm_utils, schedule_batch, schedule_policy  # noqa: E402
from sglang.srt.managers.scheduler_components import batch_result_processor as _brp  # noqa: E402
from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker  # noqa: E402
from sglang.srt.managers.utils import GenerationBatchResult  # noqa: E402
from sglang.srt.mem_cache import common as mem_common  # noqa: E402
from sglang.srt.mem_cache import registry as _registry  # noqa: E402
from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

RELEASE = sglang.__version__
_VERSION = tuple(int(x) for x in RELEASE.split(".")[:3])
SUPPORTED = ("0.5.18", "0.5.23")
if RELEASE not in SUPPORTED:
    raise ImportError(f"real_scheduler drives SGLang {' and '.join(SUPPORTED)}; this venv has {RELEASE}")
NEW_API = _VERSION >= (0, 5, 23)  # req.kv.*, prefix_len / extend_end, checkpoint(), reqs_to_exclude

ARCH = "KimiK3ForConditionalGeneration"
FLA_CHUNK_SIZE = 64  # sglang.kernels.ops.attention.fla.chunk_delta_h.CHUNK_SIZE; Kimi-K3 sets no mamba_chunk_size
MEDIA_PAD = 163605  # <|media_pad|>
OUTPUT_BASE = 500_000  # stand-in output ids (kimi_viz.scheduler.req.Req.outputs)
KV_POOL_TOKENS = 1 << 40
REQ_SLOTS = 512
MAMBA_SLOTS = 8192  # at least; grown with the workload so no mamba state is ever evicted
VOCAB_SIZE = 1 << 31  # larger than every pad value, so no id is ever clamped


# --- the workload records (what this needs of prefill_workload.py: Request.outputs, token_ids, images) ---


def _part_len(part: Any) -> int:
    if isinstance(part, dict):
        return int(part["length"])
    if isinstance(part, (list, tuple)):
        return int(part[1])
    return 1


def _part_image(part: Any) -> tuple[int, int] | None:
    if isinstance(part, dict):
        return int(part["image"]), int(part["length"])
    if isinstance(part, (list, tuple)) and len(part) == 2:
        return int(part[0]), int(part[1])
    return None


def request_length(request: dict) -> int:
    """Return the prompt length of a workload request (image runs count their tokens)."""
    return sum(_part_len(p) for p in request["parts"])


def request_outputs(request: dict) -> list[int]:
    """Return the tokens a workload request generates (``Request.outputs``)."""
    if request.get("output_ids") is not None:
        return [int(t) for t in request["output_ids"]]
    rid, n = str(request["rid"]), int(request.get("max_new_tokens", 1))
    return [OUTPUT_BASE + zlib.crc32(f"{rid}:{k}".encode()) % 300_000 for k in range(n)]


def _token_ids(request: dict) -> list[int]:
    ids: list[int] = []
    for part in request["parts"]:
        image = _part_image(part)
        ids.extend([MEDIA_PAD] * image[1] if image else [int(part)])
    return ids


def _images(request: dict) -> list[tuple[int, int, int]]:
    spans, pos = [], 0
    for part in request["parts"]:
        image = _part_image(part)
        if image:
            spans.append((image[0], pos, pos + image[1] - 1))
            pos += image[1]
        else:
            pos += 1
    return spans


DEFAULT_SETTINGS: dict[str, Any] = {
    "page_size": None,
    "resolved_page_size": None,
    "disable_radix_cache": False,
    "schedule_policy": "fcfs",
    "max_prefill_tokens": 16384,
    "chunked_prefill_size": 8192,
    "enable_mixed_chunk": False,
    "mamba_radix_cache_strategy": "auto",
    "mamba_track_interval": 256,
    "disable_overlap_schedule": False,
    # memory (docs/memory-notes.md): None keeps a pool unbounded, as the driver always did
    "max_total_tokens": None,
    "max_running_requests": None,
    "max_mamba_cache_size": None,
    "schedule_conservativeness": 1.0,
}
CONTEXT_LEN = 262_144  # the model's context length: only the request-row estimate reads it (2048 below 4x this)
IGNORED_SETTINGS = ("cache_mb", "platform", "gpu", "attention_backend")  # the kit's: they steer no scheduling here


def settings_of(data: dict) -> dict[str, Any]:
    """Return the workload's settings with the defaults filled in (unknown keys are refused); ``page_size`` is
    the page the scheduler runs (``resolved_page_size`` when given), ``given_page_size`` the one the flags gave."""
    given = dict(data.get("settings", {}))
    for key in IGNORED_SETTINGS:
        given.pop(key, None)
    unknown = set(given) - set(DEFAULT_SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings: {sorted(unknown)}")
    s = {**DEFAULT_SETTINGS, **given}
    chunk = s["chunked_prefill_size"]
    s["chunked_prefill_size"] = chunk if chunk is not None and chunk > 0 else None
    s["given_page_size"] = s["page_size"]
    s["page_size"] = s.pop("resolved_page_size") or s["page_size"] or 1
    return s


# --- the KV allocator -----------------------------------------------------------------------


class LargeKVAllocator(BaseTokenToKVPoolAllocator):
    """A token-to-KV allocator that never runs short (the release's base class supplies the rest).

    ``alloc`` / ``alloc_extend`` / ``alloc_decode`` hand out fresh indices (from 1, like the real
    pools' reserved slot 0); ``free`` only counts. Everything else (free groups, segment frees,
    eviction and capacity hooks, the prefill budget) is ``BaseTokenToKVPoolAllocator``'s. Index
    values never steer scheduling.
    """

    def __init__(self, page_size: int):
        super().__init__(KV_POOL_TOKENS, page_size, torch.int64, "cpu", None, False)
        self.next_index = 1
        self.freed = 0

    def available_size(self) -> int:
        return KV_POOL_TOKENS

    def full_available_size(self) -> int:
        return KV_POOL_TOKENS

    def _fresh(self, n: int) -> torch.Tensor:
        out = torch.arange(self.next_index, self.next_index + n, dtype=torch.int64)
        self.next_index += n
        return out

    def alloc(self, need_size: int) -> torch.Tensor:
        return self._fresh(need_size)

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens, **_):
        return self._fresh(int(extend_num_tokens))

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc, **_):
        return self._fresh(len(seq_lens_cpu))

    def free(self, free_index) -> None:
        grouping = self.free_group is not None if NEW_API else not self.is_not_in_free_group
        if grouping:  # held until free_group_end(), as TokenToKVPoolAllocator.free does
            self.free_group.append(free_index.clone())
            return
        self.freed += int(free_index.numel())

    def clear(self) -> None:
        self.next_index = 1

    def get_kvcache(self):
        return None


class _NoOp:
    """A sink attribute: callable (does nothing) and false (so ``if sink.enable_x`` takes no branch)."""

    def __call__(self, *args, **kwargs) -> None:
        return None

    def __bool__(self) -> bool:
        return False


class _Sink:
    """Metrics, streaming and worker sinks: every attribute is a no-op, counters start at 0."""

    num_generated_tokens = 0
    forward_ct_decode = 0
    num_retracted_reqs = 0

    def __getattr__(self, name):
        return _NoOp()


class _Nothing:
    """A logits output without logprobs, hidden states or custom info."""

    def __getattr__(self, name):
        return None


# --- what differs between the releases -----------------------------------------------------------


def kv(req):
    """The object that carries a request's KV / mamba bookkeeping (0.5.23 ``req.kv``, 0.5.18 the request)."""
    return req.kv if NEW_API else req


def prefix_len(req) -> int:
    return req.prefix_len if NEW_API else len(req.prefix_indices)


def extend_len(req) -> int:
    return req.extend_len if NEW_API else req.extend_range.length


def extend_end(req) -> int:
    return req.extend_end if NEW_API else req.extend_range.end


def stash_chunked(req, tree_cache) -> None:
    """``Scheduler.stash_chunked_request``."""
    if NEW_API:
        mem_common.checkpoint_kv_cache(req, tree_cache)
    else:
        mem_common.maybe_cache_unfinished_req(req, tree_cache, chunked=True)


def filter_excluding(batch, reqs: list) -> None:
    if NEW_API:
        batch.filter_batch(reqs_to_exclude=reqs)
    else:
        batch.filter_batch(chunked_req_to_exclude=reqs)


# --- set-up ---------------------------------------------------------------------------------------


class _KimiK3HfConfig:
    """The parts of Kimi-K3's ``hf_config`` the strategy resolution reads (no ``mamba_chunk_size``)."""

    architectures = [ARCH]
    model_type = "kimi_k3"
    layer_types: list = []

    def __init__(self):
        self.text_config = types.SimpleNamespace(model_type="kimi_linear")


def _model_config_stub():
    hf = _KimiK3HfConfig()
    return types.SimpleNamespace(
        hf_config=hf,
        hf_text_config=hf.text_config,
        vocab_size=VOCAB_SIZE,
        is_encoder_decoder=False,
        is_multimodal=True,
        context_len=1 << 20,
        think_end_ids=None,
        self_opened_think_start_ids=None,
    )


def publish_settings(s: dict) -> Any:
    """Build the ``ServerArgs`` a Kimi-K3 server would run with, validate the strategy, publish it."""
    chunk = s["chunked_prefill_size"]
    args = _server_args.ServerArgs(
        model_path="dummy",  # "dummy" skips the resolution pipeline; the mamba part is replayed below
        page_size=s["given_page_size"],  # the mamba pass sees the page given, not the one a backend sets later
        chunked_prefill_size=chunk if chunk is not None else -1,
        max_prefill_tokens=s["max_prefill_tokens"],
        schedule_policy=s["schedule_policy"],
        enable_mixed_chunk=s["enable_mixed_chunk"],
        disable_radix_cache=s["disable_radix_cache"],
        mamba_radix_cache_strategy=s["mamba_radix_cache_strategy"],
        mamba_track_interval=s["mamba_track_interval"],
        disable_overlap_schedule=s["disable_overlap_schedule"],
        schedule_conservativeness=s["schedule_conservativeness"],
        max_running_requests=s["max_running_requests"],
        max_total_tokens=s["max_total_tokens"],
        device="cpu",
        # The CPU writes req_to_token rows with the torch fallback of write_cache_indices (0.5.18
        # would launch a Triton kernel); the attention backend steers nothing else on these paths.
        attention_backend="torch_native",
    )
    # mamba_cache_chunk_size = max(FLA chunk 64, page_size) (server_args.py / overrides.py); seeding it
    # is how the releases' own fixtures keep a dummy model from loading an HF config.
    page = s["page_size"]
    if max(FLA_CHUNK_SIZE, page) % min(FLA_CHUNK_SIZE, page) != 0:
        raise ValueError(
            "For SSM models, either chunk_size or page_size must be divisible by the other, "
            f"got chunk_size={FLA_CHUNK_SIZE}, page_size={page}"
        )
    args._mamba_cache_chunk_size = max(FLA_CHUNK_SIZE, page)
    _resolve_and_validate_mamba(args)
    args.page_size = page  # what the attention backend left (the kit's resolution; --resolve checks it)
    _server_args.set_global_server_args_for_scheduler(args)
    return args


def _resolve_and_validate_mamba(args) -> None:
    """The release's ``_handle_mamba_radix_cache`` / ``handle_mamba_radix_cache`` for Kimi-K3."""
    hf = _KimiK3HfConfig()
    # Both releases memoize the model config on the record (0.5.18 ``get_model_config`` reads
    # ``self.model_config``; 0.5.23 ``model_config_of`` hands back a ``_model_config`` without a
    # ``_model_config_built_from`` key as it is); seed it so nothing loads an HF config.
    model_config = types.SimpleNamespace(hf_config=hf)
    if NEW_API:
        args._model_config = model_config
    else:
        args.model_config = model_config
    with ExitStack() as stack:
        if NEW_API:
            from sglang.srt.arg_groups import model_hook
            from sglang.srt.configs import linear_attn_model_registry as lamr
            from sglang.srt.runtime_context import override_platform

            # extra_buffer is refused on a platform without FLA state snapshots (CPU); say it is CUDA
            # (the release's own scoped override of platform facts).
            stack.enter_context(override_platform(is_cuda=True))
            # Kimi-K3 has no linear-attention spec; the stand-in hf_config is not a real config object.
            stack.enter_context(mock.patch.object(lamr, "get_linear_attn_spec", lambda hf_config: None))
            model_hook.handle_mamba_radix_cache(args, hf)
        else:
            stack.enter_context(mock.patch.object(_server_args, "is_cuda", lambda: True))
            args._handle_mamba_radix_cache(model_arch=ARCH)
    _apply_declarations(args)


def _apply_declarations(args) -> None:
    """Write what the resolution declared (``auto`` -> a strategy, maybe overlap off) onto the args."""
    from sglang.srt.arg_groups.overrides import resolved_view

    view = resolved_view(args)
    for field in ("mamba_radix_cache_strategy", "disable_overlap_schedule"):
        setattr(args, field, getattr(view, field))


_CACHE_PARAMS: list = []


def _kda_params():
    """A tiny KDA state shape (one layer): the pools' sizes count slots, not bytes."""
    if not _CACHE_PARAMS:
        from sglang.srt.configs.mamba_utils import KimiLinearCacheParams, KimiLinearStateShape

        shape = KimiLinearStateShape.create(tp_world_size=1, num_heads=1, head_dim=4, conv_kernel_size=4)
        _CACHE_PARAMS.append(KimiLinearCacheParams(shape=shape, layers=[0]))
    return _CACHE_PARAMS[0]


def make_pool(
    s: dict, longest: int, n_requests: int, total_tokens: int = 0, rows: int | None = None, mamba: int | None = None
) -> HybridReqToTokenPool:
    """``HybridReqToTokenPool`` with a real (tiny) KDA ``MambaPool`` on the CPU: ``rows`` request rows and
    ``mamba`` state slots when given (the memory settings), else enough that neither runs short."""
    params = _kda_params()
    slots = rows if rows is not None else max(REQ_SLOTS, n_requests + 1)
    return HybridReqToTokenPool(
        size=slots,
        # 3 slots per running request (MAMBA_STATE_PER_REQ_PREFIX_CACHE) plus every state the tree
        # could hold: one per request and per checkpoint-grid step of its tokens.
        mamba_size=mamba
        if mamba is not None
        else max(MAMBA_SLOTS, 4 * n_requests + total_tokens // FLA_CHUNK_SIZE + 16),
        mamba_spec_state_size=slots,
        max_context_len=longest,
        device="cpu",
        enable_memory_saver=False,
        cache_params=params,
        mamba_layer_ids=params.layers,
        enable_mamba_extra_buffer=_extra_buffer(),
        enable_mamba_extra_buffer_lazy=_extra_buffer_lazy(),
        enable_overlap_schedule=not s["disable_overlap_schedule"],
    )


def make_kv_allocator(s: dict, pool: HybridReqToTokenPool):
    """The KV allocator: the release's own ``TokenToKVPoolAllocator`` (page 1) or ``PagedTokenToKVPoolAllocator``
    over a (tiny) MLA pool of ``max_total_tokens`` tokens floored to whole pages (what
    ``calculate_pool_sizes_from_max_tokens`` leaves), or the never-short stand-in when the pool is unbounded."""
    total, page = s["max_total_tokens"], s["page_size"]
    if total is None:
        return LargeKVAllocator(page)
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool

    total = total // page * page
    kv_pool = HybridLinearKVPool(
        size=total,
        dtype=torch.bfloat16,
        page_size=page,
        head_num=1,
        head_dim=16,
        full_attention_layer_ids=[1],
        device="cpu",
        mamba_pool=pool.mamba_pool,
        use_mla=True,
        kv_lora_rank=8,
        qk_rope_head_dim=4,
    )
    if page == 1:
        return TokenToKVPoolAllocator(total, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool, need_sort=False)
    return PagedTokenToKVPoolAllocator(
        total, page_size=page, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool, need_sort=False
    )


@contextmanager
def paged_kernels_on_cpu():
    """0.5.18: ``PagedTokenToKVPoolAllocator.alloc_extend`` / ``alloc_decode`` always launch Triton kernels ("0 active
    drivers" on the CPU); route them to the module's own ``alloc_extend_naive`` and the same decode rule in PyTorch
    (0.5.23 takes its PyTorch path itself where Triton is missing). Index values never steer scheduling; how many
    pages each call takes is the allocator's own code either way."""
    if NEW_API:
        yield
        return
    from sglang.srt.mem_cache.allocator import paged

    class _Extend:
        def __getitem__(self, grid):
            def run(prefix_lens, seq_lens, last_loc, free_pages, out_indices, _bs_pow2, page_size):
                paged.alloc_extend_naive(
                    prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, out_indices.device
                )

            return run

    class _Decode:
        def __getitem__(self, grid):
            def run(seq_lens, last_loc, free_pages, out_indices, _bs_pow2, page_size):
                need = ((seq_lens - 1) % page_size == 0).to(torch.int64)
                rank = (torch.cumsum(need, 0) - need).clamp(max=max(len(free_pages) - 1, 0))
                new_start = free_pages[rank] * page_size if len(free_pages) else last_loc + 1
                out_indices.copy_(torch.where(need.bool(), new_start, last_loc + 1))

            return run

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(paged, "alloc_extend_kernel", _Extend()))
        stack.enter_context(mock.patch.object(paged, "alloc_decode_kernel", _Decode()))
        yield


def request_rows(s: dict, strategy_extra: bool, overlap: bool) -> int | None:
    """``KVCacheConfigurator.resolve_max_num_reqs`` for one rank: the request rows (``max_running_requests``);
    None when no memory setting bounds them (the driver then keeps its large pool)."""
    total, flag, mamba = s["max_total_tokens"], s["max_running_requests"], s["max_mamba_cache_size"]
    if total is None and flag is None and mamba is None:
        return None
    capacity = total // s["page_size"] * s["page_size"] if total is not None else KV_POOL_TOKENS
    estimated = max(min(int(capacity / CONTEXT_LEN * 512), 4096), 2048)
    if flag is not None:
        rows = min(max(1, flag) if NEW_API else flag, capacity // 2)
    else:
        rows = min(estimated, capacity // 2)
    if mamba is not None:
        ratio = 1 if s["disable_radix_cache"] else 3 + ((2 if overlap else 1) if strategy_extra else 0)
        rows = min(rows, mamba // ratio)
    return rows


def _extra_buffer() -> bool:
    """``extra_buffer`` (or its lazy variant) as the published config reads."""
    if NEW_API:
        from sglang.srt.runtime_context import get_exec

        return bool(get_exec().mamba.enable_mamba_extra_buffer)
    from sglang.srt.runtime_context import mamba_extra_buffer_enabled

    return bool(mamba_extra_buffer_enabled())


def _extra_buffer_lazy() -> bool:
    if NEW_API:
        from sglang.srt.runtime_context import get_exec

        return bool(get_exec().mamba.enable_mamba_extra_buffer_lazy)
    from sglang.srt.runtime_context import mamba_extra_buffer_lazy_enabled

    return bool(mamba_extra_buffer_lazy_enabled())


def build_tree_cache(s: dict, args, pool, allocator):
    """``mem_cache/registry.py`` ``create_tree_cache`` for a hybrid-SSM (not SWA) model."""
    chunk = s["chunked_prefill_size"]
    effective_chunk = chunk if chunk is not None and chunk > 0 else None
    params = CacheInitParams(
        disable=s["disable_radix_cache"],
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        page_size=s["page_size"],
        enable_mamba_extra_buffer=_extra_buffer(),
        enable_mamba_extra_buffer_lazy=_extra_buffer_lazy(),
        chunked_prefill_size=effective_chunk,
    )
    ctx_fields = dict(
        server_args=args,
        params=params,
        is_hybrid_swa=False,
        is_hybrid_ssm=True,
        enable_hierarchical_cache=False,
        disable_radix_cache=s["disable_radix_cache"],
        tp_worker=None,
        model_config=None,
        tp_size=1,
        tp_rank=0,
        tp_group=None,
    )
    if not NEW_API:
        ctx_fields["effective_chunked_prefill_size"] = effective_chunk
    return _registry.create_tree_cache(_registry.TreeCacheBuildContext(**ctx_fields))


def padded_ids(request: dict) -> array:
    """The prompt as the release's ``pad_input_ids`` leaves it (each image run -> its item's pad values)."""
    ids = _token_ids(request)
    items = []
    for image_hash, start, end in _images(request):
        item = schedule_batch.MultimodalDataItem(modality=schedule_batch.Modality.IMAGE, offsets=[(start, end)])
        item.set_hash(image_hash)
        items.append(item)
    if not items:
        return array("q", ids)
    mm_inputs = schedule_batch.MultimodalInputs(mm_items=items, im_token_id=ids[_images(request)[0][1]])
    pattern = mm_utils.MultiModalityDataPaddingPatternMultimodalTokens()
    out = pattern.pad_input_tokens(array("q", ids) if NEW_API else ids, mm_inputs)
    return array("q", list(out))


def holds_row(req) -> bool:
    """0.5.23 ``req.kv.holds_kv``: the request already holds a request row (a continuing chunk)."""
    return bool(kv(req).holds_kv)


def make_req(request: dict):
    params = SamplingParams(max_new_tokens=int(request.get("max_new_tokens", 1)))
    params.normalize(None)  # what the tokenizer manager does (no stop strings)
    req = schedule_batch.Req(str(request["rid"]), "", padded_ids(request), params)
    req.workload_outputs = request_outputs(request)
    return req


def _make_processor(tree_cache, pool, allocator, enable_overlap: bool):
    """The release's ``SchedulerBatchResultProcessor`` with sinks for metrics, streaming and workers."""
    from sglang.srt.disaggregation.utils import DisaggregationMode

    fields = dict(
        is_generation=True,
        disaggregation_mode=DisaggregationMode.NULL,
        enable_overlap=enable_overlap,
        enable_overlap_mlx=False,
        model_config=_model_config_stub(),
        token_to_kv_pool_allocator=allocator,
        tree_cache=tree_cache,
        hisparse_coordinator=None,
        req_to_token_pool=pool,
        decode_offload_manager=None,
        metrics_collector=None,
        metrics_reporter=_Sink(),
        draft_worker=None,
        model_worker=_Sink(),
        logprob_result_processor=_Sink(),
        output_streamer=_Sink(),
        abort_request=None,
    )
    if NEW_API:
        fields["beam_coordinator"] = _Sink()
    else:
        fields["server_args"] = _server_args.get_global_server_args()
    return _brp.SchedulerBatchResultProcessor(**fields)


# --- server-argument resolution for Kimi-K3 (docs/hybrid-tree-notes.md §4) ------------------------

GPU_FAMILIES = ("sm90", "sm100", "rocm")


@contextmanager
def _gpu(family: str):
    """Make the release's platform probes answer for a GPU family (H100/H200, B200/GB200, MI300-class)."""
    facts = {
        "sm90": dict(is_cuda=True, is_hip=False, is_hopper=True, is_sm100=False, sm=90),
        "sm100": dict(is_cuda=True, is_hip=False, is_hopper=False, is_sm100=True, sm=100),
        "rocm": dict(is_cuda=False, is_hip=True, is_hopper=False, is_sm100=False, sm=0),
    }[family]
    if NEW_API:
        from sglang.srt.runtime_context import override_platform

        with override_platform(
            is_cuda=facts["is_cuda"],
            is_hip=facts["is_hip"],
            is_hopper_with_cuda_12_3=facts["is_hopper"],
            is_sm100=facts["is_sm100"],
            is_sm90=facts["is_hopper"],
            is_musa=False,
            is_npu=False,
            is_xpu=False,
            is_mps=False,
            device_sm=facts["sm"],
        ):
            yield
        return
    from sglang.srt.arg_groups import overrides

    with ExitStack() as stack:
        for module in (overrides, _server_args):
            for name, value in (
                ("is_cuda", facts["is_cuda"]),
                ("is_hip", facts["is_hip"]),
                ("is_sm100_supported", facts["is_sm100"]),
                ("is_hopper_with_cuda_12_3", facts["is_hopper"]),
                ("is_musa", False),
                ("is_npu", False),
                ("is_xpu", False),
                ("is_mps", False),
                ("get_device_sm", facts["sm"]),
            ):
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, lambda *a, _v=value, **k: _v))
        stack.enter_context(mock.patch("sglang.srt.utils.is_sm100_supported", lambda *a, **k: facts["is_sm100"]))
        yield


def resolve_kimi_k3(
    gpu: str,
    *,
    attention_backend: str | None = None,
    page_size: int | None = None,
    disable_overlap_schedule: bool = False,
    mamba_radix_cache_strategy: str = "auto",
    mamba_track_interval: int = 256,
    num_kv_heads_per_rank: int = 8,
) -> dict:
    """Replay the parts of the release's resolution that decide Kimi-K3's attention backend, page
    size and mamba strategy, in the release's order: the model overrides, the mamba pass
    (``_handle_mamba_radix_cache``, still before any page snap), ``_attention_backend_default``,
    ``_mla_backend_page_constraints``, ``_page_size_default``. Returns the resolved values, or the
    refusal (``error``); ``tree_error`` is what ``MambaComponent`` raises at scheduler start."""
    from sglang.srt.arg_groups import overrides
    from sglang.srt.configs.model_config import AttentionArch

    args = _server_args.ServerArgs(
        model_path="dummy",
        attention_backend=attention_backend,
        page_size=page_size,
        disable_overlap_schedule=disable_overlap_schedule,
        mamba_radix_cache_strategy=mamba_radix_cache_strategy,
        mamba_track_interval=mamba_track_interval,
    )
    hf = _KimiK3HfConfig()
    model_config = types.SimpleNamespace(
        hf_config=hf,
        hf_text_config=hf.text_config,
        attention_arch=AttentionArch.MLA,
        get_num_kv_heads=lambda tp, dcp_size=1: num_kv_heads_per_rank,
        has_attention_sinks=False,
        has_asymmetric_kv=False,
        quantization=None,
    )
    if NEW_API:
        args._model_config = model_config
    else:
        args.model_config = model_config
    out: dict[str, Any] = {"release": RELEASE, "gpu": gpu, "given": attention_backend or "(default)"}
    try:
        with _gpu(gpu), ExitStack() as stack:
            if NEW_API:
                from sglang.srt.arg_groups import model_hook
                from sglang.srt.configs import linear_attn_model_registry as lamr

                stack.enter_context(mock.patch.object(lamr, "get_linear_attn_spec", lambda hf_config: None))
                args._resolved_overrides = [
                    *getattr(args, "_resolved_overrides", ()),
                    *overrides.collect_model_override_declarations(ARCH, args, hf),
                ]
                model_hook.handle_mamba_radix_cache(args, hf)
            else:
                args._resolved_overrides = overrides.collect_model_override_declarations(ARCH, args, hf)
                args._handle_mamba_radix_cache(model_arch=ARCH)
            for name in ("_attention_backend_default", "_mla_backend_page_constraints", "_page_size_default"):
                overrides.run_post_process_pass(args, getattr(overrides, name))
    except AssertionError as exc:
        out["error"] = str(exc) or "AssertionError (no message)"
        return out
    view = overrides.resolved_view(args)
    extra = view.mamba_radix_cache_strategy in ("extra_buffer", "extra_buffer_lazy")
    out.update(
        attention_backend=view.attention_backend,
        prefill=view.prefill_attention_backend or view.attention_backend,
        decode=view.decode_attention_backend or view.attention_backend,
        page_size=view.page_size,
        strategy=view.mamba_radix_cache_strategy,
        overlap=not view.disable_overlap_schedule,
        mamba_cache_chunk_size=max(FLA_CHUNK_SIZE, view.page_size),
    )
    if not extra and view.page_size != 1:
        out["tree_error"] = (
            f"MambaComponent requires page_size=1 when mamba_extra_buffer is disabled, got {view.page_size}"
        )
    return out


def resolution_table() -> list[dict]:
    """:func:`resolve_kimi_k3` for each GPU family, the default and the MLA backends, overlap on/off."""
    backends = {
        "sm90": [None, "fa3", "flashinfer", "flashmla", "triton"],
        "sm100": [None, "flashinfer", "trtllm_mla", "cutedsl_mla", "flashmla", "triton"],
        "rocm": [None, "aiter", "triton"],
    }
    if not NEW_API:
        backends["sm90"].append("cutlass_mla")
        backends["sm100"].append("cutlass_mla")
    rows = []
    for gpu in GPU_FAMILIES:
        for backend in backends[gpu]:
            for no_overlap in (False, True):
                rows.append(resolve_kimi_k3(gpu, attention_backend=backend, disable_overlap_schedule=no_overlap))
    return rows


def format_resolution(row: dict) -> str:
    """One line of the table: release, GPU, the backend given -> what the release resolves."""
    head = f"{row['release']} {row['gpu']:5s} {row['given']:11s}"
    if "error" in row:
        return f"{head} -> refused: {row['error']}"
    line = (
        f"{head} -> {row['attention_backend']:11s} page {row['page_size']:<3d} {row['strategy']:12s} "
        f"overlap={'on' if row['overlap'] else 'off'}"
    )
    return line + (f"  [scheduler start: {row['tree_error']}]" if "tree_error" in row else "")


# --- the loop ------------------------------------------------------------------------------------


class Simulation:
    """One workload through the real tree, pools, adder and batch code; the loop is a stand-in."""

    def __init__(self, data: dict):
        self.s = settings_of(data)
        self.requests = [dict(r) for r in data["requests"]]
        rids = [str(r["rid"]) for r in self.requests]
        if len(set(rids)) != len(rids):
            raise ValueError("request ids must be unique")
        self.max_steps = int(data.get("max_steps", 10_000))
        self.args = publish_settings(self.s)
        s = self.s
        self.enable_overlap = not self.args.disable_overlap_schedule
        longest = max(request_length(r) + int(r.get("max_new_tokens", 1)) for r in self.requests)
        longest += 2 * s["page_size"] + 8
        total = sum(request_length(r) + int(r.get("max_new_tokens", 1)) for r in self.requests)
        self.rows = request_rows(s, _extra_buffer(), self.enable_overlap)
        self.pool = make_pool(
            {**s, "disable_overlap_schedule": not self.enable_overlap},
            longest,
            len(self.requests),
            total,
            rows=self.rows,
            mamba=s["max_mamba_cache_size"],
        )
        self.max_micro_batch = self.rows if self.rows is not None else REQ_SLOTS
        self.allocator = make_kv_allocator(s, self.pool)
        self.tree_cache = build_tree_cache(s, self.args, self.pool, self.allocator)
        self.model_config = _model_config_stub()
        self.policy = schedule_policy.SchedulePolicy(s["schedule_policy"], self.tree_cache, False, False, False)
        chunk = s["chunked_prefill_size"]
        self.chunked_prefill_size = chunk if chunk is not None and chunk > 0 else None
        self.is_mixed_chunk = self.chunked_prefill_size is not None and s["enable_mixed_chunk"]
        self.new_token_ratio = NewTokenRatioTracker.from_config()
        self.processor = _make_processor(self.tree_cache, self.pool, self.allocator, self.enable_overlap)
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.spec_none = SpeculativeAlgorithm.NONE
        self.running_batch = schedule_batch.ScheduleBatch(reqs=[], batch_is_full=False)
        self.last_batch = None
        self.result_queue: deque = deque()
        self.waiting: list = []
        self.chunked_req = None
        self.pending = list(self.requests)
        self.finish_step: dict[str, int] = {}
        self.processed_tokens = 0
        self.forward_ct = 0
        self.step_no = 0
        self.passes: list[dict] = []
        self.matches: list[dict] = []
        self.saves: list[list] = []
        self.retractions: list[list] = []  # [step, rid] per request retract_decode sent back to the queue
        self.aborted: list[list] = []  # [step, rid]: retract_decode aborted the last request (out of memory)
        self.no_token: list[int] = []  # the steps whose adder walk stopped on NO_TOKEN
        self.memory: list[list] = []  # [step, available KV, evictable KV, free mamba slots] after each step
        self.evictions: list[list] = []  # [step, KV tokens, mamba states] the tree evicted in the step
        self._evicted = [0, 0]
        self._pass_of_batch: dict[int, dict] = {}
        self._capture: dict | None = None
        self._caching_rid: str | None = None
        self._instrument()

    # instrumentation: observe matches and mamba-state inserts without changing them
    def _instrument(self) -> None:
        tree = self.tree_cache
        real_match, real_insert = tree.match_prefix, tree.insert
        sim = self

        def match_prefix(params):
            result = real_match(params)
            if sim._capture is not None:
                sim._capture["result"] = result
            return result

        def insert(params):
            result = real_insert(params)
            mamba_value = getattr(params, "mamba_value", None)
            if mamba_value is not None and not getattr(result, "mamba_exist", False):
                sim.saves.append([sim.step_no, sim._caching_rid, len(params.key)])
            return result

        tree.match_prefix = match_prefix
        tree.insert = insert
        for name in ("evict", "evict_for_alloc"):  # 0.5.19+ allocations evict through evict_for_alloc
            real_evict = getattr(tree, name, None)
            if real_evict is None:
                continue

            def evict(params, *a, _real=real_evict, **k):
                result = _real(params, *a, **k)
                sim._evicted[0] += int(getattr(result, "num_tokens_evicted", 0) or 0)
                sim._evicted[1] += int(getattr(result, "mamba_num_evicted", 0) or 0)
                return result

            setattr(tree, name, evict)
        for name in ("cache_unfinished_req", "cache_finished_req", "checkpoint"):
            real = getattr(tree, name, None)
            if real is None:
                continue

            def wrapped(req, *a, _real=real, **k):
                outer, sim._caching_rid = sim._caching_rid, req.rid
                try:
                    return _real(req, *a, **k)
                finally:
                    sim._caching_rid = outer

            setattr(tree, name, wrapped)

    # arrivals (process_input_requests)
    def _arrive(self, step: int) -> None:
        still = []
        for r in self.pending:
            after = r.get("after")
            ready = int(r.get("arrival", 0)) <= step and (after is None or self.finish_step.get(after, step) < step)
            if ready:
                self.waiting.append(make_req(r))
            else:
                still.append(r)
        self.pending = still

    # Scheduler.get_next_batch_to_run
    def _get_next_batch_to_run(self):
        running_batch, last_batch = self.running_batch, self.last_batch
        exclude: set = set()
        if self.chunked_req is not None:
            exclude.add(self.chunked_req)
            if extend_end(self.chunked_req) > prefix_len(self.chunked_req):
                stash_chunked(self.chunked_req, self.tree_cache)
        if last_batch is not None and last_batch.forward_mode.is_extend():
            if last_batch.chunked_req is not None:
                exclude.add(last_batch.chunked_req)
            last_bs = last_batch.batch_size()
            filter_excluding(last_batch, list(exclude))
            if last_batch.batch_size() < last_bs:
                running_batch.batch_is_full = False
            if not last_batch.is_empty() and last_batch is not running_batch:
                if running_batch.is_empty():
                    running_batch = last_batch
                else:
                    running_batch.merge_batch(last_batch)
        if NEW_API:
            # 0.5.23: every step (overlap merges a prefill's requests before its result finishes them)
            running_bs = running_batch.batch_size()
            running_batch.filter_batch()
            if running_batch.batch_size() < running_bs:
                running_batch.batch_is_full = False
        elif running_batch.is_prefill_only:
            running_batch.filter_batch()
        new_batch, running_batch = self._get_new_batch_prefill_raw(running_batch)
        if new_batch is not None:
            ret = new_batch
        elif not running_batch.is_empty() and not running_batch.is_prefill_only:
            decode_batch = self._update_running_batch(running_batch)
            ret = decode_batch if decode_batch is not None and not decode_batch.is_empty() else None
        else:
            ret = None
        self.running_batch = running_batch
        return ret

    def _reqs_finishing_inflight(self, batch) -> list:
        """0.5.23 ``Scheduler._reqs_finishing_inflight`` (overlap only)."""
        if not NEW_API or not self.enable_overlap or not self.result_queue:
            return []
        assert len(self.result_queue) == 1
        queued = set(self.result_queue[0][0].reqs)
        return [r for r in batch.reqs if r in queued and r.beam_group is None and r.next_output_finishes_by_length()]

    # Scheduler.update_running_batch: the decode memory check, retraction, the ratio
    def _update_running_batch(self, batch):
        initial_bs = batch.batch_size()
        finishing: list = []
        if NEW_API:
            finishing = self._reqs_finishing_inflight(batch)
            batch.filter_batch(reqs_to_exclude=finishing)
        else:
            batch.filter_batch()
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        short = not batch.check_decode_mem()
        if short and finishing:  # 0.5.23: the queued result frees them this step; decode the rest next step
            batch.batch_is_full = False
            return None
        if short:
            if NEW_API:
                retracted, ratio, aborted = batch.retract_decode()
            else:
                retracted, ratio, aborted = batch.retract_decode(self.args)
            self.new_token_ratio.current = ratio
            for req in retracted:
                self.retractions.append([self.step_no, req.rid])
                self._requeue(req)
            for req in aborted:
                self.aborted.append([self.step_no, req.rid])
                self.finish_step[req.rid] = self.step_no
        else:
            self.new_token_ratio.decay_step()
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return batch
        batch.prepare_for_decode()
        return batch

    def _requeue(self, req) -> None:
        """``_add_request_to_queue(req, is_retracted=True)``: to the back of the waiting queue."""
        self.waiting.append(req)

    # Scheduler._get_new_batch_prefill_raw
    def _get_new_batch_prefill_raw(self, running_batch):
        if NEW_API and running_batch.is_empty():
            running_batch.batch_is_full = False
        if (running_batch.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None, running_batch
        running_bs = len(running_batch.reqs)
        if self._allocatable(running_bs, 0) <= 0 and self.chunked_req is None:
            running_batch.batch_is_full = True
            return None, running_batch
        if NEW_API:
            self.policy.calc_priority(self.waiting, running_batch, processed_tokens=self.processed_tokens)
        else:
            self.policy.calc_priority(self.waiting, running_batch)
        s = self.s
        adder = schedule_policy.PrefillAdder(
            s["page_size"],
            self.tree_cache,
            self.allocator,
            running_batch,
            self.new_token_ratio.current,
            s["max_prefill_tokens"],
            self.chunked_prefill_size,
            running_bs if self.is_mixed_chunk else 0,
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            if NEW_API:
                adder.chunked_req_limit = self.policy.shortest_prefill_chunk_limit(
                    self.chunked_req, self.waiting, adder.rem_chunk_tokens or 0, s["page_size"]
                )
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        captured = []
        mamba_allocator = self.pool.mamba_allocator
        mamba_allocator.alloc_group_begin(len(self.waiting))
        for req in self.waiting:
            if NEW_API and adder.budget_state() == schedule_policy.AddReqResult.OTHER:
                break
            held = sum(1 for r in adder.can_run_list if holds_row(r)) if NEW_API else 0
            if len(adder.can_run_list) >= self._allocatable(len(running_batch.reqs), held):
                running_batch.batch_is_full = True
            if running_batch.batch_is_full:
                break
            self._capture = {}
            try:
                req.init_next_round_input(self.tree_cache)
            finally:
                capture, self._capture = self._capture, None
            captured.append((req, capture.get("result")))
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None)
            if res != schedule_policy.AddReqResult.CONTINUE:
                if res == schedule_policy.AddReqResult.NO_TOKEN:
                    self.no_token.append(self.step_no)
                    if NEW_API:
                        running_batch.batch_is_full = len(adder.can_run_list) > 0 or not running_batch.is_empty()
                    else:
                        running_batch.batch_is_full = True
                added = len(adder.can_run_list) > 0 and req is adder.can_run_list[-1]
                if not added:
                    k = kv(req)
                    k.mamba_cow_src_index = None
                    k.mamba_needs_clear = False
                    if k.mamba_pool_idx is not None:
                        self.pool.mamba_allocator.free(k.mamba_pool_idx.unsqueeze(-1))
                        k.mamba_pool_idx = None
                break
        mamba_allocator.alloc_group_end()
        can_run = list(adder.can_run_list)
        if not can_run:
            return None, running_batch
        admitted = set(map(id, can_run))
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        new_batch = schedule_batch.ScheduleBatch.init_new(
            can_run,
            self.pool,
            self.allocator,
            self.tree_cache,
            self.model_config,
            self.enable_overlap,
            self.spec_none,
            chunked_req=self.chunked_req,
        )
        new_batch.contains_last_prefill_chunk = self.chunked_req is None or len(can_run) != 1
        new_batch.prepare_for_extend()
        windows = [{"rid": r.rid, "prefix_len": prefix_len(r), "extend_input_len": extend_len(r)} for r in can_run]
        self.processed_tokens += sum(w["extend_input_len"] for w in windows)
        matches = []
        for req, result in captured:
            if id(req) not in admitted:
                continue
            entry = {"rid": req.rid, "prefix_len": prefix_len(req)}
            if result is not None:
                entry["full_match"] = int(result.full_kv_hit_length)
                entry["branching_seqlen"] = result.mamba_branching_seqlen
            matches.append(entry)
        decoding: list = []
        if self.is_mixed_chunk and not running_batch.is_empty():
            if NEW_API:
                finishing = self._reqs_finishing_inflight(running_batch)
                running_batch.filter_batch(reqs_to_exclude=finishing)
                if finishing:
                    running_batch.batch_is_full = False
                if not running_batch.is_empty() and running_batch.check_decode_mem():
                    running_batch.prepare_for_decode()
                    new_batch.mix_with_running(running_batch)
                    new_batch.decoding_reqs = running_batch.reqs
                    decoding = list(running_batch.reqs)
                    running_batch = schedule_batch.ScheduleBatch(reqs=[], batch_is_full=running_batch.batch_is_full)
            else:
                running_batch.filter_batch()
                if not running_batch.is_empty():
                    running_batch.prepare_for_decode()
                    new_batch.mix_with_running(running_batch)
                    new_batch.decoding_reqs = running_batch.reqs
                    decoding = list(running_batch.reqs)
                running_batch = schedule_batch.ScheduleBatch(reqs=[], batch_is_full=running_batch.batch_is_full)
        else:
            new_batch.decoding_reqs = None
        record = {
            "step": self.step_no,
            "windows": windows,
            "chunked": None if self.chunked_req is None else self.chunked_req.rid,
            "decoding": [r.rid for r in decoding],
            "finished": [],
            "release": RELEASE,
        }
        self.passes.append(record)
        self.matches.append({"step": self.step_no, "requests": matches})
        self._pass_of_batch[id(new_batch)] = record
        return new_batch, running_batch

    def _allocatable(self, running_bs: int, held_rows: int) -> int:
        """``Scheduler.get_num_allocatable_reqs``: the micro-batch room and the free request rows (0.5.23 adds
        back the rows the counted requests already hold)."""
        return min(self.max_micro_batch - running_bs, self.pool.available_size() + held_rows)

    # Scheduler.run_batch: the forward is a stand-in; the result is built when it is processed
    def _run_batch(self, batch):
        self.forward_ct += 1
        batch.forward_iter = self.forward_ct
        batch.input_ids = None
        return None

    def _next_tokens(self, batch) -> list[int]:
        out = []
        for req in batch.reqs:
            n = len(req.output_ids)
            live = not req.finished() and req.inflight_middle_chunks <= 0 and n < len(req.workload_outputs)
            out.append(req.workload_outputs[n] if live else 0)
        return out

    # Scheduler.process_batch_result
    def _process_batch_result(self, batch, record: dict | None) -> None:
        before = {r.rid for r in batch.reqs if r.finished()}
        result = GenerationBatchResult(
            logits_output=_Nothing(),
            next_token_ids=torch.tensor(self._next_tokens(batch), dtype=torch.int64),
            can_run_cuda_graph=False,
        )
        if batch.forward_mode.is_decode():
            self.processor.process_batch_result_decode(batch, result)
        elif batch.forward_mode.is_extend():
            self.processor.process_batch_result_prefill(batch, result)
        finished = [r.rid for r in batch.reqs if r.finished() and r.rid not in before]
        for rid in finished:
            self.finish_step[rid] = self.step_no
        if record is not None:
            record["finished"] = finished

    def _on_idle(self) -> None:
        if not self.waiting and self.running_batch.is_empty() and self.chunked_req is None:
            self.new_token_ratio.reset()

    def _snapshot(self) -> None:
        """Record the step's evictions and, with a bounded pool, the memory left after it."""
        if any(self._evicted):
            self.evictions.append([self.step_no, *self._evicted])
        self._evicted = [0, 0]
        if self.s["max_total_tokens"] is not None or self.s["max_mamba_cache_size"] is not None:
            tree = self.tree_cache
            evictable = tree.full_evictable_size() if not self.s["disable_radix_cache"] else 0
            mamba_free = self.pool.mamba_allocator.available_size()
            self.memory.append([self.step_no, self.allocator.available_size(), evictable, mamba_free])

    def step(self) -> None:
        """One scheduler iteration, in ``event_loop_overlap`` or ``event_loop_normal`` order."""
        try:
            self._step()
        finally:
            self._snapshot()

    def _step(self) -> None:
        self._arrive(self.step_no)
        batch = self._get_next_batch_to_run()
        record = self._pass_of_batch.pop(id(batch), None) if batch is not None else None
        if not self.enable_overlap:  # event_loop_normal
            if batch is not None:
                self._run_batch(batch)
                self._process_batch_result(batch, record)
            else:
                self._on_idle()
            self.last_batch = batch
            return
        # event_loop_overlap (SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP off, no grammar: never synchronous)
        if batch is not None:
            self._run_batch(batch)
            self.result_queue.append((batch.copy(), record))
        if self.last_batch is not None:
            queued, queued_record = self.result_queue.popleft()
            self._process_batch_result(queued, queued_record)
        elif batch is None:
            self._on_idle()
        self.last_batch = batch

    def done(self) -> bool:
        return (
            not self.pending
            and not self.waiting
            and self.running_batch.is_empty()
            and self.chunked_req is None
            and not self.result_queue
            and (self.last_batch is None or all(r.finished() for r in self.last_batch.reqs))
            and all(r["rid"] in self.finish_step for r in self.requests)
        )

    def run(self) -> dict:
        while self.step_no < self.max_steps:
            self.step()
            self.step_no += 1
            if self.done():
                return {
                    "release": RELEASE,
                    "passes": self.passes,
                    "matches": self.matches,
                    "saves": self.saves,
                    "retractions": self.retractions,
                    "aborted": self.aborted,
                    "no_token": self.no_token,
                    "evictions": self.evictions,
                    "memory": self.memory,
                    "rows": self.rows,
                    "settings": {
                        "max_total_tokens": self.s["max_total_tokens"],
                        "max_mamba_cache_size": self.s["max_mamba_cache_size"],
                    },
                }
        raise RuntimeError(f"the workload did not finish in {self.max_steps} steps")


@contextmanager
def _patches():
    """The run-scoped patches (see the module docstring): CPU-only torch has no pinned-memory
    allocator, so ``Tensor.pin_memory()`` returns the tensor and ``torch.tensor(..., pin_memory=True)``
    builds an ordinary one (0.5.18 pins unconditionally in ``set_mamba_track_indices_from_reqs``;
    both releases pin the decode track mask in ``prepare_for_decode``)."""
    real_tensor = torch.tensor

    def tensor(*args, pin_memory=False, **kwargs):
        return real_tensor(*args, **kwargs)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.Tensor, "pin_memory", lambda self, *a, **k: self))
        stack.enter_context(mock.patch.object(torch, "tensor", tensor))
        stack.enter_context(paged_kernels_on_cpu())
        yield


def run_workload(data: dict) -> dict:
    """Return what this venv's SGLang release does with the workload (``workload_to_json`` data)."""
    with _patches():
        return Simulation(data).run()


def main(argv: list[str] | None = None) -> int:
    """``real_scheduler.py [WORKLOAD.json|-]``: print the result as JSON; ``--resolve``: the §4 table."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--resolve":
        for row in resolution_table():
            print(format_resolution(row))
        return 0
    source = argv[0] if argv else "-"
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    json.dump(run_workload(json.loads(text)), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
