"""The user's server as input: its launch command and its log read into the replay's settings, each value sourced.

The promise tested here: a server's start-up line, and the launch command that started it, give the answer the
same flags typed give — on every release, for every flag the kit models; typed options override both; each value
says where it came from; bad input is one line.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
from server_cases import CASES

from kimi_viz._whatif.deployment import DeploymentInput, read_deployment
from kimi_viz.errors import ServerInputError, WhatIfError
from kimi_viz.releases import RELEASES
from kimi_viz.request.settings import ServerSettings
from kimi_viz.scheduler.flags import FLAG_OF, LoadSettings
from kimi_viz.server_args import SERVER_ARGS, args_of, printed_fields

LOGS = Path(__file__).resolve().parent / "data" / "server_logs"


def start_up_line(release: str, changes: dict[str, object]) -> str:
    """Return ``release``'s start-up line as it prints it, every field at its default but ``changes``."""
    specs = args_of(release).by_dest
    values = {name: specs[name].default if name in specs else None for name in sorted(printed_fields(release))}
    values.update(changes)
    if release in ("0.5.17", "0.5.18"):
        body = ", ".join(f"{name}={value!r}" for name, value in values.items())
        return f"[2026-11-30 08:00:01] server_args=ServerArgs({body})"
    return f"[2026-11-30 08:00:01] server_args={values!r}"


def option_of(release: str, dest: str, value: object) -> str:
    spec = args_of(release).by_dest[dest]
    if value is True:
        return spec.options[0]
    return f"{spec.options[0]} {shlex.quote(str(value))}"


def asked(deployment, field: str):
    if field == "tp":
        return deployment.tp_size
    record, name = field.split(".")
    return getattr(deployment.load if record == "load" else deployment.settings, name)


def typed_input(field: str, value: object, release: str) -> DeploymentInput:
    record, _, name = field.partition(".")
    return DeploymentInput(
        sglang_version=release,
        tp_size=value if field == "tp" else 1,
        typed_load={name: value} if record == "load" else {},
        typed_settings={name: value} if record == "settings" else {},
    )


@pytest.mark.parametrize("release", list(RELEASES))
def test_every_modelled_flag_reads_the_same_from_a_start_up_line_a_launch_command_and_typed(tmp_path, release):
    checked = 0
    for dest, value, field, kit_value in CASES:
        if dest not in args_of(release).by_dest:
            continue  # the release has no such flag (e.g. --mm-preprocess-cache-size-mb before 0.5.18)
        log = tmp_path / f"{release}-{dest}.log"
        log.write_text(start_up_line(release, {dest: value, "tp_size": value if dest == "tp_size" else 1}) + "\n")
        from_log = read_deployment(DeploymentInput(server_log=str(log)))
        command = f"python -m sglang.launch_server --model-path /m {option_of(release, dest, value)}"
        if dest != "tp_size":
            command += " --tp 1"
        from_command = read_deployment(DeploymentInput(server=command, sglang_version=release))
        typed = read_deployment(typed_input(field, kit_value, release))
        assert from_log.sglang_version == release, (dest, from_log.report.release)
        for deployment in (from_log, from_command):
            assert asked(deployment, field) == kit_value, (release, dest, deployment.report.inputs)
            assert deployment.load == typed.load, (release, dest)
            assert deployment.settings == typed.settings, (release, dest)
            assert deployment.tp_size == typed.tp_size, (release, dest)
        checked += 1
    assert checked >= 16


def test_each_value_says_where_it_came_from_and_typed_options_win(tmp_path):
    log = LOGS / "kimi-k3-0.5.18.log"
    deployment = read_deployment(
        DeploymentInput(
            server_log=str(log),
            server="python -m sglang.launch_server --model-path /m --tp 2 --page-size 16",
            typed_load={"schedule_policy": "lpm", "page_size": 16},
        )
    )
    report = deployment.report
    assert report.value("page_size").text == "page_size 16 (--page-size (typed, over server log line 1: 1))"
    assert report.value("max_total_tokens").text == "max_total_tokens 7000 (server log line 3)"
    assert report.value("chunked_prefill_size").text == "chunked_prefill_size 2048 (server log line 3)"
    assert report.value("disable_overlap_schedule").text == "disable_overlap_schedule on (server log line 1)"
    assert report.value("schedule_policy").text == (
        "schedule_policy lpm (--schedule-policy (typed, over server log line 1: fcfs))"
    )
    without_typed = read_deployment(
        DeploymentInput(server_log=str(log), server="python -m sglang.launch_server --model-path /m --page-size 16")
    )
    assert without_typed.report.value("page_size").text == "page_size 1 (server log line 1)"  # the log over the command
    assert report.value("max_mamba_cache_size").text == "max_mamba_cache_size 96 (server log line 2)"
    assert report.release == "SGLang 0.5.18: the arguments of server log line 1 are 0.5.18's"
    assert report.tp == "attention-TP 2 = tp_size 2 (server log line 1)"
    assert deployment.load.schedule_policy == "lpm" and deployment.load.max_total_tokens == 7000
    assert report.to_json()["sources"]["max_total_tokens"] == {
        "value": 7000,
        "source": "server log line 3",
        "from": "log",
    }
    plain = read_deployment(
        DeploymentInput(server="python -m sglang.launch_server --model-path /m", sglang_version="0.5.23")
    )
    assert (
        plain.report.value("chunked_prefill_size").text == "chunked_prefill_size 8192 (SGLang's default for this GPU)"
    )
    assert plain.report.value("schedule_policy").text == "schedule_policy fcfs (SGLang 0.5.23's default)"
    assert plain.tp_size == 1  # the command gives no parallel flag: it runs SGLang's default, as every other flag
    assert plain.report.tp == "attention-TP 1 = tp_size 1 (SGLang's default: the launch command sets no parallel flag)"


