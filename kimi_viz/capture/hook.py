"""Record the batch of a failing ``get_image_feature`` call in a live SGLang process: the start-up part.

:func:`install_import_hook` puts a ``sys.meta_path`` finder in front of the import system; when
``sglang.srt.models.kimi_k3`` is imported, the finder lets the real loader run the module and then
wraps ``KimiK3ForConditionalGeneration.get_image_feature``. The wrapper calls the original; when it
raises (or on every call with ``all_calls``) it writes a manifest of the call's items to a new
folder (:func:`kimi_viz.capture.record.record_call`) and re-raises the very same exception object.
Writing a manifest never masks the original error: a capture failure is logged to stderr and the
original exception continues.

The same finder wraps ``get_embedding_and_mask`` in ``sglang.srt.managers.mm_schedule`` and
``sglang.srt.managers.mm_utils`` (where SGLang looks it up) when those modules are imported: while it
runs, its arguments (the prefill batch's image items, ``items_size``, prefix and extend lengths,
offsets) and its caller's frame sit on a per-thread stack (:func:`running_forward`), so a failing
``get_image_feature`` call inside it is recorded with the forward context
(:mod:`kimi_viz.capture.context`): which request and image each item came from. The wrapper only
pushes and pops that entry; the call, its result and its exception are SGLang's own.

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
    FORWARD_FUNCTION,
    FORWARD_MODULES,
    TARGET_CLASS,
    TARGET_METHOD,
    TARGET_MODULE,
    WRAPPED_ATTR,
    log,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - annotations only
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _record(
    model: Any, items: Any, out_dir: str, *, redact: bool, error: BaseException | None, function: Any
) -> Path | None:
    """Record one call with :func:`kimi_viz.capture.record.record_call`, imported now; never raises."""
    try:
        forward = running_forward()
        from .record import record_call
    except BaseException as exc:
        log(f"could not write a manifest ({type(exc).__name__}: {exc}); the original behaviour is unchanged")
        return None
    return record_call(model, items, out_dir, redact=redact, error=error, function=function, forward=forward)


# ------------------------------------------------------------------------------------------
# The forward context: this thread's running get_embedding_and_mask
# ------------------------------------------------------------------------------------------
FORWARD_PARAMETERS = (  # get_embedding_and_mask's parameters, the same in 0.5.17 ... 0.5.23
    "data_embedding_func",
    "embedding_items",
    "placeholder_tensor",
    "input_ids",
    "items_size",
    "prefix_length",
    "extend_length",
    "items_offset_list",
)
_running = _thread._local()  # .stack: (function, args, kwargs, caller frame) of each running call, innermost last
_getframe = sys._getframe


class ForwardCall:
    """One running ``get_embedding_and_mask``: the function, its arguments and the frame that called it."""

    __slots__ = ("function", "args", "kwargs", "caller")

    def __init__(self, function: Any, args: tuple, kwargs: dict, caller: Any):
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.caller = caller

    def argument(self, name: str) -> Any:
        """Return the argument ``name`` as SGLang passed it (by keyword or by position); KeyError when not passed."""
        if name in self.kwargs:
            return self.kwargs[name]
        index = FORWARD_PARAMETERS.index(name)
        if index < len(self.args):
            return self.args[index]
        raise KeyError(name)


def running_forward() -> ForwardCall | None:
    """Return this thread's innermost running ``get_embedding_and_mask`` (None when none runs)."""
    stack = getattr(_running, "stack", None)
    return ForwardCall(*stack[-1]) if stack else None


def wrap_forward_function(module: Any) -> Callable | None:
    """Wrap ``module.get_embedding_and_mask`` so it is :func:`running_forward` while it runs; return the wrapper.

    Returns None when the module has no such function or it is already wrapped.
    """
    original = getattr(module, FORWARD_FUNCTION, None)
    if not callable(original) or getattr(original, WRAPPED_ATTR, None) is not None:
        return None

    @functools.wraps(original)
    def get_embedding_and_mask(*args, **kwargs):
        try:  # the bookkeeping can never change the call: on any problem, call SGLang's own as it is
            stack = _running.stack
        except AttributeError:
            stack = _running.stack = []
        try:
            stack.append((original, args, kwargs, _getframe(1)))
        except Exception:
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            stack.pop()

    setattr(get_embedding_and_mask, WRAPPED_ATTR, original)
    setattr(module, FORWARD_FUNCTION, get_embedding_and_mask)
    return get_embedding_and_mask


