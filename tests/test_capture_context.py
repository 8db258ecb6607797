"""The forward context of a captured call, recorded from a fake ``sglang`` laid out like the real one.

The fake has the forward path of SGLang 0.5.18+: ``KimiK3ForConditionalGeneration.forward`` →
``mm_utils.general_mm_embed_routine`` (its ``forward_batch`` local) → ``embed_mm_inputs`` →
``get_embedding_and_mask`` (defined in ``mm_schedule``, imported by name into ``mm_utils``), which
collects the cache misses of every request overlapping its window, dedupes them by hash and makes one
``get_image_feature`` call. The capture must record which request (rid) and image each item of that
call came from, with offsets, prefix/extend lengths, the chunked-prefill size and the cache hits, and
must never change what SGLang does.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kimi_viz import capture
from kimi_viz.manifest import read_manifest
from kimi_viz.split.batch import RecordedOutcome
from kimi_viz.split.cause import ErrorInfo
from kimi_viz.split.forward_context import ContextImage, ContextItem, ContextRequest, ForwardContext

ERROR = "Kimi-K3 deferred feature length does not match image grids"
REPO = Path(__file__).resolve().parent.parent

FAKE = {
    "sglang/__init__.py": '__version__ = "0.0.0-fake"\n',
    "sglang/srt/__init__.py": "",
    "sglang/srt/models/__init__.py": "",
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/runtime_context.py": """
        import os
        from types import SimpleNamespace

        def get_schedule():
            if os.environ.get("FAKE_UNPUBLISHED"):
                raise ValueError("config namespace 'schedule' not published")
            return SimpleNamespace(chunked_prefill_size=int(os.environ.get("FAKE_CHUNKED", "8192")))
    """,
    "sglang/srt/managers/schedule_batch.py": """
        class MultimodalDataItem:
            def __init__(self, feature, model_specific_data, offsets, hash):
                self.feature = feature
                self.model_specific_data = model_specific_data
                self.offsets = offsets
                self.hash = hash


        class MultimodalInputs:
            def __init__(self, mm_items):
                self.mm_items = mm_items
    """,
    "sglang/srt/managers/mm_schedule.py": """
        from sglang.srt.runtime_context import get_schedule  # noqa: F401  (the name SGLang reads it by)


        class Cache:
            def __init__(self):
                self.mm_cache = {}

            def get_single(self, key):
                return self.mm_cache.get(key)


        embedding_cache = Cache()
        CALLS = []


        def get_embedding_and_mask(
            data_embedding_func, embedding_items, placeholder_tensor, input_ids, items_size,
            prefix_length, extend_length, items_offset_list,
        ):
            # 0.5.18's batched per-image path: every request's overlapping misses, deduped by hash, one call
            misses = {}
            for i in range(min(len(items_size) - 1, len(prefix_length))):
                start, stop = prefix_length[i], prefix_length[i] + extend_length[i]
                for item in embedding_items[items_size[i] : items_size[i + 1]]:
                    s, e = item.offsets[0]
                    if e >= start and s < stop and item.hash not in embedding_cache.mm_cache:
                        misses.setdefault(item.hash, item)
            if not misses:
                return None, None, input_ids
            CALLS.append(list(misses.values()))
            return data_embedding_func(list(misses.values())), "mask", input_ids
    """,
    "sglang/srt/managers/mm_utils.py": """
        from sglang.srt.managers.mm_schedule import get_embedding_and_mask


        def embed_mm_inputs(mm_inputs_list, extend_prefix_lens, extend_seq_lens, input_ids, embedder):
            items = [item for mm in mm_inputs_list for item in mm.mm_items]
            items_size = [0]
            offsets = []
            for mm in mm_inputs_list:
                items_size.append(items_size[-1] + len(mm.mm_items))
                offsets.append([run for item in mm.mm_items for run in item.offsets])
            return get_embedding_and_mask(
                data_embedding_func=embedder, embedding_items=items, placeholder_tensor=None,
                input_ids=input_ids, items_size=items_size, prefix_length=extend_prefix_lens,
                extend_length=extend_seq_lens, items_offset_list=offsets,
            )


        def general_mm_embed_routine(input_ids, forward_batch, embedder):
            mm_inputs_list = [mm for mm in forward_batch.mm_inputs if mm is not None]
            prefix = [p for i, p in enumerate(forward_batch.extend_prefix_lens_cpu) if forward_batch.mm_inputs[i]]
            extend = [n for i, n in enumerate(forward_batch.extend_seq_lens_cpu) if forward_batch.mm_inputs[i]]
            return embed_mm_inputs(mm_inputs_list, prefix, extend, input_ids, embedder)
    """,
    "sglang/srt/models/kimi_k3.py": """
        from sglang.srt.managers.mm_utils import general_mm_embed_routine

        LAST_ERROR = None


        class KimiK3ForConditionalGeneration:
            use_data_parallel = False

            def get_image_feature(self, items):
                global LAST_ERROR
                if any("image_grid_thw" in item.model_specific_data for item in items):
                    LAST_ERROR = ValueError("Kimi-K3 deferred feature length does not match image grids")
                    raise LAST_ERROR
                return [len(items)]

            def forward(self, input_ids, forward_batch):
                return general_mm_embed_routine(input_ids, forward_batch, self.get_image_feature)
    """,
    "driver.py": """
        import sys

        sys.path.insert(0, sys.argv[1])
        from forward_fixture import forward_batch

        from sglang.srt.models.kimi_k3 import KimiK3ForConditionalGeneration

        print(KimiK3ForConditionalGeneration().forward("ids", forward_batch(stale=sys.argv[2] == "bad")))
    """,
}


def write_fake_sglang(root: Path) -> Path:
    for name, text in FAKE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# The forward batch: request a (rid req-a, batch position 0) with one image; a text-only request
# (position 1); request b (req-b, position 2, a 2-token prefix already cached) with one image; request c
# (req-c, position 3) with an embedding-cache hit, the same image as request a's, and an image after
# its window. One call: request a's and request b's images.
FIXTURE = """
import torch

