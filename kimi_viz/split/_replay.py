"""A step-by-step replay of SGLang's deferred split in ``KimiK3ForConditionalGeneration.get_image_feature``.

SGLang collects one grid per item (:mod:`.grids`), lets the vision data-parallel runner hand each
attention-TP rank a share of the images (:mod:`.ranks`), and on every rank materializes only its
own images: deferred items are grouped by backend, the ``gpu`` group goes through SGLang's torch
path with each item's ``resize_config`` (:mod:`.gpu_group`), the ``cpu`` group through the
checkpoint processor, which computes its *own* resize from the image size (:mod:`.cpu_group`), and
the rows produced are checked against the grids (:mod:`.length_check`). When they disagree SGLang
raises "Kimi-K3 deferred feature length does not match image grids" with no numbers.

:func:`replay` walks the code path of one SGLang release (:mod:`kimi_viz.releases`: 0.5.17 has no split,
0.5.18 the pre-fix split, 0.5.19 and later the fixed one) on a :class:`~kimi_viz.split.batch.Batch`,
records every variable at every step for every rank (:mod:`.trace`), and ends with the exact
exception SGLang would raise (type and message) or ``ok``; :mod:`.divergence` then names the
image, both counts and the cause.

``mode="pixels"`` materializes the pixels with the kit's processor backends; ``mode="shapes"``
derives every row count from sizes and resize configs alone (for redacted captures). Both modes
reach the same outcome: SGLang's row counts depend only on shapes.
"""

from __future__ import annotations

from typing import Any

from ..devices import DeviceLike, resolve_device
from ..errors import ConfigError
from ..message_catalogue.messages import MSG_FEATURE_TYPE, MSG_MIX_LOCAL, MSG_UNSUPPORTED_BACKEND
from ..preprocess.config import get_config
from ..release_changes.rules import releases_where
from ..releases import choose_release, release_span
from .batch import Batch, Item, check_processor_output
from .cpu_group import preprocess_cpu
from .divergence import with_divergence
from .gpu_group import preprocess_gpu
from .grids import collect_grids
from .group import BackendGroup
from .length_check import check_length, concatenate
from .ranks import assign_ranks, assign_step, check_tp_size, rank_loads
from .state import (
    Materialized,
    RankState,
    ReplayContext,
    SGLangRaise,
    feature_json,
    is_tensor,
    raises,
    type_text,
)
from .step_records import BackendGrouping, ItemSelection, UnsupportedBackend
from .trace import (
    GROUP_BACKENDS,
    SELECT_ITEMS,
    CauseKind,
    Check,
    RankTrace,
    Replayed,
    Step,
    Trace,
    preprocess_step,
    prod,
)

MODES = ("pixels", "shapes", "auto")


def _pick_mode(batch: Batch, mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"mode: expected one of {list(MODES)}, got {mode!r}")
    shape_only = [i for i, item in enumerate(batch.items) if item.feature.kind == "shape_only"]
    if mode == "auto":
        return "shapes" if shape_only else "pixels"
    if mode == "pixels" and shape_only:
        raise ConfigError(
            f"mode='pixels' needs pixels but item {shape_only[0]} is shape-only (a redacted capture); "
            "replay it with mode='shapes' (or mode='auto')"
        )
    return mode


