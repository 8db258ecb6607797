"""Stage 7, EPD transfer, the language server's side: it sends the images to an encode server, receives the
embedding in parts, assembles it, rebuilds the prompt's ``<|media_pad|>`` runs from the encoder's grids
(``get_mm_data``) and checks the rows against the prompt's offsets before the request is scheduled."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import (
    BASE,
    COMMON,
    ENCODE_RECEIVER,
    K3,
    RECEIVE_FAILS,
    RECEIVER,
    REFUSED,
    TOKENIZER_MANAGER,
    receiver_sites,
    site,
)

VALIDATE = "BaseMultimodalProcessor._validate_precomputed_embedding_layout"
PART = "_validate_embedding_part"
URL_DATA = "MMReceiverBase._extract_url_data"
REQUEST_FAILS = "The language server fails the request with the encoder's error; it does not encode the images locally."
NOT_DELIVERED = (
    "The request gets no embedding: the language server fails it ('The encoder did not return multimodal "
    "embeddings', HTTP 503) rather than encoding the images itself."
)


MESSAGES: tuple[Message, ...] = (
    Message(
        "epd-rows-vs-offsets",
        "Precomputed multimodal embedding length mismatch for {}: expected {} rows from prompt offsets, got {}",
        Stage.EPD,
        (site(BASE, VALIDATE, "RuntimeError", "0.5.20-0.5.23"),),
        fields=("modality:word", "expected:n", "got:n"),
        meaning="An item's rows from the encode server differ from the <|media_pad|> tokens its offsets cover "
        "in the prompt: the encoder sized the image differently from the language side (another processor "
        "config or release), or its feature did not follow its grid.",
        after=REFUSED,
    ),
    Message(
        "epd-rows-consumed",
        "Precomputed multimodal embedding consumption mismatch for {}: received {} rows, consumed {}",
        Stage.EPD,
        (site(BASE, VALIDATE, "RuntimeError", "0.5.20-0.5.23"),),
        fields=("modality:word", "received:n", "consumed:n"),
        meaning="The encode server sent more (or fewer) rows than the request's items use: its images or grids "
        "differ from the prompt's.",
        after=REFUSED,
    ),
    Message(
        "epd-items-not-tensors",
        "EPD multimodal items must contain tensor embeddings; got {} for {}",
        Stage.EPD,
        (site(BASE, VALIDATE, "RuntimeError", "0.5.20-0.5.23"),),
        fields=("type:word", "modality:word"),
        meaning="An item rebuilt from the encoder's output holds no tensor embedding.",
        after=REFUSED,
    ),
    Message(
        "epd-output-not-tensor",
        "EPD encoder output must contain tensor embeddings; got {} for {}",
        Stage.EPD,
        (site(BASE, VALIDATE, "RuntimeError", "0.5.20-0.5.23"),),
        fields=("type:word", "modality:word"),
        meaning="The encode server's output for a modality is not a tensor.",
        after=REFUSED,
    ),
    Message(
        "epd-unexpected-modality",
        "EPD processor returned an unexpected embedding modality: {}",
        Stage.EPD,
        (site(BASE, VALIDATE, "RuntimeError", "0.5.20-0.5.23"),),
        fields=("modality:word",),
        meaning="An item rebuilt from the encoder's output has a modality the encoder sent no embedding for.",
        after=REFUSED,
    ),
    Message(
        "epd-original-sizes",
        "Expected one original image size for each K3 encoder grid.",
        Stage.EPD,
        (site(K3, "KimiK3ImageProcessor.get_mm_data", "ValueError", "0.5.17-0.5.23"),),
        meaning="The encode server sent another number of original image sizes than grids, so the K3 prompt "
        "blocks ('<|media_begin|>image WxH...') cannot be written.",
        after=REFUSED,
    ),
    Message(
        "epd-placeholders-exceed-grids",
        "The number of image placeholders exceeds img_grid_thw entries.",
        Stage.EPD,
        (site(COMMON, "KimiGridMMDataMixin._build_kimi_mm_data_from_grids", "ValueError", "0.5.17-0.5.23"),),
        meaning="Rebuilding the prompt from the encoder's grids: the prompt holds more <|media_pad|> than the "
        "encoder returned grids (it encoded fewer images than the prompt has).",
        after=REFUSED,
    ),
    Message(
        "epd-placeholders-vs-grids",
        "The number of image placeholders does not match img_grid_thw entries.",
        Stage.EPD,
        (site(COMMON, "KimiGridMMDataMixin._build_kimi_mm_data_from_grids", "ValueError", "0.5.17-0.5.23"),),
        meaning="Rebuilding the prompt from the encoder's grids: the prompt holds fewer <|media_pad|> than the "
        "encoder returned grids.",
        after=REFUSED,
    ),
    Message(
        "epd-timed-out",
        "Timed out waiting for image embeddings for request {}",
        Stage.EPD,
        receiver_sites("MMReceiverBase._process_waiting_requests", "MMReceiverBase._process_waiting_requests", "error"),
        fields=("request:word",),
        meaning="The encode server's embedding did not arrive within the wait timeout: the encoder is slow, "
        "overloaded or failed without telling (look for the request in its log).",
        after="Logged, and the request is aborted ('Timeout waiting for image embedding', HTTP 408).",
    ),
    Message(
        "epd-recv-timeout",
        "[{}] Embedding recv timeout after {}s",
        Stage.EPD,
        receiver_sites("MMReceiverBase.recv_mm_data", "MMReceiverBase.recv_mm_data", "warning"),
        fields=("request:word", "seconds:n"),
        meaning="The tokenizer waited for the encode server's embedding (zmq_to_tokenizer) past its timeout.",
        after="Logged, not raised: no embedding is returned. " + NOT_DELIVERED,
    ),
    Message(
        "epd-dispatch-failed",
        "[{}] Encoder dispatch failed; skipping embedding wait",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase.recv_mm_data", "warning", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="Sending the images to the encode server failed, so no embedding will come.",
        after="Logged, not raised: no embedding is returned. " + NOT_DELIVERED,
    ),
    Message(
        "epd-no-encoder-urls",
        "No encoder URLs available for request {}; processing without encoder disaggregation.",
        Stage.EPD,
        receiver_sites("MMReceiverBase._send_encode_request", "MMReceiverBase._send_encode_request", "warning"),
        fields=("request:word",),
        meaning="No encode server is registered (yet) with the language server's bootstrap.",
        after="Logged, not raised: the request goes on without an encode server; the language server runs "
        "the vision path itself, with its own processor config.",
    ),
    Message(
        "epd-encoder-error",
        "Encoder error for req_id={}: {} error_code={}",
        Stage.EPD,
        receiver_sites("MMReceiverBase._recv_mm_data", "MMReceiverBase._recv_mm_data", "warning"),
        fields=("request:word", "error", "code:word"),
        meaning="The encode server reported that encoding this request failed; its error follows.",
        after="Logged, not raised: no embedding is returned. " + NOT_DELIVERED,
    ),
    Message(
        "epd-receive-failed",
        "Failed to receive encoder embeddings for req_id={}",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase._recv_mm_data", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="Receiving or decoding the encode server's embedding failed (the traceback follows).",
        after="Logged, not raised: no embedding is returned. " + NOT_DELIVERED,
    ),
    Message(
        "epd-waiting-failed",
        "Waiting request {} failed: {} waiting_req.error_code = {}",
        Stage.EPD,
        receiver_sites("MMReceiverBase._process_waiting_requests", "MMReceiverBase._process_waiting_requests", "error"),
        fields=("request:word", "error", "code:word"),
        meaning="A request waiting in the scheduler for its embedding failed; the encoder's error follows.",
        after="Logged, and the request is aborted with that error.",
    ),
    Message(
        "epd-error-signal",
        "Received error signal from encoder for {}: {} recv_obj.error_code = {}",
        Stage.EPD,
        (
            site(ENCODE_RECEIVER, "WaitingImageRequest.consume_parts", "warning", "0.5.17-0.5.18"),
            site(RECEIVER, "WaitingMMRequestBase.consume_parts", "warning", "0.5.19-0.5.23"),
        ),
        fields=("request:word", "error", "code:word"),
        meaning="The encode server sent an error instead of the embedding; its error follows.",
        after="Logged, and the request is marked failed and aborted ('Waiting request ... failed').",
    ),
    Message(
        "epd-received-error",
        "Received error for {}: {}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "WaitingImageRDMARequest._try_recv_mm_data", "warning", "0.5.17-0.5.18"),),
        fields=("request:word", "error"),
        meaning="The encode server sent an error instead of the embedding (RDMA transfer).",
        after="Logged, and the request is marked failed and aborted.",
    ),
    Message(
        "epd-encoder-timeout",
        "Encoder {} timeout ({}s) for {} (request {})",
        Stage.EPD,
        (site(RECEIVER, "_extract_encoder_error", "error", "0.5.19-0.5.23"),),
        fields=("encoder:word", "seconds:n", "request", "part:n"),
        meaning="An encode server did not answer the encode request in time.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-encoder-timeout-old",
        "Encoder {} timeout ({}s) for rid={} (request {})",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "WaitingImageRDMARequest._check_encoder_responses", "error", "0.5.17-0.5.18"),),
        fields=("encoder:word", "seconds:n", "request:word", "part:n"),
        meaning="An encode server did not answer the encode request in time.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-encoder-failed",
        "Encoder {} failed for {} (request {}): {}",
        Stage.EPD,
        (site(RECEIVER, "_extract_encoder_error", "error", "0.5.19-0.5.23"),),
        fields=("encoder:word", "request", "part:n", "error"),
        meaning="The call to an encode server failed (connection or server error); the error follows.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-encoder-failed-old",
        "Encoder {} failed for rid={} (request {}): {}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "WaitingImageRDMARequest._check_encoder_responses", "error", "0.5.17-0.5.18"),),
        fields=("encoder:word", "request:word", "part:n", "error"),
        meaning="The call to an encode server failed (connection or server error); the error follows.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-encoder-returned-error",
        "Encoder {} returned error {}: {}",
        Stage.EPD,
        (
            site(ENCODE_RECEIVER, "WaitingImageRDMARequest._check_encoder_responses", "error", "0.5.17-0.5.18"),
            site(RECEIVER, "_extract_encoder_error", "error", "0.5.19-0.5.23"),
        ),
        fields=("encoder:word", "status:n", "error"),
        meaning="An encode server answered the encode request with an HTTP error; its message follows (often "
        "one of the encode-side errors of this stage).",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-http-timeout",
        "Encoder HTTP request timeout ({}s) for req_id={} (request {}), encoder={}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "MMReceiverHTTP._check_encoder_responses", "error", "0.5.17-0.5.18"),),
        fields=("seconds:n", "request:word", "part:n", "encoder:word"),
        meaning="An encode server did not answer the encode request in time.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-http-failed",
        "Encoder HTTP request failed for req_id={} (request {}): {}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "MMReceiverHTTP._check_encoder_responses", "error", "0.5.17-0.5.18"),),
        fields=("request:word", "part:n", "error"),
        meaning="The HTTP call to an encode server failed; the error follows.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-http-returned-error",
        "Encoder returned error {}: {}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "MMReceiverHTTP._check_encoder_responses", "error", "0.5.17-0.5.18"),),
        fields=("status:n", "error"),
        meaning="An encode server answered with an HTTP error; its message follows.",
        after="Logged, and the request fails with this error.",
    ),
    Message(
        "epd-decode-failed",
        "Failed to decode embedding message for rid={}",
        Stage.EPD,
        (
            site(ENCODE_RECEIVER, "WaitingImageRequest.consume_parts", "exception", "0.5.17-0.5.18"),
            site(RECEIVER, "WaitingMMRequestBase.consume_parts", "exception", "0.5.19-0.5.23"),
        ),
        fields=("request:word",),
        meaning="A part of the request's embedding could not be decoded or did not pass the part checks (the "
        "traceback follows).",
        after="Logged, and the request is marked failed and aborted.",
    ),
    Message(
        "epd-assemble-failed",
        "Failed to assemble multimodal inputs for rid={}",
        Stage.EPD,
        (
            site(ENCODE_RECEIVER, "WaitingImageRequest.consume_parts", "exception", "0.5.17-0.5.18"),
            site(RECEIVER, "WaitingMMRequestBase._fail_assemble", "exception", "0.5.19-0.5.23"),
        ),
        fields=("request:word",),
        meaning="All parts arrived but building the request's items from them failed, e.g. the grids and rows "
        "do not fit the prompt (the traceback follows).",
        after="Logged, and the request is marked failed and aborted.",
    ),
    Message(
        "epd-stale-data",
        "Dropping stale embedding data: expected rid={}, got rid={} (likely from ZMQ port reuse)",
        Stage.EPD,
        (
            site(ENCODE_RECEIVER, "WaitingImageRequest.consume_parts", "warning", "0.5.17-0.5.18"),
            site(ENCODE_RECEIVER, "WaitingImageRDMARequest._try_recv_mm_data", "warning", "0.5.17-0.5.18"),
            site(RECEIVER, "WaitingMMRequestBase._is_valid_embedding_part", "warning", "0.5.19"),
            site(RECEIVER, "_resolve_embedding_part_request_id", "warning", "0.5.20-0.5.23"),
        ),
        fields=("expected:word", "got:word"),
        meaning="An embedding part for another (earlier) request arrived on this request's socket.",
        after="Logged, not raised: the part is dropped and the request keeps waiting for its own.",
    ),
    Message(
        "epd-mismatched-req-id",
        "Dropping embedding data with mismatched req_id: expected {}, got {}",
        Stage.EPD,
        (
            site(ENCODE_RECEIVER, "MultiModalEmbeddingData.add", "warning", "0.5.17-0.5.18"),
            site(RECEIVER, "MultiModalEmbeddingData.add", "warning", "0.5.19"),
        ),
        fields=("expected:word", "got:word"),
        meaning="An embedding part of another encode request was offered to this request's embedding.",
        after="Logged, not raised: the part is dropped and the request keeps waiting for its own.",
    ),
    Message(
        "epd-part-type",
        "expected EmbeddingData, got {}",
        Stage.EPD,
        (site(RECEIVER, PART, "ValueError", "0.5.20-0.5.23"),),
        fields=("type:word",),
        meaning="A message on the embedding socket is not an embedding part.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-part-count",
        "num_parts must be a positive integer",
        Stage.EPD,
        (site(RECEIVER, PART, "ValueError", "0.5.20-0.5.23"),),
        meaning="An embedding part announces no valid number of parts.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-part-index",
        "part_idx must be in [0, {}), got {}",
        Stage.EPD,
        (site(RECEIVER, PART, "ValueError", "0.5.20-0.5.23"),),
        fields=("parts:n", "index:n"),
        meaning="An embedding part's index is outside the announced number of parts.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-part-req-id",
        "embedding req_id mismatch: expected {}, got {}",
        Stage.EPD,
        (site(RECEIVER, PART, "ValueError", "0.5.20-0.5.23"),),
        fields=("expected:word", "got:word"),
        meaning="An embedding part of another encode request joined this request's embedding.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-part-count-changed",
        "num_parts changed from {} to {}",
        Stage.EPD,
        (site(RECEIVER, PART, "ValueError", "0.5.20-0.5.23"),),
        fields=("before:n", "after:n"),
        meaning="Two parts of one embedding announce different numbers of parts (e.g. encode servers of "
        "different configs answering one request).",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-part-duplicate",
        "duplicate embedding part {}",
        Stage.EPD,
        (site(RECEIVER, PART, "ValueError", "0.5.20-0.5.23"),),
        fields=("index:n",),
        meaning="The same part of the request's embedding arrived twice.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-part-modality",
        "Invalid modality: {}",
        Stage.EPD,
        receiver_sites(
            "MultiModalEmbeddingData._set_part_grid", "MultiModalEmbeddingData._set_part_grid", "ValueError"
        ),
        fields=("modality:word",),
        meaning="An embedding part names a modality the receiver does not know.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-hidden-dim",
        "hidden_dim mismatch in modality {}: {} vs {}",
        Stage.EPD,
        receiver_sites("_view_pool_buffer_by_modality", "_view_pool_buffer_by_modality", "AssertionError"),
        fields=("modality:word", "expected:n", "got:n"),
        meaning="The parts of one embedding disagree on the hidden size: encode servers of different models "
        "(or projector configs) answered one request.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-non-contiguous",
        "non-contiguous parts in modality {}",
        Stage.EPD,
        receiver_sites("_view_pool_buffer_by_modality", "_view_pool_buffer_by_modality", "AssertionError"),
        fields=("modality:word",),
        meaning="The parts of one embedding do not lie back to back in the receive pool.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-content-hash-count",
        "mm_content_hashes has {} entries for {} images",
        Stage.EPD,
        (
            *receiver_sites(URL_DATA, URL_DATA, "ValueError", since="0.5.18"),
            site(TOKENIZER_MANAGER, "TokenizerManager._normalize_mm_content_hashes", "ValueError", "0.5.18-0.5.23"),
        ),
        fields=("hashes:n", "images:n"),
        meaning="The request's mm_content_hashes has another length than its images: the tokenizer manager checks "
        "it for every request with images, the EPD receiver again before it sends the images to the encoder.",
        after=REFUSED,
    ),
    Message(
        "epd-grpc-image-only",
        "gRPC encode only supports IMAGE modality, got: {}",
        Stage.EPD,
        receiver_sites("MMReceiverGrpc.encode", "MMReceiverGrpc.encode", "NotImplementedError"),
        fields=("modality",),
        meaning="A request with video or audio was sent to a gRPC encode server, which takes images only.",
        after=REFUSED,
    ),
    Message(
        "epd-no-embeddings-language-only",
        "The encoder did not return multimodal embeddings. The request was not run locally in language-only mode.",
        Stage.EPD,
        (site(TOKENIZER_MANAGER, "_reject_missing_dispatched_encoder_embedding", "HTTPException", "0.5.17-0.5.23"),),
        meaning="A language-only server (encoder disaggregation, zmq_to_tokenizer transfer) waited for the "
        "request's embedding from the encode server and got none: the encoder failed, timed out or could not "
        "deliver. The language server has no vision tower to fall back on; the encode server's log holds the "
        "cause (look for the request id there).",
        after="The request fails with HTTP 503 (Service Unavailable); the server goes on.",
    ),
    Message(
        "epd-dispatch-batch",
        "Batch request (batch_size={}) is not supported in EPD disaggregation mode; skipping encoder dispatch.",
        Stage.EPD,
        (site(TOKENIZER_MANAGER, "TokenizerManager._should_dispatch_to_encoder", "warning", "0.5.17-0.5.23"),),
        fields=("batch_size:n",),
        meaning="A batch of prompts with images reached a language-only server with adaptive dispatch: the "
        "encode server is not asked for its images.",
        after="Logged, not raised: the request is not dispatched to the encoder; the language server processes its "
        "images locally where its transfer mode allows, else the request waits for an embedding that never comes.",
    ),
    Message(
        "epd-local-fallback",
        "Encoder embedding not available, falling back to local mm processing",
        Stage.EPD,
        (site(TOKENIZER_MANAGER, "TokenizerManager._tokenize_one_request", "warning", "0.5.17-0.5.23"),),
        meaning="A language-only server (zmq_to_tokenizer transfer) received no embedding for the request from "
        "the encode server and runs the Kimi processor on its images itself.",
        after="Logged, not raised: the request goes on with features the language server's own processor made "
        "(needs a vision tower on that server).",
    ),
)
