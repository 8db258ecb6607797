"""What one start-up of a server says about it, in the terms of the replay: release, attention-TP, page, tree, pools.

:func:`startup_facts` reads a :class:`~.log.ServerStart` (its ``server_args=`` line and pool lines): the release
(a line naming it, else the releases whose start-up line prints exactly these arguments), the attention-TP
size as SGLang derives it (:func:`attention_tp`), the page, the chunk, the tree Kimi-K3's scheduler builds and
the pools. ``kimi-viz explain`` names this server in every answer; ``whatif`` reads the same facts.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._records import frozen
from ..releases import release_span
from .log import ServerStart
from .table import releases_printing


@frozen
class AttentionTp:
    """The attention-TP size SGLang derives from its parallel flags, and how."""

    size: int
    how: str  # e.g. "tp_size 8 / attention-DP 2"


def attention_tp(values: Mapping[str, object]) -> AttentionTp:
    """Return the attention-TP size ``tp_size // attention-DP // attention-CP`` from SGLang's parallel arguments
    (``tp_size``, ``dp_size``, ``enable_dp_attention``, ``attn_dp_size``, ``attn_cp_size``; absent ones at their
    defaults). ``--dp-size N --enable-dp-attention`` gives attention-DP N; from 0.5.22 that is ``--attn-dp-size N``,
    which a 0.5.22 log prints resolved (``dp_size`` then counts replicas)."""

    def number(name: str) -> int:
        value = values.get(name)
        return 1 if not isinstance(value, int) or isinstance(value, bool) or value < 1 else value

    tp, dp, cp, attn_dp = number("tp_size"), number("dp_size"), number("attn_cp_size"), number("attn_dp_size")
    if attn_dp == 1 and values.get("enable_dp_attention") is True:
        attn_dp = dp
    parts = [f"tp_size {tp}"]
    if attn_dp > 1:
        parts.append(f"attention-DP {attn_dp}")
    if cp > 1:
        parts.append(f"attention-CP {cp}")
    return AttentionTp(max(1, tp // attn_dp // cp), " / ".join(parts))


@frozen
class StartupFacts:
    """The server one start-up describes."""

    releases: tuple[str, ...]  # the releases it fits, oldest first (one when a line names it; empty: none known)
    release_how: str  # one sentence: how the release was found, or why it was not
    tp: AttentionTp | None  # None: no server_args= line
    page_size: object  # as printed (None: unset, the attention backend's)
    attention_backend: object
    chunked_prefill_size: object  # the pool line's (resolved) where there is one
    tree: str  # the tree and loop Kimi-K3's scheduler builds, as far as the start-up says
    pools: str  # the pools, or that the log printed none

    def describe(self) -> str:
        """Return one line naming the server: release, attention-TP, page, chunk, tree and pools."""
        release = f"{release_span(list(self.releases))} ({self.release_how})" if self.releases else "release unknown"
        tp = "attention-TP unknown" if self.tp is None else f"attention-TP {self.tp.size} ({self.tp.how})"
        page = "page: the attention backend's" if self.page_size is None else f"page {self.page_size}"
        chunk = self.chunked_prefill_size
        chunk_text = "chunk unknown" if chunk is None else "chunking off" if chunk in (-1, 0) else f"chunk {chunk}"
        return f"SGLang {release}, {tp}, {page}, {chunk_text}; {self.tree}; {self.pools}"


def _tree(values: Mapping[str, object], command: bool) -> str:
    if values.get("disable_radix_cache") is True:
        return "radix cache off"
    strategy = values.get("mamba_radix_cache_strategy", values.get("mamba_scheduler_strategy"))
    overlap = "overlap schedule off" if values.get("disable_overlap_schedule") is True else "overlap schedule"
    strategy_text = ("auto" if command else "strategy unknown") if strategy is None else str(strategy)
    return f"UnifiedRadixCache (FULL + MAMBA), {strategy_text}, {overlap}"


def startup_facts(start: ServerStart) -> StartupFacts:
    """Return what the start-up ``start`` says about its server."""
    arguments = None if start.arguments is None else start.arguments.arguments
    values: Mapping[str, object] = {} if arguments is None else arguments.values
    if start.version is not None:
        releases: tuple[str, ...] = (start.version.version,)
        how = f"line {start.version.line} names it"
    elif arguments is not None and start.arguments is not None:
        partial = arguments.cut or arguments.form == "command"  # only some of the arguments: a subset fits
        releases = releases_printing(set(values) | set(arguments.unreadable), cut=partial)
        where = (
            "the launch command's flags"
            if arguments.form == "command"
            else f"the arguments of line {start.arguments.line}"
        )
        how = f"{where} fit it" if releases else f"{where} fit no release the kit knows"
    else:
        releases, how = (), "no line names it and no server_args= line was read"
    pool, mamba = start.pool, start.mamba
    chunk = pool.chunked_prefill_size if pool is not None else values.get("chunked_prefill_size")
    parts = []
    if pool is not None:
        parts.append(f"KV pool {pool.max_total_num_tokens} tokens, {pool.max_running_requests} request rows")
    if mamba is not None:
        parts.append(f"mamba pool {mamba.max_mamba_cache_size} slots")
    return StartupFacts(
        releases,
        how,
        None if arguments is None else attention_tp(values),
        values.get("page_size"),
        values.get("attention_backend"),
        chunk,
        _tree(values, arguments.form == "command") if arguments is not None else "tree unknown (no server_args= line)",
        ", ".join(parts) if parts else "no pool line",
    )


__all__ = ["AttentionTp", "StartupFacts", "attention_tp", "startup_facts"]
