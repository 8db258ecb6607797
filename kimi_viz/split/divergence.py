"""Why the rows stop matching the grids: the divergence report of a replay.

:func:`analyse` reads a :class:`~kimi_viz.split.trace.Trace` and its batch and returns a
:class:`Divergence`: expected against produced rows per image (global index), the first diverging
image with both counts, which grid key or index mapping produced the wrong expectation, the
scenario class of the pipeline spec's §7 (``S1`` … ``S13``, from the anomalies
:func:`~kimi_viz.split.findings.collect_findings` lists; ``skew`` for a producer newer than the consumer;
``none`` when nothing diverges; ``unclassified`` when no class fits, explained then by the cause
itself), a short explanation and the fix. A batch can also diverge *silently* (SGLang raises
nothing but the tower gets the wrong rows or the wrong resolution); those are reported with
``silent`` set.
"""

from __future__ import annotations

from dataclasses import fields

from ..preprocess.config import get_config
from ..releases import PATH_INTRODUCED, path_change
from .batch import prod
from .cause import Cause, CauseKind
from .classes import ScenarioClass
from .diagnosis import Divergence, ImageOutcome
from .findings import Finding, collect_findings, no_split_findings
from .trace import RankTrace, Replayed, Trace

NONE = ScenarioClass.NONE
UNCLASSIFIED = ScenarioClass.UNCLASSIFIED

_PRE_FIX_RELEASE = PATH_INTRODUCED["pre-fix"][0]  # the first release with the deferred split
_POST_FIX_RELEASE = PATH_INTRODUCED["post-fix"][0]  # the first with the S1 fix
_POST_FIX_CHANGE = path_change("post-fix")  # the change that brought it
assert _POST_FIX_CHANGE is not None

FIXES = {
    ScenarioClass.S1: (
        f"Upgrade SGLang to a version with {_POST_FIX_CHANGE.pr_text} ({_POST_FIX_RELEASE} or later): the backend "
        "groups must read grid_thws_host at global_indices = [image_indices[i] for i in indices], not at the "
        "shard-local positions."
    ),
    ScenarioClass.S2: (
        "Give each item one source of truth: drop the stale image_grid_thw (or rewrite it whenever the image "
        "is re-resized) so that the grid SGLang reads first matches the resize_config and grid_thws."
    ),
    ScenarioClass.S3: (
        "Make the EPD encoder decide which images it preprocesses locally with the same owner assignment the "
        "model uses (over the same item list, cache hits included), or preprocess all or none of a request's "
        "images locally."
    ),
    ScenarioClass.S4: (
        "Use the same preprocessor_config.json (media_proc_cfg) on the producer that writes resize_config and"
        " grids and on the consumer that runs the checkpoint processor; for Kimi-K3 that is in_patch_limit "
        "65536."
    ),
    ScenarioClass.S6: (
        "Return one concatenated [sum(t*h*w), 3, 14, 14] tensor from preprocessing (torch.cat over images), "
        "not a per-image list or a stacked [B, N, 3, 14, 14] tensor."
    ),
    ScenarioClass.S8: (
        "Send still images with t = 1 (video frames go through the video path); rebuild the item's grid from "
        "its resize_config."
    ),
    ScenarioClass.S9: (
        "Split aggregated encoder inputs into one MultimodalDataItem per image before get_image_feature()."
    ),
    ScenarioClass.S10: (
        "Recompute (or invalidate) the cached eager feature whenever the grid changes: its row count must "
        "equal prod(grid)."
    ),
    ScenarioClass.S11: "Send images as 1-, 3- or 4-channel data (convert LA or two-channel arrays to RGBA or L first).",
    ScenarioClass.S12: (
        "Permute HWC tensors to CHW (tensor.permute(2, 0, 1)) before handing them to SGLang, and compute the "
        "grid from the CHW width and height."
    ),
    ScenarioClass.S13: (
        "Reject empty (zero-width or zero-height) images at the API boundary before they reach the encoder."
    ),
    ScenarioClass.SKEW: (
        "Run the same SGLang release on the producer (tokenizer / encoder) and the consumer; deferred items "
        f"need a consumer with the deferred split ({_PRE_FIX_RELEASE} or later, and {_POST_FIX_RELEASE} or later to "
        "avoid S1)."
    ),
}
SKEW_EXPECTATION = "a deferred item sent to a consumer without the deferred split"


