"""§6.5, gpu backend: SGLang's torch path on a rank's gpu-group items, and its grid check.

``_gpu_preprocess_images`` (``sglang/srt/multimodal/processors/kimi_k25.py``) stages each raw image as
CHW uint8, resizes it to its *own* ``resize_config``, fills the transparent background and normalises
with the mean, std and background of the group's *first* config. The produced grids must equal
``grid_thws_host`` read at ``global_indices`` (at the shard-local ``indices`` on the pre-fix code),
else SGLang raises "Kimi-K3 deferred GPU preprocessing produced wrong grids". Shape problems are
replayed by running the same tiny torch operation SGLang would, so the message is torch's own.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from ..message_catalogue.messages import MSG_BG_PATTERN, MSG_GPU_WRONG_GRIDS, MSG_RAW_UINT8
from ..preprocess.config import PROCESSOR_PRESETS
from ..preprocess.resize import ResizeConfig
from .batch import Feature, Item
from .group import BackendGroup, Produced
from .state import (
    RankState,
    ReplayContext,
    SGLangRaise,
    feature_json,
    image_size,
    is_tensor,
    keeps_alpha,
    probe_torch,
    raises,
    torch_dtype_text,
)
from .step_records import GpuGrids, GpuPreprocess
from .trace import PREPROCESS_GPU, CauseKind, Check, Step, prod

if TYPE_CHECKING:  # pragma: no cover - torch loads for a probe or for pixels, not for a replay of shapes
    import torch

RESIZE_KEYS = ("new_width", "new_height", "pad_width", "pad_height")


GPU_TITLE = "Preprocess the gpu group (SGLang's torch path)"
GPU_NOTE = (
    "Each image is resized with its own resize_config, so the produced grid follows the "
    "resize config; mean, std and background come from the group's first config."
)


def preprocess_gpu(ctx: ReplayContext, state: RankState, group: BackendGroup, steps: list[Step]) -> Produced:
    """Replay the gpu group on this rank; append its step and return what it produced (raise SGLang's errors)."""
    first = group.items[0].deferred or {}
    inputs: list[dict[str, Any]] = []
    try:
        mean, std = _deferred_value(first, "image_mean"), _deferred_value(first, "image_std")
        background = first.get("transparent_bg_config")
        resizes = [
            _resize_keys((item.deferred or {}).get("resize_config"), g, ctx.patch_size)
            for item, g in zip(group.items, group.global_indices)
        ]
        _stage_and_probe(group, resizes, background, inputs)
        grids = [r.grid for r in resizes]
        rows = [prod(gr) for gr in grids]
        tensors = None
        if ctx.mode == "pixels":
            tensors = _pixels(ctx, group.items, resizes, mean, std, background)
            rows = [int(t.shape[0]) for t in tensors]
    except SGLangRaise as raised:
        note = "SGLang fails while staging or resizing these images."
        variables = GpuPreprocess(group.indices_record(), inputs)
        steps.append(
            Step(PREPROCESS_GPU, GPU_TITLE, "§6.5", variables, note, None, raised.info, raised.cause, state.tracks())
        )
        raise
    for k, grid, n in zip(group.indices, grids, rows):
        state.rows[k].produced_grid = list(grid)
        state.rows[k].produced_rows = n
    expected = [ctx.grid_thws_host[i] for i in group.grid_rows_read]
    produced = [list(g) for g in grids]
    passed = produced == expected
    variables = GpuPreprocess(
        group.indices_record(), inputs, GpuGrids(produced, rows, expected, f"grid_thws_host[{ctx.index_mapping}]")
    )
    check = Check("produced grids == grid_thws_host[...]", expected, produced, passed)
    problem = None
    if not passed:
        bad = next(k for k, (g, e) in enumerate(zip(produced, expected)) if g != e)
        problem = raises(
            "ValueError",
            MSG_GPU_WRONG_GRIDS,
            CauseKind.GPU_GRIDS,
            group.global_indices[bad],
            expected=expected[bad],
            produced=produced[bad],
        )
    state.add_step(steps, Step(PREPROCESS_GPU, GPU_TITLE, "§6.5", variables, GPU_NOTE, check), problem)
    return Produced(grids, rows, tensors, sum(rows))


def _stage_and_probe(
    group: BackendGroup, resizes: list[ResizeConfig], background: Any, inputs: list[dict[str, Any]]
) -> None:
    """Stage, resize and fill the group's images as SGLang does, filling ``inputs``; raise SGLang's errors.

    ``inputs`` gets each image's feature and resize config first, then its channel count once staged,
    so a step made after a raise shows how far staging got.
    """
    channels_in: list[int] = [0] * len(group.items)
    for item, g, resize in zip(group.items, group.global_indices, resizes):
        inputs.append({"image": g, "feature": feature_json(item.feature), "resize_config": _sizes(resize)})
    # _gpu_preprocess_images groups images by target size; a group of one is staged, resized and
    # filled on its own, a larger group is staged as a whole before it is resized and filled.
    targets: dict[tuple[int, ...], list[int]] = {}
    for position, r in enumerate(resizes):
        key = (r.new_height, r.new_width, r.padded_size[1], r.padded_size[0])
        targets.setdefault(key, []).append(position)
    for members in targets.values():
        for position in members:
            channels_in[position] = _stage(group.items[position].feature, group.global_indices[position])
            inputs[position]["channels"] = channels_in[position]
        for position in members:
            _resize_probe(
                group.items[position].feature,
                channels_in[position],
                resizes[position],
                group.global_indices[position],
            )
        for position in members:
            _fill_probe(channels_in[position], background, group.global_indices[position])


def _deferred_value(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise raises("KeyError", repr(key), CauseKind.DEFERRED_CONFIG, key=key)
    return config[key]


def _sizes(resize: ResizeConfig) -> dict[str, int]:
    return {k: getattr(resize, k) for k in RESIZE_KEYS}


def _resize_keys(resize: dict[str, Any] | None, image: int, patch_size: int) -> ResizeConfig:
    if resize is None:
        raise raises("KeyError", repr("resize_config"), CauseKind.DEFERRED_CONFIG, image, key="resize_config")
    for key in ("new_height", "pad_height", "new_width", "pad_width"):
        if key not in resize:
            raise raises("KeyError", repr(key), CauseKind.DEFERRED_CONFIG, image, key=key)
    return ResizeConfig.from_sglang(resize, patch_size)


def _stage(feature: Feature, image: int) -> int:
    """Return the channel count ``to_chw_uint8`` leaves (SGLang's gpu staging); raise its errors."""
    if not is_tensor(feature):
        return 4 if keeps_alpha(feature) else 3
    if feature.dtype != "uint8":
        raise raises(
            "ValueError",
            MSG_RAW_UINT8.format(torch_dtype_text(feature.dtype)),
            CauseKind.DTYPE,
            image,
            dtype=feature.dtype,
        )
    shape = list(feature.shape)
    if len(shape) == 2:
        shape = [1] + shape
    if len(shape) != 3:
        import torch

        probe = probe_torch(
            lambda: torch.nn.functional.interpolate(
                torch.zeros([1] + [0] * len(shape)), size=(1, 1), mode="bicubic", align_corners=False, antialias=True
            ),
            CauseKind.SHAPE,
            image,
        )
        raise (
            probe if probe is not None else raises("RuntimeError", f"unexpected shape {shape}", CauseKind.SHAPE, image)
        )
    return 3 if shape[0] == 1 else shape[0]


def _chw_size(feature: Feature) -> tuple[int, int]:
    """Return ``(height, width)`` of the CHW image SGLang's gpu path sees."""
    if not is_tensor(feature):
        width, height, _ = image_size(feature)
        return height, width
    shape = list(feature.shape)
    return int(shape[-2]), int(shape[-1])


def _resize_probe(feature: Feature, channels: int, resize: ResizeConfig, image: int) -> None:
    """Raise what ``F.interpolate`` raises for an empty image or an empty target size."""
    height, width = _chw_size(feature)
    target = (resize.new_height, resize.new_width)
    if (height, width) == target or min(height, width, *target) > 0:
        return
    import torch

    probe = probe_torch(
        lambda: torch.nn.functional.interpolate(
            torch.zeros(1, max(channels, 1), height, width),
            size=target,
            mode="bicubic",
            align_corners=False,
            antialias=True,
        ),
        CauseKind.EMPTY_IMAGE,
        image,
        size=[width, height],
    )
    if probe is not None:
        raise probe


def _fill_probe(channels: int, background: dict[str, Any] | None, image: int) -> None:
    """Raise what ``fill_transparent_bg`` and the normalisation raise for an odd channel count.

    The shapes SGLang's torch operations see are broadcast here by torch's own rule (:func:`_broadcast`),
    so the type and text are torch's without importing it.
    """
    if channels == 3:
        return
    rgb = min(channels, 3)
    if background is not None:
        pattern = background.get("pattern", "black")
        if pattern not in ("chessboard", "white", "black", "gray"):
            raise raises("ValueError", MSG_BG_PATTERN.format(pattern), CauseKind.BACKGROUND, image)
    try:
        if background is not None:
            # alpha_composite: alpha * rgb + (1 - alpha) * background, evaluated left to right
            alpha, x_rgb, bg = (1, max(0, min(channels, 4) - 3), 1, 1), (1, rgb, 1, 1), (3, 1, 1)
            out = _broadcast(_broadcast(alpha, x_rgb), _broadcast(alpha, bg))[1]
        else:
            out = rgb
        # the normalisation: torch.addcmul(1x3 mean, image, 1x3 scale)
        _broadcast(_broadcast((1, 3, 1, 1), (1, out, 1, 1)), (1, 3, 1, 1))
    except _BroadcastError as exc:
        raise raises("RuntimeError", str(exc), CauseKind.CHANNELS, image, channels=channels) from None


class _BroadcastError(Exception):
    """Torch's broadcasting failure, with its message."""


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Return the shape torch broadcasts ``a`` (the left operand) and ``b`` to; raise torch's text when they clash."""
    ndim = max(len(a), len(b))
    a, b = (1,) * (ndim - len(a)) + a, (1,) * (ndim - len(b)) + b
    for i in reversed(range(ndim)):  # torch checks the trailing dimension first
        size_a, size_b = a[i], b[i]
        if size_a != size_b and 1 not in (size_a, size_b):
            raise _BroadcastError(
                f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b})"
                f" at non-singleton dimension {i}"
            )
    return tuple(size_b if size_a == 1 else size_a for size_a, size_b in zip(a, b))


