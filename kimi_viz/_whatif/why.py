"""One paragraph on why an answer fails, or why nothing fails: the part of the answer a verdict leaves implicit.

For one request (:func:`request_why`):

A clean replay has several distinct reasons, and the user deciding whether a deployment is safe
needs the right one: nothing reached ``get_image_feature`` (cache hits); every item was eager, so the
deferred split never ran (the transport, the release, the byte rule or a non-CUDA server); the EPD
encoder had already preprocessed every image on its owner rank; one rank held every image (TP 1); the
release reads ``global_indices``; or, on 0.5.18 at TP ≥ 2, every rank happened to read its own grids.
For a workload (:func:`load_why`): the pass and call that raise, naming requests and images, or rows spliced
onto another image's pad tokens, or why every row lands where it should.
"""

from __future__ import annotations

from ..answer import RequestReplay
from ..forward.scheduled import no_token_phrase
from ..forward.supply import ImageSupply
from ..forward.trace import CallRecord, ForwardItem, ForwardRequest, ForwardTrace
from ..forward.workload_replay import LoadResult
from ..release_changes.rules import releases_where
from ..releases import Release, path_change
from ..scheduler.event_loop import radix_prefixes
from ..scheduler.prefix import padded_ids
from ..scheduler.radix_cache import lost_on
from ..split.verdict import Verdict, build_verdict


def _eager_reasons(replayed: RequestReplay) -> str:
    decisions = {d.image: d for d in replayed.built.decisions}
    # Each reason once, in the order of the call's images.
    reasons = dict.fromkeys(decisions[p].reason for p in replayed.call.positions if p in decisions)
    return "; ".join(reasons)


def _prefix_note(verdict: Verdict) -> str:
    """Return which failing ranks hold images that are not a prefix of the call (the S1 condition)."""
    notes = []
    for rank in verdict.ranks:
        if rank.outcome != "error" or not rank.image_indices:
            continue
        if sorted(rank.image_indices) != list(range(len(rank.image_indices))):
            notes.append(f"rank {rank.rank} holds images {rank.image_indices}, not a prefix of the call")
    return "; ".join(notes)


def _all_local(replayed: RequestReplay, verdict: Verdict) -> bool:
    """Return True when every rank's selected items were preprocessed on the encoder (EPD cpu)."""
    call = replayed.call
    assert call.rank_batches is not None
    return all(
        all(call.rank_batches[r.rank].items[g].local_preprocessed for g in r.image_indices)
        for r in verdict.ranks
        if r.image_indices
    )


def _desync_note(replayed: RequestReplay, verdict: Verdict) -> str:
    """Return, for the EPD cpu backend, which images reach a failing rank raw because another rank owned them."""
    call = replayed.call
    if call.rank_batches is None or call.owners is None:
        return ""
    notes = []
    for rank in verdict.ranks:
        if rank.outcome != "error" or not rank.image_indices:
            continue
        for g in rank.image_indices:
            if not call.rank_batches[rank.rank].items[g].local_preprocessed:
                p = call.positions[g]
                notes.append(
                    f"Image {p} reaches rank {rank.rank} raw: the encoder's balancing over all "
                    f"{len(call.owners)} images gave it to rank {call.owners[p]}, the model's over the "
                    f"{len(call.positions)} cache misses gives it to rank {rank.rank} (S3)"
                )
    return ("; ".join(notes) + ". ") if notes else ""