def image_table(trace: Replayed) -> list[ImageOutcome]:
    """Return one row per replayed image (global index order): rank, grids, expected and produced rows."""
    batch = trace.batch
    table: dict[int, ImageOutcome] = {}
    for rank in trace.ranks:
        for row in rank.images:
            item = batch.items[row.image]
            table[row.image] = ImageOutcome(
                row.image,
                row.label,
                rank.rank,
                item.backend,
                item.grid_source(),
                row.declared_grid,
                row.grid_index_read,
                row.expected_grid,
                row.expected_rows,
                row.produced_grid,
                row.produced_rows,
                row.match,
            )
    return [table[g] for g in sorted(table)]


def with_divergence(replayed: Replayed) -> Trace:
    """Return the :class:`~kimi_viz.split.trace.Trace` of ``replayed``: the replay plus its divergence analysis."""
    facts = {f.name: getattr(replayed, f.name) for f in fields(Replayed)}
    return Trace(**facts, divergence=analyse(replayed))


def analyse(trace: Replayed) -> Divergence:
    """Return the :class:`Divergence` of ``trace``."""
    batch = trace.batch
    consumer = None if batch.processor is None else get_config(batch.processor)
    found = collect_findings(batch, consumer=consumer)
    if trace.code_path == "no-split":
        found = no_split_findings(batch) + found
    table = image_table(trace)
    by_image = {row.image: row for row in table}
    report = Divergence(
        index_mapping="global_indices" if trace.code_path == "post-fix" else "indices (shard-local)",
        images=table,
        findings=found,
    )
    failing = trace.failing_rank
    if failing is not None:
        _explain_error(trace, failing, found, by_image, report)
    else:
        _explain_silent(found, by_image, report)
    if report.first_image is not None:
        g = report.first_image
        report.label = batch.items[g].label
        report.grid_source = batch.items[g].grid_source()
        row = by_image.get(g)
        if row is not None:
            for key in ("expected_rows", "produced_rows", "expected_grid", "produced_grid"):
                if getattr(report, key) is None:
                    setattr(report, key, getattr(row, key))
            if report.rank is None:
                report.rank = row.rank
            if row.grid_index_read != g:
                report.grid_read_from = row.grid_index_read
    if report.fix is None and report.scenario_class in FIXES:
        report.fix = FIXES[report.scenario_class]
    if report.scenario_class == UNCLASSIFIED and report.cause is not None:
        text = Cause(report.cause).text
        report.fix = report.fix or text.fix
    return report


def _first(found: list[Finding], cls: str, image: int | None = None) -> Finding | None:
    return next((f for f in found if f.cls == cls and (image is None or f.image == image)), None)


