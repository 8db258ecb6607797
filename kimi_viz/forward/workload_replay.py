"""A workload on a deployment: every request's items and prompt, the prefill passes, each pass replayed.

:func:`replay_workload` follows the whole path for a set of requests: each request's images go
through that release's request side (:func:`~kimi_viz.request.sides.build_request`: deferred or
eager items), its prompt places each image's ``<|media_pad|>`` run
(:func:`~kimi_viz.request.prompt.render_prompt`), the scheduler groups requests into prefill passes
and cuts long prompts into chunks (:func:`~kimi_viz.scheduler.event_loop.schedule`, on the requests
:func:`~kimi_viz.request.token_ids.scheduled_requests` writes), and each pass is replayed by
:func:`~.embedding.replay_forward` with one embedding cache carried from pass to pass. The first pass
that raises ends the replay: an exception in the forward pass kills the scheduler process, and
every request it held with it (SGLang issue #36018).

On an EPD deployment (``--serving epd-encoder``) each request's images are first encoded by the
encode server (its own ``get_image_feature`` call per request); the language server then receives
the rows as ``precomputed_embeddings`` and takes the precomputed path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, Literal

from ..devices import DeviceLike
from ..errors import WhatIfError
from ..preprocess.resize import resize_config
from ..releases import Release, release_for
from ..request.producer import eager_feature
from ..request.prompt import Prompt, render_prompt
from ..request.settings import ServerSettings
from ..request.sides import BuiltRequest, build_request, encoder_preprocesses
from ..request.token_ids import scheduled_requests
from ..request.workload import Request, Workload
from ..scheduler.event_loop import Pass, Schedule, radix_prefixes, schedule
from ..scheduler.flags import LoadSettings
from ..scheduler.prefix import PrefixMatch
from ..scheduler.req import Req
from ..split.ranks import check_tp_size
from ..split.trace import ErrorInfo, Trace
from ..split.verdict import Status
from .cache import EmbeddingCache
from .call import model_call, replay_call
from .embedding import Encoder, call_encoder, produced_tokens, replay_forward
from .rows import Rows, Source
from .scheduled import memory_sentence, scheduler_steps
from .supply import ImageSupply, pass_supplier
from .trace import CallRecord, ForwardItem, ForwardRequest, ForwardTrace


@dataclass
class EncoderRun:
    """An EPD encode server's ``get_image_feature`` call for one request: its trace and the rows per image."""

    request: int
    trace: Trace | None
    tokens: list[int]

    @property
    def error(self) -> ErrorInfo | None:
        """Return the call's error, or None."""
        return None if self.trace is None else self.trace.error