from sglang.srt.managers import mm_schedule
from sglang.srt.managers.schedule_batch import MultimodalDataItem, MultimodalInputs


class ForwardBatch:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def item(offsets, hash, grid, stale=False):
    resize = {"num_tokens": 2, "new_width": 56, "new_height": 28, "pad_width": 0, "pad_height": 0}
    data = {
        "grid_thws": torch.tensor([grid]),
        "kimi_k3_deferred_preprocessing": {"backend": "gpu", "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                                           "transparent_bg_config": None, "resize_config": resize},
    }
    if stale:
        data["image_grid_thw"] = torch.tensor([[1, 4, 4]])
    return MultimodalDataItem(torch.full((3, 28, 56), 7, dtype=torch.uint8), data, offsets, hash)


def forward_batch(stale=True):
    mm_schedule.embedding_cache.mm_cache.clear()
    mm_schedule.embedding_cache.mm_cache[303] = "cached rows"
    a = item([(3, 10)], 101, [1, 4, 8])
    b = item([(3, 3)], 202, [1, 2, 2], stale=stale)
    c = [item([(1, 2)], 303, [1, 2, 4]), item([(5, 12)], 101, [1, 4, 8]), item([(40, 47)], 404, [1, 4, 8])]
    return ForwardBatch(
        mm_inputs=[MultimodalInputs([a]), None, MultimodalInputs([b]), MultimodalInputs(c)],
        extend_prefix_lens_cpu=[0, 0, 2, 0],
        extend_seq_lens_cpu=[14, 5, 6, 20],
        rids=["req-a", "req-text", "req-b", "req-c"],
    )
"""

EXPECTED = ForwardContext(
    requests=(
        ContextRequest(0, 14, (ContextImage(((3, 10),), "in-call", 0),), rid="req-a", batch_index=0),
        ContextRequest(2, 6, (ContextImage(((3, 3),), "in-call", 1),), rid="req-b", batch_index=2),
        ContextRequest(
            0,
            20,
            (
                ContextImage(((1, 2),), "cache-hit"),
                ContextImage(((5, 12),), "same-image", 0),
                ContextImage(((40, 47),), "outside-window"),
            ),
            rid="req-c",
            batch_index=3,
        ),
    ),
    items=(ContextItem(0, 0), ContextItem(1, 0)),
    chunked_prefill_size=8192,
    source="sglang.srt.managers.mm_schedule.get_embedding_and_mask; chunked_prefill_size from "
    "mm_schedule.get_schedule(); rids from forward_batch.rids",
)


def _purge():
    for name in list(sys.modules):
        if name == "sglang" or name.startswith("sglang.") or name == "forward_fixture":
            del sys.modules[name]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    root = write_fake_sglang(tmp_path / "fake")
    (root / "forward_fixture.py").write_text(FIXTURE)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("FAKE_UNPUBLISHED", raising=False)
    _purge()
    yield root
    _purge()


def _forward(stale: bool = True):
    fixture = importlib.import_module("forward_fixture")
    module = importlib.import_module("sglang.srt.models.kimi_k3")
    return module, module.KimiK3ForConditionalGeneration().forward("ids", fixture.forward_batch(stale=stale))


@pytest.mark.parametrize("import_first", [True, False], ids=["already-imported", "hooked-import"])
def test_a_failing_call_records_which_request_and_image_each_item_came_from(fake, tmp_path, import_first):
    if import_first:
        importlib.import_module("sglang.srt.models.kimi_k3")
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError) as caught:
        module, _ = _forward()
    assert caught.value is sys.modules["sglang.srt.models.kimi_k3"].LAST_ERROR  # SGLang's own exception, unchanged
    [folder] = session.manifests
    batch = read_manifest(folder)
    assert batch.recorded == RecordedOutcome("error", ErrorInfo("ValueError", ERROR))
    assert batch.forward_context == EXPECTED
    assert batch.forward_context.summary() == "this call held 2 images from 2 requests"
    assert batch.note.endswith("; forward context: this call held 2 images from 2 requests")
    written = json.loads((folder / "manifest.json").read_text())["forward_context"]
    assert written["items"] == [{"request": 0, "image": 0}, {"request": 1, "image": 0}]
    assert written["requests"][1] == {
        "rid": "req-b",
        "batch_index": 2,
        "prefix_len": 2,
        "extend_len": 6,
        "images": [{"offsets": [[3, 3]], "status": "in-call", "call_item": 1}],
    }
    # everything is restored on exit: mm_schedule's function and the name mm_utils imported
    mm_schedule = sys.modules["sglang.srt.managers.mm_schedule"]
    mm_utils = sys.modules["sglang.srt.managers.mm_utils"]
    for owner in (mm_schedule, mm_utils):
        assert not hasattr(owner.get_embedding_and_mask, capture.WRAPPED_ATTR)
        assert owner.get_embedding_and_mask.__module__ == "sglang.srt.managers.mm_schedule"
    assert not any(isinstance(f, capture.KimiK3ImportHook) for f in sys.meta_path)
    assert capture.running_forward() is None


def test_a_passing_forward_is_unchanged_and_writes_nothing(fake, tmp_path):
    with capture.patch(tmp_path / "c") as session:
        _, result = _forward(stale=False)
        assert capture.running_forward() is None
    assert result == ([2], "mask", "ids")  # SGLang's own return value, untouched
    assert session.manifests == []
    assert not (tmp_path / "c").exists()


def test_all_calls_record_the_context_of_a_passing_call(fake, tmp_path):
    with capture.patch(tmp_path / "c", all_calls=True) as session:
        _forward(stale=False)
    [folder] = session.manifests
    batch = read_manifest(folder)
    assert batch.recorded == RecordedOutcome("ok")
    assert batch.forward_context == EXPECTED


def test_an_exception_of_get_embedding_and_mask_itself_passes_through(fake, tmp_path, monkeypatch):
    importlib.import_module("sglang.srt.models.kimi_k3")
    mm_schedule = sys.modules["sglang.srt.managers.mm_schedule"]
    problem = KeyError("items_size")

    def broken(**kwargs):
        raise problem

    monkeypatch.setattr(mm_schedule, "get_embedding_and_mask", broken)
    with capture.patch(tmp_path / "c") as session:
        with pytest.raises(KeyError) as caught:
            mm_schedule.get_embedding_and_mask(embedding_items=[])
        assert caught.value is problem
        assert capture.running_forward() is None
    assert session.manifests == []
    assert mm_schedule.get_embedding_and_mask is broken


def test_without_a_forward_batch_the_rids_are_recorded_absent(fake, tmp_path):
    """get_embedding_and_mask called from outside SGLang's frames: requests by index, rid and position absent."""
    fixture = importlib.import_module("forward_fixture")
    module = importlib.import_module("sglang.srt.models.kimi_k3")
    mm_utils = importlib.import_module("sglang.srt.managers.mm_utils")
    batch = fixture.forward_batch()
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError):
        mm_utils.embed_mm_inputs(
            [m for m in batch.mm_inputs if m is not None],
            [0, 2, 0],
            [14, 6, 20],
            "ids",
            module.KimiK3ForConditionalGeneration().get_image_feature,
        )
    context = read_manifest(session.manifests[0]).forward_context
    assert [(r.rid, r.batch_index) for r in context.requests] == [(None, None)] * 3
    assert [(r.prefix_len, r.extend_len) for r in context.requests] == [(0, 14), (2, 6), (0, 20)]
    assert context.items == EXPECTED.items
    assert context.source.endswith(
        "; not exposed: rid and forward-batch position (no forward_batch in the calling SGLang frames)"
    )
    assert context.lines()[1:4] == [
        "  item  request  rid  image  pad tokens [start, end]  prefix  extend  window",
        "  0     0        -    0      [3, 10]                  0       14      [0, 14)",
        "  1     1        -    0      [3, 3]                   2       6       [2, 8)",
    ]


