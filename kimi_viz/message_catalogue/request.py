"""Stage 1, the request: the chat request, its prompt and its ``<|media_pad|>`` placeholders.

The Kimi chat template writes one ``<|media_pad|>`` (id 163605 for K3) per image part; the request side
checks that count against the images before it loads anything, then expands each placeholder into
the image's ``<|media_begin|>image WxH<|media_content|>`` + N pads + ``<|media_end|>`` block.
"""

from __future__ import annotations

from .. import messages as m
from ..messages import Message, Stage
from ._common import BASE, COMMON, K3, K25, REFUSED, TOKENIZER_MANAGER, site

EXPAND = "BaseMultimodalProcessor._expand_input_ids"
COMBINE = "BaseMultimodalProcessor.process_and_combine_mm_data"
NOT_KIMI_K3 = (
    "Kimi-K3 and Kimi-K2.5 never run this check (their processors keep their own input_ids: "
    "preserve_processor_input_ids, every release 0.5.17-0.5.23), so on a Kimi-K3 server it comes from another "
    "processor: Kimi-VL's (kimi_vl.py) or another model served by the same process, with SGLANG_MM_AVOID_RETOKENIZE "
    "on. "
)
FALLS_BACK = (
    "Caught where it is raised (process_and_combine_mm_data) and logged as the warning 'Due to <this>, falling "
    "back to decode+retokenize ...': the request goes on with its prompt decoded and tokenized again, which can "
    "change its length (token drift)."
)

PLACEHOLDER_RULE = (
    "The Kimi chat template writes one <|media_pad|> per image part of a chat message; a prompt built "
    "another way (raw text, hand-made input_ids, a template without the image parts) can hold another count."
)

