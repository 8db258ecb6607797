"""Messages a Kimi request can meet that `kimi-viz explain` did not know: each recognised with its stage,
its site in SGLang, its releases (read from the 0.5.17-0.5.23 wheels) and what to run next; and the lane's
source walk takes them as on the path."""

from __future__ import annotations

import pytest
from parity.call_graph import ENTRIES
from parity.catalogue_check import Found, classify

from kimi_viz._explain import explain, format_explanations
from kimi_viz.message_catalogue import release_span

ALL = "0.5.17–0.5.23"
CASES = [
    (
        "ValueError: prompt has 1 image placeholder token(s) but 2 image(s) were provided",
        "retokenize-placeholders",
        "request",
        "sglang/srt/multimodal/processors/base_processor.py, BaseMultimodalProcessor._expand_input_ids",
        ALL,
        {"placeholders": 1, "images": 2},
    ),
    (
        "ValueError: processor image placeholder count mismatch: processor=2, resolved=3",
        "retokenize-count",
        "request",
        "sglang/srt/multimodal/processors/base_processor.py, BaseMultimodalProcessor.process_and_combine_mm_data",
        ALL,
        {"processor": 2, "resolved": 3},
    ),
    (
        "ValueError: placeholder_token_id is not set for this processor",
        "retokenize-no-token-id",
        "request",
        "sglang/srt/multimodal/processors/base_processor.py, BaseMultimodalProcessor._expand_input_ids",
        ALL,
        {},
    ),
    (
        "ValueError: image placeholder token id is not set for this processor",
        "retokenize-no-image-token-id",
        "request",
        "sglang/srt/multimodal/processors/base_processor.py, BaseMultimodalProcessor.process_and_combine_mm_data",
        ALL,
        {},
    ),
    (
        "RuntimeError: EPD multimodal items must contain tensor embeddings; got list for image",
        "epd-items-not-tensors",
        "EPD transfer",
        "sglang/srt/multimodal/processors/base_processor.py, "
        "BaseMultimodalProcessor._validate_precomputed_embedding_layout",
        "0.5.20–0.5.23",
        {"type": "list", "modality": "image"},
    ),
    (
        "RuntimeError: EPD encoder output must contain tensor embeddings; got NoneType for image",
        "epd-output-not-tensor",
        "EPD transfer",
        "sglang/srt/multimodal/processors/base_processor.py, "
        "BaseMultimodalProcessor._validate_precomputed_embedding_layout",
        "0.5.20–0.5.23",
        {"type": "NoneType", "modality": "image"},
    ),
    (
        "ValueError: For Modality.IMAGE, when providing a 'processor_output' or 'precomputed_embedding', you must "
        "pass exactly one item; received 2 items (formatted at indices [0]).",
        "one-processor-output",
        "request",
        "sglang/srt/multimodal/processors/base_processor.py, BaseMultimodalProcessor",
        ALL,
        {"modality": "Modality.IMAGE", "items": 2, "indices": "[0]"},
    ),
    (
        "ValueError: Kimi image item needs one [t, h, w] grid, got [1, 2, 3, 4]",
        "identity-one-grid",
        "processor",
        "sglang/srt/multimodal/processors/kimi_common.py, _item_grid_thw",
        "0.5.23",
        {"grid": "[1, 2, 3, 4]"},
    ),
    (
        "InternalError: Embedding metadata mismatch for req-1: expected=111/148, actual=185/222",
        "epd-embedding-metadata",
        "EPD transfer",
        "sglang/srt/disaggregation/encoder/server.py, MMEncoder._embedding_state_for_stage",
        "0.5.19–0.5.23",
        {"request": "req-1", "expected_shape": 111, "expected_dtype": 148, "shape": 185, "dtype": 222},
    ),
    (
        "InternalError: Preprocessor returned 2 token counts for 3 grid entries",
        "epd-token-counts",
        "EPD transfer",
        "sglang/srt/disaggregation/encoder/server.py, MMEncoder._prepare_encode_context",
        "0.5.19–0.5.23",
        {"counts": 2, "grids": 3, "modality": None},
    ),
    (
        "MMError: [req-1] embedding delivery failed: timeout",
        "epd-delivery-failed",
        "EPD transfer",
        "sglang/srt/disaggregation/encoder/server.py, MMEncoder.send_with_url",
        "0.5.21–0.5.23",
        {"request": "req-1", "failure": "timeout"},
    ),
    (
        "fastapi.exceptions.HTTPException: 503: The encoder did not return multimodal embeddings. The request was "
        "not run locally in language-only mode.",
        "epd-no-embeddings-language-only",
        "EPD transfer",
        "sglang/srt/managers/tokenizer_manager.py, _reject_missing_dispatched_encoder_embedding",
        ALL,
        {},
    ),
]


@pytest.mark.parametrize(("line", "key", "stage", "site", "releases", "values"), CASES, ids=[c[1] for c in CASES])
def test_each_message_is_recognised_with_its_stage_site_releases_and_numbers(line, key, stage, site, releases, values):
    [item] = explain(line)
    assert item.message.key == key
    assert item.message.stage == stage
    assert site in item.message.raised_in
    assert release_span(item.message.releases) == releases
    assert item.values == values
    text = format_explanations([item])
    assert "  next:      " in text and "  meaning:   " in text and "  then:      " in text


def test_the_metadata_numbers_that_are_no_shapes_are_said_so():
    [item] = explain("Embedding metadata mismatch for req-1: expected=111/148, actual=185/222")
    assert item.notes == ("field expected_shape holds '111', not a shape", "field shape holds '185', not a shape")


def test_the_lane_walks_the_tokenizer_manager_and_takes_the_new_sites_as_on_the_path():
    assert "managers/tokenizer_manager.py" in {entry.file for entry in ENTRIES}
    tm = "managers/tokenizer_manager.py"
    refusal = "The encoder did not return multimodal embeddings. The request was not run locally in language-only mode."
    assert classify(Found(tm, "_reject_missing_dispatched_encoder_embedding", "HTTPException", refusal, 1)) is None
    beam = Found(tm, "TokenizerManager.generate_request", "ValueError", "beam search is off", 1, reached=False)
    assert classify(beam)  # the model-agnostic request handling: no call path from the entry points
    base = "multimodal/processors/base_processor.py"
    expand = "BaseMultimodalProcessor._expand_input_ids"
    assert classify(Found(base, expand, "ValueError", "placeholder_token_id is not set for this processor", 1)) is None
    server = "disaggregation/encoder/server.py"
    assert (
        classify(Found(server, "MMEncoder.send_with_url", "MMError", "[{}] embedding delivery failed: {}", 1)) is None
    )
    # a per-destination send failure is a Kimi EPD request's too: on the path
    assert classify(Found(server, "MMEncoder.send_with_url", "error", "Failed to send to {}: {}", 1)) is None
