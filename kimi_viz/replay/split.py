"""A step-by-step replay of SGLang's deferred split in ``KimiK3ForConditionalGeneration.get_image_feature``.

SGLang 0.5.23 collects one grid per item, lets the vision data-parallel runner hand each
attention-TP rank a share of the images, and on every rank materializes only its own images:
deferred items are grouped by backend, the ``gpu`` group goes through SGLang's torch path with
each item's ``resize_config``, the ``cpu`` group through the checkpoint processor (which computes
its *own* resize from the image size), and the rows produced are checked against the grids. When
they disagree SGLang raises "Kimi-K3 deferred feature length does not match image grids" with no
numbers. :func:`replay` walks the same code path on a :class:`~kimi_viz.batch.Batch`, records every
variable at every step for every rank, and ends with the exact exception SGLang would raise (type
and message) or ``ok``; :mod:`kimi_viz.divergence` then names the image, both counts and the cause.

``mode="pixels"`` materializes the pixels with the kit's processor backends; ``mode="shapes"``
derives every row count from sizes and resize configs alone (for redacted captures). Both modes
reach the same outcome: SGLang's row counts depend only on shapes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from PIL import Image

from .batch import GRID_KEYS, Batch, Feature, Item
from .config import PRESETS, get_config
from .devices import resolve_device
from .divergence import Divergence, analyse
from .errors import ConfigError
from .images import has_alpha
from .pixels_checkpoint import checkpoint_pixels
from .pixels_torch import to_chw_uint8, torch_pixels
from .releases import ReleaseChoice, choose_release, later_paths
from .resize import grid_of, resize_config
from .verdict import build_verdict

# ------------------------------------------------------------------------------------------------
# The exceptions SGLang 0.5.23 raises on this path, copied literally. ``{}`` marks a formatted part.
# ------------------------------------------------------------------------------------------------
# sglang/srt/models/kimi_k3.py, get_image_feature: the grid loop (ValueError).
MSG_ONE_GRID = (
    "Kimi-K3 expects one vision grid per MultimodalDataItem; "
    "split aggregated encoder inputs before get_image_feature()"
)
# kimi_k3.py, materialize_item_features: some but not all selected items are encoder-local (ValueError).
MSG_MIX_LOCAL = "Kimi-K3 cannot mix local preprocessed and deferred images"
# kimi_k3.py, materialize_item_features: a non-deferred item whose feature is no tensor (TypeError).
MSG_FEATURE_TYPE = "Kimi-K3 image feature must be a torch.Tensor, got {}"
# kimi_k3.py, materialize_item_features: gpu group grids != grid_thws_host[global_indices] (ValueError).
MSG_GPU_WRONG_GRIDS = "Kimi-K3 deferred GPU preprocessing produced wrong grids"
# kimi_k3.py, materialize_item_features: a backend other than "gpu" / "cpu" (ValueError).
MSG_UNSUPPORTED_BACKEND = "Unsupported Kimi-K3 deferred preprocessing backend: {}"
# kimi_k3.py, materialize_item_features: sum(patch_counts) != pixel_values.shape[0] (ValueError).
MSG_LENGTH = "Kimi-K3 deferred feature length does not match image grids"
# sglang/srt/multimodal/kimi_k3_image_processing.py, materialize_kimi_k3_cpu_features (ValueError):
# the checkpoint processor's grids != cat(item.model_specific_data["grid_thws"]).
MSG_CPU_WRONG_GRIDS = "Kimi-K3 deferred CPU preprocessing produced wrong grids"
# kimi_k3_image_processing.py, materialize_kimi_k3_cpu_features: neither PIL nor uint8 tensor (TypeError).
MSG_CPU_INPUT_TYPE = "Kimi-K3 deferred CPU preprocessing expects PIL or uint8 tensors"
# kimi_k3_image_processing.py, materialize_kimi_k3_cpu_features: HWC channels not 1/3/4 (ValueError).
MSG_CHANNEL_COUNT = "Unsupported Kimi-K3 image channel count: {}"
# kimi_k3_image_processing.py, to_chw_uint8 (the gpu group's staging): a non-uint8 tensor (ValueError).
MSG_RAW_UINT8 = "Kimi-K3 preprocessing expects raw uint8 pixels, got {}"
# kimi_k3_image_processing.py, fill_transparent_bg: an unknown background pattern (ValueError).
MSG_BG_PATTERN = "Invalid background pattern: {}"
# sglang/srt/multimodal/mm_utils.py, materialize_multimodal_features (ValueError / TypeError).
MSG_TRAILING_SHAPES = "multimodal feature tensors must have matching trailing shapes: expected {}, got {}"
MSG_LEADING_DIM = "multimodal feature tensors must have a leading dimension"
MSG_EXPECTED_TENSOR = "expected torch.Tensor, got {}"

# Strings worth recognising in logs of other versions (not raised by the 0.5.23 code path replayed here).
MSG_PROCESSOR_LENGTH = "Kimi-K3 processor feature length does not match image grids: {} != {}"
MSG_MIX_DEFERRED_OLD = "Kimi-K3 cannot mix deferred and preprocessed image features"

PROCESSOR_OUTPUTS = ("concatenated", "stacked", "list")
VARIANTS = ("post-fix", "pre-fix", "no-split")
MODES = ("pixels", "shapes", "auto")
PIL_CLASS = "<class 'PIL.Image.Image'>"

Outcome = Literal["ok", "error"]


# ------------------------------------------------------------------------------------------------
# Trace data
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ErrorInfo:
    """An exception SGLang raises: its type name and ``str(exception)``."""

    type: str
    message: str

    def to_json(self) -> dict[str, str]:
        """Return ``{"type", "message"}``."""
        return {"type": self.type, "message": self.message}

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


@dataclass
class Step:
    """One step of ``get_image_feature`` on one rank, with a JSON-ready snapshot of its variables."""

    name: str
    title: str
    spec_ref: str
    variables: dict[str, Any]
    note: str = ""
    check: dict[str, Any] | None = None        # {"name", "expected", "actual", "passed"} when the step checks
    error: ErrorInfo | None = None             # set on the step where SGLang raises

    def to_json(self) -> dict[str, Any]:
        """Return the step as plain JSON data."""
        return {
            "name": self.name,
            "title": self.title,
            "spec_ref": self.spec_ref,
            "variables": self.variables,
            "check": self.check,
            "note": self.note,
            "error": None if self.error is None else self.error.to_json(),
        }


@dataclass
class RankTrace:
    """What one attention-TP rank did: its images, its steps, and how it ended."""

    rank: int
    image_indices: list[int] | None
    steps: list[Step]
    outcome: Outcome
    error: ErrorInfo | None = None
    images: list[dict[str, Any]] = field(default_factory=list)   # final per-image row table (rank order)
    cause: dict[str, Any] | None = None                          # why the failing step raised
    pixel_values: torch.Tensor | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        """Return the rank's full trace as plain JSON data (no pixels)."""
        return {
            "rank": self.rank,
            "image_indices": self.image_indices,
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "images": self.images,
            "cause": self.cause,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass
class Trace:
    """The replay of one ``get_image_feature`` call: every replayed rank, the outcome and the divergence."""

    batch: Batch = field(repr=False)
    tp_size: int
    variant: str
    mode: str
    ranks: list[RankTrace]
    grid_thws_host: list[list[int]] | None
    assignment: list[list[int]] | None
    divergence: dict[str, Any] | None = None
    release: ReleaseChoice | None = None
    _fixed_in: Any = field(default=None, repr=False)

    def fixed_in(self) -> dict[str, Any] | None:
        """Return ``{"release", "change", "code_path"}`` of the first later release whose code replays clean, or None.

        Only a failure (an exception on some rank) can be fixed; each later code path is replayed in
        shapes mode on the same ranks, and the first whose replay raises nothing and diverges
        nowhere silently names the release that fixes it.
        """
        if self._fixed_in is None:
            self._fixed_in = _find_fix(self) or {}
        return self._fixed_in or None

    @property
    def outcome(self) -> Outcome:
        """Return ``"error"`` when any replayed rank raises, else ``"ok"``."""
        return "error" if any(r.outcome == "error" for r in self.ranks) else "ok"

    @property
    def failing_rank(self) -> RankTrace | None:
        """Return the lowest-numbered rank that raises, or None."""
        return next((r for r in self.ranks if r.outcome == "error"), None)

    @property
    def error(self) -> ErrorInfo | None:
        """Return the first failing rank's error, or None."""
        failing = self.failing_rank
        return None if failing is None else failing.error

    def rank_trace(self, rank: int) -> RankTrace:
        """Return the trace of ``rank`` (raises ConfigError naming the replayed ranks when absent)."""
        for trace in self.ranks:
            if trace.rank == rank:
                return trace
        raise ConfigError(f"rank {rank} was not replayed; replayed ranks: {[r.rank for r in self.ranks]}")

    def verdict(self) -> dict[str, Any]:
        """Return the verdict shared with ``kimi-viz triage``: outcome, error, ranks, divergence."""
        return build_verdict(self)

    def to_json(self) -> dict[str, Any]:
        """Return the verdict plus the full step-by-step trace under ``"trace"`` (plain JSON data)."""
        data = self.verdict()
        data["trace"] = {
            "tp_size": self.tp_size,
            "variant": self.variant,
            "mode": self.mode,
            "grid_thws_host": self.grid_thws_host,
            "assignment": self.assignment,
            "ranks": [r.to_json() for r in self.ranks],
        }
        return data


class _SGLangRaise(Exception):
    """Internal: SGLang raises here. Carries the error, the image at fault and a cause hint."""

    def __init__(self, type_name: str, message: str, *, image: int | None = None, **cause: Any):
        super().__init__(message)
        self.info = ErrorInfo(type_name, message)
        self.cause = {"image": image, **cause}


# ------------------------------------------------------------------------------------------------
# Load balancing (§6 step 2)
# ------------------------------------------------------------------------------------------------
def assign_ranks(patch_counts: list[int], tp_size: int) -> list[list[int]]:
    """Return each rank's image indices as SGLang 0.5.23's ``get_dp_encoder_lb_assignment`` assigns them.

    Images are taken largest patch count first (a stable sort: ties keep their order) and each
    goes to the rank with the smallest load so far (ties to the lowest rank). Each rank's list
    keeps that assignment order, so it is *not* sorted by index. (With attention-TP size 1 SGLang
    does not call the balancer; :func:`replay` then uses ``[0 .. n-1]``.)
    """
    _check_tp_size(tp_size)
    counts = [int(c) for c in patch_counts]
    loads = [0] * tp_size
    ranks: list[list[int]] = [[] for _ in range(tp_size)]
    for index in sorted(range(len(counts)), key=counts.__getitem__, reverse=True):
        target = loads.index(min(loads))
        ranks[target].append(index)
        loads[target] += counts[index]
    return ranks


# ------------------------------------------------------------------------------------------------
# Small helpers
# ------------------------------------------------------------------------------------------------
def _check_tp_size(tp_size: Any) -> None:
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise ConfigError(f"tp_size: expected a positive int, got {tp_size!r}")


def _prod(values: list[int]) -> int:
    return math.prod(int(v) for v in values)


def _torch_dtype_text(dtype: str) -> str:
    return f"torch.{dtype}"


def _size_text(shape: tuple[int, ...] | list[int]) -> str:
    return repr(torch.Size([int(s) for s in shape]))


def _is_tensor(feature: Feature) -> bool:
    """Return True when SGLang sees a ``torch.Tensor`` (a tensor, or a redacted one)."""
    return feature.kind == "tensor" or (feature.kind == "shape_only" and feature.layout != "image")


def _type_text(feature: Feature) -> str:
    if _is_tensor(feature):
        return "<class 'torch.Tensor'>"
    if feature.image is not None:
        return str(type(feature.image))
    return PIL_CLASS


def _feature_json(feature: Feature) -> dict[str, Any]:
    return {"kind": feature.kind, "layout": feature.layout, "shape": [int(s) for s in feature.shape],
            "dtype": feature.dtype}


def _probe_torch(fn) -> _SGLangRaise | None:
    """Run a tiny torch operation; return the exception it raises (type and text) as an _SGLangRaise."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - we report whatever torch raises, verbatim
        return _SGLangRaise(type(exc).__name__, str(exc))
    return None


def _image_size(feature: Feature) -> tuple[int, int, int]:
    """Return ``(width, height, bands)`` of an image feature (loaded or shape-only)."""
    if feature.image is not None:
        return feature.image.width, feature.image.height, len(feature.image.getbands())
    height, width = int(feature.shape[0]), int(feature.shape[1])
    bands = int(feature.shape[2]) if len(feature.shape) > 2 else 3
    return width, height, bands


def _has_alpha(feature: Feature) -> bool:
    """Return True when SGLang's ``to_chw_uint8`` keeps an alpha channel for this image (RGBA)."""
    image = feature.image
    if image is not None:
        return image.mode != "RGB" and has_alpha(image)
    bands = int(feature.shape[2]) if len(feature.shape) > 2 else 3
    return bands in (2, 4)


# ------------------------------------------------------------------------------------------------
# The replay
# ------------------------------------------------------------------------------------------------
@dataclass
class _Context:
    batch: Batch
    variant: str
    mode: str
    device: Any
    tp_size: int
    consumer: Any                   # ProcessorConfig of the cpu backend's checkpoint processor, or None
    patch_size: int
    processor_output: str
    grid_thws_host: list[list[int]]


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
    variant: str | None = None,
    mode: str = "pixels",
    device: Any = "cpu",
    sglang_version: str | None = None,
) -> Trace:
    """Return the :class:`Trace` of SGLang 0.5.23's ``get_image_feature`` on ``batch``.

    ``tp_size`` is the attention-TP size (default ``batch.attn_tp_size``); ``rank`` replays one
    rank only (default: every rank). ``variant`` (default ``batch.code_variant``) is ``"post-fix"``
    (SGLang 0.5.23) or ``"pre-fix"``, the code before SGLang PRs #35305 / #36265, which read
    ``grid_thws_host`` with shard-local positions. ``mode`` is
    ``"pixels"`` (materialize with the kit's processors), ``"shapes"`` (row counts from sizes and
    resize configs only) or ``"auto"`` (pixels unless a feature is shape-only). Exceptions SGLang
    would raise are recorded in the trace, never raised; bad arguments raise the kit's errors.

    ``sglang_version`` replays that release's code path (:mod:`kimi_viz.releases`: 0.5.17 has no
    deferred split, 0.5.18 is pre-fix, 0.5.19 and later post-fix); with neither it nor ``variant``
    the batch's recorded version, then its recorded code variant, then the newest release decide.
    ``Trace.release`` says which release and path were replayed and how they were chosen.
    """
    if not isinstance(batch, Batch):
        raise ConfigError(f"replay: expected a kimi_viz.batch.Batch, got {type(batch).__name__}")
    if variant is not None and variant not in VARIANTS:
        raise ConfigError(f"variant: expected one of {list(VARIANTS)}, got {variant!r}")
    choice = choose_release(sglang_version=sglang_version, variant=variant, recorded_version=batch.sglang_version,
                            recorded_variant=batch.code_variant, recorded_variant_source=batch.code_variant_source)
    variant = choice.code_path
    tp = batch.attn_tp_size if tp_size is None else tp_size
    _check_tp_size(tp)
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp):
        raise ConfigError(f"rank: expected an int in 0..{tp - 1} for tp_size {tp}, got {rank!r}")
    mode = _pick_mode(batch, mode)
    processor_output = batch.extra.get("processor_output", "concatenated")
    if processor_output not in PROCESSOR_OUTPUTS:
        raise ConfigError(
            f"batch.extra['processor_output']: expected one of {list(PROCESSOR_OUTPUTS)}, got {processor_output!r}"
        )
    if mode == "pixels":
        device = resolve_device(device)
    consumer = None if batch.processor is None else get_config(batch.processor)
    ranks_wanted = list(range(tp)) if rank is None else [rank]

    grid_step, grids, grid_error = _collect_grids(batch)
    if grid_error is not None:
        traces = [RankTrace(r, None, [grid_step], "error", grid_error.info, cause=grid_error.cause)
                  for r in ranks_wanted]
        trace = Trace(batch, tp, variant, mode, traces, None, None, release=choice)
        return _finish(trace)

    ctx = _Context(batch, variant, mode, device, tp, consumer,
                   consumer.patch_size if consumer is not None else 14, processor_output, grids)
    patches = [_prod(g) for g in grids]
    assignment = [list(range(len(grids)))] if tp == 1 else assign_ranks(patches, tp)
    traces = [_replay_rank(ctx, r, assignment, patches, grid_step) for r in ranks_wanted]
    return _finish(Trace(batch, tp, variant, mode, traces, grids, assignment, release=choice))


