"""The deployment a question is asked on, read from what the user has: typed options, a launch command, a log.

``--server "CMD"`` and ``--server-log FILE`` describe the server the user runs; the kit's own options still
override them. :func:`read_deployment` merges the three into the settings a replay takes — the workload's
:class:`~kimi_viz.scheduler.flags.LoadSettings`, the request side's
:class:`~kimi_viz.request.settings.ServerSettings`, the release and the attention-TP size — with a
:class:`~kimi_viz.server_args.sources.ServerReport` saying where every value came from:

1. what was typed (``--page-size 16``);
2. the log: what the server ran — its ``server_args=`` line, then the pool lines, which bound the replay's memory;
3. the launch command, read with the release's own argument table;
4. SGLang's default for the release, or for the GPU (``--gpu``) where SGLang sizes it by the machine.

Flags given that the kit does not model are listed with the one line saying what each could change. The
attention-TP size is ``tp_size // attention-DP // attention-CP``, as SGLang derives it
(``layers/dp_attention.py``; 0.5.22 on ``runtime_context.derive_attn_tp_size``, where ``--dp-size N
--enable-dp-attention`` becomes ``--attn-dp-size N``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from .._records import frozen
from ..errors import KimiVizError, ServerInputError, WhatIfError
from ..releases import NEWEST, RELEASES, release_for, release_span
from ..request.model_folder import ModelFolder
from ..request.settings import ServerSettings
from ..scheduler.flags import FLAGS, Flag, LoadSettings
from ..server_args.command import ParsedCommand, parse_command, split_command
from ..server_args.log import ServerLog, read_server_log
from ..server_args.sources import NotModelled, ServerReport, ServerValue, Source, SourceKind, show_value
from ..server_args.startup import attention_tp, startup_facts
from ..server_args.table import ENV_VARS, SERVER_ARGS, Handling, args_of

# The request side's settings each SGLang setting feeds (ServerSettings field -> ServerArgs field or env var).
SETTING_DESTS = {
    "serving": "encoder_only",
    "transport": "mm_feature_transport",
    "preprocess_cache_mb": "mm_preprocess_cache_size_mb",
    "epd_backend": "SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU",
}
TP_DESTS = ("tp_size", "dp_size", "enable_dp_attention", "attn_dp_size", "attn_cp_size")


@frozen
class DeploymentInput:
    """What the user gave about the server: typed options (by the kit's field names), a launch command, a log."""

    server: str | None = None  # --server "CMD"
    server_log: str | None = None  # --server-log FILE
    sglang_version: str | None = None  # --sglang-version, typed
    tp_size: int | None = None  # --tp, typed (the attention-TP size)
    typed_load: Mapping[str, Any] | None = None  # LoadSettings fields typed
    typed_settings: Mapping[str, Any] | None = None  # ServerSettings fields typed
    needs_release: bool = True  # a sweep asks every release: it needs none
    model: ModelFolder | None = None  # --model-path: its preprocessor_config.json is the producer's config


@frozen
class Deployment:
    """The server a question is asked on: release, attention-TP size, settings, and where each came from."""

    sglang_version: str | None  # None: every release (a sweep)
    tp_size: int | None  # None: not known (a sweep, or not given)
    load: LoadSettings
    settings: ServerSettings
    report: ServerReport
    refusals: Mapping[str, str]  # release -> the one line on which it refuses the launch command (a sweep's n/a)
    model: ModelFolder | None = None  # the checkpoint folder read (--model-path)


def _given_log(log: ServerLog | None, dest: str) -> tuple[bool, Any, Source | None]:
    """Return whether the log's start-up gives ``dest``, its value and the line it was read from."""
    if log is None:
        return False, None, None
    start = log.start
    pool, mamba = start.pool, start.mamba
    resolved = {  # the pools' lines print what the server resolved: they win over its arguments
        "max_total_tokens": None if pool is None else (pool.max_total_num_tokens, pool.line),
        "max_running_requests": None if pool is None else (pool.max_running_requests, pool.line),
        "chunked_prefill_size": None if pool is None else (pool.chunked_prefill_size, pool.line),
        "max_prefill_tokens": None if pool is None else (pool.max_prefill_tokens, pool.line),
        "context_length": None if pool is None else (pool.context_len, pool.line),
        "max_mamba_cache_size": None if mamba is None else (mamba.max_mamba_cache_size, mamba.line),
    }.get(dest)
    if resolved is not None:
        return True, resolved[0], Source(SourceKind.LOG, f"server log line {resolved[1]}")
    arguments = start.arguments
    if arguments is not None and dest in arguments.arguments.values:
        return True, arguments.arguments.values[dest], Source(SourceKind.LOG, f"server log line {arguments.line}")
    return False, None, None


def _given_command(command: ParsedCommand | None, dest: str) -> tuple[bool, Any, Source | None]:
    if command is None:
        return False, None, None
    if dest in command.command.env:
        value = command.command.env[dest]
        return True, value, Source(SourceKind.COMMAND, f"the launch command: {dest}={value}")
    given = command.value_of(dest)
    if given is None:
        return False, None, None
    return True, given.value, Source(SourceKind.COMMAND, f"the launch command: {given.option}")


def _release(given: DeploymentInput, log: ServerLog | None) -> tuple[str | None, str]:
    """Return the release to replay and the sentence saying how it was found."""
    if given.sglang_version is not None:
        release, sentence = release_for(given.sglang_version)
        return given.sglang_version, f"SGLang {release.version}: --sglang-version (typed)"
    if log is not None and log.start.version is not None:
        version = log.start.version
        release, sentence = release_for(version.version)
        return version.version, f"SGLang {release.version}: server log line {version.line} names it"
    if log is not None and log.start.arguments is not None:
        facts = startup_facts(log.start)
        line = log.start.arguments.line
        if facts.releases:
            newest = facts.releases[-1]
            if len(facts.releases) == 1:
                return newest, f"SGLang {newest}: the arguments of server log line {line} are {newest}'s"
            return newest, (
                f"SGLang {newest}: the arguments of server log line {line} fit SGLang "
                f"{release_span(list(facts.releases))}; the newest is replayed (pass --sglang-version to pick another)"
            )
        if given.needs_release:
            raise ServerInputError(
                f"--server-log: the arguments of line {line} fit no release the kit knows "
                f"({release_span(list(RELEASES))}); pass --sglang-version V"
            )
    if given.needs_release:
        raise WhatIfError(
            "--sglang-version missing: a launch command does not say its release; name it (e.g. --sglang-version "
            f"{NEWEST}), give the server's log with --server-log, or pass --sweep"
        )
    return None, "every release (a sweep)"


def _attention_tp(values: dict[str, tuple[Any, Source]]) -> tuple[int, str]:
    """Return the attention-TP size SGLang derives from the parallel flags given, and the sentence saying how."""
    derived = attention_tp({dest: value for dest, (value, _) in values.items()})
    where = sorted({str(source) for _, source in values.values()})
    return derived.size, f"attention-TP {derived.size} = {derived.how} ({'; '.join(where)})"


def _typed(flag_option: str) -> Source:
    return Source(SourceKind.TYPED, f"{flag_option} (typed)")


def _default(flag: Flag, version: str | None) -> Source:
    release = f"SGLang {version}'s" if version else "SGLang's"
    if flag.field == "chunked_prefill_size":
        return Source(SourceKind.GPU_DEFAULT, "SGLang's default for this GPU")
    if flag.field in ("max_total_tokens", "max_running_requests", "max_mamba_cache_size"):
        return Source(
            SourceKind.KIT, "unbounded: SGLang sizes it from the GPU's memory; give it, or the log's pool line"
        )
    if flag.dest is None:
        return Source(SourceKind.DEFAULT, "the kit's default")
    return Source(SourceKind.DEFAULT, f"{release} default")


def _load_value(flag: Flag, value: Any, source: Source) -> Any:
    """Return ``value`` (as the log or the command holds it) as the LoadSettings field takes it; WhatIfError naming
    the source for a value the kit does not model."""
    if flag.kind == "choice" and flag.dest != "device" and value not in flag.choices:
        raise WhatIfError(
            f"{flag.option} {value} ({source}): SGLang takes it, the kit replays {', '.join(flag.choices)} only, so "
            f"the answer would not be SGLang's; type {flag.option} {flag.choices[0]} to ask as if the server ran that"
        )
    try:
        if flag.dest == "device":
            return "cuda" if value in (None, "cuda") else str(value)
        if flag.kind == "switch":
            return bool(value)
        if flag.kind in ("count",) and (value is None or (isinstance(value, int) and value <= 0 and flag.can_be_off)):
            return None
        return flag.parse(value)
    except WhatIfError as exc:
        raise WhatIfError(f"{exc} ({source})") from None


def _given(log: ServerLog | None, command: ParsedCommand | None, dest: str) -> tuple[bool, Any, Source | None]:
    """Return whether the log, else the launch command, gives ``dest`` (a value printed unset does not), its value
    and its source."""
    found, value, source = _given_log(log, dest)
    if not found:
        found, value, source = _given_command(command, dest)
    return found and value is not None, value, source


def _read_command(given: DeploymentInput, release: str | None) -> tuple[ParsedCommand | None, dict[str, str]]:
    """Return the launch command read with ``release``'s table (every release's for a sweep), and the releases
    that refuse it with their one line."""
    if given.server is None:
        return None, {}
    split = split_command(given.server)
    if release is not None:
        return parse_command(split, release), {}
    command: ParsedCommand | None = None
    refusals: dict[str, str] = {}
    for name in RELEASES:  # a sweep: every release reads the command; one that refuses it is n/a
        try:
            parsed = parse_command(split, name)
        except ServerInputError as exc:
            refusals[name] = str(exc)
            continue
        command = command or parsed
    if command is None:
        raise ServerInputError(next(iter(refusals.values())))
    return command, refusals


def _load_settings(
    typed: Mapping[str, Any], log: ServerLog | None, command: ParsedCommand | None, release: str | None
) -> tuple[LoadSettings, list[ServerValue], list[str]]:
    """Return the scheduler's flags (typed, else the log's, else the command's, else SGLang's defaults), each value
    with its source, and the notes on values the kit set aside."""
    values: list[ServerValue] = []
    notes: list[str] = []
    load_kwargs: dict[str, Any] = {}
    for flag in FLAGS:
        name = flag.dest or flag.field
        if flag.field in typed:
            load_kwargs[flag.field] = typed[flag.field]
            found, value, source = (False, None, None) if flag.dest is None else _given(log, command, flag.dest)
            overridden = f", over {source}: {show_value(value)}" if found and value != typed[flag.field] else ""
            values.append(
                ServerValue(name, typed[flag.field], Source(SourceKind.TYPED, f"{flag.option} (typed{overridden})"))
            )
            continue
        found, value, source = (False, None, None) if flag.dest is None else _given(log, command, flag.dest)
        if found and flag.field == "attention_backend" and value not in flag.choices:
            notes.append(
                f"attention_backend {value} ({source}): not one of Kimi-K3's MLA backends the kit knows; the page "
                "the server printed is used"
            )
            found = False
        if not found or source is None:
            values.append(ServerValue(name, flag.default, _default(flag, release)))
            continue
        if flag.kind == "megabytes" and isinstance(value, str):
            value = _megabytes(value, source)
        load_kwargs[flag.field] = _load_value(flag, value, source)
        values.append(ServerValue(name, load_kwargs[flag.field], source))
    try:
        return LoadSettings(**load_kwargs), values, notes
    except WhatIfError as exc:
        raise WhatIfError(f"{exc}; the server's settings are refused as the kit reads them") from None


def _tp_size(given: DeploymentInput, log: ServerLog | None, command: ParsedCommand | None) -> tuple[int | None, str]:
    """Return the attention-TP size (typed, else derived from the log's or command's parallel flags; a launch command
    that sets none runs SGLang's defaults, TP 1) and how (None: nothing says)."""
    if given.tp_size is not None:
        return given.tp_size, f"attention-TP {given.tp_size}: --tp (typed)"
    tp_values: dict[str, tuple[Any, Source]] = {}
    for dest in TP_DESTS:
        found, value, source = _given(log, command, dest)
        if found and source is not None:
            tp_values[dest] = (value, source)
    if tp_values:
        return _attention_tp(tp_values)
    if command is not None:
        derived = attention_tp({})
        return derived.size, (
            f"attention-TP {derived.size} = {derived.how} (SGLang's default: the launch command sets no parallel flag)"
        )
    return None, ""


def read_deployment(given: DeploymentInput) -> Deployment:
    """Return the :class:`Deployment` the typed options, the launch command and the log describe; raise
    ServerInputError or WhatIfError (one line) for input that cannot be read or that the kit does not model."""
    model = given.model
    if model is not None and not model.is_k3:
        raise WhatIfError(
            f"--model-path {model.asked}: config.json names {model.architecture}. {model.facts.note}. The kit "
            "replays Kimi-K3's code only; to see Kimi-K3's deferred split under Kimi-K2.5's limits pass "
            "--producer-config kimi-k25 instead"
        )
    log = None if given.server_log is None else read_server_log(given.server_log)
    version, release_sentence = _release(given, log)
    release = None if version is None else release_for(version)[0].version
    command, refusals = _read_command(given, release)
    load, values, notes = _load_settings(given.typed_load or {}, log, command, release)
    settings, setting_values = _settings(dict(given.typed_settings or {}), log, command, given.model)
    tp_size, tp_sentence = _tp_size(given, log, command)
    found, context, source = _given(log, command, "context_length")
    context_value = [ServerValue("context_length", int(context), source)] if found and source is not None else []
    inputs = tuple(
        text
        for text, present in (
            ("--server", command is not None),
            (f"--server-log {given.server_log}", log is not None),
            (f"--model-path {model.asked if model else ''}", model is not None),
        )
        if present
    )
    if model is not None and model.placeholder.mismatch is not None:
        notes.append(f"--model-path {model.asked}: {model.placeholder.mismatch}")
    report = ServerReport(
        (*values, *setting_values, *context_value),
        _not_modelled(release or NEWEST, log, command),
        release_sentence,
        tp_sentence,
        inputs,
        (*_log_notes(log), *notes),
    )
    return Deployment(version, tp_size, load, settings, report, refusals, model)


def _megabytes(text: str, source: Source) -> float:
    try:
        return float(text)
    except ValueError:
        raise WhatIfError(f"SGLANG_VLM_CACHE_SIZE_MB {text!r}: expected a size in MB ({source})") from None


def _settings(
    typed: dict[str, Any], log: ServerLog | None, command: ParsedCommand | None, model: ModelFolder | None = None
) -> tuple[ServerSettings, list[ServerValue]]:
    """Return the request side's settings from what was typed, the log, the command and the checkpoint folder,
    with their sources."""
    kwargs: dict[str, Any] = dict(typed)
    values: list[ServerValue] = []
    if model is not None and "producer_config" not in typed:
        config = os.path.join(model.path, "preprocessor_config.json")
        kwargs["producer_config"] = config
        folder = Source(SourceKind.TYPED, f"--model-path {model.asked}")
        values.append(ServerValue("preprocessor_config.json", config, folder))
    for field_name, dest in SETTING_DESTS.items():
        if field_name in typed:
            values.append(ServerValue(dest, typed[field_name], Source(SourceKind.TYPED, f"{field_name} (typed)")))
            continue
        found, value, source = _given(log, command, dest)
        if not found or source is None:
            continue
        if field_name == "serving":
            kwargs[field_name] = "epd-encoder" if value else "normal"
        elif field_name == "transport":
            kwargs[field_name] = "auto" if value is None else str(value)
        elif field_name == "epd_backend":
            kwargs[field_name] = "gpu" if str(value).strip().lower() in ("1", "true", "yes") else "cpu"
        else:
            kwargs[field_name] = None if value is None else int(value)
        values.append(ServerValue(dest, value, source))
    if "transport" not in typed and "transport" not in kwargs:
        _old_transport(kwargs, values, log, command)
    if kwargs.get("serving") != "epd-encoder" and "epd_backend" not in typed:
        kwargs.pop("epd_backend", None)  # the encoder's environment variable says nothing of a normal server
    known = {f.name for f in fields(ServerSettings)}
    try:
        return ServerSettings(**{k: v for k, v in kwargs.items() if k in known}), values
    except KimiVizError as exc:
        raise WhatIfError(f"{exc}; as the server's settings give it") from None


def _old_transport(
    kwargs: dict[str, Any], values: list[ServerValue], log: ServerLog | None, command: ParsedCommand | None
) -> None:
    """Read the transport's old spellings where --mm-feature-transport is unset: ``--keep-mm-feature-on-device``
    (up to 0.5.20) and ``SGLANG_USE_CUDA_IPC_TRANSPORT`` (1 picks cuda_ipc, 0 cpu), as the releases resolve them."""
    for dest in ("keep_mm_feature_on_device", "SGLANG_USE_CUDA_IPC_TRANSPORT"):
        found, value, source = _given(log, command, dest)
        if not found or source is None:
            continue
        on = value is True or str(value).strip().lower() in ("1", "true", "yes")
        if dest == "keep_mm_feature_on_device" and not on:
            continue
        kwargs["transport"] = "cuda_ipc" if on else "cpu"
        values.append(ServerValue(dest, value, source))
        return


def _not_modelled(release: str, log: ServerLog | None, command: ParsedCommand | None) -> tuple[NotModelled, ...]:
    """Return the flags given (the command's, and the log's that differ from the release's default) that the kit
    does not model, each with what it could change."""
    found: dict[str, NotModelled] = {}
    table = args_of(release)
    if command is not None:
        for given in command.values:
            row = SERVER_ARGS.get(given.dest)
            if row is not None and row.handling is Handling.NOT_MODELLED:
                source = Source(SourceKind.COMMAND, "the launch command")
                found[given.dest] = NotModelled(given.option, given.value, row.effect, source)
        for name, value in command.command.env.items():
            env = ENV_VARS.get(name)
            if env is not None and env.handling is Handling.NOT_MODELLED:
                found[name] = NotModelled(name, value, env.effect, Source(SourceKind.COMMAND, "the launch command"))
            elif env is None and name.startswith("SGLANG_"):
                found[name] = NotModelled(
                    name,
                    value,
                    "an SGLang environment variable the kit's table does not hold: it may change the answer",
                    Source(SourceKind.COMMAND, "the launch command"),
                )
    if log is not None and log.start.arguments is not None:
        arguments = log.start.arguments
        for name, printed in arguments.arguments.values.items():
            row = SERVER_ARGS.get(name)
            spec = table.by_dest.get(name)
            if row is None or spec is None or row.handling is not Handling.NOT_MODELLED or name in found:
                continue
            if set_by_user(printed, spec.default, name):
                source = Source(SourceKind.LOG, f"server log line {arguments.line}")
                found[name] = NotModelled(spec.options[0], printed, row.effect, source)
    return tuple(found.values())


_RESOLVED_SUFFIXES = ("_backend", "_mode", "_method")


def set_by_user(printed: Any, default: Any, name: str) -> bool:
    """Return True when a start-up line's value of a not-modelled flag says it was set, not resolved at start-up.

    A server prints resolved values: a flag whose parser default is unset (None) or ``auto`` comes out as what the
    server picked (a backend, a memory fraction, a count). Such a value is taken as set only when it turns a
    feature on (True), names one (a non-empty string other than a backend, mode or method), or lists some; any
    other default that the value differs from was set."""
    if printed == default:
        return False
    if printed is True:
        return True
    if default is None or default == "auto":
        if isinstance(printed, str):
            return bool(printed) and printed != "auto" and not name.endswith(_RESOLVED_SUFFIXES)
        return isinstance(printed, (list, dict)) and bool(printed)
    return True


def _log_notes(log: ServerLog | None) -> tuple[str, ...]:
    if log is None:
        return ()
    notes = []
    if log.starts > 1:
        notes.append(
            f"{log.source} holds {log.starts} start-ups; the newest (from line {log.start.first_line}) is read"
        )
    arguments = log.start.arguments
    if arguments is not None and arguments.arguments.cut:
        notes.append(
            f"server log line {arguments.line} is cut short: {len(arguments.arguments.values)} arguments read, the "
            "rest take SGLang's defaults"
        )
    if arguments is not None and arguments.arguments.unreadable:
        names = ", ".join(arguments.arguments.unreadable[:5])
        notes.append(f"server log line {arguments.line}: no literal value for {names}")
    if log.start.pool is None:
        notes.append("no pool line (max_total_num_tokens=…) in the log: the KV pool stays unbounded")
    if log.skipped_lines:
        notes.append(f"{log.skipped_lines} line(s) over the line limit were skipped")
    return tuple(notes)


__all__ = ["Deployment", "DeploymentInput", "SETTING_DESTS", "read_deployment"]
