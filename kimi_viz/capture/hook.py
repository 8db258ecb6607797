"""Record the batch of a failing ``get_image_feature`` call in a live SGLang process.

:func:`install_import_hook` puts a ``sys.meta_path`` finder in front of the import system; when
``sglang.srt.models.kimi_k3`` is imported, the finder lets the real loader run the module and then
wraps ``KimiK3ForConditionalGeneration.get_image_feature``. The wrapper calls the original; when it
raises (or on every call with ``all_calls``) it writes a manifest of the call's items to a new
folder and re-raises the very same exception object. Writing a manifest never masks the original
error: a capture failure is logged to stderr and the original exception continues.

:func:`patch` does the same inside one Python session, as a context manager. ``kimi-viz capture``
runs a command with the ``sitecustomize`` shim of ``kimi_viz/_capture_shim`` on ``PYTHONPATH``,
which calls :func:`install_import_hook` in every Python process the command starts.

The shim imports this module in every Python process at start-up, so only modules the
interpreter has already loaded are imported at module level (``_thread`` rather than
``threading``; no pathlib, dataclasses, typing or importlib.abc); everything else, the manifest
writer included, is imported on first use.
"""

from __future__ import annotations

import _thread
import functools
import itertools
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - annotations only
    from pathlib import Path
    from typing import Any, Callable

TARGET_MODULE = "sglang.srt.models.kimi_k3"
TARGET_CLASS = "KimiK3ForConditionalGeneration"
TARGET_METHOD = "get_image_feature"

ENV_DIR = "KIMI_VIZ_CAPTURE_DIR"
ENV_REDACT = "KIMI_VIZ_CAPTURE_REDACT"
ENV_ALL = "KIMI_VIZ_CAPTURE_ALL"
ENV_PACKAGE_ROOT = "KIMI_VIZ_CAPTURE_PACKAGE_ROOT"
ENV_TP_SIZE = "KIMI_VIZ_ATTN_TP_SIZE"
ENV_TP_RANK = "KIMI_VIZ_ATTN_TP_RANK"

WRAPPED_ATTR = "__kimi_viz_capture_original__"

_counter = itertools.count()
_counter_lock = _thread.allocate_lock()   # threading.Lock, without importing threading at start-up


def log(message: str) -> None:
    """Print one capture message to stderr (never raises)."""
    try:
        print(f"kimi-viz capture: {message}", file=sys.stderr, flush=True)
    except Exception:  # pragma: no cover - a closed stderr must not break the server
        pass


def shim_dir() -> Path:
    """Return the folder holding the ``sitecustomize`` shim that ``kimi-viz capture`` puts on PYTHONPATH."""
    from pathlib import Path

    return Path(__file__).resolve().parent / "_capture_shim"


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


# ------------------------------------------------------------------------------------------
# Turning SGLang items into the kit's batch model
# ------------------------------------------------------------------------------------------
def _model_data(item: Any) -> dict:
    data = getattr(item, "__dict__", {}).get("model_specific_data")
    if data is None:
        try:
            data = getattr(item, "model_specific_data", None)
        except Exception:
            data = None
    return data if isinstance(data, dict) else {}


def _item_value(item: Any, data: dict, key: str) -> Any:
    if key in data:
        return data[key]
    return getattr(item, "__dict__", {}).get(key)


def _grid_rows(value: Any) -> list[list[int]] | None:
    from .manifest import jsonable

    value = jsonable(value)
    if value is None:
        return None
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        value = [value]
    return [[int(v) for v in row] for row in value]


def _tensor_layout(tensor: Any) -> str:
    shape = tuple(tensor.shape)
    if len(shape) == 5:
        return "stacked"
    if str(tensor.dtype) != "torch.uint8":
        return "patches"
    if len(shape) == 3 and shape[0] not in (1, 2, 3, 4) and shape[-1] in (1, 2, 3, 4):
        return "hwc"
    return "chw"