def request_why(replayed: RequestReplay, verdict: Verdict | None, release: Release, tp_size: int) -> str:
    """Return why the request fails on this deployment, or why nothing fails."""
    call = replayed.call
    if verdict is None:
        reasons = "; ".join(f"image {s.image}: {s.reason}" for s in call.skipped)
        return f"Nothing reaches get_image_feature ({reasons}), so nothing can fail there."
    div = verdict.divergence
    if verdict.outcome == "error":
        where = _prefix_note(verdict) if release.code_path == "pre-fix" else ""
        lead = (f"{where[0].upper()}{where[1:]}. " if where else "") + _desync_note(replayed, verdict)
        return lead + div.explanation
    if div.silent:
        return div.explanation
    assert call.batch is not None
    items = call.batch.items
    if all(it.deferred is None for it in items):
        return (
            "Every item that reaches get_image_feature is eager ("
            + _eager_reasons(replayed)
            + "), so the deferred split never runs: eager rows are used as they are, with no grid or length "
            "check, and their row counts equal their grids by construction."
        )
    if call.rank_batches is not None and _all_local(replayed, verdict):
        return (
            "The EPD encoder preprocessed every image on its owner rank right after loading (materialize_for_rank, "
            "encoder_local_preprocessed) with the same load balancing the model then uses, so each rank "
            "concatenates its own eager rows and the deferred split never runs; it would only if embedding-cache "
            "hits made the two assignments differ (S3)."
        )
    if release.code_path == "no-split":
        return (
            f"SGLang {release.version} has no deferred split; the deferred items it received are raw, yet nothing "
            "raised here (see the verdict)."
        )
    if tp_size == 1:
        return (
            "At attention-TP 1 one rank materializes every image, so shard-local positions are the global ones "
            "and every deferred image is checked against its own grid (the S1 bug needs TP ≥ 2)."
        )
    if release.code_path == "post-fix":
        change = path_change("post-fix")
        prs = "" if change is None else f" ({change.pr_text})"
        return (
            f"SGLang {release.version} reads grid_thws_host at global_indices{prs}, so "
            "every rank checks its deferred images against their own grids."
        )
    return (
        f"SGLang {release.version} reads grid_thws_host at shard-local positions, but on every rank the grids at "
        "those positions equal its own images' grids (the rank holds a prefix of the call, or the grids are equal)."
    )


def _names(call: CallRecord) -> str:
    return ", ".join(
        f"call item {k} = request {i.source.rid}'s image {i.source.image} ({i.source.label})"
        for k, i in enumerate(call.items)
    )


def load_why(result: LoadResult) -> str:
    """Return why a workload fails on this deployment (naming requests and images), or why nothing fails."""
    run = result.encoder_error
    if run is not None:
        rid = result.workload.requests[run.request].rid
        verdict = build_verdict(run.trace) if run.trace is not None else None
        tail = "" if verdict is None else " " + verdict.divergence.explanation
        return f"The encode server's get_image_feature call for request {rid} raises.{tail}"
    failing = result.failing_pass
    if failing is not None:
        return _with_tree_and_memory(result, _why_pass(result, result.passes[failing], failing), failing)
    for k, trace in enumerate(result.passes):
        wrong = trace.misplaced()
        if wrong:
            owner, item, placement = wrong[0]
            last = placement.run.count - 1
            rows = f"rows {placement.run.start}..{placement.run.start + last}"
            cut = _cut_rows(trace)
            said = (
                f"Nothing raises, but in pass {k + 1} the pad tokens {placement.start}..{placement.start + last} "
                f"of request {owner.rid}'s image {item.source.image} ({item.source.label}) receive {rows} of "
                f"{placement.run.source.label}: the image is spliced with another image's features (silent).{cut}"
            )
            return _with_tree_and_memory(result, said, k)
        for call in trace.calls:
            if call.trace is not None and call.trace.divergence.silent:
                said = f"In pass {k + 1}, get_image_feature raises nothing, but {call.trace.divergence.explanation}"
                return _with_tree_and_memory(result, said, k)
    calls = sum(len(t.calls) for t in result.passes)
    shared = [t for t in result.passes for c in t.calls if len({i.source.request for i in c.items}) > 1]
    parts = [
        f"{_count(len(result.passes), 'prefill pass', 'prefill passes')}, "
        f"{_count(calls, 'get_image_feature call')}: every call passes, and every pad token receives its own "
        "image's feature row."
    ]
    if shared:
        parts.append(
            f"{_count(len(shared), 'call')} held images of several requests and passed the deferred split on "
            "every rank."
        )
    parts += _hits(result)
    parts += _memory(result, None)
    parts += _straddles(result)
    warned = [w for t in result.passes for w in t.warnings]
    if warned:
        parts.append(f"SGLang logs {_count(len(warned), 'warning')} on the way (first: {warned[0]})")
    return " ".join(parts)


def _uneven(trace: ForwardTrace) -> list[tuple[ForwardRequest, ForwardItem, int]]:
    """Return the precomputed items whose rows are not their pad tokens: (request, item, rows)."""
    return [
        (request, item, len(item.precomputed))
        for request in trace.batch
        for item in request.items
        if item.precomputed is not None and len(item.precomputed) != item.tokens
    ]


def _cut_rows(trace: ForwardTrace) -> str:
    """Return the sentence naming the precomputed rows get_embedding_chunk cut without a word, or ''."""
    if trace.path != "precomputed":
        return ""
    parts = [
        f"request {r.rid}'s image {i.source.image} ({i.source.label}) brought {_count(n, 'row')} "
        f"for {i.tokens} pad tokens: "
        f"get_embedding_chunk kept the first {i.tokens} and cut rows {i.tokens}..{n - 1}"
        for r, i, n in _uneven(trace)
        if n > i.tokens
    ]
    return "" if not parts else " On the precomputed path " + "; ".join(parts) + "."


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _with_tree_and_memory(result: LoadResult, said: str, deciding: int) -> str:
    """Return ``said`` of the pass that decides the answer, followed by what the hybrid tree and memory did."""
    return " ".join([said, *_hits(result), *_memory(result, deciding)])


