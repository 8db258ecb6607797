"""§6.5, cpu backend: the consumer's checkpoint processor on a rank's cpu-group items, and its grid check.

``materialize_kimi_k3_cpu_features`` (``sglang/srt/multimodal/kimi_k3_image_processing.py``, the same in
0.5.18 to 0.5.23) hands the raw images to the model's checkpoint processor, which computes its *own*
resize from each image's size and the consumer's ``media_proc_cfg`` — not the item's
``resize_config`` — and compares the grids it gets with each item's ``grid_thws``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..message_catalogue.messages import MSG_CHANNEL_COUNT, MSG_CPU_INPUT_TYPE, MSG_CPU_WRONG_GRIDS
from ..preprocess.config import ProcessorConfig
from ..preprocess.resize import ResizeConfig, resize_config
from .batch import Feature, Item
from .group import BackendGroup, Produced
from .state import RankState, ReplayContext, SGLangRaise, feature_json, image_size, is_tensor, raises
from .step_records import CpuGrids, CpuPreprocess
from .trace import PREPROCESS_CPU, CauseKind, Check, Step, prod

if TYPE_CHECKING:  # pragma: no cover - Pillow, torch and the checkpoint processor load only for pixels
    import torch
    from PIL import Image


CPU_TITLE = "Preprocess the cpu group (the checkpoint processor)"
CPU_NOTE = (
    "The checkpoint processor computes its own resize from each image's size and the consumer's "
    "media_proc_cfg (not the item's resize_config), then compares its grids with each item's grid_thws."
)


def preprocess_cpu(ctx: ReplayContext, state: RankState, group: BackendGroup, steps: list[Step]) -> Produced:
    """Replay the cpu group on this rank; append its step and return what it produced (raise SGLang's errors)."""
    consumer = ctx.consumer
    if consumer is None:
        raise ConfigError(
            "batch.processor is None but the batch has cpu-backend items: the cpu backend runs the "
            "consumer's checkpoint processor, so its media_proc_cfg is needed (set Batch.processor, or "
            "'processor' in the manifest)"
        )
    processor = consumer.to_media_proc_cfg()
    try:
        staged, resizes = _resize_all(group, consumer)
    except SGLangRaise as raised:
        note = "The checkpoint processor cannot take this image."
        variables = CpuPreprocess(group.indices_record(), [], processor)
        steps.append(
            Step(PREPROCESS_CPU, CPU_TITLE, "§6.5", variables, note, None, raised.info, raised.cause, state.tracks())
        )
        raise
    grids = [r.grid for r in resizes]
    rows = [prod(gr) for gr in grids]
    for k, grid, n in zip(group.indices, grids, rows):
        state.rows[k].produced_grid = list(grid)
        state.rows[k].produced_rows = n
    missing = next((g for item, g in zip(group.items, group.global_indices) if "grid_thws" not in item.grids), None)
    expected = (
        None
        if missing is not None
        else [[int(v) for v in row] for item in group.items for row in item.grids["grid_thws"]]
    )
    produced = [list(g) for g in grids]
    passed = missing is None and produced == expected
    tensors, note = None, CPU_NOTE
    if ctx.mode == "pixels" and passed:
        tensors = _pixels(group, resizes, consumer)
        rows = [int(t.shape[0]) for t in tensors]
    elif ctx.mode == "pixels":
        note += " Pixels not materialized: the grid check fails on sizes alone."
    output = ctx.processor_output
    pixel_rows = None if output == "list" else (len(group.items) if output == "stacked" else sum(rows))
    variables = CpuPreprocess(
        group.indices_record(),
        _inputs(group, staged, resizes),
        processor,
        CpuGrids(produced, rows, expected, "each item's grid_thws", output, pixel_rows),
    )
    check = Check("checkpoint grids == cat(item grid_thws)", expected, produced, passed)
    problem = _grid_problem(group, grids, missing, passed)
    state.add_step(steps, Step(PREPROCESS_CPU, CPU_TITLE, "§6.5", variables, note, check), problem)
    return Produced(grids, rows, tensors, pixel_rows, output)


def _grid_problem(
    group: BackendGroup, grids: list[tuple[int, int, int]], missing: int | None, passed: bool
) -> SGLangRaise | None:
    """Return what SGLang raises at the cpu grid check (an item without ``grid_thws``, or other grids), or None."""
    if missing is not None:
        return raises("KeyError", repr("grid_thws"), CauseKind.MISSING_GRID_THWS, missing)
    if passed:
        return None
    bad = _first_grid_mismatch(group.items, grids)
    return raises(
        "ValueError",
        MSG_CPU_WRONG_GRIDS,
        CauseKind.CPU_GRIDS,
        group.global_indices[bad],
        expected=group.items[bad].grids["grid_thws"],
        produced=list(grids[bad]),
    )


_Staged = tuple[int, int, str]  # (width, height, PIL mode) of what the checkpoint processor receives


def _resize_all(group: BackendGroup, consumer: ProcessorConfig) -> tuple[list[_Staged], list[ResizeConfig]]:
    """Return what the checkpoint processor receives of each image and its own resize; raise SGLang's errors."""
    staged = [_stage(item.feature, g) for item, g in zip(group.items, group.global_indices)]
    resizes = []
    for (width, height, _mode), g in zip(staged, group.global_indices):
        if width == 0 or height == 0:
            # The checkpoint's navit_resize_image divides by the width, then by the height.
            raise raises("ZeroDivisionError", "division by zero", CauseKind.EMPTY_IMAGE, g, size=[width, height])
        resizes.append(resize_config(width, height, consumer))
    return staged, resizes


def _inputs(group: BackendGroup, staged: list[_Staged], resizes: list[ResizeConfig]) -> list[dict[str, Any]]:
    """Return the step's ``inputs``: each image's feature, size, mode, own resize and the item's resize_config."""
    return [
        {
            "image": g,
            "feature": feature_json(item.feature),
            "size": [width, height],
            "mode": mode_name,
            "own_resize": {k: v for k, v in resize.to_sglang().items() if k != "num_tokens"},
            "item_resize_config": (item.deferred or {}).get("resize_config"),
        }
        for (width, height, mode_name), item, g, resize in zip(staged, group.items, group.global_indices, resizes)
    ]


def _pixels(group: BackendGroup, resizes: list[ResizeConfig], consumer: ProcessorConfig) -> list[torch.Tensor]:
    """Return each image's rows through the kit's checkpoint-processor path."""
    from ..preprocess.pixels_checkpoint import checkpoint_pixels

    return [
        checkpoint_pixels(_image_of(item.feature), resize, consumer)[1] for item, resize in zip(group.items, resizes)
    ]


def _first_grid_mismatch(items: list[Item], grids: list[tuple[int, int, int]]) -> int:
    for k, (item, grid) in enumerate(zip(items, grids)):
        if [[int(v) for v in row] for row in item.grids["grid_thws"]] != [list(grid)]:
            return k
    return 0


def _stage(feature: Feature, image: int) -> tuple[int, int, str]:
    """Return ``(width, height, PIL mode)`` of what the checkpoint processor receives; raise SGLang's errors."""
    if not is_tensor(feature):
        width, height, _ = image_size(feature)
        mode_name = feature.image.mode if feature.image is not None else "?"
        return width, height, mode_name
    if feature.dtype != "uint8":
        raise raises("TypeError", MSG_CPU_INPUT_TYPE, CauseKind.DTYPE, image, dtype=feature.dtype)
    shape = [int(s) for s in feature.shape]
    # to_hwc_uint8: 2-D gains a channel axis; a 3-D tensor whose first axis is 1, 3 or 4 is read as CHW.
    if len(shape) == 2:
        shape = shape + [1]
    elif len(shape) == 3 and shape[0] in (1, 3, 4):
        shape = [shape[1], shape[2], shape[0]]
    if shape[-1] == 1:
        shape[-1] = 3
    channels = shape[-1]
    if channels not in (1, 3, 4) or len(shape) != 3:
        raise raises("ValueError", MSG_CHANNEL_COUNT.format(channels), CauseKind.CHANNELS, image, channels=channels)
    return shape[1], shape[0], {3: "RGB", 4: "RGBA"}[channels]


def _image_of(feature: Feature) -> Image.Image:
    """Return the PIL image SGLang hands the checkpoint processor for this feature."""
    if feature.image is not None:
        return feature.image
    from PIL import Image

    tensor = feature.tensor
    assert tensor is not None
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(-1)
    elif tensor.dim() == 3 and tensor.shape[0] in (1, 3, 4):
        tensor = tensor.permute(1, 2, 0)
    if tensor.shape[-1] == 1:
        tensor = tensor.repeat(1, 1, 3)
    array = tensor.cpu().contiguous().numpy()
    return Image.fromarray(array, mode="RGBA" if array.shape[-1] == 4 else "RGB")


__all__ = ["preprocess_cpu"]