def replay(
    batch: Batch,
    *,
    tp_size: int | None = None,
    rank: int | None = None,
    code_path: str | None = None,
    mode: str = "pixels",
    device: DeviceLike = "auto",
    sglang_version: str | None = None,
    server_version: tuple[str, str] | None = None,
) -> Trace:
    """Return the :class:`~kimi_viz.split.trace.Trace` of SGLang's ``get_image_feature`` on ``batch``.

    ``tp_size`` is the attention-TP size (default ``batch.attn_tp_size``); ``rank`` replays one
    rank only (default: every rank). ``sglang_version`` replays that release's code path; with
    neither it nor ``code_path`` the batch's recorded version, then its recorded code path, then the
    newest release decide (``server_version``, the release a server's log gives and how, comes before the
    newest), and ``Trace.release`` says which and how. ``code_path`` is the lower-level
    switch: ``"post-fix"`` (0.5.19 and later), ``"pre-fix"`` (0.5.18, which read ``grid_thws_host``
    with shard-local positions) or ``"no-split"`` (0.5.17). ``mode`` is ``"pixels"`` (materialize
    with the kit's processors), ``"shapes"`` (row counts from sizes and resize configs only) or
    ``"auto"`` (pixels unless a feature is shape-only). ``device`` is where gpu-backend items are
    materialized in pixels mode (``"auto"``: CUDA when present; pixels agree with the CPU goldens to
    one float32 rounding on CUDA). Exceptions SGLang would raise are recorded in the trace, never
    raised; bad arguments raise the kit's errors. Which later release fixes a failing batch is a
    question's (``kimi_viz.whatif(batch, ...)``, ``kimi_viz.triage``): the one fix search.
    """
    if not isinstance(batch, Batch):
        raise ConfigError(f"replay: expected a kimi_viz.Batch, got {type(batch).__name__}")
    choice = choose_release(
        sglang_version=sglang_version,
        code_path=code_path,
        recorded_version=batch.sglang_version,
        recorded_code_path=batch.code_path,
        recorded_source=batch.code_path_source,
        server_version=server_version,
    )
    tp = check_tp_size(batch.attn_tp_size if tp_size is None else tp_size)
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp):
        raise ConfigError(f"rank: expected an int in 0..{tp - 1} for tp_size {tp}, got {rank!r}")
    mode = _pick_mode(batch, mode)
    processor_output = check_processor_output(batch)
    if mode == "pixels":
        device = resolve_device(device)
    consumer = None if batch.processor is None else get_config(batch.processor)
    ranks_wanted = list(range(tp)) if rank is None else [rank]

    collected = collect_grids(batch)
    if collected.raised is not None:
        raised = collected.raised
        traces = [RankTrace(r, None, [collected.step], "error", raised.info, cause=raised.cause) for r in ranks_wanted]
        replayed = Replayed(batch, tp, choice.code_path, mode, traces, None, None, choice)
    else:
        grids = collected.grid_thws_host
        ctx = ReplayContext(
            batch,
            choice.code_path,
            mode,
            device,
            tp,
            consumer,
            (consumer if consumer is not None else get_config()).patch_size,
            processor_output,
            grids,
        )
        patches = [prod(g) for g in grids]
        assignment = [list(range(len(grids)))] if tp == 1 else assign_ranks(patches, tp)
        shared = _SharedAssignment(assignment, patches)
        traces = [_replay_rank(ctx, r, shared, collected.step) for r in ranks_wanted]
        replayed = Replayed(batch, tp, choice.code_path, mode, traces, grids, assignment, choice)
    return with_divergence(replayed)


# --- one rank -----------------------------------------------------------------------------------
class _SharedAssignment:
    """The assignment, patch counts, loads and order: computed once, shared by every rank's step."""

    def __init__(self, assignment: list[list[int]], patches: list[int]):
        self.assignment = assignment
        self.patches = patches
        self.loads = rank_loads(assignment, patches)
        self.order = sorted(range(len(patches)), key=patches.__getitem__, reverse=True)


def _replay_rank(ctx: ReplayContext, rank: int, shared: _SharedAssignment, grid_step: Step) -> RankTrace:
    image_indices = shared.assignment[rank]
    step = assign_step(ctx.batch, ctx.tp_size, rank, shared.assignment, shared.patches, shared.loads, shared.order)
    steps = [grid_step, step]
    trace = RankTrace(rank, list(image_indices), steps, "ok")
    state = RankState(ctx, rank, image_indices)
    if not image_indices:  # the assignment step's note says the loader is not called
        return trace
    try:
        _materialize(ctx, state, steps)
    except SGLangRaise as raised:  # the step where it raises already carries it
        trace.outcome = "error"
        trace.error = raised.info
        trace.cause = raised.cause
    trace.images = state.tracks()
    trace.pixel_values = state.pixel_values
    return trace