def test_an_unpublished_runtime_context_records_the_chunked_prefill_size_absent(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_UNPUBLISHED", "1")
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError):
        _forward()
    context = read_manifest(session.manifests[0]).forward_context
    assert context.chunked_prefill_size is None
    assert "not exposed: chunked_prefill_size (no published SGLang runtime context)" in context.source
    assert context.lines()[0] == (
        "forward pass: this call held 2 images from 2 requests; chunked-prefill size: not recorded"
    )


def test_a_call_outside_the_forward_path_has_no_context(fake, tmp_path):
    module = importlib.import_module("sglang.srt.models.kimi_k3")
    fixture = importlib.import_module("forward_fixture")
    items = fixture.forward_batch().mm_inputs[2].mm_items
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError):
        module.KimiK3ForConditionalGeneration().get_image_feature(items)
    [folder] = session.manifests
    assert read_manifest(folder).forward_context is None
    assert "forward_context" not in json.loads((folder / "manifest.json").read_text())


def test_a_failure_to_read_the_context_degrades_to_todays_manifest(fake, tmp_path, monkeypatch, capsys):
    from kimi_viz.capture import context

    def boom(forward, calls):
        raise RuntimeError("frames gone")

    monkeypatch.setattr(context, "_build", boom)
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError) as caught:
        _forward()
    assert str(caught.value) == ERROR
    batch = read_manifest(session.manifests[0])
    assert batch.forward_context is None and batch.recorded == RecordedOutcome("error", ErrorInfo("ValueError", ERROR))
    assert "could not record the forward context (RuntimeError: frames gone); recorded without it" in (
        capsys.readouterr().err
    )