def _feature_of(value: Any, backend: str | None):
    """Return a kit Feature for an SGLang item's feature (PIL image, tensor, array, or anything else)."""
    import torch
    from PIL import Image

    from .batch import Feature
    from .manifest import DTYPES

    if isinstance(value, Image.Image):
        return Feature.from_image(value.copy())   # copy() loads the pixels and copies .info
    if value is not None and not isinstance(value, torch.Tensor) and hasattr(value, "__array__"):
        import numpy as np

        try:
            value = torch.from_numpy(np.asarray(value))
        except Exception:  # an array torch cannot hold: recorded by its shape below
            pass
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        layout = _tensor_layout(tensor)
        dtype = str(tensor.dtype).replace("torch.", "")
        if dtype not in DTYPES:
            return Feature.shape_only(layout, tuple(tensor.shape), "unknown")
        return Feature.from_tensor(tensor.contiguous(), layout)
    shape = tuple(int(s) for s in getattr(value, "shape", ()) or ())
    layout = "image" if backend == "cpu" else "chw" if backend == "gpu" else "patches"
    return Feature.shape_only(layout, shape, "unknown")


def item_from_sglang(item: Any, index: int):
    """Return the kit :class:`~kimi_viz.batch.Item` for one SGLang ``MultimodalDataItem``."""
    from .batch import DEFERRED_KEY, GRID_KEYS, Item
    from .manifest import jsonable

    data = _model_data(item)
    grids = {}
    for key in GRID_KEYS:
        rows = _grid_rows(_item_value(item, data, key))
        if rows is not None:
            grids[key] = rows
    deferred = _item_value(item, data, DEFERRED_KEY)
    deferred = jsonable(deferred) if deferred is not None else None
    backend = deferred.get("backend") if isinstance(deferred, dict) else None
    local = bool(_item_value(item, data, "encoder_local_preprocessed") or False)
    feature = _feature_of(getattr(item, "feature", None), backend)
    original_size = None
    shape = feature.shape
    if deferred is not None and len(shape) == 3 and feature.layout in ("image", "hwc"):
        original_size = (shape[1], shape[0])
    elif deferred is not None and len(shape) == 3 and feature.layout == "chw":
        original_size = (shape[2], shape[1])
    return Item(grids=grids, feature=feature, deferred=deferred, local_preprocessed=local,
                original_size=original_size, label=f"item {index}")


def _attention_tp(model: Any) -> tuple[int, int | None, str]:
    """Return ``(attn_tp_size, attn_tp_rank, where it came from)`` for the running process."""
    if model is not None and getattr(model, "use_data_parallel", True) is False:
        return 1, None, "use_data_parallel is off: every rank materializes every image"

    def from_dp_attention():
        from sglang.srt.layers import dp_attention

        return dp_attention.get_attention_tp_size(), dp_attention.get_attention_tp_rank()

    def from_runtime_context():
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        return parallel.attn_tp_size, parallel.attn_tp_rank

    for probe in (from_dp_attention, from_runtime_context):
        try:
            size, rank = probe()
            return int(size), int(rank), f"sglang {probe.__name__.replace('from_', '')}"
        except Exception:
            continue
    size = os.environ.get(ENV_TP_SIZE)
    rank = os.environ.get(ENV_TP_RANK)
    if size:
        try:
            return int(size), (int(rank) if rank else None), f"${ENV_TP_SIZE}"
        except ValueError:
            pass
    return 1, None, "unknown (assumed 1; pass --tp to triage)"


def _sglang_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        module = sys.modules.get("sglang")
        value = getattr(module, "__version__", None)
        return str(value) if value else None


def _code_variant(function: Any) -> tuple[str, str, str]:
    """Return ``(code path, "detected" | "assumed", how it was found)`` from SGLang's ``get_image_feature`` source.

    0.5.19 and later map backend-group positions through ``global_indices`` (post-fix); 0.5.18 has the
    deferred split (``DEFERRED_PREPROCESSING_KEY``) without it (pre-fix); 0.5.17 has neither and
    requires every feature to be a tensor (no-split). The method's own source decides; the module's
    source is read only when the method's cannot be.
    """
    import contextlib
    import inspect

    text = ""
    with contextlib.suppress(Exception):
        text = inspect.getsource(function)
    if not text:
        module = sys.modules.get(TARGET_MODULE)
        with contextlib.suppress(Exception):
            text = inspect.getsource(module) if module is not None else ""
    if "global_indices" in text:
        return "post-fix", "detected", "detected: SGLang maps shard-local indices through global_indices"
    if "DEFERRED_PREPROCESSING_KEY" in text or "kimi_k3_deferred_preprocessing" in text:
        return "pre-fix", "detected", "detected: deferred split without global_indices"
    if "must be a torch.Tensor" in text:
        return "no-split", "detected", "detected: no deferred split (every feature must be a tensor)"
    return "post-fix", "assumed", "not detected from the source; the recorded SGLang version decides"