def _finish(trace: Trace) -> Trace:
    trace.divergence = analyse(trace)
    return trace


def _find_fix(trace: Trace) -> dict[str, Any] | None:
    """Return the first later release whose code path replays ``trace``'s batch clean on the same ranks."""
    from .releases import PATH_INTRODUCED, RELEASES

    if trace.outcome != "error" or trace.release is None:
        return None
    ranks = [r.rank for r in trace.ranks]
    for path in later_paths(trace.variant):  # type: ignore[arg-type]
        rank = ranks[0] if len(ranks) == 1 and trace.tp_size > 1 else None
        later = replay(trace.batch, tp_size=trace.tp_size, rank=rank, variant=path, mode="shapes")
        if later.outcome == "ok" and not (later.divergence or {}).get("silent"):
            version, change = PATH_INTRODUCED[path]
            return {"release": version, "change": change, "code_path": path,
                    "summary": RELEASES[version].summary}
    return None


# --- §6.1: one grid per item --------------------------------------------------------------------
def _collect_grids(batch: Batch) -> tuple[Step, list[list[int]], _SGLangRaise | None]:
    items_json = []
    grids: list[list[int]] = []
    error: _SGLangRaise | None = None
    rows_per_item = []
    for i, item in enumerate(batch.items):
        source = item.grid_source()
        rows = [[int(v) for v in row] for row in item.grids.get(source, [])] if source else []
        rows_per_item.append(len(rows))
        items_json.append({
            "image": i,
            "label": item.label,
            "grid_source": source,
            "grids": {k: [[int(v) for v in r] for r in item.grids[k]] for k in GRID_KEYS if k in item.grids},
            "backend": item.backend,
            "local_preprocessed": bool(item.local_preprocessed),
            "feature": _feature_json(item.feature),
        })
        if error is not None:
            continue
        if source is None:
            # model_specific_data["grid_thws"] on an item that carries neither key.
            error = _SGLangRaise("KeyError", repr("grid_thws"), image=i, kind="missing_grid")
        elif len(rows) != 1:
            error = _SGLangRaise("ValueError", MSG_ONE_GRID, image=i, kind="grid_rows", rows=len(rows))
        else:
            grids.append(rows[0])
    if error is None:
        widths = {len(g) for g in grids}
        if not grids or widths != {3}:
            probe = _probe_torch(lambda: torch.concat([torch.tensor([g]) for g in grids], dim=0))
            if probe is not None:
                error = probe
                error.cause = {"image": None, "kind": "grid_concat"}
    check = {"name": "one grid row per item", "expected": 1, "actual": rows_per_item,
             "passed": error is None}
    note = ("Each item's grid: image_grid_thw when present, else grid_thws; grid_thws_host is their "
            "concatenation.")
    step = Step("collect_grids", "Collect one grid per item", "§6.1",
                {"items": items_json, "grid_thws_host": grids if error is None else None,
                 "patch_counts": [_prod(g) for g in grids] if error is None else None},
                note, check)
    if error is not None:
        step.error = error.info
        step.variables["raised_at"] = error.cause
        step.note += f" SGLang raises {error.info.type} here."
    return step, grids, error


