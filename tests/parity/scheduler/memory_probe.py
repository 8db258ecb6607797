"""Memory pressure in SGLang's scheduler for a Kimi-K3-shaped hybrid model, run on the CPU with the real code.

Standalone (imports nothing from ``kimi_viz``). Run it inside an SGLang venv (0.5.18 or 0.5.23)::

    $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python tests/parity/scheduler/memory_probe.py

What is real: ``ServerArgs`` published as the scheduler's, ``HybridReqToTokenPool`` (with its
``MambaPool`` and ``MambaSlotAllocator``; extra-buffer ping-pong tracking, overlap on),
``HybridLinearKVPool`` over an ``MLATokenToKVPool`` (Kimi-K3's full-attention layers are MLA),
``TokenToKVPoolAllocator`` (page 1) / ``PagedTokenToKVPoolAllocator`` (page 16), the Kimi-K3 tree
``UnifiedRadixCache`` with the FULL and MAMBA components (0.5.23: its default Rust TreeCore, then
replayed on the Python TreeCore and compared), ``Req``, ``Req.init_next_round_input`` (the prefix
match and its copy-on-write mamba slot), ``PrefillAdder`` (``add_one_req``, ``rem_total_tokens``,
``cur_rem_tokens``, ``budget_state``), ``alloc_for_extend`` (``alloc_req_slots`` with its mamba
eviction, ``alloc_token_slots`` / ``alloc_paged_token_slots_extend`` with their FULL eviction),
``alloc_for_decode``, ``ScheduleBatch.new_tokens_required_next_decode`` / ``check_decode_mem`` /
``retract_decode`` (``release_req``, ``release_kv_cache``,
``NewTokenRatioTracker.estimate_new_token_ratio_after_retract``), ``UnifiedRadixCache.evict``.

Patches and stand-ins (nothing here needs a GPU):

* ``ServerArgs._mamba_cache_chunk_size`` is seeded with ``max(64, page_size)`` (64 = FLA's ``CHUNK_SIZE``;
  Kimi-K3's config has no ``mamba_chunk_size``): the property otherwise loads the model's HF config,
  which ``model_path="dummy"`` does not have (it would go to the network).
* ``attention_backend="torch_native"``: ``write_cache_indices`` then takes its plain-PyTorch branch
  instead of a Triton kernel.
* 0.5.18 only: ``PagedTokenToKVPoolAllocator.alloc_extend`` / ``alloc_decode`` always launch Triton
  kernels ("0 active drivers" on the CPU); the probe swaps in the module's own ``alloc_extend_naive``
  and an equivalent decode loop (the lane's ``real_scheduler.paged_kernels_on_cpu``). 0.5.23 has both
  fallbacks built in and picks them on the CPU.
* The KDA state shape is tiny (2 heads of 8, 3 linear layers + 1 MLA layer): slot counts and token
  counts are what matter here, not bytes.
* Sequences that "finished earlier" are put into the tree with ``UnifiedRadixCache.insert`` (a fresh KV
  row plus one mamba slot at the end), as ``cache_finished_req`` leaves them; no model runs, so no
  mamba state is tracked during a prefill and the running requests insert nothing.
* The running batch's tensors (``req_pool_indices``, ``seq_lens``) are set by hand and
  ``sampling_info`` is a no-op (``retract_decode`` filters it); a decode step is ``alloc_for_decode``
  plus the bookkeeping ``prepare_for_decode`` does, and a sampled token is a constant.
* Requests the probe admits but does not run have their lock and copy-on-write slot handed back.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from array import array
from types import SimpleNamespace

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import sglang  # noqa: E402
import torch  # noqa: E402
from real_scheduler import paged_kernels_on_cpu  # noqa: E402  (this folder: run as a script)
from sglang.srt import server_args as _server_args  # noqa: E402

RELEASE = sglang.__version__
NEW_API = tuple(int(x) for x in RELEASE.split(".")[:3]) >= (0, 5, 23)
if RELEASE not in ("0.5.18", "0.5.23"):
    raise ImportError(f"memory_probe drives SGLang 0.5.18 and 0.5.23; this venv has {RELEASE}")

KV_TOKENS = 2048
REQ_ROWS = 4
MAMBA_SLOTS = 12  # ratio 5 (3 + 2 ping-pong, extra_buffer + overlap) -> room for 2 running requests
DTYPE = torch.bfloat16
_RUN_PATCHES = contextlib.ExitStack()  # held open for the run


# --- configuration -------------------------------------------------------------------------------


def publish(page_size: int, chunk: int = 8192) -> _server_args.ServerArgs:
    """Publish Kimi-K3-like scheduler settings: extra_buffer mamba cache, overlap on, LRU eviction."""
    args = _server_args.ServerArgs(
        model_path="dummy",
        page_size=page_size,
        chunked_prefill_size=chunk,
        mamba_radix_cache_strategy="extra_buffer",
        attention_backend="torch_native",
        max_running_requests=MAMBA_SLOTS // 5,
    )
    args._mamba_cache_chunk_size = max(64, page_size)  # patch: no HF config for "dummy"
    _server_args.set_global_server_args_for_scheduler(args)
    return args


def patch_paged_allocator_for_cpu() -> None:
    """0.5.18: route the paged allocator's Triton kernels to plain PyTorch loops for the whole run (the lane's
    stand-ins, ``real_scheduler.paged_kernels_on_cpu``)."""
    _RUN_PATCHES.enter_context(paged_kernels_on_cpu())


# --- the real pools, allocator and tree ------------------------------------------------------------


class Ledger:
    """Names every KV index and mamba slot so that frees can be reported as 'what got evicted'."""

    def __init__(self):
        self.kv: dict[int, tuple[str, int]] = {}
        self.mamba: dict[int, str] = {}
        self.freed_kv: list[tuple[str, int]] = []
        self.freed_mamba: list[str] = []
        self._depth = 0

    def name_kv(self, label: str, indices: torch.Tensor, start: int = 0) -> None:
        for i, idx in enumerate(indices.reshape(-1).tolist()):
            self.kv[int(idx)] = (label, start + i)

    def name_mamba(self, label: str, slots) -> None:
        for s in torch.as_tensor(slots).reshape(-1).tolist():
            self.mamba[int(s)] = label

    def _record_kv(self, indices) -> None:
        for x in indices.reshape(-1).tolist():
            self.freed_kv.append(self.kv.get(int(x), ("?", int(x))))

    def wrap(self, allocator, mamba_allocator) -> None:
        ledger = self

        def wrap_kv(name):
            orig = getattr(allocator, name)

            def wrapped(*a, **kw):
                first = a[0] if a else next(iter(kw.values()))
                if ledger._depth == 0:
                    if name == "free_segments":
                        for seg, _start in first:
                            ledger._record_kv(seg)
                    else:
                        ledger._record_kv(first)
                ledger._depth += 1
                try:
                    return orig(*a, **kw)
                finally:
                    ledger._depth -= 1

            setattr(allocator, name, wrapped)

        for name in ("free", "free_segment", "free_segments"):
            if hasattr(allocator, name):
                wrap_kv(name)
        orig_mfree = mamba_allocator.free

        def mfree(free_index):
            for x in free_index.reshape(-1).tolist():
                ledger.freed_mamba.append(ledger.mamba.get(int(x), f"slot{int(x)}"))
            return orig_mfree(free_index)

        mamba_allocator.free = mfree

    def take(self) -> str:
        """Describe and reset what was freed since the last call: label[start:end] runs, mamba slots."""
        runs: dict[str, list[int]] = {}
        for label, pos in self.freed_kv:
            runs.setdefault(label, []).append(pos)
        parts = []
        for label, positions in runs.items():
            positions.sort()
            segs, lo, prev = [], positions[0], positions[0]
            for p in positions[1:]:
                if p != prev + 1:
                    segs.append((lo, prev + 1))
                    lo = p
                prev = p
            segs.append((lo, prev + 1))
            parts.append(f"{label}" + "".join(f"[{a}:{b}]" for a, b in segs) + f" ({len(positions)})")
        mparts = sorted(self.freed_mamba)
        self.freed_kv, self.freed_mamba = [], []
        kv = ", ".join(parts) if parts else "none"
        ms = ", ".join(mparts) if mparts else "none"
        return f"KV freed: {kv}; mamba slots freed: {ms}"


def build(page_size: int, tree_core: str | None = None):
    """Construct the real Kimi-K3-shaped pools, allocator and FULL+MAMBA tree (small sizes)."""
    from sglang.srt.configs.mamba_utils import KimiLinearCacheParams, KimiLinearStateShape
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    shape = KimiLinearStateShape.create(tp_world_size=1, num_heads=2, head_dim=8, conv_kernel_size=4)
    linear_layers, full_layers = [0, 1, 2], [3]  # Kimi-K3 interleaves 3 KDA layers per MLA layer
    cache_params = KimiLinearCacheParams(shape=shape, layers=linear_layers)
    req_pool = HybridReqToTokenPool(
        size=REQ_ROWS,
        mamba_size=MAMBA_SLOTS,
        mamba_spec_state_size=REQ_ROWS,
        max_context_len=KV_TOKENS + 64,
        device="cpu",
        enable_memory_saver=False,
        cache_params=cache_params,
        mamba_layer_ids=linear_layers,
        enable_mamba_extra_buffer=True,
        enable_overlap_schedule=True,
    )
    kv_pool = HybridLinearKVPool(
        size=KV_TOKENS,
        dtype=DTYPE,
        page_size=page_size,
        head_num=1,
        head_dim=16,
        full_attention_layer_ids=full_layers,
        device="cpu",
        mamba_pool=req_pool.mamba_pool,
        use_mla=True,
        kv_lora_rank=8,
        qk_rope_head_dim=4,
    )
    if page_size == 1:
        allocator = TokenToKVPoolAllocator(KV_TOKENS, dtype=DTYPE, device="cpu", kvcache=kv_pool, need_sort=False)
    else:
        allocator = PagedTokenToKVPoolAllocator(
            KV_TOKENS, page_size=page_size, dtype=DTYPE, device="cpu", kvcache=kv_pool, need_sort=False
        )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=page_size,
        enable_mamba_extra_buffer=True,
        chunked_prefill_size=8192,
        tree_components=(ComponentType.FULL, ComponentType.MAMBA),
    )
    if tree_core is not None:
        params.tree_core_backend = tree_core
    tree = UnifiedRadixCache(params)
    ledger = Ledger()
    ledger.wrap(allocator, req_pool.mamba_allocator)
    return SimpleNamespace(req_pool=req_pool, kv_pool=kv_pool, allocator=allocator, tree=tree, ledger=ledger)


def sizes(env) -> str:
    return (
        f"available={env.allocator.available_size()} full_evictable={env.tree.full_evictable_size()} "
        f"full_protected={env.tree.full_protected_size()} mamba_free={env.req_pool.mamba_allocator.available_size()} "
        f"mamba_evictable={env.tree.mamba_evictable_size()} mamba_protected={env.tree.mamba_protected_size()}"
    )


# --- tree API: sequences already in the tree ---------------------------------------------------------


def tokens(seed: int, n: int) -> list[int]:
    return [1000 * seed + i for i in range(n)]


def insert(env, label: str, ids: list[int]) -> None:
    """Put ``ids`` into the tree like a finished request that matched nothing: a fresh KV row and one
    mamba state at the end (``prev_prefix_len=0``, so the tree frees the part it already held)."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    value = env.allocator.alloc(len(ids))
    env.ledger.name_kv(label, value)
    slot = env.req_pool.mamba_allocator.alloc(1)
    env.ledger.name_mamba(f"state({label}@{len(ids)})", slot)
    env.tree.insert(
        InsertParams(key=RadixKey(array("q", ids)), value=value.to(torch.int64), mamba_value=slot.reshape(1))
    )
    env.ledger.take()


