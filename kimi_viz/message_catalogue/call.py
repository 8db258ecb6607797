"""Stage 3, the call: ``get_image_feature`` receives the items of one forward pass and gathers their grids and
features (the eager ones concatenated by ``materialize_multimodal_features``) before the split."""

from __future__ import annotations

from .. import messages as m
from ..messages import Message, Stage
from ._common import MM_UTILS, MODEL, MODEL_K25, SCHEDULER_FAILS, site

MESSAGES: tuple[Message, ...] = (
    Message(
        "one-grid",
        m.MSG_ONE_GRID,
        Stage.CALL,
        (site(MODEL, "KimiK3ForConditionalGeneration.get_image_feature", "ValueError", "0.5.17-0.5.23"),),
        meaning="An item carries several grid rows: several images were aggregated into one MultimodalDataItem.",
        after=SCHEDULER_FAILS,
        name="MSG_ONE_GRID",
    ),
    Message(
        "feature-type",
        m.MSG_FEATURE_TYPE,
        Stage.CALL,
        (
            site(
                MODEL,
                "KimiK3ForConditionalGeneration.get_image_feature.materialize_item_features",
                "TypeError",
                "0.5.17-0.5.23",
            ),
        ),
        fields=("type:type",),
        meaning="An eager (non-deferred) item's feature is not a tensor.",
        after=SCHEDULER_FAILS,
        name="MSG_FEATURE_TYPE",
    ),
    Message(
        "k25-feature-type",
        "Kimi-K2.5/K2.7 image feature must be a torch.Tensor, got {}",
        Stage.CALL,
        (
            site(
                MODEL_K25,
                "KimiK25ForConditionalGeneration.get_image_feature.materialize_item_features",
                "TypeError",
                "0.5.17-0.5.23",
            ),
        ),
        fields=("type:type",),
        meaning="A Kimi-K2.5 item's feature is not a tensor (e.g. a per-image list or a PIL image).",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "no-features",
        "features must contain at least one tensor",
        Stage.CALL,
        (site(MM_UTILS, "materialize_multimodal_features", "ValueError", "0.5.17-0.5.23"),),
        meaning="The call's eager items gave no feature to concatenate.",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "expected-tensor",
        m.MSG_EXPECTED_TENSOR,
        Stage.CALL,
        (site(MM_UTILS, "materialize_multimodal_features", "TypeError", "0.5.17-0.5.23"),),
        fields=("type:type",),
        meaning="An eager item's feature reached the concatenation as something other than a tensor.",
        after=SCHEDULER_FAILS,
        name="MSG_EXPECTED_TENSOR",
    ),
    Message(
        "leading-dim",
        m.MSG_LEADING_DIM,
        Stage.CALL,
        (site(MM_UTILS, "materialize_multimodal_features", "ValueError", "0.5.17-0.5.23"),),
        meaning="The first eager feature is a 0-d tensor (a scalar), so it has no rows to concatenate.",
        after=SCHEDULER_FAILS,
        name="MSG_LEADING_DIM",
    ),
    Message(
        "trailing-shapes",
        m.MSG_TRAILING_SHAPES,
        Stage.CALL,
        (site(MM_UTILS, "materialize_multimodal_features", "ValueError", "0.5.17-0.5.23"),),
        fields=("expected:shape", "got:shape"),
        meaning="A feature of the wrong rank reached the concatenation, e.g. a stacked [B, N, 3, 14, 14] tensor "
        "where [N, 3, 14, 14] rows were expected.",
        after=SCHEDULER_FAILS,
        name="MSG_TRAILING_SHAPES",
    ),
    Message(
        "no-pixel-values",
        "pixel_values or load_local_pixel_values must be provided",
        Stage.CALL,
        (site(MM_UTILS, "run_dp_sharded_mrope_vision_model", "ValueError", "0.5.17-0.5.23"),),
        meaning="The data-parallel vision runner got neither the concatenated pixels nor a loader for each "
        "rank's share: a caller bug, not the images.",
        after=SCHEDULER_FAILS,
    ),
    Message(
        "loader-device",
        "pixel_values_device and pixel_values_dtype are required with a local loader",
        Stage.CALL,
        (site(MM_UTILS, "run_dp_sharded_mrope_vision_model", "ValueError", "0.5.17-0.5.23"),),
        meaning="The data-parallel vision runner got a per-rank loader without the device and dtype of the "
        "pixels it will load: a caller bug, not the images.",
        after=SCHEDULER_FAILS,
    ),
)
