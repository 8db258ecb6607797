"""The server flags a workload replay takes: one table (:data:`FLAGS`), one settings record (:class:`LoadSettings`).

Each :class:`Flag` row is one option of ``kimi-viz whatif``: the SGLang flag or environment variable it
stands for, SGLang's default (the same in every release the kit knows; ``docs/scheduler-notes.md`` §7),
the values it accepts and the one-line refusal of any other, what it changes, and the values the flag
search tries. The CLI's options, :class:`LoadSettings` (its fields and defaults), the words that spell a
deployment (:meth:`LoadSettings.flags`), the flag search's alternatives (:func:`alternatives`), the JSON
``load`` object and the defaults table of ``docs/whatif.md`` (:func:`defaults_table`) all come from it.

One convention for "off": a count the flag turns off (``--chunked-prefill-size -1``) is ``None`` in the
record; the CLI and JSON take SGLang's ``-1`` (and ``0``) for it, and the JSON writes ``-1`` back.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Literal

from .._records import frozen
from ..errors import WhatIfError
from ..release_changes.rules import releases_where
from ..scheduler_rules import ATTENTION_BACKENDS

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

# In the order a deployment's flags are spelled (LoadSettings.flags) and the docs table lists them.
# The last releases with the flag's old spelling and with cutlass_mla (the release table's scheduler rules).
_ALIAS_UNTIL = releases_where("scheduler.strategy_alias")[-1]
_CUTLASS_UNTIL = releases_where("scheduler.attention_backends", lambda backends: "cutlass_mla" in backends)[-1]
FLAGS: tuple[Flag, ...] = (
    Flag(
        "chunked_prefill_size",
        "--chunked-prefill-size",
        "chunked_prefill_size",
        "count",
        "`--chunked-prefill-size`",
        _H200_CHUNK,
        f"{_H200_CHUNK} on an H200 (by GPU memory); `-1` or `0` off",
        "the chunk budget; a request past it is cut and continued first; must be a multiple of the page",
        can_be_off=True,
        always_spelled=True,
    ),
    Flag(
        "page_size",
        "--page-size",
        "page_size",
        "count",
        "`--page-size`",
        None,
        "unset: the attention backend's (1 with fa3 on a Hopper, 64 with trtllm_mla on a Blackwell)",
        "the radix prefix is floored to a page; budgets are charged page-ceiled; a cut is floored to a page",
        low=1,
        tries=PAGE_SIZES,
    ),
    Flag(
        "disable_radix_cache",
        "--disable-radix-cache",
        "disable_radix_cache",
        "switch",
        "`--disable-radix-cache`",
        False,
        "off (the radix cache is on)",
        "no request starts from a cached prefix",
        off_words="radix cache on (no --disable-radix-cache)",
    ),
    Flag(
        "schedule_policy",
        "--schedule-policy",
        "schedule_policy",
        "choice",
        "`--schedule-policy`",
        "fcfs",
        "fcfs",
        "lpm admits the longest cached prefix first (with its in-batch rule)",
        choices=SCHEDULE_POLICIES,
    ),
    Flag(
        "max_prefill_tokens",
        "--max-prefill-tokens",
        "max_prefill_tokens",
        "count",
        "`--max-prefill-tokens`",
        16384,
        "16384",
        "the tokens one pass may take; with chunking off a later request is refused past it",
        low=1,
        searched=False,
    ),
    Flag(
        "enable_mixed_chunk",
        "--enable-mixed-chunk",
        "enable_mixed_chunk",
        "switch",
        "`--enable-mixed-chunk`",
        False,
        "off",
        "decoding requests ride in a chunked pass, taking one token each of its budgets",
        needs="chunked_prefill_size",
    ),
    Flag(
        "mamba_radix_cache_strategy",
        "--mamba-radix-cache-strategy",
        "mamba_radix_cache_strategy",
        "choice",
        f"`--mamba-radix-cache-strategy` (up to {_ALIAS_UNTIL} also `--mamba-scheduler-strategy`)",
        "auto",
        "auto: extra_buffer with the overlap schedule on (or a --page-size above 1 given), else no_buffer",
        "where Kimi-K3's tree saves linear-attention states: extra_buffer at a prefill window's start plus multiples "
        "of 64 (its branching point instead when that lies inside) and at decode lengths on the track interval, "
        "every insert cut to the saved state; no_buffer at every insert (page 1, no overlap schedule)",
        choices=MAMBA_STRATEGIES,
    ),
    Flag(
        "mamba_track_interval",
        "--mamba-track-interval",
        "mamba_track_interval",
        "count",
        "`--mamba-track-interval`",
        256,
        "256",
        "extra_buffer: a decoding request saves its state each time its length reaches a multiple of it (from "
        f"{releases_where('scheduler.decode_track_on_checkpoint_grid')[0]} of lcm(64, it)); only the last such save "
        "reaches the tree at its finish",
        low=1,
        tries=(64,),
    ),
    Flag(
        "disable_overlap_schedule",
        "--disable-overlap-schedule",
        "disable_overlap_schedule",
        "switch",
        "`--disable-overlap-schedule`",
        False,
        "off (the overlap schedule is on)",
        "a pass's results (first tokens, finishes, tree inserts) are processed before the next pass is formed, not "
        "after; with auto it also turns the strategy to no_buffer",
    ),
    Flag(
        "attention_backend",
        "--attention-backend",
        "attention_backend",
        "choice",
        "`--attention-backend`",
        None,
        "unset: fa3 on a Hopper, trtllm_mla on a Blackwell (Kimi-K3's own override), triton on ROCm",
        "the page size: flashmla, trtllm_mla and cutedsl_mla force 64 (trtllm_mla and cutedsl_mla keep 32), "
        f"cutlass_mla (up to {_CUTLASS_UNTIL}) 128",
        choices=ATTENTION_BACKENDS,
        searched=False,
    ),
    Flag(
        "gpu",
        "--gpu",
        None,
        "choice",
        "no flag: the GPU family the server runs on",
        "hopper",
        "hopper (an H200, as the chunk size's default assumes)",
        "the default attention backend, hence the page size",
        choices=GPUS,
        searched=False,
    ),
    Flag(
        "max_total_tokens",
        "--max-total-tokens",
        "max_total_tokens",
        "count",
        "`--max-total-tokens`",
        None,
        "unset: sized from the GPU's free memory; a server prints it at start-up as `max_total_num_tokens=` (the "
        "kit: unbounded)",
        "the KV pool in tokens: the adder's budgets (NO_TOKEN), the tree's eviction and decode retraction",
        low=1,
        grows=True,
    ),
    Flag(
        "max_running_requests",
        "--max-running-requests",
        "max_running_requests",
        "count",
        "`--max-running-requests`",
        None,
        "unset: 2048, at most half the KV pool and the mamba pool over a request's state slots (the kit: "
        "unbounded without a pool)",
        "the request rows: a pass stops admitting when they are taken",
        low=1,
        grows=True,
    ),
    Flag(
        "max_mamba_cache_size",
        "--max-mamba-cache-size",
        "max_mamba_cache_size",
        "count",
        "`--max-mamba-cache-size`",
        None,
        "unset: 0.9/1.9 of the memory left after the weights; a server prints it at start-up as "
        "`max_mamba_cache_size:` (the kit: unbounded)",
        "the linear-attention state slots: running requests' and the tree's saved states, evicted when short",
        low=1,
        grows=True,
    ),
    Flag(
        "schedule_conservativeness",
        "--schedule-conservativeness",
        "schedule_conservativeness",
        "ratio",
        "`--schedule-conservativeness`",
        1.0,
        "1.0: new_token_ratio starts at 0.7, decays by 0.001 a decode step to 0.098",
        "how much of its remaining outputs a running request reserves (new_token_ratio = 0.7 x it, at most 1)",
        tries=(2.0,),
        needs="max_total_tokens",
    ),
    Flag(
        "cache_mb",
        "--mm-embedding-cache-size",
        "SGLANG_VLM_CACHE_SIZE_MB",
        "megabytes",
        "env `SGLANG_VLM_CACHE_SIZE_MB`",
        100,
        "100; `0` stores nothing",
        "which images a later pass finds cached",
        always_spelled=True,
    ),
    Flag(
        "platform",
        "--platform",
        "device",
        "choice",
        "no flag: the device SGLang runs on",
        "cuda",
        "cuda",
        "cuda and cpu take the per-image path, one call for every request of the pass; hip/npu/xpu encode per request",
        choices=PLATFORMS,
        searched=False,
    ),
)
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
_DEFAULT = {flag.field: flag.default for flag in FLAGS}


@frozen
class LoadSettings:
    """The server flags of a workload replay, one field per row of :data:`FLAGS` (SGLang's names and defaults).

    The fields are in the order of the JSON ``load`` object.
    """

    chunked_prefill_size: int | None = _DEFAULT["chunked_prefill_size"]  # None: chunked prefill off
    cache_mb: float = _DEFAULT["cache_mb"]  # SGLANG_VLM_CACHE_SIZE_MB in MB (0 stores nothing)
    platform: Platform = _DEFAULT["platform"]
    page_size: int | None = _DEFAULT["page_size"]  # None: the attention backend's page
    disable_radix_cache: bool = _DEFAULT["disable_radix_cache"]
    schedule_policy: SchedulePolicy = _DEFAULT["schedule_policy"]
    max_prefill_tokens: int = _DEFAULT["max_prefill_tokens"]
    enable_mixed_chunk: bool = _DEFAULT["enable_mixed_chunk"]
    mamba_radix_cache_strategy: MambaStrategy = _DEFAULT["mamba_radix_cache_strategy"]
    mamba_track_interval: int = _DEFAULT["mamba_track_interval"]
    disable_overlap_schedule: bool = _DEFAULT["disable_overlap_schedule"]
    attention_backend: str | None = _DEFAULT["attention_backend"]
    gpu: Gpu = _DEFAULT["gpu"]
    max_total_tokens: int | None = _DEFAULT["max_total_tokens"]  # None: unbounded
    max_running_requests: int | None = _DEFAULT["max_running_requests"]
    max_mamba_cache_size: int | None = _DEFAULT["max_mamba_cache_size"]
    schedule_conservativeness: float = _DEFAULT["schedule_conservativeness"]

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