def match_len(env, ids: list[int]) -> int:
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    result = env.tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", ids))))
    return result.device_prefix_len if NEW_API else len(result.device_indices)


def tree_demo(env, page_size: int) -> None:
    from sglang.srt.mem_cache.allocation import alloc_token_slots
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    from sglang.srt.mem_cache.common import evict_from_tree_cache

    sys_p = tokens(1, 384)
    seqs = {"A": sys_p + tokens(2, 256), "B": sys_p + tokens(3, 256), "S": sys_p, "C": tokens(4, 512)}
    for label in ("A", "B", "S", "C"):
        insert(env, label, seqs[label])
    match_len(env, seqs["A"])  # a later request touches A: A's path and A's state become most recent
    print(
        "   inserted, oldest first: A=sys384+256 (state@640), B=sys384+256 (state@640), S=sys384 (state@384 on the"
        " internal node), C=512 (state@512); then a match touches A"
    )
    print(f"   tree: {sizes(env)}")

    r = env.tree.evict(EvictParams(num_tokens=0, mamba_num=2))
    print(f"   evict(mamba_num=2) -> num_tokens_evicted={r.num_tokens_evicted} mamba_num_evicted={r.mamba_num_evicted}")
    print(f"     {env.ledger.take()}")
    print(f"     matches now (each touches): { {k: match_len(env, v) for k, v in seqs.items()} }   [{sizes(env)}]")

    r = env.tree.evict(EvictParams(num_tokens=300))
    print(
        f"   evict(num_tokens=300) -> num_tokens_evicted={r.num_tokens_evicted} mamba_num_evicted={r.mamba_num_evicted}"
    )
    print(f"     {env.ledger.take()}")
    print(f"     [{sizes(env)}]")

    # Allocation-driven: ask for 100 more tokens than are free.
    want = env.allocator.available_size() + 100
    if page_size == 1:
        out = alloc_token_slots(env.tree, want)
        what = f"alloc_token_slots({want})"
    else:
        evict_from_tree_cache(env.tree, want)
        what = f"evict_from_tree_cache(tree, {want})"
        out = None
    print(f"   {what} -> the shortfall 100 is evicted: {env.ledger.take()}   [{sizes(env)}]")
    if out is None:
        out = env.allocator.alloc(env.allocator.available_size())
    env.allocator.free(out)
    env.ledger.take()

    # Does splitting a node refresh the recency of the state below the split?
    seqs = {"X": tokens(5, 128), "Y": tokens(6, 128)}
    seqs["Z"] = seqs["X"][:64] + tokens(7, 64)
    for label in ("X", "Y", "Z"):
        insert(env, label, seqs[label])
    r = env.tree.evict(EvictParams(num_tokens=0, mamba_num=1))
    print(
        f"   inserted X=128, Y=128, then Z=X[:64]+64 (splits X's node at 64); evict(mamba_num=1) -> {env.ledger.take()}"
    )


