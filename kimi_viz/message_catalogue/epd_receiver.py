"""Stage 7, EPD transfer, the language server's side: it sends the images to an encode server, receives the
embedding in parts, assembles it, rebuilds the prompt's ``<|media_pad|>`` runs from the encoder's grids
(``get_mm_data``) and checks the rows against the prompt's offsets before the request is scheduled."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import BASE, COMMON, ENCODE_RECEIVER, K3, RECEIVE_FAILS, RECEIVER, REFUSED, TOKENIZER_MANAGER, site

VALIDATE = "BaseMultimodalProcessor._validate_precomputed_embedding_layout"
PART = "_validate_embedding_part"
URL_DATA = "MMReceiverBase._extract_url_data"
REQUEST_FAILS = "The language server fails the request with the encoder's error; it does not encode the images locally."
NOT_DELIVERED = (
    "The request gets no embedding: the language server fails it ('The encoder did not return multimodal "
    "embeddings', HTTP 503) rather than encoding the images itself."
)


def _both(old_function: str, new_function: str, kind: str, *, since: str = "0.5.17") -> tuple:
    """The same message in encode_receiver.py (``since``-0.5.18) and encoder/receiver.py (0.5.19-0.5.23)."""
    return (
        site(ENCODE_RECEIVER, old_function, kind, f"{since}-0.5.18"),
        site(RECEIVER, new_function, kind, "0.5.19-0.5.23"),
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
        _both("MMReceiverBase._process_waiting_requests", "MMReceiverBase._process_waiting_requests", "error"),
        fields=("request:word",),
        meaning="The encode server's embedding did not arrive within the wait timeout: the encoder is slow, "
        "overloaded or failed without telling (look for the request in its log).",
        after="Logged, and the request is aborted ('Timeout waiting for image embedding', HTTP 408).",
    ),
    Message(
        "epd-recv-timeout",
        "[{}] Embedding recv timeout after {}s",
        Stage.EPD,
        _both("MMReceiverBase.recv_mm_data", "MMReceiverBase.recv_mm_data", "warning"),
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
        _both("MMReceiverBase._send_encode_request", "MMReceiverBase._send_encode_request", "warning"),
        fields=("request:word",),
        meaning="No encode server is registered (yet) with the language server's bootstrap.",
        after="Logged, not raised: the request goes on without an encode server; the language server runs "
        "the vision path itself, with its own processor config.",
    ),
    Message(
        "epd-encoder-error",
        "Encoder error for req_id={}: {} error_code={}",
        Stage.EPD,
        _both("MMReceiverBase._recv_mm_data", "MMReceiverBase._recv_mm_data", "warning"),
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
        _both("MMReceiverBase._process_waiting_requests", "MMReceiverBase._process_waiting_requests", "error"),
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
        _both("MultiModalEmbeddingData._set_part_grid", "MultiModalEmbeddingData._set_part_grid", "ValueError"),
        fields=("modality:word",),
        meaning="An embedding part names a modality the receiver does not know.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-hidden-dim",
        "hidden_dim mismatch in modality {}: {} vs {}",
        Stage.EPD,
        _both("_view_pool_buffer_by_modality", "_view_pool_buffer_by_modality", "AssertionError"),
        fields=("modality:word", "expected:n", "got:n"),
        meaning="The parts of one embedding disagree on the hidden size: encode servers of different models "
        "(or projector configs) answered one request.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-non-contiguous",
        "non-contiguous parts in modality {}",
        Stage.EPD,
        _both("_view_pool_buffer_by_modality", "_view_pool_buffer_by_modality", "AssertionError"),
        fields=("modality:word",),
        meaning="The parts of one embedding do not lie back to back in the receive pool.",
        after=RECEIVE_FAILS,
    ),
    Message(
        "epd-content-hash-count",
        "mm_content_hashes has {} entries for {} images",
        Stage.EPD,
        (
            *_both(URL_DATA, URL_DATA, "ValueError", since="0.5.18"),
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
        _both("MMReceiverGrpc.encode", "MMReceiverGrpc.encode", "NotImplementedError"),
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
    Message(
        "epd-encode-dispatch-failed",
        "Encode failed for request {}: {}",
        Stage.EPD,
        _both("MMReceiverBase._run_encode_in_thread", "MMReceiverBase._run_encode_in_thread", "error"),
        fields=("request:word", "error"),
        meaning="Sending the request's images to the encode server(s) raised (the encode server unreachable, "
        "refusing the request, or an HTTP / gRPC error); the error follows.",
        after="Logged, and a dispatch error (HTTP 502) is handed to the request, which fails with it; the images "
        "are not encoded locally.",
    ),
    Message(
        "epd-rdma-dispatch-failed",
        "RDMA encode request failed for rid={}: {}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "WaitingImageRDMARequest._run_encode_in_thread", "error", "0.5.17-0.5.18"),),
        fields=("request:word", "error"),
        meaning="Sending the request's images to the encode server for an RDMA (Mooncake) transfer raised; the "
        "error follows.",
        after="Logged, and the request is marked failed: it gets no embedding. " + NOT_DELIVERED,
    ),
    Message(
        "epd-send-request-failed",
        "Failed to send request to {}: {}",
        Stage.EPD,
        _both(
            "WaitingImageRequest.send_encode_request._send_single_request",
            "WaitingZmqRequest.send_encode_request._send_single_request",
            "error",
        ),
        fields=("url:word", "error"),
        meaning="The HTTP request carrying the images to one encode server failed (connection refused, time-out, "
        "an error status); the error follows.",
        after="Logged and raised again: the dispatch fails ('Encode failed for request ...') and so does the request.",
    ),
    Message(
        "epd-receive-url-timeout",
        "Request {} to encoder /scheduler_receive_url timed out ({}s) for req_id={}",
        Stage.EPD,
        _both(
            "WaitingImageRequest.send_encode_request.send_embedding_port",
            "WaitingZmqRequest.send_encode_request.send_embedding_port",
            "error",
        ),
        fields=("index:n", "timeout:n", "request:word"),
        meaning="Telling an encode server where to send the request's embedding (its receive port) timed out "
        "(SGLANG_ENCODER_HTTP_TIMEOUT).",
        after="Logged: that encode server does not know where to send its part, so the request waits for an "
        "embedding that does not come and times out ('Embedding recv timeout').",
    ),
    Message(
        "epd-receive-url-failed",
        "Request {} to encoder /scheduler_receive_url failed for req_id={}: {}",
        Stage.EPD,
        _both(
            "WaitingImageRequest.send_encode_request.send_embedding_port",
            "WaitingZmqRequest.send_encode_request.send_embedding_port",
            "error",
        ),
        fields=("index:n", "request:word", "error"),
        meaning="Telling an encode server where to send the request's embedding (its receive port) failed; the "
        "error follows.",
        after="Logged: that encode server does not know where to send its part, so the request waits for an "
        "embedding that does not come and times out ('Embedding recv timeout').",
    ),
    Message(
        "epd-grpc-request-failed",
        "Request {} failed: {}",
        Stage.EPD,
        _both(
            "WaitingImageRequestGrpc.send_encode_request.send_embedding_port",
            "WaitingZmqRequestGrpc.send_encode_request.send_embedding_port",
            "error",
        ),
        fields=("index:n", "error"),
        meaning="Over gRPC, telling an encode server where to send the request's embedding failed; the error follows.",
        after="Logged, and the first such error is raised: the dispatch fails ('Encode failed for request ...') "
        "and so does the request.",
    ),
    Message(
        "epd-register-receive-url",
        "Failed to register encoder receive URL for rid={}: {}",
        Stage.EPD,
        (site(RECEIVER, "WaitingZmqRequest._on_registration_done", "error", "0.5.20-0.5.23"),),
        fields=("request:word", "error"),
        meaning="Registering with the encode server where the request's embedding must be sent failed; the "
        "error follows.",
        after="Logged, and the error is recorded on the request, which fails with it instead of waiting for "
        "an embedding that cannot come.",
    ),
    Message(
        "epd-start-receive-failed",
        "Failed to start multimodal receive for rid={}",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase._process_waiting_requests", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="Setting up the receive of the request's embedding (its socket, buffer or encode dispatch) raised "
        "on this rank; the traceback follows.",
        after="Logged; the ranks agree on the failure ('Failed to start multimodal receive (...)') and the request "
        "fails.",
    ),
    Message(
        "epd-start-receive-ranks",
        "Failed to start multimodal receive ({})",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase._process_waiting_requests", "error", "0.5.20-0.5.23"),),
        fields=("details",),
        meaning="Setting up the receive of the request's embedding failed on one or more ranks; each rank's error "
        "follows ('rank N: ...').",
        after="Logged; the request's receive resources are released and the request fails with this error.",
    ),
    Message(
        "epd-release-receive-failed",
        "Failed to release multimodal receive resources for rid={}",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase._process_waiting_requests", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="After a failed receive set-up, freeing the request's receive buffer and registration raised too.",
        after="Logged, not raised: the request still fails with the set-up error; the buffer may stay held.",
    ),
    Message(
        "epd-close-receive-socket",
        "Failed to close multimodal receive socket for rid={}",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase._process_waiting_requests", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="After a failed receive set-up, closing the request's embedding socket raised too.",
        after="Logged, not raised: the request still fails with the set-up error.",
    ),
    Message(
        "epd-two-part-message",
        "zmq_to_tokenizer expected 2-part message, got {} parts",
        Stage.EPD,
        _both("MMReceiverBase._recv_mm_data", "MMReceiverBase._recv_mm_data", "error"),
        fields=("parts:n",),
        meaning="A message on the embedding socket (zmq_to_tokenizer transfer) lacked its tensor frame: metadata "
        "without the embedding bytes.",
        after="Logged, not raised: the message is dropped and the request keeps waiting (and times out if its "
        "embedding never comes).",
    ),
    Message(
        "epd-mooncake-buffer-missing",
        "mooncake: embeddings_buffer missing req_id={}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "MMReceiverBase._recv_mm_data", "error", "0.5.17-0.5.18"),),
        fields=("request:word",),
        meaning="The encode server reported a Mooncake transfer for the request, but the language server holds no "
        "receive buffer for it (already released, or never allocated).",
        after="Logged, not raised: no embedding is returned. " + NOT_DELIVERED,
    ),
    Message(
        "epd-drop-inactive",
        "Dropping embedding data for inactive request {}",
        Stage.EPD,
        _both("MMReceiverBase._drain_scheduler_embeddings", "MMReceiverBase._drain_scheduler_embeddings", "warning"),
        fields=("request:word",),
        meaning="An embedding part arrived for a request this server no longer waits for (finished, aborted or "
        "timed out).",
        after="Logged, not raised: the part is dropped; no waiting request is affected.",
    ),
    Message(
        "epd-drop-malformed",
        "Dropping malformed embedding data from the shared scheduler socket: {}",
        Stage.EPD,
        (site(RECEIVER, "MMReceiverBase._drain_scheduler_embeddings", "warning", "0.5.20-0.5.23"),),
        fields=("error",),
        meaning="A message on the shared embedding socket could not be unpickled; the error follows.",
        after="Logged, not raised: the message is dropped; its request keeps waiting (and times out if its "
        "embedding never comes).",
    ),
    Message(
        "epd-drop-non-embedding",
        "Dropping non-embedding data{}",
        Stage.EPD,
        (site(RECEIVER, "_resolve_embedding_part_request_id", "warning", "0.5.20-0.5.23"),),
        fields=("context",),
        meaning="A message on an embedding socket is not an embedding part.",
        after="Logged, not raised: the message is dropped and the request keeps waiting for its own parts.",
    ),
    Message(
        "epd-drop-bad-req-id",
        "Dropping embedding data with a non-string req_id{}",
        Stage.EPD,
        (site(RECEIVER, "_resolve_embedding_part_request_id", "warning", "0.5.20-0.5.23"),),
        fields=("context",),
        meaning="An embedding part carries no usable request id, so it cannot be matched to a request.",
        after="Logged, not raised: the part is dropped and the request keeps waiting for its own parts.",
    ),
    Message(
        "epd-pool-full",
        "EmbeddingPool full; rid={} pending for {}MB. Raise SGLANG_EMBEDDING_POOL_SIZE_MB if this is frequent.",
        Stage.EPD,
        (site(RECEIVER, "WaitingZmqRequest._try_stage_into_pool", "warning", "0.5.19-0.5.23"),),
        fields=("request:word", "size:n"),
        meaning="The request's received embedding parts wait for room in the GPU embedding pool, which other "
        "requests' embeddings fill.",
        after="Logged once per request, not raised: the request retries each tick and goes on once a slot frees "
        "(only later).",
    ),
    Message(
        "epd-rdma-receive-failed",
        "RDMA receive failed for rid={}: {}",
        Stage.EPD,
        (site(RECEIVER, "WaitingRDMARequest._run_receive_in_thread", "error", "0.5.19-0.5.23"),),
        fields=("request:word", "error"),
        meaning="Pulling the request's embedding metadata or receiving its RDMA (Mooncake) transfer failed; the "
        "error follows.",
        after="Logged, and the error is recorded on the request, which fails with it.",
    ),
    Message(
        "epd-deregister-gpu-buffer",
        "Failed to deregister GPU buffer for rid={}",
        Stage.EPD,
        _both("WaitingImageRDMARequest._cleanup_gpu_buffer", "WaitingRDMARequest._release_buffer_locked", "exception"),
        fields=("request:word",),
        meaning="Releasing the GPU buffer that received the request's embedding over RDMA failed to deregister it "
        "from Mooncake.",
        after="Logged, not raised: the request is unaffected; the buffer's registration may leak.",
    ),
    Message(
        "epd-deregister-mooncake-buffer",
        "mooncake: failed to deregister buffer for req_id={}",
        Stage.EPD,
        (site(ENCODE_RECEIVER, "MMReceiverBase._cleanup_mooncake_buffer", "exception", "0.5.17-0.5.18"),),
        fields=("request:word",),
        meaning="Releasing the buffer that received the request's embedding over Mooncake failed to deregister it.",
        after="Logged, not raised: the request is unaffected; the buffer's registration may leak.",
    ),
    Message(
        "epd-grpc-cancel-drain",
        "gRPC call failed while draining cancellation: {}",
        Stage.EPD,
        (site(RECEIVER, "_gather_blocking_grpc_calls", "error", "0.5.20-0.5.23"),),
        fields=("error",),
        meaning="The request was cancelled while its gRPC calls to the encode server(s) ran, and one of them "
        "failed as it finished.",
        after="Logged, not raised: the cancellation goes on; the request is already aborted.",
    ),
)
