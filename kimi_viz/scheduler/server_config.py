"""What a Kimi-K3 server resolves its flags to (SGLang's ``server_args.py``, 0.5.23 ``arg_groups/``): its config.

Kimi-K3's text model is hybrid linear attention, so its scheduler builds a ``UnifiedRadixCache`` with a
FULL and a MAMBA component (``docs/hybrid-tree-notes.md`` §1). :func:`resolve_server` replays, in each
release's order, what the server makes of the workload's flags (:class:`~.flags.LoadSettings`):

1. the mamba pass (``_mamba_radix_cache_resolution``), before any attention backend is chosen: with the
   radix cache on, ``--mamba-radix-cache-strategy auto`` becomes ``extra_buffer`` when the overlap
   schedule is on or a ``--page-size`` above 1 was given, else ``no_buffer`` — which turns the overlap
   schedule off; an explicit strategy is only checked (``no_buffer`` refuses a given page above 1 and
   the overlap schedule; ``extra_buffer`` a track interval the given page does not divide);
2. the attention backend: ``--attention-backend``, else the GPU's default for Kimi-K3's MLA layers
   (Hopper ``fa3``; Blackwell ``trtllm_mla``, Kimi-K3's own override; ROCm ``triton``);
3. the page size: the backend's snap (FlashMLA, TRT-LLM MLA and CuTe-DSL MLA 64, Cutlass MLA 128 where
   the release has it), else the one given, else 1;
4. the scheduler's start: the MAMBA component refuses a page above 1 without the extra buffer.

The mamba cache chunk is ``max(64, page)`` (Kimi-K3 sets no ``mamba_chunk_size``), the checkpoint grid
``G`` the same, and the decode track grid the interval (``lcm(G, interval)`` where the release says
so). A combination SGLang refuses raises :class:`~kimi_viz.errors.SettingNotInReleaseError` with
SGLang's own words.
"""

from __future__ import annotations

import math
from typing import Literal

from .._records import frozen
from ..errors import SettingNotInReleaseError
from ..releases import Release
from .flags import LoadSettings, SchedulePolicy
from .memory import MemoryConfig, counted, mamba_slots_per_request, resolve_memory

FLA_CHUNK = 64  # FLA's CHUNK_SIZE: Kimi-K3's config sets no mamba_chunk_size
DEFAULT_BACKENDS = {"hopper": "fa3", "blackwell": "trtllm_mla", "rocm": "triton"}
Strategy = Literal["extra_buffer", "no_buffer"]
MAMBA_PAGE_ONE = "MambaComponent requires page_size=1 when mamba_extra_buffer is disabled, got {}"  # scheduler start


@frozen
class ServerConfig:
    """The flags a Kimi-K3 server runs its scheduler with, once the release resolved them (:func:`resolve_server`)."""

    page_size: int
    attention_backend: str
    strategy: Strategy | None  # None: the radix cache is off (no mamba strategy is resolved)
    overlap: bool  # the overlap event loop (event_loop_overlap)
    chunked_prefill_size: int | None  # None: chunking off
    max_prefill_tokens: int
    schedule_policy: SchedulePolicy
    enable_mixed_chunk: bool
    disable_radix_cache: bool
    track_interval: int  # --mamba-track-interval
    cache_chunk: int  # mamba_cache_chunk_size: max(64, page)
    decode_grid: int  # a decoding request saves its state at every multiple of this length
    state_chunk: int  # the FLA chunk a tracked prefill state is read on (_force_track_h)
    tree: str  # the tree cache the scheduler builds, as SGLang names it
    memory: MemoryConfig  # the pools (unbounded unless a memory flag is given) and new_token_ratio
    resolved: tuple[str, ...] = ()  # what the release decided, one sentence each (auto, a backend's page)

    @property
    def checkpoint_grid(self) -> int:
        """Return ``G``: a prefill window saves a state only if it is this long, at its start plus multiples."""
        return self.cache_chunk

    @property
    def hybrid(self) -> bool:
        """Return True when the tree keeps saved linear-attention states (the radix cache is on)."""
        return self.strategy is not None

    @property
    def mixed_chunk(self) -> bool:
        """Return True when decoding requests ride in a prefill pass (``is_mixed_chunk``)."""
        return self.chunked_prefill_size is not None and self.enable_mixed_chunk

    def to_json(self) -> dict[str, object]:
        """Return ``{"tree", "strategy", "overlap", "attention_backend", "page_size", "checkpoint_grid",
        "decode_grid", "resolved", "memory"}``: what the server runs, as resolved."""
        return {
            "memory": self.memory.to_json(),
            "tree": self.tree,
            "strategy": self.strategy,
            "overlap": self.overlap,
            "attention_backend": self.attention_backend,
            "page_size": self.page_size,
            "checkpoint_grid": self.checkpoint_grid,
            "decode_grid": self.decode_grid,
            "resolved": list(self.resolved),
        }

    def describe(self) -> str:
        """Return one line: the tree, the strategy, the loop, the backend and page."""
        strategy = "no mamba strategy (radix cache off)" if self.strategy is None else self.strategy
        loop = "overlap schedule" if self.overlap else "no overlap (event_loop_normal)"
        return f"{self.tree}, {strategy}, {loop}; {self.attention_backend} attention, page {self.page_size}"


