"""SGLang's server arguments, 0.5.17–0.5.23: each release's parser as data, and what the kit does with each.

:mod:`.table` holds the API (:func:`~.table.args_of`, :data:`~.table.SERVER_ARGS`,
:data:`~.table.ENV_VARS`, :func:`~.table.releases_with`, :func:`~.table.nearest_option`); :mod:`.specs`
the records; ``data/server_args.json`` the facts read from each release's own parser
(``tests/parity/server_args_probe.py --write`` regenerates it) and ``data/handling.toml`` the kit's
classification of every dest. Names are imported lazily; the files are read on first use.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "ActionKind": "specs",
    "ArgSpec": "specs",
    "DEPLOYMENT_FIELDS": "specs",
    "EnvVar": "specs",
    "Handling": "specs",
    "OptionForm": "specs",
    "ReleaseArgs": "specs",
    "ServerArg": "table",
    "SERVER_ARGS": "table",
    "ENV_VARS": "table",
    "args_of": "table",
    "env_var": "table",
    "nearest_option": "table",
    "releases_with": "table",
    "printed_fields": "table",
    "releases_printing": "table",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
