"""Stage 2, the processor: the request side loads each image, sizes it, builds its grid, tokens and item.

On K3 from 0.5.18 this goes through the preprocess-artifact cache (``media_artifacts/``): one artifact
per image (its grid, resize and feature, or the deferred config), composed into the request's items.
"""

from __future__ import annotations

from .. import messages as m
from ..messages import Message, Stage
from ._common import ARTIFACTS, BASE, COMMON, ENCODE_SERVER, IMAGE_PROCESSING, K3, K25, PREPROCESSOR, REFUSED, site

WITHOUT_CACHE = "MediaArtifactCacheMixin.prepare_media_artifacts_without_cache"
CACHE_CHECK = (
    "An internal check of the preprocess-artifact cache (K3, 0.5.18+): it points at a bug or a custom "
    "processor adapter, not at the images; --mm-preprocess-cache-size-mb 0 takes the cache out of the path."
)

MESSAGES: tuple[Message, ...] = (
    Message(
        "loading-data",
        "Error while loading data {}: {}",
        Stage.PROCESSOR,
        (
            site(BASE, "BaseMultimodalProcessor._load_single_item", "ValueError", "0.5.17-0.5.23"),
            site(BASE, "BaseMultimodalProcessor._load_single_item", "RuntimeError", "0.5.17-0.5.23"),
            site(ENCODE_SERVER, "MMEncoder._load_single_item", "BadRequestError", "0.5.17-0.5.18"),
            site(ENCODE_SERVER, "MMEncoder._load_single_item", "RuntimeError", "0.5.17-0.5.18"),
            site(PREPROCESSOR, "EncoderPreprocessor._load_single_item", "BadRequestError", "0.5.19-0.5.23"),
            site(PREPROCESSOR, "EncoderPreprocessor._load_single_item", "RuntimeError", "0.5.19-0.5.23"),
        ),
        fields=("data", "error"),
        meaning="An image could not be fetched or decoded (a bad URL, base64 or file, an unreadable format); the "
        "loader's error follows. The EPD encode server loads its images with the same words.",
        after=REFUSED,
    ),
    Message(
        "loading-at-index",
        "An exception occurred while loading {} data at index {}: {}",
        Stage.PROCESSOR,
        (
            site(BASE, "BaseMultimodalProcessor.fast_load_mm_data", "ValueError", "0.5.17-0.5.23"),
            site(BASE, "BaseMultimodalProcessor.fast_load_mm_data", "RuntimeError", "0.5.17-0.5.23"),
        ),
        fields=("modality:word", "index:n", "error"),
        meaning="Loading the image at this index of the request (a token-id prompt) failed; the loader's error "
        "follows.",
        after=REFUSED,
    ),
    Message(
        "loading-at-index-log",
        "[load_mm_data(simple)] error loading {} data at index={}",
        Stage.PROCESSOR,
        (site(BASE, "BaseMultimodalProcessor.fast_load_mm_data", "exception", "0.5.17-0.5.23"),),
        fields=("modality:word", "index:n"),
        meaning="Loading the image at this index of the request failed (the traceback follows in the log).",
        after="Logged with its traceback just before 'An exception occurred while loading ... data at index ...' "
        "is raised: the request fails.",
    ),
    Message(
        "gpu-oom-retry-on-cpu",
        "Multimodal preprocessing ran out of GPU memory on {}; retrying on CPU",
        Stage.PROCESSOR,
        (site(BASE, "BaseMultimodalProcessor.process_mm_data", "warning", "0.5.23"),),
        fields=("device:word",),
        meaning="The request side's GPU image preprocessing ran out of memory (large or many images).",
        after="Logged, not raised: the same processor runs again on the CPU and the request goes on with its "
        "features; the grids do not change.",
    ),
    Message(
        "unknown-item-type",
        "Unknown multimodal item type: {}",
        Stage.PROCESSOR,
        (site(BASE, "BaseMultimodalProcessor.process_and_combine_mm_data", "ValueError", "0.5.17-0.5.23"),),
        fields=("type:type",),
        meaning="A loaded item is neither an image, a video, an audio clip nor a preprocessed dict.",
        after=REFUSED,
    ),
    Message(
        "no-token-id",
        "No token id found for modality: {}",
        Stage.PROCESSOR,
        (
            site(BASE, "BaseMultimodalProcessor.process_and_combine_mm_data", "ValueError", "0.5.17-0.5.19"),
            site(BASE, "BaseMultimodalProcessor.get_mm_item_offsets", "ValueError", "0.5.20-0.5.23"),
        ),
        fields=("modality:word",),
        meaning="The processor has no placeholder token id for this item's modality, so its offsets in the "
        "prompt cannot be found: an item of a modality the model does not take.",
        after=REFUSED,
    ),
    Message(
        "grid-type",
        "Unsupported grid type for kimi image tokens: {}",
        Stage.PROCESSOR,
        (site(COMMON, "KimiGridMMDataMixin._num_image_tokens_from_grid", "TypeError", "0.5.17-0.5.23"),),
        fields=("type:type",),
        meaning="An image's grid (image_grid_thw) is not a tensor, array, list or tuple, so its token count "
        "cannot be computed.",
        after=REFUSED,
    ),
    Message(
        "grid-metadata",
        "Invalid grid metadata for kimi image tokens: {} (expected [t,h,w] or [h,w])",
        Stage.PROCESSOR,
        (site(COMMON, "KimiGridMMDataMixin._num_image_tokens_from_grid", "ValueError", "0.5.17-0.5.23"),),
        fields=("grid:list",),
        meaning="An image's grid has fewer than two numbers; the token count is h·w / merge², from [t, h, w] or "
        "[h, w].",
        after=REFUSED,
    ),
    Message(
        "identity-digest",
        "Kimi image identity requires a content digest",
        Stage.PROCESSOR,
        (site(COMMON, "kimi_image_identity", "ValueError", "0.5.23"),),
        meaning="An image item reached the identity step (its hash, from the bytes and the processor config) "
        "without a content digest.",
        after=REFUSED,
    ),
    Message(
        "identity-no-grid",
        "Kimi image item is missing image_grid_thw",
        Stage.PROCESSOR,
        (site(COMMON, "_item_grid_thw", "ValueError", "0.5.23"),),
        meaning="An image item has no image_grid_thw when its identity is computed (the identity includes the "
        "grid, so one image sized two ways gets two identities).",
        after=REFUSED,
    ),
    Message(
        "identity-one-grid",
        "Kimi image item needs one [t, h, w] grid, got {}",
        Stage.PROCESSOR,
        (site(COMMON, "_item_grid_thw", "ValueError", "0.5.23"),),
        fields=("grid:list",),
        meaning="An image item's image_grid_thw is not exactly one [t, h, w] row: several images in one item, "
        "or a malformed grid.",
        after=REFUSED,
    ),
    Message(
        "original-sizes",
        m.MSG_ORIGINAL_SIZES,
        Stage.PROCESSOR,
        (site(K3, "_expand_k3_image_prompt_token_ids", "ValueError", "0.5.17-0.5.23"),),
        meaning="The images' token counts and their original upload sizes differ in number when the K3 prompt "
        "is expanded (each block is written as '<|media_begin|>image WxH...'): an image without its original "
        "size, e.g. a preprocessed input.",
        after=REFUSED,
        name="MSG_ORIGINAL_SIZES",
    ),
    Message(
        "k3-image-spans",
        m.MSG_K3_SPANS,
        Stage.PROCESSOR,
        (
            site(K3, "KimiK3ImageProcessor._build_deferred_output", "ValueError", "0.5.18-0.5.23"),
            site(K3, "KimiK3ImageProcessor.compose_request", "ValueError", "0.5.18-0.5.23"),
        ),
        meaning="A consistency check after the prompt was expanded: its runs of <|media_pad|> ids differ in number "
        "from the images, although the placeholders were counted just before. An image that expands to no pad "
        "token (a token count of 0) is one way; the media control tokens (<|media_begin|>, <|media_content|>, "
        "<|media_end|>) not encoding as the checkpoint's is another.",
        after=REFUSED,
        name="MSG_K3_SPANS",
    ),
    Message(
        "processor-length",
        m.MSG_PROCESSOR_LENGTH,
        Stage.PROCESSOR,
        (
            site(K3, "KimiK3GPUProcessorWrapper.prepare_image_features", "ValueError", "0.5.18-0.5.23"),
            site(IMAGE_PROCESSING, "materialize_kimi_k3_cpu_item_features", "ValueError", "0.5.18-0.5.23"),
        ),
        fields=("produced:n", "expected:n"),
        meaning="The checkpoint processor returned a number of pixel_values rows that differs from the patches "
        "its own grids describe: its output was not one concatenation (per-image lists or a stacked tensor), "
        "or the grids belong to other images. Raised by the request side for the images it preprocesses "
        "eagerly (an artifact-cache miss) and by the EPD encoder's cpu owner-side preprocessing.",
        after=REFUSED + " (On the EPD encoder the encode request fails.)",
        name="MSG_PROCESSOR_LENGTH",
    ),
    Message(
        "artifact-batch",
        "Kimi-K3 artifact batch did not produce every image",
        Stage.PROCESSOR,
        (site(K3, "KimiK3ImageProcessor.prepare_artifact_batch", "RuntimeError", "0.5.18-0.5.23"),),
        meaning="Preprocessing a batch of cache misses returned no artifact for some image. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "zero-division",
        "ZeroDivisionError: division by zero",
        Stage.PROCESSOR,
        (site(K25, "navit_resize_config", "ZeroDivisionError", "0.5.17-0.5.23"),),
        meaning="An image of width or height 0 reached the NaViT resize (only this class of image divides by zero "
        "there; check the traceback names navit_resize_config).",
        after=REFUSED,
        origin="python",
        aliases=("ZeroDivisionError: float division by zero",),
    ),
    Message(
        "k25-raw-uint8",
        "Kimi GPU preprocessing expects raw uint8 pixels, got {}",
        Stage.PROCESSOR,
        (site(K25, "_ensure_chw_rgb", "ValueError", "0.5.17-0.5.23"),),
        fields=("dtype:dtype",),
        meaning="The K2.5 GPU preprocessing got an image tensor that is not raw 0-255 uint8 (e.g. already "
        "normalised floats).",
        after=REFUSED,
    ),
    Message(
        "artifact-modality",
        "A modality is required for artifact caching",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin._resolve_artifact_modality", "ValueError", "0.5.18-0.5.23"),),
        meaning="An item reached the preprocess cache without a modality. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-fingerprint",
        "Artifact caching requires a processor fingerprint",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin._artifact_key", "RuntimeError", "0.5.18-0.5.23"),),
        meaning="The processor gave no fingerprint of its config, which keys the cache. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-digest-changed",
        "prepare_artifact_batch changed the media content digest",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin.validate_artifact", "ValueError", "0.5.18-0.5.23"),),
        meaning="An artifact came back with another image's content digest. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-key-changed",
        "prepare_artifact_batch changed the media artifact key",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin.validate_artifact", "ValueError", "0.5.18-0.5.23"),),
        meaning="An artifact came back with another cache key than the one it was asked for. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-feature-hash",
        "Media artifact feature_hash must be a non-negative integer",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin.validate_artifact", "ValueError", "0.5.18-0.5.23"),),
        meaning="An artifact's feature hash is missing or negative. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "content-hash-count",
        "mm_content_hashes has {} entries for {} {} items",
        Stage.PROCESSOR,
        (
            site(ARTIFACTS, "MediaArtifactCacheMixin.prepare_media_artifacts", "ValueError", "0.5.18-0.5.23"),
            site(ARTIFACTS, WITHOUT_CACHE, "ValueError", "0.5.20-0.5.23"),
        ),
        fields=("hashes:n", "items:n", "modality:word"),
        meaning="The request's mm_content_hashes (one per image, set by a router or the client) has another "
        "length than its images.",
        after=REFUSED,
    ),
    Message(
        "content-hash-mismatch",
        "content hash mismatch for media_data[{}]: expected {}, got {}",
        Stage.PROCESSOR,
        (
            site(ARTIFACTS, "MediaArtifactCacheMixin.prepare_media_artifacts", "ValueError", "0.5.18-0.5.23"),
            site(ARTIFACTS, WITHOUT_CACHE, "ValueError", "0.5.20-0.5.23"),
        ),
        fields=("index:n", "expected:word", "got:word"),
        meaning="The content hash sent for this image (mm_content_hashes) is not the hash of the bytes the "
        "server loaded: the client hashed other bytes, or the image at the URL changed.",
        after=REFUSED,
    ),
    Message(
        "featureless-hit-mask",
        "featureless_hit_mask must align with media_data",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin.prepare_media_artifacts", "ValueError", "0.5.18-0.5.23"),),
        meaning="The mask of cache hits without features has another length than the request's images. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-cache-unresolved",
        "Artifact cache did not resolve every media item",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin.prepare_media_artifacts", "RuntimeError", "0.5.18-0.5.23"),),
        meaning="After lookups and preprocessing some image still has no artifact. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-per-miss",
        "prepare_artifact_batch must return one artifact per cache miss",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin._compute_cache_misses", "ValueError", "0.5.18-0.5.23"),),
        meaning="Preprocessing the cache misses returned another number of artifacts than misses. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-per-input",
        "prepare_artifact_batch must return one artifact per media input",
        Stage.PROCESSOR,
        (site(ARTIFACTS, WITHOUT_CACHE, "ValueError", "0.5.20-0.5.23"),),
        meaning="With the cache off, preprocessing returned another number of artifacts than images. " + CACHE_CHECK,
        after=REFUSED,
    ),
    Message(
        "artifact-hash-changed",
        "Cached media artifact feature hash changed for identical identity {}",
        Stage.PROCESSOR,
        (site(ARTIFACTS, "MediaArtifactCacheMixin._compute_cache_misses", "ValueError", "0.5.18-0.5.23"),),
        fields=("identity:word",),
        meaning="The same image under the same processor config was preprocessed twice and gave two feature "
        "hashes: the preprocessing is not deterministic, or the cache key misses part of the config.",
        after=REFUSED,
    ),
    Message(
        "identity-decode",
        "Could not decode image: {}",
        Stage.PROCESSOR,
        (site("multimodal/cache/identity.py", "_snapshot_pil", "ValueError", "0.5.19-0.5.23"),),
        fields=("error",),
        meaning="The preprocess cache could not decode the image's bytes to compute its content identity (a "
        "truncated or unsupported image file); the decoder's error follows.",
        after=REFUSED,
    ),
)