def _refuse(release: Release, message: str) -> SettingNotInReleaseError:
    return SettingNotInReleaseError(f"SGLang {release.version} refuses these flags for Kimi-K3: {message}")


def _strategy(load: LoadSettings, release: Release) -> tuple[Strategy | None, bool, list[str]]:
    """Return the mamba pass's strategy and whether the overlap schedule stays on (step 1 of the module doc)."""
    overlap = not load.disable_overlap_schedule
    if load.disable_radix_cache:
        return None, overlap, []
    asked, page = load.mamba_radix_cache_strategy, load.page_size
    said: list[str] = []
    if asked == "auto":
        if not overlap and (page is None or page == 1):
            return (
                "no_buffer",
                False,
                ["--mamba-radix-cache-strategy auto resolved to no_buffer (overlap schedule off)"],
            )
        said = ["--mamba-radix-cache-strategy auto resolved to extra_buffer"]
    elif asked == "no_buffer":
        if page is not None and page > 1:
            raise _refuse(release, "no_buffer only supports page_size=1.")
        if overlap:
            raise _refuse(
                release, "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
            )
        return "no_buffer", overlap, []
    # extra_buffer, asked or resolved from auto, is validated alike (the page given, before any backend snaps it)
    if page is not None and load.mamba_track_interval % page:
        raise _refuse(
            release,
            f"an AssertionError without a message: --mamba-track-interval {load.mamba_track_interval} is not a "
            f"multiple of --page-size {page} (extra_buffer)",
        )
    return "extra_buffer", overlap, said


def _backend_and_page(load: LoadSettings, release: Release) -> tuple[str, int, list[str]]:
    """Return the attention backend and the page size the release resolves (steps 2 and 3)."""
    rules = release.scheduler
    given = load.attention_backend
    if given is not None and given not in rules.attention_backends:
        raise _refuse(
            release,
            f"argument --attention-backend: invalid choice: {given!r} (this release has "
            f"{', '.join(rules.attention_backends)})",
        )
    backend = given or DEFAULT_BACKENDS[load.gpu]
    snaps = dict(rules.page_forcing_backends)
    page = load.page_size
    if backend in snaps and not (backend in ("trtllm_mla", "cutedsl_mla") and page == 32):
        forced = snaps[backend]
        return backend, forced, [] if page == forced else [f"the {backend} attention backend sets the page to {forced}"]
    return backend, 1 if page is None else page, []