def _processor_config(model: Any) -> dict | None:
    """Return the ``media_proc_cfg`` of the model's checkpoint image processor as plain JSON, or None."""
    from .manifest import jsonable

    for name in ("_encoder_image_processor", "image_processor", "_image_processor"):
        processor = getattr(model, name, None) if model is not None else None
        config = getattr(processor, "media_proc_cfg", None)
        if isinstance(config, dict):
            return jsonable(config)
    return None


def batch_from_call(model: Any, items: list, *, error: BaseException | None = None, function: Any = None):
    """Return a :class:`~kimi_viz.batch.Batch` describing one ``get_image_feature(items)`` call."""
    from . import __version__
    from .batch import Batch

    size, rank, tp_source = _attention_tp(model)
    variant, variant_how, variant_source = _code_variant(function)
    processor = _processor_config(model)
    outcome = "ok" if error is None else f"{type(error).__name__}: {error}"
    note = (f"captured in pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}; outcome: {outcome}; "
            f"attention TP from {tp_source}; code variant {variant_source}"
            + ("" if processor is not None else "; the model's checkpoint-processor config was not found"))
    return Batch(
        items=[item_from_sglang(item, i) for i, item in enumerate(items)],
        processor=processor,
        attn_tp_size=size,
        attn_tp_rank=rank,
        sglang_version=_sglang_version(),
        code_variant=variant,
        code_variant_source=variant_how,
        note=note,
        created_by=f"kimi-viz {__version__} capture",
    )


