"""A real release's start-up lines, and the launch command that made them, read by the kit as the flags typed.

Runs in the real-SGLang lane. For the venv's own release and its guests (``server_args_probe.HOSTS``), each
launch command sets one flag the kit models (``tests/server_cases.py``); the release's own ``prepare_server_args``
parses and resolves it on the CPU (``startup_line_probe.py``) and prints its start-up line exactly as its engine
logs it. The kit then reads that line (``--server-log``) and the command (``--server``), and for every flag:

* the value the kit reads from the real line is the value the real line printed (a flag the CPU resolution
  changed is read as printed: what the server ran);
* where the release printed the value given, the kit's setting equals the same flag typed;
* the kit's reading of the command equals the flag typed, always.

0.5.17 and 0.5.18 refuse the extra buffer on a CPU, so their commands also carry ``--disable-overlap-schedule
--mamba-scheduler-strategy no_buffer`` (typed too); a flag the release lacks is skipped for it, and a command the
release refuses on the CPU (there: the extra buffer and CUDA IPC need a GPU; no_buffer needs page 1) is counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from server_cases import CASES

from kimi_viz._whatif.deployment import DeploymentInput, read_deployment
from kimi_viz.server_args import args_of

from .lane import RELEASE, record
from .server_args_probe import clean_environment
from .test_server_args_parity import releases_here, sources

PROBE = Path(__file__).resolve().parent / "startup_line_probe.py"
OLD = ("0.5.17", "0.5.18")
OLD_BASE = ["--disable-overlap-schedule", "--mamba-scheduler-strategy", "no_buffer"]
OLD_TYPED = {"disable_overlap_schedule": True, "mamba_radix_cache_strategy": "no_buffer"}


def words(release: str, dest: str, value: object) -> list[str]:
    spec = args_of(release).by_dest[dest]
    return [spec.options[0]] if value is True else [spec.options[0], str(value)]


def real_lines(release: str, commands: list[list[str]]) -> list[str | None]:
    """Return the start-up line ``release`` prints for each command (None where it refuses it on the CPU)."""
    pythonpath = None if release == RELEASE else str(sources() / release)
    done = subprocess.run(
        [sys.executable, str(PROBE)],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        timeout=900,
        env=clean_environment(pythonpath),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def kit_value(deployment, field: str):
    if field == "tp":
        return deployment.tp_size
    record_name, name = field.split(".")
    return getattr(deployment.load if record_name == "load" else deployment.settings, name)


def test_a_real_start_up_line_and_its_launch_command_read_as_the_flags_typed(tmp_path):
    if RELEASE is None:
        pytest.skip("no SGLang here")
    lines_read = as_printed = as_typed = commands_read = skipped = refused = 0
    problems: list[str] = []
    for release in releases_here(RELEASE):
        base = OLD_BASE if release in OLD else []
        cases = [case for case in CASES if case[0] in args_of(release).by_dest]
        skipped += len(CASES) - len(cases)
        commands = [
            [*base, *words(release, dest, value), *([] if dest == "tp_size" else ["--tp", "1"])]
            for dest, value, _, _ in cases
        ]
        lines = real_lines(release, commands)
        for (dest, value, field, typed_value), command, line in zip(cases, commands, lines):
            typed_load = dict(OLD_TYPED) if release in OLD else {}
            record_name, _, name = field.partition(".")
            typed = read_deployment(
                DeploymentInput(
                    sglang_version=release,
                    tp_size=typed_value if field == "tp" else 1,
                    typed_load={**typed_load, name: typed_value} if record_name == "load" else typed_load,
                    typed_settings={name: typed_value} if record_name == "settings" else {},
                )
            )
            shell = "python -m sglang.launch_server --model-path /models/Kimi-K3 " + " ".join(command)
            from_command = read_deployment(DeploymentInput(server=shell, sglang_version=release))
            commands_read += 1
            if kit_value(from_command, field) != kit_value(typed, field):
                problems.append(f"{release} {dest}: the command reads {kit_value(from_command, field)!r}")
            if line is None:  # refused on the CPU (0.5.17/0.5.18: no extra buffer, no CUDA IPC; no_buffer needs page 1)
                refused += 1
                continue
            log = tmp_path / f"{release}-{dest}.log"
            log.write_text(f"[2026-12-01 00:00:00] {line}\n")
            from_log = read_deployment(DeploymentInput(server_log=str(log), sglang_version=release))
            lines_read += 1
            printed = from_log.report.value(dest)
            if printed is None and field != "tp":
                problems.append(f"{release} {dest}: the kit reports no value for it from the real line")
                continue
            shown = printed.value if printed is not None else from_log.tp_size
            as_printed += 1
            if shown == value or (dest == "encoder_only" and shown is True):
                as_typed += 1
                if kit_value(from_log, field) != kit_value(typed, field):
                    problems.append(
                        f"{release} {dest}: printed as given, but the kit reads {kit_value(from_log, field)!r} where "
                        f"typed gives {kit_value(typed, field)!r}"
                    )
    record(
        "server-input",
        releases=" ".join(releases_here(RELEASE)),
        lines=lines_read,
        read_as_printed=as_printed,
        printed_as_given=as_typed,
        commands=commands_read,
        flags_a_release_lacks=skipped,
        refused_on_the_cpu=refused,
        disagreements=len(problems),
    )
    assert lines_read >= 15 * len(releases_here(RELEASE)) and as_typed >= 12 * len(releases_here(RELEASE))
    assert not problems, "\n".join(problems)