def _no_rows(
    load: LoadSettings, release: Release, memory: MemoryConfig, strategy: Strategy | None, overlap: bool, page: int
) -> str:
    """Return why the server cannot start with no request row, naming the pool (or flag) that left none: the mamba
    pool in SGLang's own words, else the KV pool (at most half of it in rows), else ``--max-running-requests 0``."""
    head = f"SGLang {release.version} cannot start Kimi-K3 with these flags: "
    slots = mamba_slots_per_request(strategy, overlap)
    if memory.mamba_pool is not None and memory.mamba_pool // slots <= 0:
        return (
            f"{head}Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={memory.mamba_pool}, mamba_ratio={slots}, resulting max_num_reqs=0; give "
            f"--max-mamba-cache-size {slots} or more (a running request takes {slots} state slots)"
        )
    if memory.kv_pool is not None and memory.kv_pool // 2 <= 0:
        given = load.max_total_tokens
        pool = counted(memory.kv_pool, "token")
        held = pool if given == memory.kv_pool else f"{counted(given or 0, 'token')}, {pool} in whole pages of {page}"
        return (
            f"{head}--max-total-tokens {given} is a KV pool of 0 request rows (at most half of its {held}); give "
            f"--max-total-tokens {2 * page} or more"
        )
    return f"{head}--max-running-requests {load.max_running_requests} leaves no request row; give 1 or more"


def resolve_server(load: LoadSettings, release: Release) -> ServerConfig:
    """Return the :class:`ServerConfig` ``release`` runs Kimi-K3's scheduler with under ``load``; raise
    SettingNotInReleaseError (SGLang's words) for a combination the release refuses."""
    rules = release.scheduler
    strategy, overlap, said = _strategy(load, release)
    backend, page, snapped = _backend_and_page(load, release)
    cache_chunk = max(FLA_CHUNK, page)
    if cache_chunk % min(FLA_CHUNK, page):
        raise _refuse(
            release,
            f"For SSM models, either chunk_size or page_size must be divisible by the other, got "
            f"chunk_size={FLA_CHUNK}, page_size={page}",
        )
    chunk = load.chunked_prefill_size
    if chunk is not None and chunk % page:
        raise _refuse(release, f"--chunked-prefill-size {chunk} is not a multiple of the page size {page}")
    if load.disable_radix_cache and chunk is not None and rules.chunk_cache_without_radix:
        tree = "ChunkCache"
    elif load.disable_radix_cache:
        tree = "UnifiedRadixCache (disabled)"
        if rules.chunk_cache_without_radix and page != 1:  # this release's MAMBA component still asserts page 1
            raise _refuse(release, MAMBA_PAGE_ONE.format(page))
    else:
        tree = "UnifiedRadixCache (FULL + MAMBA)"
        if strategy == "no_buffer" and page != 1:
            raise _refuse(release, MAMBA_PAGE_ONE.format(page))
    memory = resolve_memory(
        load.max_total_tokens,
        load.max_running_requests,
        load.max_mamba_cache_size,
        load.schedule_conservativeness,
        strategy=strategy,
        overlap=overlap,
        at_least_one_row=rules.at_least_one_row,
        page_size=page,
    )
    if memory.request_rows is not None and memory.request_rows <= 0:
        raise SettingNotInReleaseError(_no_rows(load, release, memory, strategy, overlap, page))
    interval = load.mamba_track_interval
    decode_grid = math.lcm(cache_chunk, interval) if rules.decode_track_on_checkpoint_grid else interval
    return ServerConfig(
        page_size=page,
        attention_backend=backend,
        strategy=strategy,
        overlap=overlap,
        chunked_prefill_size=chunk,
        max_prefill_tokens=load.max_prefill_tokens,
        schedule_policy=load.schedule_policy,
        enable_mixed_chunk=load.enable_mixed_chunk,
        disable_radix_cache=load.disable_radix_cache,
        track_interval=interval,
        cache_chunk=cache_chunk,
        decode_grid=decode_grid,
        state_chunk=FLA_CHUNK if rules.state_chunk_is_fla else cache_chunk,
        tree=tree,
        memory=memory,
        resolved=tuple(said + snapped),
    )


__all__ = ["FLA_CHUNK", "DEFAULT_BACKENDS", "ServerConfig", "Strategy", "resolve_server"]
