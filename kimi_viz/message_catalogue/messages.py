"""SGLang's own exception messages on the Kimi-K3 vision path, copied literally, each with its source.

The replay raises these texts, :mod:`kimi_viz._explain` recognises them in logs, and the tests
compare them with what the real SGLang raises. ``{}`` marks a part SGLang formats in. The comment
above each names the file and function that raises it. The split's texts (the first block) are the
same from 0.5.18 on; 0.5.17 raises the grid-loop, tensor-type and ``mm_utils`` ones only. The
releases of every text are in the catalogue.

Every message SGLang raises or logs on the Kimi vision path in the releases the kit knows — these and the rest —
is an entry of the catalogue :data:`kimi_viz.message_catalogue.CATALOGUE`, typed by :class:`Message`
and :class:`Site` below: its template, the stage, and each file, function, exception type or log
level and the releases that have it. The entries are data, a ``[[message]]`` table each in one TOML
file per :class:`Stage` (four for the EPD transfer) under ``kimi_viz/message_catalogue/data/``, where
``common.toml`` says how to write one. A ``MSG_*`` text here is the template of one entry there,
which names the constant instead of copying its text (``Message.name``). The
real-SGLang lane walks each installed release's files and fails when a message on the path is
missing from the catalogue or a release range is wrong (``tests/parity/test_message_catalogue.py``).
"""

from __future__ import annotations

from enum import Enum

from .._records import frozen

