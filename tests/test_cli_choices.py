"""The CLI's choices come from the tables that define them, never spelled again in a sub-command.

The parser is built as ``kimi-viz`` builds it (:func:`kimi_viz.cli.build_parser`) and every option with
``choices`` is walked: each must be one this file knows, and equal the table it is read from. ``whatif``
checks its own choices (one-line errors), so its metavars are compared with the tables instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import pytest

from kimi_viz.cli import build_parser
from kimi_viz.devices import DEVICES
from kimi_viz.releases import CODE_PATHS
from kimi_viz.request.settings import DEFERS, EPD_BACKENDS, MODES, SERVINGS, TRANSPORTS, choices_metavar


def _encoder_presets() -> tuple[str, ...]:
    from kimi_viz.encoder.config import ENCODER_PRESETS  # torch: read only by this test

    return tuple(sorted(ENCODER_PRESETS))


def _processor_presets() -> tuple[str, ...]:
    from kimi_viz.preprocess.config import PROCESSOR_PRESETS

    return tuple(sorted(PROCESSOR_PRESETS))


def _backends() -> tuple[str, ...]:
    from kimi_viz.preprocess.config import BACKENDS

    return BACKENDS


def _alpha_policies() -> tuple[str, ...]:
    from kimi_viz.preprocess.images import ALPHA_POLICIES  # Pillow: read only by this test

    return ALPHA_POLICIES


def _triage_formats() -> tuple[str, ...]:
    from kimi_viz.cli.triage_cmd import FORMATS  # the CLI's own: how triage prints

    return FORMATS


# (sub-command path, option) -> the table its choices are, in the order --help shows them.
TABLES: dict[tuple[str, str], Callable[[], tuple[str, ...]]] = {
    ("triage", "--code-path"): lambda: (*reversed(CODE_PATHS), "both"),
    ("triage", "--mode"): lambda: ("auto", *MODES),
    ("triage", "--device"): lambda: DEVICES,
    ("triage", "--format"): _triage_formats,
    ("scenario run", "--mode"): lambda: MODES,
    ("scenario run", "--code-path"): lambda: tuple(reversed(CODE_PATHS)),
    ("encode", "--device"): lambda: DEVICES,
    ("encode", "--preset"): _encoder_presets,
    ("encode", "--dtype"): lambda: ("bf16", "fp32"),  # two of resolve_dtype's names: the CLI's own offer
    ("inspect", "--preset"): _processor_presets,
    ("inspect", "--backend"): _backends,
    ("inspect", "--alpha"): _alpha_policies,
}

# whatif's options that name their choices in the metavar (the sub-command checks them itself).
WHATIF_METAVARS: dict[str, Callable[[], tuple[str, ...]]] = {
    "--serving": lambda: SERVINGS,
    "--epd-backend": lambda: EPD_BACKENDS,
    "--mm-feature-transport": lambda: TRANSPORTS,
    "--defer": lambda: DEFERS,
    "--mode": lambda: MODES,
    "--device": lambda: DEVICES,
}


def _actions(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}".strip())
        else:
            yield path, action


@pytest.fixture(scope="module")
def actions() -> list[tuple[str, argparse.Action]]:
    return list(_actions(build_parser()))


def _option(action: argparse.Action) -> str:
    return max(action.option_strings, key=len) if action.option_strings else action.dest


def test_every_option_with_choices_reads_its_table(actions):
    found = {(path, _option(a)): tuple(a.choices) for path, a in actions if a.choices is not None}
    assert set(found) == set(TABLES), "an option with choices this test does not know, or one that went"
    wrong = {key: (found[key], TABLES[key]()) for key in TABLES if found[key] != TABLES[key]()}
    assert wrong == {}


def test_the_code_path_and_mode_options_name_each_table_entry_once(actions):
    """The derived choices really are the tables: every code path and mode, nothing more but 'both'/'auto'."""
    choices = {(path, _option(a)): a.choices for path, a in actions if a.choices is not None}
    assert set(choices["triage", "--code-path"]) == {*CODE_PATHS, "both"}
    assert set(choices["scenario run", "--code-path"]) == set(CODE_PATHS)
    assert set(choices["triage", "--mode"]) == {*MODES, "auto"}
    assert set(choices["scenario run", "--mode"]) == set(MODES) == {"pixels", "shapes"}
    assert set(DEVICES) == {"auto", "cpu", "cuda"}


def test_whatif_metavars_are_its_tables(actions):
    metavars = {_option(a): a.metavar for path, a in actions if path == "whatif" and _option(a) in WHATIF_METAVARS}
    assert metavars == {option: choices_metavar(table()) for option, table in WHATIF_METAVARS.items()}
