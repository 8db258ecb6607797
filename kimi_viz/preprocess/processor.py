"""The Kimi-K3 image processor: images in, packed ``pixel_values`` plus per-image records out.

Two pixel backends give the two references SGLang runs:

* ``"checkpoint"`` — the checkpoint's own CPU processor, bit for bit (:mod:`kimi_viz.preprocess.pixels_checkpoint`);
* ``"torch"`` — SGLang's torch ("gpu") path, on CPU or CUDA (:mod:`kimi_viz.preprocess.pixels_torch`).

Both use the same NaViT resize (:func:`resize_config`), so grids, row spans and token spans agree;
only the float values differ (by at most one 8-bit level after a resize).

:func:`load_hf_processor` loads a checkpoint folder's own processor through transformers, and
:func:`compare` reports grid equality and the largest pixel difference between any two processors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..devices import resolve_device
from ..errors import CheckpointError, KimiVizError
from .config import BACKENDS, ProcessorConfig, get_config
from .images import ALPHA_POLICIES, LoadedImage, load_image
from .pixels_checkpoint import (
    checkpoint_pixels,
    normalization_lut,
    padded_uint8,
    patchify_normalize,
)
from .pixels_torch import normalization_tensors, resized_rgb, to_chw_uint8, torch_pixels, write_rows
from .records import (
    PATCH_CONTENT,
    PATCH_FULLY_PADDING,
    PATCH_PARTLY_PADDING,
    ImageRecord,
    ProcessorOutput,
    image_span,
)
from .resize import ResizeConfig, resize_config

__all__ = [
    "BACKENDS",
    "Processor",
    "checkpoint_pixels",
    "compare",
    "load_hf_processor",
    "normalization_lut",
    "pad_mask",
    "padded_uint8",
    "patchify_normalize",
    "resize_config",
    "to_chw_uint8",
    "torch_pixels",
]


def pad_mask(resize: ResizeConfig, patch_size: int | None = None) -> np.ndarray:
    """Return int8 ``[h, w]``: 0 content, 1 patch partly in the padding, 2 patch fully in the padding (the patch
    size defaults to the Kimi-K3 processor config's)."""
    patch_size = get_config().patch_size if patch_size is None else patch_size
    _, gh, gw = resize.grid

    def states(count: int, content: int) -> np.ndarray:
        start = np.arange(count) * patch_size
        state = np.full(count, PATCH_PARTLY_PADDING, dtype=np.int8)
        state[start + patch_size <= content] = PATCH_CONTENT
        state[start >= content] = PATCH_FULLY_PADDING
        return state

    return np.maximum(states(gh, resize.new_height)[:, None], states(gw, resize.new_width)[None, :])


def _as_list(images: Any) -> list[Any]:
    if isinstance(images, (list, tuple)):
        return list(images)
    return [images]


class Processor:
    """Preprocess images exactly as the Kimi-K3 checkpoint (``backend="checkpoint"``) or SGLang's
    torch path (``backend="torch"``) does, and record where every image's rows and tokens land.

    ``device`` ("auto" by default: CUDA when PyTorch sees a GPU, else the CPU; or "cpu", "cuda")
    applies to the torch backend; the checkpoint backend always runs on the CPU. ``exif_transpose`` and
    ``alpha`` are the loader policy (see :func:`kimi_viz.preprocess.images.load_image`); ``keep_images``
    keeps each padded uint8 input in its record.
    """

    def __init__(
        self,
        preset_or_config: Any = "kimi-k3",
        backend: str = "checkpoint",
        device: str | torch.device = "auto",
        *,
        exif_transpose: bool = False,
        alpha: str = "keep",
        keep_images: bool = True,
    ):
        if backend not in BACKENDS:
            raise KimiVizError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if alpha not in ALPHA_POLICIES:
            raise KimiVizError(f"unknown alpha policy {alpha!r}; expected 'keep' or 'discard'")
        self.config: ProcessorConfig = get_config(preset_or_config)
        self.backend = backend
        self.device = resolve_device(device) if backend == "torch" else torch.device("cpu")
        self.exif_transpose = exif_transpose
        self.alpha = alpha
        self.keep_images = keep_images

    def __repr__(self) -> str:
        return f"Processor({self.config.name!r}, backend={self.backend!r}, device={str(self.device)!r})"

    def load(self, image: Any) -> LoadedImage:
        """Return the image loaded under this processor's policy (a LoadedImage is kept as it is)."""
        if isinstance(image, LoadedImage):
            return image
        return load_image(image, exif_transpose=self.exif_transpose, alpha=self.alpha)

    def preprocess(self, images: Any) -> ProcessorOutput:
        """Return a :class:`ProcessorOutput` for one image or a list of images (anything ``load_image`` takes)."""
        loaded = [self.load(image) for image in _as_list(images)]
        cfg = self.config
        p = cfg.patch_size
        resizes = [resize_config(*item.size, cfg) for item in loaded]
        counts = [r.patches for r in resizes]
        total = sum(counts)
        if self.backend == "checkpoint":
            buffer = np.empty((total, 3, p, p), dtype=np.float32)
            pixel_values = torch.from_numpy(buffer)
        else:
            pixel_values = torch.empty((total, 3, p, p), dtype=torch.float32, device=self.device)
            scale_bias = normalization_tensors(cfg, self.device)

        records: list[ImageRecord] = []
        row = token = 0
        for index, (item, resize, count) in enumerate(zip(loaded, resizes, counts)):
            if self.backend == "checkpoint":
                padded, _ = checkpoint_pixels(item.image, resize, cfg, out=buffer[row : row + count])
                resized = padded if self.keep_images else None
            else:
                image = resized_rgb(to_chw_uint8(item.image), resize, cfg, self.device)
                padded_w, padded_h = resize.padded_size
                write_rows(pixel_values[row : row + count], image, *scale_bias, p, padded_h, padded_w)
                resized = _padded_from_tensor(image, resize) if self.keep_images else None
            tokens = int(resize.tokens)
            mask = pad_mask(resize, p)
            records.append(
                ImageRecord(
                    index=index,
                    source=item.source,
                    source_size=(int(item.size[0]), int(item.size[1])),
                    source_mode=item.mode,
                    loader=dict(item.loader),
                    resize=resize,
                    span=image_span(index, item.source, resize.grid, (row, row + count), (token, token + tokens), mask),
                    resized=resized,
                )
            )
            row += count
            token += tokens
        grid_thws = torch.tensor([list(r.grid) for r in resizes], dtype=torch.int64).reshape(-1, 3)
        return ProcessorOutput(
            pixel_values=pixel_values, grid_thws=grid_thws, records=records, backend=self.backend, config=cfg
        )

    __call__ = preprocess


def _padded_from_tensor(image: torch.Tensor, resize: ResizeConfig) -> np.ndarray:
    """Return the uint8 HWC image, zero-padded, from a resized ``[1, 3, h, w]`` float tensor of levels."""
    new_h, new_w = resize.new_height, resize.new_width
    padded = np.zeros((new_h + resize.pad_height, new_w + resize.pad_width, 3), dtype=np.uint8)
    padded[:new_h, :new_w] = image[0].permute(1, 2, 0).to(torch.uint8).cpu().numpy()
    return padded


# --- the checkpoint's own processor, and comparisons ----------------------------------------------
def load_hf_processor(folder: str | Path) -> Any:
    """Return the checkpoint's own image processor (``AutoImageProcessor`` with ``trust_remote_code``).

    The folder must hold a ``preprocessor_config.json`` whose ``auto_map`` names an
    ``AutoImageProcessor`` class in a Python file of the folder (as Kimi checkpoints do).
    """
    folder = Path(folder)
    file = folder / "preprocessor_config.json"
    if not file.is_file():
        raise CheckpointError(f"{file} does not exist; expected a checkpoint folder with preprocessor_config.json")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{file}: not valid JSON ({exc.msg}); fix the file") from exc
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{file}: not UTF-8 text ({exc.reason}); expected a JSON file") from exc
    auto_map = data.get("auto_map") if isinstance(data, dict) else None
    if not isinstance(auto_map, dict) or "AutoImageProcessor" not in auto_map:
        raise KimiVizError(
            f"{file} has no auto_map.AutoImageProcessor, so the folder carries no processor code of its own; "
            "use kimi_viz.Processor(<folder>) to run the kit's exact copy of the Kimi processor instead"
        )
    try:
        from transformers import AutoImageProcessor
    except ImportError as exc:  # pragma: no cover - transformers is a dev dependency
        raise KimiVizError("loading a checkpoint's own processor needs transformers: pip install transformers") from exc
    try:
        return AutoImageProcessor.from_pretrained(str(folder), trust_remote_code=True)
    except Exception as exc:
        raise CheckpointError(
            f"{folder}: transformers could not load the processor named in auto_map ({type(exc).__name__}: {exc})"
        ) from exc


def _grids_list(grids: Any) -> list[tuple[int, ...]]:
    if grids is None:
        return []
    array = torch.as_tensor(grids).reshape(-1, 3)
    return [tuple(int(v) for v in row) for row in array.tolist()]


def _unpack(result: Any) -> tuple[torch.Tensor, list[tuple[int, ...]]]:
    """Return ``(pixel_values, grids)`` from a ProcessorOutput, a BatchFeature/dict or a 2-tuple."""
    if isinstance(result, ProcessorOutput):
        return result.pixel_values, _grids_list(result.grid_thws)
    if isinstance(result, tuple) and len(result) == 2:
        pixels, grids = result
    elif hasattr(result, "keys") and "pixel_values" in result:
        pixels = result["pixel_values"]
        grids = next((result[k] for k in ("grid_thws", "image_grid_thw") if k in result), None)
    else:
        raise KimiVizError(
            f"cannot read pixel values from a {type(result).__name__}; expected (pixel_values, grid_thws), "
            "a dict with pixel_values and grid_thws/image_grid_thw, or a ProcessorOutput"
        )
    if isinstance(pixels, (list, tuple)):
        pixels = torch.cat([torch.as_tensor(p).reshape(-1, *torch.as_tensor(p).shape[-3:]) for p in pixels])
    return torch.as_tensor(pixels), _grids_list(grids)


def _run(processor: Any, images: list[Any], pils: list[Image.Image]) -> tuple[torch.Tensor, list[tuple[int, ...]]]:
    if isinstance(processor, Processor):
        return _unpack(processor.preprocess(images))
    if hasattr(processor, "preprocess"):
        medias = [{"type": "image", "image": pil} for pil in pils]
        return _unpack(processor.preprocess(medias, return_tensors="pt"))
    if callable(processor):
        return _unpack(processor(pils))
    raise KimiVizError(
        f"cannot run a {type(processor).__name__}; expected a kimi_viz Processor, a transformers image "
        "processor or a callable returning (pixel_values, grid_thws)"
    )


def _split(pixels: torch.Tensor, grids: list[tuple[int, ...]], count: int) -> list[torch.Tensor | None]:
    """Return one block of rows per image (None past the grids, or when rows and grids disagree)."""
    sizes = [int(np.prod(g)) for g in grids]
    if sum(sizes) != pixels.shape[0]:
        return [None] * count
    blocks = list(pixels.split(sizes)) if sizes else []
    return (blocks + [None] * count)[:count]


def compare(a: Any, b: Any, images: Any) -> list[dict[str, Any]]:
    """Return one dict per image comparing processors ``a`` and ``b``.

    Keys: ``grid_a``, ``grid_b``, ``grids_equal``, ``rows_a``, ``rows_b`` and ``max_abs_diff``
    (None when the two blocks of rows differ in shape). ``a``/``b`` may be a :class:`Processor`,
    a transformers image processor (called as ``preprocess([{"type": "image", "image": pil}],
    return_tensors="pt")``) or a callable taking a list of PIL images and returning
    ``(pixel_values, grid_thws)``.
    """
    items = _as_list(images)
    # Our Processor loads the images itself (under its own policy); others get them decoded once here.
    foreign = not all(isinstance(proc, Processor) for proc in (a, b))
    pils = [load_image(item).image for item in items] if foreign else []
    outputs = [_run(proc, items, pils) for proc in (a, b)]
    blocks = [_split(pixels, grids, len(items)) for pixels, grids in outputs]
    report = []
    for i in range(len(items)):
        grid_a = list(outputs[0][1][i]) if i < len(outputs[0][1]) else None
        grid_b = list(outputs[1][1][i]) if i < len(outputs[1][1]) else None
        rows_a, rows_b = blocks[0][i], blocks[1][i]
        diff = None
        if rows_a is not None and rows_b is not None and rows_a.shape == rows_b.shape:
            delta = (rows_a.detach().float().cpu() - rows_b.detach().float().cpu()).abs()
            diff = float(delta.max()) if delta.numel() else 0.0
        report.append(
            {
                "grid_a": grid_a,
                "grid_b": grid_b,
                "grids_equal": grid_a is not None and grid_a == grid_b,
                "rows_a": None if rows_a is None else int(rows_a.shape[0]),
                "rows_b": None if rows_b is None else int(rows_b.shape[0]),
                "max_abs_diff": diff,
            }
        )
    return report
