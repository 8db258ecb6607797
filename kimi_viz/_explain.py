"""Recognise SGLang's Kimi-K3 vision errors in a log line and say what each one means.

An on-call engineer usually starts from a traceback, not a batch. :func:`explain` finds every known
message in a piece of text (§6–7 of ``docs/pipeline.md``: the deferred split's own errors, the
processor's, and the later prompt- and encoder-side counts), pulls out the numbers the message
carries, and returns where SGLang raises it, which scenario classes cause it, the catalogue
scenarios that reproduce it, and what to do next. The message texts come from
:mod:`kimi_viz.messages`, the catalogue the replay raises, so replay and recognition never disagree
on a string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from . import messages

CAPTURE_KEY = "capture-manifest"  # the kit's own capture line, so explain can point at its manifests
NEXT_STEP = (
    "record the failing batch with `kimi-viz capture --out DIR -- <server command>` and run "
    "`kimi-viz triage DIR/<capture>` to name the image, both counts and the cause"
)


@dataclass(frozen=True)
class KnownMessage:
    """One error SGLang raises on the Kimi-K3 vision path, with what it means."""

    key: str
    exception: str
    pattern: str  # a regular expression; named groups are the numbers it carries
    raised_in: str  # SGLang file and function
    meaning: str
    classes: tuple[str, ...] = ()  # scenario classes (docs/pipeline.md §7) that produce it
    scenarios: tuple[str, ...] = ()  # catalogue scenarios that reproduce it (kimi-viz scenario run NAME)
    next_step: str = NEXT_STEP

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """Return the compiled pattern (compiled once, on first use)."""
        return re.compile(self.pattern)


@dataclass
class Recognised:
    """A known message found in the text, with the values it carries and a reading of them."""

    message: KnownMessage
    text: str  # the matched part of the input
    line: int  # 1-based line number in the input
    values: dict[str, Any] = field(default_factory=dict)
    reading: str = ""  # the numbers put into words, when the message has any

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready description of this match."""
        known = self.message
        return {
            "key": known.key,
            "exception": known.exception,
            "matched": self.text,
            "line": self.line,
            "values": self.values,
            "reading": self.reading,
            "raised_in": known.raised_in,
            "meaning": known.meaning,
            "classes": list(known.classes),
            "scenarios": list(known.scenarios),
            "next_step": known.next_step,
        }


def _literal(message: str, **groups: str) -> str:
    """Return a regex for an SGLang message template whose ``{}`` parts become the named groups, in order."""
    parts = message.split("{}")
    names = list(groups)
    if len(names) != len(parts) - 1:
        raise ValueError(f"{message!r} has {len(parts) - 1} fields, got names {names}")
    pattern = re.escape(parts[0])
    for name, rest in zip(names, parts[1:]):
        pattern += f"(?P<{name}>{groups[name]})" + re.escape(rest)
    return pattern


MODEL = "sglang/srt/models/kimi_k3.py"
NEXT_SPLIT = (
    NEXT_STEP + "; when it appears only under load, requests prefilled together may share one call (on 0.5.18 "
    "at attention-TP >= 2 two single-image requests whose grids differ fail like S1): check with "
    "`kimi-viz whatif IMAGE... --together --sglang-version V --tp N`"
)
SCHEDULE = "sglang/srt/managers/mm_schedule.py (managers/mm_utils.py in 0.5.17)"
NEXT_LOAD = (
    "replay the prefill batch the server held: `kimi-viz whatif IMAGE... --together --sglang-version V --tp N` "
    "(one request per image) or `--requests FILE` (several images per request, text lengths, chunked prefill)"
)
IMAGE_PROCESSING = "sglang/srt/multimodal/kimi_k3_image_processing.py"