# --- requests: prefix match, PrefillAdder, alloc_for_extend, decode check, retraction ---------------


def make_req(rid: str, ids: list[int], max_new: int):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    return Req(rid, "", array("q", ids), SamplingParams(max_new_tokens=max_new))


def prefix_len(req) -> int:
    return req.prefix_len if NEW_API else len(req.prefix_indices)


def extend_end(req) -> int:
    return req.extend_end if NEW_API else req.extend_range.end


def committed(req) -> int:
    return req.kv.kv_committed_len if NEW_API else req.kv_committed_len


def row(req):
    return req.kv.req_pool_idx if NEW_API else req.req_pool_idx


def mamba_idx(req):
    return req.kv.mamba_pool_idx if NEW_API else req.mamba_pool_idx


def new_batch(env, reqs):
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    return ScheduleBatch(
        reqs=list(reqs),
        req_to_token_pool=env.req_pool,
        token_to_kv_pool_allocator=env.allocator,
        tree_cache=env.tree,
        device="cpu",
        model_config=SimpleNamespace(is_encoder_decoder=False, vocab_size=200000),
    )


def alloc_extend(env, reqs) -> None:
    """The memory half of ``prepare_for_extend``: ``alloc_for_extend`` on the admitted windows."""
    from sglang.srt.mem_cache.allocation import alloc_for_extend

    batch = new_batch(env, reqs)
    batch.prefix_lens = [prefix_len(r) for r in reqs]
    batch.extend_lens = [extend_end(r) - prefix_len(r) for r in reqs]
    batch.seq_lens_cpu = torch.tensor([extend_end(r) for r in reqs], dtype=torch.int64)
    batch.seq_lens = batch.seq_lens_cpu.clone()
    batch.extend_num_tokens = sum(batch.extend_lens)
    alloc_for_extend(batch)
    for r in reqs:
        if not NEW_API:
            r.kv_committed_len = extend_end(r)
        row_kv = env.req_pool.req_to_token[row(r), prefix_len(r) : extend_end(r)]
        env.ledger.name_kv(r.rid, row_kv, start=prefix_len(r))
        env.ledger.name_mamba(f"work({r.rid})", mamba_idx(r).reshape(1))
        pp = r.kv.mamba_ping_pong_track_buffer if NEW_API else r.mamba_ping_pong_track_buffer
        env.ledger.name_mamba(f"pingpong({r.rid})", pp[pp >= 0])


