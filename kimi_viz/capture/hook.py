"""Record the batch of a failing ``get_image_feature`` call in a live SGLang process: the start-up part.

:func:`install_import_hook` puts a ``sys.meta_path`` finder in front of the import system; when
``sglang.srt.models.kimi_k3`` is imported, the finder lets the real loader run the module and then
wraps ``KimiK3ForConditionalGeneration.get_image_feature``. The wrapper calls the original; when it
raises (or on every call with ``all_calls``) it writes a manifest of the call's items to a new
folder (:func:`kimi_viz.capture.record.record_call`) and re-raises the very same exception object.
Writing a manifest never masks the original error: a capture failure is logged to stderr and the
original exception continues.

:func:`patch` does the same inside one Python session, as a context manager. ``kimi-viz capture``
(:mod:`kimi_viz.capture.run`) runs a command with the ``sitecustomize`` shim of
``kimi_viz/capture/_shim`` on ``PYTHONPATH``, which calls :func:`install_from_environment` in every
Python process the command starts.

The shim imports this module in every Python process at start-up, so only modules the
interpreter has already loaded are imported at module level (``_thread`` rather than
``threading``; no pathlib, dataclasses, typing or importlib.abc). Turning a call into a manifest
(:mod:`kimi_viz.capture.record`, the manifest writer, torch) is imported only when a call is
recorded.
"""

from __future__ import annotations

import _thread
import functools
import os
import sys

from .names import (  # noqa: F401 - re-exported: the names a captured process and the recorder share
    ENV_ALL,
    ENV_DIR,
    ENV_PACKAGE_ROOT,
    ENV_REDACT,
    ENV_TP_RANK,
    ENV_TP_SIZE,
    TARGET_CLASS,
    TARGET_METHOD,
    TARGET_MODULE,
    WRAPPED_ATTR,
    log,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - annotations only
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _record(
    model: Any, items: Any, out_dir: str, *, redact: bool, error: BaseException | None, function: Any
) -> Path | None:
    """Record one call with :func:`kimi_viz.capture.record.record_call`, imported now; never raises."""
    try:
        from .record import record_call
    except BaseException as exc:
        log(f"could not write a manifest ({type(exc).__name__}: {exc}); the original behaviour is unchanged")
        return None
    return record_call(model, items, out_dir, redact=redact, error=error, function=function)


# ------------------------------------------------------------------------------------------
# Wrapping the method
# ------------------------------------------------------------------------------------------
def wrap_method(
    cls: type,
    out_dir: str | os.PathLike,
    *,
    redact: bool = False,
    all_calls: bool = False,
    on_record: Callable[[Path], None] | None = None,
) -> bool:
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
            except Exception:
                pass

    if all_calls:

        @functools.wraps(original)
        def get_image_feature(self, items, *args, **kwargs):
            try:
                result = original(self, items, *args, **kwargs)
            except Exception as exc:
                remember(_record(self, items, out_dir, redact=redact, error=exc, function=original))
                raise
            remember(_record(self, items, out_dir, redact=redact, error=None, function=original))
            return result
    else:

        @functools.wraps(original)
        def get_image_feature(self, items, *args, **kwargs):
            try:
                return original(self, items, *args, **kwargs)
            except Exception as exc:
                remember(_record(self, items, out_dir, redact=redact, error=exc, function=original))
                raise

    setattr(get_image_feature, WRAPPED_ATTR, original)
    setattr(get_image_feature, "__kimi_viz_owned__", TARGET_METHOD in cls.__dict__)  # noqa: B010
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


def wrap_module(
    module: Any,
    out_dir: str | os.PathLike,
    *,
    redact: bool = False,
    all_calls: bool = False,
    on_record: Callable[[Path], None] | None = None,
) -> type | None:
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
        self._local = _thread._local()  # threading.local, without importing threading

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
            except Exception as exc:
                log(f"could not wrap {hook.target} ({type(exc).__name__}: {exc}); nothing will be captured")

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            log(f"the loader of {fullname} cannot be wrapped; nothing will be captured")
        return spec


def install_import_hook(
    out_dir: str | os.PathLike,
    *,
    redact: bool = False,
    all_calls: bool = False,
    on_record: Callable[[Path], None] | None = None,
) -> KimiK3ImportHook | None:
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


def install_from_environment(environ: Any = None) -> KimiK3ImportHook | None:
    """Install the hook as ``kimi-viz capture`` asked through the environment; return it (None if off)."""
    env = os.environ if environ is None else environ
    out_dir = env.get(ENV_DIR)
    if not out_dir:
        return None
    return install_import_hook(out_dir, redact=_flag(env.get(ENV_REDACT)), all_calls=_flag(env.get(ENV_ALL)))


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
        elif wrap_method(
            cls, session.out_dir, redact=session.redact, all_calls=session.all_calls, on_record=session.manifests.append
        ):
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