def alpha_composite(alpha: torch.Tensor, rgb: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Return SGLang's ``alpha * rgb + (1 - alpha) * background`` (used to probe broadcasting)."""
    return alpha * rgb + (1.0 - alpha) * background


_PerChannel = tuple[float, float, float]  # one value per RGB channel


def _pixels(
    ctx: ReplayContext, items: list[Item], resizes: list[ResizeConfig], mean: Any, std: Any, background: Any
) -> list[torch.Tensor]:
    """Return each image's rows through the kit's torch path, with the group's first config."""
    from ..preprocess.pixels_torch import to_chw_uint8, torch_pixels

    base = ctx.consumer if ctx.consumer is not None else PROCESSOR_PRESETS["kimi-k3"]
    # The deferred config's per-channel values (three in what SGLang writes), taken as given: unchecked here.
    config = dataclasses.replace(
        base,
        image_mean=cast(_PerChannel, tuple(float(v) for v in mean)),
        image_std=cast(_PerChannel, tuple(float(v) for v in std)),
        transparent_bg_config=background,
    )
    out = []
    for item, resize in zip(items, resizes):
        feature = item.feature
        if feature.image is not None:
            chw = to_chw_uint8(feature.image)
        else:
            assert feature.tensor is not None
            chw = feature.tensor
            if chw.dim() == 2:
                chw = chw.unsqueeze(0)
            if chw.shape[0] == 1:
                chw = chw.repeat(3, 1, 1)
            if chw.shape[0] > 4:
                # SGLang resizes every channel and then keeps RGB (+ channel 3 as alpha when a background
                # is set); resizing is per channel, so keeping those channels first gives the same rows.
                chw = chw[: 4 if background is not None else 3]
        out.append(torch_pixels(chw, resize, config, ctx.device))
    return out


__all__ = ["preprocess_gpu", "alpha_composite"]