def _materialize(ctx: ReplayContext, state: RankState, steps: list[Step]) -> None:
    """Replay ``materialize_item_features(image_indices)`` on one rank, appending steps; raise on error."""
    items = [ctx.batch.items[g] for g in state.image_indices]
    if ctx.code_path == "no-split":
        _materialize_no_split(ctx, state, items, steps)
        return
    local = [bool(it.local_preprocessed) for it in items]
    selected = [
        {
            "local": k,
            "image": g,
            "label": it.label,
            "local_preprocessed": local[k],
            "deferred": it.deferred is not None,
            "backend": it.backend,
            "feature": feature_json(it.feature),
        }
        for k, (g, it) in enumerate(zip(state.image_indices, items))
    ]
    mixed = any(local) and not all(local)
    deferred = [it.deferred for it in items]
    eager = not any(local) and all(d is None for d in deferred)
    problem: SGLangRaise | None = None
    if mixed:
        first_deferred = next(k for k, flag in enumerate(local) if not flag)
        problem = raises(
            "ValueError",
            MSG_MIX_LOCAL,
            CauseKind.MIXED_LOCAL,
            state.image_indices[first_deferred],
            local=[g for g, f in zip(state.image_indices, local) if f],
            deferred=[g for g, f in zip(state.image_indices, local) if not f],
        )
    elif eager:  # every feature is used as it is: one that is no tensor raises here
        problem = _use_as_is(ctx, state, items)
    step = Step(
        SELECT_ITEMS,
        "Select this rank's items",
        "§6.3",
        ItemSelection(state.image_indices, selected, local),
        "materialize_item_features(image_indices): locally preprocessed items must be all or none.",
        Check("local preprocessed: all or none", "all or none", f"{sum(local)} of {len(local)}", not mixed),
    )
    state.add_step(steps, step, problem)
    if any(local):
        for k, it in enumerate(items):
            state.features[k] = _as_is(ctx, it, check_type=False)
        concatenate(ctx, state, steps, branch="local preprocessed")
        return
    if eager:
        concatenate(ctx, state, steps, branch="eager")
        return
    for group in _group_backends(ctx, state, items, deferred, steps):
        check_length(ctx, state, group, _preprocess_group(ctx, state, group, steps), steps)
    concatenate(ctx, state, steps, branch="deferred")


def _preprocess_group(ctx: ReplayContext, state: RankState, group: BackendGroup, steps: list[Step]) -> Any:
    """Return one backend group's rows (the gpu or cpu path); raise SGLang's error for another backend."""
    if group.backend == "gpu":
        return preprocess_gpu(ctx, state, group, steps)
    if group.backend == "cpu":
        return preprocess_cpu(ctx, state, group, steps)
    unsupported = raises(
        "ValueError",
        MSG_UNSUPPORTED_BACKEND.format(group.backend),
        CauseKind.UNSUPPORTED_BACKEND,
        group.global_indices[0],
        backend=group.backend,
    )
    steps.append(
        Step(
            preprocess_step(group.backend),
            f"Preprocess the {group.backend!r} group",
            "§6.5",
            UnsupportedBackend(group.indices_record()),
            "SGLang knows only the gpu and cpu backends.",
            None,
            unsupported.info,
            unsupported.cause,
            rows=state.tracks(),
        )
    )
    raise unsupported


def _use_as_is(ctx: ReplayContext, state: RankState, items: list[Item]) -> SGLangRaise | None:
    """Take every feature as it is (the eager and 0.5.17 paths); return SGLang's TypeError for one that is no tensor."""
    try:
        for k, it in enumerate(items):
            state.features[k] = _as_is(ctx, it, check_type=True, image=state.image_indices[k])
    except SGLangRaise as raised:
        return raised
    return None


