"""Fidelity lane: every post-fix scenario through the REAL ``KimiK3ForConditionalGeneration.get_image_feature``.

Runs only where ``import sglang`` works (e.g. ``pip install sglang==0.5.23`` in a separate venv,
then ``pip install -e .`` of this kit there). It drives SGLang the way its own unit tests do: a
model made with ``__new__`` plus ``nn.Module.__init__``, a stub vision tower on the CPU, the DP
runner mocked to capture its loader, the loader called with each rank's ``image_indices`` (from
SGLang's own ``get_dp_encoder_lb_assignment``), and a checkpoint processor as
``_encoder_image_processor`` (resize from the image size with SGLang's ``navit_resize_config``,
pixels from the kit's checkpoint path). Each rank's outcome, exception type and message must equal
the kit's replay.
"""

from __future__ import annotations

import importlib
import itertools
import math
from types import SimpleNamespace
from unittest import mock

import pytest

SKIP_REASON = (
    "the fidelity lane needs SGLang itself (pip install sglang==0.5.23 in a separate venv, with this "
    "kit installed there too); without it the replay is checked against the catalogue's expectations only"
)

sglang = pytest.importorskip("sglang", reason=SKIP_REASON)
pytestmark = pytest.mark.sglang

import torch  # noqa: E402

from kimi_viz.replay.scenarios import SCENARIOS  # noqa: E402
from kimi_viz.replay.split import replay  # noqa: E402


def _sglang_module(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - SGLang is installed but this module needs what the machine lacks
        pytest.skip(f"SGLang is installed but {name} cannot be imported here ({type(exc).__name__}: {exc})")


class CheckpointImageProcessor:
    """The consumer's checkpoint processor: its own resize from each image's size, then checkpoint pixels."""

    def __init__(self, media_proc_cfg: dict, output: str = "concatenated"):
        from kimi_viz.preprocess.config import get_config

        self.media_proc_cfg = dict(media_proc_cfg)
        self.config = get_config(media_proc_cfg)
        self.output = output

    def preprocess(self, medias, return_tensors="pt"):
        from kimi_viz.preprocess.pixels_checkpoint import checkpoint_pixels

        k25 = _sglang_module("sglang.srt.multimodal.processors.kimi_k25")
        c = self.config
        rows, grids = [], []
        for media in medias:
            image = media["image"]
            width, height = image.size
            resize = k25.navit_resize_config(
                width,
                height,
                c.patch_size,
                c.merge_kernel_size,
                c.in_patch_limit,
                c.patch_limit_on_one_side,
                c.fixed_output_tokens,
            )
            grids.append(list(k25._grid_thw_from_resize_config(resize, c.patch_size)))
            rows.append(checkpoint_pixels(image, resize, c)[1])
        if self.output == "list":
            pixel_values = rows
        elif self.output == "stacked":
            longest = max(r.shape[0] for r in rows)
            pixel_values = torch.stack(
                [torch.nn.functional.pad(r, (0, 0, 0, 0, 0, 0, 0, longest - r.shape[0])) for r in rows]
            )
        else:
            pixel_values = torch.cat(rows)
        return {"pixel_values": pixel_values, "grid_thws": torch.tensor(grids, dtype=torch.int64)}


class _TowerStub:
    device = torch.device("cpu")
    merge_kernel_size = (2, 2)
    patch_size = 14

    def __init__(self):
        self.patch_embed = SimpleNamespace(proj=SimpleNamespace(weight=torch.empty(1, dtype=torch.float32)))


def _sglang_items(batch):
    schedule = _sglang_module("sglang.srt.managers.schedule_batch")
    processing = _sglang_module("sglang.srt.multimodal.kimi_k3_image_processing")
    items = []
    for k, item in enumerate(batch.items):
        data = {key: torch.tensor(rows, dtype=torch.int64) for key, rows in item.grids.items()}
        if item.deferred is not None:
            d = item.deferred
            data[processing.DEFERRED_PREPROCESSING_KEY] = processing.KimiK3DeferredPreprocessing(
                backend=d["backend"],
                image_mean=d["image_mean"],
                image_std=d["image_std"],
                transparent_bg_config=d.get("transparent_bg_config"),
                resize_config=d["resize_config"],
            )
        if item.local_preprocessed:
            data["encoder_local_preprocessed"] = True
        feature = item.feature.image if item.feature.image is not None else item.feature.tensor
        items.append(
            schedule.MultimodalDataItem(
                modality=schedule.Modality.IMAGE, offsets=[(k, k + 1)], feature=feature, model_specific_data=data
            )
        )
    return items


def _real_outcomes(batch, tp_size: int) -> list[tuple[int, str, str | None, str | None]]:
    """Return ``(rank, outcome, type, message)`` per rank from SGLang's own code."""
    from torch import nn

    kimi_k3 = _sglang_module("sglang.srt.models.kimi_k3")
    mm_utils = _sglang_module("sglang.srt.multimodal.mm_utils")
    model = kimi_k3.KimiK3ForConditionalGeneration.__new__(kimi_k3.KimiK3ForConditionalGeneration)
    nn.Module.__init__(model)
    model.use_data_parallel = True
    model.vision_tower = _TowerStub()
    model.mm_projector = lambda embeds: embeds
    model._encoder_image_processor = CheckpointImageProcessor(
        batch.processor, batch.extra.get("processor_output", "concatenated")
    )
    items = _sglang_items(batch)
    with mock.patch(
        "sglang.srt.multimodal.mm_utils.run_dp_sharded_mrope_vision_model", return_value=torch.zeros(1, 2)
    ) as run_dp:
        try:
            model.get_image_feature(items)
        except Exception as exc:  # noqa: BLE001 - raised before the DP runner: every rank raises it
            return [(r, "error", type(exc).__name__, str(exc)) for r in range(tp_size)]
        loader = run_dp.call_args.kwargs["load_local_pixel_values"]
        grids = run_dp.call_args.args[2]
        if tp_size == 1:
            assignment = [list(range(len(grids)))]
        else:
            order, counts, _ = mm_utils.get_dp_encoder_lb_assignment([math.prod(g) for g in grids], tp_size)
            bounds = [0, *itertools.accumulate(counts)]
            assignment = [order[bounds[r] : bounds[r + 1]] for r in range(tp_size)]
        outcomes = []
        for rank, indices in enumerate(assignment):
            if not indices:
                outcomes.append((rank, "ok", None, None))
                continue
            try:
                loader(indices)
                outcomes.append((rank, "ok", None, None))
            except Exception as exc:  # noqa: BLE001
                outcomes.append((rank, "error", type(exc).__name__, str(exc)))
        return outcomes


POST_FIX = [name for name, sc in SCENARIOS.items() if sc.variant == "post-fix"]


@pytest.mark.parametrize("name", POST_FIX)
def test_real_get_image_feature_agrees_with_the_replay(name):
    scenario = SCENARIOS[name]
    batch = scenario.build()
    real = _real_outcomes(batch, scenario.tp_size)
    trace = replay(batch, tp_size=scenario.tp_size, variant="post-fix", mode="pixels")
    ours = [(r.rank, r.outcome, r.error and r.error.type, r.error and r.error.message) for r in trace.ranks]
    assert ours == real