def adder_for(env, running, ratio: float, page_size: int):
    from sglang.srt.managers import schedule_policy

    return schedule_policy.PrefillAdder(page_size, env.tree, env.allocator, running, ratio, 16384, 8192, 0)


def admit(env, adder, req) -> str:
    req.init_next_round_input(env.tree)
    res = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
    return res.name


def adder_state(adder) -> str:
    return f"rem_total_tokens={adder.rem_total_tokens:.1f} cur_rem_tokens={adder.cur_rem_tokens:.1f}"


def decode_steps(env, batch, n: int) -> None:
    """``prepare_for_decode``'s memory part, ``n`` times: ``alloc_for_decode`` plus the bookkeeping."""
    from sglang.srt.mem_cache.allocation import alloc_for_decode

    for _ in range(n):
        positions = [committed(r) for r in batch.reqs]
        out = alloc_for_decode(batch, token_per_req=1)
        for r, idx, pos in zip(batch.reqs, out.tolist(), positions):
            env.ledger.kv[int(idx)] = (r.rid, pos)
            if not NEW_API:
                r.kv_committed_len += 1
            r.output_ids.append(7)
        batch.seq_lens = batch.seq_lens + 1
        batch.seq_lens_cpu = batch.seq_lens_cpu + 1
        batch.orig_seq_lens = batch.orig_seq_lens + 1


