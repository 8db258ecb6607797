"""Stage 7, EPD transfer, the encode server's side: an encoder-disaggregated deployment's encode server
(``disaggregation/encoder/`` from 0.5.19, ``disaggregation/encode_server.py`` before) loads and preprocesses
the images, runs the tower, cuts the embedding per image by the preprocessing's token counts and sends it."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import ENCODE_FAILS, ENCODE_SERVER, PREPROCESSOR, SERVER, encode_server_sites, site

CACHE_FALLBACK = (
    "Logged, not raised: the encode server encodes those images with the vision tower instead, and the "
    "request goes on with the right features (only slower)."
)
WRAPPED = "The encode request's preprocessing or encoding raised; the original error follows the colon."


MESSAGES: tuple[Message, ...] = (
    Message(
        "encoder-produced",
        "Encoder produced {} tokens, but preprocessor metadata expected {}",
        Stage.EPD,
        (
            site(SERVER, "MMEncoder.slice_embedding", "InternalError", "0.5.19-0.5.23"),
            site(SERVER, "MMEncoder._compute_embedding", "InternalError", "0.5.19"),
            site(SERVER, "MMEncoder._validate_embedding_token_count", "InternalError", "0.5.20-0.5.23"),
        ),
        fields=("produced:n", "expected:n"),
        meaning="The EPD encoder's output rows differ from the token counts its preprocessing recorded (for "
        "Kimi h·w / merge² per grid): the features did not follow their grids (e.g. a stale eager feature, "
        "S10) or a cached embedding of another length was assembled.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-preprocess-item-grid",
        "Encoder preprocess item/grid mismatch: {} items != {} grids",
        Stage.EPD,
        (
            site(ENCODE_SERVER, "MMEncoder._calculate_hashes_from_features", "ValueError", "0.5.18"),
            site(ENCODE_SERVER, "MMEncoder._build_mm_data_items", "ValueError", "0.5.18"),
            site(SERVER, "MMEncoder._calculate_hashes_from_features", "ValueError", "0.5.19-0.5.23"),
            site(SERVER, "MMEncoder._build_model_mm_items", "ValueError", "0.5.19-0.5.23"),
        ),
        fields=("items:n", "grids:n"),
        meaning="Owner-side preprocessing produced another number of items than grids (one item per image is "
        "the contract).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-preprocess-modality",
        "Encoder preprocess output contains wrong modality",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._build_mm_data_items", "MMEncoder._build_model_mm_items", "ValueError", since="0.5.18"
        ),
        meaning="An item of owner-side preprocessing is not of the modality being encoded.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-batch-layout",
        "Invalid batch layout {} for {} requests",
        Stage.EPD,
        (site(SERVER, "MMEncoder._prepare_encode_context", "InternalError", "0.5.19-0.5.23"),),
        fields=("layout:list", "requests:n"),
        meaning="The encode server batched several encode requests and the per-request item counts do not fit "
        "the requests.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-batch-grids",
        "Batch layout {} expects {} grids, but the processor produced {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._prepare_encode_context", "InternalError", "0.5.19-0.5.23"),),
        fields=("layout:list", "expected:n", "produced:n"),
        meaning="The processor returned another number of image grids than the batched requests have images "
        "(one grid per image).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-token-counts",
        "Preprocessor returned {} token counts for {} {} grid entries",
        Stage.EPD,
        (site(SERVER, "MMEncoder._prepare_encode_context", "InternalError", "0.5.19-0.5.23"),),
        fields=("counts:n", "grids:n", "modality:word"),
        meaning="The preprocessing's token counts (used to cut the embedding per image) differ in number from "
        "its grids.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-tp-layouts",
        "Encoder preprocessing produced inconsistent layouts across TP ranks 0 and {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._prepare_encode_context_on_all_ranks", "InternalError", "0.5.20-0.5.23"),),
        fields=("rank:n",),
        meaning="The encode server's tensor-parallel ranks preprocessed the same request into different grids "
        "or token counts: their processor configs or inputs differ.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-tp-rank-failed",
        "{} failed on TP rank {}: {}",
        Stage.EPD,
        (
            site(SERVER, "MMEncoder._sync_tp_prepare_status", "BadRequestError", "0.5.20-0.5.23"),
            site(SERVER, "MMEncoder._sync_tp_prepare_status", "InternalError", "0.5.20-0.5.23"),
        ),
        fields=("phase:phase", "rank:n", "error"),
        meaning="Preprocessing (or publishing its metadata) failed on one of the encode server's TP ranks; that "
        "rank's error follows.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-user-hashes",
        "User-supplied hashes length {} != grid count {} for req {}; hashes must be grid-space (1 per encoder "
        "grid entry).",
        Stage.EPD,
        (site(SERVER, "MMEncoder._prepare_encode_context", "BadRequestError", "0.5.19-0.5.23"),),
        fields=("hashes:n", "grids:n", "request:word"),
        meaning="The encode request carries its own image hashes, and not one per grid (one per image for Kimi).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-user-hashes-old",
        "User-supplied hashes length {} != grid count {} for {}/{}; hashes must be in grid space (1 per encoder "
        "grid entry).",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder._prepare_global_cache_context", "BadRequestError", "0.5.17-0.5.18"),),
        fields=("hashes:n", "grids:n", "model:word", "modality:word"),
        meaning="The encode request carries its own image hashes, and not one per grid (one per image for Kimi).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-content-hash",
        "Encoder media content hash mismatch: expected {}, got {}",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._load_single_item",
            "EncoderPreprocessor._load_single_item",
            "BadRequestError",
            new_file=PREPROCESSOR,
            since="0.5.18",
        ),
        fields=("expected:word", "got:word"),
        meaning="The content hash sent with an image is not the hash of the bytes the encode server loaded: "
        "the language side hashed other bytes, or the image at the URL changed between the two loads.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-no-image-processor",
        "No image processor available",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._process_image_items",
            "EncoderPreprocessor._process_image_items",
            "ValueError",
            new_file=PREPROCESSOR,
        ),
        meaning="The encode server has no image processor (see 'Failed to load image processor' at its start).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-image-processor-load",
        "Failed to load image processor: {}",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._load_mm_processor", "EncoderPreprocessor._load_mm_processor", "warning", new_file=PREPROCESSOR
        ),
        fields=("error",),
        meaning="The encode server could not load the checkpoint's image processor (remote code, "
        "preprocessor_config.json).",
        after="Logged, not raised: the encode server starts without one, and every image encode request then "
        "fails with 'No image processor available'.",
    ),
    Message(
        "epd-unsupported-modality",
        "Unsupported modality: {}",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._process_mm_items", "EncoderPreprocessor.process_mm_items", "ValueError", new_file=PREPROCESSOR
        ),
        fields=("modality:word",),
        meaning="The encode request names a modality the encode server does not process.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-grid-dim",
        "Grid dim ({}) not found in {}",
        Stage.EPD,
        encode_server_sites(
            "_get_mm_grid_dim", "EncoderPreprocessor._get_mm_grid_dim", "ValueError", new_file=PREPROCESSOR
        ),
        fields=("attribute:word", "inputs"),
        meaning="The processor's output has no grid under the name the encode server reads for this model "
        "(image_grid_thw / grid_thws): the processor is not the model's.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-feature-attrs",
        "Feature attrs ({}) not found in {}",
        Stage.EPD,
        encode_server_sites("_get_mm_feature", "_get_mm_feature", "ValueError"),
        fields=("attribute:word", "inputs"),
        meaning="The processor's output has no pixel feature under the name the encode server reads for this "
        "model: the processor is not the model's.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-kimi-grid",
        "Invalid Kimi image grid metadata: {}; expected [h, w] or [t, h, w]",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._kimi_hw_from_patch_grid",
            "EncoderPreprocessor._kimi_hw_from_patch_grid",
            "ValueError",
            new_file=PREPROCESSOR,
        ),
        fields=("grid:list",),
        meaning="An image's grid from the processor is neither [h, w] nor [t, h, w], so its token count "
        "cannot be computed.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-image-shape",
        "Invalid image tensor shape: {}",
        Stage.EPD,
        encode_server_sites(
            "_get_original_image_size", "_get_original_image_size", "ValueError", new_file=PREPROCESSOR
        ),
        fields=("shape:shape",),
        meaning="An image tensor has neither 2 nor 3 dimensions, so its original size (written into the K3 "
        "prompt block) cannot be read.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-image-size",
        "Cannot determine original image size from {}",
        Stage.EPD,
        encode_server_sites("_get_original_image_size", "_get_original_image_size", "TypeError", new_file=PREPROCESSOR),
        fields=("type:type",),
        meaning="An image is neither a PIL image nor a tensor, so its original size cannot be read.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-failed-to-process",
        "Failed to process mm items: {}",
        Stage.EPD,
        (
            site(ENCODE_SERVER, "MMEncoder._encode", "BadRequestError", "0.5.17-0.5.18"),
            site(SERVER, "MMEncoder._prepare_encode_context", "BadRequestError", "0.5.19-0.5.23"),
            site(SERVER, "MMEncoder._prepare_encode_context", "InternalError", "0.5.20-0.5.23"),
        ),
        fields=("error",),
        meaning="Preprocessing the encode request's images failed. " + WRAPPED,
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-not-implemented",
        "Not implemented error: {}",
        Stage.EPD,
        encode_server_sites("MMEncoder._encode", "MMEncoder._prepare_encode_context", "InternalError"),
        fields=("error",),
        meaning="The encode server met a path it does not implement for this model or modality. " + WRAPPED,
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-bad-request",
        "Bad request error: {}",
        Stage.EPD,
        encode_server_sites("MMEncoder._encode", "MMEncoder._compute_direct_embedding", "BadRequestError"),
        fields=("error",),
        meaning="Encoding failed on the request's own data. " + WRAPPED,
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-internal-error",
        "Internal encoding error: {}",
        Stage.EPD,
        encode_server_sites("MMEncoder._encode", "MMEncoder._compute_direct_embedding", "InternalError"),
        fields=("error",),
        meaning="The vision tower (or the features it was given) failed on the encode server. " + WRAPPED,
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-vit-failed",
        "VIT forward failed: {}",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder._send", "InternalError", "0.5.17-0.5.18"),),
        fields=("error",),
        meaning="The vision tower failed for this request before its embedding could be sent. " + WRAPPED,
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-rank0-no-embedding",
        "Rank 0 produced no embedding for {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._stage_embeddings", "InternalError", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="The encode server's rank 0, which sends the embedding, has none for the request after encoding.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-no-embedding",
        "No embedding available for request: {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._wait_for_embedding", "InternalError", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="The language server asked for an embedding the encode server does not hold (never computed, "
        "or already released).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-embedding-metadata",
        "Embedding metadata mismatch for {}: expected={}/{}, actual={}/{}",
        Stage.EPD,
        (
            site(SERVER, "MMEncoder._stage_embedding", "InternalError", "0.5.19"),
            site(SERVER, "MMEncoder._embedding_state_for_stage", "InternalError", "0.5.20-0.5.23"),
        ),
        fields=("request:word", "expected_shape:shape", "expected_dtype:dtype", "shape:shape", "dtype:dtype"),
        meaning="The embedding staged for sending has another shape or dtype than the metadata published for "
        "it (which the language server sized its buffer by).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-embedding-size",
        "Embedding size mismatch for {}: actual={}, expected={} (shape={}, element_size={})",
        Stage.EPD,
        encode_server_sites("MMEncoder._send", "MMEncoder._send", "AssertionError"),
        fields=("request:word", "actual:n", "expected:n", "shape:shape", "element_size:n"),
        meaning="The embedding's bytes differ from what the language server's receive buffer expects (rows × "
        "hidden size × element size): the encoder produced another number of rows than were announced.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-mooncake-no-embedding",
        "No embedding available for Mooncake GPU-direct transfer: {}",
        Stage.EPD,
        encode_server_sites("MMEncoder._send", "MMEncoder._send", "InternalError"),
        fields=("request:word",),
        meaning="The Mooncake transfer of a request's embedding started with no embedding computed for it.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-mooncake-transfer",
        "Mooncake transfer_sync failed for {} (session={}, nbytes={}, ret={})",
        Stage.EPD,
        encode_server_sites("MMEncoder._send", "MMEncoder._send", "InternalError"),
        fields=("request:word", "session:word", "nbytes:n", "ret:n"),
        meaning="The RDMA transfer of the embedding to the language server failed (network, or a receive buffer "
        "that is gone).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-cached-not-available",
        "Cached embedding {} not available for req {}",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._assemble_global_cache_cpu", "MMEncoder._assemble_global_cache_cpu", "InternalError"
        ),
        fields=("hash:word", "request:word"),
        meaning="An image found in the global embedding cache was gone when the request's embedding was assembled.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-cached-disappeared",
        "Cached embedding {} disappeared during assembly for req {}",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._assemble_global_cache_gpu", "MMEncoder._assemble_global_cache_gpu", "InternalError"
        ),
        fields=("hash:word", "request:word"),
        meaning="An image found in the global embedding cache was evicted while the request's embedding was assembled.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-cache-hits-failed",
        "Req {}: {}/{} cache-hit items failed to load, falling back to ViT",
        Stage.EPD,
        encode_server_sites(
            "MMEncoder._wait_global_cache_prefetch", "MMEncoder._wait_global_cache_prefetch", "warning"
        ),
        fields=("request:word", "failed:n", "hits:n"),
        meaning="Some images found in the global embedding cache could not be loaded from it.",
        after=CACHE_FALLBACK,
    ),
    Message(
        "epd-prefetch-failed",
        "Prefetch failed for req {}: {}. Falling back to ViT for {} hit items.",
        Stage.EPD,
        encode_server_sites("MMEncoder._wait_global_cache_prefetch", "MMEncoder._wait_global_cache_prefetch", "error"),
        fields=("request:word", "error", "hits:n"),
        meaning="Loading the request's images from the global embedding cache failed.",
        after=CACHE_FALLBACK,
    ),
    Message(
        "epd-cache-lookup-failed",
        "Global multimodal cache lookup failed for req {}; falling back to ViT",
        Stage.EPD,
        (site(SERVER, "MMEncoder._lookup_global_cache", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="Looking the request's images up in the global embedding cache failed.",
        after=CACHE_FALLBACK,
    ),
    Message(
        "epd-cache-prefetch-failed",
        "Global multimodal cache prefetch failed for req {}; falling back to ViT",
        Stage.EPD,
        (site(SERVER, "MMEncoder._prefetch_global_cache_hits", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="Starting to load the request's cached images from the global embedding cache failed.",
        after=CACHE_FALLBACK,
    ),
    Message(
        "epd-cache-staging-failed",
        "Global multimodal cache staging failed for req {}; skipping insert",
        Stage.EPD,
        (site(SERVER, "MMEncoder._stage_global_cache_slices", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="The request's new embeddings could not be prepared for the global embedding cache.",
        after="Logged, not raised: the embeddings are not cached; the request goes on with the right features.",
    ),
    Message(
        "epd-cache-insert-failed",
        "Global multimodal cache insert failed for req {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._launch_global_cache_insert._background_insert", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="Writing the request's new embeddings into the global embedding cache failed.",
        after="Logged, not raised: the embeddings are not cached; the request goes on with the right features.",
    ),
    Message(
        "epd-delivery-failed",
        "[{}] embedding delivery failed: {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder.send_with_url", "MMError", "0.5.21-0.5.23"),),
        fields=("request:word", "failure"),
        meaning="The encode server computed the request's embedding but could not deliver it to the language "
        "server(s): 'delivery failed for [URLs]' (a send raised) or 'timed out after Ns with k/n destination(s) "
        "initiated' (the language side never registered where to send it). The images themselves were encoded.",
        after="The encode server fails the request (HTTP 502, 504 for the time-out) and the language server gets "
        "no embedding for it: in language-only mode the request fails with 'The encoder did not return "
        "multimodal embeddings' (HTTP 503).",
    ),
)