# ------------------------------------------------------------------------------------------------
# The exceptions SGLang 0.5.23 raises on this path, copied literally. ``{}`` marks a formatted part.
# ------------------------------------------------------------------------------------------------
# sglang/srt/models/kimi_k3.py, get_image_feature: the grid loop (ValueError).
MSG_ONE_GRID = (
    "Kimi-K3 expects one vision grid per MultimodalDataItem; split aggregated encoder inputs before get_image_feature()"
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

# Raised from 0.5.18 on at two sites the replayed split does not run (ValueError): the request side's
# processors/kimi_k3.py, KimiK3GPUProcessorWrapper.prepare_image_features (eager images of an artifact-cache
# miss), and kimi_k3_image_processing.py, materialize_kimi_k3_cpu_item_features (EPD owner-side, cpu backend).
MSG_PROCESSOR_LENGTH = "Kimi-K3 processor feature length does not match image grids: {} != {}"
# An older wording of MSG_MIX_LOCAL, kept for logs that hold it: no release the kit knows raises it.
MSG_MIX_DEFERRED_OLD = "Kimi-K3 cannot mix deferred and preprocessed image features"

# ------------------------------------------------------------------------------------------------
# The forward pass: sglang/srt/managers/mm_schedule.py (managers/mm_utils.py in 0.5.17), every release.
# ------------------------------------------------------------------------------------------------
# _adjust_embedding_length: rows != the window's pad tokens (logger.warning, then rows trimmed or raised).
MSG_TOKEN_MISMATCH = (
    "Number of tokens in multimodal embedding does not match those in the input text. "
    "Got {} tokens in the text but {} tokens from multimodal embeddings."
)
# _adjust_embedding_length: more rows than tokens and chunked prefill on (logger.warning).
MSG_RAISE_CHUNK = "You may want to avoid this issue by raising `chunked_prefill_size`, or disabling chunked prefill"
# _adjust_embedding_length: fewer rows than tokens (RuntimeError).
MSG_INSUFFICIENT = (
    "Insufficient multimodal embedding length: num_mm_tokens_in_input_ids={} vs num_mm_tokens_in_embedding={}. "
    "This is an internal error"
)
# _discard_mismatched_cached_embedding, 0.5.19+: a cached entry of another length (logger.warning, %-args).
MSG_DISCARD = (
    "Discarding cached multimodal embedding due to a token-count mismatch: cache_key={}, expected_tokens={}, "
    "cached_tokens={}. Recomputing embedding."
)
# _get_precomputed_embedding: some requests precomputed, others not (NotImplementedError).
MSG_ONLY_SOME_PRECOMPUTED = "MM inputs where only some items are precomputed."
# get_embedding_and_mask, 0.5.18+, only with SGLANG_ENABLE_ASYNC_ASSERT: maybe_assert_sum (RuntimeError on CPU).
MSG_ASYNC_ASSERT = "MM placeholder count derived from offsets does not match input_ids"
# torch's own messages on that path (torch 2.13): torch.split of the call's rows by the items' token counts
# (RuntimeError), masked_scatter_ (0.5.17-0.5.18, RuntimeError), _scatter_mm_embedding (0.5.19+: IndexError
# from index_copy_, RuntimeError from scatter_).
MSG_SPLIT_SIZES = (
    "split_with_sizes expects split_sizes to sum exactly to {} (input tensor's size at dimension 0), but got "
    "split_sizes={}"
)
MSG_MASKED_SCATTER = "Number of elements of source < number of ones in mask"
MSG_INDEX_COPY = "index_copy_(): index {} is out of bounds for dimension 0 with size {}"
MSG_SCATTER_INDEX = "index {} is out of bounds for dimension 0 with size {}"

# ------------------------------------------------------------------------------------------------
# The request side: sglang/srt/multimodal/processors/kimi_k3.py (kimi_common.py for the caller identity),
# KimiK3ImageProcessor.process_mm_data_async and what it calls, in the order it checks.
# ------------------------------------------------------------------------------------------------
# process_mm_data_async, every release: video or audio data on the request (ValueError).
MSG_IMAGE_ONLY = "Kimi-K3 supports image input only"
# kimi_common.py, reject_caller_image_identity, 0.5.23: GenerateReqInput.mm_hashes set (ValueError).
MSG_CALLER_MM_HASHES = "Caller-supplied mm_hashes are not supported for Kimi."
# kimi_common.py, reject_caller_image_identity, 0.5.23: a dict image item with hash / pad_value / pad_values /
# identity (ValueError).
MSG_CALLER_IDENTITY = "Caller-supplied multimodal {} is not supported for Kimi."
# process_mm_data_async, every release: <|media_pad|> ids in the token-id prompt != images (ValueError).
MSG_ONE_TO_ONE = "Kimi image placeholders must map one-to-one to image data: expected {}, found {} token(s)"
# process_mm_data_async (0.5.17), _process_mm_data_uncached (0.5.18+): images loaded != images sent (ValueError).
MSG_ONE_TO_ONE_LOADED = "Kimi image placeholders must map one-to-one to image data: expected {}, loaded {}"
# _expand_k3_image_prompt_token_ids, every release: token counts != original sizes (ValueError).
MSG_ORIGINAL_SIZES = "Expected one original size for each K3 image."
# _expand_k3_image_prompt_token_ids, every release: <|media_pad|> ids != images (ValueError).
MSG_PLACEHOLDER_TOKENS = "Expected {} image placeholder token(s), found {}."
# compose_request / _build_deferred_output, 0.5.18+: pad runs in the expanded ids != images (ValueError).
MSG_K3_SPANS = "Expected one Kimi-K3 image span for each image"


# ------------------------------------------------------------------------------------------------
# The catalogue's types (the entries: kimi_viz/message_catalogue/data/, one TOML file per stage).
# ------------------------------------------------------------------------------------------------
class Stage(str, Enum):
    """Where on the way from a chat request to the spliced prompt SGLang emits a message, in order."""

    REQUEST = "request"  # the chat request, its prompt and its <|media_pad|> placeholders
    PROCESSOR = "processor"  # the request side's image loading, resize, grids and artifacts
    CALL = "call"  # get_image_feature: the items and grids of one call
    SPLIT = "split"  # the deferred split and its preprocessing backends (gpu, cpu, EPD owner-side)
    ENCODER = "encoder"  # the vision tower
    SPLICE = "splice"  # mm_schedule: the rows split back per item, their length adjusted, scattered
    EPD = "EPD transfer"  # disaggregation/encoder: the encode server and the language side receiving

    @property
    def number(self) -> int:
        """Return the stage's place in the pipeline, 1 for the request."""
        return list(Stage).index(self) + 1


#: The log levels (and ``warnings.warn``) a site can have; any other kind is an exception class.
LOG_KINDS = ("debug", "info", "warning", "error", "exception", "critical", "UserWarning")

#: The values a ``{}`` field can hold: a form name -> (regular expression, a sample value).
FIELD_FORMS: dict[str, tuple[str, str]] = {
    "n": (r"-?\d+(?:\.\d+)?|[A-Z]", "7"),  # a count or size; a lone capital letter as a report writes it (X, N)
    "word": (r"[^\s,;()\[\]]+", "a1b2"),  # one token: a name, a hash, a request id
    "text": (r".*?", "some detail"),  # anything (the rest of the line when last)
    "type": (r"<class '[^']+'>|[\w.]+", "<class 'list'>"),
    "dtype": (r"torch\.\w+", "torch.float32"),
    "shape": (r"torch\.Size\(\[[^\]]*\]\)|\([^)]*\)|\[[^\]]*\]", "torch.Size([4, 3])"),
    "list": (r"\[[^\]]*\]", "[4, 2]"),
    "phase": (r"Encoder \w+(?: \w+)?", "Encoder preprocessing"),
}


@frozen
class Site:
    """One place SGLang emits a message: a file (under ``sglang/srt``), a function, how, and in which releases."""

    file: str
    function: str  # qualified: Class.method, outer.inner
    kind: str  # the exception class, or a log level of LOG_KINDS
    releases: tuple[str, ...]

    @property
    def logged(self) -> bool:
        """Whether SGLang logs the message here (and goes on) rather than raising it."""
        return self.kind in LOG_KINDS


@frozen
class Message:
    """One message on the Kimi vision path: its text, stage, sites, the fields it carries and what it means.

    ``origin`` is "sglang" when the text is in SGLang's source (the lane checks it against each
    installed release), else the library that raises it when SGLang calls it at the sites ("torch",
    "python"); an entry without sites is a text no release the kit knows has.
    """

    key: str
    template: str  # literal text; {} marks each formatted part
    stage: Stage
    sites: tuple[Site, ...]
    fields: tuple[str, ...] = ()  # one "name" or "name:form" (FIELD_FORMS; default text) per {}, in order
    meaning: str = ""  # what it means, in the user's words
    after: str = ""  # what SGLang does next: the request refused, the process failed, or went on (and how)
    origin: str = "sglang"
    name: str | None = None  # the MSG_* constant above that holds this template
    aliases: tuple[str, ...] = ()  # other texts of the same message (same fields)

    def __post_init__(self) -> None:
        if self.aliases and self.fields:
            raise ValueError(f"{self.key}: aliases are for messages without fields")
        for text in (self.template, *self.aliases):
            if text.count("{}") != len(self.fields):
                raise ValueError(f"{self.key}: {text!r} has {text.count('{}')} fields, names {self.fields}")
        unknown = [f for f in self.fields if f.partition(":")[2] not in ("", *FIELD_FORMS)]
        if unknown:
            raise ValueError(f"{self.key}: unknown field forms {unknown}")

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.partition(":")[0] for f in self.fields)

    @property
    def field_forms(self) -> tuple[str, ...]:
        return tuple(f.partition(":")[2] or "text" for f in self.fields)

    @property
    def releases(self) -> tuple[str, ...]:
        """Every release with at least one site, oldest first."""
        found = {r for site in self.sites for r in site.releases}
        return tuple(sorted(found, key=lambda r: tuple(int(p) for p in r.split(".") if p.isdigit())))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(site.kind for site in self.sites))

    @property
    def logged(self) -> bool:
        """Whether SGLang only logs this message (a warning or error line), never raises it."""
        return bool(self.sites) and all(site.logged for site in self.sites)

    def sample(self, values: tuple[str, ...] | None = None) -> str:
        """Return the text with each field filled (by ``values``, else each form's sample value)."""
        values = values or tuple(FIELD_FORMS[form][1] for form in self.field_forms)
        parts = self.template.split("{}")
        return parts[0] + "".join(str(v) + rest for v, rest in zip(values, parts[1:]))