def test_attention_tp_is_derived_as_sglang_derives_it():
    def tp(words: str, release: str = "0.5.23") -> tuple[int | None, str]:
        deployment = read_deployment(
            DeploymentInput(server=f"python -m sglang.launch_server --model-path /m {words}", sglang_version=release)
        )
        return deployment.tp_size, deployment.report.tp

    assert tp("--tp 8")[0] == 8
    assert tp("--tp 8 --dp 2")[0] == 8  # replicas: each still runs attention-TP 8
    assert tp("--tp 8 --dp 2 --enable-dp-attention") == (
        4,
        "attention-TP 4 = tp_size 8 / attention-DP 2 (the launch command: --dp; the launch command: "
        "--enable-dp-attention; the launch command: --tp)",
    )
    assert tp("--tp 8 --attn-dp-size 4")[0] == 2
    assert tp("--tp 8 --attn-cp-size 2")[0] == 4
    assert tp("--tensor-parallel-size 8 --data-parallel-size 2 --enable-dp-attention", "0.5.18")[0] == 4
    log = read_deployment(DeploymentInput(server_log=str(LOGS / "kimi-k3-0.5.23-dp-attention.log")))
    assert log.tp_size == 4 and log.sglang_version == "0.5.23"
    # no parallel flag: SGLang's defaults (tp_size 1), said as such; with neither a command nor a log nothing says
    assert tp("") == (1, "attention-TP 1 = tp_size 1 (SGLang's default: the launch command sets no parallel flag)")
    assert tp("--enable-dp-attention")[0] == 1
    assert read_deployment(DeploymentInput(sglang_version="0.5.23")).tp_size is None


def test_flags_the_kit_does_not_model_are_listed_with_what_they_could_change():
    deployment = read_deployment(
        DeploymentInput(
            server="SGLANG_VLM_CACHE_SIZE_MB=0 SGLANG_SOMETHING_NEW=1 python -m sglang.launch_server --model-path /m "
            "--tp 2 --enable-hierarchical-cache --dcp-size 2 --host 0.0.0.0",
            sglang_version="0.5.23",
        )
    )
    listed = {item.option: item for item in deployment.report.not_modelled}
    assert set(listed) == {"--enable-hierarchical-cache", "--dcp-size", "SGLANG_SOMETHING_NEW"}  # --host is inert
    assert listed["--enable-hierarchical-cache"].effect == SERVER_ARGS["enable_hierarchical_cache"].effect
    assert deployment.load.cache_mb == 0.0
    assert deployment.report.could_change() == (
        "the kit does not model --enable-hierarchical-cache, --dcp-size, SGLANG_SOMETHING_NEW: each could change this"
    )
    log = read_deployment(DeploymentInput(server_log=str(LOGS / "kimi-k3-0.5.23-dp-attention.log")))
    assert [item.option for item in log.report.not_modelled] == ["--dcp-size", "--enable-hierarchical-cache"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            {"server": "python -m sglang.launch_server --page-sise 16"},
            "--page-sise: SGLang 0.5.23 has no such flag; did you mean --page-size?",
        ),
        (
            {"server": "python -m sglang.launch_server --mamba-scheduler-strategy auto"},
            "--mamba-scheduler-strategy: "
            "SGLang 0.5.23 has no such flag (only 0.5.17–0.5.19 take it); SGLang 0.5.23 spells it "
            "--mamba-radix-cache-strategy",
        ),
        ({"server": "ls -la"}, "launches no SGLang server"),
        ({"server": "python -m sglang.launch_server 'x"}, "cannot be split as a shell would"),
        ({"server": "python -m sglang.launch_server " + "--tp 2 " * 20_000}, "over the 65536 limit"),
        ({"server": "python -m sglang.launch_server --tp\x1b[2J 2"}, "holds control characters"),
        (
            {"server": "python -m sglang.launch_server --schedule-policy hrrn"},
            "--schedule-policy hrrn (the launch "
            "command: --schedule-policy): SGLang takes it, the kit replays fcfs, lpm only",
        ),
    ],
)
def test_bad_launch_commands_are_refused_in_one_line(given, expected):
    with pytest.raises((ServerInputError, WhatIfError)) as caught:
        read_deployment(DeploymentInput(sglang_version="0.5.23", **given))
    message = str(caught.value)
    assert expected in message, message
    assert "\n" not in message


