"""Start-up shim of ``kimi-viz capture``: every Python process started under it records failing
``KimiK3ForConditionalGeneration.get_image_feature`` calls.

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has one;
``kimi-viz capture`` puts this folder first on ``PYTHONPATH``. This file then

1. runs the ``sitecustomize`` that would otherwise have been found (so an existing one keeps working),
2. when ``KIMI_VIZ_CAPTURE_DIR`` is set, installs the import hook of :mod:`kimi_viz.capture.hook`
   (nothing else changes until ``sglang.srt.models.kimi_k3``, or the forward path's
   ``sglang.srt.managers.mm_schedule`` / ``mm_utils``, is imported).

It imports only what the interpreter has already loaded, and it never raises: any problem is
printed to stderr and the process continues unchanged.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _say(message):
    try:
        sys.stderr.write("kimi-viz capture: %s\n" % message)
    except Exception:
        pass


def _run_next_sitecustomize():
    """Execute the sitecustomize this shim shadows, if there is one."""
    from importlib.machinery import PathFinder

    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = type(sys)("sitecustomize")
    module.__file__ = spec.origin
    module.__spec__ = spec
    module.__loader__ = spec.loader
    sys.modules["_kimi_viz_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


def _install():
    if not os.environ.get("KIMI_VIZ_CAPTURE_DIR"):
        return
    try:
        from kimi_viz.capture.hook import install_from_environment
    except ImportError:
        root = os.environ.get("KIMI_VIZ_CAPTURE_PACKAGE_ROOT")
        if not root or root in sys.path:
            raise
        sys.path.append(root)  # last, so it never shadows anything the command imports
        from kimi_viz.capture.hook import install_from_environment

    install_from_environment()


try:
    _run_next_sitecustomize()
except Exception as exc:
    _say("the existing sitecustomize raised %s: %s" % (type(exc).__name__, exc))

try:
    _install()
except Exception as exc:
    _say("could not install the capture hook (%s: %s); running without capture" % (type(exc).__name__, exc))
