"""One paragraph on why a what-if fails, or why nothing fails: the part of the answer a verdict leaves implicit.

A clean replay has several distinct reasons, and the user deciding whether a deployment is safe
needs the right one: nothing reached ``get_image_feature`` (cache hits); every item was eager, so the
deferred split never ran (the transport, the release, the byte rule or a non-CUDA server); the EPD
encoder had already preprocessed every image on its owner rank; one rank held every image (TP 1); the
release reads ``global_indices``; or, on 0.5.18 at TP ≥ 2, every rank happened to read its own grids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..releases import FIX_PRS

if TYPE_CHECKING:  # pragma: no cover
    from .run import WhatIf


def _unique(texts: list[str]) -> list[str]:
    seen: list[str] = []
    for t in texts:
        if t not in seen:
            seen.append(t)
    return seen


def _eager_reasons(result: WhatIf) -> str:
    decisions = {d.image: d for d in result.built.decisions}
    reasons = _unique([decisions[p].reason for p in result.call.positions if p in decisions])
    return "; ".join(reasons)


def _prefix_note(result: WhatIf) -> str:
    """Return which failing ranks hold images that are not a prefix of the call (the S1 condition)."""
    verdict = result.verdict
    if verdict is None:
        return ""
    notes = []
    for rank in verdict.ranks:
        if rank.outcome != "error" or not rank.image_indices:
            continue
        if sorted(rank.image_indices) != list(range(len(rank.image_indices))):
            notes.append(f"rank {rank.rank} holds images {rank.image_indices}, not a prefix of the call")
    return "; ".join(notes)


def _all_local(result: WhatIf) -> bool:
    """Return True when every rank's selected items were preprocessed on the encoder (EPD cpu)."""
    call, verdict = result.call, result.verdict
    assert call.rank_batches is not None and verdict is not None
    return all(
        all(call.rank_batches[r.rank].items[g].local_preprocessed for g in r.image_indices)
        for r in verdict.ranks
        if r.image_indices
    )


def _desync_note(result: WhatIf) -> str:
    """Return, for the EPD cpu backend, which images reach a failing rank raw because another rank owned them."""
    call, verdict = result.call, result.verdict
    if call.rank_batches is None or call.owners is None or verdict is None:
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


def why_text(result: WhatIf) -> str:
    """Return why the request fails on this deployment, or why nothing fails."""
    call, verdict = result.call, result.verdict
    if verdict is None:
        reasons = "; ".join(f"image {s.image}: {s.reason}" for s in call.skipped)
        return f"Nothing reaches get_image_feature ({reasons}), so nothing can fail there."
    release = result.release
    div = verdict.divergence
    if verdict.outcome == "error":
        where = _prefix_note(result) if release.code_path == "pre-fix" else ""
        lead = (f"{where[0].upper()}{where[1:]}. " if where else "") + _desync_note(result)
        return lead + div.explanation
    if div.silent:
        return div.explanation
    assert call.batch is not None
    items = call.batch.items
    if all(it.deferred is None for it in items):
        return (
            "Every item that reaches get_image_feature is eager ("
            + _eager_reasons(result)
            + "), so the deferred split never runs: eager rows are used as they are, with no grid or length "
            "check, and their row counts equal their grids by construction."
        )
    if call.rank_batches is not None and _all_local(result):
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
    if result.tp_size == 1:
        return (
            "At attention-TP 1 one rank materializes every image, so shard-local positions are the global ones "
            "and every deferred image is checked against its own grid (the S1 bug needs TP ≥ 2)."
        )
    if release.code_path == "post-fix":
        return (
            f"SGLang {release.version} reads grid_thws_host at global_indices (PRs {' / '.join(FIX_PRS)}), so "
            "every rank checks its deferred images against their own grids."
        )
    return (
        f"SGLang {release.version} reads grid_thws_host at shard-local positions, but on every rank the grids at "
        "those positions equal its own images' grids (the rank holds a prefix of the call, or the grids are equal)."
    )


__all__ = ["why_text"]
