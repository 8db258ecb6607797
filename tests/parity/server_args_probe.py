"""Every server argument one SGLang release's parser declares, as JSON: the facts of ``kimi_viz.server_args``.

Two ways to run it.

**One release** (with that release's interpreter; a guest release's sources first on ``PYTHONPATH``)::

    $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python tests/parity/server_args_probe.py
    PYTHONPATH=/work/sgl/0.5.21 $HOME/.cache/kimi-viz/sglang-envs/0.5.23/bin/python \\
        tests/parity/server_args_probe.py --release 0.5.21 [--env SGLANG_VLM_CACHE_SIZE_MB ...]

prints ``{"release", "args": {dest: spec}, "env": {name: default or null}}``. It imports only SGLang
(``sglang.srt.server_args``), never the kit, and builds the parser exactly as a server does
(``ServerArgs.add_cli_args`` on a fresh ``argparse.ArgumentParser``) with every ``SGLANG_*``
variable removed from its environment first (one of them widens a flag's choices).

**Every release** (the maintainer's regeneration; any Python, the lane's venvs built)::

    python tests/parity/server_args_probe.py --write \\
        --envs $HOME/.cache/kimi-viz/sglang-envs --sources /work/sgl

runs the one-release probe for each release of :data:`HOSTS` in a subprocess (its host venv's
interpreter, a guest with ``--sources/<release>`` on ``PYTHONPATH``; ``--sources`` defaults to
``$KIMI_VIZ_SGLANG_SOURCES``, then ``<envs>/sources``, which ``.ci/sglang-envs.sh`` fills) and writes
``kimi_viz/server_args/data/server_args.json``. ``kimi_viz/server_args/data/handling.toml`` is
written by hand: a new dest must be classified there (``tests/test_server_args_table.py`` fails until
it is). ``tests/parity/test_server_args_parity.py`` compares a fresh probe of each release with the
stored table.

One spec per dest (several parser actions may share one: an old spelling kept as a deprecated alias,
``--x``/``--no-x``): its **main** action (the first not marked deprecated, else the first) gives
``action``, ``nargs``, ``type``, ``choices`` and ``const``; ``options`` lists every spelling, the main
action's first; ``deprecated`` those of SGLang's ``Deprecated*`` actions; ``variants`` the spellings
whose own action parses differently from the main one (a ``--no-x`` stores False; a deprecated alias
may take no choices or store a constant). Action kinds: argparse's own (``store``, ``store_true``,
``store_false``, ``store_const``, ``append``, ``count``); SGLang's deprecated actions as the argparse
kind they behave as; ``BooleanOptionalAction`` as ``store_true`` plus a ``store_false`` variant;
``DeprecatedAction`` as ``noop`` (accepted, only a warning) or ``error`` (the parser refuses it);
``LoRAPathAction`` as ``store`` of ``str`` values (its JSON-object values are not told apart). A
``store_const`` with ``nargs`` null takes one value (checked against ``choices``) and stores ``const``.
``required`` marks a dest the parser requires (``--model-path``). ``default`` is what ``parse_args([])``
leaves in the namespace (the first action's default for a shared
dest, a string default passed through ``type``): the value a server takes when the flag is absent.
``field_default`` (only where it differs) is the ``ServerArgs`` field's own default, which a server
built in Python (``sglang.Engine(...)``) takes: no dest of 0.5.17–0.5.23 has one, and the stored table
has no place for it, so one appearing fails the lane (and the table's loader) until it gets one.
Unknown action classes, and defaults that are not JSON, stop the probe: the table never holds a guess.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "kimi_viz" / "server_args" / "data" / "server_args.json"
PRINTED = ROOT / "kimi_viz" / "server_args" / "data" / "startup_fields.json"
#: The lane's venvs and the releases each imports: its own, then its guests (sources on PYTHONPATH).
HOSTS = {"0.5.18": ("0.5.18", "0.5.17", "0.5.19", "0.5.20"), "0.5.23": ("0.5.23", "0.5.21", "0.5.22")}
ORDER = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
FORMAT = 1

_ARGPARSE_KINDS = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._StoreConstAction: "store_const",
    argparse._AppendAction: "append",
    argparse._CountAction: "count",
}
# SGLang's own action classes (sglang/srt/arg_groups/argparse_actions.py), by name: the kind each behaves as.
_SGLANG_KINDS = {
    "DeprecatedAliasStoreAction": "store",
    "DeprecatedStoreTrueAction": "store_true",
    "DeprecatedStoreConstAction": "store_const",
    "LoRAPathAction": "store",
}
_DEPRECATED = {
    "DeprecatedAliasStoreAction",
    "DeprecatedStoreTrueAction",
    "DeprecatedStoreConstAction",
    "DeprecatedAction",
}


class ProbeError(SystemExit):
    """The probe met something it cannot record faithfully; its message says what."""

    def __init__(self, message: str) -> None:
        super().__init__(f"server_args_probe: {message}")


def plain(value, where: str):
    """Return ``value`` as JSON data (tuples as lists, sets sorted, enums by value); stop on anything else."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ProbeError(f"{where}: {value!r} is not JSON")
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value, where)
    if isinstance(value, (list, tuple)):
        return [plain(v, where) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v, where) for v in value), key=lambda v: (type(v).__name__, v))
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain(v, where) for k, v in value.items()}
    raise ProbeError(f"{where}: {type(value).__name__} {value!r} is not JSON data")


