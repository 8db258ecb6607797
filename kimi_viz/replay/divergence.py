"""Why the rows stop matching the grids: the divergence report of a replay.

:func:`analyse` reads a :class:`~kimi_viz.deferred.Trace` and its batch and returns a JSON-ready
dict: expected against produced rows per image (global index), the first diverging image with both
counts, which grid key or index mapping produced the wrong expectation, the scenario class of
the pipeline spec's §7 (``S1`` … ``S13``; ``"none"`` when nothing diverges, ``"unknown"`` for an
error no known class explains), a short explanation and the fix. A batch can also diverge
*silently* (SGLang raises nothing but the tower gets the wrong rows or the wrong resolution);
those are reported with ``"silent": true``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypedDict

from .batch import Batch, Feature, Item
from .config import get_config
from .resize import grid_of, resize_config

if TYPE_CHECKING:  # pragma: no cover
    from .deferred import RankTrace, Trace

SCENARIO_CLASSES = ("S1", "S2", "S3", "S4", "S6", "S8", "S9", "S10", "S11", "S12", "S13", "skew")

FIXES = {
    "S1": "Upgrade SGLang to a version with PRs #35305 / #36265 (0.5.19 or later): the backend groups must read "
          "grid_thws_host at global_indices = [image_indices[i] for i in indices], not at the shard-local positions.",
    "S2": "Give each item one source of truth: drop the stale image_grid_thw (or rewrite it whenever the image is "
          "re-resized) so that the grid SGLang reads first matches the resize_config and grid_thws.",
    "S3": "Make the EPD encoder decide which images it preprocesses locally with the same owner assignment the "
          "model uses (over the same item list, cache hits included), or preprocess all or none of a request's "
          "images locally.",
    "S4": "Use the same preprocessor_config.json (media_proc_cfg) on the producer that writes resize_config and "
          "grids and on the consumer that runs the checkpoint processor; for Kimi-K3 that is in_patch_limit 65536.",
    "S6": "Return one concatenated [sum(t*h*w), 3, 14, 14] tensor from preprocessing (torch.cat over images), not "
          "a per-image list or a stacked [B, N, 3, 14, 14] tensor.",
    "S8": "Send still images with t = 1 (video frames go through the video path); rebuild the item's grid from its "
          "resize_config.",
    "S9": "Split aggregated encoder inputs into one MultimodalDataItem per image before get_image_feature().",
    "S10": "Recompute (or invalidate) the cached eager feature whenever the grid changes: its row count must equal "
           "prod(grid).",
    "S11": "Send images as 1-, 3- or 4-channel data (convert LA or two-channel arrays to RGBA or L first).",
    "S12": "Permute HWC tensors to CHW (tensor.permute(2, 0, 1)) before handing them to SGLang, and compute the "
           "grid from the CHW width and height.",
    "S13": "Reject empty (zero-width or zero-height) images at the API boundary before they reach the encoder.",
    "skew": "Run the same SGLang release on the producer (tokenizer / encoder) and the consumer; deferred items "
            "need a consumer with the deferred split (0.5.18 or later, and 0.5.19 or later to avoid S1).",
}


class Divergence(TypedDict):
    """The divergence report (a plain dict at run time, JSON-ready)."""

    scenario_class: str                 # "S1" ... "S13", "none" or "unknown"
    silent: bool                        # True: SGLang raises nothing, yet rows or resolution are wrong
    first_image: int | None             # global index of the first diverging image
    label: str | None
    rank: int | None                    # the rank where it diverges
    expected_rows: int | None           # rows its grid (as SGLang read it) holds
    produced_rows: int | None           # rows preprocessing produced for it
    expected_grid: list[int] | None
    produced_grid: list[int] | None
    expected_total: int | None          # the two counts of the failing check (rows) on that rank
    produced_total: int | None
    grid_source: str | None             # image_grid_thw or grid_thws
    index_mapping: str                  # global_indices (post-fix) or indices (pre-fix)
    wrong_expectation: str | None       # which grid key or index mapping produced the wrong expectation
    explanation: str
    fix: str | None
    images: list[dict[str, Any]]        # per image: rank, grids, expected and produced rows, match
    findings: list[dict[str, Any]]      # every §7 anomaly found in the batch


def _prod(values: Any) -> int:
    return math.prod(int(v) for v in values)


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
    return feature.layout == "hwc" or (feature.layout == "chw" and shape[0] not in (1, 2, 3, 4)
                                       and shape[-1] in (1, 3, 4))


def _channels(feature: Feature) -> int | None:
    shape = [int(s) for s in feature.shape]
    if feature.layout == "chw" and len(shape) == 3:
        return shape[0]
    return None


def findings(batch: Batch, *, consumer: Any = None) -> list[dict[str, Any]]:
    """Return every anomaly of ``batch`` that §7 names, as ``{"class", "image", "text", ...}``, in image order."""
    found: list[dict[str, Any]] = []
    output = batch.extra.get("processor_output", "concatenated")
    for i, item in enumerate(batch.items):
        rows = _rows_of(item)
        feature = item.feature
        if len(rows) != 1 and item.grid_source() is not None:
            found.append({"class": "S9", "image": i,
                          "text": f"item {i} carries {len(rows)} grid rows in {item.grid_source()}"})
        if "image_grid_thw" in item.grids and "grid_thws" in item.grids and \
                item.grids["image_grid_thw"] != item.grids["grid_thws"]:
            found.append({"class": "S2", "image": i, "key": "image_grid_thw",
                          "text": f"item {i}: image_grid_thw {item.grids['image_grid_thw']} differs from grid_thws "
                                  f"{item.grids['grid_thws']}; SGLang reads image_grid_thw"})
        if item.deferred is not None and rows and len(rows[0]) == 3 and rows[0][0] > 1:
            found.append({"class": "S8", "image": i, "key": item.grid_source(),
                          "text": f"deferred item {i} declares t = {rows[0][0]} in {item.grid_source()} {rows[0]}; "
                                  "an image always yields t = 1"})
        size = _feature_size(feature)
        if size is not None and 0 in size:
            found.append({"class": "S13", "image": i, "text": f"item {i} is {size[0]}x{size[1]}: a zero-sized image"})
        channels = _channels(feature)
        if item.deferred is not None and channels is not None and not _looks_hwc(feature) and channels not in (1, 3, 4):
            found.append({"class": "S11", "image": i, "text": f"item {i} is a {channels}-channel tensor"})
        if item.deferred is not None and _looks_hwc(feature):
            found.append({"class": "S12", "image": i, "text": _hwc_text(item, i)})
        if feature.layout == "stacked" or len(feature.shape) == 5:
            found.append({"class": "S6", "image": i,
                          "text": f"item {i}'s feature is a stacked {list(feature.shape)} tensor"})
        if item.deferred is None and feature.layout == "patches" and len(rows) == 1 and feature.shape and \
                int(feature.shape[0]) != _prod(rows[0]):
            found.append({"class": "S10", "image": i, "key": item.grid_source(),
                          "text": f"eager item {i} has {int(feature.shape[0])} rows but its grid {rows[0]} holds "
                                  f"{_prod(rows[0])}"})
        s4 = _config_mismatch(item, i, consumer)
        if s4 is not None:
            found.append(s4)
    if output != "concatenated":
        cpu = [i for i, it in enumerate(batch.items) if it.backend == "cpu"]
        if cpu:
            shape = "stacked [B, N, 3, 14, 14] tensor" if output == "stacked" else "per-image list"
            found.append({"class": "S6", "image": cpu[0],
                          "text": f"the checkpoint processor returns pixel_values as a {shape}"})
    local = [bool(it.local_preprocessed) for it in batch.items]
    if any(local) and not all(local):
        first = local.index(False) if local[0] else local.index(True)
        found.append({"class": "S3", "image": first,
                      "text": "the batch mixes encoder-local preprocessed and deferred items"})
    found.sort(key=lambda f: (f["image"] if f["image"] is not None else -1))
    return found


def _hwc_text(item: Item, index: int) -> str:
    """Return the S12 finding: how the producer and the item's backend read an HWC tensor."""
    shape = [int(s) for s in item.feature.shape]
    text = f"item {index}'s tensor {shape} is HWC; "
    as_chw = f"a {shape[0]}-channel {shape[2]}x{shape[1]} (WxH) image"
    if item.backend == "cpu" and shape[0] not in (1, 3, 4):
        # The cpu backend's to_hwc_uint8 reads a tensor whose first axis is not 1, 3 or 4 as HWC.
        return text + (f"SGLang's producer reads it as CHW ({as_chw}) for its grid, but the cpu backend reads it as "
                       f"HWC ({shape[1]}x{shape[0]})")
    return text + f"SGLang reads it as CHW: {as_chw}"


