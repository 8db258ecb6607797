"""Run a lane :class:`~.workload.Workload` through SGLang's OWN prefill scheduling on the CPU and return its passes.

Run it inside an SGLang venv (0.5.18 or 0.5.23) from the repository root (the workload records live
in the package), e.g.::

    $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python -m tests.parity.scheduler.real_scheduler workload.json

or call :func:`run_workload`. What runs for real: ``ServerArgs`` published as the
scheduler's (so ``get_schedule()`` & co. answer), the release's ``pad_input_ids`` on
``MultimodalDataItem`` s hashed with ``set_hash``, ``Req`` objects, ``SchedulePolicy.calc_priority``,
``PrefillAdder`` (``add_chunked_req``, ``add_one_req``, its budgets, ``budget_state``),
``Req.init_next_round_input`` (the prefix match), ``RadixCache`` / ``ChunkCache`` (with the lane's
``tree_cache="default"`` on 0.5.23: ``UnifiedRadixCache`` with the FULL component only),
``NewTokenRatioTracker``, ``ReqToTokenPool``, and the cache updates the scheduler makes after a pass:
the chunked request's stash at the top of the next iteration (0.5.18 ``maybe_cache_unfinished_req(...,
chunked=True)``, 0.5.23 ``checkpoint_kv_cache``), every other unfinished request's insert after its
last prefill (the same functions, unchunked) and ``release_kv_cache`` at its finish.

Stand-ins, written after ``Scheduler.get_next_batch_to_run`` / ``_get_new_batch_prefill_raw`` /
``process_batch_result_prefill`` / ``_decode``: the scheduler loop itself (non-overlap; one forward
per step: a prefill pass when the adder admits anyone, else a decode step of the running batch), the
KV allocator (:class:`LargeKVAllocator`: never runs short, hands out fresh indices, counts frees),
KV allocation (``alloc_for_extend`` / ``alloc_for_decode`` reduced to writing the request's
``req_to_token`` row and its ``kv_*_len`` fields), sampling (each request emits its workload
``outputs()``) and the finish test (length only). Not modelled: ``--max-running-requests`` /
``batch_is_full``, retraction, priority scheduling and preemption, LoRA, grammar, hierarchical cache,
PP dynamic chunking, overlap scheduling's one-step-late result processing, and the MAMBA component
that Kimi-K3's own tree carries (``docs/scheduler-notes.md`` §9).
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from array import array
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

from kimi_viz.scheduler.event_loop import Pass
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Req, Window

from .workload import Workload, image_offsets, passes_to_json, token_ids

warnings.filterwarnings("ignore")
logging.getLogger("sglang").setLevel(logging.ERROR)

import sglang  # noqa: E402
import torch  # noqa: E402
from sglang.srt import server_args as _server_args  # noqa: E402
from sglang.srt.managers import mm_utils, schedule_batch, schedule_policy  # noqa: E402
from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker  # noqa: E402
from sglang.srt.mem_cache import common as mem_common  # noqa: E402
from sglang.srt.mem_cache import radix_cache  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

RELEASE = sglang.__version__
_VERSION = tuple(int(x) for x in RELEASE.split(".")[:3])
SUPPORTED = ("0.5.18", "0.5.23")
if RELEASE not in SUPPORTED:
    raise ImportError(f"real_scheduler drives SGLang {' and '.join(SUPPORTED)}; this venv has {RELEASE}")
NEW_API = _VERSION >= (0, 5, 23)  # prefix_len / extend_end / req.kv.*, checkpoint() instead of cache_*_req

KV_POOL_TOKENS = 1 << 40
REQ_SLOTS = 512


class LargeKVAllocator:
    """The token-to-KV allocator, as far as the adder and the tree caches touch it: never short of room.

    ``available_size`` is huge, so no memory budget ever binds; ``alloc`` hands out fresh indices
    (from 1, like the real pools' reserved slot 0); frees are only counted.
    """

    def __init__(self, page_size: int):
        self.page_size = page_size
        self.size = KV_POOL_TOKENS
        self.device = "cpu"
        self.dtype = torch.int64
        self.next_index = 1
        self.freed = 0

    def available_size(self) -> int:
        return KV_POOL_TOKENS

    full_available_size = available_size

    def alloc(self, need: int) -> torch.Tensor:
        out = torch.arange(self.next_index, self.next_index + need, dtype=torch.int64)
        self.next_index += need
        return out

    def free(self, indices) -> None:
        self.freed += int(len(indices))

    def free_segment(self, indices, start_pos: int = 0) -> None:
        self.free(indices)

    def free_segments(self, segments) -> None:
        for indices, _start in segments:
            self.free(indices)

    free_full_segments = free_segments

    def free_group_begin(self) -> None:
        pass

    def free_group_end(self) -> None:
        pass

    # 0.5.23's scheduler-facing hooks (BaseTokenToKVPoolAllocator's defaults).
    def create_prefill_budget(self, tree_cache, *, num_mixed_decode_tokens: int = 0):
        from sglang.srt.mem_cache.prefill_budget import PrefillBudget

        return PrefillBudget(self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def request_slot_reserve(self, *, has_req_pool_slot: bool, prefill_tokens: int = 0) -> int:
        return 0

    def get_kvcache(self):
        return None


# --- what differs between the two releases' Req / cache APIs ---------------------------------


def prefix_len(req) -> int:
    return req.prefix_len if NEW_API else len(req.prefix_indices)


def extend_end(req) -> int:
    return req.extend_end if NEW_API else req.extend_range.end


def pool_index(req):
    return req.kv.req_pool_idx if NEW_API else req.req_pool_idx


def _set_committed(req, length: int) -> None:
    if NEW_API:
        req.kv.kv_committed_len = length
        req.kv.kv_allocated_len = length
        return
    req.kv_committed_len = length
    if req.kv is None:
        req.kv = schedule_batch.ReqKvInfo(kv_allocated_len=length, swa_evicted_seqlen=0)
    else:
        req.kv.kv_allocated_len = length


def _committed(req) -> int:
    return req.kv.kv_committed_len if NEW_API else req.kv_committed_len


def stash_chunked(req, tree_cache) -> None:
    """``Scheduler.stash_chunked_request`` (the chunk just computed goes into the tree)."""
    if NEW_API:
        mem_common.checkpoint_kv_cache(req, tree_cache)
    else:
        mem_common.maybe_cache_unfinished_req(req, tree_cache, chunked=True)


def cache_after_prefill(req, tree_cache) -> None:
    """``process_batch_result_prefill`` for an unfinished request that is not a mixed decode row."""
    if NEW_API:
        mem_common.checkpoint_kv_cache(req, tree_cache)
    else:
        mem_common.maybe_cache_unfinished_req(req, tree_cache)


def release(req, tree_cache) -> None:
    """``release_kv_cache`` at a request's finish (its KV goes into the tree, the row is freed)."""
    if NEW_API:
        mem_common.release_kv_cache(req, tree_cache, checkpoint=True)
    else:
        mem_common.release_kv_cache(req, tree_cache)


# --- set-up ------------------------------------------------------------------------------------


def publish_settings(settings: LoadSettings) -> None:
    """Publish ``ServerArgs`` with the workload's flags as the scheduler's (what ``get_schedule()`` reads)."""
    chunk = settings.chunked_prefill_size
    args = _server_args.ServerArgs(
        model_path="dummy",  # "dummy" skips the resolution pipeline (no model config, no GPU)
        page_size=settings.page_size,
        chunked_prefill_size=chunk if chunk is not None else -1,
        max_prefill_tokens=settings.max_prefill_tokens,
        schedule_policy=settings.schedule_policy,
        enable_mixed_chunk=settings.enable_mixed_chunk,
        disable_radix_cache=settings.disable_radix_cache,
    )
    _server_args.set_global_server_args_for_scheduler(args)


def build_tree_cache(workload: Workload, pool: ReqToTokenPool, allocator: LargeKVAllocator):
    """Build the tree cache ``mem_cache/registry.py`` ``default_radix_cache_factory`` would (see ``Workload``)."""
    settings = workload.settings
    chunked = settings.chunked_prefill_size is not None and settings.chunked_prefill_size > 0
    params = CacheInitParams(
        disable=settings.disable_radix_cache,
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        page_size=settings.page_size,
        chunked_prefill_size=settings.chunked_prefill_size if chunked else None,
    )
    if workload.tree_cache == "default" and NEW_API:
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        params.tree_components = (ComponentType.FULL,)
        return UnifiedRadixCache(params)
    if workload.tree_cache not in ("radix", "default"):
        raise ValueError(f"tree_cache must be 'radix' or 'default', got {workload.tree_cache!r}")
    if settings.disable_radix_cache and chunked and not NEW_API:
        from sglang.srt.mem_cache.chunk_cache import ChunkCache

        return ChunkCache(params)
    return radix_cache.RadixCache(params)


def padded_ids(request: Req) -> array:
    """Return the prompt as SGLang's ``pad_input_ids`` leaves it (each image run -> its item's pad values)."""
    ids = token_ids(request)
    items = []
    for image_hash, start, end in image_offsets(request):
        item = schedule_batch.MultimodalDataItem(modality=schedule_batch.Modality.IMAGE, offsets=[(start, end)])
        item.set_hash(image_hash)
        items.append(item)
    if not items:
        return array("q", ids)
    mm_inputs = schedule_batch.MultimodalInputs(mm_items=items, im_token_id=ids[image_offsets(request)[0][1]])
    pattern = mm_utils.MultiModalityDataPaddingPatternMultimodalTokens()
    out = pattern.pad_input_tokens(array("q", ids) if NEW_API else ids, mm_inputs)
    return array("q", list(out))


def make_req(request: Req):
    """Return a real ``Req`` for ``request`` (padded prompt, ``max_new_tokens``, length finish only)."""
    params = SamplingParams(max_new_tokens=request.max_new_tokens)
    req = schedule_batch.Req(request.rid, "", padded_ids(request), params)
    req.kimi_viz_outputs = request.outputs()
    return req


# --- the loop ----------------------------------------------------------------------------------


class Simulation:
    """One workload through the real adder, policy and tree cache, step by step."""

    def __init__(self, workload: Workload):
        self.workload = workload
        s = workload.settings
        if workload.exact_chunk_fill and _VERSION < (0, 5, 20):
            raise ValueError(f"exact chunk fill does not exist in SGLang {RELEASE}")
        publish_settings(s)
        longest = max(r.length + r.max_new_tokens for r in workload.requests) + 2 * s.page_size + 8
        slots = max(REQ_SLOTS, len(workload.requests) + 1)  # never the binding limit (see the module docstring)
        self.pool = ReqToTokenPool(size=slots, max_context_len=longest, device="cpu", enable_memory_saver=False)
        self.allocator = LargeKVAllocator(s.page_size)
        self.tree_cache = build_tree_cache(workload, self.pool, self.allocator)
        self.policy = schedule_policy.SchedulePolicy(s.schedule_policy, self.tree_cache, False, False, False)
        chunk = s.chunked_prefill_size
        self.chunked_prefill_size = chunk if chunk is not None and chunk > 0 else None
        self.is_mixed_chunk = self.chunked_prefill_size is not None and s.enable_mixed_chunk
        self.new_token_ratio = NewTokenRatioTracker.from_config()
        self.waiting: list = []
        self.running: list = []
        self.chunked_req = None
        self.finished: set[str] = set()
        self.finish_step: dict[str, int] = {}  # rid -> the step at whose end it finished (decode steps too)
        self.pending = list(workload.requests)
        self.processed_tokens = 0
        self.passes: list[Pass] = []

    # arrivals
    def _arrive(self, step: int) -> None:
        still = []
        for r in self.pending:
            ready = r.arrival <= step and (r.after is None or self.finish_step.get(r.after, step) < step)
            if ready:
                self.waiting.append(make_req(r))
            else:
                still.append(r)
        self.pending = still

    # the adder, as _get_new_batch_prefill_raw drives it
    def _new_prefill(self, running_batch) -> tuple[list, object]:
        if not self.waiting and self.chunked_req is None:
            return [], None
        if NEW_API:
            self.policy.calc_priority(self.waiting, running_batch, processed_tokens=self.processed_tokens)
        else:
            self.policy.calc_priority(self.waiting, running_batch)
        s = self.workload.settings
        adder = schedule_policy.PrefillAdder(
            s.page_size,
            self.tree_cache,
            self.allocator,
            running_batch,
            self.new_token_ratio.current,
            s.max_prefill_tokens,
            self.chunked_prefill_size,
            len(running_batch.reqs) if self.is_mixed_chunk else 0,
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            if NEW_API:
                adder.chunked_req_limit = self.policy.shortest_prefill_chunk_limit(
                    self.chunked_req, self.waiting, adder.rem_chunk_tokens or 0, s.page_size
                )
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:
            if NEW_API and adder.budget_state() == schedule_policy.AddReqResult.OTHER:
                break
            req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None)
            if res != schedule_policy.AddReqResult.CONTINUE:
                break
        can_run = list(adder.can_run_list)
        if not can_run:
            return [], adder
        admitted = set(map(id, can_run))
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        return can_run, adder

    def _alloc_extend(self, reqs: list) -> None:
        """``alloc_for_extend``: the request's row gets its prefix and fresh indices for the window."""
        prefixes = []
        for req in reqs:  # read before the row is allocated, as alloc_for_extend does
            n = prefix_len(req)
            if NEW_API:
                if req.kv.holds_kv:
                    prefixes.append(self.pool.req_to_token[req.kv.req_pool_idx, :n].to(torch.int64))
                else:
                    prefixes.append(self.tree_cache.prefix_device_indices(req) if n else torch.empty(0))
            else:
                prefixes.append(req.prefix_indices)
        self.pool.alloc(reqs)
        for req, prefix in zip(reqs, prefixes):
            row, n, end = pool_index(req), prefix_len(req), extend_end(req)
            if n:
                self.pool.write((row, slice(0, n)), prefix.to(torch.int32))
            self.pool.write((row, slice(n, end)), self.allocator.alloc(end - n).to(torch.int32))
            _set_committed(req, end)

    def _decode_one(self, req) -> None:
        """``prepare_for_decode`` + one sampled token for ``req``."""
        pos = _committed(req)
        self.pool.write((pool_index(req), slice(pos, pos + 1)), self.allocator.alloc(1).to(torch.int32))
        _set_committed(req, pos + 1)
        if not NEW_API:
            req.decode_batch_idx += 1
        self._emit(req)

    def _emit(self, req) -> None:
        req.output_ids.append(req.kimi_viz_outputs[len(req.output_ids)])
        if len(req.output_ids) >= req.sampling_params.max_new_tokens:
            req.finished_reason = schedule_batch.FINISH_LENGTH(length=req.sampling_params.max_new_tokens)

    def _finish(self, req, step: int, finished: list[str]) -> None:
        release(req, self.tree_cache)
        self.finished.add(req.rid)
        self.finish_step[req.rid] = step
        finished.append(req.rid)

    def _prefill_pass(self, step: int, can_run: list) -> None:
        windows = tuple(Window(r.rid, prefix_len(r), extend_end(r) - prefix_len(r)) for r in can_run)
        self._alloc_extend(can_run)
        self.processed_tokens += sum(w.extend_input_len for w in windows)
        decoding = list(self.running) if self.is_mixed_chunk else []
        finished: list[str] = []
        for req in decoding:
            self._decode_one(req)
        for req in can_run:
            if req.inflight_middle_chunks > 0:  # a middle chunk: no token, stashed at the next step
                req.inflight_middle_chunks -= 1
                continue
            self._emit(req)
            if req.finished():
                self._finish(req, step, finished)
            else:
                cache_after_prefill(req, self.tree_cache)
        for req in decoding:
            if req.finished():
                self._finish(req, step, finished)
        self.running = [r for r in self.running if not r.finished()]
        self.running += [r for r in can_run if not r.finished() and r is not self.chunked_req]
        self.passes.append(
            Pass(
                step=step,
                windows=windows,
                chunked=None if self.chunked_req is None else self.chunked_req.rid,
                decoding=tuple(r.rid for r in decoding),
                finished=tuple(finished),
                release=RELEASE,
            )
        )

    def _decode_step(self, step: int) -> None:
        finished: list[str] = []
        for req in self.running:
            self._decode_one(req)
            if req.finished():
                self._finish(req, step, finished)
        self.running = [r for r in self.running if not r.finished()]
        self.new_token_ratio.decay_step()

    def step(self, step: int) -> bool:
        """Run one scheduler iteration; return whether anything ran."""
        self._arrive(step)
        if self.chunked_req is not None and extend_end(self.chunked_req) > prefix_len(self.chunked_req):
            stash_chunked(self.chunked_req, self.tree_cache)
        running_batch = schedule_batch.ScheduleBatch(reqs=list(self.running), batch_is_full=False)
        can_run, _adder = self._new_prefill(running_batch)
        if can_run:
            self._prefill_pass(step, can_run)
            return True
        if self.running:
            self._decode_step(step)
            return True
        self.new_token_ratio.reset()  # an idle iteration (self_check_during_idle)
        return False

    def run(self) -> list[Pass]:
        for step in range(self.workload.max_steps):
            self.step(step)
            if not self.pending and not self.waiting and not self.running and self.chunked_req is None:
                return self.passes
        raise RuntimeError(f"the workload did not finish in {self.workload.max_steps} steps")


def run_workload(workload: Workload) -> list[Pass]:
    """Return the prefill passes SGLang's own scheduling forms for ``workload`` (this venv's release)."""
    with ExitStack() as stack:
        if workload.exact_chunk_fill:
            stack.enter_context(mock.patch.object(schedule_policy, "_use_exact_chunk_fill", return_value=True))
        return Simulation(workload).run()


def main(argv: list[str] | None = None) -> int:
    """``real_scheduler.py [WORKLOAD.json|-]``: print the passes as JSON."""
    argv = sys.argv[1:] if argv is None else argv
    source = argv[0] if argv else "-"
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    passes = run_workload(Workload.from_json(json.loads(text)))
    json.dump({"release": RELEASE, "passes": passes_to_json(passes)}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