def _kind(action: argparse.Action) -> str:
    name = type(action).__name__
    if name == "DeprecatedAction":
        return "error" if getattr(action, "error_message", None) else "noop"
    for cls in type(action).__mro__:
        if cls in _ARGPARSE_KINDS:
            return _ARGPARSE_KINDS[cls]
    if name in _SGLANG_KINDS:
        return _SGLANG_KINDS[name]
    raise ProbeError(f"{action.option_strings}: action class {name} is unknown; teach the probe what it does")


def _facts(action: argparse.Action, kind: str, options: list[str], const=None) -> dict:
    """Return how ``options`` of ``action`` parse: kind, nargs, type name, choices, const."""
    where = f"{action.dest} {options}"
    value_type = action.type
    if value_type is not None and not callable(value_type):
        raise ProbeError(f"{where}: type {value_type!r} is not callable")
    type_name = None if value_type is None else getattr(value_type, "__name__", type(value_type).__name__)
    if type_name == "<lambda>":
        raise ProbeError(f"{where}: a lambda type has no name to record")
    if type(action).__name__ == "DeprecatedStoreConstAction":
        const = action.const_value
    elif const is None:
        const = action.const
    return {
        "options": options,
        "action": kind,
        "nargs": action.nargs,
        "type": type_name,
        "choices": None if action.choices is None else plain(action.choices, where),
        "const": plain(const, where),
    }


def _forms(action: argparse.Action) -> list[dict]:
    """Return one parse form per behaviour of ``action``: two for ``--x``/``--no-x``, else one."""
    if isinstance(action, argparse.BooleanOptionalAction):
        yes = [o for o in action.option_strings if not o.startswith("--no-")]
        no = [o for o in action.option_strings if o.startswith("--no-")]
        return [_facts(action, "store_true", yes, True), _facts(action, "store_false", no, False)]
    return [_facts(action, _kind(action), list(action.option_strings))]


PARSE_KEYS = ("action", "nargs", "type", "choices", "const")


def specs(parser: argparse.ArgumentParser, fields: dict) -> dict[str, dict]:
    """Return ``{dest: spec}`` for every optional argument of ``parser`` (``fields``: ServerArgs field defaults)."""
    grouped: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            grouped.setdefault(action.dest, []).append(action)
    required = {action.dest for action in parser._actions if action.required}
    for action in parser._actions:
        action.required = False  # --model-path: the defaults are read without it
    namespace = vars(parser.parse_args([]))
    out = {}
    for dest, actions in grouped.items():
        deprecated = [a for a in actions if type(a).__name__ in _DEPRECATED]
        main = next((a for a in actions if a not in deprecated), actions[0])
        forms = [form for action in [main, *(a for a in actions if a is not main)] for form in _forms(action)]
        first = forms[0]
        spec = {
            "options": [o for form in forms for o in form["options"]],
            "deprecated": [o for a in deprecated for o in a.option_strings],
            **{key: first[key] for key in PARSE_KEYS},
            "variants": [form for form in forms[1:] if any(form[k] != first[k] for k in PARSE_KEYS)],
            "default": plain(namespace[dest], f"{dest} default") if dest in namespace else None,
            "required": dest in required,
        }
        if len(set(spec["options"])) != len(spec["options"]):
            raise ProbeError(f"{dest}: an option string is declared twice: {spec['options']}")
        if dest in fields and fields[dest] is not NO_DEFAULT and fields[dest] != spec["default"]:
            spec["field_default"] = fields[dest]
        out[dest] = spec
    return out


