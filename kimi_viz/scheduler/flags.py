"""The server flags a workload replay takes, each declared once: the fields of :class:`LoadSettings`.

Each field of :class:`LoadSettings` is one flag, declared as SGLang declares its own server arguments: a typed
field whose metadata (:func:`flag`) holds what the kit adds — how the flag search treats it, the values the kit
replays, the one-line refusal of any other. What SGLang says of it comes from the one table of SGLang's server
arguments, :mod:`kimi_viz.server_args`: its spelling (the newest release's, and the others' where they differ),
its default (the same in every release, which ``tests/test_flag_table.py`` checks), and the one line saying what
it changes. :data:`FLAGS` is the view of those fields as :class:`Flag` rows: the CLI's options, the words that
spell a deployment (:meth:`LoadSettings.flags`), the flag search's alternatives (:func:`alternatives`), the JSON
``load`` object and the defaults table of ``docs/whatif.md`` (:func:`defaults_table`) all come from it.

Where SGLang sizes a value from the machine (the chunk size by GPU memory), the field says the kit's stand-in and
why. One convention for "off": a count the flag turns off (``--chunked-prefill-size -1``) is ``None`` in the
record; the CLI and JSON take SGLang's ``-1`` (and ``0``) for it, and the JSON writes ``-1`` back.
"""

from __future__ import annotations

from dataclasses import Field, field, fields, replace
from typing import Any, Literal

from .._records import frozen
from ..errors import WhatIfError
from ..releases import NEWEST, RELEASES, release_span
from ..scheduler_rules import ATTENTION_BACKENDS
from ..server_args.table import ENV_VARS, SERVER_ARGS, args_of

SchedulePolicy = Literal["fcfs", "lpm"]
SCHEDULE_POLICIES: tuple[SchedulePolicy, ...] = ("fcfs", "lpm")  # --schedule-policy values the kit models
Platform = Literal["cuda", "cpu", "hip", "npu", "xpu"]
PLATFORMS: tuple[Platform, ...] = ("cuda", "cpu", "hip", "npu", "xpu")
MambaStrategy = Literal["auto", "extra_buffer", "no_buffer"]
MAMBA_STRATEGIES: tuple[MambaStrategy, ...] = ("auto", "extra_buffer", "no_buffer")
Gpu = Literal["hopper", "blackwell", "rocm"]
GPUS: tuple[Gpu, ...] = ("hopper", "blackwell", "rocm")
# Kimi-K3's full-attention layers are MLA: the backends that run them (not every release has each).
PAGE_SIZES = (1, 16, 64)  # the page sizes attention backends commonly force, tried by the flag search
OFF = -1  # how SGLang spells "off" for a count (--chunked-prefill-size -1); None in the record

Kind = Literal["count", "switch", "choice", "megabytes", "ratio"]


