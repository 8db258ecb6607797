"""Running the encoder: :class:`VisionEncoder` (the class to use) and :class:`EncoderOutput`.

:class:`VisionEncoder` is :class:`~kimi_viz.encoder.model.VisionModel` plus what running it takes,
kept out of the model itself:

* building: :meth:`~VisionEncoder.random` (seeded weights, no checkpoint) and
  :meth:`~VisionEncoder.from_checkpoint` (:mod:`.checkpoint` reads only the vision shards);
* :meth:`~VisionEncoder.encode`: the input checks (grids, row counts: :func:`check_grids`,
  :func:`check_rows`), images in chunks of at most ``chunk_patches`` rows, an optional progress
  bar, per-stage timings with ``return_intermediates=True``;
* caches: one :class:`~kimi_viz.encoder.model.AttentionLayout` per grid list, and a CUDA graph
  captured the second time a grid list is seen;
* the attention path (``attn_impl``) and the weight dtype (:func:`resolve_dtype`).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from ..devices import resolve_device
from ..errors import CheckpointError, ConfigError, RowCountError, UnsupportedImageError
from ..preprocess.layout import spans_of
from .checkpoint import LoadReport, load_vision_weights, read_config, read_weight_map
from .config import Grid, VisionConfig, get_vision_config
from .model import (
    AttentionLayout,
    VisionModel,
    init_weights,
    time_table,
    varlen_kernel,
)

ATTENTION_IMPLS = ("auto", "per_image", "packed")


# =============================================================================================
# 1. Outputs and input checks
# =============================================================================================
@dataclass
class EncoderOutput:
    """Features of a batch and where each image's rows went.

    ``features`` is ``[Σ h·w/4, out_dim]``; image ``i`` owns ``features[token_spans[i][0]:token_spans[i][1]]``
    (one row per ``<|media_pad|>`` token) and ``pixel_values[row_spans[i][0]:row_spans[i][1]]``.
    With ``return_intermediates=True`` also: ``patch_embeddings`` ``[N, D]`` (patch embed + positions),
    ``pre_merge`` ``[N, D]`` (after the final norm), ``merged`` ``[Σ h·w/4, 4, D]`` and ``timings`` (ms).
    """

    features: torch.Tensor
    token_spans: list[tuple[int, int]]
    grid_thws: torch.Tensor
    row_spans: list[tuple[int, int]] = field(default_factory=list)
    patch_embeddings: torch.Tensor | None = None
    pre_merge: torch.Tensor | None = None
    merged: torch.Tensor | None = None
    timings: dict[str, float] | None = None

    def __len__(self) -> int:
        return len(self.token_spans)

    def image_features(self, index: int) -> torch.Tensor:
        """Return the feature rows of image ``index``."""
        start, end = self.token_spans[index]
        return self.features[start:end]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready summary (shapes and spans, no tensors)."""
        return {
            "features_shape": list(self.features.shape),
            "dtype": str(self.features.dtype).replace("torch.", ""),
            "grid_thws": self.grid_thws.tolist(),
            "row_spans": [list(s) for s in self.row_spans],
            "token_spans": [list(s) for s in self.token_spans],
            "timings_ms": dict(self.timings) if self.timings else None,
        }


def _grid_text(grid: Grid) -> str:
    return "×".join(str(v) for v in grid)


def normalise_grids(grid_thws: Any) -> list[Grid]:
    """Return ``grid_thws`` (tensor, array or list of ``(t, h, w)``) as a list of int triples."""
    if isinstance(grid_thws, torch.Tensor):
        if grid_thws.ndim != 2 or grid_thws.shape[1] != 3:
            raise RowCountError(
                f"grid_thws has shape {tuple(grid_thws.shape)}; expected [n_images, 3] rows of "
                "(t, h, w) as returned by the processor"
            )
        values = grid_thws.tolist()
    else:
        try:
            values = [list(row) for row in grid_thws]
        except TypeError:
            values = [[]]
        if any(len(row) != 3 for row in values):
            raise RowCountError(
                f"grid_thws is {grid_thws!r}; its rows must be (t, h, w) triples, as returned by the processor"
            )
    if not values:
        raise RowCountError("grid_thws is empty; expected one (t, h, w) row per image")
    try:
        return [(int(t), int(h), int(w)) for t, h, w in values]
    except (TypeError, ValueError) as exc:
        raise RowCountError(
            f"grid_thws is {grid_thws!r}; expected integer (t, h, w) rows, as returned by the processor"
        ) from exc