def test_a_command_alone_needs_its_release_named():
    with pytest.raises(WhatIfError, match="a launch command does not say its release"):
        read_deployment(DeploymentInput(server="python -m sglang.launch_server --model-path /m --tp 2"))


def test_a_sweep_reads_the_command_with_every_release_and_the_ones_that_refuse_it_are_named():
    deployment = read_deployment(
        DeploymentInput(
            server="python -m sglang.launch_server --model-path /m --mamba-scheduler-strategy auto", needs_release=False
        )
    )
    assert set(deployment.refusals) == {"0.5.20", "0.5.21", "0.5.22", "0.5.23"}
    assert "only 0.5.17–0.5.19 take it" in deployment.refusals["0.5.23"]


def test_the_settings_records_are_the_kits_own():
    assert {f.name for f in dataclasses.fields(LoadSettings)} == set(FLAG_OF)
    assert dataclasses.fields(ServerSettings)


def test_triage_takes_the_release_from_the_servers_log_when_the_capture_recorded_none(tmp_path, capsys):
    from dataclasses import replace

    from kimi_viz.cli import main
    from kimi_viz.manifest import write_manifest
    from kimi_viz.scenarios import SCENARIOS

    batch = replace(SCENARIOS["s1-cpu"].build(), sglang_version=None, code_path="post-fix")
    manifest = write_manifest(batch, tmp_path / "capture", redact=True)
    assert main(["triage", str(manifest), "--json", "--server-log", str(LOGS / "kimi-k3-0.5.18.log")]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["release"]["sglang_version"] == "0.5.18" and found["release"]["chosen_by"] == "server"
    assert found["release"]["note"] == (
        "SGLang 0.5.18: pre-fix path (SGLang 0.5.18: the arguments of server log line 1 are 0.5.18's)"
    )
    assert found["server"]["sources"]["page_size"]["source"] == "server log line 1"
    assert main(["triage", str(manifest), "--server-log", str(LOGS / "kimi-k3-0.5.18.log")]) == 1
    out = capsys.readouterr().out
    assert "server (--server-log " in out and "  max_total_tokens 7000 (server log line 3)" in out


@pytest.mark.parametrize("release", list(RELEASES))
def test_the_answer_from_a_start_up_line_and_from_its_launch_command_is_the_answer_typed(tmp_path, release):
    from kimi_viz import whatif
    from kimi_viz.request.workload import together

    flags = {"page_size": 16, "chunked_prefill_size": 512, "disable_overlap_schedule": True, "tp_size": 2}
    log = tmp_path / "server.log"
    log.write_text(start_up_line(release, flags) + "\n")
    words = " ".join(option_of(release, dest, value) for dest, value in flags.items())
    inputs = {
        "log": DeploymentInput(server_log=str(log)),
        "command": DeploymentInput(
            server=f"python -m sglang.launch_server --model-path /m {words}", sglang_version=release
        ),
        "typed": DeploymentInput(
            sglang_version=release,
            tp_size=2,
            typed_load={"page_size": 16, "chunked_prefill_size": 512, "disable_overlap_schedule": True},
        ),
    }
    answers = {}
    for name, given in inputs.items():
        deployment = read_deployment(given)
        answer = whatif(
            together(["rocket.jpg", "astronaut.png", "chelsea.png"]),
            sglang_version=deployment.sglang_version,
            tp_size=deployment.tp_size,
            settings=deployment.settings,
            load=deployment.load,
            server=deployment.report,
        )
        answers[name] = answer
    typed = answers["typed"]
    assert typed.workload is not None
    first = typed.workload.passes[0]
    assert sum(request.extend for request in first.batch) <= 512  # the chunk the three inputs give took effect
    for name in ("log", "command"):
        answer = answers[name]
        assert dataclasses.replace(answer, server=None) == dataclasses.replace(typed, server=None), (release, name)


def test_a_sweep_shows_na_in_the_rows_whose_release_refuses_the_launch_command(capsys):
    from kimi_viz.cli import main

    command = "python -m sglang.launch_server --model-path m --mamba-scheduler-strategy auto"
    assert main(["whatif", "--together", "rocket.jpg", "astronaut.png", "--sweep", "--server", command]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("0.5.20–0.5.23"))
    assert row.split()[1:] == ["post-fix", "–", "n/a", "–", "n/a", "–", "n/a", "–", "n/a"]
    assert "0.5.20–0.5.23 refuses these settings (--server: --mamba-scheduler-strategy:" in out
    assert next(line for line in out.splitlines() if line.startswith("0.5.19")).count("✓ clean") == 4
