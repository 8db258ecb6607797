"""Driving the real SGLang the way its own unit tests do, and comparing it with the kit.

- :func:`real_outcomes` runs the real ``KimiK3ForConditionalGeneration.get_image_feature`` on a kit
  :class:`~kimi_viz.split.batch.Batch`: a model made with ``__new__`` plus ``nn.Module.__init__``, a
  stub vision tower on the CPU, SGLang's DP runner replaced by one that records its loader, the loader
  called with each rank's share from SGLang's own ``get_dp_encoder_lb_assignment``, and a
  checkpoint-processor stand-in as ``_encoder_image_processor`` (the resize from SGLang's own
  ``navit_resize_config``, the pixels from the kit's checkpoint path — the consumer's checkpoint code
  is not part of SGLang). Returns ``(rank, outcome, type, message)`` per rank.
- :func:`kit_outcomes` is the same tuple list from the kit's replay of the release.
- :func:`compare` returns the disagreements between the two, one line each.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
import os
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock

Outcome = tuple[int, str, str | None, str | None]
COUNTS: list[dict] = []


def _release() -> str | None:
    try:
        from importlib.metadata import version

        import sglang  # noqa: F401

        return version("sglang")
    except Exception:  # noqa: BLE001 - any failure to import means: no SGLang here
        return None


RELEASE = _release()


def record(suite: str, **counts) -> None:
    """Note what a suite compared against the real code (printed at the end, written to the report file)."""
    entry = {"release": RELEASE, "suite": suite, **counts}
    COUNTS.append(entry)
    path = os.environ.get("KIMI_VIZ_PARITY_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")


def module(name: str):
    """Return a real SGLang module (the lane fails, never skips, when one does not import)."""
    return importlib.import_module(name)


class CheckpointImageProcessor:
    """The consumer's checkpoint processor: SGLang's own resize from each image's size, the kit's pixels."""

    def __init__(self, media_proc_cfg: dict, output: str = "concatenated"):
        from kimi_viz.preprocess.config import get_config

        self.media_proc_cfg = dict(media_proc_cfg)
        self.config = get_config(media_proc_cfg)
        self.output = output

    def preprocess(self, medias, return_tensors="pt"):
        import torch

        from kimi_viz.preprocess.pixels_checkpoint import checkpoint_pixels
        from kimi_viz.preprocess.resize import ResizeConfig

        k25 = module("sglang.srt.multimodal.processors.kimi_k25")
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
            rows.append(checkpoint_pixels(image, ResizeConfig.from_sglang(resize, c.patch_size), c)[1])
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


class TowerStub:
    """What get_image_feature reads from the vision tower: its device, weight dtype, merge and patch size."""

    merge_kernel_size = (2, 2)
    patch_size = 14

    def __init__(self):
        import torch

        self.device = torch.device("cpu")
        self.patch_embed = SimpleNamespace(proj=SimpleNamespace(weight=torch.empty(1, dtype=torch.float32)))


def real_items(batch) -> list:
    """Return SGLang ``MultimodalDataItem`` s for the kit batch's items (grids, deferred config, flags, feature)."""
    import torch

    schedule = module("sglang.srt.managers.schedule_batch")
    processing = module("sglang.srt.multimodal.kimi_k3_image_processing")
    items = []
    for k, item in enumerate(batch.items):
        data = {key: torch.tensor(rows, dtype=torch.int64) for key, rows in item.grids.items()}
        if item.deferred is not None:
            d = item.deferred
            if "backend" in d:
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


def real_model(batch):
    """Return a real KimiK3ForConditionalGeneration shell that get_image_feature can run on (CPU, stub tower)."""
    from torch import nn

    kimi_k3 = module("sglang.srt.models.kimi_k3")
    model = kimi_k3.KimiK3ForConditionalGeneration.__new__(kimi_k3.KimiK3ForConditionalGeneration)
    nn.Module.__init__(model)
    model.use_data_parallel = True
    model.vision_tower = TowerStub()
    model.mm_projector = lambda embeds: embeds
    if batch.processor is not None:
        model._encoder_image_processor = CheckpointImageProcessor(batch.processor, batch.processor_output)
    return model


def release_patches(stack: ExitStack, tp_size: int) -> None:
    """Patch what a release reads from a running server (0.5.18's configured_tp_size reads a published config)."""
    kimi_k3 = module("sglang.srt.models.kimi_k3")
    if hasattr(kimi_k3, "configured_tp_size"):
        stack.enter_context(mock.patch.object(kimi_k3, "configured_tp_size", return_value=tp_size))


def assignment(grids: list, tp_size: int) -> list[list[int]]:
    """Return each rank's image indices from SGLang's own get_dp_encoder_lb_assignment."""
    if tp_size == 1:
        return [list(range(len(grids)))]
    mm_utils = module("sglang.srt.multimodal.mm_utils")
    order, counts, _ = mm_utils.get_dp_encoder_lb_assignment([math.prod(g) for g in grids], tp_size)
    bounds = [0, *itertools.accumulate(counts)]
    return [list(order[bounds[r] : bounds[r + 1]]) for r in range(tp_size)]


def real_outcomes(batch, tp_size: int) -> list[Outcome]:
    """Return ``(rank, outcome, type, message)`` per rank from SGLang's own get_image_feature."""
    import torch

    model = real_model(batch)
    items = real_items(batch)
    with ExitStack() as stack:
        release_patches(stack, tp_size)
        run_dp = stack.enter_context(
            mock.patch(
                "sglang.srt.multimodal.mm_utils.run_dp_sharded_mrope_vision_model", return_value=torch.zeros(1, 2)
            )
        )
        try:
            model.get_image_feature(items)
        except Exception as exc:  # noqa: BLE001 - raised before the DP runner: every rank raises it
            return [(r, "error", type(exc).__name__, str(exc)) for r in range(tp_size)]
        loader = run_dp.call_args.kwargs["load_local_pixel_values"]
        grids = run_dp.call_args.args[2]
        outcomes: list[Outcome] = []
        for rank, indices in enumerate(assignment(grids, tp_size)):
            if not indices:
                outcomes.append((rank, "ok", None, None))
                continue
            try:
                loader(indices)
                outcomes.append((rank, "ok", None, None))
            except Exception as exc:  # noqa: BLE001 - SGLang's own exception, compared verbatim
                outcomes.append((rank, "error", type(exc).__name__, str(exc)))
        return outcomes


def kit_outcomes(batch, tp_size: int, release: str, mode: str = "shapes") -> list[Outcome]:
    """Return ``(rank, outcome, type, message)`` per rank from the kit's replay of ``release``."""
    from kimi_viz.split._replay import replay

    trace = replay(batch, tp_size=tp_size, sglang_version=release, mode=mode)
    return [(r.rank, r.outcome, r.error and r.error.type, r.error and r.error.message) for r in trace.ranks]


def compare(name: str, ours: list[Outcome], real: list[Outcome]) -> list[str]:
    """Return one line per rank where the kit and the real code disagree."""
    if len(ours) != len(real):
        return [f"{name}: {len(ours)} ranks replayed, {len(real)} from SGLang"]
    return [f"{name}: rank {o[0]}: kit {o[1:]} != SGLang {r[1:]}" for o, r in zip(ours, real) if o != r]