def _config_mismatch(item: Item, index: int, consumer: Any) -> dict[str, Any] | None:
    """Return an S4 finding when the item's resize_config is not what the consumer's config gives."""
    if consumer is None or item.deferred is None or not isinstance(item.deferred.get("resize_config"), dict):
        return None
    size = item.original_size or _feature_size(item.feature)
    if size is None or 0 in size or _looks_hwc(item.feature):
        return None
    keys = ("new_width", "new_height", "pad_width", "pad_height")
    try:
        given = {k: int(item.deferred["resize_config"][k]) for k in keys}
    except (KeyError, TypeError, ValueError):
        return None  # an incomplete resize_config: the replay reports SGLang's own KeyError for it
    own = resize_config(int(size[0]), int(size[1]), consumer)
    if all(given[k] == own[k] for k in keys):
        return None
    given_grid = list(grid_of(given, consumer.patch_size))
    return {"class": "S4", "image": index, "key": "resize_config",
            "given_grid": given_grid, "consumer_grid": list(own["grid_thw"]),
            "text": (f"item {index} ({size[0]}x{size[1]}): its resize_config gives {given['new_width']}x"
                     f"{given['new_height']} (grid {given_grid}) but the consumer's processor config "
                     f"(in_patch_limit {consumer.in_patch_limit}) gives {own['new_width']}x{own['new_height']} "
                     f"(grid {list(own['grid_thw'])})")}


