"""What a repro file carries: the items of one ``get_image_feature`` call as plain JSON, and what each release does.

A :class:`ReproCase` is the data file beside an emitted test (``test_kimi_k3_repro_<slug>.json``):
for every batch the call's ranks hold (one, or one per rank for an EPD cpu call), each item's grids,
deferred config, ``encoder_local_preprocessed`` flag and feature as :class:`FeatureSpec` (layout,
shape, dtype, PIL mode; a PNG only when pixels were asked for and the item has them); the processor
settings the checkpoint-processor stand-in needs; the ranks the test runs; and, per SGLang release,
:class:`RankExpectation` s from the kit's replay of that release. Nothing here is pickled: it is
JSON, and images are PNG files.

:func:`expectations` turns the kit's replay of a release into what the emitted test does on it: a
rank that raises fails with SGLang's exception; a rank that raises nothing but hands an image to
``materialize_multimodal_features`` with other than ``prod(grid)`` rows fails the row assertion;
every other rank passes. The replay runs on the shape-only copy of the batch, which is what the test
holds (each image a constant image of its recorded size and mode): SGLang's row counts depend only
on shapes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from .._records import frozen
from ..errors import ConfigError
from ..manifest.format import TENSOR_LAYOUTS
from ..manifest.write import redact_batch
from ..preprocess.config import get_config
from ..releases import RELEASES, CodePath, release_for
from ..split._replay import replay
from ..split.batch import GRID_KEYS, Batch, Feature, Item, check_processor_output
from ..split.cause import ErrorInfo
from ..split.trace import Replayed

FORMAT = "kimi-viz-repro"
VERSION = 1
DEFERRED_FIELDS = ("backend", "image_mean", "image_std", "transparent_bg_config", "resize_config")
BANDS_MODE = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}

RankOutcome = Literal["passes", "raises", "wrong-rows"]


@frozen
class FeatureSpec:
    """An item's feature as the test rebuilds it: a PIL image (``layout="image"``) or a tensor, by shape and dtype."""

    layout: str  # image, chw, hwc, patches or stacked
    shape: tuple[int, ...]
    dtype: str
    mode: str | None = None  # the PIL mode, when known (a redacted image has only its bands)
    transparency: bool = False  # a palette or grey image with a transparent colour
    png: str | None = None  # the image's PNG beside the test, relative to the data file

    def to_json(self) -> dict[str, Any]:
        """Return ``{"layout", "shape", "dtype", "mode", "transparency", "png"}``."""
        return {
            "layout": self.layout,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "mode": self.mode,
            "transparency": self.transparency,
            "png": self.png,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FeatureSpec:
        """Return the spec from :meth:`to_json`'s dict."""
        return cls(
            str(data["layout"]),
            tuple(int(s) for s in data["shape"]),
            str(data["dtype"]),
            data.get("mode"),
            bool(data.get("transparency", False)),
            data.get("png"),
        )


@frozen
class ItemSpec:
    """One ``MultimodalDataItem``: its grids, deferred config, local flag and feature."""

    grids: dict[str, list[list[int]]]
    feature: FeatureSpec
    deferred: dict[str, Any] | None = None
    local_preprocessed: bool = False
    label: str = ""

    def grid(self) -> list[int] | None:
        """Return the first grid row SGLang reads (``image_grid_thw`` wins), or None."""
        for key in GRID_KEYS:
            if key in self.grids and self.grids[key]:
                return list(self.grids[key][0])
        return None

    def to_json(self) -> dict[str, Any]:
        """Return the item as plain JSON data."""
        return {
            "label": self.label,
            "grids": {k: [list(r) for r in v] for k, v in self.grids.items()},
            "deferred": self.deferred,
            "local_preprocessed": self.local_preprocessed,
            "feature": self.feature.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ItemSpec:
        """Return the item from :meth:`to_json`'s dict."""
        return cls(
            {str(k): [[int(v) for v in row] for row in rows] for k, rows in data["grids"].items()},
            FeatureSpec.from_json(data["feature"]),
            None if data.get("deferred") is None else dict(data["deferred"]),
            bool(data.get("local_preprocessed", False)),
            str(data.get("label", "")),
        )


@frozen
class RankExpectation:
    """What the emitted test does on one rank under one release, from the kit's replay of that release."""

    rank: int
    outcome: RankOutcome
    error: ErrorInfo | None = None  # the exception SGLang raises (outcome "raises")
    images: tuple[int, ...] | None = None  # the rank's share (None: raised before the split)
    rows: tuple[int | None, ...] = ()  # rows handed over per image (outcome "wrong-rows")
    grid_rows: tuple[int, ...] = ()  # prod(grid) per image (outcome "wrong-rows")

    @property
    def fails(self) -> bool:
        """Return True when the test fails on this rank."""
        return self.outcome != "passes"

    def text(self) -> str:
        """Return e.g. ``"fails: ValueError: ..."``, ``"fails the row check: image 1 has 4 rows, its grid 64"``."""
        if self.outcome == "raises":
            return f"fails: {self.error}"
        if self.outcome == "wrong-rows":
            wrong = [
                f"image {i} has {r} rows, its grid {g}"
                for i, r, g in zip(self.images or (), self.rows, self.grid_rows)
                if r != g
            ]
            return "fails the row check: " + "; ".join(wrong)
        return "passes"

    def to_json(self) -> dict[str, Any]:
        """Return the expectation as plain JSON data."""
        return {
            "rank": self.rank,
            "outcome": self.outcome,
            "type": None if self.error is None else self.error.type,
            "message": None if self.error is None else self.error.message,
            "images": None if self.images is None else list(self.images),
            "rows": list(self.rows),
            "grid_rows": list(self.grid_rows),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankExpectation:
        """Return the expectation from :meth:`to_json`'s dict."""
        images = data.get("images")
        error = None if data.get("type") is None else ErrorInfo(str(data["type"]), str(data.get("message") or ""))
        return cls(
            int(data["rank"]),
            data["outcome"],
            error,
            None if images is None else tuple(int(i) for i in images),
            tuple(None if r is None else int(r) for r in data.get("rows", ())),
            tuple(int(g) for g in data.get("grid_rows", ())),
        )


@frozen
class ReproCase:
    """Everything an emitted test reads: the batches, the processor stand-in's settings, the ranks, the expectations."""

    tp_size: int
    patch_size: int
    processor: dict[str, Any] | None  # the checkpoint-processor stand-in's settings (None: no consumer config)
    batches: list[list[ItemSpec]]  # one batch, or one per rank (EPD cpu)
    rank_batch: dict[int, int]  # rank -> index into batches
    ranks: list[int]  # the ranks the test runs
    release: str  # the release the kit's verdict is for
    code_path: CodePath
    expected: dict[str, dict[int, RankExpectation]]  # release -> rank -> expectation
    source: dict[str, Any] = field(default_factory=dict)  # where it came from (scenario, manifest, whatif, ...)

    def expected_for(self, version: str) -> dict[int, RankExpectation]:
        """Return the expectations of the release whose code ``version`` runs (``0.5.18.post1`` -> 0.5.18's)."""
        release, _ = release_for(version)
        return self.expected[release.version]

    def to_json(self) -> dict[str, Any]:
        """Return the data file's JSON (format :data:`FORMAT`, version :data:`VERSION`)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "release": self.release,
            "code_path": self.code_path,
            "tp_size": self.tp_size,
            "patch_size": self.patch_size,
            "processor": self.processor,
            "batches": [{"items": [item.to_json() for item in batch]} for batch in self.batches],
            "ranks": [{"rank": r, "batch": self.rank_batch[r]} for r in self.ranks],
            "rank_batch": [self.rank_batch[r] for r in range(self.tp_size)],
            "expected": {
                version: [e.to_json() for _, e in sorted(by_rank.items())] for version, by_rank in self.expected.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReproCase:
        """Return the case from the data file's JSON; ConfigError when it is not a repro data file."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ConfigError(f"not a kimi-viz repro data file (expected format {FORMAT!r}, version {VERSION})")
        return cls(
            int(data["tp_size"]),
            int(data["patch_size"]),
            None if data.get("processor") is None else dict(data["processor"]),
            [[ItemSpec.from_json(item) for item in batch["items"]] for batch in data["batches"]],
            {r: int(b) for r, b in enumerate(data["rank_batch"])},
            [int(entry["rank"]) for entry in data["ranks"]],
            str(data["release"]),
            data["code_path"],
            {
                str(version): {int(e["rank"]): RankExpectation.from_json(e) for e in entries}
                for version, entries in data["expected"].items()
            },
            dict(data.get("source", {})),
        )

    def digest(self) -> str:
        """Return the sha256 of the batches, processor and TP size (what decides the outcome; PNG names aside)."""
        core = {k: v for k, v in self.to_json().items() if k in ("tp_size", "patch_size", "processor", "batches")}
        for batch in core["batches"]:
            for item in batch["items"]:
                item["feature"]["png"] = None
        return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()

    @property
    def images(self) -> int:
        """Return the number of items of the largest batch."""
        return max(len(batch) for batch in self.batches)


# --- building a case from the kit's batches ---------------------------------------------------------
def feature_spec(feature: Feature, where: str) -> FeatureSpec:
    """Return the :class:`FeatureSpec` of a kit feature; ConfigError when the test could not rebuild it."""
    shape = tuple(int(s) for s in feature.shape)
    if feature.layout == "image":
        mode = feature.image.mode if feature.image is not None else None
        if len(shape) != 3 or (mode is None and shape[2] not in BANDS_MODE):
            raise ConfigError(
                f"{where}: an image feature of shape {list(shape)} has no PIL mode to rebuild; "
                "expected (height, width, bands) with 1 to 4 bands"
            )
        transparency = feature.image is not None and "transparency" in feature.image.info
        return FeatureSpec("image", shape, "uint8", mode, transparency)
    if feature.layout not in TENSOR_LAYOUTS:
        raise ConfigError(f"{where}: unknown feature layout {feature.layout!r}; expected image or {TENSOR_LAYOUTS}")
    return FeatureSpec(feature.layout, shape, feature.dtype)


def item_spec(item: Item, where: str) -> ItemSpec:
    """Return the :class:`ItemSpec` of a kit item; ConfigError when SGLang's own objects cannot hold it."""
    deferred = None
    if item.deferred is not None:
        missing = [key for key in DEFERRED_FIELDS if key not in item.deferred and key != "transparent_bg_config"]
        if missing:
            raise ConfigError(
                f"{where}.deferred: no {missing[0]!r}; SGLang's KimiK3DeferredPreprocessing cannot be built "
                "without it, so this batch has no repro against the real code"
            )
        deferred = {key: item.deferred.get(key) for key in DEFERRED_FIELDS}
    return ItemSpec(
        {key: [[int(v) for v in row] for row in rows] for key, rows in item.grids.items()},
        feature_spec(item.feature, f"{where}.feature"),
        deferred,
        bool(item.local_preprocessed),
        item.label,
    )


def processor_spec(batch: Batch) -> tuple[dict[str, Any] | None, int]:
    """Return the checkpoint-processor stand-in's settings (None without a consumer config) and the patch size."""
    if batch.processor is None:
        return None, get_config().patch_size
    config = get_config(batch.processor)
    output = check_processor_output(batch)
    spec = {
        "patch_size": config.patch_size,
        "merge_kernel_size": config.merge_kernel_size,
        "in_patch_limit": config.in_patch_limit,
        "patch_limit_on_one_side": config.patch_limit_on_one_side,
        "fixed_output_tokens": config.fixed_output_tokens,
        "output": output,
    }
    return spec, config.patch_size


def shape_only(batch: Batch) -> Batch:
    """Return a copy of ``batch`` whose features are shape-only: what the emitted test holds."""
    return redact_batch(batch)


def _rank_expectation(trace: Replayed, rank: int) -> RankExpectation:
    r = next(t for t in trace.ranks if t.rank == rank)
    images = None if r.image_indices is None else tuple(r.image_indices)
    if r.outcome == "error":
        assert r.error is not None
        return RankExpectation(rank, "raises", r.error, images)
    grids = trace.grid_thws_host or []
    rows = tuple(row.produced_rows for row in r.images)
    grid_rows = tuple(math.prod(grids[row.image]) for row in r.images)
    if any(p is not None and p != g for p, g in zip(rows, grid_rows)):
        return RankExpectation(rank, "wrong-rows", None, images, rows, grid_rows)
    return RankExpectation(rank, "passes", None, images)


def expectations(
    batches: Sequence[Batch], rank_batch: Mapping[int, int], tp_size: int, version: str
) -> dict[int, RankExpectation]:
    """Return, per rank, what the emitted test does under ``version``: the kit's replay of that release's code."""
    by_batch: dict[int, Replayed] = {}
    out = {}
    for rank in range(tp_size):
        b = rank_batch[rank]
        shared = len(batches) == 1
        if shared and b in by_batch:
            trace = by_batch[b]
        else:
            trace = replay(
                shape_only(batches[b]),
                tp_size=tp_size,
                rank=None if shared else rank,
                sglang_version=version,
                mode="shapes",
            )
            if shared:
                by_batch[b] = trace
        out[rank] = _rank_expectation(trace, rank)
    return out


def build_case(
    batches: Sequence[Batch],
    *,
    tp_size: int,
    release: str,
    source: Mapping[str, Any] | None = None,
    rank_batch: Mapping[int, int] | None = None,
) -> ReproCase:
    """Return the :class:`ReproCase` of a call: ``batches`` (one, or one per rank), replayed on every known release.

    The ranks the test runs are those that own an image or raise under some release (a rank with
    nothing to materialize never calls the loader).
    """
    if not batches:
        raise ConfigError("a repro needs at least one batch")
    mapping = dict(rank_batch) if rank_batch is not None else dict.fromkeys(range(tp_size), 0)
    if sorted(mapping) != list(range(tp_size)) or not all(0 <= b < len(batches) for b in mapping.values()):
        raise ConfigError(f"rank_batch: expected a batch index for each of the {tp_size} ranks, got {mapping}")
    chosen, _ = release_for(release)
    specs = [[item_spec(item, f"items[{k}]") for k, item in enumerate(batch.items)] for batch in batches]
    processor, patch_size = processor_spec(batches[0])
    expected: dict[str, dict[int, RankExpectation]] = {}
    by_path: dict[str, dict[int, RankExpectation]] = {}
    for version, known in RELEASES.items():
        if known.code_path not in by_path:
            by_path[known.code_path] = expectations(batches, mapping, tp_size, version)
        expected[version] = by_path[known.code_path]
    ranks = [r for r in range(tp_size) if any(by_rank[r].fails or by_rank[r].images for by_rank in expected.values())]
    return ReproCase(
        tp_size,
        patch_size,
        processor,
        specs,
        mapping,
        ranks or [0],
        chosen.version,
        chosen.code_path,
        expected,
        dict(source or {}),
    )


__all__ = [
    "FORMAT",
    "VERSION",
    "FeatureSpec",
    "ItemSpec",
    "RankExpectation",
    "ReproCase",
    "build_case",
    "expectations",
    "feature_spec",
    "item_spec",
    "processor_spec",
    "shape_only",
]