# --- one rank -----------------------------------------------------------------------------------
def _replay_rank(ctx: _Context, rank: int, assignment: list[list[int]], patches: list[int],
                 grid_step: Step) -> RankTrace:
    image_indices = assignment[rank]
    steps = [grid_step, _assign_step(ctx, rank, assignment, patches)]
    trace = RankTrace(rank, list(image_indices), steps, "ok")
    state = _RankState(ctx, rank, image_indices)
    if not image_indices:
        steps[-1].note += " This rank has no images: the DP runner does not call the loader here."
        return trace
    try:
        _materialize(ctx, state, steps)
    except _SGLangRaise as raised:
        trace.outcome = "error"
        trace.error = raised.info
        trace.cause = raised.cause
        steps[-1].error = raised.info
        steps[-1].variables["raised_at"] = raised.cause
    trace.images = state.table()
    trace.pixel_values = state.pixel_values
    return trace


def _assign_step(ctx: _Context, rank: int, assignment: list[list[int]], patches: list[int]) -> Step:
    loads = [sum(patches[i] for i in ranks) for ranks in assignment]
    order = sorted(range(len(patches)), key=patches.__getitem__, reverse=True)
    batch = ctx.batch
    applies = batch.attn_tp_rank == rank or (batch.attn_tp_rank is None and ctx.tp_size == 1)
    recorded = list(batch.image_indices) if batch.image_indices is not None and applies else None
    variables = {
        "tp_size": ctx.tp_size,
        "rank": rank,
        "patch_counts": patches,
        "order_largest_first": order if ctx.tp_size > 1 else None,
        "assignment": assignment,
        "loads": loads,
        "image_indices": assignment[rank],
        "recorded_image_indices": recorded,
    }
    if ctx.tp_size == 1:
        note = "Attention-TP size 1: the loader is called once with every image, image_indices = [0 .. n-1]."
    else:
        note = (f"get_dp_encoder_lb_assignment: largest patch count first, each image to the least-loaded "
                f"rank; rank {rank} materializes images {assignment[rank]} (in assignment order).")
    if recorded is not None and list(recorded) != list(assignment[rank]):
        note += f" The capture recorded image_indices {list(recorded)} for this rank, which differ."
    return Step("assign_ranks", "Assign images to ranks", "§6.2", variables, note)


