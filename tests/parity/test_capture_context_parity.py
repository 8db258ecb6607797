"""The capture's forward context against the real forward pass: SGLang's own ``KimiK3ForConditionalGeneration.forward``.

A prefill batch of four requests runs through the real ``forward`` → ``general_mm_embed_routine`` →
``embed_mm_inputs`` → ``get_embedding_and_mask`` → ``_batch_encode_per_image_misses`` →
``get_image_feature`` (real ``MultimodalDataItem`` s, ``MultimodalInputs``, ``ForwardMode``, pad values
and embedding cache), on every rank of attention-TP 2, under :func:`kimi_viz.capture.patch`:

- request a (rid ``req-a``, batch position 0): a 102×102 image, 16 placeholder tokens at [3, 18];
- a text-only request (position 1);
- request b (``req-b``, position 2): a 20×5 image, 1 token at [3, 3], its first 2 tokens already cached;
- request c (``req-c``, position 3), mid chunked prefill (21 of 40 tokens): an image already in the
  embedding cache, the same image as request a's (one hash), and an image after its window.

SGLang makes one ``get_image_feature`` call with request a's and request b's images. On 0.5.18 rank 1
raises S1's ``ValueError`` (the pre-fix path reads image 0's grid for image 1) and its manifest must
say "this call held 2 images from 2 requests" with the exact offsets, prefix and extend lengths,
rids, batch positions and the other images' statuses; on 0.5.23 the call passes and ``--all``
records the same context on both ranks. What is stubbed is what a running server would provide:
the attention-TP group, the DP runner's share (SGLang's own ``get_dp_encoder_lb_assignment``), the
published server context (server args, disaggregation, the schedule's chunked-prefill size) and
the language model after the embeddings.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from kimi_viz import capture
from kimi_viz._triage import triage
from kimi_viz.manifest import read_manifest
from kimi_viz.preprocess.config import get_config
from kimi_viz.request import deferred_item
from kimi_viz.split.batch import Batch, RecordedOutcome
from kimi_viz.split.cause import ErrorInfo
from kimi_viz.split.forward_context import ContextImage, ContextItem, ContextRequest, ForwardContext

from .lane import module, real_items, real_model, record, release_patches

TP = 2
CHUNKED_PREFILL = 8192
ERROR = "Kimi-K3 deferred feature length does not match image grids"
EXPECTED = ForwardContext(
    requests=(
        ContextRequest(0, 22, (ContextImage(((3, 18),), "in-call", 0),), rid="req-a", batch_index=0),
        ContextRequest(2, 5, (ContextImage(((3, 3),), "in-call", 1),), rid="req-b", batch_index=2),
        ContextRequest(
            0,
            21,
            (
                ContextImage(((1, 1),), "cache-hit"),
                ContextImage(((4, 19),), "same-image", 0),
                ContextImage(((30, 30),), "outside-window"),
            ),
            rid="req-c",
            batch_index=3,
        ),
    ),
    items=(ContextItem(0, 0), ContextItem(1, 0)),
    chunked_prefill_size=CHUNKED_PREFILL,
    source="sglang.srt.managers.mm_schedule.get_embedding_and_mask; chunked_prefill_size from "
    "mm_schedule.get_schedule(); rids from forward_batch.rids",
)


class LanguageModel:
    """What general_mm_embed_routine needs of the language model: its token embedding, then a pass-through."""

    def __init__(self):
        import torch

        self.embed = torch.nn.Embedding(64, 2)

    def get_input_embeddings(self):
        return self.embed

    def __call__(self, input_ids=None, forward_batch=None, input_embeds=None, **kwargs):
        return input_embeds


def _pad(item, count: int) -> list[int]:
    return item.padding_sequence(count) if hasattr(item, "padding_sequence") else [item.pad_value] * count


def _prompt(length: int, images: list[tuple[object, int, int]]) -> list[int]:
    """Return a prompt of text ids 1..9 with each image's pad values over its inclusive run."""
    ids = [1 + position % 9 for position in range(length)]
    for item, start, end in images:
        ids[start : end + 1] = _pad(item, end - start + 1)
    return ids