def _explain_error(
    trace: Replayed, rank: RankTrace, found: list[Finding], by_image: dict[int, ImageOutcome], report: Divergence
) -> None:
    cause = rank.cause or Cause(CauseKind.LENGTH)
    kind = cause.kind
    image = cause.image
    report.cause = kind
    report.rank = rank.rank
    report.first_image = image
    error = rank.error
    where = f"rank {rank.rank}"
    if kind is CauseKind.GRID_ROWS:
        report.scenario_class = ScenarioClass.S9
        report.wrong_expectation = None if image is None else trace.batch.items[image].grid_source()
        report.explanation = (
            f"Item {image} carries {cause.rows} grid rows; get_image_feature needs exactly "
            "one per item, so every rank raises before any image is materialized."
        )
        return
    if kind is CauseKind.MIXED_LOCAL:
        report.scenario_class = ScenarioClass.S3
        report.explanation = (
            f"On {where}, images {cause.local} are encoder-local preprocessed while "
            f"{cause.deferred} are deferred: the encoder's owner assignment differs from "
            "the model's, and SGLang refuses the mixture."
        )
        return
    if kind is CauseKind.EMPTY_IMAGE or (error is not None and error.type == "ZeroDivisionError"):
        report.scenario_class = ScenarioClass.S13
        size = cause.size
        report.explanation = (
            f"Image {image} is {size[0]}x{size[1]}: the resize divides by its zero side."
            if size
            else f"Image {image} has a zero side."
        )
        return
    if kind is CauseKind.CHANNELS:
        _explain_channels(trace, cause, found, report)
        return
    if kind is CauseKind.PROCESSOR_OUTPUT:
        report.scenario_class = ScenarioClass.S6
        report.explanation = (
            "The checkpoint processor returned pixel_values as a per-image list; SGLang reads "
            "pixel_values.shape[0] and fails."
        )
        return
    if kind is CauseKind.FEATURE_TYPE and _first(found, ScenarioClass.SKEW, image) is not None:
        skew = _first(found, ScenarioClass.SKEW, image)
        assert skew is not None
        report.scenario_class = ScenarioClass.SKEW
        report.wrong_expectation = SKEW_EXPECTATION
        report.explanation = skew.text + f"; it raises {error} on {where}."
        return
    if kind is CauseKind.TRAILING_SHAPE:
        _explain_trailing(cause, found, where, report)
        return
    if kind in (CauseKind.GPU_GRIDS, CauseKind.CPU_GRIDS, CauseKind.LENGTH):
        _explain_count(trace, rank, cause, found, by_image, report)
        return
    # Every other kind: a producer/consumer mismatch or bad input that §7 gives no class; its own text explains it.
    text = cause.text
    report.scenario_class = (
        ScenarioClass.SKEW if kind in (CauseKind.MISSING_BACKEND, CauseKind.DEFERRED_CONFIG) else UNCLASSIFIED
    )
    if kind in (CauseKind.MISSING_BACKEND, CauseKind.DEFERRED_CONFIG):
        report.wrong_expectation = f"a deferred config without {cause.key or 'backend'!r}"
    subject = f"image {image}" if image is not None else "the batch"
    report.explanation = f"On {where}, {subject}: {text.explanation}; SGLang raises {error}."
    report.fix = text.fix


def _explain_channels(trace: Replayed, cause: Cause, found: list[Finding], report: Divergence) -> None:
    """Explain a channel-count error: an HWC tensor read as CHW (S12), else an odd channel count (S11)."""
    image = cause.image
    channels = cause.channels
    feature = trace.batch.items[image].feature if image is not None else None
    shape = [int(s) for s in feature.shape] if feature is not None and feature.layout in ("chw", "hwc") else []
    hwc = _first(found, ScenarioClass.S12, image)
    if hwc is not None and shape and channels == shape[0]:  # the HWC tensor's height taken as channels
        report.scenario_class = ScenarioClass.S12
        report.explanation = hwc.text + "; SGLang then fails on its channels."
    else:
        report.scenario_class = ScenarioClass.S11
        read_as = (
            f" (the cpu backend reads its {shape} tensor as HWC, its first axis not being 1, 3 or 4)"
            if len(shape) == 3 and channels != shape[0]
            else ""
        )
        report.explanation = (
            f"Image {image} reaches preprocessing with {channels} channels{read_as}; "
            "SGLang handles 1, 3 or 4 and fails on this one."
        )


