"""The harness of the hostile-input suite (``tests/test_hostile_*.py``) and the tests of the harness itself.

Every hostile case runs the real command line in a child process (``python -m kimi_viz ...``) under
an address-space cap, and is held to the promise the kit makes for bad input:

* the exit code is 2 (or the documented verdict code: 0 clean, 1 error reproduced, 3 silent
  mismatch, 4 not reproduced, 5 recorded ok but the replay fails);
* standard error holds one line, ``kimi-viz COMMAND: error: ...``, naming the input (no traceback);
* the child spends at most :data:`CPU_LIMIT` seconds of CPU and its peak RSS (``VmHWM`` of exactly
  that child, written at its exit) stays under :data:`RSS_LIMIT`; wall-clock time is only a hang
  guard (:data:`HANG_GUARD_S`, a minute: a child still running then is killed and fails), so the
  suite passes on a busy machine;
* nothing is written into the working folder it runs in.

The cases of one file are built first, then run together, as many at a time as there are CPUs
(:func:`run_cases`), so the whole suite stays fast on a 2-core machine; each case is still its own
process with its own time and memory measured. Big inputs (sparse files, zip bombs, PNG headers
declaring huge sizes) are built at test time, never committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CPU_LIMIT = 10.0  # seconds of CPU (user + system) a hostile case may use, start-up included
HANG_GUARD_S = 60.0  # wall-clock seconds after which a child is taken to hang and is killed
RSS_LIMIT = 1 << 30  # peak resident memory of the child
AS_LIMIT = 3 << 30  # its address space: a runaway allocation fails fast instead of swapping the machine
EXIT_CODES = {0, 1, 2, 3, 4, 5}

# The child caps its address space, and at exit writes its own peak RSS (VmHWM: this process image
# only; ru_maxrss would also count the test process's memory at fork time) to the file named next.
_BOOT = (
    "import atexit, resource, runpy, sys\n"
    "limit = int(sys.argv.pop(1))\n"
    "report = sys.argv.pop(1)\n"
    "def _peak():\n"
    "    with open('/proc/self/status') as f, open(report, 'w') as out:\n"
    "        out.write(next(l for l in f if l.startswith('VmHWM:')).split()[1])\n"
    "atexit.register(_peak)\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "sys.argv[0] = 'kimi-viz'\n"
    "runpy.run_module('kimi_viz', run_name='__main__', alter_sys=True)\n"
)


@dataclass
class Run:
    """What one child process did: exit code, output, wall time, CPU time and peak RSS (bytes)."""

    args: list[str]
    code: int
    stdout: bytes
    stderr: bytes
    wall: float
    cpu: float
    max_rss: int
    timed_out: bool

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "backslashreplace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "backslashreplace")

    def describe(self) -> str:
        return (
            f"kimi-viz {' '.join(map(repr, self.args))}: exit {self.code}, {self.wall:.1f} s wall, "
            f"{self.cpu:.1f} s CPU, {self.max_rss / 2**20:.0f} MiB peak RSS"
            f"{', TIMED OUT' if self.timed_out else ''}\n--- stderr:\n{self.err[-3000:]}"
            f"\n--- stdout:\n{self.out[-1500:]}"
        )


def child_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment of a hostile run: a private HOME and matplotlib cache, no user site."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_VIZ_", "PYTHON"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        MPLCONFIGDIR=str(home / "mpl"),
        PYTHONNOUSERSITE="1",
        PYTHONUTF8="0",
        OMP_NUM_THREADS="1",
        LC_ALL=env.get("LC_ALL", "C.UTF-8"),
    )
    env.update(extra or {})
    return env


def run_cli(
    args: Sequence[str | bytes],
    *,
    cwd: Path,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = HANG_GUARD_S,
    as_limit: int = AS_LIMIT,
) -> Run:
    """Run ``python -m kimi_viz ARGS`` (under an address-space cap) and return what it did.

    The child is killed (its whole session) ``timeout`` seconds after it starts; ``max_rss`` is the
    child's own ``ru_maxrss`` from ``os.wait4``, so runs in parallel threads never mix up.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    report = Path(tempfile.mkdtemp(prefix="kv-rss-")) / "peak"
    argv: list[str | bytes] = [sys.executable, "-c", _BOOT, str(as_limit), str(report), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin)
            inp.seek(0)
        started = time.monotonic()
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env if env is not None else child_env(cwd.parent / (cwd.name + "-home")),
            stdin=inp if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout:
                timed_out = True
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.01)
        wall = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        try:
            peak = int(report.read_text()) * 1024
        except (OSError, ValueError):  # killed before it could say: the kernel's figure (an upper bound)
            peak = usage.ru_maxrss * 1024
        finally:
            report.unlink(missing_ok=True)
            report.parent.rmdir()
        return Run(
            [a if isinstance(a, str) else a.decode("utf-8", "backslashreplace") for a in args],
            child.returncode,
            out.read(),
            err.read(),
            wall,
            usage.ru_utime + usage.ru_stime,
            peak,
            timed_out,
        )


