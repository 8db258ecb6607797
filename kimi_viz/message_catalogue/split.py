"""Stage 4, the split: ``get_image_feature``'s deferred preprocessing (0.5.18+), each attention-TP rank
materialising its own images' pixels with the gpu or cpu backend, and the EPD encoder's owner-side
preprocessing that prepares such items (``prepare_kimi_k3_encoder_inputs``, ``EncoderPreprocessOutput``)."""

from __future__ import annotations

from .. import messages as m
from ..messages import Message, Stage
from ._common import ENCODER_PREPROCESSING, IMAGE_PROCESSING, K3, MODEL, SCHEDULER_FAILS, site

MATERIALIZE = "KimiK3ForConditionalGeneration.get_image_feature.materialize_item_features"
CPU = "materialize_kimi_k3_cpu_features"
OWNER_SIDE = (
    "Raised while the EPD encode server prepares the images (owner-side preprocessing): the encode request "
    "fails and the language server fails the request."
)

MESSAGES: tuple[Message, ...] = (
    Message(
        "feature-length",
        m.MSG_LENGTH,
        Stage.SPLIT,
        (site(MODEL, MATERIALIZE, "ValueError", "0.5.18-0.5.23"),),
        meaning="Σ prod(grid_thw) of the images this rank materialized differs from the pixel_values rows its "
        "preprocessing produced. The grids came from the wrong place (a shard-local index before the "
        "global_indices fix, a stale image_grid_thw) or the rows came back in the wrong form.",
        after=SCHEDULER_FAILS,
        name="MSG_LENGTH",
    ),
    Message(
        "gpu-wrong-grids",
        m.MSG_GPU_WRONG_GRIDS,
        Stage.SPLIT,
        (site(MODEL, MATERIALIZE, "ValueError", "0.5.18-0.5.23"),),
        meaning="SGLang's torch preprocessing resized gpu-backend images to grids that differ from "
        "grid_thws_host[global_indices]: the grid read for an image belongs to another image (S1), is a "
        "stale image_grid_thw (S2), or has t > 1 (S8).",
        after=SCHEDULER_FAILS,
        name="MSG_GPU_WRONG_GRIDS",
    ),
    Message(
        "cpu-wrong-grids",
        m.MSG_CPU_WRONG_GRIDS,
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, CPU, "ValueError", "0.5.18-0.5.23"),),
        meaning="The consumer's checkpoint processor computed its own resize from each image's size and got "
        "grids that differ from the items' grid_thws: producer and consumer run different processor limits "
        "(e.g. Kimi-K2.5's 16384-patch budget against Kimi-K3's 65536).",
        after=SCHEDULER_FAILS,
        name="MSG_CPU_WRONG_GRIDS",
    ),
    Message(
        "mix-local",
        m.MSG_MIX_LOCAL,
        Stage.SPLIT,
        (site(MODEL, MATERIALIZE, "ValueError", "0.5.18-0.5.23"),),
        meaning="Some images this rank selected were preprocessed locally by the encoder and others are "
        "deferred: the EPD owner assignment over the whole batch differs from the model's over cache misses.",
        after=SCHEDULER_FAILS,
        name="MSG_MIX_LOCAL",
    ),
    Message(
        "mix-deferred-old",
        m.MSG_MIX_DEFERRED_OLD,
        Stage.SPLIT,
        (),
        meaning="The older wording of the mixed local/deferred error (no release 0.5.17-0.5.23 raises it).",
        after=SCHEDULER_FAILS,
        name="MSG_MIX_DEFERRED_OLD",
    ),
    Message(
        "unsupported-backend",
        m.MSG_UNSUPPORTED_BACKEND,
        Stage.SPLIT,
        (site(MODEL, MATERIALIZE, "ValueError", "0.5.18-0.5.23"),),
        fields=("backend:word",),
        meaning="The deferred config names a backend other than 'gpu' or 'cpu': producer and consumer versions differ.",
        after=SCHEDULER_FAILS,
        name="MSG_UNSUPPORTED_BACKEND",
    ),
    Message(
        "missing-backend",
        "KeyError: 'backend'",
        Stage.SPLIT,
        (site(MODEL, MATERIALIZE, "KeyError", "0.5.18-0.5.23"),),
        meaning="The deferred config has no 'backend' key: the producer is older than the consumer.",
        after=SCHEDULER_FAILS,
        origin="python",
    ),
    Message(
        "list-shape",
        "'list' object has no attribute 'shape'",
        Stage.SPLIT,
        (site(MODEL, MATERIALIZE, "AttributeError", "0.5.18-0.5.23"),),
        meaning="The cpu group's preprocessing returned a per-image list instead of one concatenated tensor.",
        after=SCHEDULER_FAILS,
        origin="python",
    ),
    Message(
        "cpu-input-type",
        m.MSG_CPU_INPUT_TYPE,
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, CPU, "TypeError", "0.5.18-0.5.23"),),
        meaning="A cpu-backend item's feature is neither a PIL image nor a uint8 tensor.",
        after=SCHEDULER_FAILS,
        name="MSG_CPU_INPUT_TYPE",
    ),
    Message(
        "channel-count",
        m.MSG_CHANNEL_COUNT,
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, CPU, "ValueError", "0.5.18-0.5.23"),),
        fields=("channels:n",),
        meaning="A raw tensor with other than 1, 3 or 4 channels reached the cpu backend, or a CHW tensor was "
        "read as HWC (then the 'channel count' is the image width).",
        after=SCHEDULER_FAILS,
        name="MSG_CHANNEL_COUNT",
    ),
    Message(
        "raw-uint8",
        m.MSG_RAW_UINT8,
        Stage.SPLIT,
        (
            site(IMAGE_PROCESSING, "to_chw_uint8", "ValueError", "0.5.18-0.5.23"),
            site(IMAGE_PROCESSING, "to_hwc_uint8", "ValueError", "0.5.18-0.5.23"),
        ),
        fields=("dtype:dtype",),
        meaning="A deferred image arrived as a non-uint8 tensor (e.g. already normalised floats).",
        after=SCHEDULER_FAILS,
        name="MSG_RAW_UINT8",
    ),
    Message(
        "broadcast-alpha",
        "The size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension 1",
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, "fill_transparent_bg", "RuntimeError", "0.5.18-0.5.23"),),
        fields=("a:n", "b:n"),
        meaning="A 2-channel (grey + alpha) tensor reached the gpu backend's background fill, which takes "
        "channels 3.. as alpha and finds none.",
        after=SCHEDULER_FAILS,
        origin="torch",
    ),
    Message(
        "bg-pattern",
        m.MSG_BG_PATTERN,
        Stage.SPLIT,
        (
            site(K3, "_fill_transparent_bg", "ValueError", "0.5.17"),
            site(IMAGE_PROCESSING, "fill_transparent_bg", "ValueError", "0.5.18-0.5.23"),
        ),
        fields=("pattern:word",),
        meaning="transparent_bg_config names a pattern other than white, black, gray or chessboard.",
        after=SCHEDULER_FAILS + " (On the request side, 0.5.17, the request fails instead.)",
        name="MSG_BG_PATTERN",
    ),
    Message(
        "encoder-image-only",
        "Kimi-K3 encoder mode supports image input only",
        Stage.SPLIT,
        (site(MODEL, "KimiK3ForConditionalGeneration.preprocess_mm_for_encoder", "ValueError", "0.5.18-0.5.23"),),
        meaning="The EPD encode server was asked to preprocess video or audio for Kimi-K3.",
        after=OWNER_SIDE,
    ),
    Message(
        "encoder-needs-processor",
        "Kimi-K3 encoder preprocessing needs an image processor",
        Stage.SPLIT,
        (site(MODEL, "KimiK3ForConditionalGeneration.preprocess_mm_for_encoder", "ValueError", "0.5.18-0.5.23"),),
        meaning="The EPD encode server has no image processor loaded (see 'Failed to load image processor' "
        "earlier in its log).",
        after=OWNER_SIDE,
    ),
    Message(
        "owner-side-config",
        "Kimi-K3 EPD owner-side preprocessing requires image_processor.media_proc_cfg",
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, "prepare_kimi_k3_encoder_inputs", "ValueError", "0.5.18-0.5.23"),),
        meaning="The encode server's image processor has no media_proc_cfg (the checkpoint's "
        "preprocessor_config.json is not Kimi-K3's).",
        after=OWNER_SIDE,
    ),
    Message(
        "owner-side-missing-config",
        "Kimi-K3 image processor is missing deferred-preprocessing config: {}",
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, "prepare_kimi_k3_encoder_inputs", "ValueError", "0.5.18-0.5.23"),),
        fields=("keys",),
        meaning="The encode server's media_proc_cfg lacks keys the deferred preprocessing needs (patch size, "
        "merge kernel, patch limits, mean and std).",
        after=OWNER_SIDE,
    ),
    Message(
        "owner-side-media-item",
        "Unsupported Kimi-K3 encoder media item: {}",
        Stage.SPLIT,
        (site(IMAGE_PROCESSING, "prepare_kimi_k3_encoder_inputs", "ValueError", "0.5.18-0.5.23"),),
        fields=("item",),
        meaning="An image reached the encode server's preprocessing as neither a PIL image nor a tensor.",
        after=OWNER_SIDE,
    ),
    Message(
        "raw-encoder-item",
        "Unsupported raw encoder item: {}",
        Stage.SPLIT,
        (site(ENCODER_PREPROCESSING, "hash_raw_encoder_item", "TypeError", "0.5.18-0.5.23"),),
        fields=("type:type",),
        meaning="A raw image to hash for the encoder is neither a tensor, an array nor a PIL image.",
        after=OWNER_SIDE,
    ),
    Message(
        "preprocess-output-empty",
        "EncoderPreprocessOutput requires at least one item",
        Stage.SPLIT,
        (site(ENCODER_PREPROCESSING, "EncoderPreprocessOutput.__init__", "ValueError", "0.5.18-0.5.23"),),
        meaning="Owner-side preprocessing produced no item for the encode request.",
        after=OWNER_SIDE,
    ),
    Message(
        "preprocess-item-sizes",
        "Encoder preprocess item_sizes must match mm_items",
        Stage.SPLIT,
        (site(ENCODER_PREPROCESSING, "EncoderPreprocessOutput.__init__", "ValueError", "0.5.18-0.5.23"),),
        meaning="Owner-side preprocessing gave another number of load sizes than items, so the images cannot "
        "be assigned to encoder ranks.",
        after=OWNER_SIDE,
    ),
    Message(
        "preprocess-rank",
        "Invalid encoder preprocess rank {} for world size {}",
        Stage.SPLIT,
        (site(ENCODER_PREPROCESSING, "EncoderPreprocessOutput.local_item_indices", "ValueError", "0.5.18-0.5.23"),),
        fields=("rank:n", "world_size:n"),
        meaning="An encoder rank outside [0, world size) asked for its share of the images.",
        after=OWNER_SIDE,
    ),
    Message(
        "preprocess-load-sizes",
        "Owner-side encoder preprocessing requires per-item load sizes",
        Stage.SPLIT,
        (site(ENCODER_PREPROCESSING, "EncoderPreprocessOutput.local_item_indices", "ValueError", "0.5.18-0.5.23"),),
        meaning="With several encoder ranks, the owner assignment needs each image's load size and none was recorded.",
        after=OWNER_SIDE,
    ),
    Message(
        "preprocess-one-feature",
        "Encoder local materializer must return one feature per item",
        Stage.SPLIT,
        (site(ENCODER_PREPROCESSING, "EncoderPreprocessOutput.materialize_for_rank", "ValueError", "0.5.18-0.5.23"),),
        meaning="A rank's owner-side preprocessing returned another number of features than the images it owns.",
        after=OWNER_SIDE,
    ),
)
