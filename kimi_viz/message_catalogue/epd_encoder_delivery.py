"""Stage 7, EPD transfer, the encode server's delivery: handing each request's embedding to the language
server(s) - the per-rank encode failures it reports, the shared memory it registers, the sends and their
time-outs, and the request state it keeps until the embedding is gone."""

from __future__ import annotations

from ..messages import Message, Stage
from ._common import ENCODE_FAILS, ENCODE_SERVER, SERVER, encode_server_sites, site

MESSAGES: tuple[Message, ...] = (
    Message(
        "epd-rank-encode-failed-old",
        "Rank {} encode failed: {} error_code = {}",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder.encode", "error", "0.5.17-0.5.18"),),
        fields=("rank:n", "error", "code"),
        meaning="Preprocessing or encoding the request's images failed on this rank of the encode server; the "
        "error and its HTTP status follow.",
        after="Logged, and an error is stored in place of the request's embedding: " + ENCODE_FAILS,
    ),
    Message(
        "epd-rank-encode-failed",
        "Rank {} encode failed: {} code = {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._stage_errors", "error", "0.5.19-0.5.23"),),
        fields=("rank:n", "error", "code"),
        meaning="Preprocessing or encoding the request's images failed on this rank of the encode server; the "
        "error and its HTTP status follow.",
        after="Logged, and an error is staged in place of each request's embedding, so the send reports it: "
        + ENCODE_FAILS,
    ),
    Message(
        "epd-rank-batch-encode-failed",
        "Rank {} batch_encode failed: {} code = {}",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder._batch_set_error", "error", "0.5.17-0.5.18"),),
        fields=("rank:n", "error", "code"),
        meaning="Encoding a batch of encode requests failed on this rank of the encode server; the error and its "
        "HTTP status follow.",
        after="Logged, and an error is stored in place of each batched request's embedding: " + ENCODE_FAILS,
    ),
    Message(
        "epd-rank-mooncake-encode-failed",
        "Rank {} encode_with_mooncake failed: {} error_code = {}",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder.encode_with_mooncake", "error", "0.5.17-0.5.18"),),
        fields=("rank:n", "error", "code"),
        meaning="Encoding the request's images for a Mooncake transfer failed on this rank; the error and its "
        "HTTP status follow.",
        after="Logged, and the error is returned for the request: " + ENCODE_FAILS,
    ),
    Message(
        "epd-rank-cache-mooncake-encode-failed",
        "Rank {} encode_with_global_cache_mooncake failed: {} error_code = {}",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder.encode_with_global_cache_mooncake", "error", "0.5.17-0.5.18"),),
        fields=("rank:n", "error", "code"),
        meaning="Encoding the request's images (with the global embedding cache) for a Mooncake transfer failed "
        "on this rank; the error and its HTTP status follow.",
        after="Logged, and the error is returned for the request: " + ENCODE_FAILS,
    ),
    Message(
        "epd-mooncake-vit-failed",
        "VIT forward failed for {}: {}",
        Stage.EPD,
        (site(ENCODE_SERVER, "MMEncoder.encode_with_mooncake._run_forward", "error", "0.5.17-0.5.18"),),
        fields=("request:word", "error"),
        meaning="The vision tower failed on the request's images before a Mooncake transfer; the error follows.",
        after="Logged, and the error is recorded for the request, whose send then reports it: " + ENCODE_FAILS,
    ),
    Message(
        "epd-cache-vit-failed",
        "Global cache + VIT forward failed for {}: {}",
        Stage.EPD,
        (
            site(
                ENCODE_SERVER,
                "MMEncoder.encode_with_global_cache_mooncake._run_forward_with_cache",
                "error",
                "0.5.17-0.5.18",
            ),
        ),
        fields=("request:word", "error"),
        meaning="Assembling the request's embedding from the global embedding cache and the vision tower failed; "
        "the error follows.",
        after="Logged, and the error is recorded for the request, whose send then reports it: " + ENCODE_FAILS,
    ),
    Message(
        "epd-no-request-state",
        "No request state exists while encoding request: {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._require_active_encode_state", "InternalError", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="The encode server lost the request's state while encoding its images (released, e.g. after its "
        "time-out).",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-no-active-encode",
        "Request state has no active encode work: {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder._require_active_encode_state", "InternalError", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="The encode server's state for the request holds no encode in progress while it encodes the "
        "request's images: its bookkeeping and the work disagree.",
        after=ENCODE_FAILS,
    ),
    Message(
        "epd-shared-mr-register",
        "Shared-MR register failed for {}, falling back to per-/send register: {}",
        Stage.EPD,
        encode_server_sites("MMEncoder.encode_with_mooncake._run_forward", "MMEncoder._register_shared_mr", "warning"),
        fields=("request:word", "error"),
        meaning="Registering the request's embedding once with Mooncake for all its sends failed; the error follows.",
        after="Logged, not raised: each send registers the embedding itself; the request goes on (only slower).",
    ),
    Message(
        "epd-shared-mr-deregister",
        "Shared-MR deregister failed for {}: {}",
        Stage.EPD,
        (
            site(SERVER, "MooncakeDelivery.release", "warning", "0.5.19"),
            site(SERVER, "MMEncoder._deregister_shared_mr", "warning", "0.5.20-0.5.23"),
        ),
        fields=("request:word", "error"),
        meaning="Releasing the request's sent embedding failed to deregister it from Mooncake; the error follows.",
        after="Logged, not raised: the request is unaffected; the registration may leak.",
    ),
    Message(
        "epd-per-send-deregister",
        "Per-send MR deregistration also failed for {}; preserving the transfer error",
        Stage.EPD,
        (site(SERVER, "MMEncoder._send", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="A Mooncake transfer of the request's embedding failed, and deregistering its buffer afterwards "
        "failed too.",
        after="Logged; the transfer's error is raised: " + ENCODE_FAILS,
    ),
    Message(
        "epd-send-no-embedding",
        "MMEncoder.send: no embedding for req_id={} (already released or unknown)",
        Stage.EPD,
        (site(SERVER, "MMEncoder.send", "warning", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="The language server asked for the request's embedding after the encode server released it (a "
        "time-out or an earlier send), or for a request it never encoded.",
        after="Logged, not raised: nothing is sent, and the language server's request waits for an embedding "
        "that does not come ('Embedding recv timeout').",
    ),
    Message(
        "epd-request-released",
        "Encoder request was released: {}",
        Stage.EPD,
        (site(SERVER, "MMEncoder.send_to_destination", "InternalError", "0.5.19-0.5.23"),),
        fields=("request:word",),
        meaning="The request's embedding was released (a time-out or an abort) before it could be sent.",
        after="The send fails with this error and the language server gets no embedding for the request.",
    ),
    Message(
        "epd-release-stale",
        "Failed to release stale encoder request {}",
        Stage.EPD,
        (site(SERVER, "EncoderMetaRegistry._release_stale", "exception", "0.5.20-0.5.23"),),
        fields=("request:word",),
        meaning="Releasing a request whose embedding no language server fetched in time failed.",
        after="Logged, not raised: the request's metadata and buffer stay held until a later sweep releases them.",
    ),
    Message(
        "epd-send-to-failed",
        "Failed to send to {}: {}",
        Stage.EPD,
        (
            site(ENCODE_SERVER, "MMEncoder.send_with_url", "error", "0.5.17-0.5.18"),
            site(SERVER, "MMEncoder.send_with_url", "error", "0.5.19-0.5.23"),
        ),
        fields=("url:word", "failure"),
        meaning="The encode server could not send a request's embedding to one language-server destination "
        "(the send to that URL raised); the images themselves were encoded.",
        after="Logged per destination; that language server gets no embedding for the request (from 0.5.21 the "
        "request then fails with 'embedding delivery failed').",
    ),
    Message(
        "epd-send-timeout",
        "[{}] Timeout! Sent {}/{}",
        Stage.EPD,
        (
            site(ENCODE_SERVER, "MMEncoder.send_with_url", "error", "0.5.17-0.5.18"),
            site(SERVER, "MMEncoder.send_with_url", "error", "0.5.19-0.5.20"),
        ),
        fields=("request:word", "sent:n", "expected:n"),
        meaning="The encode server waited for every language-server destination of the request to register where "
        "to send the embedding, and only some did before the time-out.",
        after="Logged; the destinations that never registered get no embedding, and the request fails on the "
        "language side ('The encoder did not return multimodal embeddings' in language-only mode).",
    ),
)