def _explain_trailing(cause: Cause, found: list[Finding], where: str, report: Divergence) -> None:
    """Explain features that cannot be concatenated: a release skew, a stacked feature (S6), or unclassified."""
    image = cause.image
    skew = _first(found, ScenarioClass.SKEW, image) or _first(found, ScenarioClass.SKEW)
    if skew is not None:
        report.scenario_class = ScenarioClass.SKEW
        report.wrong_expectation = SKEW_EXPECTATION
        report.explanation = (
            skew.text + f"; on {where} image {image}'s feature {cause.shape} "
            f"cannot be concatenated with trailing shape {cause.expected_trailing}."
        )
        return
    stacked = _first(found, ScenarioClass.S6) is not None
    report.scenario_class = ScenarioClass.S6 if stacked else UNCLASSIFIED
    report.explanation = (
        f"On {where}, image {image}'s feature has shape {cause.shape} while the "
        f"others have trailing shape {cause.expected_trailing}: the features "
        "cannot be concatenated into one [rows, 3, 14, 14] buffer."
    )


def _explain_count(
    trace: Replayed,
    rank: RankTrace,
    cause: Cause,
    found: list[Finding],
    by_image: dict[int, ImageOutcome],
    report: Divergence,
) -> None:
    """Explain a wrong-grids or length error: which expectation was wrong, and why."""
    kind = cause.kind
    image = cause.image
    first = next((r for r in rank.images if r.match is False), None)
    if first is None and image is not None:
        first = next((r for r in rank.images if r.image == image), None)
    if first is not None:
        image = first.image
    report.first_image = image
    row = by_image.get(image) if image is not None else None
    group = [r for r in rank.images if r.produced_rows is not None]
    if kind is CauseKind.LENGTH:
        report.expected_total = cause.expected_total
        report.produced_total = cause.produced_total
    else:
        report.expected_total = sum(r.expected_rows for r in group)
        report.produced_total = sum(r.produced_rows or 0 for r in group)
    read = row.grid_index_read if row is not None else None
    check = {
        CauseKind.GPU_GRIDS: "compares the produced grids with that grid",
        CauseKind.CPU_GRIDS: "compares the checkpoint processor's grids with the items' grid_thws",
        CauseKind.LENGTH: "builds patch_counts from that grid and compares their sum with pixel_values.shape[0]",
    }[kind]
    hosts = trace.grid_thws_host or []
    if (
        trace.code_path == "pre-fix"
        and read is not None
        and image is not None
        and read != image
        and hosts[read] != hosts[image]
    ):
        report.scenario_class = ScenarioClass.S1
        report.wrong_expectation = f"grid_thws_host[indices]: row {read} (image {read}'s grid) for image {image}"
        report.explanation = (
            f"Rank {rank.rank} materializes images {rank.image_indices}; the pre-fix code reads "
            f"grid_thws_host at the shard-local position {read}, i.e. image {read}'s grid "
            f"{hosts[read]}, for image {image} whose grid is {hosts[image]}. It {check}, "
            "and raises."
        )
        return
    for cls in (ScenarioClass.S2, ScenarioClass.S8, ScenarioClass.S6, ScenarioClass.S4, ScenarioClass.S12):
        hit = _first(found, cls, image) or (_first(found, cls) if cls == ScenarioClass.S6 else None)
        if hit is None:
            continue
        report.scenario_class = cls
        report.wrong_expectation = {
            ScenarioClass.S2: "image_grid_thw (stale; SGLang reads it before grid_thws)",
            ScenarioClass.S8: f"{hit.key} (t > 1)",
            ScenarioClass.S6: "pixel_values.shape[0] (the batch axis of a stacked tensor)",
            ScenarioClass.S4: "grid_thws / resize_config written with another processor config",
            ScenarioClass.S12: "the producer's grid, computed from an HWC tensor read as CHW",
        }[cls]
        report.explanation = hit.text + "; " + _count_sentence(kind, report)
        return
    report.scenario_class = UNCLASSIFIED
    report.wrong_expectation = row.grid_source if row is not None else None
    report.explanation = (
        f"Image {image}: "
        + _count_sentence(kind, report)
        + " No scenario class of §7 matches: "
        + cause.text.explanation
        + "."
    )
    report.fix = cause.text.fix


