"""Read ``data/handling.toml``, the kit's classification of every dest and the environment variables it knows.

The file is written by hand; its header says how an entry is written. It is package data, so a
mistake in it is the kit's own bug: :func:`read_handling` raises ``ValueError`` naming the file and the
entry, and :func:`check_classified` when a dest of ``server_args.json`` is classified twice or not at
all. :mod:`.table` imports this module only when :data:`~.table.SERVER_ARGS` or
:data:`~.table.ENV_VARS` is first asked for, so that :func:`~.table.args_of` never loads the TOML parser.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from ._load import DATA, NAME, span
from .specs import DEPLOYMENT_FIELDS, SETTING_PREFIXES, Classification, EnvVar, Handling

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, tomllib's own code as published before it joined the standard library
    import tomli as tomllib

HANDLING_FILE = os.path.join(DATA, "handling.toml")
ARG_KEYS = ("dests", "handling", "effect", "sets")
ENV_KEYS = ("name", "handling", "effect", "sets", "releases", "default")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\*?")


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{os.path.basename(path)}: {error}") from None


def _dests(value: object, where: str) -> tuple[str, ...]:
    if not (isinstance(value, list) and value and all(isinstance(v, str) and NAME.fullmatch(v) for v in value)):
        raise ValueError(f"{where}: dests is a list of dests (ServerArgs field names), not {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}: dests {value!r} names one twice")
    return tuple(value)


def _handling(entry: dict[str, Any], keys: tuple[str, ...], where: str) -> tuple[Handling, str, str | None]:
    """Return an entry's handling, effect and sets, each checked."""
    unknown = sorted(set(entry) - set(keys))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; an entry has {', '.join(keys)}")
    handling = next((h for h in Handling if h.value == entry.get("handling")), None)
    if handling is None:
        raise ValueError(f"{where}: handling {entry.get('handling')!r} is none of {[h.value for h in Handling]}")
    effect = entry.get("effect")
    if not (isinstance(effect, str) and effect.strip() and "\n" not in effect):
        raise ValueError(f"{where}: effect is one line of text, not {effect!r}")
    sets = entry.get("sets")
    if (sets is None) == (handling is Handling.MODELLED):
        raise ValueError(f"{where}: a modelled entry, and only a modelled one, says which kit setting it `sets`")
    if sets is not None:
        prefix, _, name = str(sets).partition(".")
        if f"{prefix}." not in SETTING_PREFIXES or not NAME.fullmatch(name):
            raise ValueError(f"{where}: sets {sets!r} is none of {', '.join(p + 'NAME' for p in SETTING_PREFIXES)}")
        if prefix == "deployment" and name not in DEPLOYMENT_FIELDS:
            raise ValueError(f"{where}: sets {sets!r}: the deployment has {', '.join(DEPLOYMENT_FIELDS)}")
    return handling, effect, sets


def read_handling(path: str = HANDLING_FILE) -> tuple[tuple[Classification, ...], tuple[EnvVar, ...]]:
    """Return the ``[[arg]]`` classifications and the ``[[env]]`` variables of ``handling.toml``."""
    name = os.path.basename(path)
    data = _read_toml(path)
    if set(data) - {"arg", "env"} or not isinstance(data.get("arg"), list) or not isinstance(data.get("env", []), list):
        raise ValueError(f"{name}: expected [[arg]] and [[env]] tables only, found {sorted(data)}")
    classes = []
    for index, entry in enumerate(data["arg"]):
        dests = _dests(entry.get("dests"), f"{name}: [[arg]] #{index + 1}")
        classes.append(Classification(dests, *_handling(entry, ARG_KEYS, f"{name}: [[arg]] {dests[0]}")))
    env_vars = []
    seen = set()
    for index, entry in enumerate(data.get("env", [])):
        var = entry.get("name")
        where = f"{name}: [[env]] {var if isinstance(var, str) else f'#{index + 1}'}"
        if not (isinstance(var, str) and ENV_NAME.fullmatch(var)) or var in seen:
            raise ValueError(f"{where}: name is an environment variable's name (or a prefix ending in '*'), once")
        seen.add(var)
        handling, effect, sets = _handling(entry, ENV_KEYS, where)
        env_vars.append(EnvVar(var, handling, effect, sets, span(entry.get("releases"), where), entry.get("default")))
    return tuple(classes), tuple(env_vars)


def check_classified(classes: tuple[Classification, ...], dests: set[str], where: str = "handling.toml") -> None:
    """Raise ValueError unless every dest of the table is classified exactly once, and nothing else is."""
    seen: dict[str, int] = {}
    for entry in classes:
        for dest in entry.dests:
            seen[dest] = seen.get(dest, 0) + 1
    twice = sorted(d for d, n in seen.items() if n > 1)
    missing = sorted(dests - set(seen))
    unknown = sorted(set(seen) - dests)
    if twice or missing or unknown:
        raise ValueError(
            f"{where}: every dest of server_args.json is classified exactly once; "
            f"twice: {twice}, not classified: {missing}, no such dest: {unknown}"
        )
