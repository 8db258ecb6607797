"""Running a command under capture: the environment, the child process, and the manifests it left.

:func:`run_captured` runs a command with the ``sitecustomize`` shim (:func:`shim_dir`) first on
``PYTHONPATH`` and the capture settings in the environment (:func:`capture_environment`), forwarding
signals, and returns its exit code; :func:`captured_manifests` lists what it recorded.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..errors import CaptureError
from ..files import prepare_folder
from ..terminal import escape_value
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


def command_problem(command: list[str], env: dict[str, str] | None = None) -> tuple[int, str] | None:
    """Return ``(exit code, message)`` when ``command`` cannot be started (127 not found, 126 not executable).

    The codes are the shell's; the message names the program and says what to do. None: it can run.
    """
    import shutil

    program = command[0]
    shown = repr(escape_value(program))
    hint = "give the program to run after --, e.g. -- python -m sglang.launch_server --model-path ..."
    if "/" in program:
        path = Path(program)
        if not path.exists():
            return 127, f"command not found: {shown} does not exist; check the path ({hint})"
        if path.is_dir():
            return 126, f"command not executable: {shown} is a folder; {hint}"
        if not os.access(path, os.X_OK):
            return (
                126,
                f"command not executable: {shown} has no execute permission; "
                "chmod +x it or run it with its interpreter",
            )
        return None
    search = (env or os.environ).get("PATH", os.defpath)
    if shutil.which(program, path=search):
        return None
    for folder in search.split(os.pathsep):
        candidate = Path(folder or ".") / program
        if candidate.is_file():
            return 126, (
                f"command not executable: {shown} is found on PATH at {escape_value(candidate)!r} but is not "
                "executable; chmod +x it or run it with its interpreter"
            )
    return 127, f"command not found: {shown} is not on PATH; check the name or give its full path ({hint})"


def run_captured(
    command: list[str], out_dir: str | os.PathLike, *, redact: bool = False, all_calls: bool = False
) -> int:
    """Run ``command`` with capture on; return its exit code (128+N when killed by signal N)."""
    import signal
    import subprocess

    if not command:
        raise CaptureError("no command to run; usage: kimi-viz capture --out DIR -- COMMAND [ARGS...]")
    prepare_folder(out_dir, what="--out")
    env = capture_environment(out_dir, redact=redact, all_calls=all_calls)
    try:
        child = subprocess.Popen(command, env=env)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        code, message = command_problem(command, env) or (
            126 if isinstance(exc, PermissionError) else 127,
            f"command cannot be started: {command[0]!r} ({exc.strerror or exc})",
        )
        log(f"error: {message}")
        return code
    previous = {}  # the handlers replaced while the child runs, restored after it

    def forward(signum, _frame):
        with contextlib.suppress(Exception):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(Exception):
            previous[signum] = signal.signal(signum, forward)
    with contextlib.suppress(Exception):
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child gets Ctrl-C itself
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(Exception):
                signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def captured_manifests(out_dir: str | os.PathLike) -> list[Path]:
    """Return the manifest folders under ``out_dir``, oldest first."""
    root = Path(out_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())
