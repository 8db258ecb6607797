"""Stage 6, the splice: ``get_embedding_and_mask`` (``managers/mm_schedule.py``; ``managers/mm_utils.py`` in
0.5.17) splits the call's rows back per item, adjusts their length to the window's ``<|media_pad|>``
tokens and ``embed_mm_inputs`` scatters them onto the prompt (docs/pipeline.md §10)."""

from __future__ import annotations

from .. import messages as m
from ..messages import Message, Stage
from ._common import MANAGERS_MM_UTILS, SCHEDULE, SCHEDULER_FAILS, site

ADJUST = "_adjust_embedding_length"
PER_IMAGE = ("_batch_encode_per_image_misses", "_get_chunked_embedding_by_item")


def _both(function: str, kind: str, since: str = "0.5.18") -> tuple:
    """The splice function in managers/mm_utils.py (0.5.17) and managers/mm_schedule.py (``since``-0.5.23)."""
    older = (site(MANAGERS_MM_UTILS, function, kind, "0.5.17"),) if since == "0.5.18" else ()
    return (*older, site(SCHEDULE, function, kind, f"{since}-0.5.23"))


MESSAGES: tuple[Message, ...] = (
    Message(
        "token-mismatch",
        m.MSG_TOKEN_MISMATCH,
        Stage.SPLICE,
        _both(ADJUST, "warning"),
        fields=("prompt_tokens:n", "feature_rows:n"),
        meaning="The embedding's rows for this prefill window differ from the window's <|media_pad|> tokens. "
        "Before 0.5.18 the tokens are counted in input_ids, from 0.5.18 from the items' offsets. The rows "
        "come from the encoder or from an EPD encode server (precomputed), after the per-chunk cut; a "
        "mismatch means a feature did not follow its grid (a stale eager feature, S10/S17) or a cached "
        "embedding of another length was used (S16).",
        after="Logged, and SGLang goes on: with more rows than pad tokens it keeps the LAST rows and the request "
        "runs with wrong features (the first image's surplus rows dropped, pad tokens may receive another "
        "image's rows), silently from here on; with fewer rows the 'Insufficient multimodal embedding length' "
        "error follows at once.",
        name="MSG_TOKEN_MISMATCH",
    ),
    Message(
        "raise-chunk-hint",
        m.MSG_RAISE_CHUNK,
        Stage.SPLICE,
        _both(ADJUST, "warning"),
        meaning="Follows the token-count warning when there are more rows than pad tokens and chunked prefill "
        "is on. Raising --chunked-prefill-size hides the symptom; the rows still do not match the prompt.",
        after="Logged, not raised: the embedding is cut to its last rows and the request goes on with wrong features.",
        name="MSG_RAISE_CHUNK",
    ),
    Message(
        "insufficient-embedding",
        m.MSG_INSUFFICIENT,
        Stage.SPLICE,
        _both(ADJUST, "RuntimeError"),
        fields=("prompt_tokens:n", "feature_rows:n"),
        meaning="The prefill window holds more <|media_pad|> tokens than the embedding has rows, so the rows "
        "cannot cover the pad tokens: an EPD encode server sent fewer precomputed rows than the prompt expects "
        "(a stale eager feature on the encoder, S10), or a cached embedding of another length was used as it "
        "is (0.5.17-0.5.18 key the embedding cache by item.hash alone).",
        after=SCHEDULER_FAILS,
        name="MSG_INSUFFICIENT",
    ),
    Message(
        "discard-cached",
        m.MSG_DISCARD,
        Stage.SPLICE,
        (site(SCHEDULE, "_discard_mismatched_cached_embedding", "warning", "0.5.19-0.5.23"),),
        fields=("cache_key:word", "expected:n", "cached:n"),
        meaning="The embedding cache held rows of another length under this image's hash (a request that "
        "sized the same bytes differently); 0.5.17-0.5.18 have no such check and use the entry as it is.",
        after="Logged, not raised: SGLang drops the cached rows, encodes the image again and the request goes "
        "on with the right features (0.5.19+).",
        name="MSG_DISCARD",
    ),
    Message(
        "placeholder-count",
        m.MSG_ASYNC_ASSERT,
        Stage.SPLICE,
        (site(SCHEDULE, "get_embedding_and_mask", "RuntimeError", "0.5.18-0.5.23"),),
        meaning="The <|media_pad|> tokens in input_ids differ from the count the items' offsets give: the "
        "prompt was expanded for other images (or other sizes) than the items the request carries. Checked "
        "only with SGLANG_ENABLE_ASYNC_ASSERT=1 (off by default); on CUDA it surfaces as a device-side assert.",
        after=SCHEDULER_FAILS,
        name="MSG_ASYNC_ASSERT",
    ),
    Message(
        "only-some-precomputed",
        m.MSG_ONLY_SOME_PRECOMPUTED,
        Stage.SPLICE,
        _both("_get_precomputed_embedding", "NotImplementedError"),
        meaning="The prefill batch mixes requests whose items carry precomputed embeddings (EPD) with requests "
        "that need the encoder.",
        after=SCHEDULER_FAILS,
        name="MSG_ONLY_SOME_PRECOMPUTED",
    ),
    Message(
        "per-item-count",
        "per-item embedding count {} != cache-miss item count {}",
        Stage.SPLICE,
        (
            *(site(MANAGERS_MM_UTILS, f, "AssertionError", "0.5.17") for f in PER_IMAGE),
            *(site(SCHEDULE, f, "AssertionError", "0.5.18-0.5.23") for f in PER_IMAGE),
        ),
        fields=("embeddings:n", "items:n"),
        meaning="get_image_feature returned a per-item list of another length than the cache-miss items it was given.",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "empty-per-item-list",
        "DataEmbeddingFunc returned an empty per-item list; expected one entry per input item",
        Stage.SPLICE,
        _both("_flatten_embedding_result", "ValueError"),
        meaning="get_image_feature returned an empty list for a call with items.",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "no-embedding-method",
        "no embedding method found for {}",
        Stage.SPLICE,
        (site(MANAGERS_MM_UTILS, "embed_mm_inputs", "AssertionError", "0.5.17-0.5.23"),),
        fields=("modality:word",),
        meaning="The model has no embedding function for this modality (e.g. a video item sent to Kimi-K3).",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "split-sizes",
        m.MSG_SPLIT_SIZES,
        Stage.SPLICE,
        (
            *(site(MANAGERS_MM_UTILS, f, "RuntimeError", "0.5.17") for f in PER_IMAGE),
            *(site(SCHEDULE, f, "RuntimeError", "0.5.18-0.5.23") for f in PER_IMAGE),
        ),
        fields=("rows:n", "sizes:list"),
        meaning="torch.split of the call's rows by each item's pad tokens: get_image_feature returned rows that "
        "do not add up to the pad tokens of the call's items, so an item's feature does not follow its grid (a "
        "stale eager feature copied unchecked, S10). The call may hold the images of several requests.",
        after=SCHEDULER_FAILS,
        origin="torch",
        name="MSG_SPLIT_SIZES",
    ),
    Message(
        "masked-scatter",
        m.MSG_MASKED_SCATTER,
        Stage.SPLICE,
        (site(MANAGERS_MM_UTILS, "embed_mm_inputs", "RuntimeError", "0.5.17-0.5.18"),),
        meaning="masked_scatter_ onto the prompt: fewer embedding rows than <|media_pad|> tokens reached the scatter.",
        after=SCHEDULER_FAILS,
        origin="torch",
        name="MSG_MASKED_SCATTER",
    ),
    Message(
        "index-copy",
        m.MSG_INDEX_COPY,
        Stage.SPLICE,
        (site(MANAGERS_MM_UTILS, "_scatter_mm_embedding", "IndexError", "0.5.19-0.5.23"),),
        fields=("index:n", "size:n"),
        meaning="index_copy_ onto the prompt (0.5.19+): more embedding rows than <|media_pad|> tokens reached "
        "the scatter.",
        after=SCHEDULER_FAILS,
        origin="torch",
        name="MSG_INDEX_COPY",
    ),
    Message(
        "scatter-index",
        m.MSG_SCATTER_INDEX,
        Stage.SPLICE,
        (site(MANAGERS_MM_UTILS, "_scatter_mm_embedding", "RuntimeError", "0.5.19-0.5.23"),),
        fields=("index:n", "size:n"),
        meaning="scatter_ of the row positions (0.5.19+): fewer embedding rows than <|media_pad|> tokens reached "
        "the scatter.",
        after=SCHEDULER_FAILS,
        origin="torch",
        name="MSG_SCATTER_INDEX",
    ),
)