def _new_folder(out_dir: Path) -> Path:
    """Return a new, empty folder under ``out_dir`` named by time, pid and a counter."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    while True:
        with _counter_lock:
            count = next(_counter)
        folder = out_dir / f"{stamp}-pid{os.getpid()}-{count:04d}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


def record_call(model: Any, items: Any, out_dir: str | os.PathLike, *, redact: bool = False,
                error: BaseException | None = None, function: Any = None) -> Path | None:
    """Write a manifest of one call's items to a new folder under ``out_dir``; return it (None on failure).

    Never raises: a failure to capture is logged to stderr, so it can never mask the call's own error.
    """
    try:
        import traceback
        from pathlib import Path

        from .manifest import write_manifest

        batch = batch_from_call(model, list(items), error=error, function=function)
        folder = _new_folder(Path(out_dir))
        try:
            write_manifest(batch, folder, redact=redact)
        except Exception as exc:  # still keep what we can: the unvalidated JSON
            log(f"manifest did not validate ({exc}); writing it unchecked")
            write_manifest(batch, folder, redact=redact, check=False)
        if error is not None:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            (folder / "traceback.txt").write_text(text, encoding="utf-8")
        log(f"wrote {folder}" + (f" ({type(error).__name__}: {error})" if error is not None else ""))
        return folder
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into the server
        log(f"could not write a manifest ({type(exc).__name__}: {exc}); the original behaviour is unchanged")
        return None


# ------------------------------------------------------------------------------------------
# Wrapping the method
# ------------------------------------------------------------------------------------------
def wrap_method(cls: type, out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False,
                on_record: Callable[[Path], None] | None = None) -> bool:
    """Wrap ``cls.get_image_feature`` so failing (or all) calls are recorded; return False if already wrapped."""
    current = getattr(cls, TARGET_METHOD)
    if getattr(current, WRAPPED_ATTR, None) is not None:
        return False
    original = current
    out_dir = os.fspath(out_dir)

    def remember(folder: Path | None) -> None:
        if folder is not None and on_record is not None:
            try:
                on_record(folder)
            except Exception:  # noqa: BLE001 - a callback must not break the server
                pass

    if all_calls:
        @functools.wraps(original)
        def get_image_feature(self, items, *args, **kwargs):
            try:
                result = original(self, items, *args, **kwargs)
            except Exception as exc:
                remember(record_call(self, items, out_dir, redact=redact, error=exc, function=original))
                raise
            remember(record_call(self, items, out_dir, redact=redact, function=original))
            return result
    else:
        @functools.wraps(original)
        def get_image_feature(self, items, *args, **kwargs):
            try:
                return original(self, items, *args, **kwargs)
            except Exception as exc:
                remember(record_call(self, items, out_dir, redact=redact, error=exc, function=original))
                raise

    setattr(get_image_feature, WRAPPED_ATTR, original)
    get_image_feature.__kimi_viz_owned__ = TARGET_METHOD in cls.__dict__
    setattr(cls, TARGET_METHOD, get_image_feature)
    return True


def unwrap_method(cls: type) -> bool:
    """Restore the original ``get_image_feature`` of ``cls``; return False if it was not wrapped."""
    current = cls.__dict__.get(TARGET_METHOD)
    original = getattr(current, WRAPPED_ATTR, None)
    if original is None:
        return False
    if getattr(current, "__kimi_viz_owned__", True):
        setattr(cls, TARGET_METHOD, original)
    else:
        delattr(cls, TARGET_METHOD)
    return True


def wrap_module(module: Any, out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False,
                on_record: Callable[[Path], None] | None = None) -> type | None:
    """Wrap the model class of an imported ``kimi_k3`` module; return the class (None when it is missing)."""
    cls = getattr(module, TARGET_CLASS, None)
    if cls is None or not hasattr(cls, TARGET_METHOD):
        log(f"{getattr(module, '__name__', module)} has no {TARGET_CLASS}.{TARGET_METHOD}; nothing will be captured")
        return None
    wrap_method(cls, out_dir, redact=redact, all_calls=all_calls, on_record=on_record)
    return cls


class KimiK3ImportHook:
    """A ``sys.meta_path`` finder that calls ``on_loaded(module)`` right after ``kimi_k3`` is executed."""

    def __init__(self, on_loaded: Callable[[Any], None], target: str = TARGET_MODULE):
        self.on_loaded = on_loaded
        self.target = target
        self._local = _thread._local()   # threading.local, without importing threading

    def find_spec(self, fullname, path, target=None):
        """Return the real spec of the target module with its loader's ``exec_module`` wrapped."""
        if fullname != self.target or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._local.busy = False
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        hook = self

        def exec_module(module):
            original(module)
            try:
                hook.on_loaded(module)
            except Exception as exc:  # noqa: BLE001 - never break the import
                log(f"could not wrap {hook.target} ({type(exc).__name__}: {exc}); nothing will be captured")

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            log(f"the loader of {fullname} cannot be wrapped; nothing will be captured")
        return spec


def install_import_hook(out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False,
                        on_record: Callable[[Path], None] | None = None) -> KimiK3ImportHook | None:
    """Arrange for ``kimi_k3`` to be wrapped when imported (or wrap it now); return the hook installed."""
    def on_loaded(module):
        wrap_module(module, out_dir, redact=redact, all_calls=all_calls, on_record=on_record)

    module = sys.modules.get(TARGET_MODULE)
    if module is not None:
        on_loaded(module)
        return None
    hook = KimiK3ImportHook(on_loaded)
    sys.meta_path.insert(0, hook)
    return hook


def install_from_environment(environ: dict | None = None) -> KimiK3ImportHook | None:
    """Install the hook as ``kimi-viz capture`` asked through the environment; return it (None if off)."""
    environ = os.environ if environ is None else environ
    out_dir = environ.get(ENV_DIR)
    if not out_dir:
        return None
    return install_import_hook(out_dir, redact=_flag(environ.get(ENV_REDACT)), all_calls=_flag(environ.get(ENV_ALL)))