def _materialize_no_split(ctx: ReplayContext, state: RankState, items: list[Item], steps: list[Step]) -> None:
    """Replay 0.5.17's ``materialize_item_features``: every feature must be a tensor; no grid or length check."""
    selected = [
        {
            "local": k,
            "image": g,
            "label": it.label,
            "deferred": it.deferred is not None,
            "backend": it.backend,
            "feature": feature_json(it.feature),
            "is_tensor": is_tensor(it.feature),
        }
        for k, (g, it) in enumerate(zip(state.image_indices, items))
    ]
    tensors = [is_tensor(it.feature) for it in items]
    problem = _use_as_is(ctx, state, items)
    no_split = release_span(releases_where("code_path", lambda path: path == "no-split"))
    step = Step(
        SELECT_ITEMS,
        f"Select this rank's items ({no_split}: no deferred split)",
        "§9",
        ItemSelection(state.image_indices, selected),
        f"SGLang {no_split} has no deferred split: each item's feature must already be a tensor and is used as "
        "is; a deferred config is ignored, and nothing compares rows with grids here.",
        Check("every feature is a torch.Tensor", "all tensors", f"{sum(tensors)} of {len(tensors)}", all(tensors)),
    )
    state.add_step(steps, step, problem)
    concatenate(ctx, state, steps, branch="no-split")


def _as_is(ctx: ReplayContext, item: Item, *, check_type: bool, image: int | None = None) -> Materialized | None:
    """Return ``(rows, trailing shape, tensor)`` of a feature used as is; raise SGLang's TypeError when asked."""
    feature = item.feature
    if not is_tensor(feature):
        if check_type:
            raise raises("TypeError", MSG_FEATURE_TYPE.format(type_text(feature)), CauseKind.FEATURE_TYPE, image)
        return None  # the local branch checks types in materialize_multimodal_features
    shape = tuple(int(s) for s in feature.shape)
    tensor = feature.tensor if ctx.mode == "pixels" else None
    rows = shape[0] if shape else None
    return rows, shape[1:], tensor


# --- §6.4: backend groups -----------------------------------------------------------------------
def _group_backends(
    ctx: ReplayContext, state: RankState, items: list[Item], deferred: list[Any], steps: list[Step]
) -> list[BackendGroup]:
    """Return the rank's backend groups in SGLang's order; eager items keep their feature (appends the step)."""
    positions: dict[str, list[int]] = {}
    eager = []
    problem: SGLangRaise | None = None
    for k, (item, config) in enumerate(zip(items, deferred)):
        g = state.image_indices[k]
        if config is None:
            if not is_tensor(item.feature):
                problem = raises(
                    "TypeError", MSG_FEATURE_TYPE.format(type_text(item.feature)), CauseKind.FEATURE_TYPE, g
                )
                break
            entry = _as_is(ctx, item, check_type=False)
            state.features[k] = entry
            rows = entry[0] if entry is not None else None
            state.rows[k].produced_rows = rows
            eager.append({"local": k, "image": g, "rows": rows, "shape": list(item.feature.shape)})
        else:
            if "backend" not in config:
                problem = raises("KeyError", repr("backend"), CauseKind.MISSING_BACKEND, g)
                break
            positions.setdefault(config["backend"], []).append(k)
    groups = [
        BackendGroup(
            backend,
            indices,
            [state.image_indices[k] for k in indices],
            state.grid_rows_read(indices),
            [items[k] for k in indices],
        )
        for backend, indices in positions.items()
    ]
    if problem is None:
        # The grid rows each group's checks will read are fixed here (the S1 bug is made at this step).
        for group in groups:
            _read_grids(ctx, state, group)
    mapping_name = "global_indices" if ctx.code_path == "post-fix" else "indices (shard-local positions)"
    described = {
        g.backend: {"indices": g.indices, "global_indices": g.global_indices, "grid_rows_read": g.grid_rows_read}
        for g in groups
    }
    note = (
        f"Deferred items are grouped by backend; global_indices = [image_indices[i] for i in indices]. "
        f"This code ({ctx.code_path}) reads grid_thws_host at {mapping_name}."
    )
    step = Step(
        GROUP_BACKENDS,
        "Group deferred items by backend",
        "§6.4",
        BackendGrouping(eager, described, ctx.code_path),
        note,
    )
    state.add_step(steps, step, problem)
    return groups


def _read_grids(ctx: ReplayContext, state: RankState, group: BackendGroup) -> None:
    """Record which grid_thws_host row the group's checks read for each of its images."""
    for k, row_index in zip(group.indices, group.grid_rows_read):
        state.rows[k].grid_index_read = row_index
        state.rows[k].expected_grid = list(ctx.grid_thws_host[row_index])


__all__ = ["replay", "MODES"]
