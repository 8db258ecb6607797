"""The one table of a workload's server flags: the docs, the CLI, the settings record and the flag search read it."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from kimi_viz.cli.whatif_cmd import _add_load_options, load_settings_from_args
from kimi_viz.errors import WhatIfError
from kimi_viz.scheduler.flags import FLAG_OF, FLAGS, LoadSettings, alternatives, defaults_table

DOCS = Path(__file__).resolve().parent.parent / "docs" / "whatif.md"
START = "<!-- generated from kimi_viz.scheduler.flags.defaults_table(); tests/test_flag_table.py checks it -->"
END = "<!-- end of the generated table -->"


def _parse(*argv: str) -> LoadSettings:
    parser = argparse.ArgumentParser()
    _add_load_options(parser)
    return load_settings_from_args(parser.parse_args(list(argv)))


def test_the_docs_table_is_the_generated_one():
    text = DOCS.read_text(encoding="utf-8")
    block = text[text.index(START) + len(START) : text.index(END)]
    assert [line.strip() for line in block.strip().splitlines()] == defaults_table().splitlines()


def test_every_field_of_the_settings_record_is_a_row_and_its_default_is_the_rows():
    assert {f.name for f in fields(LoadSettings)} == set(FLAG_OF)
    record = LoadSettings()
    assert all(getattr(record, flag.field) == flag.default for flag in FLAGS)
    assert _parse() == LoadSettings()  # the CLI's defaults are the table's


def test_the_cli_options_come_from_the_table_and_off_is_one_convention():
    parsed = _parse("--chunked-prefill-size", "-1", "--page-size", "16", "--enable-mixed-chunk", "--platform", "hip")
    assert parsed.chunked_prefill_size is None and parsed.page_size == 16 and parsed.enable_mixed_chunk
    assert _parse("--chunked-prefill-size", "0") == _parse("--chunked-prefill-size", "-1")
    assert LoadSettings(chunked_prefill_size=-1) == LoadSettings(chunked_prefill_size=None)
    assert parsed.to_json()["chunked_prefill_size"] == -1  # SGLang's spelling of off, in the JSON
    assert parsed.flags() == (
        "--chunked-prefill-size -1 --page-size 16 --enable-mixed-chunk SGLANG_VLM_CACHE_SIZE_MB=100 (hip)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--page-size", "0"), "--page-size 0: expected a number >= 1"),
        (("--page-size", "x"), "--page-size 'x': expected a whole number >= 1"),
        (("--chunked-prefill-size", "-2"), "--chunked-prefill-size -2: expected a number >= -1"),
        (("--mm-embedding-cache-size", "-1"), "--mm-embedding-cache-size -1: expected a number >= 0"),
        (("--schedule-policy", "lof"), "--schedule-policy 'lof': expected one of fcfs, lpm"),
        (("--page-size", "64", "--chunked-prefill-size", "1000"), "SGLang requires a multiple of --page-size 64"),
    ],
)
def test_a_value_the_table_refuses_is_refused_in_one_line_naming_the_option(argv, message):
    with pytest.raises(WhatIfError, match=message) as info:
        _parse(*argv)
    assert "\n" not in str(info.value)


def test_the_flag_search_tries_each_row_s_alternatives_and_skips_what_sglang_refuses():
    tried = [label for label, _ in alternatives(LoadSettings(page_size=64, cache_mb=0))]
    assert tried == [
        "--disable-radix-cache",
        "--page-size 1",
        "--page-size 16",
        "--chunked-prefill-size -1",
        "--enable-mixed-chunk",
        "--schedule-policy lpm",
        "--mamba-radix-cache-strategy extra_buffer",
        "--mamba-radix-cache-strategy no_buffer",
        "--mamba-track-interval 64",
        "--disable-overlap-schedule",
        "SGLANG_VLM_CACHE_SIZE_MB=100",
    ]
    off = [label for label, _ in alternatives(LoadSettings(chunked_prefill_size=None, disable_radix_cache=True))]
    # no mixed chunk without chunking; chunking back on at the default; the radix cache back on
    assert off[0] == "radix cache on (no --disable-radix-cache)" and "--chunked-prefill-size 8192" in off
    assert not any("mixed" in label for label in off)
    odd = [label for label, _ in alternatives(LoadSettings(chunked_prefill_size=48, page_size=16))]
    assert "--page-size 64" not in odd  # 48 is no multiple of 64: SGLang refuses it, the search does not offer it


def test_each_flag_is_declared_once_and_sglangs_facts_come_from_its_table():
    from dataclasses import fields

    from kimi_viz.releases import RELEASES
    from kimi_viz.server_args import ENV_VARS, SERVER_ARGS, args_of

    assert [f.name for f in fields(LoadSettings)] == [flag.field for flag in FLAGS]  # the rows are the fields
    for flag in FLAGS:
        if flag.dest is None:
            continue
        if flag.dest in ENV_VARS:
            assert flag.changes == ENV_VARS[flag.dest].effect
            continue
        row = SERVER_ARGS[flag.dest]
        assert row.sets == f"load.{flag.field}" and flag.changes == row.effect
        defaults = {args_of(release).by_dest[flag.dest].default for release in RELEASES if release in row.releases}
        assert len(defaults) == 1, f"{flag.dest}: SGLang's default differs between releases: {defaults}"
        if flag.field not in ("chunked_prefill_size", "platform"):  # SGLang picks these from the machine; the kit
            # says its stand-ins (an H200's chunk size, a CUDA device)
            assert flag.default == defaults.pop(), flag.field
    assert FLAG_OF["cache_mb"].default == float(ENV_VARS["SGLANG_VLM_CACHE_SIZE_MB"].default)