KNOWN_MESSAGES: tuple[KnownMessage, ...] = (
    KnownMessage(
        "feature-length",
        "ValueError",
        re.escape(messages.MSG_LENGTH),
        f"{MODEL}, KimiK3ForConditionalGeneration.get_image_feature (materialize_item_features)",
        "Σ prod(grid_thw) of the images this rank materialized differs from the pixel_values rows its "
        "preprocessing produced. The grids came from the wrong place (a shard-local index before the "
        "global_indices fix, a stale image_grid_thw) or the rows came back in the wrong form.",
        ("S1", "S2", "S6"),
        ("s1-cpu", "s2-cpu", "s6-stacked"),
        NEXT_SPLIT,
    ),
    KnownMessage(
        "gpu-wrong-grids",
        "ValueError",
        re.escape(messages.MSG_GPU_WRONG_GRIDS),
        f"{MODEL}, get_image_feature (gpu backend group)",
        "SGLang's torch preprocessing resized gpu-backend images to grids that differ from "
        "grid_thws_host[global_indices]: the grid read for an image belongs to another image (S1), is a "
        "stale image_grid_thw (S2), or has t > 1 (S8).",
        ("S1", "S2", "S8"),
        ("s1-gpu", "s2-gpu", "s8-t2"),
        NEXT_SPLIT,
    ),
    KnownMessage(
        "cpu-wrong-grids",
        "ValueError",
        re.escape(messages.MSG_CPU_WRONG_GRIDS),
        f"{IMAGE_PROCESSING}, materialize_kimi_k3_cpu_features",
        "The consumer's checkpoint processor computed its own resize from each image's size and got grids "
        "that differ from the items' grid_thws: producer and consumer run different processor limits "
        "(e.g. Kimi-K2.5's 16384-patch budget against Kimi-K3's 65536).",
        ("S4",),
        ("s4-cpu",),
    ),
    KnownMessage(
        "one-grid",
        "ValueError",
        re.escape(messages.MSG_ONE_GRID),
        f"{MODEL}, get_image_feature (grid collection)",
        "An item carries several grid rows: several images were aggregated into one MultimodalDataItem.",
        ("S9",),
        ("s9-two-grids",),
    ),
    KnownMessage(
        "mix-local",
        "ValueError",
        re.escape(messages.MSG_MIX_LOCAL),
        f"{MODEL}, materialize_item_features",
        "Some images this rank selected were preprocessed locally by the encoder and others are deferred: "
        "the EPD owner assignment over the whole batch differs from the model's over cache misses.",
        ("S3",),
        ("s3-mixed-local",),
    ),
    KnownMessage(
        "mix-deferred-old",
        "ValueError",
        re.escape(messages.MSG_MIX_DEFERRED_OLD),
        f"{MODEL} (older releases), get_image_feature",
        "The older wording of the mixed local/deferred error.",
        ("S3",),
        ("s3-mixed-local",),
    ),
    KnownMessage(
        "processor-length",
        "ValueError",
        _literal(messages.MSG_PROCESSOR_LENGTH, produced=r"\d+", expected=r"\d+"),
        f"{IMAGE_PROCESSING} and sglang/srt/multimodal/processors/kimi_k3.py (checkpoint processor call)",
        "The checkpoint processor returned a number of pixel_values rows that differs from the patches its "
        "own grids describe: its output was not one concatenation (per-image lists or a stacked tensor), "
        "or the grids belong to other images.",
        ("S6",),
        ("s6-stacked",),
    ),
    KnownMessage(
        "trailing-shapes",
        "ValueError",
        _literal(messages.MSG_TRAILING_SHAPES, expected=r"torch\.Size\(\[[^\]]*\]\)", got=r"torch\.Size\(\[[^\]]*\]\)"),
        "sglang/srt/multimodal/mm_utils.py, materialize_multimodal_features",
        "A feature of the wrong rank reached the concatenation, e.g. a stacked [B, N, 3, 14, 14] tensor "
        "where [N, 3, 14, 14] rows were expected.",
        ("S6",),
        ("s6-stacked-feature",),
    ),
    KnownMessage(
        "list-shape",
        "AttributeError",
        re.escape("'list' object has no attribute 'shape'"),
        f"{MODEL}, materialize_item_features (the length check)",
        "The cpu group's preprocessing returned a per-image list instead of one concatenated tensor.",
        ("S6",),
        ("s6-list",),
    ),
    KnownMessage(
        "channel-count",
        "ValueError",
        _literal(messages.MSG_CHANNEL_COUNT, channels=r"\d+"),
        f"{IMAGE_PROCESSING}, materialize_kimi_k3_cpu_features (HWC staging)",
        "A raw tensor with other than 1, 3 or 4 channels reached the cpu backend, or a CHW tensor was "
        "read as HWC (then the 'channel count' is the image width).",
        ("S11", "S12"),
        ("s11-cpu-two-channels",),
    ),
    KnownMessage(
        "broadcast-alpha",
        "RuntimeError",
        r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) "
        r"at non-singleton dimension 1",
        f"{IMAGE_PROCESSING}, fill_transparent_bg (gpu backend)",
        "A 2-channel (grey + alpha) tensor reached the gpu backend's background fill, which takes channels "
        "3.. as alpha and finds none.",
        ("S11",),
        ("s11-two-channels",),
    ),
    KnownMessage(
        "raw-uint8",
        "ValueError",
        _literal(messages.MSG_RAW_UINT8, dtype=r"torch\.\w+"),
        f"{IMAGE_PROCESSING}, to_chw_uint8",
        "A deferred image arrived as a non-uint8 tensor (e.g. already normalised floats).",
    ),
    KnownMessage(
        "cpu-input-type",
        "TypeError",
        re.escape(messages.MSG_CPU_INPUT_TYPE),
        f"{IMAGE_PROCESSING}, materialize_kimi_k3_cpu_features",
        "A cpu-backend item's feature is neither a PIL image nor a uint8 tensor.",
    ),
    KnownMessage(
        "feature-type",
        "TypeError",
        _literal(messages.MSG_FEATURE_TYPE, type=r"<class '[^']+'>"),
        f"{MODEL}, materialize_item_features",
        "An eager (non-deferred) item's feature is not a tensor.",
    ),
    KnownMessage(
        "unsupported-backend",
        "ValueError",
        _literal(messages.MSG_UNSUPPORTED_BACKEND, backend=r"\S+"),
        f"{MODEL}, materialize_item_features",
        "The deferred config names a backend other than 'gpu' or 'cpu': producer and consumer versions differ.",
    ),
    KnownMessage(
        "missing-backend",
        "KeyError",
        r"KeyError: 'backend'",
        f"{MODEL}, materialize_item_features",
        "The deferred config has no 'backend' key: the producer is older than the consumer.",
    ),
    KnownMessage(
        "bg-pattern",
        "ValueError",
        _literal(messages.MSG_BG_PATTERN, pattern=r"\S+"),
        f"{IMAGE_PROCESSING}, fill_transparent_bg",
        "transparent_bg_config names a pattern other than white, black, gray or chessboard.",
    ),
    KnownMessage(
        "zero-division",
        "ZeroDivisionError",
        r"ZeroDivisionError: (?:float )?division by zero",
        "sglang/srt/multimodal/processors/kimi_k25.py, navit_resize_config",
        "An image of width or height 0 reached the NaViT resize (only this class of image divides by zero "
        "there; check the traceback names navit_resize_config).",
        ("S13",),
        ("s13-zero-size",),
    ),
    # --- the forward pass: the call's rows split back and spliced onto the prompt (docs/pipeline.md §10) ---
    KnownMessage(
        "insufficient-embedding",
        "RuntimeError",
        _literal(messages.MSG_INSUFFICIENT.split(". This")[0], prompt_tokens=r"\d+", feature_rows=r"\d+"),
        f"{SCHEDULE}, _adjust_embedding_length (get_embedding_and_mask)",
        "The prefill window holds more <|media_pad|> tokens than the embedding has rows, so the rows cannot "
        "cover the pad tokens: an EPD encode server sent fewer precomputed rows than the prompt expects (a "
        "stale eager feature on the encoder, S10), or a cached embedding of another length was used as it is "
        "(0.5.17-0.5.18 key the embedding cache by item.hash alone). The scheduler process dies with every "
        "request of the batch.",
        ("S10", "S16", "S17"),
        ("s17-stale-eager-epd-fewer", "s16-stale-cache-entry"),
        NEXT_LOAD,
    ),
    KnownMessage(
        "token-mismatch",
        "warning",
        _literal(messages.MSG_TOKEN_MISMATCH, prompt_tokens=r"\d+", feature_rows=r"\d+"),
        f"{SCHEDULE}, _adjust_embedding_length (logger.warning)",
        "A warning, not an error: the embedding's rows differ from the window's pad tokens. With more rows "
        "SGLang keeps the LAST ones and carries on: the first image's surplus rows are dropped and every "
        "pad token may receive another image's row (silent). With fewer rows the 'Insufficient multimodal "
        "embedding length' error follows.",
        ("S10", "S16", "S17"),
        ("s17-stale-eager-epd-fewer", "s16-stale-cache-entry"),
        NEXT_LOAD,
    ),
    KnownMessage(
        "raise-chunk-hint",
        "warning",
        re.escape(messages.MSG_RAISE_CHUNK),
        f"{SCHEDULE}, _adjust_embedding_length (logger.warning, chunked prefill on)",
        "A warning that follows the token-count warning when there are more rows than pad tokens. Raising "
        "--chunked-prefill-size hides the symptom; the rows still do not match the prompt.",
        ("S10", "S17"),
        ("s17-stale-eager-epd-more",),
        NEXT_LOAD,
    ),
    KnownMessage(
        "discard-cached",
        "warning",
        _literal(messages.MSG_DISCARD, cache_key=r"[^,\s]+", expected=r"\d+", cached=r"\d+"),
        f"{SCHEDULE}, _discard_mismatched_cached_embedding (0.5.19+, logger.warning)",
        "A warning, not an error: the embedding cache held rows of another length under this image's hash "
        "(a request that sized the same bytes differently); 0.5.19+ drops them and encodes the image again, "
        "so the request is served. On 0.5.17-0.5.18 the same entry is used as it is.",
        ("S16",),
        ("s16-stale-cache-entry",),
        NEXT_LOAD,
    ),
    KnownMessage(
        "split-sizes",
        "RuntimeError",
        _literal(messages.MSG_SPLIT_SIZES, rows=r"\d+", sizes=r"\[[\d, ]*\]"),
        f"{SCHEDULE}, _batch_encode_per_image_misses (torch.split of the call's rows by each item's pad tokens)",
        "get_image_feature returned rows that do not add up to the pad tokens of the call's items: an item's "
        "feature does not follow its grid (a stale eager feature copied unchecked, S10). The call may hold "
        "the images of several requests; the scheduler process dies with all of them.",
        ("S10", "S17"),
        ("s17-stale-eager-split",),
        NEXT_LOAD,
    ),
    KnownMessage(
        "placeholder-count",
        "RuntimeError",
        re.escape(messages.MSG_ASYNC_ASSERT),
        f"{SCHEDULE}, get_embedding_and_mask (maybe_assert_sum, SGLANG_ENABLE_ASYNC_ASSERT)",
        "The <|media_pad|> tokens in input_ids differ from the count the items' offsets give: the prompt "
        "was expanded for other images (or other sizes) than the items the request carries.",
        (),
        (),
        NEXT_LOAD,
    ),
    KnownMessage(
        "only-some-precomputed",
        "NotImplementedError",
        re.escape(messages.MSG_ONLY_SOME_PRECOMPUTED),
        f"{SCHEDULE}, _get_precomputed_embedding",
        "The prefill batch mixes requests whose items carry precomputed embeddings (EPD) with requests that "
        "need the encoder.",
        (),
        (),
        NEXT_LOAD,
    ),
    KnownMessage(
        "masked-scatter",
        "RuntimeError",
        re.escape(messages.MSG_MASKED_SCATTER),
        f"{SCHEDULE}, embed_mm_inputs (masked_scatter_, 0.5.17-0.5.18)",
        "Fewer embedding rows than <|media_pad|> tokens reached the scatter onto the prompt.",
        (),
        (),
        NEXT_LOAD,
    ),
    KnownMessage(
        "encoder-produced",
        "InternalError",
        r"Encoder produced (?P<produced>\d+) tokens, but preprocessor metadata expected (?P<expected>\d+)",
        "sglang/srt/disaggregation/encoder/server.py, slice_embedding",
        "The EPD encoder's output rows differ from the token counts its preprocessing recorded: the "
        "features did not follow their grids (e.g. a stale eager feature).",
        ("S10",),
        ("s10-stale-eager",),
    ),
    # Not SGLang's: the line `kimi-viz capture` prints when it has recorded a failing call
    # (kimi_viz/capture/record.py). A log that holds it already has the manifest to triage.
    KnownMessage(
        CAPTURE_KEY,
        "kimi-viz capture",
        r"kimi-viz capture: wrote (?P<manifest>.+?)(?: \((?P<error>[A-Za-z_][\w.]*: .*)\))?$",
        "kimi_viz/capture/record.py, record_call (under `kimi-viz capture`)",
        "kimi-viz capture recorded this get_image_feature call as a manifest folder (relative to the "
        "server's working folder): the batch, both grid keys, the deferred configs and the release.",
        next_step="kimi-viz triage MANIFEST names the image, both counts, the cause and the fixing release",
    ),
)


