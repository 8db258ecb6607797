"""Capture from a live process: a fake ``sglang`` package laid out like the real one, run through
``kimi-viz capture`` in a subprocess and through :func:`kimi_viz.capture.patch` in-process."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kimi_viz import capture
from kimi_viz.cli import main
from kimi_viz.manifest import read_manifest
from kimi_viz.split.batch import RecordedOutcome
from kimi_viz.split.cause import ErrorInfo

ERROR = "Kimi-K3 deferred feature length does not match image grids"
REPO = Path(__file__).resolve().parent.parent

FAKE_KIMI_K3 = '''
"""A stand-in for sglang/srt/models/kimi_k3.py: the deferred row check of get_image_feature."""
import math

from sglang.srt.managers.schedule_batch import MultimodalDataItem  # noqa: F401  (same import as SGLang)

LAST_ERROR = None
CALLS = 0


class CheckpointProcessor:
    media_proc_cfg = {"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 65536,
                      "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
                      "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                      "transparent_bg_config": None, "transparent_bg_fill_stage": "after_resize"}


class KimiK3ForConditionalGeneration:
    use_data_parallel = True
    _encoder_image_processor = CheckpointProcessor()

    def get_image_feature(self, items):
        """Return the produced row count; raise SGLang's error when rows and grids disagree."""
        global LAST_ERROR, CALLS
        CALLS += 1
        global_indices = list(range(len(items)))  # the fixed code maps shard positions through global_indices
        grids = []
        for item in items:
            grid = item.model_specific_data.get("image_grid_thw")
            if grid is None:
                grid = item.model_specific_data["grid_thws"]
            if grid.shape[0] != 1:
                raise ValueError("Kimi-K3 expects one vision grid per MultimodalDataItem; "
                                 "split aggregated encoder inputs before get_image_feature()")
            grids.append(grid[0].tolist())
        produced = 0
        for item in items:
            cfg = item.model_specific_data["kimi_k3_deferred_preprocessing"]["resize_config"]
            produced += ((cfg["new_height"] + cfg["pad_height"]) // 14) * ((cfg["new_width"] + cfg["pad_width"]) // 14)
        if sum(math.prod(g) for g in grids) != produced:
            LAST_ERROR = ValueError("Kimi-K3 deferred feature length does not match image grids")
            raise LAST_ERROR
        return produced
'''

FAKE_SCHEDULE_BATCH = """
class MultimodalDataItem:
    def __init__(self, feature, model_specific_data):
        self.feature = feature
        self.model_specific_data = model_specific_data

    def __getattr__(self, name):
        try:
            return self.__dict__["model_specific_data"][name]
        except KeyError:
            raise AttributeError(name) from None
"""

FAKE_DP_ATTENTION = """
import os

def get_attention_tp_size():
    return int(os.environ.get("FAKE_ATTN_TP_SIZE", "1"))

def get_attention_tp_rank():
    return int(os.environ.get("FAKE_ATTN_TP_RANK", "0"))
"""

DRIVER = """
import sys

import torch
from PIL import Image

from sglang.srt.managers.schedule_batch import MultimodalDataItem
from sglang.srt.models.kimi_k3 import KimiK3ForConditionalGeneration

stale = sys.argv[1] == "bad"
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 1
image = Image.new("RGB", (56, 28), (200, 30, 90))
image.putpixel((3, 4), (1, 2, 3))
resize = {"num_tokens": 2, "new_width": 56, "new_height": 28, "pad_width": 0, "pad_height": 0}
data = {"grid_thws": torch.tensor([[1, 2, 4]]),
        "kimi_k3_deferred_preprocessing": {"backend": "cpu", "image_mean": [0.5, 0.5, 0.5],
                                           "image_std": [0.5, 0.5, 0.5], "transparent_bg_config": None,
                                           "resize_config": resize}}
if stale:
    data["image_grid_thw"] = torch.tensor([[1, 4, 4]])
items = [MultimodalDataItem(image, data)]
model = KimiK3ForConditionalGeneration()
for _ in range(calls):
    print("rows", model.get_image_feature(items))
"""


def write_fake_sglang(root: Path) -> Path:
    """Write a fake ``sglang`` package under ``root`` (same module path as the real one); return root."""
    files = {
        "sglang/__init__.py": '__version__ = "0.0.0-fake"\n',
        "sglang/srt/__init__.py": "",
        "sglang/srt/models/__init__.py": "",
        "sglang/srt/models/kimi_k3.py": FAKE_KIMI_K3,
        "sglang/srt/managers/__init__.py": "",
        "sglang/srt/managers/schedule_batch.py": FAKE_SCHEDULE_BATCH,
        "sglang/srt/layers/__init__.py": "",
        "sglang/srt/layers/dp_attention.py": FAKE_DP_ATTENTION,
        "driver.py": DRIVER,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def fake_sglang(tmp_path):
    return write_fake_sglang(tmp_path / "fake")


def run_under_capture(
    fake: Path, out: Path, *args: str, flags: tuple[str, ...] = (), env_extra=None, pythonpath: str | None = None
):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(fake), pythonpath) if p)
    env.update(env_extra or {})
    command = [
        sys.executable,
        "-m",
        "kimi_viz",
        "capture",
        "--out",
        str(out),
        *flags,
        "--",
        sys.executable,
        str(fake / "driver.py"),
        *args,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=str(REPO))


def manifests(out: Path) -> list[Path]:
    return capture.captured_manifests(out)


def test_failing_call_writes_manifest_and_reraises_same_error(fake_sglang, tmp_path):
    out = tmp_path / "captures"
    result = run_under_capture(fake_sglang, out, "bad", env_extra={"FAKE_ATTN_TP_SIZE": "2", "FAKE_ATTN_TP_RANK": "1"})
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("kimi-viz capture: wrote ")
    assert lines[1] == "Traceback (most recent call last):"
    assert f"ValueError: {ERROR}" in lines  # the original exception, type and message unchanged
    assert lines.index(f"ValueError: {ERROR}") > lines.index("Traceback (most recent call last):")
    assert "wrote " in result.stderr
    [folder] = manifests(out)
    batch = read_manifest(folder)
    assert batch.attn_tp_size == 2 and batch.attn_tp_rank == 1
    assert batch.sglang_version is not None
    [item] = batch.items
    assert item.grids == {"image_grid_thw": [[1, 4, 4]], "grid_thws": [[1, 2, 4]]}
    assert item.deferred["backend"] == "cpu"
    assert item.deferred["resize_config"]["new_width"] == 56
    assert item.feature.kind == "image" and item.feature.image.size == (56, 28)
    assert item.feature.image.getpixel((3, 4)) == (1, 2, 3)
    assert item.original_size == (56, 28)
    assert f"ValueError: {ERROR}" in (folder / "traceback.txt").read_text()
    assert f"ValueError: {ERROR}" in batch.note
    assert batch.recorded == RecordedOutcome("error", ErrorInfo("ValueError", ERROR))  # the exact type and message
    assert json.loads((folder / "manifest.json").read_text())["source"]["recorded"] == {
        "outcome": "error",
        "error": {"type": "ValueError", "message": ERROR},
    }
    assert batch.code_path == "post-fix" and "global_indices" in batch.note
    assert batch.processor["in_patch_limit"] == 65536


def test_captured_manifest_triages_to_the_same_error(fake_sglang, tmp_path, capsys):
    out = tmp_path / "captures"
    result = run_under_capture(fake_sglang, out, "bad", env_extra={"FAKE_ATTN_TP_SIZE": "2", "FAKE_ATTN_TP_RANK": "0"})
    assert result.returncode == 1, result.stderr
    found = manifests(out)
    assert len(found) == 1, result.stderr
    folder = found[0]
    assert main(["triage", str(folder), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in verdict["ranks"]] == [0]  # the recorded rank
    assert verdict["error"] == {"type": "ValueError", "message": ERROR}
    assert verdict["divergence"]["scenario_class"] == "S2"


def test_passing_call_writes_nothing_and_output_is_unchanged(fake_sglang, tmp_path):
    out = tmp_path / "captures"
    result = run_under_capture(fake_sglang, out, "good")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "rows 8\n"
    assert result.stderr == ""
    assert manifests(out) == []


def test_all_calls_and_redact(fake_sglang, tmp_path):
    out = tmp_path / "captures"
    result = run_under_capture(fake_sglang, out, "good", "2", flags=("--all", "--redact"))
    assert result.returncode == 0, result.stderr
    found = manifests(out)
    assert len(found) == 2
    for folder in found:
        assert not (folder / "images").exists()
        batch = read_manifest(folder)
        assert batch.recorded == RecordedOutcome("ok")  # a passing call recorded with --all
        [item] = batch.items
        assert item.feature.kind == "shape_only" and item.feature.shape == (28, 56, 3)


def test_existing_sitecustomize_still_runs_and_exit_code_is_the_commands(fake_sglang, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED_MARK'] = 'yes'\n")
    driver = "import os, sys; print(os.environ.get('CHAINED_MARK')); sys.exit(7)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake_sglang), str(other)]))
    result = subprocess.run(
        [sys.executable, "-m", "kimi_viz", "capture", "--out", str(tmp_path / "c"), "--", sys.executable, "-c", driver],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 7, result.stderr
    assert result.stdout.strip() == "yes"


def test_shim_finds_the_kit_in_an_interpreter_that_lacks_it(tmp_path):
    """A server's own Python (another venv) gets the kit from the package root the environment names."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    if (
        not base.is_file()
        or subprocess.run([str(base), "-c", "import kimi_viz"], capture_output=True, cwd=tmp_path).returncode == 0
    ):
        pytest.skip("no interpreter without kimi_viz installed here")
    env = capture.capture_environment(tmp_path, base={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    probe = "import sys; print(type(sys.meta_path[0]).__name__, sys.path[-1])"
    result = subprocess.run([str(base), "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.split() == ["KimiK3ImportHook", str(REPO)]


def test_shim_imports_nothing_heavy_at_start_up(tmp_path):
    """Capture on, nothing imported yet: a process gains only the shim, the capture module and tiny stdlib bits."""
    probe = "import sys; print(' '.join(sorted(sys.modules)))"
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shimmed = capture.capture_environment(tmp_path, base=plain)
    modules = []
    for env in (plain, shimmed):
        result = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert result.returncode == 0 and result.stderr == "", result.stderr
        modules.append(set(result.stdout.split()))
    added = modules[1] - modules[0]
    assert {"sitecustomize", "kimi_viz.capture.hook"} <= added
    assert not {"kimi_viz.capture.record", "kimi_viz.capture.run", "kimi_viz.manifest"} & added
    # kimi_viz.capture is the package (its __init__ imports only from .hook); .record and .run stay unloaded
    assert added <= {
        "sitecustomize",
        "kimi_viz",
        "kimi_viz._lazy",
        "kimi_viz.capture",
        "kimi_viz.capture.hook",
        "kimi_viz.capture.names",
        "__future__",
        "importlib.machinery",
    }, added
    assert not any(m for m in added if m.split(".")[0] in ("torch", "numpy", "PIL", "threading", "pathlib"))
    assert not list(tmp_path.iterdir())  # capture on, nothing failed: nothing written


def test_capture_environment_keeps_pythonpath(tmp_path):
    env = capture.capture_environment(tmp_path, base={"PYTHONPATH": "/a:/b"})
    assert env["PYTHONPATH"] == f"{capture.shim_dir()}{os.pathsep}/a:/b"
    assert env[capture.ENV_DIR] == str(tmp_path.resolve())
    assert (capture.shim_dir() / "sitecustomize.py").is_file()


def test_no_command_is_bad_input(tmp_path, capsys):
    assert main(["capture", "--out", str(tmp_path)]) == 2
    assert "no command given" in capsys.readouterr().err


def _purge_fake_modules():
    for name in list(sys.modules):
        if name == "sglang" or name.startswith("sglang."):
            del sys.modules[name]


@pytest.fixture
def fake_on_path(fake_sglang, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_sglang))
    _purge_fake_modules()
    yield fake_sglang
    _purge_fake_modules()


def _items(stale: bool):
    from sglang.srt.managers.schedule_batch import MultimodalDataItem

    resize = {"num_tokens": 2, "new_width": 56, "new_height": 28, "pad_width": 0, "pad_height": 0}
    data = {
        "grid_thws": torch.tensor([[1, 2, 4]]),
        "kimi_k3_deferred_preprocessing": {
            "backend": "gpu",
            "image_mean": [0.5] * 3,
            "image_std": [0.5] * 3,
            "transparent_bg_config": None,
            "resize_config": resize,
        },
    }
    if stale:
        data["image_grid_thw"] = torch.tensor([[1, 4, 4]])
    return [MultimodalDataItem(torch.full((3, 28, 56), 7, dtype=torch.uint8), data)]


@pytest.mark.parametrize("import_first", [True, False], ids=["already-imported", "hooked-import"])
def test_patch_in_process_reraises_the_same_object(fake_on_path, tmp_path, import_first):
    if import_first:
        importlib.import_module("sglang.srt.models.kimi_k3")
    with capture.patch(tmp_path / "c") as session:
        module = importlib.import_module("sglang.srt.models.kimi_k3")
        model = module.KimiK3ForConditionalGeneration()
        assert model.get_image_feature(_items(False)) == 8
        assert session.manifests == []
        with pytest.raises(ValueError) as caught:
            model.get_image_feature(_items(True))
        assert caught.value is module.LAST_ERROR
        assert str(caught.value) == ERROR
    [folder] = session.manifests
    batch = read_manifest(folder)
    assert batch.recorded == RecordedOutcome("error", ErrorInfo(type(caught.value).__name__, str(caught.value)))
    [item] = batch.items
    assert item.feature.kind == "tensor" and item.feature.layout == "chw"
    assert torch.equal(item.feature.tensor, torch.full((3, 28, 56), 7, dtype=torch.uint8))
    assert item.original_size == (56, 28)
    # restored on exit: the method is the module's own function again
    assert module.KimiK3ForConditionalGeneration.get_image_feature.__qualname__.endswith("get_image_feature")
    assert not hasattr(module.KimiK3ForConditionalGeneration.get_image_feature, capture.WRAPPED_ATTR)
    assert not any(isinstance(f, capture.KimiK3ImportHook) for f in sys.meta_path)


def test_capture_failure_never_masks_the_error(fake_on_path, tmp_path, monkeypatch, capsys):
    module = importlib.import_module("sglang.srt.models.kimi_k3")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the capture folder should go")
    with capture.patch(blocker) as session, pytest.raises(ValueError) as caught:
        module.KimiK3ForConditionalGeneration().get_image_feature(_items(True))
    assert caught.value is module.LAST_ERROR
    assert session.manifests == []
    assert "could not write a manifest" in capsys.readouterr().err


class _OddError(LookupError):
    """An exception whose message is not its args: str() is what the manifest records."""

    def __str__(self):
        return "odd: 'quoted'\nsecond line ünïcode"


@pytest.mark.parametrize(
    "error",
    [KeyError("grid_thws"), _OddError("ignored"), RuntimeError()],
    ids=["key-error", "custom-str", "empty-message"],
)
def test_failing_call_records_the_exact_exception_type_and_message(fake_on_path, tmp_path, error):
    module = importlib.import_module("sglang.srt.models.kimi_k3")

    def get_image_feature(self, items):
        raise error

    cls = type("Model", (module.KimiK3ForConditionalGeneration,), {"get_image_feature": get_image_feature})
    with capture.patch(tmp_path / "c") as session:
        capture.wrap_method(cls, session.out_dir, on_record=session.manifests.append)
        with pytest.raises(type(error)) as caught:
            cls().get_image_feature(_items(False))
    assert caught.value is error
    capture.unwrap_method(cls)
    [folder] = session.manifests
    assert read_manifest(folder).recorded == RecordedOutcome("error", ErrorInfo(type(error).__name__, str(error)))


def test_record_call_records_the_outcome(fake_on_path, tmp_path):
    failed = capture.record_call(None, _items(True), tmp_path / "a", error=ValueError(ERROR))
    passed = capture.record_call(None, _items(False), tmp_path / "b")
    assert read_manifest(failed).recorded == RecordedOutcome("error", ErrorInfo("ValueError", ERROR))
    assert read_manifest(passed).recorded == RecordedOutcome("ok")


def test_a_recorder_that_cannot_be_imported_never_masks_the_error(fake_on_path, tmp_path, monkeypatch, capsys):
    module = importlib.import_module("sglang.srt.models.kimi_k3")
    monkeypatch.setitem(sys.modules, "kimi_viz.capture.record", None)  # importing it now raises ImportError
    with capture.patch(tmp_path / "c") as session, pytest.raises(ValueError) as caught:
        module.KimiK3ForConditionalGeneration().get_image_feature(_items(True))
    assert caught.value is module.LAST_ERROR
    assert session.manifests == []
    assert "could not write a manifest (ModuleNotFoundError" in capsys.readouterr().err


def test_package_is_light_and_exports_the_rest_lazily():
    probe = (
        "import sys, kimi_viz.capture as c; before = set(sys.modules); "
        "assert not {'kimi_viz.capture.record', 'kimi_viz.capture.run', 'kimi_viz.manifest', 'torch'} & before, "
        "before; "
        "c.shim_dir; assert 'kimi_viz.capture.run' in sys.modules and 'kimi_viz.capture.record' not in sys.modules; "
        "c.record_call; assert 'kimi_viz.capture.record' in sys.modules; print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr
    from kimi_viz.capture import record, run

    assert capture.record_call is record.record_call and capture.batch_from_call is record.batch_from_call
    assert capture.captured_manifests is run.captured_manifests and capture.run_captured is run.run_captured
    assert set(capture.__all__) <= set(dir(capture))
    with pytest.raises(AttributeError):
        capture.no_such_name


def test_unknown_items_are_recorded_as_shapes(fake_on_path, tmp_path):
    from sglang.srt.managers.schedule_batch import MultimodalDataItem

    item = MultimodalDataItem(object(), {"grid_thws": [[1, 2, 2]], "kimi_k3_deferred_preprocessing": None})
    folder = capture.record_call(None, [item], tmp_path, error=RuntimeError("x"))
    assert folder is not None
    [kit_item] = read_manifest(folder).items
    assert kit_item.feature.kind == "shape_only" and kit_item.deferred is None


def test_explain_points_at_the_manifests_a_capture_log_names(fake_on_path, tmp_path, capsys):
    """The line the recorder prints for a failing call is recognised in a server log, and explain's
    next step is the triage of that very manifest, which replays to the recorded error."""
    from sglang.srt.managers.schedule_batch import MultimodalDataItem

    from kimi_viz.cli import main
    from kimi_viz.message_catalogue import messages

    item = MultimodalDataItem(object(), {"grid_thws": [[1, 2, 2]], "kimi_k3_deferred_preprocessing": None})
    folder = capture.record_call(None, [item], tmp_path / "captures", error=ValueError(messages.MSG_LENGTH))
    printed = capsys.readouterr().err
    log = tmp_path / "server.log"
    log.write_text(f"INFO serving\nValueError: {messages.MSG_LENGTH}\n{printed}")
    assert main(["explain", "--file", str(log)]) == 0
    out = capsys.readouterr().out
    assert "this log names 1 captured manifest(s)" in out
    assert f"kimi-viz triage {folder}" in out
    assert f"(ValueError: {messages.MSG_LENGTH})" in out
    assert main(["explain", "--file", str(log), "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["key"] for e in entries] == ["feature-length", "capture-manifest"]
    assert entries[1]["values"] == {"manifest": str(folder), "error": f"ValueError: {messages.MSG_LENGTH}"}