def decode_batch(env, reqs):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    batch = new_batch(env, reqs)
    batch.spec_algorithm = SpeculativeAlgorithm.NONE
    batch.req_pool_indices = torch.tensor([row(r) for r in reqs], dtype=torch.int64)
    batch.req_pool_indices_cpu = batch.req_pool_indices.clone()
    batch.seq_lens = torch.tensor([committed(r) for r in reqs], dtype=torch.int64)
    batch.seq_lens_cpu = batch.seq_lens.clone()
    batch.orig_seq_lens = batch.seq_lens.clone().to(torch.int32)
    batch.sampling_info = SimpleNamespace(filter_batch=lambda *a, **k: None)  # stand-in: no sampling here
    return batch


def release_admission(env, req, locked: bool) -> None:
    """Undo a match or admission the probe does not run: the tree lock (if admitted) and the mamba
    slot the copy-on-write match took (the scheduler frees that one when add_one_req refuses)."""
    if locked:
        if NEW_API:
            env.tree.unlock(req.lock)
            req.lock = None
        else:
            env.tree._dec_req_lock(req)
    idx = mamba_idx(req)
    if idx is not None:
        env.req_pool.mamba_allocator.free(idx.reshape(1))
        if NEW_API:
            req.kv.mamba_pool_idx = None
        else:
            req.mamba_pool_idx = None