NO_DEFAULT = object()  # a field without a default (--model-path)


def field_defaults(server_args: type) -> dict:
    """Return ``{field: default}`` of ServerArgs, a dataclass or a msgspec Struct (NO_DEFAULT: a field without one)."""
    import dataclasses

    if dataclasses.is_dataclass(server_args):
        fields = dataclasses.fields(server_args)
        missing: tuple = (dataclasses.MISSING,)
    else:
        import msgspec

        fields = msgspec.structs.fields(server_args)
        missing = (msgspec.NODEFAULT,)
    out = {}
    for field in fields:
        if field.default not in missing:
            value = field.default
        elif field.default_factory not in missing:
            value = field.default_factory()
        else:
            out[field.name] = NO_DEFAULT
            continue
        try:
            out[field.name] = plain(value, f"field {field.name}")
        except ProbeError:
            out[field.name] = {"unrecorded": type(value).__name__}  # a field with no CLI spelling, say a logger
    return out


def env_defaults(names: list[str]) -> dict:
    """Return, per variable, ``{"default", "read"}``: its default in the release's ``sglang.srt.environ.Envs``
    (None when Envs lacks it) and whether any other module of the package names it."""
    import sglang
    from sglang.srt.environ import Envs

    package = Path(sglang.__file__).resolve().parent
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in package.rglob("*.py") if p.name != "environ.py"]
    out = {}
    for name in names:
        field = vars(Envs).get(name)
        default = None
        if field is not None:
            default = plain(field.default() if callable(field.default) else field.default, name)
        out[name] = {"declared": field is not None, "default": default, "read": any(name in t for t in texts)}
    return out


def printed_fields(server_args: type) -> list[str]:
    """Return the fields a server's start-up line prints, in order: the dataclass repr's up to 0.5.18
    (``server_args=ServerArgs(...)``), the keys of ``resolved_dict()`` from 0.5.19 (``server_args={...}``), read
    from a record built on the CPU (its field set does not depend on the model)."""
    import dataclasses

    if hasattr(server_args, "resolved_dict"):
        return list(server_args(model_path="/nonexistent-model", device="cpu").resolved_dict())
    return [field.name for field in dataclasses.fields(server_args) if field.repr]