MESSAGES: tuple[Message, ...] = (
    Message(
        "image-only",
        m.MSG_IMAGE_ONLY,
        Stage.REQUEST,
        (site(K3, "KimiK3ImageProcessor.process_mm_data_async", "ValueError", "0.5.17-0.5.23"),),
        meaning="The request carries video or audio data; the Kimi-K3 request side takes images only.",
        after=REFUSED,
        name="MSG_IMAGE_ONLY",
    ),
    Message(
        "caller-mm-hashes",
        m.MSG_CALLER_MM_HASHES,
        Stage.REQUEST,
        (site(COMMON, "KimiGridMMDataMixin.reject_caller_image_identity", "ValueError", "0.5.23"),),
        meaning="The request sets mm_hashes. From 0.5.23 SGLang computes a Kimi image's identity itself (its "
        "bytes and the processor config) and refuses one chosen by the caller.",
        after=REFUSED,
        name="MSG_CALLER_MM_HASHES",
    ),
    Message(
        "caller-identity",
        m.MSG_CALLER_IDENTITY,
        Stage.REQUEST,
        (site(COMMON, "KimiGridMMDataMixin.reject_caller_image_identity", "ValueError", "0.5.23"),),
        fields=("key:word",),
        meaning="An image item of the request is a dict that sets its own hash, pad_value(s) or identity; from "
        "0.5.23 a Kimi image's identity is the server's to compute.",
        after=REFUSED,
        name="MSG_CALLER_IDENTITY",
    ),
    Message(
        "one-to-one",
        m.MSG_ONE_TO_ONE,
        Stage.REQUEST,
        (
            site(K3, "KimiK3ImageProcessor.process_mm_data_async", "ValueError", "0.5.17-0.5.23"),
            site(K25, "KimiK2_5VLImageProcessor.process_mm_data_async", "ValueError", "0.5.17-0.5.23"),
        ),
        fields=("images:n", "placeholders:n"),
        meaning="The prompt reached the request side as token ids holding another number of <|media_pad|> ids "
        "than the request has images; SGLang checks this first, before loading an image. 'found 0' is a chat "
        "request whose prompt carries no <|media_pad|> at all: rendered without the image parts, by a chat "
        "template that does not write <|media_pad|>, or sent as input_ids next to image_data. " + PLACEHOLDER_RULE,
        after=REFUSED,
        name="MSG_ONE_TO_ONE",
    ),
    Message(
        "one-to-one-loaded",
        m.MSG_ONE_TO_ONE_LOADED,
        Stage.REQUEST,
        (
            site(K3, "KimiK3ImageProcessor.process_mm_data_async", "ValueError", "0.5.17"),
            site(K3, "KimiK3ImageProcessor._process_mm_data_uncached", "ValueError", "0.5.18-0.5.23"),
            site(K25, "KimiK2_5VLImageProcessor.process_mm_data_async", "ValueError", "0.5.17-0.5.23"),
        ),
        fields=("images:n", "loaded:n"),
        meaning="The prompt is text: SGLang loads one image per <|media_pad|> it finds in the text, and that "
        "gave another number of images than the request sent (a text with fewer placeholders than images "
        "loads fewer). On K3 this path runs with the preprocess cache off or for preprocessed inputs. "
        + PLACEHOLDER_RULE,
        after=REFUSED,
        name="MSG_ONE_TO_ONE_LOADED",
    ),
    Message(
        "placeholder-tokens",
        m.MSG_PLACEHOLDER_TOKENS,
        Stage.REQUEST,
        (
            site(K3, "_expand_k3_image_prompt_token_ids", "ValueError", "0.5.17-0.5.23"),
            site(K25, "_expand_image_token_ids", "ValueError", "0.5.17-0.5.23"),
        ),
        fields=("images:n", "placeholders:n"),
        meaning="Expanding the prompt's placeholders into each image's token block found another number of "
        "<|media_pad|> ids in the unexpanded prompt than images. On K3's default path (the preprocess cache) "
        "a text prompt is checked here rather than by the one-to-one check. " + PLACEHOLDER_RULE,
        after=REFUSED,
        name="MSG_PLACEHOLDER_TOKENS",
    ),
    Message(
        "placeholder-text",
        "Expected {} image placeholder(s), found {}.",
        Stage.REQUEST,
        (site(K3, "_expand_k3_image_prompt_text", "ValueError", "0.5.17-0.5.23"),),
        fields=("images:n", "placeholders:n"),
        meaning="The K3 CPU (checkpoint-processor) fallback found another number of <|media_pad|> strings in "
        "the prompt text than images. " + PLACEHOLDER_RULE,
        after=REFUSED,
    ),
    Message(
        "prompt-has-placeholders",
        "Prompt has {} {} placeholders but {} {} inputs were provided",
        Stage.REQUEST,
        (site(BASE, "BaseMultimodalProcessor.legacy_load_mm_data", "ValueError", "0.5.23"),),
        fields=("placeholders:n", "placeholder_modality:word", "inputs:n", "input_modality:word"),
        meaning="A text prompt holds more placeholders than the request has images, so loading ran out of "
        "images (0.5.23; earlier releases end with 'An exception occurred while loading multimodal data: ' "
        "and nothing after the colon). " + PLACEHOLDER_RULE,
        after=REFUSED,
    ),
    Message(
        "loading-multimodal-data",
        "An exception occurred while loading multimodal data: {}",
        Stage.REQUEST,
        (
            site(BASE, "BaseMultimodalProcessor.legacy_load_mm_data", "ValueError", "0.5.17-0.5.23"),
            site(BASE, "BaseMultimodalProcessor.legacy_load_mm_data", "RuntimeError", "0.5.17-0.5.23"),
        ),
        fields=("error",),
        meaning="Loading the images of a text prompt failed; the loader's own error follows the colon. Up to "
        "0.5.22 a text prompt with more <|media_pad|> placeholders than images ends here with nothing after "
        "the colon (the loader ran out of images).",
        after=REFUSED,
    ),
    Message(
        "more-placeholders-than-data",
        "Mismatch: More '{}' tokens found than corresponding data provided.",
        Stage.REQUEST,
        (site(BASE, "BaseMultimodalProcessor.submit_data_loading_tasks", "warning", "0.5.17-0.5.23"),),
        fields=("modality:word",),
        meaning="A text prompt holds more placeholders of this modality than the request has items. "
        + PLACEHOLDER_RULE,
        after="Logged, not raised: SGLang stops loading at the last item; the placeholders left over then fail "
        "the request ('Prompt has ... placeholders' on 0.5.23, 'An exception occurred while loading multimodal "
        "data: ' before).",
    ),
    Message(
        "more-data-than-placeholders",
        "Warning: More {} data items provided than corresponding tokens found in the prompt.",
        Stage.REQUEST,
        (site(BASE, "BaseMultimodalProcessor.submit_data_loading_tasks", "warning", "0.5.17-0.5.23"),),
        fields=("modality:word",),
        meaning="The request has more items of this modality than its text prompt has placeholders. "
        + PLACEHOLDER_RULE,
        after="Logged, not raised: the extra images are not loaded, and the Kimi processors then refuse the "
        "request ('... expected N, loaded M'), so no request goes on with an image missing.",
    ),
    Message(
        "no-data-iterator",
        "No data iterator found for token: {}",
        Stage.REQUEST,
        (site(BASE, "BaseMultimodalProcessor.submit_data_loading_tasks", "ValueError", "0.5.17-0.5.23"),),
        fields=("token",),
        meaning="The prompt holds the placeholder of a modality (e.g. a video or audio token) the request "
        "sends no data for.",
        after=REFUSED,
    ),
    Message(
        "modality-not-a-list",
        "{} must be a list or None, got {}",
        Stage.REQUEST,
        (site(BASE, "BaseMultimodalProcessor._validate_one_modality", "TypeError", "0.5.17-0.5.23"),),
        fields=("modality:word", "type:type"),
        meaning="The request's image_data (or video / audio data) is neither a list nor absent.",
        after=REFUSED,
    ),
    Message(
        "one-processor-output",
        "For {}, when providing a 'processor_output' or 'precomputed_embedding', you must pass exactly one item; "
        "received {} items (formatted at indices {}).",
        Stage.REQUEST,
        (site(BASE, "BaseMultimodalProcessor._validate_one_modality", "ValueError", "0.5.17-0.5.23"),),
        fields=("modality:word", "items:n", "indices:list"),
        meaning="The request mixes a preprocessed input (processor_output or precomputed_embedding) with other "
        "items of the same modality; such an input must be the only item.",
        after=REFUSED,
    ),
    Message(
        "retokenize-placeholders",
        "prompt has {} image placeholder token(s) but {} image(s) were provided",
        Stage.REQUEST,
        (site(BASE, EXPAND, "ValueError", "0.5.17-0.5.23"),),
        fields=("placeholders:n", "images:n"),
        meaning="The request's token-id prompt holds another number of image placeholder ids than the images "
        "the processor resolved, so the prompt cannot be expanded in place. " + NOT_KIMI_K3,
        after=FALLS_BACK,
    ),
    Message(
        "retokenize-no-token-id",
        "placeholder_token_id is not set for this processor",
        Stage.REQUEST,
        (site(BASE, EXPAND, "ValueError", "0.5.17-0.5.23"),),
        meaning="The processor has no image placeholder token id, so the token-id prompt cannot be expanded in "
        "place. " + NOT_KIMI_K3,
        after=FALLS_BACK,
    ),
    Message(
        "retokenize-no-image-token-id",
        "image placeholder token id is not set for this processor",
        Stage.REQUEST,
        (site(BASE, COMBINE, "ValueError", "0.5.17-0.5.23"),),
        meaning="The processor's multimodal tokens have no image token id, so the user's token ids cannot be "
        "kept. " + NOT_KIMI_K3,
        after=FALLS_BACK,
    ),
    Message(
        "retokenize-count",
        "processor image placeholder count mismatch: processor={}, resolved={}",
        Stage.REQUEST,
        (site(BASE, COMBINE, "ValueError", "0.5.17-0.5.23"),),
        fields=("processor:n", "resolved:n"),
        meaning="The HF processor's expanded prompt holds another number of image pad tokens than the images' "
        "token counts add up to (processor= the pads it wrote, resolved= the sum the grids give). " + NOT_KIMI_K3,
        after=FALLS_BACK,
    ),
    Message(
        "retokenize-input-ids",
        "expected list[int] input_ids, got {}",
        Stage.REQUEST,
        (site(BASE, COMBINE, "AssertionError", "0.5.17-0.5.23"),),
        fields=("type:type",),
        meaning="The request's prompt ids are not a list of ints where the user's token ids are kept. " + NOT_KIMI_K3,
        after=FALLS_BACK,
    ),
    Message(
        "retokenize-fallback",
        "Due to {}, falling back to decode+retokenize, which may change prompt length (token drift).",
        Stage.REQUEST,
        (site(BASE, COMBINE, "warning", "0.5.17-0.5.23"),),
        fields=("error",),
        meaning="Keeping the user's token ids failed with the error named (one of the retokenize checks above) "
        "and the processor's re-tokenized prompt is used instead. " + NOT_KIMI_K3,
        after="Logged, not raised: the request goes on with the decoded and re-tokenized prompt, whose length "
        "can differ from the ids the client sent (token drift).",
    ),
    Message(
        "language-model-only",
        "Multimodal inputs are not supported when --language-model-only is set; the encoder is not loaded. "
        "Restart without the flag.",
        Stage.REQUEST,
        (site(TOKENIZER_MANAGER, "TokenizerManager._tokenize_one_request", "ValueError", "0.5.18-0.5.23"),),
        meaning="The server runs the Kimi language model only (--language-model-only): it has no vision tower, "
        "so a request with images is refused before any image is loaded.",
        after=REFUSED,
    ),
    Message(
        "content-hashes-conflict",
        "Conflicting content hashes for image_data[{}]",
        Stage.REQUEST,
        (site(TOKENIZER_MANAGER, "TokenizerManager._normalize_mm_content_hashes", "ValueError", "0.5.18-0.5.23"),),
        fields=("index:n",),
        meaning="The request gives this image two different content hashes (one in the image part, one in "
        "mm_content_hashes); the preprocess cache could not tell which image it is.",
        after=REFUSED,
    ),
    Message(
        "mm-limit-per-request",
        "{} count {} exceeds limit {} per request.",
        Stage.REQUEST,
        (site(TOKENIZER_MANAGER, "TokenizerManager._validate_mm_limits", "ValueError", "0.5.17-0.5.23"),),
        fields=("modality:word", "count:n", "limit:n"),
        meaning="The request carries more images (or other items of the modality) than the server's "
        "per-request limit (limit_mm_data_per_request) allows; SGLang refuses it before any image is processed.",
        after=REFUSED,
    ),
    Message(
        "caller-hashes-count",
        "mm_hashes length ({}) != mm_items length ({}); ignoring caller hashes for this request.",
        Stage.REQUEST,
        (site(TOKENIZER_MANAGER, "TokenizerManager._tokenize_one_request", "warning", "0.5.17-0.5.23"),),
        fields=("hashes:n", "items:n"),
        meaning="The caller sent a different number of mm_hashes than the request has multimodal items; "
        "SGLang ignores all of them and hashes every image itself.",
        after="Logged, not raised: the request goes on; its images' cache keys are computed from their features.",
    ),
    Message(
        "caller-hash-malformed",
        "Ignoring malformed mm_hashes entry {}; this item will fall back to hash_feature().",
        Stage.REQUEST,
        (site(TOKENIZER_MANAGER, "TokenizerManager._tokenize_one_request", "warning", "0.5.17-0.5.23"),),
        fields=("hash",),
        meaning="A caller-supplied mm_hashes entry is not a hexadecimal number; SGLang hashes that image itself.",
        after="Logged, not raised: the request goes on; the image's cache key is computed from its features.",
    ),
)