def request_demo(env, page_size: int, args) -> None:
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker

    tracker = NewTokenRatioTracker.from_config()
    ratio = tracker.current
    print(
        f"   new_token_ratio: init={tracker.init:.4f} min={tracker.min:.4f} decay per decode step={tracker.decay:.6f}"
    )
    seqs = {f"F{i}": tokens(10 + i, 64) for i in range(1, 6)}
    seqs["D"] = tokens(20, 512)
    seqs["E"] = tokens(21, 256)
    for label, ids in seqs.items():
        insert(env, label, ids)
    print(f"   tree holds F1..F5 (64 each), D (512), E (256), one state each at the end: {sizes(env)}")

    r1 = make_req("r1", seqs["D"] + tokens(30, 76), max_new=300)  # re-sends D
    r2 = make_req("r2", tokens(31, 476), max_new=600)
    adder = adder_for(env, new_batch(env, []), ratio, page_size)
    print(f"   pass 1, nothing running: {adder_state(adder)}")
    for r in (r1, r2):
        res = admit(env, adder, r)
        held = "yes" if mamba_idx(r) is not None else "no"
        print(
            f"   add {r.rid} (prompt {len(r.origin_input_ids)}, max_new {r.sampling_params.max_new_tokens}, prefix hit"
            f" {prefix_len(r)}, copy-on-write mamba slot taken at match: {held}) -> {res}; {adder_state(adder)}"
        )
    print(f"   [{sizes(env)}]")
    alloc_extend(env, adder.can_run_list)
    print(f"   alloc_for_extend(r1, r2): {env.ledger.take()}")
    print(f"   [{sizes(env)}]")

    batch = decode_batch(env, [r1, r2])
    decode_steps(env, batch, 20)
    print(f"   20 decode steps (alloc_for_decode): committed r1={committed(r1)} r2={committed(r2)}   [{sizes(env)}]")
    env.ledger.take()

    adder = adder_for(env, batch, ratio, page_size)
    reserve = sum(min(r.sampling_params.max_new_tokens - len(r.output_ids), 4096) * ratio for r in (r1, r2))
    print(
        f"   pass 2, r1 r2 running: {adder_state(adder)} = available {env.allocator.available_size()}"
        f" + full_evictable {env.tree.full_evictable_size()} - reserve {reserve:.1f} ((280+580)*{ratio})"
    )
    r3 = make_req("r3", seqs["E"] + tokens(32, 64), max_new=128)
    free_before = env.req_pool.mamba_allocator.available_size()
    r3.init_next_round_input(env.tree)
    print(
        f"   r3 matched: prefix hit {prefix_len(r3)} on E's state, so the match takes a copy-on-write mamba slot"
        f" ({free_before} free before): {env.ledger.take()}"
    )
    before = adder.rem_total_tokens
    if NEW_API:
        lock = env.tree.lock(r3.last_node)
        under = adder.rem_total_tokens
        env.tree.unlock(lock)
    else:
        lock = env.tree.inc_lock_ref(r3.last_node)
        under = adder.rem_total_tokens
        env.tree.dec_lock_ref(r3.last_node, lock.to_dec_params())
    res3 = adder.add_one_req(r3, has_chunked_req=False, truncation_align_size=None)
    need3 = len(r3.origin_input_ids) - prefix_len(r3) + 128 + page_size
    print(
        f"   add r3 (prompt 320 = E + 64, prefix hit {prefix_len(r3)}): total_tokens {need3} vs rem_total {before:.1f}"
        f" ({under:.1f} while its prefix is locked) -> {res3.name}; {adder_state(adder)}"
    )
    r4 = make_req("r4", tokens(33, 900), max_new=400)
    res4 = admit(env, adder, r4)
    need4 = 900 - prefix_len(r4) + 400 + page_size
    print(
        f"   add r4 (prompt 900, no hit): total_tokens {need4} >= rem_total {adder.rem_total_tokens:.1f} -> {res4}"
        f" (budget_state {adder.budget_state().name}; the walk stops, batch_is_full is set)"
    )
    for r in (r3, r4):  # neither runs here: drop what admission or the match took
        release_admission(env, r, locked=r in adder.can_run_list)
    env.ledger.take()

    # Decode pressure: keep the pool full; each decode check evicts the LRU unlocked leaf until none is left.
    fillers = []
    need = batch.new_tokens_required_next_decode()
    print(
        f"   next decode step needs {need} token(s) (page {page_size}, committed r1={committed(r1)} r2={committed(r2)})"
    )
    for _ in range(12):
        filler = env.allocator.alloc(env.allocator.available_size() // page_size * page_size)
        if filler is not None and filler.numel():
            env.ledger.name_kv("filler", filler)
            fillers.append(filler)
        fits = batch.check_decode_mem()
        print(f"   pool filled, check_decode_mem() -> {fits}: {env.ledger.take()}")
        if not fits:
            break
    print(f"   [{sizes(env)}]")
    if not fits:
        print(f"   retraction order (kept first, retracted from the end): {schedule_batch_order(batch, args)}")
        if NEW_API:
            retracted, new_ratio, aborted = batch.retract_decode()
        else:
            retracted, new_ratio, aborted = batch.retract_decode(args)
        print(
            f"   retract_decode -> retracted {[r.rid for r in retracted]}, kept {[r.rid for r in batch.reqs]},"
            f" aborted {[r.rid for r in aborted]}; new_token_ratio {ratio:.4f} -> {new_ratio:.4f}"
            f" = min(1, ({sum(len(r.output_ids) for r in batch.reqs)} + 20*{len(batch.reqs)})"
            f" / ({sum(r.sampling_params.max_new_tokens for r in batch.reqs)} + 1))"
        )
        print(f"     {env.ledger.take()}   [{sizes(env)}]")
        for r in retracted:
            print(
                f"   {r.rid} as requeued: output_ids kept ({len(r.output_ids)}), prefix_len={prefix_len(r)},"
                f" is_retracted={r.is_retracted}, retraction_count={r.retraction_count}"
            )
            r.init_next_round_input(env.tree)
            print(
                f"   {r.rid} matched again: fill ids {len(r.origin_input_ids)}+{len(r.output_ids)}, prefix hit"
                f" {prefix_len(r)} (its own KV was freed, not inserted)"
            )
            release_admission(env, r, locked=False)  # the probe does not run the re-prefill
    for filler in fillers:
        env.allocator.free(filler)
    env.ledger.take()


def schedule_batch_order(batch, args) -> list[str]:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    if NEW_API:
        idx = ScheduleBatch._get_decode_retraction_order(batch.reqs)
    else:
        idx = ScheduleBatch._get_decode_retraction_order(batch.reqs, args)
    return [batch.reqs[i].rid for i in idx]


# --- main -------------------------------------------------------------------------------------------


def run(page_size: int, tree_core: str | None = None) -> None:
    args = publish(page_size)
    env = build(page_size, tree_core)
    core = type(env.tree.tree_core).__name__
    print(
        f"## page_size={page_size}  [{core}; KV pool {KV_TOKENS} tokens, {REQ_ROWS} request rows,"
        f" {MAMBA_SLOTS} mamba slots, extra_buffer, overlap]"
    )
    print("   -- the tree on its own --")
    tree_demo(env, page_size)
    print("   -- requests --")
    env = build(page_size, tree_core)
    request_demo(env, page_size, args)


def main() -> int:
    patch_paged_allocator_for_cpu()
    print(f"# SGLang {RELEASE}: memory pressure on the CPU (Kimi-K3-shaped FULL+MAMBA tree)")
    for page_size in (1, 16):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run(page_size)
        print(out.getvalue(), end="")
        if NEW_API:  # the default TreeCore is the bundled Rust one; replay on the Python TreeCore
            again = io.StringIO()
            with contextlib.redirect_stdout(again):
                run(page_size, tree_core="python")
            same = again.getvalue().split("\n", 1)[1] == out.getvalue().split("\n", 1)[1]
            print(f"   (page_size={page_size} on the Python TreeCore: {'identical output' if same else 'DIFFERS:'})")
            if not same:
                print(again.getvalue(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