def check_grids(grids: Sequence[Grid], config: VisionConfig) -> None:
    """Raise RowCountError naming the first grid the tower cannot take (sizes, evenness, limits)."""
    k, limit = config.merge_kernel_size, config.rope_max_size
    for i, (t, h, w) in enumerate(grids):
        grid = _grid_text((t, h, w))
        if min(t, h, w) < 1:
            raise RowCountError(f"image {i} has grid {grid}; t, h and w must all be at least 1")
        if h % k or w % k:
            raise RowCountError(
                f"image {i} has grid {grid}; h and w must be multiples of {k} for the {k}×{k} merge "
                f"(the processor pads each side to a multiple of {k * config.patch_size} px)"
            )
        if h > limit or w > limit:
            raise RowCountError(
                f"image {i} has grid {grid}; h and w must be at most {limit} (the rotary table is "
                f"{limit}×{limit}; the processor's patch_limit_on_one_side keeps grids within it)"
            )
        if t > config.pos_emb_time:
            raise RowCountError(
                f"image {i} has grid {grid}; t must be at most {config.pos_emb_time} "
                f"(the time table has {config.pos_emb_time} frames)"
            )


def check_rows(pixel_values: torch.Tensor, grids: Sequence[Grid], patch_size: int) -> None:
    """Raise if ``pixel_values`` is not ``[Σ t·h·w, 3, p, p]``, naming the first image that does not fit."""
    p = patch_size
    if not isinstance(pixel_values, torch.Tensor):
        raise UnsupportedImageError(
            f"pixel_values is a {type(pixel_values).__name__}; expected a torch.Tensor [N, 3, {p}, {p}] "
            "from the processor"
        )
    shape = tuple(pixel_values.shape)
    if not (shape[1:] == (3, p, p) or (len(shape) == 2 and shape[1] == 3 * p * p)):
        raise UnsupportedImageError(
            f"pixel_values has shape {shape}; expected [N, 3, {p}, {p}] patch rows (or [N, {3 * p * p}]) "
            "from the processor"
        )
    if not pixel_values.is_floating_point():
        raise UnsupportedImageError(
            f"pixel_values has dtype {pixel_values.dtype}; expected normalised float rows from the processor"
        )
    have = shape[0]
    need = sum(t * h * w for t, h, w in grids)
    if have == need:
        return
    head = f"pixel_values has {have} rows but grid_thws needs {need} (Σ t·h·w)"
    start = 0
    for i, grid in enumerate(grids):
        end = start + grid[0] * grid[1] * grid[2]
        if end > have:
            raise RowCountError(
                f"{head}; image {i} (grid {_grid_text(grid)}) needs rows [{start}, {end}) and only {have} exist; "
                "pass the pixel_values and grid_thws of the same processor output"
            )
        start = end
    last = len(grids) - 1
    raise RowCountError(
        f"{head}; the last image (image {last}, grid {_grid_text(grids[last])}) ends at row {need} and "
        f"{have - need} extra rows follow it; pass the pixel_values and grid_thws of the same processor output"
    )


def _chunks(patches: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """Return ``[first, last)`` image ranges whose rows add up to at most ``limit`` (one image at least)."""
    chunks, first, total = [], 0, 0
    for i, count in enumerate(patches):
        if i > first and total + count > limit:
            chunks.append((first, i))
            first, total = i, 0
        total += count
    chunks.append((first, len(patches)))
    return chunks


# =============================================================================================
# 2. Attention path and dtype
# =============================================================================================
_VARLEN_WORKS: dict[tuple[str, torch.dtype, int], bool] = {}
_GraphEntry = tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]  # (graph, static input, static output)