@dataclass
class LoadResult:
    """A workload on one release at one attention-TP size: the built requests, prompts, passes and each replay."""

    kind: ClassVar[Literal["workload"]] = "workload"  # an answer's replay of a workload (kimi_viz.answer.Replay)

    workload: Workload
    release: Release
    tp_size: int
    settings: ServerSettings
    load: LoadSettings
    built: list[BuiltRequest]
    prompts: list[Prompt]
    schedule: Schedule  # the scheduler's config, prefill passes and saved states
    passes: list[ForwardTrace]  # the passes replayed, up to and including the first that raised
    encoder_runs: list[EncoderRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failing_pass(self) -> int | None:
        """Return the index of the pass that raises, or None."""
        return next((k for k, p in enumerate(self.passes) if p.error is not None), None)

    @property
    def plans(self) -> tuple[Pass, ...]:
        """Return the scheduler's prefill passes, in order."""
        return self.schedule.passes

    @property
    def matched(self) -> list[int]:
        """Return each request's radix prefix: the tokens it started from the cache, never prefilled (0 when it was
        never prefilled)."""
        prefixes = radix_prefixes(self.plans)
        return [prefixes.get(r.rid, 0) for r in self.workload.requests]

    def prefix_matches(self) -> list[PrefixMatch | None]:
        """Return each request's radix match when it was first admitted (None: never admitted): the FULL match, the
        saved state it was cut back to, what a plain radix tree would have matched, the branching point."""
        first: dict[str, PrefixMatch] = {}
        for plan in self.plans:
            for window in plan.windows:
                match = None if plan.formed is None else plan.formed.match_of(window.rid)
                if match is not None:
                    first.setdefault(window.rid, match)
        return [first.get(r.rid) for r in self.workload.requests]

    def with_ample_memory(self) -> Schedule | None:
        """Return the passes the same requests get with every pool unbounded (None: memory is unbounded already):
        what memory pressure changed is the difference."""
        if not self.schedule.server.memory.bounded:
            return None
        ample = replace(self.load, max_total_tokens=None, max_running_requests=None, max_mamba_cache_size=None)
        return schedule(self.reqs, ample, self.release)

    @cached_property
    def reqs(self) -> list[Req]:
        """Return the workload's requests as the scheduler receives them (token ids, image runs; one per request,
        in workload order), built once: :func:`~kimi_viz.scheduler.event_loop.schedule` copies what it changes."""
        return scheduled_requests(self.workload, self.prompts, [list(b.images) for b in self.built])

    def index(self, rid: str) -> int:
        """Return the workload position of the request ``rid``."""
        return next(k for k, r in enumerate(self.workload.requests) if r.rid == rid)

    def image_supplies(self) -> list[ImageSupply]:
        """Return where every image of every request got its rows: the radix prefix, the cache or a call."""
        matched, matches, out = self.matched, self.prefix_matches(), []
        windows_of: dict[int, list[tuple[int, ForwardTrace, ForwardRequest]]] = {}  # each request's, pass by pass
        for k, trace in enumerate(self.passes):
            for window in trace.batch:
                windows_of.setdefault(window.index, []).append((k, trace, window))
        for r, (request, built, prompt) in enumerate(zip(self.workload.requests, self.built, self.prompts)):
            for i, (image, run) in enumerate(zip(built.images, prompt.pad_runs)):
                by_pass = tuple(
                    (k, pass_supplier(trace, r, i)) for k, trace, window in windows_of.get(r, ()) if window.touches(i)
                )
                match = matches[r]
                plain = None if match is None or not self.schedule.server.hybrid else match.plain
                out.append(ImageSupply(r, request.rid, i, image.label, run, matched[r], by_pass, plain))
        return out

    @property
    def encoder_error(self) -> EncoderRun | None:
        """Return the EPD encoder run that raised, or None."""
        return next((run for run in self.encoder_runs if run.error is not None), None)

    @property
    def error(self) -> ErrorInfo | None:
        """Return what SGLang raises first (the encode server's, then a pass's), or None."""
        if self.encoder_error is not None:
            return self.encoder_error.error
        failing = self.failing_pass
        return None if failing is None else self.passes[failing].error

    @property
    def silent(self) -> bool:
        """Return True when nothing raises but an image is encoded wrongly or rows land on another image's tokens."""
        if self.error is not None:
            return False
        for trace in self.passes:
            if trace.misplaced():
                return True
            for call in trace.calls:
                if call.trace is not None and call.trace.divergence.silent:
                    return True
        return any(run.trace is not None and run.trace.divergence.silent for run in self.encoder_runs)

    @property
    def status(self) -> Status:
        """Return ``error-reproduced``, ``silent-mismatch`` or ``clean``."""
        if self.error is not None:
            return Status.ERROR_REPRODUCED
        return Status.SILENT_MISMATCH if self.silent else Status.CLEAN

    @property
    def failed(self) -> bool:
        """Return True when SGLang raises somewhere on the path."""
        return self.error is not None

    def deciding_trace(self) -> Trace | None:
        """Return the replay of the call that decides the answer: the encode server's that raised, else the failing
        pass's call, else None."""
        run = self.encoder_error
        if run is not None:
            return run.trace
        call = self.failing_call()
        return None if call is None else call.trace

    def failing_call(self) -> CallRecord | None:
        """Return the ``get_image_feature`` call that raised, or None."""
        failing = self.failing_pass
        if failing is None:
            return None
        return next((c for c in self.passes[failing].calls if c.trace is not None and c.trace.error), None)

    def to_json(self) -> dict[str, Any]:
        """Return the workload's answer as JSON: every request, prompt, pass and its replay."""
        error = self.error
        return {
            "sglang_version": self.release.version,
            "tp_size": self.tp_size,
            "settings": self.settings.to_json(),
            "load": self.load.to_json(),
            "status": self.status.value,
            "error": None if error is None else error.to_json(),
            "failing_pass": self.failing_pass,
            "server": self.schedule.server.to_json(),
            "requests": [
                {
                    **request.to_json(),
                    "prompt_length": prompt.length,
                    "pad_runs": [list(run) for run in prompt.pad_runs],
                    "forms": built.forms,
                    "match": None
                    if match is None
                    else {
                        "full": match.full,
                        "plain": match.plain,
                        "prefix": match.matched,
                        "branching": match.branching,
                    },
                }
                for request, prompt, built, match in zip(
                    self.workload.requests, self.prompts, self.built, self.prefix_matches()
                )
            ],
            "saves": [{"step": s.step, "request": s.rid, "depth": s.depth} for s in self.schedule.saves],
            "retractions": [
                {"step": r.step, "request": r.rid, "outputs": r.outputs, "aborted": r.aborted}
                for r in self.schedule.retractions
            ],
            "no_token_steps": list(self.schedule.no_token),
            "evictions": [
                {"step": m.step, "kv_tokens": m.evicted_tokens, "states": m.evicted_states}
                for m in self.schedule.evictions
            ],
            "passes": [
                {**self._plan_json(plan), "replay": trace.to_json() if trace is not None else None}
                for plan, trace in zip(self.plans, [*self.passes, *[None] * (len(self.plans) - len(self.passes))])
            ],
            "images": [supply.to_json() for supply in self.image_supplies()],
            "encoder": [
                {
                    "request": run.request,
                    "tokens": run.tokens,
                    "error": None if run.error is None else run.error.to_json(),
                }
                for run in self.encoder_runs
            ],
            "notes": list(self.notes),
        }

    def _plan_json(self, plan: Pass) -> dict[str, Any]:
        """Return ``{"step", "windows": [{"request", "prefix_length", "extend_length"}], "decoding"}`` (by position)."""
        return {
            "step": plan.step,
            "windows": [
                {"request": self.index(w.rid), "prefix_length": w.prefix_len, "extend_length": w.extend_input_len}
                for w in plan.windows
            ],
            "decoding": [self.index(rid) for rid in plan.decoding],
        }


def _tokens(built: BuiltRequest) -> list[int]:
    """Return each image's ``<|media_pad|>`` count: the producer's ``num_tokens`` (what the request side expands)."""
    return [resize_config(image.width, image.height, built.producer).tokens for image in built.images]


def check_workload_settings(settings: ServerSettings) -> ServerSettings:
    """Return ``settings`` when a workload can take them; WhatIfError for cache hits named by position."""
    if settings.embedding_cache_hits or settings.preprocess_cache_hits:
        raise WhatIfError(
            "--embedding-cache-hit / --preprocess-cache-hit: a workload models its caches itself (a repeated "
            "image is a hit); drop them, or repeat the image in an earlier arrival"
        )
    return settings


def replay_workload(
    workload: Workload,
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    mode: Literal["pixels", "shapes"] = "shapes",
    device: DeviceLike = "auto",
    cache: EmbeddingCache | None = None,
    built: list[BuiltRequest] | None = None,
    planned: Schedule | None = None,
    release: Release | None = None,
    explain: bool = True,
) -> LoadResult:
    """Return the :class:`LoadResult` of ``workload`` on SGLang ``sglang_version`` at attention-TP ``tp_size``.

    ``cache`` is the embedding cache the workload starts with (a fresh one of ``load.cache_mb`` MB by
    default; it is copied, never changed); ``built`` are the requests' items when the caller already
    built them with this release's request side (a sweep builds each once); ``planned`` the schedule already
    planned for these requests and ``load`` on this release (they do not depend on the TP size); ``release`` the
    release entry to run when the caller holds one (a question's: the fix search changes one change's rules of
    it), else the one ``sglang_version`` names. ``explain=False`` leaves out the scheduler steps that formed each pass
    (the same status; what a flag search asks). Raises :class:`~kimi_viz.errors.WhatIfError` for settings the
    release refuses or contradictory ones.
    """
    named, sentence = release_for(sglang_version)
    release = named if release is None else release
    tp = check_tp_size(tp_size, "tp")
    settings = settings if settings is not None else ServerSettings()
    load = load if load is not None else LoadSettings()
    check_workload_settings(settings)
    whole = whole_requests(workload)
    if built is None:
        built = [build_workload_request(r, settings, release, mode) for r in whole]
    prompts = [
        render_prompt(_tokens(b), [im.size for im in b.images], before=r.before, between=r.spacing, after=r.after)
        for r, b in zip(whole, built)
    ]
    notes = [sentence] if sglang_version.strip() != release.version else []
    if planned is None:
        reqs = scheduled_requests(workload, prompts, [list(b.images) for b in built])
        planned = schedule(reqs, load, release)
    items = _forward_items(whole, built, prompts, encoder_preprocesses(settings, release.request_side))
    encoder_runs: list[EncoderRun] = []
    if settings.epd:
        encoder_runs, items = _encode_server(workload, built, items, release, tp, mode, device)
    server = planned.server
    notes.append(
        f"the server runs {server.describe()}" + (f" ({'; '.join(server.resolved)})" if server.resolved else "")
    )
    notes.append(f"memory: {server.memory.describe()}")
    result = LoadResult(workload, release, tp, settings, load, built, prompts, planned, [], encoder_runs, notes)
    if result.encoder_error is not None:
        return result
    cache = (
        cache.copy()
        if cache is not None
        else EmbeddingCache.of_megabytes(load.cache_mb, rejects_oversized=release.forward.rejects_oversized_cache_entry)
    )
    for seed in workload.cache:  # entries an earlier request left under the same hash
        key = seed.image.digest[:16]
        cache.set(key, Rows.of(Source(-1, 0, "earlier", f"{seed.image.label}, cached", key), seed.tokens))
    consumer = built[0].consumer.to_media_proc_cfg()
    encode = call_encoder(release=release, tp_size=tp, processor=consumer, mode=mode, device=device)
    _replay_passes(result, items, cache, encode, explain)
    return result


def _replay_passes(
    result: LoadResult, items: list[tuple[ForwardItem, ...]], cache: EmbeddingCache, encode: Encoder, explain: bool
) -> None:
    """Replay every planned pass in order into ``result.passes``, one embedding cache carried along, up to the
    first that raises (it kills the scheduler process); ``explain``: each trace opens with the steps that formed it."""
    load = result.load
    admitted: dict[str, PrefixMatch] = {}  # each request's latest admission (a retracted one is matched again)
    index = {r.rid: k for k, r in enumerate(result.workload.requests)}
    saves: dict[str, list[int]] = {}
    retractions: dict[str, list[int]] = {}
    for save in result.schedule.saves:
        saves.setdefault(save.rid, []).append(save.depth)
    for retraction in result.schedule.retractions:
        retractions.setdefault(retraction.rid, []).append(retraction.step)
    for plan in result.plans:
        batch = []
        for w in plan.windows:
            k = index[w.rid]
            prompt = result.prompts[k].length
            now = None if plan.formed is None else plan.formed.match_of(w.rid)
            if now is not None:
                admitted[w.rid] = now
            match = admitted.get(w.rid)
            prefix = 0 if match is None else match.matched
            shared = prefix if match is None else max(match.full, match.plain or 0, prefix)
            held = () if match is None else match.states
            states = tuple(sorted({*held, *(d for d in saves.get(w.rid, ()) if d <= prompt)}))
            retracted = tuple(step for step in retractions.get(w.rid, ()) if step < plan.step)
            batch.append(
                ForwardRequest(
                    index=k,
                    rid=w.rid,
                    items=items[k],
                    prefix=w.prefix_len,
                    extend=w.extend_input_len,
                    length=prompt,
                    matched=prefix,
                    shared=shared,
                    states=states,
                    retracted=retracted,
                )
            )
        trace = replay_forward(
            batch,
            release=result.release,
            tp_size=result.tp_size,
            cache=cache,
            encode=encode,
            platform=load.platform,
            chunked_prefill_size=load.chunked_prefill_size or -1,
            formed_by=() if plan.formed is None or not explain else scheduler_steps(batch, plan.formed),
        )
        pressure = None if plan.formed is None else plan.formed.pressure
        if pressure is not None and not pressure.quiet:
            trace.memory = memory_sentence(pressure)
        result.passes.append(trace)
        if trace.error is not None:
            break


def build_workload_request(
    request: Request, settings: ServerSettings, release: Release, mode: str = "shapes"
) -> BuiltRequest:
    """Return the items ``release``'s request side builds for ``request`` (with its stale eager rows, if any)."""
    built = build_request(list(request.images), settings, release.request_side, mode=mode)  # type: ignore[arg-type]
    if request.stale and encoder_preprocesses(settings, release.request_side):
        note = "stale rows ignored: the EPD encoder preprocesses every image itself on the cpu backend"
        return replace(built, notes=[*built.notes, note])
    return _with_stale_rows(built, request, mode)


def _with_stale_rows(built: BuiltRequest, request: Any, mode: str) -> BuiltRequest:
    """Return ``built`` with every stale image's item holding the other image's eager rows under its own grid (S10)."""
    if not request.stale:
        return built

    items = list(built.items)
    for k, other in request.stale:
        resize = resize_config(other.width, other.height, built.producer)
        feature = eager_feature(other, resize, built.producer, mode=mode)  # type: ignore[arg-type]
        items[k] = replace(items[k], feature=feature, deferred=None, local_preprocessed=False)
    notes = [
        *built.notes,
        *(f"image {k}: the preprocessing cache hands back {o.label}'s eager rows" for k, o in request.stale),
    ]
    return replace(built, items=items, notes=notes)


def whole_requests(workload: Workload) -> list[Request]:
    """Return every request of ``workload`` written out whole, as the server receives it (:meth:`Workload.whole`)."""
    return [workload.whole(k) for k in range(len(workload.requests))]


def _forward_items(
    requests: list[Request], built: list[BuiltRequest], prompts: list[Prompt], ignore_stale: bool = False
) -> list[tuple[ForwardItem, ...]]:
    out = []
    for k, (request, b, prompt) in enumerate(zip(requests, built, prompts)):
        stale = {} if ignore_stale else dict(request.stale)
        out.append(
            tuple(
                ForwardItem(
                    Source(k, i, request.rid, image.label, image.digest[:16]),
                    image.digest[:16],
                    run,
                    item,
                    origin=None
                    if i not in stale
                    else Source(k, i, request.rid, f"{stale[i].label}, stale", stale[i].digest[:16]),
                )
                for i, (image, item, run) in enumerate(zip(b.images, b.items, prompt.pad_runs))
            )
        )
    return out


def _encode_server(
    workload: Workload,
    built: list[BuiltRequest],
    items: list[tuple[ForwardItem, ...]],
    release: Release,
    tp: int,
    mode: str,
    device: DeviceLike,
) -> tuple[list[EncoderRun], list[tuple[ForwardItem, ...]]]:
    """Return the encode server's runs and the items with their rows as ``precomputed_embeddings``."""
    runs, out = [], []
    for k, b in enumerate(built):
        call = model_call(b, tp, release)
        trace = replay_call(call, release, mode=mode, device=device)
        tokens = [0] * len(b.items)
        if trace is not None and trace.error is None:
            for position, n in zip(call.positions, produced_tokens(trace, call.batch_for(0).items)):
                tokens[position] = n
        runs.append(EncoderRun(k, trace, tokens))
        out.append(tuple(replace(item, precomputed=Rows.of(item.rows_source, n)) for item, n in zip(items[k], tokens)))
        if trace is not None and trace.error is not None:
            break
    return runs, out


__all__ = [
    "EncoderRun",
    "LoadResult",
    "check_workload_settings",
    "whole_requests",
    "replay_workload",
    "build_workload_request",
]