@frozen
class Flag:
    """One server flag of a workload replay: its field, option, SGLang name, default, values and meaning."""

    field: str  # the LoadSettings field
    option: str  # the kimi-viz whatif option (SGLang's own spelling where SGLang has one)
    dest: str | None  # SGLang's ServerArgs field or environment variable it reads (None: no SGLang setting)
    kind: Kind  # a token count, an on/off switch, one of ``choices``, or megabytes
    sglang: str  # the SGLang flag or environment variable it stands for (Markdown: code in backticks)
    default: Any  # SGLang's default (None: off)
    default_text: str  # the default as the docs table and the option's help say it
    changes: str  # what it changes, one line
    low: int = 0  # the smallest value a count or megabytes accepts
    choices: tuple[str, ...] = ()  # a choice's values
    can_be_off: bool = False  # a count whose -1 or 0 means off (None in the record)
    always_spelled: bool = False  # spelled in every deployment's flags, default or not
    tries: tuple[Any, ...] = ()  # a count's values the flag search tries (others: the other state, see search())
    searched: bool = True  # whether the flag search changes it
    needs: str | None = None  # tried only while this field is set (mixed chunk: chunking)
    off_words: str | None = None  # a switch turned off, as the flag search names it
    grows: bool = False  # a pool the flag search tries twice as large (only while it is set)

    @property
    def metavar(self) -> str | None:
        """Return the option's metavar: ``N``, ``MB``, ``{a,b}``, or None for a switch."""
        return {"count": "N", "megabytes": "MB", "ratio": "X", "switch": None}.get(
            self.kind, "{" + ",".join(self.choices) + "}"
        )

    def parse(self, text: Any) -> Any:
        """Return the value a command-line ``text`` asks for; raise WhatIfError naming the option otherwise."""
        if self.kind == "choice":
            if text not in self.choices:
                raise WhatIfError(f"{self.option} {text!r}: expected one of {', '.join(self.choices)}")
            return text
        if self.kind == "ratio":
            try:
                ratio = float(text)
            except (TypeError, ValueError):
                raise WhatIfError(f"{self.option} {text!r}: expected a number > 0") from None
            if not ratio > 0 or ratio > 100:
                raise WhatIfError(f"{self.option} {ratio:g}: expected a number > 0 and at most 100")
            return ratio
        low = -1 if self.can_be_off else self.low
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise WhatIfError(f"{self.option} {text!r}: expected a whole number >= {low}") from None
        if value < low:
            raise WhatIfError(f"{self.option} {value}: expected a number >= {low}")
        if self.can_be_off and value <= 0:
            return None
        return float(value) if self.kind == "megabytes" else value

    def spell(self, value: Any) -> str:
        """Return the flag set to ``value`` as SGLang spells it: ``--page-size 16``, ``--disable-radix-cache``."""
        if self.kind == "switch":
            return self.option if value else (self.off_words or f"no {self.option}")
        if self.kind == "megabytes":
            return f"{self.sglang.split('`')[1]}={value:g}"
        if self.kind == "ratio":
            return f"{self.option} {value:g}"
        return f"{self.option} {OFF if value is None else value}"

    def search(self, current: Any) -> list[Any]:
        """Return the values the flag search tries instead of ``current``: a switch's other state, the other
        choices, a count's other page sizes, or off for a count that is on (its default when off)."""
        if not self.searched:
            return []
        if self.grows:
            return [] if current is None else [current * 2]
        if self.kind == "switch":
            return [not current]
        if self.kind == "choice":
            return [c for c in self.choices if c != current]
        if self.can_be_off or self.kind == "megabytes":
            off = None if self.can_be_off else 0.0
            return [off] if current else [self.default]
        return [v for v in self.tries if v != current]

    def to_json(self, value: Any) -> Any:
        """Return ``value`` as the JSON ``load`` object holds it (off as ``-1``)."""
        return OFF if self.can_be_off and value is None else value

    @property
    def help(self) -> str:
        """Return the option's help: what it changes, the SGLang flag it stands for and SGLang's default."""
        return f"{self.changes}. SGLang: {self.sglang.replace('`', '')}; default {self.default_text.replace('`', '')}"


_H200_CHUNK = 8192  # the chunk size SGLang picks for an H200's memory (server_args: by GPU memory)
_SGLANG = object()  # a field's default is SGLang's own, read from the table


@frozen
class _Row:
    """What the kit adds to one flag (a :class:`LoadSettings` field's metadata): see :class:`Flag`."""

    kind: Kind
    dest: str | None
    option: str | None
    default_text: str | None
    changes: str | None
    sglang: str | None
    low: int
    choices: tuple[str, ...]
    can_be_off: bool
    always_spelled: bool
    tries: tuple[Any, ...]
    searched: bool
    needs: str | None
    off_words: str | None
    grows: bool


def _sglang_default(dest: str) -> Any:
    """Return SGLang's default for ``dest`` (a server argument, or an environment variable the table knows)."""
    if dest in ENV_VARS:
        return ENV_VARS[dest].default
    spec = args_of(NEWEST).by_dest[dest]
    return spec.default


