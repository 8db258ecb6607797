"""What the stage modules share: the files (relative to ``sglang/srt``), release spans, and what follows a raise."""

from __future__ import annotations

from ..messages import Site
from ..releases import RELEASES

ORDER = tuple(RELEASES)  # 0.5.17 ... 0.5.23, oldest first

K3 = "multimodal/processors/kimi_k3.py"
K25 = "multimodal/processors/kimi_k25.py"
COMMON = "multimodal/processors/kimi_common.py"
BASE = "multimodal/processors/base_processor.py"
ARTIFACTS = "multimodal/media_artifacts/base.py"
MODEL = "models/kimi_k3.py"
MODEL_K25 = "models/kimi_k25.py"
TOWER = "models/kimi_k3_vl.py"
MM_UTILS = "multimodal/mm_utils.py"
IMAGE_PROCESSING = "multimodal/kimi_k3_image_processing.py"
ENCODER_PREPROCESSING = "multimodal/encoder_preprocessing.py"
SCHEDULE = "managers/mm_schedule.py"
MANAGERS_MM_UTILS = "managers/mm_utils.py"  # the splice's home in 0.5.17
ENCODE_SERVER = "disaggregation/encode_server.py"  # the EPD encoder up to 0.5.18
ENCODE_RECEIVER = "disaggregation/encode_receiver.py"
SERVER = "disaggregation/encoder/server.py"  # the EPD encoder since 0.5.19
PREPROCESSOR = "disaggregation/encoder/preprocessor.py"
RECEIVER = "disaggregation/encoder/receiver.py"
TOKENIZER_MANAGER = "managers/tokenizer_manager.py"  # the language server's front end (HTTP answers)

# What follows a raise, by where it happens (an entry says more when it knows more).
REFUSED = "The request fails with this error; the client gets it back and the server goes on."
SCHEDULER_FAILS = (
    "Raised in the scheduler's forward pass: the scheduler process exits, and every request of the batch "
    "(and the server) with it."
)
ENCODE_FAILS = (
    "The encode server fails this encode request and reports the error to the language server, which fails "
    "the request; it does not encode the images locally instead."
)
RECEIVE_FAILS = "The language server cannot assemble the request's embedding and fails the request."


def span(text: str) -> tuple[str, ...]:
    """Return the releases of ``"0.5.18-0.5.23"`` (inclusive) or of a single ``"0.5.17"``."""
    first, _, last = text.partition("-")
    start, end = ORDER.index(first), ORDER.index(last or first)
    if end < start:
        raise ValueError(f"release span {text!r} runs backwards")
    return ORDER[start : end + 1]


def site(file: str, function: str, kind: str, releases: str) -> Site:
    """Return a :class:`~kimi_viz.messages.Site` for ``releases`` written as a span (see :func:`span`)."""
    return Site(file, function, kind, span(releases))


def encode_server_sites(
    old_function: str, new_function: str, kind: str, *, new_file: str = SERVER, since: str = "0.5.17"
) -> tuple[Site, ...]:
    """Return one message's sites in encode_server.py (``since``-0.5.18) and the encoder/ package (0.5.19-0.5.23)."""
    return (
        site(ENCODE_SERVER, old_function, kind, f"{since}-0.5.18"),
        site(new_file, new_function, kind, "0.5.19-0.5.23"),
    )


def receiver_sites(old_function: str, new_function: str, kind: str, *, since: str = "0.5.17") -> tuple[Site, ...]:
    """Return one message's sites in encode_receiver.py (``since``-0.5.18) and encoder/receiver.py (0.5.19-0.5.23)."""
    return (
        site(ENCODE_RECEIVER, old_function, kind, f"{since}-0.5.18"),
        site(RECEIVER, new_function, kind, "0.5.19-0.5.23"),
    )
