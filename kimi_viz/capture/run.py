"""Running a command under capture: the environment, the child process, and the manifests it left.

:func:`run_captured` runs a command with the ``sitecustomize`` shim (:func:`shim_dir`) first on
``PYTHONPATH`` and the capture settings in the environment (:func:`capture_environment`), forwarding
signals, and returns its exit code; :func:`captured_manifests` lists what it recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

from .names import ENV_ALL, ENV_DIR, ENV_PACKAGE_ROOT, ENV_REDACT, log


def shim_dir() -> Path:
    """Return the folder holding the ``sitecustomize`` shim that ``kimi-viz capture`` puts on PYTHONPATH."""
    return Path(__file__).resolve().parent / "_shim"


def capture_environment(
    out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False, base: dict | None = None
) -> dict[str, str]:
    """Return the environment for a captured command: the shim first on PYTHONPATH plus the capture settings."""
    env = dict(os.environ if base is None else base)
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(shim_dir()) + (os.pathsep + existing if existing else "")
    env[ENV_DIR] = str(Path(out_dir).resolve())
    env[ENV_REDACT] = "1" if redact else "0"
    env[ENV_ALL] = "1" if all_calls else "0"
    env[ENV_PACKAGE_ROOT] = str(Path(__file__).resolve().parents[2])
    return env


def run_captured(
    command: list[str], out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False
) -> int:
    """Run ``command`` with capture on; return its exit code (128+N when killed by signal N)."""
    import contextlib
    import signal
    import subprocess

    from ..errors import CaptureError

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
    root = Path(out_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())