def _hits(result: LoadResult) -> list[str]:
    """Return a sentence on the tree the server runs and each prefix hit it cut back to a saved state (none when no
    hit was cut), naming an image the cut re-opened."""
    server = result.schedule.server
    if not server.hybrid:
        return []
    reopened: dict[str, list[str]] = {}
    for supply in result.image_supplies():
        if supply.reopened_by_cut:
            reopened.setdefault(supply.rid, []).append(
                f"{supply.label} (pads {supply.offsets[0]}..{supply.offsets[1]})"
            )
    cuts = []
    for request, match in zip(result.workload.requests, result.prefix_matches()):
        if match is None:
            continue
        shared = max(match.full, match.plain or 0)
        if shared <= match.matched:
            continue
        saved = f"the deepest saved state is at {match.matched}" if match.matched else "no saved state lies on it"
        words = f"{request.rid} matched {shared} tokens; {saved}, so it starts there"
        if request.rid in reopened:
            words += f", re-opening {', '.join(reopened[request.rid])}"
        cuts.append(words)
    if not cuts:
        return []
    return [
        f"Kimi-K3's hybrid tree ({server.tree}, {server.strategy}) cuts a hit back to a saved state: {'; '.join(cuts)}."
    ]


def _memory(result: LoadResult, deciding: int | None) -> list[str]:
    """Return a sentence on what memory pressure did (nothing when every pool is unbounded): retractions, prefixes
    the tree evicted, and the requests that meet in the deciding pass only because of it."""
    schedule = result.schedule
    ample = result.with_ample_memory()
    if ample is None:
        return []
    # what happened up to the deciding pass's step (the pass's own NO_TOKEN stop and evictions included)
    until = result.plans[deciding].step if deciding is not None and deciding < len(result.plans) else None
    events = []
    for retraction in schedule.retractions:
        if until is not None and retraction.step > until:
            continue
        what = "aborted (out of memory even alone)" if retraction.aborted else "retracted"
        events.append(
            f"{retraction.rid} was {what} at step {retraction.step} (the KV pool ran short while decoding; its "
            f"{retraction.outputs} outputs are prefilled again)"
        )
    ample_prefix = radix_prefixes(ample.passes)
    for k, (request, prefix) in enumerate(zip(result.workload.requests, result.matched)):
        lost = ample_prefix.get(request.rid, 0)
        if prefix >= lost:
            continue
        admitted = next((p.step for p in result.plans for w in p.windows if w.rid == request.rid), None)
        ids = padded_ids(result.reqs[k], result.release.scheduler)  # its prompt as the tree keys it
        taken = [
            (m.step, piece)
            for m in schedule.evictions
            if admitted is None or m.step < admitted
            for piece in lost_on(ids, m.lost)
            if piece.start < lost and piece.end > prefix
        ]
        reopened = [
            _went_back(result, s) for s in result.image_supplies() if s.request == k and prefix <= s.offsets[1] < lost
        ]
        back = f"; {'; '.join(reopened)}" if reopened else ""
        if taken:
            what = ", ".join(
                f"tokens {piece.start}..{piece.end - 1} at step {step}"
                if piece.kind == "kv"
                else f"the state saved at {piece.end} at step {step}"
                for step, piece in taken
            )
            said = f"{request.rid}'s cached prefix was evicted ({what})"
        else:
            said = f"{request.rid} matched less than with ample memory (nothing on its path was evicted)"
        events.append(f"{said}: it starts at {prefix} where ample memory leaves {lost}{back}")
    if deciding is not None and deciding < len(result.passes):
        plan = result.plans[deciding]
        rids = sorted({w.rid for w in plan.windows})
        shared = any(set(rids) <= {w.rid for w in p.windows} for p in ample.passes)
        if len(rids) > 1 and not shared:
            events.append(
                f"with ample memory {', '.join(rids)} never share a pass; memory pressure put them together in "
                f"pass {deciding + 1}"
            )
    refused = [step for step in schedule.no_token if until is None or step <= until]
    if refused:
        upto = f" up to pass {deciding + 1}" if deciding is not None and until is not None else ""
        events.append(no_token_phrase(refused) + upto)
    if not events:
        return [f"Memory ({schedule.server.memory.describe()}) changed no pass here."]
    return [f"Memory pressure ({schedule.server.memory.describe()}): {'; '.join(events)}."]


