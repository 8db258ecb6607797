"""The server-argument table (kimi_viz.server_args) against each release's own parser, in the real-SGLang lane.

Runs in the real-SGLang lane (``tests/parity/conftest.py``). Each lane venv imports its own release
and its guests (``server_args_probe.HOSTS``: the 0.5.18 venv also 0.5.17, 0.5.19 and 0.5.20, the
0.5.23 venv 0.5.21 and 0.5.22), a guest from its wheel's ``sglang/`` under
``$KIMI_VIZ_SGLANG_SOURCES/<release>/`` (``make parity`` points it at the folder ``.ci/sglang-envs.sh``
fills; without the variable, ``<venv>/../sources``). For each release ``server_args_probe.py`` runs in a
subprocess and builds the parser as a server does; every dest must be in both the probe and
``args_of(release)``, with the same spellings in the same order, the same deprecated ones, action,
nargs, type, choices, const, variants and default. The ``SGLANG_*`` variables of ``ENV_VARS`` must be
declared (with the same default) and read by exactly the releases the table says. Under
``KIMI_VIZ_REQUIRE_SGLANG=1`` a guest whose sources are missing fails the lane; it never skips. The
planted copies (a default changed and an alias dropped; a variable's releases emptied) must come out
as exactly two disagreements, and one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from kimi_viz.server_args import ENV_VARS, EnvVar, ReleaseArgs, args_of, printed_fields

from .lane import RELEASE, record
from .server_args_probe import HOSTS, run

REQUIRE = os.environ.get("KIMI_VIZ_REQUIRE_SGLANG") == "1"
SGLANG_ENV = sorted(name for name in ENV_VARS if name.startswith("SGLANG_"))
_ABSENT = object()


def sources() -> Path:
    """Return the folder of the guest releases' sources (``<release>/sglang`` each)."""
    given = os.environ.get("KIMI_VIZ_SGLANG_SOURCES")
    return Path(given) if given else Path(sys.prefix).resolve().parent / "sources"


def releases_here(release: str) -> tuple[str, ...]:
    """Return the installed release and its guests, or fail: a venv the table does not map is a broken lane."""
    if release not in HOSTS:
        pytest.fail(f"sglang {release} hosts no releases in server_args_probe.HOSTS ({HOSTS}); add it there")
    return HOSTS[release]


@cache
def probe(release: str) -> dict:
    """Return a fresh probe of ``release``: the installed one directly, a guest from its sources."""
    folder = None
    if release != RELEASE:
        folder = sources()
        if not (folder / release / "sglang" / "srt" / "server_args.py").is_file():
            message = (
                f"no sources of sglang {release} under {folder / release}: run `bash .ci/sglang-envs.sh` (or set "
                "KIMI_VIZ_SGLANG_SOURCES to a folder holding <release>/sglang)"
            )
            if REQUIRE:
                pytest.fail(message)
            pytest.skip(message)
    return run(sys.executable, release, folder, SGLANG_ENV)


def compare(release: str, probed: dict[str, dict], table: ReleaseArgs) -> list[str]:
    """Return one line per fact where the table and the release's parser disagree."""
    lines = []
    for dest in sorted(set(probed) | set(table.by_dest)):
        if dest not in table.by_dest:
            lines.append(f"{release} {dest}: in SGLang's parser ({probed[dest]['options']}), not in the table")
            continue
        if dest not in probed:
            lines.append(f"{release} {dest}: in the table, not in SGLang's parser")
            continue
        ours, real = table.by_dest[dest].to_json(), probed[dest]
        for key in sorted(set(ours) | set(real)):
            if ours.get(key, _ABSENT) != real.get(key, _ABSENT):
                lines.append(f"{release} {dest} {key}: table {ours.get(key)!r} != SGLang {real.get(key)!r}")
    return lines


def compare_env(release: str, probed: dict[str, dict], env_vars: dict[str, EnvVar] = ENV_VARS) -> list[str]:
    """Return one line per SGLANG_* variable whose releases or default the table has wrong for ``release``."""
    lines = []
    for name in SGLANG_ENV:
        var, facts = env_vars[name], probed[name]
        has = facts["declared"] and facts["read"]
        if has != (release in var.releases):
            lines.append(
                f"{release} {name}: the table says {release in var.releases}, SGLang declares and reads it: {has}"
            )
        elif has and facts["default"] != var.default:
            lines.append(f"{release} {name}: default table {var.default!r} != SGLang {facts['default']!r}")
    return lines


def compare_printed(release: str, probed: list[str]) -> list[str]:
    """Return one line per field the release's start-up line prints that the table does not say, or the reverse."""
    ours = printed_fields(release)
    return [f"{release} start-up line prints {name}, the table does not" for name in sorted(set(probed) - ours)] + [
        f"{release} start-up line: the table says it prints {name}, SGLang does not"
        for name in sorted(ours - set(probed))
    ]


def test_the_table_is_each_installed_releases_own_parser(release):
    lines: list[str] = []
    flags = options = printed = 0
    for each in releases_here(release):
        facts = probe(each)
        assert facts["release"] == each
        lines += compare(each, facts["args"], args_of(each))
        lines += compare_env(each, facts["env"])
        lines += compare_printed(each, facts["printed"])
        printed += len(facts["printed"])
        flags += len(facts["args"])
        options += sum(len(spec["options"]) for spec in facts["args"].values())
    record(
        "server-args",
        releases=" ".join(releases_here(release)),
        flags=flags,
        options=options,
        env=len(SGLANG_ENV) * len(releases_here(release)),
        printed=printed,
        disagreements=len(lines),
    )
    assert flags > 400 * len(releases_here(release))  # the probe saw whole parsers
    assert not lines, "\n".join(lines)


def test_a_table_with_a_wrong_default_and_a_dropped_alias_turns_the_check_red(release):
    table = args_of(release)
    tp, page = table.by_dest["tp_size"], table.by_dest["page_size"]
    assert tp.options == ("--tp-size", "--tensor-parallel-size") and page.default is None
    by_dest = {**table.by_dest, "tp_size": replace(tp, options=tp.options[:1]), "page_size": replace(page, default=16)}
    planted = ReleaseArgs(release, by_dest, {o: s for s in by_dest.values() for o in s.options})
    found = compare(release, probe(release)["args"], planted)
    record("planted-bug", plant="server-args table: a default changed, an alias dropped", disagreements=len(found))
    assert len(found) == 2, "\n".join(found)
    assert found[0].startswith(f"{release} page_size default") and found[1].startswith(f"{release} tp_size options")


def test_a_variable_the_table_says_no_release_reads_turns_the_check_red(release):
    emptied = {**ENV_VARS, "SGLANG_VLM_CACHE_SIZE_MB": replace(ENV_VARS["SGLANG_VLM_CACHE_SIZE_MB"], releases=())}
    found = compare_env(release, probe(release)["env"], emptied)
    record("planted-bug", plant="server-args env: a variable's releases emptied", disagreements=len(found))
    assert found == [f"{release} SGLANG_VLM_CACHE_SIZE_MB: the table says False, SGLang declares and reads it: True"]
