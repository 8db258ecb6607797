"""§6.6–6.7: the length check that raises "deferred feature length does not match image grids", and the concat.

After a backend group is preprocessed, ``get_image_feature`` builds ``patch_counts`` from
``grid_thws_host`` (read at ``global_indices``; at the shard-local ``indices`` on the pre-fix code),
requires ``sum(patch_counts) == pixel_values.shape[0]`` — raising the message without numbers — and
splits the rows back into place. ``materialize_multimodal_features`` (``mm_utils.py``) then copies
every feature of the rank into one ``[Σ rows, 3, 14, 14]`` buffer, which needs matching trailing shapes.
"""

from __future__ import annotations

from ..message_catalogue.messages import MSG_EXPECTED_TENSOR, MSG_LEADING_DIM, MSG_LENGTH, MSG_TRAILING_SHAPES
from .group import BackendGroup, Produced
from .state import RankState, ReplayContext, SGLangRaise, raises, size_text, type_text
from .step_records import Concatenation, LengthCheck
from .trace import CONCATENATE, CauseKind, Check, Step, length_check_step, prod


def check_length(
    ctx: ReplayContext, state: RankState, group: BackendGroup, produced: Produced, steps: list[Step]
) -> None:
    """Replay the group's length check and split; append its step (raise SGLang's error when the counts differ)."""
    patch_counts = [prod(ctx.grid_thws_host[i]) for i in group.grid_rows_read]
    expected = sum(patch_counts)
    problem = _length_problem(state, group, produced, patch_counts)
    split = None
    if problem is None:
        split = [{"local": k, "image": state.image_indices[k], "rows": n} for k, n in zip(group.indices, patch_counts)]
    step = Step(
        length_check_step(group.backend),
        f"Check the {group.backend} group's rows against the grids",
        "§6.6",
        LengthCheck(group.indices_record(), patch_counts, expected, produced.pixel_rows, produced.output, split),
        "patch_counts = prod(grid_thws_host[...]) per image; their sum must equal "
        "pixel_values.shape[0], then the rows are split back into place.",
        Check(
            "sum(patch_counts) == pixel_values.shape[0]",
            expected,
            produced.pixel_rows,
            produced.output != "list" and produced.pixel_rows == expected,
        ),
    )
    state.add_step(steps, step, problem)
    tail: tuple[int, ...] = (3, ctx.patch_size, ctx.patch_size)
    if produced.output == "stacked":  # the split cuts the batch axis of [B, N, 3, p, p]
        tail = (max(produced.rows), *tail)
    for position, (k, rows) in enumerate(zip(group.indices, patch_counts)):
        tensor = produced.tensors[position] if produced.tensors is not None and produced.output != "stacked" else None
        state.features[k] = (rows, tail, tensor)


def _length_problem(
    state: RankState, group: BackendGroup, produced: Produced, patch_counts: list[int]
) -> SGLangRaise | None:
    """Return what SGLang raises at the group's length check (a list output has no shape), or None."""
    if produced.output == "list":
        return raises(
            "AttributeError",
            "'list' object has no attribute 'shape'",
            CauseKind.PROCESSOR_OUTPUT,
            group.global_indices[0],
            output="list",
        )
    expected = sum(patch_counts)
    if produced.pixel_rows != expected:
        bad = next((k for k, n, e in zip(group.indices, produced.rows, patch_counts) if n != e), group.indices[0])
        return raises(
            "ValueError",
            MSG_LENGTH,
            CauseKind.LENGTH,
            state.image_indices[bad],
            expected_total=expected,
            produced_total=produced.pixel_rows,
            output=produced.output,
        )
    return None


def concatenate(ctx: ReplayContext, state: RankState, steps: list[Step], *, branch: str) -> None:
    """Replay ``materialize_multimodal_features`` on the rank's features; append its step (raise on a bad shape)."""
    items = [ctx.batch.items[g] for g in state.image_indices]
    features = []
    problem: SGLangRaise | None = None
    trailing: tuple[int, ...] | None = None
    total = 0
    for k, (entry, item) in enumerate(zip(state.features, items)):
        g = state.image_indices[k]
        if entry is None:  # the local branch: a feature that is no tensor
            problem = raises(
                "TypeError", MSG_EXPECTED_TENSOR.format(type_text(item.feature)), CauseKind.FEATURE_TYPE, g
            )
            break
        rows, tail, _tensor = entry
        if rows is None:
            problem = raises("ValueError", MSG_LEADING_DIM, CauseKind.FEATURE_SHAPE, g)
            break
        if trailing is None:
            trailing = tail
        elif tuple(tail) != tuple(trailing):
            problem = raises(
                "ValueError",
                MSG_TRAILING_SHAPES.format(size_text(trailing), size_text((rows, *tail))),
                CauseKind.TRAILING_SHAPE,
                g,
                shape=[rows, *tail],
                expected_trailing=list(trailing),
            )
            break
        if state.rows[k].produced_rows is None:
            state.rows[k].produced_rows = rows
        features.append({"local": k, "image": g, "rows": rows, "trailing_shape": list(tail)})
        total += rows
    declared = sum(prod(ctx.grid_thws_host[g]) for g in state.image_indices)
    note = (
        "materialize_multimodal_features copies every feature into one [sum rows, ...] buffer in the "
        "tower dtype; all features must share their trailing shape."
    )
    if problem is None and total != declared:
        note += (
            f" get_image_feature raises nothing here, but the tower receives {total} rows for grids "
            f"that hold {declared}: it fails later."
        )
    step = Step(
        CONCATENATE,
        "Concatenate the rank's features for the tower",
        "§6.7",
        Concatenation(branch, features, total if problem is None else None, declared),
        note,
        Check(
            "matching trailing shapes",
            None if trailing is None else list(trailing),
            [f["trailing_shape"] for f in features],
            problem is None,
        ),
    )
    state.add_step(steps, step, problem)
    if ctx.mode == "pixels":
        tensors = [entry[2] for entry in state.features if entry is not None and entry[2] is not None]
        complete = bool(tensors) and len(tensors) == len(state.features)
        if complete and all(tuple(t.shape[1:]) == tuple(tensors[0].shape[1:]) for t in tensors):
            import torch

            # SGLang packs every feature into one buffer on the tower's device.
            state.pixel_values = torch.cat([t.to(ctx.device, torch.float32) for t in tensors], dim=0)


__all__ = ["check_length", "concatenate"]