def _no_split_findings(batch: Batch) -> list[dict[str, Any]]:
    """Return a ``skew`` finding for every deferred item replayed on 0.5.17's code, which has no deferred split."""
    found = []
    for i, item in enumerate(batch.items):
        if item.deferred is None:
            continue
        what = "a PIL image" if item.feature.kind == "image" or item.feature.layout == "image" else \
            f"a raw {list(item.feature.shape)} {item.feature.dtype} tensor"
        found.append({"class": "skew", "image": i, "key": "kimi_k3_deferred_preprocessing",
                      "text": f"item {i} is deferred (its feature is {what}), but SGLang 0.5.17 has no deferred "
                              "split: it takes every feature as already preprocessed rows and ignores the deferred "
                              "config, so the producer runs a newer SGLang than this consumer"})
    return found


def image_table(trace: "Trace") -> list[dict[str, Any]]:
    """Return one row per replayed image (global index order): rank, grids, expected and produced rows."""
    batch = trace.batch
    table: dict[int, dict[str, Any]] = {}
    for rank in trace.ranks:
        for row in rank.images:
            g = row["image"]
            item = batch.items[g]
            table[g] = {
                "image": g,
                "label": row["label"],
                "rank": rank.rank,
                "backend": item.backend,
                "grid_source": item.grid_source(),
                "declared_grid": row["declared_grid"],
                "grid_index_read": row["grid_index"],
                "expected_grid": row["expected_grid"],
                "expected_rows": row["expected_rows"],
                "produced_grid": row["produced_grid"],
                "produced_rows": row["produced_rows"],
                "match": row["match"],
            }
    return [table[g] for g in sorted(table)]