def _went_back(result: LoadResult, supply: ImageSupply) -> str:
    """Return where an image the cached prefix no longer covers got its rows again: which pass's call, beside whom."""
    for k, supplier in supply.by_pass:
        if supplier == "embedding cache":
            return f"{supply.label} went back into pass {k + 1}'s window, its rows from the embedding cache"
        if supplier != "call" or k >= len(result.passes):
            continue
        beside: list[str] = []
        for call in result.passes[k].calls:
            sources = [item.source for item in call.items]
            if any(src.request == supply.request and src.image == supply.image for src in sources):
                beside = [f"{src.rid}'s {src.label}" for src in sources if src.request != supply.request]
        return f"{supply.label} went back into pass {k + 1}'s call" + (f" beside {', '.join(beside)}" if beside else "")
    return f"{supply.label} went back into the window"


def _straddles(result: LoadResult) -> list[str]:
    """Return a sentence per image whose pad run spans several passes: who encodes it and where later rows come from."""
    out = []
    for supply in result.image_supplies():
        r, i = supply.request, supply.image
        request = result.workload.requests[r]
        passes = [k for k, _ in supply.by_pass]  # every pass whose window touched the image's run
        if len(passes) < 2:
            continue
        encoded = [
            k
            for k in passes
            for call in result.passes[k].calls
            if any(c.source.request == r and c.source.image == i for c in call.items)
        ]
        later = (
            "its rows for the later passes come from the embedding cache"
            if len(encoded) == 1
            else f"it is encoded whole again in pass{'es' if len(encoded) > 2 else ''} "
            f"{', '.join(str(k + 1) for k in encoded[1:])} "
            "(the embedding cache is off or evicted it)"
        )
        out.append(
            f"Request {request.rid}'s image {i} ({supply.label}) straddles passes "
            f"{', '.join(str(k + 1) for k in passes)}: SGLang encodes an overlapping image whole "
            f"(pass {encoded[0] + 1 if encoded else passes[0] + 1}) and slices each pass's part; {later}."
        )
    return out


def _why_pass(result: LoadResult, trace: ForwardTrace, k: int) -> str:
    stage, error = trace.stage, trace.error
    assert error is not None
    requests = ", ".join(f"{r.rid} [{r.prefix}, {r.prefix + r.extend})" for r in trace.batch)
    lead = f"Pass {k + 1} prefills {requests}{' together' if len(trace.batch) > 1 else ''}. "
    if stage == "call":
        call = next(c for c in trace.calls if c.trace is not None and c.trace.error is not None)
        assert call.trace is not None
        verdict = build_verdict(call.trace)
        many = len({i.source.request for i in call.items})
        how = (
            f"get_image_feature receives {len(call.items)} images from {many} requests in one call ({_names(call)}). "
            if many > 1
            else f"get_image_feature receives {len(call.items)} image(s) ({_names(call)}). "
        )
        return lead + how + verdict.divergence.explanation
    if stage == "split-back":
        call = trace.calls[-1]
        parts = ", ".join(
            f"{i.source.rid} image {i.source.image} ({i.source.label}) yields {n} rows for {i.tokens} pads"
            for i, n in zip(call.items, call.produced)
        )
        return (
            lead + f"The call's rows are split back by each item's pad tokens and do not add up: {parts}. An item's "
            "feature does not follow its grid (a stale eager feature: class S10); torch.split raises, and the "
            "scheduler dies with every request it holds."
        )
    if stage == "adjust":
        return (
            lead
            + "The window's pad tokens outnumber the embedding's rows: "
            + (
                "the precomputed rows the encode server sent are fewer than the pads ("
                + "; ".join(
                    f"request {r.rid}'s image {i.source.image} ({i.source.label}) brought {_count(n, 'row')} "
                    f"for {i.tokens} pad tokens"
                    for r, i, n in _uneven(trace)
                )
                + "; a stale eager feature on the encoder: class S10 on the EPD path)"
                if trace.path == "precomputed"
                else "a cached embedding of another length was used as it is (this release keys the cache by "
                "item.hash alone and never checks the length; "
                f"{releases_where('forward.discards_stale_cache')[0]} discards it with a warning)"
            )
            + f". {error.type}: {error.message}"
        )
    return lead + f"{error.type}: {error.message}"


__all__ = ["request_why", "load_why"]