class _RankState:
    """Per-rank bookkeeping: which image sits where, what the checks expect and what was produced."""

    def __init__(self, ctx: _Context, rank: int, image_indices: list[int]):
        self.ctx = ctx
        self.rank = rank
        self.image_indices = list(image_indices)
        self.rows: list[dict[str, Any]] = [
            {"local": k, "image": g, "label": ctx.batch.items[g].label,
             "declared_grid": ctx.grid_thws_host[g], "expected_grid": ctx.grid_thws_host[g],
             "grid_index": g, "produced_grid": None, "produced_rows": None}
            for k, g in enumerate(image_indices)
        ]
        self.features: list[tuple[int, tuple[int, ...], torch.Tensor | None] | None] = [None] * len(image_indices)
        self.pixel_values: torch.Tensor | None = None

    def tracks(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows]

    def table(self) -> list[dict[str, Any]]:
        table = []
        for r in self.rows:
            expected = _prod(r["expected_grid"])
            produced = r["produced_rows"]
            table.append({**r, "expected_rows": expected,
                          "match": None if produced is None else (produced == expected
                                                                  and r["produced_grid"] in (None, r["expected_grid"]))})
        return table


def _materialize(ctx: _Context, state: _RankState, steps: list[Step]) -> None:
    """Replay ``materialize_item_features(image_indices)`` on one rank, appending steps; raise on error."""
    items = [ctx.batch.items[g] for g in state.image_indices]
    if ctx.variant == "no-split":
        _materialize_no_split(ctx, state, items, steps)
        return
    local = [bool(it.local_preprocessed) for it in items]
    selected = [{"local": k, "image": g, "label": it.label, "local_preprocessed": local[k],
                 "deferred": it.deferred is not None, "backend": it.backend,
                 "feature": _feature_json(it.feature)}
                for k, (g, it) in enumerate(zip(state.image_indices, items))]
    mixed = any(local) and not all(local)
    steps.append(Step(
        "select_items", "Select this rank's items", "§6.3",
        {"image_indices": state.image_indices, "selected": selected, "locally_preprocessed": local,
         "row_tracks": state.tracks()},
        "materialize_item_features(image_indices): locally preprocessed items must be all or none.",
        {"name": "local preprocessed: all or none", "expected": "all or none",
         "actual": f"{sum(local)} of {len(local)}", "passed": not mixed},
    ))
    if mixed:
        first_deferred = next(k for k, flag in enumerate(local) if not flag)
        raise _SGLangRaise("ValueError", MSG_MIX_LOCAL, image=state.image_indices[first_deferred],
                           kind="mixed_local", local=[g for g, f in zip(state.image_indices, local) if f],
                           deferred=[g for g, f in zip(state.image_indices, local) if not f])
    if any(local):
        for k, it in enumerate(items):
            state.features[k] = _eager_feature(ctx, it, check_message=None)
        _concatenate(ctx, state, steps, branch="local preprocessed")
        return

    deferred = [it.deferred for it in items]
    if any(d is not None for d in deferred):
        groups = _group_backends(ctx, state, items, deferred, steps)
        for backend, indices in groups.items():
            _run_group(ctx, state, items, backend, indices, steps)
        _concatenate(ctx, state, steps, branch="deferred")
        return

    for k, it in enumerate(items):
        state.features[k] = _eager_feature(ctx, it, check_message=MSG_FEATURE_TYPE, image=state.image_indices[k])
    _concatenate(ctx, state, steps, branch="eager")