def _reading(key: str, values: dict[str, Any]) -> str:
    """Return the numbers of a matched message put into words."""
    if key == "processor-length":
        produced, expected = values["produced"], values["expected"]
        return (
            f"pixel_values has {produced} rows, the grids need {expected} "
            f"({'+' if produced >= expected else ''}{produced - expected} rows)"
        )
    if key == "insufficient-embedding":
        tokens, rows = values["prompt_tokens"], values["feature_rows"]
        return (
            f"the prompt has {tokens} <|media_pad|> tokens but the embedding has {rows} rows ({tokens - rows} missing)"
        )
    if key == "token-mismatch":
        tokens, rows = values["prompt_tokens"], values["feature_rows"]
        if rows > tokens:
            return (
                f"{tokens} pad tokens in the window, {rows} rows: SGLang keeps the last {tokens} rows and drops the "
                f"first {rows - tokens} (no error; the images may be spliced with other images' rows)"
            )
        return (
            f"{tokens} pad tokens in the window, {rows} rows: {tokens - rows} missing, the Insufficient error follows"
        )
    if key == "discard-cached":
        return (
            f"the cache held {values['cached']} rows under key {values['cache_key']} for an image of "
            f"{values['expected']} pad tokens: dropped and encoded again"
        )
    if key == "split-sizes":
        sizes = [int(v) for v in str(values["sizes"]).strip("[]").split(",") if v.strip()]
        rows, need = int(values["rows"]), sum(sizes)
        gap = f"{need - rows} missing" if need > rows else f"{rows - need} too many"
        return f"the call returned {rows} rows; its {len(sizes)} item(s) need {need} ({sizes}): {gap}"
    if key == "encoder-produced":
        produced, expected = values["produced"], values["expected"]
        return f"the encoder produced {produced} feature rows, the preprocessing metadata expects {expected}"
    if key == CAPTURE_KEY:
        error = values.get("error")
        return f"a manifest of the call that raised {error}" if error else "a manifest of a recorded call"
    if key == "channel-count":
        return f"a tensor was read with {values['channels']} channels"
    if key == "broadcast-alpha":
        return f"alpha had {values['a']} channels against {values['b']} colour channels"
    return ""