def analyse(trace: "Trace") -> Divergence:
    """Return the divergence report of ``trace`` (see the module docstring for its fields)."""
    batch = trace.batch
    consumer = None if batch.processor is None else get_config(batch.processor)
    found = findings(batch, consumer=consumer)
    if trace.variant == "no-split":
        found = _no_split_findings(batch) + found
    table = image_table(trace)
    by_image = {row["image"]: row for row in table}
    failing = trace.failing_rank
    report: Divergence = {  # type: ignore[typeddict-item]
        "scenario_class": "none",
        "silent": False,
        "first_image": None,
        "label": None,
        "rank": None,
        "expected_rows": None,
        "produced_rows": None,
        "expected_grid": None,
        "produced_grid": None,
        "expected_total": None,
        "produced_total": None,
        "grid_source": None,
        "index_mapping": "global_indices" if trace.variant == "post-fix" else "indices (shard-local)",
        "wrong_expectation": None,
        "explanation": "",
        "fix": None,
        "images": table,
        "findings": found,
    }
    if failing is not None:
        _explain_error(trace, failing, found, by_image, report)
    else:
        _explain_silent(trace, found, by_image, report)
    if report["first_image"] is not None:
        g = report["first_image"]
        report["label"] = batch.items[g].label
        report["grid_source"] = batch.items[g].grid_source()
        row = by_image.get(g)
        if row is not None:
            for key in ("expected_rows", "produced_rows", "expected_grid", "produced_grid"):
                if report[key] is None:
                    report[key] = row[key]
            if report["rank"] is None:
                report["rank"] = row["rank"]
    cls = report["scenario_class"]
    if report["fix"] is None and cls in FIXES:
        report["fix"] = FIXES[cls]
    return report


def _first(found: list[dict[str, Any]], cls: str, image: int | None = None) -> dict[str, Any] | None:
    return next((f for f in found if f["class"] == cls and (image is None or f["image"] == image)), None)


def _explain_error(trace: "Trace", rank: "RankTrace", found: list[dict[str, Any]], by_image: dict[int, Any],
                   report: dict[str, Any]) -> None:
    cause = rank.cause or {}
    kind = cause.get("kind")
    image = cause.get("image")
    report["rank"] = rank.rank
    report["first_image"] = image
    error = rank.error
    where = f"rank {rank.rank}"
    if kind == "grid_rows":
        report["scenario_class"] = "S9"
        report["wrong_expectation"] = _key_of(trace.batch, image)
        report["explanation"] = (f"Item {image} carries {cause.get('rows')} grid rows; get_image_feature needs exactly "
                                 "one per item, so every rank raises before any image is materialized.")
        return
    if kind == "mixed_local":
        report["scenario_class"] = "S3"
        report["explanation"] = (f"On {where}, images {cause.get('local')} are encoder-local preprocessed while "
                                 f"{cause.get('deferred')} are deferred: the encoder's owner assignment differs from "
                                 "the model's, and SGLang refuses the mixture.")
        return
    if kind == "empty_image" or (error is not None and error.type == "ZeroDivisionError"):
        report["scenario_class"] = "S13"
        size = cause.get("size")
        report["explanation"] = (f"Image {image} is {size[0]}x{size[1]}: the resize divides by its zero side."
                                 if size else f"Image {image} has a zero side.")
        return
    if kind == "channels":
        channels = cause.get("channels")
        feature = trace.batch.items[image].feature if image is not None else None
        shape = [int(s) for s in feature.shape] if feature is not None and feature.layout in ("chw", "hwc") else []
        hwc = _first(found, "S12", image)
        if hwc is not None and shape and channels == shape[0]:   # the HWC tensor's height taken as channels
            report["scenario_class"] = "S12"
            report["explanation"] = hwc["text"] + "; SGLang then fails on its channels."
        else:
            report["scenario_class"] = "S11"
            read_as = (f" (the cpu backend reads its {shape} tensor as HWC, its first axis not being 1, 3 or 4)"
                       if len(shape) == 3 and channels != shape[0] else "")
            report["explanation"] = (f"Image {image} reaches preprocessing with {channels} channels{read_as}; "
                                     "SGLang handles 1, 3 or 4 and fails on this one.")
        return
    if kind == "processor_output":
        report["scenario_class"] = "S6"
        report["explanation"] = ("The checkpoint processor returned pixel_values as a per-image list; SGLang reads "
                                 "pixel_values.shape[0] and fails.")
        return
    if kind == "feature_type" and _first(found, "skew", image) is not None:
        report["scenario_class"] = "skew"
        report["wrong_expectation"] = "a deferred item sent to a consumer without the deferred split"
        report["explanation"] = (_first(found, "skew", image)["text"] +
                                 f"; it raises {error} on {where}.")
        return
    if kind == "trailing_shape":
        skew = _first(found, "skew", image) or _first(found, "skew")
        if skew is not None:
            report["scenario_class"] = "skew"
            report["wrong_expectation"] = "a deferred item sent to a consumer without the deferred split"
            report["explanation"] = (skew["text"] + f"; on {where} image {image}'s feature {cause.get('shape')} "
                                     f"cannot be concatenated with trailing shape {cause.get('expected_trailing')}.")
            return
        report["scenario_class"] = "S6" if _first(found, "S6") is not None else "unknown"
        report["explanation"] = (f"On {where}, image {image}'s feature has shape {cause.get('shape')} while the "
                                 f"others have trailing shape {cause.get('expected_trailing')}: the features "
                                 "cannot be concatenated into one [rows, 3, 14, 14] buffer.")
        return
    if kind in ("gpu_grids", "cpu_grids", "length"):
        _explain_count(trace, rank, cause, found, by_image, report)
        return
    report["scenario_class"] = "unknown"
    report["explanation"] = (f"{where} raises {error} (cause: {kind}); no known scenario class explains it."
                             if error else "")
    if kind in ("missing_backend", "deferred_config"):
        report["explanation"] = (f"{where}: a deferred config lacks {cause.get('key', 'backend')!r}; the producer "
                                 "is older (or newer) than the consumer.")
        report["fix"] = "Run the same SGLang version on the producer (tokenizer / encoder) and the consumer."