def test_a_context_that_does_not_validate_is_left_out(fake, tmp_path, monkeypatch, capsys):
    from kimi_viz.capture import context

    bad = ForwardContext((ContextRequest(-3, 5),), (ContextItem(None, None),) * 2)
    monkeypatch.setattr(context, "_build", lambda forward, calls: bad)
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError):
        _forward()
    batch = read_manifest(session.manifests[0])
    assert batch.forward_context is None and len(batch.items) == 2
    assert "writing it without the forward context" in capsys.readouterr().err


def test_the_shim_records_the_context_in_a_command_under_capture(fake, tmp_path):
    """``kimi-viz capture`` in a fresh process: the import hook wraps mm_schedule, mm_utils and kimi_k3."""
    out = tmp_path / "captures"
    env = dict(os.environ, PYTHONPATH=str(fake))
    command = [sys.executable, "-m", "kimi_viz", "capture", "--out", str(out), "--"]
    command += [sys.executable, str(fake / "driver.py"), str(fake), "bad"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert result.returncode == 1, result.stderr
    assert f"ValueError: {ERROR}" in result.stderr.splitlines()
    [folder] = capture.captured_manifests(out)
    assert read_manifest(folder).forward_context == EXPECTED
    passing = subprocess.run(
        command[:-1] + ["good"], env=env, capture_output=True, text=True, timeout=120, cwd=str(REPO)
    )
    assert passing.returncode == 0 and passing.stderr == "", passing.stderr
    assert passing.stdout == "([2], 'mask', 'ids')\n"


def test_the_forward_wrapper_keeps_the_arguments_by_name_and_position(fake):
    mm_schedule = importlib.import_module("sglang.srt.managers.mm_schedule")
    seen = []

    def get_embedding_and_mask(*args, **kwargs):
        seen.append(capture.running_forward())
        return "result"

    mm_schedule.get_embedding_and_mask = get_embedding_and_mask
    wrapper = capture.wrap_forward_function(mm_schedule)
    assert wrapper is mm_schedule.get_embedding_and_mask and capture.wrap_forward_function(mm_schedule) is None
    assert mm_schedule.get_embedding_and_mask("func", ["item"], None, "ids", items_size=[0, 1]) == "result"
    [forward] = seen
    assert forward.function is get_embedding_and_mask
    assert forward.argument("embedding_items") == ["item"] and forward.argument("items_size") == [0, 1]
    with pytest.raises(KeyError):
        forward.argument("prefix_length")
    assert forward.caller.f_code.co_name == "test_the_forward_wrapper_keeps_the_arguments_by_name_and_position"
    assert capture.unwrap_forward_function(mm_schedule, [object()]) is False  # not one of those wrappers
    assert capture.unwrap_forward_function(mm_schedule) is True
    assert mm_schedule.get_embedding_and_mask is get_embedding_and_mask
