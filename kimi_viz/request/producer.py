"""What SGLang's request side puts in a ``MultimodalDataItem`` for one image: the one home of that model.

A Kimi-K3 item carries one grid row (under ``image_grid_thw`` from the normal request side, under
``grid_thws`` from the EPD encoder) and either

* a **deferred** feature: the raw image (a CHW uint8 tensor, RGBA when it has alpha, for the ``gpu``
  backend; the PIL image for ``cpu``) plus the ``kimi_k3_deferred_preprocessing`` config
  (:func:`deferred_config`: backend, mean, std, background and the five ``resize_config`` ints), or
* an **eager** feature: the ``[h*w, 3, 14, 14]`` float32 rows, made by SGLang's torch path on a CUDA
  server or by the checkpoint processor.

The request sides of every release (:mod:`.sides`), the scenario catalogue and the forward-pass
replay all build their items here. ``mode="shapes"`` builds shape-only features from the image's
header alone and imports neither torch nor the pixel paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ..preprocess.config import ProcessorConfig, get_config
from ..preprocess.resize import ResizeConfig, resize_config
from ..split.batch import Feature, Item
from .images import RequestImage, as_request_image
from .settings import Mode

if TYPE_CHECKING:  # pragma: no cover
    import torch

CONSUMER = "kimi-k3"  # the model's own checkpoint processor (the cpu backend's consumer)
GridKey = Literal["image_grid_thw", "grid_thws"]


def deferred_config(backend: str, resize: ResizeConfig, preset: Any = CONSUMER) -> dict[str, Any]:
    """Return the ``kimi_k3_deferred_preprocessing`` dict SGLang's request side writes for one image.

    ``resize`` is the image's :func:`~kimi_viz.preprocess.resize.resize_config` and ``preset`` the
    producer's processor config (mean, std and background come from it).
    """
    cfg = get_config(preset).to_media_proc_cfg()
    return {
        "backend": backend,
        "image_mean": list(cfg["image_mean"]),
        "image_std": list(cfg["image_std"]),
        "transparent_bg_config": cfg.get("transparent_bg_config"),
        "resize_config": resize.to_sglang(),
    }


def grid_row(resize: ResizeConfig) -> list[int]:
    """Return the ``[t, h, w]`` grid row an item carries for ``resize``."""
    return list(resize.grid)


def raw_feature(image: RequestImage, backend: str, *, mode: Mode = "pixels", discard_alpha: bool = False) -> Feature:
    """Return a deferred item's raw feature: CHW uint8 (``gpu``) or the PIL image (``cpu``), or their shape."""
    channels = image.channels(discard_alpha=discard_alpha)
    if mode == "shapes":
        if backend == "gpu":
            return Feature.shape_only("chw", (channels, image.height, image.width), "uint8")
        return Feature.shape_only("image", (image.height, image.width, channels), "uint8")
    pil = image.pixels(discard_alpha=discard_alpha)
    if backend == "gpu":
        from ..preprocess.pixels_torch import to_chw_uint8

        return Feature.from_tensor(to_chw_uint8(pil).contiguous(), "chw")
    return Feature.from_image(pil)


def eager_rows(
    image: RequestImage,
    resize: ResizeConfig,
    config: ProcessorConfig,
    *,
    gpu: bool = False,
    discard_alpha: bool = False,
) -> torch.Tensor:
    """Return the eager ``[h*w, 3, 14, 14]`` rows: SGLang's torch path (``gpu``, run on the CPU) or the checkpoint's."""
    pil = image.pixels(discard_alpha=discard_alpha)
    if gpu:  # SGLang's torch path (a CUDA server); the kit runs it on the CPU, the rows agree to one level
        from ..preprocess.pixels_torch import to_chw_uint8, torch_pixels

        return torch_pixels(to_chw_uint8(pil), resize, config, "cpu")
    from ..preprocess.pixels_checkpoint import checkpoint_pixels

    return checkpoint_pixels(pil, resize, config)[1].clone()


def eager_feature(
    image: RequestImage,
    resize: ResizeConfig,
    config: ProcessorConfig,
    *,
    mode: Mode = "pixels",
    gpu: bool = False,
    discard_alpha: bool = False,
) -> Feature:
    """Return an eager feature: the rows :func:`eager_rows` makes, or their shape in shapes mode."""
    rows = resize.patches
    if mode == "shapes":
        return Feature.shape_only("patches", (rows, 3, config.patch_size, config.patch_size), "float32")
    return Feature.from_tensor(eager_rows(image, resize, config, gpu=gpu, discard_alpha=discard_alpha), "patches")


def deferred_item(
    source: Any,
    backend: str,
    *,
    preset: Any = CONSUMER,
    grid_key: GridKey = "grid_thws",
    mode: Mode = "pixels",
    discard_alpha: bool = False,
    label: str | None = None,
) -> Item:
    """Return a deferred item for an image (a sample name, path, PIL image or :class:`RequestImage`).

    ``backend="gpu"`` stores the CHW uint8 tensor, ``"cpu"`` the PIL image; ``preset`` is the
    producer's processor config (its ``resize_config`` and grid); ``grid_key`` is where the grid goes
    (``grid_thws`` as the EPD encoder writes it, ``image_grid_thw`` as the normal request side does).
    """
    image = as_request_image(source, label=label)
    resize = resize_config(image.width, image.height, preset)
    return Item(
        grids={grid_key: [grid_row(resize)]},
        feature=raw_feature(image, backend, mode=mode, discard_alpha=discard_alpha),
        deferred=deferred_config(backend, resize, preset),
        original_size=image.size,
        label=image.label,
    )


def eager_item(
    source: Any,
    *,
    preset: Any = CONSUMER,
    grid_key: GridKey = "grid_thws",
    mode: Mode = "pixels",
    gpu: bool = False,
    local_preprocessed: bool = False,
    rows: torch.Tensor | None = None,
    grid: list[int] | None = None,
    label: str | None = None,
) -> Item:
    """Return an eager item (feature already ``[h*w, 3, 14, 14]``) for an image.

    ``rows`` and ``grid`` replace the rows or the grid the producer would compute (a stale cache entry,
    a wrong grid); ``local_preprocessed`` marks rows the EPD encoder made on the owner rank.
    """
    image = as_request_image(source, label=label)
    config = get_config(preset)
    resize = resize_config(image.width, image.height, config)
    feature = (
        Feature.from_tensor(rows, "patches")
        if rows is not None
        else eager_feature(image, resize, config, mode=mode, gpu=gpu)
    )
    return Item(
        grids={grid_key: [grid or grid_row(resize)]},
        feature=feature,
        local_preprocessed=local_preprocessed,
        original_size=image.size,
        label=image.label,
    )


__all__ = [
    "CONSUMER",
    "GridKey",
    "deferred_config",
    "grid_row",
    "raw_feature",
    "eager_rows",
    "eager_feature",
    "deferred_item",
    "eager_item",
]