def _value(text: str | None) -> Any:
    return int(text) if text is not None and text.isdigit() else text


def explain(text: str) -> list[Recognised]:
    """Return every known Kimi-K3 vision message found in ``text`` (a log line, a traceback or a whole log)."""
    return _drop_repeats(_scan(text, 1) if text else [])


# A line can only hold a known message if it holds one of these (each KNOWN_MESSAGES pattern contains
# one; tests/test_hostile_terminal.py checks it), so a long log is skimmed a block at a time.
NEEDLES = (
    "Kimi-K3",
    "multimodal",
    "'list' object has no attribute",
    "The size of tensor",
    "KeyError: 'backend'",
    "Invalid background pattern",
    "division by zero",
    "Encoder produced",
    "kimi-viz capture: wrote ",
    "chunked_prefill_size",
    "split_with_sizes",
    "MM placeholder count",
    "MM inputs where only some",
    "Number of elements of source",
)
MAX_LOG_BYTES = 1 << 30  # the most explain reads from one log (a file or stdin)
_BLOCK = 1 << 20  # bytes read at a time; a line longer than this is read in pieces


def _scan(text: str, first_line: int) -> list[Recognised]:
    found: list[Recognised] = []
    if not any(needle in text for needle in NEEDLES):
        return found
    for number, line in enumerate(text.splitlines() or [text], start=first_line):
        if not any(needle in line for needle in NEEDLES):
            continue
        for known in KNOWN_MESSAGES:
            match = known.regex.search(line)
            if match is None:
                continue
            values = {name: _value(value) for name, value in match.groupdict().items()}
            found.append(Recognised(known, match.group(0), number, values, _reading(known.key, values)))
    return found