def varlen_available(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Return whether the packed varlen flash-attention kernel runs here (probed once per device/dtype)."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    kernel = varlen_kernel()
    if kernel is None:
        return False
    key = (str(device), dtype, head_dim)
    if key not in _VARLEN_WORKS:
        try:
            q = torch.zeros(8, 1, head_dim, device=device, dtype=dtype)
            cu = torch.tensor([0, 3, 8], dtype=torch.int32, device=device)
            kernel(q, q, q, cu, cu, 5, 5)
            _VARLEN_WORKS[key] = True
        except (RuntimeError, TypeError, NotImplementedError):
            _VARLEN_WORKS[key] = False
    return _VARLEN_WORKS[key]


_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Return the weight dtype: the one asked for, else bf16 on CUDA and fp32 on CPU."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().replace("torch.", "")
    if key not in _DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported; expected bf16, fp16 or fp32")
    return _DTYPES[key]


# =============================================================================================
# 3. The encoder
# =============================================================================================
class VisionEncoder(VisionModel):
    """The vision encoder to use: :class:`~kimi_viz.encoder.model.VisionModel` (tower + projector,
    ``state_dict()`` keys = the checkpoint's names) plus input checks, chunking and caches.

    Build with :meth:`random` (no weights needed) or :meth:`from_checkpoint`; run with :meth:`encode`.
    ``attn_impl`` picks the attention path: ``"per_image"`` (one SDPA call per image per layer, as
    SGLang runs it), ``"packed"`` (one varlen FlashAttention call over all images on CUDA; a
    block-diagonal mask elsewhere) or ``"auto"`` (per image: SDPA then picks its fastest kernel for
    each image). ``cuda_graphs`` (``"auto"``, True, False) replays a CUDA graph captured the second
    time a grid list is seen (up to ``graph_max_patches`` rows), which removes the kernel-launch
    overhead that dominates small images; ``"auto"`` and True only act on CUDA.
    """

    graph_max_patches = 16384  # larger batches are compute-bound: graphs buy nothing there
    graph_device_types = ("cuda",)
    graph_cache_size = 8
    graph_hits_size = 256  # grid lists whose sightings are counted
    chunk_patches = 131072  # images are encoded in groups of at most this many rows

    def __init__(self, config: VisionConfig | str = "kimi-k3"):
        super().__init__(config)
        self.attn_impl = "auto"
        self.cuda_graphs: bool | str = "auto"
        self.load_report: LoadReport | None = None
        self._layouts: OrderedDict[tuple, AttentionLayout] = OrderedDict()
        self._graphs: OrderedDict[tuple, _GraphEntry | Literal[False]] = OrderedDict()  # False: capture failed
        self._graph_hits: dict[tuple, int] = {}
        self._graph_pool: torch.cuda._POOL_HANDLE | None = None

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def _empty(cls, config: VisionConfig, device: torch.device, dtype: torch.dtype) -> VisionEncoder:
        with torch.device("meta"):
            model = cls(config).to(dtype)
        model = model.to_empty(device=device)
        model.vision_tower.patch_embed.pos_emb.time_weight = time_table(config.hidden_size, config.pos_emb_time).to(
            device
        )
        return model.eval().requires_grad_(False)

    @classmethod
    def random(
        cls,
        preset: str | VisionConfig = "kimi-k3",
        seed: int = 0,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
    ) -> VisionEncoder:
        """Return an encoder with random weights (normal(0, 0.02), norms 1), drawn on ``device``
        from ``seed`` (the same seed gives the same weights on the same kind of device)."""
        config = get_vision_config(preset)
        device = resolve_device(device)
        model = cls._empty(config, device, resolve_dtype(dtype, device))
        generator = torch.Generator(device=device).manual_seed(int(seed))
        init_weights(model, generator)
        return model

    @classmethod
    def from_checkpoint(
        cls,
        folder: str | Path,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
        *,
        strict: bool = False,
    ) -> VisionEncoder:
        """Return the encoder of a local checkpoint folder, reading only its vision tensors.

        Reads ``config.json``'s ``vision_config``, then ``model.safetensors.index.json``, and opens
        (with ``safetensors.safe_open``) only the shards that hold ``vision_tower.*`` or
        ``mm_projector.*`` tensors — the language model's shards are never opened. Shapes are checked
        before any data is read. ``.load_report`` lists loaded, missing and unexpected keys and the
        shards opened; with ``strict=True`` a missing or unexpected key raises CheckpointError.
        Parameters the checkpoint lacks keep a seed-0 random initialisation.
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"checkpoint folder {folder} does not exist; pass the folder holding config.json")
        config = read_config(folder)
        weight_map = read_weight_map(folder)
        device = resolve_device(device)
        model = cls._empty(config, device, resolve_dtype(dtype, device))
        model.load_report = load_vision_weights(model, folder, weight_map, strict=strict)
        return model

    def clear_cache(self) -> None:
        """Drop cached layouts and CUDA graphs (call after replacing parameter tensors)."""
        self._layouts.clear()
        self._graphs.clear()
        self._graph_hits.clear()

    # --- layout -------------------------------------------------------------------------------
    def resolve_attn_impl(self, impl: str | None = None) -> str:
        """Return the concrete attention path (``per_image``, ``packed_varlen`` or ``packed_mask``) that
        ``impl`` (default: ``self.attn_impl``) means on this encoder's device and dtype."""
        impl = impl or self.attn_impl
        if impl not in ATTENTION_IMPLS:
            raise ConfigError(f"attn_impl {impl!r} is not known; expected one of {', '.join(ATTENTION_IMPLS)}")
        if impl == "packed":
            varlen_ok = varlen_available(self.device, self.dtype, self.config.head_dim)
            return "packed_varlen" if varlen_ok else "packed_mask"
        # "auto": per-image SDPA lets torch pick its fastest kernel (cuDNN / flash) for each image,
        # whereas the packed varlen call is always FlashAttention-2. Packing saves only launches,
        # and CUDA graphs remove those for the small batches where they matter.
        return "per_image"

    def layout(self, grids: Sequence[Grid], attn_impl: str | None = None) -> AttentionLayout:
        """Return the (cached) row spans, RoPE angles and cu_seqlens of a list of grids."""
        grids = tuple((t, h, w) for t, h, w in grids)
        impl = self.resolve_attn_impl(attn_impl)
        key = (grids, impl, str(self.device))
        hit = self._layouts.get(key)
        if hit is not None:
            self._layouts.move_to_end(key)
            return hit
        layout = AttentionLayout.build(grids, self.config, self.device, impl)
        self._layouts[key] = layout
        while len(self._layouts) > 32:
            self._layouts.popitem(last=False)
        return layout

    # --- forward ---------------------------------------------------------------------------
    def _forward_with_intermediates(
        self, pixel_rows: torch.Tensor, layout: AttentionLayout, timings: dict[str, float]
    ) -> dict[str, torch.Tensor]:
        def tick(stage: str, started: float) -> float:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            now = time.perf_counter()
            timings[stage] = timings.get(stage, 0.0) + (now - started) * 1e3
            return now

        started = time.perf_counter()
        patch = self.vision_tower.patch_embed(pixel_rows, layout.grids)
        started = tick("patch_embed_ms", started)
        pre_merge = self.vision_tower.encoder(patch, layout)
        started = tick("blocks_ms", started)
        merged = self.vision_tower.merge_patches(pre_merge, layout)
        started = tick("merge_ms", started)
        features = self.mm_projector(merged)
        tick("projector_ms", started)
        return {"features": features, "patch_embeddings": patch, "pre_merge": pre_merge, "merged": merged}

    def _use_graph(self, layout: AttentionLayout, rows: int) -> bool:
        if (
            self.device.type not in self.graph_device_types
            or self.cuda_graphs is False
            or rows > self.graph_max_patches
        ):
            return False
        if self.cuda_graphs is True:
            return True
        key = (layout.grids, layout.attn_impl)
        self._graph_hits[key] = self._graph_hits.pop(key, 0) + 1  # most recent last
        while len(self._graph_hits) > self.graph_hits_size:  # forget grid lists not seen lately
            del self._graph_hits[next(iter(self._graph_hits))]
        return self._graph_hits[key] >= 2 or key in self._graphs  # capture on the second sighting

    def _forward_graphed(self, pixel_rows: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
        key = (layout.grids, layout.attn_impl)
        entry = self._graphs.get(key)
        if entry is None:
            try:
                entry = self._capture(pixel_rows, layout)
            except RuntimeError as exc:  # capture unsupported here: remember, and run eagerly
                warnings.warn(f"CUDA graph capture failed ({exc}); running this grid list eagerly", stacklevel=3)
                entry = False
            self._graphs[key] = entry
            while len(self._graphs) > self.graph_cache_size:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        if entry is False:
            return self.forward(pixel_rows, layout)
        graph, static_in, static_out = entry
        static_in.copy_(pixel_rows)
        graph.replay()
        return static_out.clone()

    def _capture(self, pixel_rows: torch.Tensor, layout: AttentionLayout) -> _GraphEntry:
        """Return ``(graph, static input, static output)`` of one forward pass captured on CUDA."""
        static_in = pixel_rows.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward(static_in, layout)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._graph_pool is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._graph_pool):
            static_out = self.forward(static_in, layout)
        return graph, static_in, static_out

    def encode(
        self,
        pixel_values: torch.Tensor,
        grid_thws: Any,
        *,
        return_intermediates: bool = False,
        progress: bool | None = None,
    ) -> EncoderOutput:
        """Return the features of packed ``pixel_values`` ``[Σ t·h·w, 3, 14, 14]`` for ``grid_thws``.

        Checks first that every grid is valid and that the rows match ``Σ t·h·w`` (RowCountError
        names the first image that does not fit, with both counts). Images are independent: each
        attends only to its own rows. ``progress=None`` shows a bar for more than 8 images when
        stderr is a terminal.
        """
        grids = normalise_grids(grid_thws)
        check_grids(grids, self.config)
        check_rows(pixel_values, grids, self.config.patch_size)
        rows = pixel_values.reshape(pixel_values.shape[0], -1)
        patches = [t * h * w for t, h, w in grids]
        tokens = [h * w // self.config.merge_kernel_size**2 for _, h, w in grids]
        row_spans = spans_of(patches)
        token_spans = spans_of(tokens)

        show = progress if progress is not None else (len(grids) > 8 and sys.stderr.isatty())
        bar = None
        if show:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(grids), unit="image", desc="encode", file=sys.stderr)
        timings: dict[str, float] | None = {} if return_intermediates else None
        parts: dict[str, list[torch.Tensor]] = {}
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                limit = self.chunk_patches if bar is None else min(self.chunk_patches, max(1, sum(patches) // 20))
                for first, last in _chunks(patches, limit):  # with a bar: about 20 steps
                    chunk_grids = grids[first:last]
                    r0, r1 = row_spans[first][0], row_spans[last - 1][1]
                    chunk = rows[r0:r1].to(device=self.device, dtype=self.dtype, non_blocking=True)
                    layout = self.layout(chunk_grids)
                    if timings is not None:  # return_intermediates
                        out = self._forward_with_intermediates(chunk, layout, timings)
                    elif self._use_graph(layout, r1 - r0):
                        out = {"features": self._forward_graphed(chunk, layout)}
                    else:
                        out = {"features": self.forward(chunk, layout)}
                    for name, value in out.items():
                        parts.setdefault(name, []).append(value)
                    if bar is not None:
                        bar.update(last - first)
        finally:
            if bar is not None:
                bar.close()
        joined = {name: (values[0] if len(values) == 1 else torch.cat(values)) for name, values in parts.items()}
        if timings is not None:
            timings["total_ms"] = (time.perf_counter() - started) * 1e3
        return EncoderOutput(
            features=joined["features"],
            token_spans=token_spans,
            grid_thws=torch.tensor(grids, dtype=torch.int64),
            row_spans=row_spans,
            patch_embeddings=joined.get("patch_embeddings"),
            pre_merge=joined.get("pre_merge"),
            merged=joined.get("merged"),
            timings=timings,
        )


def encode(
    encoder: VisionEncoder,
    pixel_values: torch.Tensor,
    grid_thws: Any,
    *,
    return_intermediates: bool = False,
    progress: bool | None = None,
) -> EncoderOutput:
    """Return ``encoder.encode(pixel_values, grid_thws, ...)``."""
    return encoder.encode(pixel_values, grid_thws, return_intermediates=return_intermediates, progress=progress)