def _forward_batch():
    """Return (input_ids, forward batch) of the four requests; every image item is a real MultimodalDataItem."""
    import torch

    schedule = module("sglang.srt.managers.schedule_batch")
    mm_schedule = module("sglang.srt.managers.mm_schedule")
    cache = module("sglang.srt.mem_cache.multimodal_cache")
    kit = Batch(
        items=[
            deferred_item("microaneurysms.png", "cpu"),  # grid [1, 8, 8]: 16 tokens
            deferred_item("astronaut_tiny_20x5.png", "cpu"),  # grid [1, 2, 2]: 1 token
            deferred_item("astronaut_tiny_20x5.png", "cpu"),
            deferred_item("microaneurysms.png", "cpu"),
            deferred_item("astronaut_tiny_20x5.png", "cpu"),
        ],
        processor=get_config("kimi-k3").to_media_proc_cfg(),
        attn_tp_size=TP,
    )
    a, b, c_hit, c_same, c_later = items = real_items(kit)
    for item, runs, digest in zip(items, [(3, 18), (3, 3), (1, 1), (4, 19), (30, 30)], [1001, 2002, 3003, 1001, 4004]):
        item.offsets = [runs]
        item.set_hash(digest)
    mm_schedule.init_mm_embedding_cache(100 * 1024 * 1024)
    mm_schedule.embedding_cache.set(3003, cache.EmbeddingResult(embedding=torch.zeros(1, 2)))
    prompts = [
        _prompt(22, [(a, 3, 18)]),
        [7, 7, 7],
        _prompt(7, [(b, 3, 3)]),
        _prompt(40, [(c_hit, 1, 1), (c_same, 4, 19), (c_later, 30, 30)]),
    ]
    prefix, extend = [0, 0, 2, 0], [22, 3, 5, 21]
    ids = [token for p, n, prompt in zip(prefix, extend, prompts) for token in prompt[p : p + n]]
    mm_inputs = [
        schedule.MultimodalInputs(mm_items=[a]),
        None,
        schedule.MultimodalInputs(mm_items=[b]),
        schedule.MultimodalInputs(mm_items=[c_hit, c_same, c_later]),
    ]
    batch = SimpleNamespace(
        forward_mode=module("sglang.srt.model_executor.forward_batch_info").ForwardMode.EXTEND,
        mm_inputs=mm_inputs,
        extend_prefix_lens_cpu=prefix,
        extend_seq_lens_cpu=extend,
        rids=["req-a", "req-text", "req-b", "req-c"],
        contains_mm_inputs=lambda: True,
        spec_algorithm=None,
        input_embeds=None,
    )
    return kit, torch.tensor(ids, dtype=torch.int64), batch


