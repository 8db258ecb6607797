"""Stage 7, EPD transfer, the language server's receiving side: dispatching the encode requests, registering
where embeddings arrive, and the sockets, pools and buffers that receive them before they are assembled."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import ENCODE_RECEIVER, RECEIVER, receiver_sites, site
from .epd_receiver import NOT_DELIVERED

MESSAGES: tuple[Message, ...] = (
    Message(
        "epd-encode-dispatch-failed",
        "Encode failed for request {}: {}",
        Stage.EPD,
        receiver_sites("MMReceiverBase._run_encode_in_thread", "MMReceiverBase._run_encode_in_thread", "error"),
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
        receiver_sites(
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
        receiver_sites(
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
        receiver_sites(
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
        receiver_sites(
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
        receiver_sites("MMReceiverBase._recv_mm_data", "MMReceiverBase._recv_mm_data", "error"),
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
        receiver_sites(
            "MMReceiverBase._drain_scheduler_embeddings", "MMReceiverBase._drain_scheduler_embeddings", "warning"
        ),
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
        receiver_sites(
            "WaitingImageRDMARequest._cleanup_gpu_buffer", "WaitingRDMARequest._release_buffer_locked", "exception"
        ),
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