# ------------------------------------------------------------------------------------------
# In-process use
# ------------------------------------------------------------------------------------------
class CaptureSession:
    """What :func:`patch` records: the folder it writes under and every manifest written so far."""

    def __init__(self, out_dir: Path, redact: bool = False, all_calls: bool = False):
        self.out_dir = out_dir
        self.redact = redact
        self.all_calls = all_calls
        self.manifests: list[Path] = []

    def __repr__(self) -> str:
        return f"CaptureSession(out_dir={str(self.out_dir)!r}, manifests={len(self.manifests)})"


class patch:
    """Capture failing (or all) ``get_image_feature`` calls in this process while a ``with`` block runs.

    ``with patch(out_dir) as session:`` wraps the method now when ``sglang.srt.models.kimi_k3`` is
    already imported, else when it is imported; on exit everything is restored. The session
    (:class:`CaptureSession`) lists the manifests written.
    """

    def __init__(self, out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False):
        from pathlib import Path

        self.session = CaptureSession(Path(out_dir), redact, all_calls)
        self._hook: KimiK3ImportHook | None = None
        self._wrapped: list[type] = []

    def _on_loaded(self, module: Any) -> None:
        session = self.session
        cls = getattr(module, TARGET_CLASS, None)
        if cls is None or not hasattr(cls, TARGET_METHOD):
            wrap_module(module, session.out_dir)  # logs why nothing is captured
        elif wrap_method(cls, session.out_dir, redact=session.redact, all_calls=session.all_calls,
                         on_record=session.manifests.append):
            self._wrapped.append(cls)

    def __enter__(self) -> CaptureSession:
        module = sys.modules.get(TARGET_MODULE)
        if module is not None:
            self._on_loaded(module)
        else:
            self._hook = KimiK3ImportHook(self._on_loaded)
            sys.meta_path.insert(0, self._hook)
        return self.session

    def __exit__(self, *exc_info: Any) -> None:
        if self._hook is not None and self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        for cls in self._wrapped:
            unwrap_method(cls)
        self._wrapped.clear()


# ------------------------------------------------------------------------------------------
# Running a command under capture
# ------------------------------------------------------------------------------------------
def capture_environment(out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False,
                        base: dict | None = None) -> dict[str, str]:
    """Return the environment for a captured command: the shim first on PYTHONPATH plus the capture settings."""
    env = dict(os.environ if base is None else base)
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(shim_dir()) + (os.pathsep + existing if existing else "")
    from pathlib import Path

    env[ENV_DIR] = str(Path(out_dir).resolve())
    env[ENV_REDACT] = "1" if redact else "0"
    env[ENV_ALL] = "1" if all_calls else "0"
    env[ENV_PACKAGE_ROOT] = str(Path(__file__).resolve().parent.parent)
    return env


def run_captured(command: list[str], out_dir: str | os.PathLike, *, redact: bool = False,
                 all_calls: bool = False) -> int:
    """Run ``command`` with capture on; return its exit code (128+N when killed by signal N)."""
    import contextlib
    import signal
    import subprocess
    from pathlib import Path

    from .errors import CaptureError

    if not command:
        raise CaptureError("no command to run; usage: kimi-viz capture --out DIR -- COMMAND [ARGS...]")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    env = capture_environment(out_dir, redact=redact, all_calls=all_calls)
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        log(f"command not found: {command[0]}")
        return 127
    except PermissionError:
        log(f"command is not executable: {command[0]}")
        return 126
    forwarded = {}

    def forward(signum, _frame):
        with contextlib.suppress(Exception):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(Exception):
            forwarded[signum] = signal.signal(signum, forward)
    previous_int = None
    with contextlib.suppress(Exception):
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child gets Ctrl-C itself
    try:
        code = child.wait()
    finally:
        for signum, handler in forwarded.items():
            with contextlib.suppress(Exception):
                signal.signal(signum, handler)
        if previous_int is not None:
            with contextlib.suppress(Exception):
                signal.signal(signal.SIGINT, previous_int)
    return 128 - code if code < 0 else code


def captured_manifests(out_dir: str | os.PathLike) -> list[Path]:
    """Return the manifest folders under ``out_dir``, oldest first."""
    from pathlib import Path

    root = Path(out_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())