def probe(release: str | None, env_names: list[str]) -> dict:
    """Return one release's facts: ``{"release", "args", "env", "printed"}`` (run with that release's
    interpreter)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import sglang
    from sglang.srt.server_args import ServerArgs

    if release is not None and sglang.__version__ != release:
        raise ProbeError(f"asked for {release}, but `import sglang` gives {sglang.__version__} ({sglang.__file__})")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return {
        "release": sglang.__version__,
        "args": specs(parser, field_defaults(ServerArgs)),
        "env": env_defaults(env_names),
        "printed": printed_fields(ServerArgs),
    }


def clean_environment(pythonpath: str | None = None) -> dict[str, str]:
    """Return this process's environment without any ``SGLANG_*`` variable, with ``PYTHONPATH`` as given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_") and k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def run(python: str, release: str, sources: Path | None, env_names: list[str] = ()) -> dict:
    """Return a fresh probe of ``release`` run by ``python`` (a guest's ``sources/<release>`` on PYTHONPATH)."""
    pythonpath = None
    if sources is not None:
        folder = sources / release
        if not (folder / "sglang" / "srt" / "server_args.py").is_file():
            raise ProbeError(f"{folder}: no sglang/srt/server_args.py (the sources of sglang {release})")
        pythonpath = str(folder)
    command = [python, "-P", "-X", "utf8", __file__, "--release", release]
    for name in env_names:
        command += ["--env", name]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=clean_environment(pythonpath), cwd=ROOT
    )
    if done.returncode != 0:
        raise ProbeError(f"probe of {release} with {python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def compact(probes: dict[str, dict]) -> dict:
    """Return the stored table: per dest, ``[span, spec]`` rows over the releases where the spec is identical."""
    args: dict[str, list] = {}
    dests = sorted({dest for facts in probes.values() for dest in facts["args"]})
    for dest in dests:
        rows: list[list] = []
        previous = None
        for index, release in enumerate(ORDER):
            spec = probes[release]["args"].get(dest)
            if spec is not None and previous is not None and spec == previous[1] and previous[2] == index - 1:
                previous[2] = index
            elif spec is not None:
                previous = [index, spec, index]
                rows.append(previous)
            if spec is None:
                previous = None
        args[dest] = [[_span(first, last), _lean(spec)] for first, spec, last in rows]
    return {"format": FORMAT, "releases": list(ORDER), "args": args}


def _span(first: int, last: int) -> str:
    return ORDER[first] if first == last else f"{ORDER[first]}-{ORDER[last]}"


# Keys left out of a stored spec when they hold their usual value.
USUAL = {
    "deprecated": [],
    "action": "store",
    "nargs": None,
    "type": None,
    "choices": None,
    "const": None,
    "required": False,
}


def _lean(spec: dict) -> dict:
    out = {k: v for k, v in spec.items() if not (k in USUAL and v == USUAL[k]) and k != "variants"}
    if spec["variants"]:
        out["variants"] = [
            {k: v for k, v in form.items() if not (k in USUAL and v == USUAL[k])} for form in spec["variants"]
        ]
    return out


def render(table: dict) -> str:
    """Return the stored table as text: one line per dest, so that a regeneration's diff reads dest by dest."""
    compact_json = {"separators": (",", ":")}
    rows = [f"{json.dumps(dest)}:{json.dumps(spans, **compact_json)}" for dest, spans in table["args"].items()]
    head = f'{{"format":{table["format"]},"releases":{json.dumps(table["releases"], **compact_json)},"args":{{'
    return head + "\n" + ",\n".join(rows) + "\n}}\n"


def compact_printed(probes: dict[str, dict]) -> dict:
    """Return the stored start-up fields: per field, the spans of the releases whose start-up line prints it."""
    fields: dict[str, list[str]] = {}
    for name in sorted({name for facts in probes.values() for name in facts["printed"]}):
        indices = [i for i, release in enumerate(ORDER) if name in probes[release]["printed"]]
        runs: list[list[int]] = []
        for index in indices:
            if runs and index == runs[-1][-1] + 1:
                runs[-1].append(index)
            else:
                runs.append([index])
        fields[name] = [_span(run[0], run[-1]) for run in runs]
    return {"format": FORMAT, "releases": list(ORDER), "fields": fields}


def render_printed(table: dict) -> str:
    """Return the stored start-up fields as text: one line per field."""
    rows = [f"{json.dumps(name)}:{json.dumps(spans)}" for name, spans in table["fields"].items()]
    head = f'{{"format":{table["format"]},"releases":{json.dumps(table["releases"])},"fields":{{'
    return head + "\n" + ",\n".join(rows) + "\n}}\n"


def write(envs: Path, sources: Path) -> None:
    """Probe every release and write the stored table."""
    probes = {}
    for host, guests in HOSTS.items():
        python = envs / host / "bin" / "python"
        if not python.is_file():
            raise ProbeError(f"{python}: no venv for sglang {host} (bash .ci/sglang-envs.sh {envs})")
        for release in guests:
            probes[release] = run(str(python), release, None if release == host else sources)
            print(f"sglang {release}: {len(probes[release]['args'])} dests", file=sys.stderr)
    TABLE.write_text(render(compact(probes)), encoding="utf-8")
    PRINTED.write_text(render_printed(compact_printed(probes)), encoding="utf-8")
    print(f"wrote {TABLE} ({TABLE.stat().st_size} bytes), {PRINTED} ({PRINTED.stat().st_size} bytes)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", help="the release `import sglang` must give (default: whatever it gives)")
    parser.add_argument("--env", action="append", default=[], help="an SGLANG_* variable whose default to report")
    parser.add_argument("--write", action="store_true", help="probe every release and write the stored table")
    parser.add_argument("--envs", type=Path, default=Path(os.environ.get("SGLANG_ENVS", ROOT / ".venv-sglang")))
    parser.add_argument("--sources", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.write:
        sources = args.sources or Path(os.environ.get("KIMI_VIZ_SGLANG_SOURCES") or args.envs / "sources")
        write(args.envs.resolve(), sources.resolve())
        return 0
    for name in [k for k in os.environ if k.startswith("SGLANG_")]:
        del os.environ[name]
    json.dump(probe(args.release, args.env), sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