def explain_stream(stream: Any, *, limit: int = MAX_LOG_BYTES, source: str = "the log") -> list[Recognised]:
    """Return the known messages in a binary stream (a log file, stdin), read a block at a time.

    Memory stays bounded by the block size whatever the log's size; more than ``limit`` bytes raise
    :class:`~kimi_viz.errors.KimiVizError` naming ``source``. Bytes that are not UTF-8 are replaced.
    """
    from .errors import KimiVizError

    found: list[Recognised] = []
    line = 1
    carry = b""
    total = 0
    while True:
        block = stream.read(_BLOCK)
        if not block:
            break
        if isinstance(block, str):  # a text stream (e.g. a replaced sys.stdin)
            block = block.encode("utf-8", "surrogateescape")
        total += len(block)
        if total > limit:
            raise KimiVizError(
                f"{source}: more than {limit} bytes; expected a log of at most {limit >> 20} MiB — "
                "pass its tail instead, e.g. tail -c 100M LOG | kimi-viz explain"
            )
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0 and len(data) < _BLOCK:
            carry = data
            continue
        head, carry = (data[: cut + 1], data[cut + 1 :]) if cut >= 0 else (data, b"")
        text = head.decode("utf-8", "replace")
        found.extend(_scan(text, line))
        line += len(text.splitlines()) - (0 if cut >= 0 else 1)
    if carry:
        found.extend(_scan(carry.decode("utf-8", "replace"), line))
    return _drop_repeats(found)