def _count_sentence(kind: CauseKind, report: Divergence) -> str:
    if kind is CauseKind.LENGTH:
        return (
            f"SGLang expected {report.expected_total} rows in all and got {report.produced_total}, "
            "and raises without numbers."
        )
    return "the grids produced differ from the grids SGLang expects, so it raises before counting rows."


SILENT_TAILS = {
    ScenarioClass.S4: (
        "SGLang's gpu path resizes with the item's own resize_config, so the grid check passes: the image is "
        "silently encoded at the producer's resolution, not the consumer's."
    ),
    ScenarioClass.S10: (
        "get_image_feature copies eager features without checking them; the tower fails later on the row count."
    ),
    ScenarioClass.S12: (
        "the grid is computed from the same wrong reading, so every check passes and the encoder sees garbage pixels."
    ),
    ScenarioClass.SKEW: "get_image_feature raises nothing, but the tower receives raw pixels as rows and fails later.",
}
SILENT_EXPECTATIONS = {
    ScenarioClass.S4: "resize_config (another processor config)",
    ScenarioClass.S10: "the eager feature's row count",
    ScenarioClass.S12: "the CHW reading of an HWC tensor",
    ScenarioClass.SKEW: SKEW_EXPECTATION,
}


SILENT_CLASSES = (
    ScenarioClass.SKEW,
    ScenarioClass.S4,
    ScenarioClass.S10,
    ScenarioClass.S12,
    ScenarioClass.S6,
    ScenarioClass.S2,
    ScenarioClass.S8,
    ScenarioClass.S11,
)


def _explain_silent(found: list[Finding], by_image: dict[int, ImageOutcome], report: Divergence) -> None:
    replayed = set(by_image)
    silent = [f for f in found if f.cls in SILENT_CLASSES and (f.image in replayed or not replayed)]
    mismatched = [row for row in by_image.values() if row.match is False]
    report.expected_total = sum(r.expected_rows for r in by_image.values())
    report.produced_total = sum((r.produced_rows or 0) for r in by_image.values())
    if not silent and not mismatched:
        report.explanation = "Every image's produced rows match its grid; nothing diverges."
        return
    report.silent = True
    hit = silent[0] if silent else None
    image = hit.image if hit else mismatched[0].image
    report.first_image = image
    if hit is None:
        report.scenario_class = UNCLASSIFIED
        report.explanation = (
            f"Image {image}'s rows differ from its grid but SGLang raises nothing in "
            "get_image_feature; the tower receives the wrong number of rows and fails later."
        )
        report.fix = "Find what wrote this image's feature or grid (the per-image table shows both counts)."
        return
    report.scenario_class = hit.cls
    report.wrong_expectation = SILENT_EXPECTATIONS.get(hit.cls)
    report.explanation = hit.text + "; " + SILENT_TAILS.get(hit.cls, "SGLang raises nothing in get_image_feature.")
    row = None if image is None else by_image.get(image)
    if row is not None:
        row.silent = True  # the image the verdict calls mis-encoded, flagged in every table and figure
    if hit.cls == ScenarioClass.S4 and hit.consumer_grid is not None and hit.given_grid is not None:
        report.expected_grid = hit.consumer_grid
        report.produced_grid = hit.given_grid
        report.expected_rows = prod(hit.consumer_grid)
        report.produced_rows = prod(hit.given_grid)
        # The consumer expects its own grid for this image: the batch's totals and its row follow.
        if report.expected_total is not None:
            report.expected_total += report.expected_rows - report.produced_rows
        if row is not None:
            row.expected_grid, row.expected_rows = list(hit.consumer_grid), report.expected_rows
            row.match = row.expected_rows == row.produced_rows and row.expected_grid == row.produced_grid


__all__ = [
    "FIXES",
    "NONE",
    "UNCLASSIFIED",
    "Divergence",
    "Finding",
    "ImageOutcome",
    "analyse",
    "with_divergence",
    "collect_findings",
    "image_table",
]