def _materialize_no_split(ctx: _Context, state: _RankState, items: list[Item], steps: list[Step]) -> None:
    """Replay 0.5.17's ``materialize_item_features``: every feature must be a tensor; no grid or length check."""
    selected = [{"local": k, "image": g, "label": it.label, "deferred": it.deferred is not None,
                 "backend": it.backend, "feature": _feature_json(it.feature),
                 "is_tensor": _is_tensor(it.feature)}
                for k, (g, it) in enumerate(zip(state.image_indices, items))]
    tensors = [_is_tensor(it.feature) for it in items]
    steps.append(Step(
        "select_items", "Select this rank's items (0.5.17: no deferred split)", "§9",
        {"image_indices": state.image_indices, "selected": selected, "row_tracks": state.tracks()},
        "SGLang 0.5.17 has no deferred split: each item's feature must already be a tensor and is used as "
        "is; a deferred config is ignored, and nothing compares rows with grids here.",
        {"name": "every feature is a torch.Tensor", "expected": "all tensors",
         "actual": f"{sum(tensors)} of {len(tensors)}", "passed": all(tensors)},
    ))
    for k, it in enumerate(items):
        state.features[k] = _eager_feature(ctx, it, check_message=MSG_FEATURE_TYPE, image=state.image_indices[k])
    _concatenate(ctx, state, steps, branch="no-split")


def _eager_feature(ctx: _Context, item: Item, *, check_message: str | None, image: int | None = None):
    """Return ``(rows, trailing shape, tensor)`` of a feature used as is; raise SGLang's TypeError."""
    feature = item.feature
    if not _is_tensor(feature):
        if check_message is not None:
            raise _SGLangRaise("TypeError", check_message.format(_type_text(feature)), image=image,
                               kind="feature_type")
        return None  # the local branch checks types in materialize_multimodal_features
    shape = tuple(int(s) for s in feature.shape)
    tensor = feature.tensor if ctx.mode == "pixels" else None
    rows = shape[0] if shape else None
    return rows, shape[1:], tensor