def _run_rank(rank: int, out, *, all_calls: bool):
    """Run the real forward on ``rank`` under capture; return (session, exception or None, output)."""
    import torch

    kit, input_ids, batch = _forward_batch()
    model = real_model(kit)
    model.language_model = LanguageModel()
    dp = module("sglang.srt.multimodal.mm_utils")
    mm_utils = module("sglang.srt.managers.mm_utils")
    mm_schedule = module("sglang.srt.managers.mm_schedule")

    def dp_runner(vision_model, pixel_values, grid_thw_list, *, load_local_pixel_values, **_):
        order, counts, _ = dp.get_dp_encoder_lb_assignment([math.prod(g) for g in grid_thw_list], TP)
        start = sum(counts[:rank])
        mine = list(order[start : start + counts[rank]])
        if mine:
            load_local_pixel_values(mine)
        return torch.zeros(sum(math.prod(g) for g in grid_thw_list) // 4, 2)  # after the all-gather and merge

    with ExitStack() as stack:
        release_patches(stack, TP)
        parallel = SimpleNamespace(attn_tp_size=TP, attn_tp_rank=rank, tp_size=TP)
        stack.enter_context(
            mock.patch.object(module("sglang.srt.runtime_context"), "get_parallel", return_value=parallel)
        )
        stack.enter_context(mock.patch.object(dp, "run_dp_sharded_mrope_vision_model", dp_runner))
        stack.enter_context(mock.patch.object(mm_utils, "get_server_args", return_value=None))
        disagg = SimpleNamespace(language_only=False, enable_adaptive_dispatch_to_encoder=False)
        stack.enter_context(mock.patch.object(mm_utils, "get_disagg", return_value=disagg))
        schedule = SimpleNamespace(chunked_prefill_size=CHUNKED_PREFILL)
        stack.enter_context(mock.patch.object(mm_schedule, "get_schedule", return_value=schedule))
        session = stack.enter_context(capture.patch(out, all_calls=all_calls))
        try:
            output = model.forward(input_ids, torch.arange(len(input_ids)), batch)
        except Exception as exc:  # noqa: BLE001 - SGLang's own exception, compared verbatim
            return session, exc, None
    return session, None, output


def test_the_context_of_a_call_made_by_the_real_forward_pass(release, tmp_path):
    problems = []
    failing = 0
    for rank in range(TP):
        session, error, output = _run_rank(rank, tmp_path / f"rank{rank}", all_calls=release != "0.5.18")
        if release == "0.5.18" and rank == 1:  # S1: the pre-fix path reads image 0's grid for image 1
            assert error is not None and (type(error).__name__, str(error)) == ("ValueError", ERROR)
        else:
            assert error is None, f"rank {rank}: {type(error).__name__}: {error}"
            assert tuple(output.shape) == (22 + 3 + 5 + 21, 2)
        if release == "0.5.18" and rank == 0:
            assert session.manifests == []  # a passing call is not recorded without --all
            continue
        [folder] = session.manifests
        batch = read_manifest(folder)
        failing += error is not None
        want = RecordedOutcome("ok") if error is None else RecordedOutcome("error", ErrorInfo("ValueError", ERROR))
        if batch.recorded != want:
            problems.append(f"rank {rank}: recorded {batch.recorded}")
        if batch.forward_context != EXPECTED:
            problems.append(f"rank {rank}: context {batch.forward_context} != {EXPECTED}")
        if [item.grids for item in batch.items] != [{"grid_thws": [[1, 8, 8]]}, {"grid_thws": [[1, 2, 2]]}]:
            problems.append(f"rank {rank}: items {[item.grids for item in batch.items]}")
        if error is not None:
            result = triage(folder)
            text = result.text().splitlines()
            if (result.verdict.status.value, result.verdict.divergence.first_image) != ("error-reproduced", 1):
                problems.append(f"rank {rank}: triage {result.verdict.status.value}")
            if "forward pass: this call held 2 images from 2 requests; chunked-prefill size: 8192" not in text:
                problems.append(f"rank {rank}: triage text {text}")
            if result.to_json()["forward_context"]["call_items"][1]["rid"] != "req-b":
                problems.append(f"rank {rank}: the failing image is not request b's")
    # everything is SGLang's own again
    mm_schedule = module("sglang.srt.managers.mm_schedule")
    mm_utils = module("sglang.srt.managers.mm_utils")
    assert mm_utils.get_embedding_and_mask is mm_schedule.get_embedding_and_mask
    assert not hasattr(mm_schedule.get_embedding_and_mask, capture.WRAPPED_ATTR)
    record("capture-context", cases=1, ranks=TP, failing=failing, disagreements=len(problems))
    assert problems == []
    assert failing == (1 if release == "0.5.18" else 0)


def test_the_shim_wraps_the_real_forward_path_at_import(tmp_path):
    """Under ``kimi-viz capture`` the start-up hook wraps the real ``get_embedding_and_mask`` where SGLang
    looks it up: in ``mm_schedule``, and the same wrapper in ``mm_utils``, which imports it by name."""
    probe = (
        "import sglang.srt.models.kimi_k3 as k3\n"
        "from sglang.srt.managers import mm_schedule, mm_utils\n"
        "from kimi_viz.capture import WRAPPED_ATTR\n"
        "wrapped = getattr(mm_schedule.get_embedding_and_mask, WRAPPED_ATTR, None)\n"
        "print(wrapped is not None, mm_utils.get_embedding_and_mask is mm_schedule.get_embedding_and_mask,\n"
        "      getattr(wrapped, '__module__', None), hasattr(k3.KimiK3ForConditionalGeneration.get_image_feature,\n"
        "      WRAPPED_ATTR))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    command = [sys.executable, "-m", "kimi_viz", "capture", "--out", str(tmp_path), "--", sys.executable, "-c", probe]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "True", "sglang.srt.managers.mm_schedule", "True"]
    record("capture-context-shim", cases=1, disagreements=0)
