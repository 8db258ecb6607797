"""The server-argument table (kimi_viz.server_args): every dest classified once, its settings real, its facts right.

The facts checked here were read from the released wheels' parsers (``tests/parity/server_args_probe.py``);
the real-SGLang lane (``tests/parity/test_server_args_parity.py``) compares the whole table with them.
No SGLang is needed here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import fields
from pathlib import Path

import pytest
import tomllib
from parity.server_args_probe import HOSTS, ORDER, compact, render

from kimi_viz.errors import ConfigError, ServerInputError
from kimi_viz.releases import RELEASES
from kimi_viz.request.settings import ServerSettings
from kimi_viz.scheduler.flags import FLAG_OF, LoadSettings
from kimi_viz.server_args import (
    DEPLOYMENT_FIELDS,
    ENV_VARS,
    SERVER_ARGS,
    ArgSpec,
    Handling,
    args_of,
    env_var,
    nearest_option,
    releases_with,
)
from kimi_viz.server_args._handling import HANDLING_FILE, check_classified, read_handling
from kimi_viz.server_args._load import SPECS_FILE, read_specs
from kimi_viz.server_args.command import parse_command, split_command

ROOT = Path(__file__).resolve().parent.parent
COUNTS = {"0.5.17": 458, "0.5.18": 472, "0.5.19": 487, "0.5.20": 494, "0.5.21": 512, "0.5.22": 521, "0.5.23": 530}
KIT_FIELDS = {
    "load": {f.name for f in fields(LoadSettings)},
    "settings": {f.name for f in fields(ServerSettings)},
    "deployment": set(DEPLOYMENT_FIELDS),
}


def unknown_settings(sets: list[str]) -> list[str]:
    """Return the ``sets`` values that name no field of the kit (LoadSettings, ServerSettings, the deployment)."""
    return [value for value in sets if value.partition(".")[2] not in KIT_FIELDS.get(value.partition(".")[0], ())]


# --- every dest classified once, every setting a real one ------------------------------------------------


def test_every_dest_of_every_release_is_classified_exactly_once():
    classes, _ = read_handling()
    named = Counter(dest for entry in classes for dest in entry.dests)
    every = {dest for release in RELEASES for dest in args_of(release).by_dest}
    assert len(every) == 542
    assert set(named) == every and set(named.values()) == {1}
    assert set(SERVER_ARGS) == every
    assert Counter(a.handling for a in SERVER_ARGS.values()) == {
        Handling.MODELLED: 27,
        Handling.INERT: 129,
        Handling.NOT_MODELLED: 386,
    }


def test_a_dest_classified_twice_or_not_at_all_is_refused():
    classes, _ = read_handling()
    dests = set(SERVER_ARGS)
    with pytest.raises(ValueError, match=r"twice: \['page_size'\], not classified: \[\], no such dest: \[\]"):
        check_classified((*classes, classes[1]), dests)
    with pytest.raises(ValueError, match=r"twice: \[\], not classified: \['new_flag'\], no such dest: \[\]"):
        check_classified(classes, dests | {"new_flag"})


def test_every_modelled_flag_sets_a_real_kit_field_and_only_modelled_ones_set_one():
    sets = [a.sets for a in SERVER_ARGS.values() if a.sets] + [v.sets for v in ENV_VARS.values() if v.sets]
    assert unknown_settings(sets) == []
    assert all((a.sets is not None) == (a.handling is Handling.MODELLED) for a in SERVER_ARGS.values())
    assert unknown_settings(["load.page_sise", "settings.transprot", "deployment.pp_size", "scheduler.page_size"]) == [
        "load.page_sise",
        "settings.transprot",
        "deployment.pp_size",
        "scheduler.page_size",
    ]


def test_the_modelled_flags_are_the_kits_settings():
    modelled = {a.dest: a.sets for a in SERVER_ARGS.values() if a.handling is Handling.MODELLED}
    load = {d: s for d, s in modelled.items() if s.startswith("load.")}
    assert load == {f.dest: f"load.{f.field}" for f in FLAG_OF.values() if f.dest in SERVER_ARGS}  # each flag's row
    assert all(s == f"load.{d}" for d, s in load.items() if d != "device")  # dest = field, but the platform
    assert {d: s for d, s in modelled.items() if not s.startswith("load.")} == {
        "encoder_only": "settings.serving",
        "mm_feature_transport": "settings.transport",
        "keep_mm_feature_on_device": "settings.transport",
        "mm_preprocess_cache_size_mb": "settings.preprocess_cache_mb",
        **{dest: f"deployment.{dest}" for dest in DEPLOYMENT_FIELDS},
    }
    assert {v.name: v.sets for v in ENV_VARS.values() if v.handling is Handling.MODELLED} == {
        "SGLANG_VLM_CACHE_SIZE_MB": "load.cache_mb",
        "SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU": "settings.epd_backend",
        "SGLANG_USE_CUDA_IPC_TRANSPORT": "settings.transport",
    }


def test_a_modelled_entry_without_a_setting_or_with_a_bad_one_is_refused(tmp_path):
    entry = '[[arg]]\ndests = ["page_size"]\nhandling = "modelled"\neffect = "the page"\n'
    cases = {
        entry: "a modelled entry, and only a modelled one, says which kit setting it `sets`",
        entry + 'sets = "deployment.page_size"\n': "sets 'deployment.page_size': the deployment has tp_size",
        entry.replace("modelled", "inert") + 'sets = "load.page_size"\n': "only a modelled one",
        entry.replace("the page", "two\\nlines") + 'sets = "load.page_size"\n': "effect is one line of text",
    }
    for text, message in cases.items():
        path = tmp_path / "handling.toml"
        path.write_text(text)
        with pytest.raises(ValueError, match=re.escape(message)) as raised:
            read_handling(str(path))
        assert str(raised.value).startswith("handling.toml: [[arg]] page_size: ")


# --- the facts, read from the wheels ------------------------------------------------------------------


def test_each_release_has_the_dests_its_parser_declares():
    assert {release: len(args_of(release).by_dest) for release in RELEASES} == COUNTS
    assert tuple(RELEASES) == ORDER and sorted(r for guests in HOSTS.values() for r in guests) == sorted(ORDER)


def test_enable_hicache_is_an_alias_of_enable_hierarchical_cache_from_0_5_23_and_not_modelled():
    arg = SERVER_ARGS["enable_hierarchical_cache"]
    assert arg.handling is Handling.NOT_MODELLED and arg.releases == ORDER
    assert [arg.spec(r).options for r in ORDER] == [("--enable-hierarchical-cache",)] * 6 + [
        ("--enable-hierarchical-cache", "--enable-hicache")
    ]
    assert releases_with("--enable-hicache") == ("0.5.23",)
    assert args_of("0.5.23").by_option["--enable-hicache"] is arg.spec("0.5.23")


def test_mamba_scheduler_strategy_is_a_deprecated_alias_up_to_0_5_19_without_choices():
    assert releases_with("--mamba-scheduler-strategy") == ("0.5.17", "0.5.18", "0.5.19")
    spec = args_of("0.5.19").by_option["--mamba-scheduler-strategy"]
    assert spec.dest == "mamba_radix_cache_strategy" and spec.default == "auto"
    assert spec.options == ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy")
    assert spec.deprecated == ("--mamba-scheduler-strategy",)
    assert spec.choices == ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
    assert spec.form("--mamba-scheduler-strategy").choices is None  # SGLang's alias checks no choices
    assert spec.form("--mamba-radix-cache-strategy").choices == spec.choices
    assert "--mamba-scheduler-strategy" not in args_of("0.5.20").by_option
    assert SERVER_ARGS["mamba_radix_cache_strategy"].sets == "load.mamba_radix_cache_strategy"


def test_tp_size_is_spelled_tensor_parallel_size_too_in_every_release():
    for release in ORDER:
        spec = args_of(release).by_option["--tensor-parallel-size"]
        assert (spec.dest, spec.options, spec.value_type, spec.default) == (
            "tp_size",
            ("--tp-size", "--tensor-parallel-size"),
            "int",
            1,
        )
    assert SERVER_ARGS["tp_size"].sets == "deployment.tp_size"


def test_attn_dp_size_arrives_in_0_5_22_and_enable_dp_attention_is_deprecated_there():
    arg = SERVER_ARGS["attn_dp_size"]
    assert (arg.added, arg.removed, arg.releases) == ("0.5.22", None, ("0.5.22", "0.5.23"))
    assert arg.spec("0.5.21") is None
    assert args_of("0.5.22").by_option["--attention-data-parallel-size"].dest == "attn_dp_size"
    assert [args_of(r).by_dest["enable_dp_attention"].deprecated for r in ("0.5.21", "0.5.22")] == [
        (),
        ("--enable-dp-attention",),
    ]


def test_removed_dests_and_refusing_actions():
    assert (SERVER_ARGS["keep_mm_feature_on_device"].added, SERVER_ARGS["keep_mm_feature_on_device"].removed) == (
        "0.5.17",
        "0.5.21",
    )
    metrics = SERVER_ARGS["enable_expert_distribution_metrics"]
    assert [metrics.spec(r).action for r in ("0.5.17", "0.5.18", "0.5.19")] == ["store_true", "error", "error"]
    assert metrics.removed == "0.5.20"
    assert args_of("0.5.17").by_dest["prefill_round_robin_balance"].action == "noop"


def test_only_the_model_path_is_required():
    for release in ORDER:
        assert [spec.dest for spec in args_of(release).by_dest.values() if spec.required] == ["model_path"]


def test_a_boolean_optional_flag_has_a_store_false_spelling():
    spec = args_of("0.5.23").by_option["--no-mm-enable-dp-encoder"]
    assert (spec.dest, spec.action, spec.default) == ("mm_enable_dp_encoder", "store_true", None)
    assert spec.form("--no-mm-enable-dp-encoder").action == "store_false"
    assert spec.form("--no-mm-enable-dp-encoder").const is False
    with pytest.raises(ConfigError, match="'--mm-enable' is no spelling of mm_enable_dp_encoder"):
        spec.form("--mm-enable")


def test_a_deprecated_spelling_may_take_a_value_and_store_a_constant():
    form = args_of("0.5.23").by_option["--monokernel-backend"].form("--monokernel-backend")
    assert (form.action, form.nargs, form.choices, form.const) == ("store_const", None, ("amd",), True)


def test_the_feature_transports_and_the_preprocessing_cache_match_each_releases_request_side():
    for release, entry in RELEASES.items():
        table = args_of(release)
        assert table.by_dest["mm_feature_transport"].choices == entry.request_side.transports
        assert ("mm_preprocess_cache_size_mb" in table.by_dest) == entry.request_side.preprocess_cache


def test_the_kits_flag_defaults_are_each_releases_parser_defaults():
    given = 0
    for flag in FLAG_OF.values():
        arg = SERVER_ARGS.get(flag.field)
        if arg is None:
            continue
        for release in ORDER:
            default = arg.spec(release).default
            if default is not None:  # None: resolved at start-up (the chunk size by GPU memory, the page...)
                assert default == flag.default, (flag.field, release)
                given += 1
    assert given == 8 * 7


def test_nearest_option_and_a_bad_release():
    assert nearest_option("--page-sise", "0.5.23") == "--page-size"
    assert nearest_option("--page-size", "0.5.23") == "--page-size"
    assert nearest_option("--mamba-schedular-strategy", "0.5.19") == "--mamba-scheduler-strategy"
    # A renamed flag is too far from its new name: releases_with says which releases took the old one.
    assert nearest_option("--mamba-schedular-strategy", "0.5.23") is None
    assert nearest_option("--zzz", "0.5.23") is None
    assert releases_with("--no-such-flag") == ()
    with pytest.raises(ConfigError) as raised:
        args_of("0.5.16")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("SGLang release '0.5.16': the server-argument table has 0.5.17")
    with pytest.raises(ConfigError, match="'0.5.23.post1'"):
        nearest_option("--page-size", "0.5.23.post1")


def test_the_environment_variables():
    refresh = ENV_VARS["SGLANG_ENABLE_WAITING_PREFIX_REFRESH"]
    assert (refresh.handling, refresh.releases, refresh.default) == (Handling.NOT_MODELLED, ("0.5.22", "0.5.23"), True)
    assert (ENV_VARS["SGLANG_VLM_CACHE_SIZE_MB"].default, ENV_VARS["SGLANG_VLM_CACHE_SIZE_MB"].releases) == (100, ORDER)
    assert ENV_VARS["SGLANG_VLM_CACHE_SIZE_MB"].default == FLAG_OF["cache_mb"].default
    assert env_var("NCCL_SOCKET_IFNAME") is ENV_VARS["NCCL_*"] and env_var("NCCL_*") is ENV_VARS["NCCL_*"]
    assert env_var("CUDA_VISIBLE_DEVICES").handling is Handling.INERT and env_var("MY_VAR") is None


# --- the stored file ---------------------------------------------------------------------------------


def test_the_stored_table_is_bounded_and_every_dest_has_a_spec_in_each_of_its_releases():
    assert Path(SPECS_FILE).stat().st_size < 200_000
    rows = read_specs()
    assert set(rows) == set(SERVER_ARGS)
    for dest, arg in SERVER_ARGS.items():
        assert tuple(r for row in rows[dest] for r in row.releases) == arg.releases
        for release in ORDER:
            spec = arg.spec(release)
            assert (spec is not None) == (release in arg.releases), (dest, release)
            assert spec is None or (spec.dest == dest and isinstance(spec, ArgSpec))
    for release in ORDER:
        table = args_of(release)
        spellings = [o for spec in table.by_dest.values() for o in spec.options]
        assert len(spellings) == len(set(spellings)) == len(table.by_option)  # one dest per spelling


def test_a_bad_row_is_refused_naming_the_file_and_the_dest(tmp_path):
    good = {"default": None, "options": ["--page-size"], "type": "int"}
    cases = {
        "unknown key(s) ['field_default']": {**good, "field_default": 1},
        "action 'store_maybe' is none of": {**good, "action": "store_maybe"},
        "deprecated and variant spellings must be options of the dest": {**good, "deprecated": ["--page"]},
        "a spec is an object with a default": {"options": ["--page-size"]},
    }
    for message, spec in cases.items():
        path = tmp_path / "server_args.json"
        path.write_text(json.dumps({"format": 1, "releases": list(ORDER), "args": {"page_size": [["0.5.17", spec]]}}))
        with pytest.raises(ValueError, match=re.escape(message)) as raised:
            read_specs(str(path))
        assert str(raised.value).startswith("server_args.json: page_size 0.5.17")


def test_the_generator_folds_identical_releases_into_spans_and_the_loader_reads_them_back(tmp_path):
    def spec(default, options=("--x",)):
        return {
            "options": list(options),
            "deprecated": [],
            "action": "store",
            "nargs": None,
            "type": "int",
            "choices": None,
            "const": None,
            "variants": [],
            "default": default,
            "required": False,
        }

    probes = {r: {"args": {"x": spec(1)}} for r in ORDER}
    probes["0.5.20"]["args"]["x"] = spec(2)
    probes["0.5.22"]["args"] = {}
    probes["0.5.23"]["args"]["y"] = spec(None, ("--y", "--why"))
    table = compact(probes)
    assert table["args"]["x"] == [
        ["0.5.17-0.5.19", {"default": 1, "options": ["--x"], "type": "int"}],
        ["0.5.20", {"default": 2, "options": ["--x"], "type": "int"}],
        ["0.5.21", {"default": 1, "options": ["--x"], "type": "int"}],
        ["0.5.23", {"default": 1, "options": ["--x"], "type": "int"}],
    ]
    path = tmp_path / "server_args.json"
    path.write_text(render(table))
    rows = read_specs(str(path))
    assert [row.releases for row in rows["x"]] == [ORDER[:3], ("0.5.20",), ("0.5.21",), ("0.5.23",)]
    assert rows["y"][0].spec.to_json() == spec(None, ("--y", "--why"))


def test_a_launch_command_is_parsed_as_each_release_parses_it():
    def parse(release: str, words: str) -> dict[str, object]:
        parsed = parse_command(split_command(f"python -m sglang.launch_server {words}"), release)
        return {value.dest: value.value for value in parsed.values}

    given = parse("0.5.23", "--model-path m --tp 8 --enable-hicache --no-mm-enable-dp-encoder --page-size 16")
    assert given == {
        "model_path": "m",
        "tp_size": 8,
        "enable_hierarchical_cache": True,
        "mm_enable_dp_encoder": False,
        "page_size": 16,
    }
    old = parse("0.5.19", "--mamba-scheduler-strategy extra_buffer --tensor-parallel-size 2")
    assert old == {"mamba_radix_cache_strategy": "extra_buffer", "tp_size": 2}
    with pytest.raises(ServerInputError, match="invalid choice: 'hrrn'"):
        parse("0.5.19", "--schedule-policy hrrn")  # hrrn arrives in 0.5.20
    assert parse("0.5.20", "--schedule-policy hrrn") == {"schedule_policy": "hrrn"}


# --- where the files and the lane's sources live --------------------------------------------------------


def test_the_table_files_ship_in_the_wheel_and_the_envs_script_hosts_the_same_guests():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = [Path(p).relative_to(ROOT / "kimi_viz") for p in (SPECS_FILE, HANDLING_FILE)]
    assert all(any(p.match(glob) for glob in package_data["kimi_viz"]) for p in shipped)
    script = (ROOT / ".ci" / "sglang-envs.sh").read_text()
    guests = dict(re.findall(r'\[(\d+\.\d+\.\d+)\]="([^"]*)"', script))
    assert {host: tuple(names.split()) for host, names in guests.items()} == {h: g[1:] for h, g in HOSTS.items()}
    assert all(host == guests_[0] for host, guests_ in HOSTS.items())
