"""§7's anomalies, found in a batch alone: what each item carries that SGLang's checks will trip over.

:func:`collect_findings` lists every anomaly of a batch whether or not the replay fails — a stale
``image_grid_thw`` (S2), K2.5 limits on a K3 consumer (S4), a stacked feature (S6), t > 1 (S8),
several grid rows (S9), a stale eager feature (S10), odd channel counts (S11), an HWC tensor (S12),
an empty image (S13), a mixture of local and deferred items (S3) — and, for 0.5.17's code, every
deferred item (``skew``). :mod:`kimi_viz.split.divergence` uses them to explain a replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..preprocess.config import ProcessorConfig
from ..preprocess.resize import ResizeConfig, resize_config
from ..release_changes.rules import releases_where
from ..releases import release_span
from .batch import Batch, Feature, Item, prod
from .classes import ScenarioClass


@dataclass
class Finding:
    """One §7 anomaly of a batch: its class, the global image, a sentence, and the facts it carries."""

    cls: ScenarioClass
    image: int | None
    text: str
    key: str | None = None  # the grid key or config field at fault
    given_grid: list[int] | None = None  # S4: the grid the item's resize_config gives
    consumer_grid: list[int] | None = None  # S4: the grid the consumer's processor config gives

    def __post_init__(self) -> None:
        object.__setattr__(self, "cls", ScenarioClass(self.cls))  # a class name outside §7's set is refused

    def to_json(self) -> dict[str, Any]:
        """Return ``{"class", "image", "text", ...}`` (unset facts left out)."""
        data: dict[str, Any] = {"class": self.cls.value, "image": self.image, "text": self.text}
        for name in ("key", "given_grid", "consumer_grid"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data


def _rows_of(item: Item) -> list[list[int]]:
    source = item.grid_source()
    return [[int(v) for v in row] for row in item.grids.get(source, [])] if source else []


def _feature_size(feature: Feature) -> tuple[int, int] | None:
    """Return the (width, height) SGLang's producer would read from this feature, when knowable."""
    shape = [int(s) for s in feature.shape]
    if feature.layout == "image" or (feature.kind == "image"):
        if feature.image is not None:
            return feature.image.width, feature.image.height
        return (shape[1], shape[0]) if len(shape) >= 2 else None
    if len(shape) == 3 and feature.layout in ("chw", "hwc"):
        return shape[2], shape[1]
    return None


def _looks_hwc(feature: Feature) -> bool:
    """Return True for a 3-D tensor laid out (or, by its shape, apparently) as HWC."""
    shape = [int(s) for s in feature.shape]
    if len(shape) != 3:
        return False
    return feature.layout == "hwc" or (
        feature.layout == "chw" and shape[0] not in (1, 2, 3, 4) and shape[-1] in (1, 3, 4)
    )


def _channels(feature: Feature) -> int | None:
    shape = [int(s) for s in feature.shape]
    if feature.layout == "chw" and len(shape) == 3:
        return shape[0]
    return None


def collect_findings(batch: Batch, *, consumer: ProcessorConfig | None = None) -> list[Finding]:
    """Return every anomaly of ``batch`` that §7 names, in image order."""
    found: list[Finding] = []
    output = batch.processor_output
    for i, item in enumerate(batch.items):
        rows = _rows_of(item)
        feature = item.feature
        if len(rows) != 1 and item.grid_source() is not None:
            found.append(
                Finding(ScenarioClass.S9, i, f"item {i} carries {len(rows)} grid rows in {item.grid_source()}")
            )
        if (
            "image_grid_thw" in item.grids
            and "grid_thws" in item.grids
            and item.grids["image_grid_thw"] != item.grids["grid_thws"]
        ):
            found.append(
                Finding(
                    ScenarioClass.S2,
                    i,
                    f"item {i}: image_grid_thw {item.grids['image_grid_thw']} differs from "
                    f"grid_thws {item.grids['grid_thws']}; SGLang reads image_grid_thw",
                    key="image_grid_thw",
                )
            )
        if item.deferred is not None and rows and len(rows[0]) == 3 and rows[0][0] > 1:
            found.append(
                Finding(
                    ScenarioClass.S8,
                    i,
                    f"deferred item {i} declares t = {rows[0][0]} in {item.grid_source()} "
                    f"{rows[0]}; an image always yields t = 1",
                    key=item.grid_source(),
                )
            )
        size = _feature_size(feature)
        if size is not None and 0 in size:
            found.append(Finding(ScenarioClass.S13, i, f"item {i} is {size[0]}x{size[1]}: a zero-sized image"))
        channels = _channels(feature)
        if item.deferred is not None and channels is not None and not _looks_hwc(feature) and channels not in (1, 3, 4):
            found.append(Finding(ScenarioClass.S11, i, f"item {i} is a {channels}-channel tensor"))
        if item.deferred is not None and _looks_hwc(feature):
            found.append(Finding(ScenarioClass.S12, i, _hwc_text(item, i)))
        if feature.layout == "stacked" or len(feature.shape) == 5:
            found.append(Finding(ScenarioClass.S6, i, f"item {i}'s feature is a stacked {list(feature.shape)} tensor"))
        if (
            item.deferred is None
            and feature.layout == "patches"
            and len(rows) == 1
            and feature.shape
            and int(feature.shape[0]) != prod(rows[0])
        ):
            found.append(
                Finding(
                    ScenarioClass.S10,
                    i,
                    f"eager item {i} has {int(feature.shape[0])} rows but its grid {rows[0]} holds {prod(rows[0])}",
                    key=item.grid_source(),
                )
            )
        s4 = _config_mismatch(item, i, consumer)
        if s4 is not None:
            found.append(s4)
    if output != "concatenated":
        cpu = [i for i, it in enumerate(batch.items) if it.backend == "cpu"]
        if cpu:
            shape = "stacked [B, N, 3, 14, 14] tensor" if output == "stacked" else "per-image list"
            found.append(
                Finding(ScenarioClass.S6, cpu[0], f"the checkpoint processor returns pixel_values as a {shape}")
            )
    local = [bool(it.local_preprocessed) for it in batch.items]
    if any(local) and not all(local):
        first = local.index(False) if local[0] else local.index(True)
        found.append(Finding(ScenarioClass.S3, first, "the batch mixes encoder-local preprocessed and deferred items"))
    found.sort(key=lambda f: f.image if f.image is not None else -1)
    return found