def _explain_count(trace: "Trace", rank: "RankTrace", cause: dict[str, Any], found: list[dict[str, Any]],
                   by_image: dict[int, Any], report: dict[str, Any]) -> None:
    """Explain a wrong-grids or length error: which expectation was wrong, and why."""
    kind = cause["kind"]
    image = cause.get("image")
    first = _first_mismatch(rank, image)
    if first is not None:
        image = first["image"]
    report["first_image"] = image
    row = by_image.get(image, {})
    group = [r for r in rank.images if r["produced_rows"] is not None]
    if kind == "length":
        report["expected_total"] = cause.get("expected_total")
        report["produced_total"] = cause.get("produced_total")
    else:
        report["expected_total"] = sum(r["expected_rows"] for r in group)
        report["produced_total"] = sum(r["produced_rows"] for r in group)
    read = row.get("grid_index_read")
    check = {"gpu_grids": "compares the produced grids with that grid",
             "cpu_grids": "compares the checkpoint processor's grids with the items' grid_thws",
             "length": "builds patch_counts from that grid and compares their sum with pixel_values.shape[0]"}[kind]
    if trace.variant == "pre-fix" and read is not None and read != image and \
            trace.grid_thws_host[read] != trace.grid_thws_host[image]:
        report["scenario_class"] = "S1"
        report["wrong_expectation"] = f"grid_thws_host[indices]: row {read} (image {read}'s grid) for image {image}"
        report["explanation"] = (f"Rank {rank.rank} materializes images {rank.image_indices}; the pre-fix code reads "
                                 f"grid_thws_host at the shard-local position {read}, i.e. image {read}'s grid "
                                 f"{trace.grid_thws_host[read]}, for image {image} whose grid is "
                                 f"{trace.grid_thws_host[image]}. It {check}, and raises.")
        return
    for cls in ("S2", "S8", "S6", "S4", "S12"):
        hit = _first(found, cls, image) or (_first(found, cls) if cls == "S6" else None)
        if hit is None:
            continue
        report["scenario_class"] = cls
        report["wrong_expectation"] = {
            "S2": "image_grid_thw (stale; SGLang reads it before grid_thws)",
            "S8": f"{hit.get('key')} (t > 1)",
            "S6": "pixel_values.shape[0] (the batch axis of a stacked tensor)",
            "S4": "grid_thws / resize_config written with another processor config",
            "S12": "the producer's grid, computed from an HWC tensor read as CHW",
        }[cls]
        report["explanation"] = hit["text"] + "; " + _count_sentence(kind, report)
        return
    report["scenario_class"] = "unknown"
    report["wrong_expectation"] = row.get("grid_source")
    report["explanation"] = f"Image {image}: " + _count_sentence(kind, report)