def flag(
    kind: Kind,
    *,
    dest: str | None,
    option: str | None = None,
    default: Any = _SGLANG,
    default_text: str | None = None,
    changes: str | None = None,
    sglang: str | None = None,
    low: int = 0,
    choices: tuple[str, ...] = (),
    can_be_off: bool = False,
    always_spelled: bool = False,
    tries: tuple[Any, ...] = (),
    searched: bool = True,
    needs: str | None = None,
    off_words: str | None = None,
    grows: bool = False,
) -> Any:
    """Return the :class:`LoadSettings` field of one flag: its default SGLang's own (the table's) unless the kit's
    stand-in is given, and what the kit adds as its metadata (``option``, ``changes`` and ``sglang`` only where
    the flag is no SGLang server argument; the table says them otherwise)."""
    value = _sglang_default(dest) if default is _SGLANG and dest is not None else default
    if kind == "megabytes" and value is not None:
        value = float(value)
    row = _Row(
        kind,
        dest,
        option,
        default_text,
        changes,
        sglang,
        low,
        choices,
        can_be_off,
        always_spelled,
        tries,
        searched,
        needs,
        off_words,
        grows,
    )
    return field(default=value, metadata={"flag": row})


@frozen
class LoadSettings:
    """The server flags of a workload replay: one field per flag, declared once (:func:`flag`); :data:`FLAGS` is
    their view. The fields are in the order a deployment's flags are spelled and the docs table lists them."""

    chunked_prefill_size: int | None = flag(
        "count",
        dest="chunked_prefill_size",
        default=_H200_CHUNK,
        default_text=f"{_H200_CHUNK} on an H200 (SGLang sizes it by GPU memory when unset); `-1` or `0` off",
        can_be_off=True,
        always_spelled=True,
    )  # None: chunked prefill off
    page_size: int | None = flag(
        "count",
        dest="page_size",
        default_text="unset: the attention backend's (1 with fa3 on a Hopper, 64 with trtllm_mla on a Blackwell)",
        low=1,
        tries=PAGE_SIZES,
    )  # None: the attention backend's page
    disable_radix_cache: bool = flag(
        "switch",
        dest="disable_radix_cache",
        default_text="off (the radix cache is on)",
        off_words="radix cache on (no --disable-radix-cache)",
    )
    schedule_policy: SchedulePolicy = flag("choice", dest="schedule_policy", choices=SCHEDULE_POLICIES)
    max_prefill_tokens: int = flag("count", dest="max_prefill_tokens", low=1, searched=False)
    enable_mixed_chunk: bool = flag("switch", dest="enable_mixed_chunk", needs="chunked_prefill_size")
    mamba_radix_cache_strategy: MambaStrategy = flag(
        "choice",
        dest="mamba_radix_cache_strategy",
        default_text="auto: extra_buffer with the overlap schedule on (or a --page-size above 1 given), else no_buffer",
        choices=MAMBA_STRATEGIES,
    )
    mamba_track_interval: int = flag("count", dest="mamba_track_interval", low=1, tries=(64,))
    disable_overlap_schedule: bool = flag(
        "switch", dest="disable_overlap_schedule", default_text="off (the overlap schedule is on)"
    )
    attention_backend: str | None = flag(
        "choice",
        dest="attention_backend",
        default_text="unset: fa3 on a Hopper, trtllm_mla on a Blackwell (Kimi-K3's own override), triton on ROCm",
        choices=ATTENTION_BACKENDS,
        searched=False,
    )
    gpu: Gpu = flag(
        "choice",
        dest=None,
        option="--gpu",
        default="hopper",
        default_text="hopper (an H200, as the chunk size's default assumes)",
        changes="the default attention backend, hence the page size",
        sglang="no flag: the GPU family the server runs on",
        choices=GPUS,
        searched=False,
    )
    max_total_tokens: int | None = flag(
        "count",
        dest="max_total_tokens",
        default_text="unset: sized from the GPU's free memory; a server prints it at start-up as "
        "`max_total_num_tokens=` (the kit: unbounded)",
        low=1,
        grows=True,
    )  # None: unbounded
    max_running_requests: int | None = flag(
        "count",
        dest="max_running_requests",
        default_text="unset: 2048, at most half the KV pool and the mamba pool over a request's state slots (the "
        "kit: unbounded without a pool)",
        low=1,
        grows=True,
    )
    max_mamba_cache_size: int | None = flag(
        "count",
        dest="max_mamba_cache_size",
        default_text="unset: 0.9/1.9 of the memory left after the weights; a server prints it at start-up as "
        "`max_mamba_cache_size:` (the kit: unbounded)",
        low=1,
        grows=True,
    )
    schedule_conservativeness: float = flag(
        "ratio",
        dest="schedule_conservativeness",
        default_text="1.0: new_token_ratio starts at 0.7, decays by 0.001 a decode step to 0.098",
        tries=(2.0,),
        needs="max_total_tokens",
    )
    cache_mb: float = flag(
        "megabytes",
        dest="SGLANG_VLM_CACHE_SIZE_MB",
        option="--mm-embedding-cache-size",
        default_text="100; `0` stores nothing",
        always_spelled=True,
    )  # SGLANG_VLM_CACHE_SIZE_MB in MB (0 stores nothing)
    platform: Platform = flag(
        "choice",
        dest="device",
        option="--platform",
        default="cuda",
        sglang="`--device` (no flag for ROCm: its CUDA build runs hip)",
        choices=PLATFORMS,
        searched=False,
    )

    def __post_init__(self) -> None:
        chunk = self.chunked_prefill_size
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int)):
            raise WhatIfError(f"--chunked-prefill-size: expected a token count (or -1 for no chunking), got {chunk!r}")
        if chunk is not None and chunk <= 0:
            object.__setattr__(self, "chunked_prefill_size", None)
        for flag in FLAGS:
            value = getattr(self, flag.field)
            if flag.kind == "ratio" and not (isinstance(value, (int, float)) and 0 < value <= 100):
                raise WhatIfError(f"{flag.option} {value!r}: expected a number > 0 and at most 100")
            if flag.kind in ("count", "megabytes") and value is not None and value < flag.low:
                raise WhatIfError(f"{flag.option} {value}: expected a number >= {flag.low}")
            if flag.kind == "choice" and value not in flag.choices and not (value is None and flag.default is None):
                raise WhatIfError(f"{flag.option} {value!r}: the kit models {', '.join(flag.choices)}")
        chunk = self.chunked_prefill_size
        if chunk is not None and self.page_size is not None and chunk % self.page_size:
            raise WhatIfError(
                f"--chunked-prefill-size {chunk}: SGLang requires a multiple of --page-size {self.page_size}; "
                "pick a chunk size that the page divides"
            )

    @property
    def memory_given(self) -> bool:
        """Return True when a memory pool is given (``--max-total-tokens``, ``--max-running-requests`` or
        ``--max-mamba-cache-size``): the replay then budgets, evicts and retracts."""
        return any(v is not None for v in (self.max_total_tokens, self.max_running_requests, self.max_mamba_cache_size))

    def idle_flags(self) -> list[str]:
        """Return one sentence per flag set to other than its default that changes nothing under these settings (a
        flag that only acts with another one, e.g. ``--schedule-conservativeness`` without a KV pool)."""
        idle = []
        for row in FLAGS:
            value = getattr(self, row.field)
            if row.needs is not None and value != row.default and getattr(self, row.needs) is None:
                needed = FLAG_OF[row.needs]
                idle.append(
                    f"{row.spell(value)} changes nothing here: it acts only with {needed.option} "
                    f"({'unbounded' if row.needs == 'max_total_tokens' else 'off'} here)"
                )
        return idle

    def flags(self) -> str:
        """Return the SGLang settings these stand for, the flags as SGLang spells them (defaults left out)."""
        words = [
            flag.spell(getattr(self, flag.field))
            for flag in FLAGS
            if flag.field not in ("platform", "gpu")
            and (flag.always_spelled or getattr(self, flag.field) != flag.default)
        ]
        gpu = "" if self.gpu == FLAG_OF["gpu"].default else f", {self.gpu} GPU"
        return f"{' '.join(words)} ({self.platform}{gpu})"

    def to_json(self) -> dict[str, Any]:
        """Return every field by name, as the JSON ``load`` object holds it (chunking off as ``-1``)."""
        return {f.name: FLAG_OF[f.name].to_json(getattr(self, f.name)) for f in fields(self)}