@dataclass
class Case:
    """One hostile input: how to build it, how to call the CLI on it, and what must come back.

    ``build(folder)`` makes the input under ``folder`` and returns the CLI arguments. ``words`` must
    all appear in the one error line (the input's name, what was expected); ``code`` is the exit
    code wanted (2 for bad input). ``check(run, folder)`` adds case-specific assertions (files not
    written, output escaped, ...). ``one_line=False`` allows more than the error line on stderr
    (a warning before a successful run).
    """

    name: str
    build: Callable[[Path], list]
    words: tuple[str, ...] = ()
    code: int | tuple[int, ...] = 2
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)
    check: Callable[[Run, Path], None] | None = None
    one_line: bool = True
    timeout: float = HANG_GUARD_S
    marks: tuple = ()
    error_line: bool = False  # the one error line is wanted with another exit code too (capture's 126/127)

    def param(self):
        return pytest.param(self, id=self.name, marks=list(self.marks))


def run_cases(cases: Sequence[Case], root: Path, workers: int | None = None) -> dict[str, tuple[Run, Path]]:
    """Build every case's input under ``root/<name>``, run them all (CPU-count at a time), return each run."""
    jobs = []
    for case in cases:
        folder = root / case.name
        folder.mkdir(parents=True)
        args = case.build(folder)
        cwd = folder / "cwd"
        cwd.mkdir()
        env = child_env(folder / "home", case.env)
        jobs.append((case, folder, args, cwd, env))

    def one(job):
        case, folder, args, cwd, env = job
        return case.name, (run_cli(args, cwd=cwd, stdin=case.stdin, env=env, timeout=case.timeout), folder)

    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(one, jobs))


CONTROL = {chr(c) for c in [*range(0, 9), *range(11, 32), 127]}


def assert_no_control_characters(run: Run) -> None:
    """Assert neither stream carries a control character other than newline and tab (no ANSI, no BEL, no CR)."""
    for name, text in (("stdout", run.out), ("stderr", run.err)):
        found = sorted({repr(c) for c in text if c in CONTROL})
        assert not found, f"raw control characters {found} on {name}: " + run.describe()


def assert_bounded(run: Run, codes: set[int] = EXIT_CODES) -> None:
    """Assert the run did not hang, stayed under the CPU and memory bounds, and printed no traceback."""
    assert not run.timed_out, f"still running after {HANG_GUARD_S} s (a hang): " + run.describe()
    assert run.cpu < CPU_LIMIT, f"used more than {CPU_LIMIT} s of CPU: " + run.describe()
    assert run.max_rss < RSS_LIMIT, run.describe()
    assert "Traceback" not in run.err and "Traceback" not in run.out, run.describe()
    assert run.code in codes, run.describe()


def error_line(run: Run, command: str) -> str:
    """Return the one line of stderr, after asserting it is the kit's one-line error for ``command``."""
    lines = run.err.splitlines()
    assert len(lines) == 1, "expected exactly one line on stderr: " + run.describe()
    assert lines[0].startswith(f"kimi-viz {command}: error: "), run.describe()
    return lines[0]


def check_case(case: Case, run: Run, folder: Path) -> None:
    """Hold one run to the promise: bounded, the exit code wanted, one line naming the input, cwd untouched."""
    wanted = case.code if isinstance(case.code, tuple) else (case.code,)
    assert_bounded(run, EXIT_CODES | set(wanted))
    assert run.code in wanted, run.describe()
    if run.code == 2 or case.error_line:
        command = run.args[0]
        if case.one_line:
            line = error_line(run, command)
        else:
            line = run.err.splitlines()[-1]
            assert line.startswith(f"kimi-viz {command}: error: "), run.describe()
        for word in case.words:
            assert word in line, f"{word!r} missing from the error line: " + run.describe()
    assert not any((folder / "cwd").iterdir()), "wrote into the working folder: " + run.describe()
    if case.check is not None:
        case.check(run, folder)


# ------------------------------------------------------------------------------------------
# The harness's own tests
# ------------------------------------------------------------------------------------------
def test_the_harness_measures_exit_code_memory_and_time(tmp_path):
    run = run_cli(["explain", "--list"], cwd=tmp_path / "cwd")
    assert run.code == 0 and not run.timed_out, run.describe()
    assert 10 * 2**20 < run.max_rss < RSS_LIMIT
    assert 0 < run.cpu < CPU_LIMIT
    assert "feature-length" in run.out


def test_the_harness_reports_one_error_line(tmp_path):
    run = run_cli(["explain", "--file", str(tmp_path / "missing.log")], cwd=tmp_path / "cwd")
    assert run.code == 2, run.describe()
    assert "missing.log" in error_line(run, "explain")


def test_the_harness_kills_a_hang(tmp_path):
    started = time.monotonic()
    run = run_cli(["capture", "--out", str(tmp_path / "out"), "--", "sleep", "600"], cwd=tmp_path / "cwd", timeout=2)
    # killed at its guard, long before the sleep ends (the minute is itself only a hang guard)
    assert run.timed_out and time.monotonic() - started < HANG_GUARD_S, run.describe()