def _drop_repeats(found: list[Recognised]) -> list[Recognised]:
    """Return the matches with repeats of the same message and values (a traceback echoes them) removed."""
    seen: set[tuple[str, tuple]] = set()
    unique = []
    for item in found:
        signature = (item.message.key, tuple(sorted(item.values.items())))
        if signature not in seen:
            seen.add(signature)
            unique.append(item)
    return unique


def format_explanations(found: list[Recognised]) -> str:
    """Return a readable report of the matches (or a note that nothing known was found).

    When the log also holds ``kimi-viz capture`` lines, every error's next step points at those
    manifests instead of asking for a capture, and the report ends with one triage command each.
    """
    if not found:
        return (
            "no known Kimi-K3 vision error in the text; the messages it knows are listed by `kimi-viz explain --list`"
        )
    manifests = [item.values["manifest"] for item in found if item.message.key == CAPTURE_KEY]
    blocks = []
    for item in found:
        known = item.message
        if known.key == CAPTURE_KEY:
            continue
        lines = [
            f"line {item.line}: {known.exception}: {item.text}",
            f"  raised in: {known.raised_in}",
            f"  meaning:   {known.meaning}",
        ]
        if item.reading:
            lines.append(f"  numbers:   {item.reading}")
        if known.classes:
            lines.append(f"  classes:   {', '.join(known.classes)} (docs/pipeline.md §7, §10)")
        if known.scenarios:
            lines.append("  reproduce: " + "; ".join(f"kimi-viz scenario run {name}" for name in known.scenarios))
        if manifests:
            lines.append(f"  next:      this log names {len(manifests)} captured manifest(s); triage them (below)")
        else:
            lines.append(f"  next:      {known.next_step}")
        blocks.append("\n".join(lines))
    if manifests:
        lines = [
            f"captured by kimi-viz capture in this log ({len(manifests)}; paths are relative to the server's folder):"
        ]
        for item in found:
            if item.message.key == CAPTURE_KEY:
                error = item.values.get("error")
                lines.append(f"  line {item.line}: {item.values['manifest']}" + (f"  ({error})" if error else ""))
                lines.append(f"    kimi-viz triage {item.values['manifest']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