def _spellings(dest: str) -> tuple[str, str]:
    """Return ``dest``'s main spelling in the newest release that has it, and the Markdown naming it with the other
    releases' spellings: ``"`--x` (0.5.17–0.5.19 also `--y`)"``."""
    releases = SERVER_ARGS[dest].releases
    main = args_of(releases[-1]).by_dest[dest].options[0]
    others: dict[str, list[str]] = {}
    for release in releases:
        for option in args_of(release).by_dest[dest].options:
            if option != main:
                others.setdefault(option, []).append(release)
    also = "".join(
        f" ({release_span(seen)} also `{option}`)" for option, seen in others.items() if len(seen) < len(RELEASES)
    )
    return main, f"`{main}`{also}"


def _default_text(value: Any) -> str:
    return (
        "unset"
        if value is None
        else ("off" if value is False else f"{value:g}" if isinstance(value, float) else str(value))
    )


def _view(declared: Field[Any]) -> Flag:
    """Return the :class:`Flag` row of one :class:`LoadSettings` field: the kit's metadata and SGLang's table."""
    row: _Row = declared.metadata["flag"]
    if row.dest is not None and row.dest in ENV_VARS:
        option, sglang = row.option or row.dest, f"env `{row.dest}`"
        changes = ENV_VARS[row.dest].effect
    elif row.dest is not None:
        option, sglang = _spellings(row.dest)
        changes = SERVER_ARGS[row.dest].effect
    else:
        option, sglang, changes = row.option or "", row.sglang or "", row.changes or ""
    return Flag(
        declared.name,
        row.option or option,
        row.dest,
        row.kind,
        row.sglang or sglang,
        declared.default,
        row.default_text or _default_text(declared.default),
        row.changes or changes,
        low=row.low,
        choices=row.choices,
        can_be_off=row.can_be_off,
        always_spelled=row.always_spelled,
        tries=row.tries,
        searched=row.searched,
        needs=row.needs,
        off_words=row.off_words,
        grows=row.grows,
    )