# --- §6.4: backend groups -----------------------------------------------------------------------
def _group_backends(ctx: _Context, state: _RankState, items: list[Item], deferred: list[Any],
                    steps: list[Step]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    eager = []
    problem: _SGLangRaise | None = None
    for k, (item, config) in enumerate(zip(items, deferred)):
        g = state.image_indices[k]
        if config is None:
            if not _is_tensor(item.feature):
                problem = _SGLangRaise("TypeError", MSG_FEATURE_TYPE.format(_type_text(item.feature)), image=g,
                                       kind="feature_type")
                break
            state.features[k] = _eager_feature(ctx, item, check_message=None)
            rows = state.features[k][0]
            state.rows[k]["produced_rows"] = rows
            eager.append({"local": k, "image": g, "rows": rows, "shape": list(item.feature.shape)})
        else:
            if "backend" not in config:
                problem = _SGLangRaise("KeyError", repr("backend"), image=g, kind="missing_backend")
                break
            groups.setdefault(config["backend"], []).append(k)
    mapping_name = "global_indices" if ctx.variant == "post-fix" else "indices (shard-local positions)"
    described = {
        backend: {
            "indices": indices,
            "global_indices": [state.image_indices[k] for k in indices],
            "grid_rows_read": _grid_rows_read(ctx, state, indices),
        }
        for backend, indices in groups.items()
    }
    note = (f"Deferred items are grouped by backend; global_indices = [image_indices[i] for i in indices]. "
            f"This code ({ctx.variant}) reads grid_thws_host at {mapping_name}.")
    steps.append(Step("group_backends", "Group deferred items by backend", "§6.4",
                      {"eager": eager, "backend_groups": described, "variant": ctx.variant,
                       "row_tracks": state.tracks()}, note))
    if problem is not None:
        raise problem
    return groups


def _grid_rows_read(ctx: _Context, state: _RankState, indices: list[int]) -> list[int]:
    """Return the rows of grid_thws_host the checks read for these local positions."""
    if ctx.variant == "post-fix":
        return [state.image_indices[k] for k in indices]
    return list(indices)


# --- §6.5 / §6.6: one backend group -------------------------------------------------------------
def _run_group(ctx: _Context, state: _RankState, items: list[Item], backend: str, indices: list[int],
               steps: list[Step]) -> None:
    global_indices = [state.image_indices[k] for k in indices]
    read = _grid_rows_read(ctx, state, indices)
    for k, row_index in zip(indices, read):
        state.rows[k]["grid_index"] = row_index
        state.rows[k]["expected_grid"] = ctx.grid_thws_host[row_index]
    group_items = [items[k] for k in indices]
    base = {"backend": backend, "indices": indices, "global_indices": global_indices,
            "grid_rows_read": read}
    if backend == "gpu":
        produced = _gpu_group(ctx, state, group_items, indices, global_indices, base, steps)
    elif backend == "cpu":
        produced = _cpu_group(ctx, state, group_items, indices, global_indices, base, steps)
    else:
        steps.append(Step(f"preprocess_{backend}", f"Preprocess the {backend!r} group", "§6.5",
                          {**base, "row_tracks": state.tracks()},
                          "SGLang knows only the gpu and cpu backends."))
        raise _SGLangRaise("ValueError", MSG_UNSUPPORTED_BACKEND.format(backend), image=global_indices[0],
                           kind="unsupported_backend", backend=backend)
    _length_check(ctx, state, backend, indices, read, produced, base, steps)


@dataclass
class _Produced:
    grids: list[tuple[int, int, int]]
    rows: list[int]
    tensors: list[torch.Tensor] | None
    pixel_rows: int | None                     # pixel_values.shape[0]; None for a per-image list
    output: str = "concatenated"


def _gpu_group(ctx: _Context, state: _RankState, group_items: list[Item], indices: list[int],
               global_indices: list[int], base: dict[str, Any], steps: list[Step]) -> _Produced:
    first = group_items[0].deferred
    inputs = []
    step = Step("preprocess_gpu", "Preprocess the gpu group (SGLang's torch path)", "§6.5",
                {**base, "inputs": inputs, "row_tracks": state.tracks()}, "")
    steps.append(step)
    try:
        mean, std = _deferred_value(first, "image_mean"), _deferred_value(first, "image_std")
        background = first.get("transparent_bg_config")
        resizes = [_resize_keys(item.deferred.get("resize_config"), g)
                   for item, g in zip(group_items, global_indices)]
        channels_in: list[int] = [0] * len(group_items)
        for item, g, resize in zip(group_items, global_indices, resizes):
            inputs.append({"image": g, "feature": _feature_json(item.feature), "resize_config": dict(resize)})
        # _gpu_preprocess_images groups images by target size; a group of one is staged, resized and
        # filled on its own, a larger group is staged as a whole before it is resized and filled.
        targets: dict[tuple[int, ...], list[int]] = {}
        for position, r in enumerate(resizes):
            key = (r["new_height"], r["new_width"], r["new_height"] + r["pad_height"], r["new_width"] + r["pad_width"])
            targets.setdefault(key, []).append(position)
        for members in targets.values():
            for position in members:
                channels_in[position] = _gpu_stage(group_items[position].feature, global_indices[position])
                inputs[position]["channels"] = channels_in[position]
            for position in members:
                _gpu_resize_probe(group_items[position].feature, channels_in[position], resizes[position],
                                  global_indices[position])
            for position in members:
                _gpu_fill_probe(channels_in[position], background, global_indices[position])
        grids = [grid_of(r, ctx.patch_size) for r in resizes]
        rows = [_prod(list(gr)) for gr in grids]
        tensors = None
        if ctx.mode == "pixels":
            tensors = _gpu_pixels(ctx, group_items, resizes, channels_in, mean, std, background)
            rows = [int(t.shape[0]) for t in tensors]
    except _SGLangRaise:
        step.note = "SGLang fails while staging or resizing these images."
        raise
    for k, grid, n in zip(indices, grids, rows):
        state.rows[k]["produced_grid"] = list(grid)
        state.rows[k]["produced_rows"] = n
    expected = [ctx.grid_thws_host[i] for i in base["grid_rows_read"]]
    passed = [list(g) for g in grids] == expected
    step.variables.update({
        "produced_grids": [list(g) for g in grids],
        "produced_rows": rows,
        "expected_grids": expected,
        "expected_from": f"grid_thws_host[{'global_indices' if ctx.variant == 'post-fix' else 'indices'}]",
        "row_tracks": state.tracks(),
    })
    step.check = {"name": "produced grids == grid_thws_host[...]", "expected": expected,
                  "actual": [list(g) for g in grids], "passed": passed}
    step.note = ("Each image is resized with its own resize_config, so the produced grid follows the "
                 "resize config; mean, std and background come from the group's first config.")
    if not passed:
        bad = next(k for k, (g, e) in enumerate(zip(grids, expected)) if list(g) != e)
        raise _SGLangRaise("ValueError", MSG_GPU_WRONG_GRIDS, image=global_indices[bad], kind="gpu_grids",
                           expected=expected[bad], produced=list(grids[bad]))
    return _Produced(grids, rows, tensors, sum(rows))


def _deferred_value(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise _SGLangRaise("KeyError", repr(key), kind="deferred_config", key=key)
    return config[key]


def _resize_keys(resize: dict[str, Any] | None, image: int) -> dict[str, int]:
    if resize is None:
        raise _SGLangRaise("KeyError", repr("resize_config"), image=image, kind="deferred_config",
                           key="resize_config")
    for key in ("new_height", "pad_height", "new_width", "pad_width"):
        if key not in resize:
            raise _SGLangRaise("KeyError", repr(key), image=image, kind="deferred_config", key=key)
    return {k: int(resize[k]) for k in ("new_width", "new_height", "pad_width", "pad_height")}


def _gpu_stage(feature: Feature, image: int) -> int:
    """Return the channel count ``to_chw_uint8`` leaves (SGLang's gpu staging); raise its errors."""
    if not _is_tensor(feature):
        return 4 if _has_alpha(feature) else 3
    if feature.dtype != "uint8":
        raise _SGLangRaise("ValueError", MSG_RAW_UINT8.format(_torch_dtype_text(feature.dtype)), image=image,
                           kind="dtype", dtype=feature.dtype)
    shape = list(feature.shape)
    if len(shape) == 2:
        shape = [1] + shape
    if len(shape) != 3:
        probe = _probe_torch(lambda: torch.nn.functional.interpolate(
            torch.zeros([1] + [0] * len(shape)), size=(1, 1), mode="bicubic", align_corners=False, antialias=True))
        raise probe if probe is not None else _SGLangRaise("RuntimeError", f"unexpected shape {shape}",
                                                           image=image, kind="shape")
    return 3 if shape[0] == 1 else shape[0]


def _chw_size(feature: Feature) -> tuple[int, int]:
    """Return ``(height, width)`` of the CHW image SGLang's gpu path sees."""
    if not _is_tensor(feature):
        width, height, _ = _image_size(feature)
        return height, width
    shape = list(feature.shape)
    return int(shape[-2]), int(shape[-1])


def _gpu_resize_probe(feature: Feature, channels: int, resize: dict[str, int], image: int) -> None:
    """Raise what ``F.interpolate`` raises for an empty image or an empty target size."""
    height, width = _chw_size(feature)
    target = (resize["new_height"], resize["new_width"])
    if (height, width) == target:
        return
    if min(height, width, *target) > 0:
        return
    probe = _probe_torch(lambda: torch.nn.functional.interpolate(
        torch.zeros(1, max(channels, 1), height, width), size=target, mode="bicubic", align_corners=False,
        antialias=True))
    if probe is not None:
        probe.cause = {"image": image, "kind": "empty_image", "size": [width, height]}
        raise probe


def _gpu_fill_probe(channels: int, background: dict[str, Any] | None, image: int) -> None:
    """Raise what ``fill_transparent_bg`` and the normalisation raise for an odd channel count."""
    if channels == 3:
        return
    rgb = min(channels, 3)
    if background is not None:
        pattern = background.get("pattern", "black")
        if pattern not in ("chessboard", "white", "black", "gray"):
            raise _SGLangRaise("ValueError", MSG_BG_PATTERN.format(pattern), image=image, kind="background")
        alpha = max(0, min(channels, 4) - 3)
        x_alpha, x_rgb, bg = torch.zeros(1, alpha, 1, 1), torch.zeros(1, rgb, 1, 1), torch.zeros(3, 1, 1)
        probe = _probe_torch(lambda: alpha_composite(x_alpha, x_rgb, bg))
        if probe is not None:
            probe.cause = {"image": image, "kind": "channels", "channels": channels}
            raise probe
        out = alpha_composite(x_alpha, x_rgb, bg).shape[1]
    else:
        out = rgb
    probe = _probe_torch(lambda: torch.addcmul(torch.zeros(1, 3, 1, 1), torch.zeros(1, out, 1, 1),
                                               torch.zeros(1, 3, 1, 1)))
    if probe is not None:
        probe.cause = {"image": image, "kind": "channels", "channels": channels}
        raise probe


def alpha_composite(alpha: torch.Tensor, rgb: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Return SGLang's ``alpha * rgb + (1 - alpha) * background`` (used to probe broadcasting)."""
    return alpha * rgb + (1.0 - alpha) * background


def _gpu_pixels(ctx: _Context, group_items: list[Item], resizes: list[dict[str, int]], channels: list[int],
                mean: Any, std: Any, background: Any) -> list[torch.Tensor]:
    """Return each image's rows through the kit's torch path, with the group's first config."""
    base = ctx.consumer if ctx.consumer is not None else PRESETS["kimi-k3"]
    config = dataclasses.replace(base, image_mean=tuple(float(v) for v in mean),
                                 image_std=tuple(float(v) for v in std), transparent_bg_config=background)
    out = []
    for item, resize, count in zip(group_items, resizes, channels):
        feature = item.feature
        if feature.image is not None:
            chw = to_chw_uint8(feature.image)
        else:
            chw = feature.tensor
            if chw.dim() == 2:
                chw = chw.unsqueeze(0)
            if chw.shape[0] == 1:
                chw = chw.repeat(3, 1, 1)
            if chw.shape[0] > 4:
                # SGLang resizes every channel and then keeps RGB (+ channel 3 as alpha when a background
                # is set); resizing is per channel, so keeping those channels first gives the same rows.
                chw = chw[: 4 if background is not None else 3]
        out.append(torch_pixels(chw, dict(resize), config, ctx.device))
    return out


def _cpu_group(ctx: _Context, state: _RankState, group_items: list[Item], indices: list[int],
               global_indices: list[int], base: dict[str, Any], steps: list[Step]) -> _Produced:
    inputs = []
    step = Step("preprocess_cpu", "Preprocess the cpu group (the checkpoint processor)", "§6.5",
                {**base, "inputs": inputs, "processor": None if ctx.consumer is None
                 else ctx.consumer.to_media_proc_cfg(), "row_tracks": state.tracks()}, "")
    steps.append(step)
    if ctx.consumer is None:
        raise ConfigError(
            "batch.processor is None but the batch has cpu-backend items: the cpu backend runs the "
            "consumer's checkpoint processor, so its media_proc_cfg is needed (set Batch.processor, or "
            "'processor' in the manifest)"
        )
    staged = []
    try:
        for item, g in zip(group_items, global_indices):
            staged.append(_cpu_stage(item.feature, g))
        resizes = []
        for (width, height, _mode), g in zip(staged, global_indices):
            if width == 0 or height == 0:
                # The checkpoint's navit_resize_image divides by the width, then by the height.
                raise _SGLangRaise("ZeroDivisionError", "division by zero", image=g, kind="empty_image",
                                   size=[width, height])
            resizes.append(resize_config(width, height, ctx.consumer))
    except _SGLangRaise:
        step.note = "The checkpoint processor cannot take this image."
        raise
    grids = [tuple(int(v) for v in r["grid_thw"]) for r in resizes]
    rows = [_prod(list(gr)) for gr in grids]
    for (width, height, mode_name), item, g, resize in zip(staged, group_items, global_indices, resizes):
        inputs.append({"image": g, "feature": _feature_json(item.feature), "size": [width, height],
                       "mode": mode_name, "own_resize": {k: resize[k] for k in ("new_width", "new_height",
                                                                               "pad_width", "pad_height")},
                       "item_resize_config": (item.deferred or {}).get("resize_config")})
    for k, grid, n in zip(indices, grids, rows):
        state.rows[k]["produced_grid"] = list(grid)
        state.rows[k]["produced_rows"] = n
    missing = next((g for item, g in zip(group_items, global_indices) if "grid_thws" not in item.grids), None)
    expected_rows = [] if missing is not None else [[int(v) for v in row] for item in group_items
                                                     for row in item.grids["grid_thws"]]
    produced_list = [list(g) for g in grids]
    passed = missing is None and produced_list == expected_rows
    grids_match = passed
    tensors = None
    note = ("The checkpoint processor computes its own resize from each image's size and the consumer's "
            "media_proc_cfg (not the item's resize_config), then compares its grids with each item's grid_thws.")
    if ctx.mode == "pixels" and grids_match:
        tensors = _cpu_pixels(ctx, group_items, resizes)
        rows = [int(t.shape[0]) for t in tensors]
    elif ctx.mode == "pixels":
        note += " Pixels not materialized: the grid check fails on sizes alone."
    output = ctx.processor_output
    pixel_rows = None if output == "list" else (len(group_items) if output == "stacked" else sum(rows))
    step.variables.update({
        "produced_grids": produced_list,
        "produced_rows": rows,
        "expected_grids": None if missing is not None else expected_rows,
        "expected_from": "each item's grid_thws",
        "processor_output": output,
        "pixel_values_rows": pixel_rows,
        "row_tracks": state.tracks(),
    })
    step.check = {"name": "checkpoint grids == cat(item grid_thws)", "expected": step.variables["expected_grids"],
                  "actual": produced_list, "passed": passed}
    step.note = note
    if missing is not None:
        raise _SGLangRaise("KeyError", repr("grid_thws"), image=missing, kind="missing_grid_thws")
    if not passed:
        bad = _first_grid_mismatch(group_items, grids)
        raise _SGLangRaise("ValueError", MSG_CPU_WRONG_GRIDS, image=global_indices[bad], kind="cpu_grids",
                           expected=group_items[bad].grids["grid_thws"], produced=list(grids[bad]))
    return _Produced(grids, rows, tensors, pixel_rows, output)


def _first_grid_mismatch(group_items: list[Item], grids: list[tuple[int, int, int]]) -> int:
    for k, (item, grid) in enumerate(zip(group_items, grids)):
        if [[int(v) for v in row] for row in item.grids["grid_thws"]] != [list(grid)]:
            return k
    return 0


def _cpu_stage(feature: Feature, image: int) -> tuple[int, int, str]:
    """Return ``(width, height, PIL mode)`` of what the checkpoint processor receives; raise SGLang's errors."""
    if not _is_tensor(feature):
        width, height, _ = _image_size(feature)
        mode_name = feature.image.mode if feature.image is not None else "?"
        return width, height, mode_name
    if feature.dtype != "uint8":
        raise _SGLangRaise("TypeError", MSG_CPU_INPUT_TYPE, image=image, kind="dtype", dtype=feature.dtype)
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
        raise _SGLangRaise("ValueError", MSG_CHANNEL_COUNT.format(channels), image=image, kind="channels",
                           channels=channels)
    return shape[1], shape[0], {3: "RGB", 4: "RGBA"}[channels]


def _cpu_image(feature: Feature):
    """Return the PIL image SGLang hands the checkpoint processor for this feature."""
    if feature.image is not None:
        return feature.image
    tensor = feature.tensor
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(-1)
    elif tensor.dim() == 3 and tensor.shape[0] in (1, 3, 4):
        tensor = tensor.permute(1, 2, 0)
    if tensor.shape[-1] == 1:
        tensor = tensor.repeat(1, 1, 3)
    array = tensor.cpu().contiguous().numpy()
    return Image.fromarray(array, mode="RGBA" if array.shape[-1] == 4 else "RGB")


def _cpu_pixels(ctx: _Context, group_items: list[Item], resizes: list[dict[str, Any]]) -> list[torch.Tensor]:
    return [checkpoint_pixels(_cpu_image(item.feature), resize, ctx.consumer)[1]
            for item, resize in zip(group_items, resizes)]


def _length_check(ctx: _Context, state: _RankState, backend: str, indices: list[int], read: list[int],
                  produced: _Produced, base: dict[str, Any], steps: list[Step]) -> None:
    patch_counts = [_prod(ctx.grid_thws_host[i]) for i in read]
    expected = sum(patch_counts)
    variables = {**base, "patch_counts": patch_counts, "sum_patch_counts": expected,
                 "pixel_values_rows": produced.pixel_rows, "processor_output": produced.output,
                 "row_tracks": state.tracks()}
    step = Step(f"length_check_{backend}", f"Check the {backend} group's rows against the grids", "§6.6",
                variables, "patch_counts = prod(grid_thws_host[...]) per image; their sum must equal "
                            "pixel_values.shape[0], then the rows are split back into place.",
                {"name": "sum(patch_counts) == pixel_values.shape[0]", "expected": expected,
                 "actual": produced.pixel_rows, "passed": produced.pixel_rows == expected})
    steps.append(step)
    if produced.output == "list":
        step.check["passed"] = False
        raise _SGLangRaise("AttributeError", "'list' object has no attribute 'shape'",
                           image=state.image_indices[indices[0]], kind="processor_output", output="list")
    if produced.pixel_rows != expected:
        bad = next((k for k, n, e in zip(indices, produced.rows, patch_counts) if n != e), indices[0])
        raise _SGLangRaise("ValueError", MSG_LENGTH, image=state.image_indices[bad], kind="length",
                           expected_total=expected, produced_total=produced.pixel_rows,
                           output=produced.output)
    tail: tuple[int, ...] = (3, ctx.patch_size, ctx.patch_size)
    if produced.output == "stacked":  # the split cuts the batch axis of [B, N, 3, p, p]
        tail = (max(produced.rows), *tail)
    for position, (k, rows) in enumerate(zip(indices, patch_counts)):
        tensor = produced.tensors[position] if produced.tensors is not None and produced.output != "stacked" else None
        state.features[k] = (rows, tail, tensor)
    variables["split"] = [{"local": k, "image": state.image_indices[k], "rows": n}
                          for k, n in zip(indices, patch_counts)]
    variables["row_tracks"] = state.tracks()


# --- §6.7: concatenation ------------------------------------------------------------------------
def _concatenate(ctx: _Context, state: _RankState, steps: list[Step], *, branch: str) -> None:
    """Replay ``materialize_multimodal_features`` on the rank's features, then note the tower's view."""
    items = [ctx.batch.items[g] for g in state.image_indices]
    features = []
    problem: _SGLangRaise | None = None
    trailing = None
    total = 0
    for k, (entry, item) in enumerate(zip(state.features, items)):
        g = state.image_indices[k]
        if entry is None:  # the local branch: a feature that is no tensor
            problem = _SGLangRaise("TypeError", MSG_EXPECTED_TENSOR.format(_type_text(item.feature)), image=g,
                                   kind="feature_type")
            break
        rows, tail, _tensor = entry
        if rows is None:
            problem = _SGLangRaise("ValueError", MSG_LEADING_DIM, image=g, kind="feature_shape")
            break
        if trailing is None:
            trailing = tail
        elif tuple(tail) != tuple(trailing):
            problem = _SGLangRaise("ValueError", MSG_TRAILING_SHAPES.format(_size_text(trailing),
                                                                            _size_text((rows, *tail))),
                                   image=g, kind="trailing_shape", shape=[rows, *tail],
                                   expected_trailing=list(trailing))
            break
        if state.rows[k]["produced_rows"] is None:
            state.rows[k]["produced_rows"] = rows
        features.append({"local": k, "image": g, "rows": rows, "trailing_shape": list(tail)})
        total += rows
    declared = sum(_prod(ctx.grid_thws_host[g]) for g in state.image_indices)
    step = Step("concatenate", "Concatenate the rank's features for the tower", "§6.7",
                {"branch": branch, "features": features, "total_rows": total if problem is None else None,
                 "rows_from_grids": declared, "row_tracks": state.tracks()},
                "materialize_multimodal_features copies every feature into one [sum rows, ...] buffer in the "
                "tower dtype; all features must share their trailing shape.",
                {"name": "matching trailing shapes", "expected": None if trailing is None else list(trailing),
                 "actual": [f["trailing_shape"] for f in features], "passed": problem is None})
    steps.append(step)
    if problem is not None:
        raise problem
    if total != declared:
        step.note += (f" get_image_feature raises nothing here, but the tower receives {total} rows for grids "
                      f"that hold {declared}: it fails later.")
    if ctx.mode == "pixels":
        tensors = [entry[2] for entry in state.features]
        if all(t is not None for t in tensors) and tensors:
            if all(tuple(t.shape[1:]) == tuple(tensors[0].shape[1:]) for t in tensors):
                # SGLang packs every feature into one buffer on the tower's device.
                state.pixel_values = torch.cat([t.to(ctx.device, torch.float32) for t in tensors], dim=0)


__all__ = [
    "ErrorInfo", "Step", "RankTrace", "Trace", "Divergence", "assign_ranks", "replay",
    "MSG_ONE_GRID", "MSG_MIX_LOCAL", "MSG_FEATURE_TYPE", "MSG_GPU_WRONG_GRIDS", "MSG_UNSUPPORTED_BACKEND",
    "MSG_LENGTH", "MSG_CPU_WRONG_GRIDS", "MSG_CPU_INPUT_TYPE", "MSG_CHANNEL_COUNT", "MSG_RAW_UINT8",
    "MSG_BG_PATTERN", "MSG_TRAILING_SHAPES", "MSG_LEADING_DIM", "MSG_EXPECTED_TENSOR",
    "MSG_PROCESSOR_LENGTH", "MSG_MIX_DEFERRED_OLD",
]