def _count_sentence(kind: str, report: dict[str, Any]) -> str:
    if kind == "length":
        return (f"SGLang expected {report['expected_total']} rows in all and got {report['produced_total']}, "
                "and raises without numbers.")
    return "the grids produced differ from the grids SGLang expects, so it raises before counting rows."


def _first_mismatch(rank: "RankTrace", hint: int | None) -> dict[str, Any] | None:
    """Return the rank's first image whose produced rows or grid differ from the expectation."""
    for row in rank.images:
        if row["match"] is False:
            return row
    return None if hint is None else next((r for r in rank.images if r["image"] == hint), None)


def _explain_silent(trace: "Trace", found: list[dict[str, Any]], by_image: dict[int, Any],
                    report: dict[str, Any]) -> None:
    replayed = set(by_image)
    silent = [f for f in found if f["class"] in ("skew", "S4", "S10", "S12", "S6", "S2", "S8", "S11")
              and (f["image"] in replayed or not replayed)]
    mismatched = [row for row in by_image.values() if row["match"] is False]
    if not silent and not mismatched:
        report["explanation"] = "Every image's produced rows match its grid; nothing diverges."
        report["expected_total"] = sum(r["expected_rows"] for r in by_image.values())
        report["produced_total"] = sum((r["produced_rows"] or 0) for r in by_image.values())
        return
    report["silent"] = True
    hit = silent[0] if silent else None
    image = hit["image"] if hit else mismatched[0]["image"]
    report["first_image"] = image
    report["expected_total"] = sum(r["expected_rows"] for r in by_image.values())
    report["produced_total"] = sum((r["produced_rows"] or 0) for r in by_image.values())
    if hit is None:
        report["scenario_class"] = "unknown"
        report["explanation"] = f"Image {image}'s rows differ from its grid but SGLang raises nothing here."
        return
    cls = hit["class"]
    report["scenario_class"] = cls
    tail = {
        "S4": "SGLang's gpu path resizes with the item's own resize_config, so the grid check passes: the image is "
              "silently encoded at the producer's resolution, not the consumer's.",
        "S10": "get_image_feature copies eager features without checking them; the tower fails later on the row count.",
        "S12": "the grid is computed from the same wrong reading, so every check passes and the encoder sees "
               "garbage pixels.",
        "skew": "get_image_feature raises nothing, but the tower receives raw pixels as rows and fails later.",
    }.get(cls, "SGLang raises nothing in get_image_feature.")
    report["wrong_expectation"] = {"S4": "resize_config (another processor config)",
                                   "S10": "the eager feature's row count",
                                   "S12": "the CHW reading of an HWC tensor",
                                   "skew": "a deferred item sent to a consumer without the deferred split"}.get(cls)
    report["explanation"] = hit["text"] + "; " + tail
    if cls == "S4":
        report["expected_grid"] = hit.get("consumer_grid")
        report["produced_grid"] = hit.get("given_grid")
        report["expected_rows"] = _prod(hit["consumer_grid"])
        report["produced_rows"] = _prod(hit["given_grid"])


def _key_of(batch: Batch, image: int | None) -> str | None:
    return None if image is None else batch.items[image].grid_source()


__all__ = ["SCENARIO_CLASSES", "FIXES", "Divergence", "analyse", "findings", "image_table"]