FLAGS: tuple[Flag, ...] = tuple(_view(declared) for declared in fields(LoadSettings))
FLAG_OF = {flag.field: flag for flag in FLAGS}
#: The order the flag search tries and lists the flags in.
SEARCH_ORDER = (
    "disable_radix_cache",
    "page_size",
    "chunked_prefill_size",
    "enable_mixed_chunk",
    "schedule_policy",
    "mamba_radix_cache_strategy",
    "mamba_track_interval",
    "disable_overlap_schedule",
    "max_total_tokens",
    "max_running_requests",
    "max_mamba_cache_size",
    "schedule_conservativeness",
)


def alternatives(load: LoadSettings) -> list[tuple[str, LoadSettings]]:
    """Return each single-flag change the flag search tries from ``load``: the flag as SGLang spells it, and the
    settings. A combination SGLang refuses (a chunk the page does not divide) is not offered."""
    out: list[tuple[str, LoadSettings]] = []
    for name in (*SEARCH_ORDER, "cache_mb"):
        flag = FLAG_OF[name]
        if flag.needs is not None and getattr(load, flag.needs) is None:
            continue
        for value in flag.search(getattr(load, name)):
            try:
                out.append((flag.spell(value), replace(load, **{name: value})))
            except WhatIfError:
                continue
    return out


def defaults_table() -> str:
    """Return the table of ``docs/whatif.md``: each flag of a workload, what SGLang calls it, its default (the same
    in every release the kit knows), the values it takes and what it changes."""
    rows = ["| option | SGLang | default | what it changes |", "|---|---|---|---|"]
    for flag in FLAGS:
        metavar = "" if flag.metavar is None else " " + flag.metavar.strip("{}").replace(",", "\\|")
        rows.append(f"| `{flag.option}{metavar}` | {flag.sglang} | {flag.default_text} | {flag.changes} |")
    return "\n".join(rows)


__all__ = [
    "FLAGS",
    "FLAG_OF",
    "OFF",
    "PAGE_SIZES",
    "PLATFORMS",
    "SCHEDULE_POLICIES",
    "Flag",
    "LoadSettings",
    "Platform",
    "SchedulePolicy",
    "alternatives",
    "defaults_table",
]