def unwrap_forward_function(module: Any, wrappers: Any = None) -> bool:
    """Restore ``module.get_embedding_and_mask`` (only when it is one of ``wrappers``, if given); True if done."""
    current = getattr(module, FORWARD_FUNCTION, None)
    original = getattr(current, WRAPPED_ATTR, None)
    if original is None or (wrappers is not None and not any(current is w for w in wrappers)):
        return False
    setattr(module, FORWARD_FUNCTION, original)
    return True


def _wrap_forward_quietly(module: Any) -> Callable | None:
    try:
        return wrap_forward_function(module)
    except Exception as exc:
        log(
            f"could not wrap {getattr(module, '__name__', module)}.{FORWARD_FUNCTION} ({type(exc).__name__}: {exc}); "
            "calls are still captured, without their forward context"
        )
        return None


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
    """A ``sys.meta_path`` finder that calls ``on_loaded(module)`` right after ``kimi_k3`` is executed.

    ``others`` maps more module names to the function to call right after each is executed (the
    forward path's modules, :data:`FORWARD_MODULES`).
    """

    def __init__(
        self,
        on_loaded: Callable[[Any], Any],
        target: str = TARGET_MODULE,
        others: Mapping[str, Callable[[Any], Any]] | None = None,
    ):
        self.on_loaded = on_loaded
        self.target = target
        self.targets = {**(others or {}), target: on_loaded}
        self._local = _thread._local()  # threading.local, without importing threading

    def find_spec(self, fullname, path, target=None):
        """Return the real spec of a target module with its loader's ``exec_module`` wrapped."""
        on_loaded = self.targets.get(fullname)
        if on_loaded is None or getattr(self._local, "busy", False):
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

        def exec_module(module):
            original(module)
            try:
                on_loaded(module)
            except Exception as exc:
                log(f"could not wrap {fullname} ({type(exc).__name__}: {exc}); nothing will be captured from it")

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            log(f"the loader of {fullname} cannot be wrapped; nothing will be captured")
        return spec


def _forward_modules(now: Callable[[Any], Any], later: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    """Call ``now`` on each forward-pass module already imported; return ``{name: later}`` for the others."""
    others: dict[str, Callable[[Any], Any]] = {}
    for name in FORWARD_MODULES:
        loaded = sys.modules.get(name)
        if loaded is not None:
            now(loaded)
        else:
            others[name] = later
    return others


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

    others = _forward_modules(now=_wrap_forward_quietly, later=wrap_forward_function)
    module = sys.modules.get(TARGET_MODULE)
    if module is not None:
        on_loaded(module)
        if not others:
            return None
    hook = KimiK3ImportHook(on_loaded, others=others)  # a module already imported is never looked up again
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
    already imported, else when it is imported (and ``get_embedding_and_mask`` on the forward path
    the same way); on exit everything is restored. The session (:class:`CaptureSession`) lists the
    manifests written.
    """

    def __init__(self, out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False):
        from pathlib import Path

        self.session = CaptureSession(Path(out_dir), redact, all_calls)
        self._hook: KimiK3ImportHook | None = None
        self._wrapped: list[type] = []
        self._forward_modules: list[Any] = []  # the forward path's modules seen, and the wrappers made for them
        self._forward_wrappers: list[Callable] = []

    def _on_forward_loaded(self, module: Any) -> None:
        wrapper = _wrap_forward_quietly(module)
        if wrapper is not None:
            self._forward_wrappers.append(wrapper)
        self._forward_modules.append(module)  # mm_utils may hold mm_schedule's wrapper, imported by name

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
        others = _forward_modules(now=self._on_forward_loaded, later=self._on_forward_loaded)
        module = sys.modules.get(TARGET_MODULE)
        if module is not None:
            self._on_loaded(module)
        if module is None or others:  # a module already imported is never looked up again
            self._hook = KimiK3ImportHook(self._on_loaded, others=others)
            sys.meta_path.insert(0, self._hook)
        return self.session

    def __exit__(self, *exc_info: Any) -> None:
        if self._hook is not None and self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        for cls in self._wrapped:
            unwrap_method(cls)
        self._wrapped.clear()
        for module in self._forward_modules:
            unwrap_forward_function(module, self._forward_wrappers)
        self._forward_modules.clear()
        self._forward_wrappers.clear()
