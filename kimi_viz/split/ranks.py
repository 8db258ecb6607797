"""§6.2: which attention-TP rank materializes which images — SGLang's vision data-parallel load balancing.

With attention-TP size > 1, ``run_dp_sharded_mrope_vision_model`` calls ``get_dp_encoder_lb_assignment``
(``sglang/srt/multimodal/mm_utils.py``, the same in 0.5.17 to 0.5.23) and each rank materializes its
share; with size 1 the loader gets every image, ``[0 .. n-1]``.
"""

from __future__ import annotations

import heapq
from typing import Any

from ..errors import ConfigError
from .batch import Batch
from .step_records import RankAssignment
from .trace import ASSIGN_RANKS, Step

#: The largest attention-TP size accepted (the manifest schema's limit).
MAX_TP_SIZE = 65536


def check_tp_size(tp_size: Any, name: str = "tp_size") -> int:
    """Return ``tp_size`` when it is an int in 1..MAX_TP_SIZE; raise ConfigError naming ``name`` otherwise."""
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or not 1 <= tp_size <= MAX_TP_SIZE:
        raise ConfigError(f"{name}: expected an attention-TP size from 1 to {MAX_TP_SIZE}, got {tp_size!r}")
    return tp_size


def assign_ranks(patch_counts: list[int], tp_size: int) -> list[list[int]]:
    """Return each rank's image indices as SGLang's ``get_dp_encoder_lb_assignment`` assigns them.

    Images are taken largest patch count first (a stable sort: ties keep their order) and each
    goes to the rank with the smallest load so far (ties to the lowest rank). Each rank's list
    keeps that assignment order, so it is *not* sorted by index. (With attention-TP size 1 SGLang
    does not call the balancer; the replay then uses ``[0 .. n-1]``.) A heap of ``(load, rank)``
    makes this O(n log tp) where SGLang scans every rank per image; the result is the same.
    """
    check_tp_size(tp_size)
    counts = [int(c) for c in patch_counts]
    ranks: list[list[int]] = [[] for _ in range(tp_size)]
    loads = [(0, r) for r in range(min(tp_size, max(1, len(counts))))]
    # Only the first len(counts) ranks can ever receive an image: every rank starts at load 0 and
    # the lowest-numbered least-loaded rank wins, so the heap never needs the others.
    heapq.heapify(loads)
    for index in sorted(range(len(counts)), key=counts.__getitem__, reverse=True):
        load, target = heapq.heappop(loads)
        ranks[target].append(index)
        heapq.heappush(loads, (load + counts[index], target))
    return ranks


def rank_loads(assignment: list[list[int]], patches: list[int]) -> list[int]:
    """Return each rank's load: the sum of the patch counts of the images assigned to it."""
    return [sum(patches[i] for i in ranks) for ranks in assignment]


def assign_step(
    batch: Batch,
    tp_size: int,
    rank: int,
    assignment: list[list[int]],
    patches: list[int],
    loads: list[int] | None = None,
    order: list[int] | None = None,
) -> Step:
    """Return the assignment step of ``rank``: the order, every rank's images and loads, and this rank's share.

    A rank without images ends here (its note says so): the DP runner does not call the loader on it.

    ``loads`` and ``order`` are the same for every rank; the replay computes them once and every rank's
    step shares those lists (and ``assignment``), so replaying all ranks stays linear in the TP size.
    """
    if loads is None:
        loads = rank_loads(assignment, patches)
    if order is None:
        order = sorted(range(len(patches)), key=patches.__getitem__, reverse=True)
    applies = batch.attn_tp_rank == rank or (batch.attn_tp_rank is None and tp_size == 1)
    recorded = list(batch.image_indices) if batch.image_indices is not None and applies else None
    variables = RankAssignment(
        tp_size, rank, patches, order if tp_size > 1 else None, assignment, loads, assignment[rank], recorded
    )
    if tp_size == 1:
        note = "Attention-TP size 1: the loader is called once with every image, image_indices = [0 .. n-1]."
    else:
        note = (
            f"get_dp_encoder_lb_assignment: largest patch count first, each image to the least-loaded "
            f"rank; rank {rank} materializes images {assignment[rank]} (in assignment order)."
        )
    if recorded is not None and list(recorded) != list(assignment[rank]):
        note += f" The capture recorded image_indices {list(recorded)} for this rank, which differ."
    if not assignment[rank]:
        note += " This rank has no images: the DP runner does not call the loader here."
    return Step(ASSIGN_RANKS, "Assign images to ranks", "§6.2", variables, note)


__all__ = ["MAX_TP_SIZE", "check_tp_size", "assign_ranks", "rank_loads", "assign_step"]