def _hwc_text(item: Item, index: int) -> str:
    """Return the S12 finding: how the producer and the item's backend read an HWC tensor."""
    shape = [int(s) for s in item.feature.shape]
    text = f"item {index}'s tensor {shape} is HWC; "
    as_chw = f"a {shape[0]}-channel {shape[2]}x{shape[1]} (WxH) image"
    if item.backend == "cpu" and shape[0] not in (1, 3, 4):
        # The cpu backend's to_hwc_uint8 reads a tensor whose first axis is not 1, 3 or 4 as HWC.
        return text + (
            f"SGLang's producer reads it as CHW ({as_chw}) for its grid, but the cpu backend reads it as "
            f"HWC ({shape[1]}x{shape[0]})"
        )
    return text + f"SGLang reads it as CHW: {as_chw}"


def _config_mismatch(item: Item, index: int, consumer: ProcessorConfig | None) -> Finding | None:
    """Return an S4 finding when the item's resize_config is not what the consumer's config gives."""
    if consumer is None or item.deferred is None or not isinstance(item.deferred.get("resize_config"), dict):
        return None
    size = item.original_size or _feature_size(item.feature)
    if size is None or 0 in size or _looks_hwc(item.feature):
        return None
    try:
        given = ResizeConfig.from_sglang(item.deferred["resize_config"], consumer.patch_size)
    except (KeyError, TypeError, ValueError):
        return None  # an incomplete resize_config: the replay reports SGLang's own KeyError for it
    own = resize_config(int(size[0]), int(size[1]), consumer)
    if (given.new_width, given.new_height, given.pad_width, given.pad_height) == (
        own.new_width,
        own.new_height,
        own.pad_width,
        own.pad_height,
    ):
        return None
    return Finding(
        ScenarioClass.S4,
        index,
        f"item {index} ({size[0]}x{size[1]}): its resize_config gives {given.new_width}x"
        f"{given.new_height} (grid {list(given.grid)}) but the consumer's processor config "
        f"(in_patch_limit {consumer.in_patch_limit}) gives {own.new_width}x{own.new_height} "
        f"(grid {list(own.grid)})",
        key="resize_config",
        given_grid=list(given.grid),
        consumer_grid=list(own.grid),
    )


def no_split_findings(batch: Batch) -> list[Finding]:
    """Return a ``skew`` finding for every deferred item replayed on 0.5.17's code, which has no deferred split."""
    found = []
    for i, item in enumerate(batch.items):
        if item.deferred is None:
            continue
        what = (
            "a PIL image"
            if item.feature.kind == "image" or item.feature.layout == "image"
            else f"a raw {list(item.feature.shape)} {item.feature.dtype} tensor"
        )
        found.append(
            Finding(
                ScenarioClass.SKEW,
                i,
                f"item {i} is deferred (its feature is {what}), but SGLang "
                f"{release_span(releases_where('code_path', lambda path: path == 'no-split'))} has no "
                "deferred split: it takes every feature as already preprocessed rows and "
                "ignores the deferred config, so the producer runs a newer SGLang than this "
                "consumer",
                key="kimi_k3_deferred_preprocessing",
            )
        )
    return found


__all__ = ["Finding", "collect_findings", "no_split_findings"]
