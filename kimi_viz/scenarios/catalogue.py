"""Named, reproducible batches for every way the deferred split breaks (pipeline spec §7), and healthy ones.

Each :class:`Scenario` builds a :class:`~kimi_viz.split.batch.Batch` from the sample images the way
SGLang's producer (``prepare_kimi_k3_encoder_inputs``) would, then bends one thing, and states the
outcome SGLang gives on the scenario's code path: ``ok``, or the exception type and exact message (per rank
where the ranks differ). :func:`run_scenario` replays one; the CLI is ``kimi-viz scenario``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
import torch
from PIL import Image

from .._records import frozen
from ..data import sample_path
from ..devices import DeviceLike
from ..errors import ScenarioError
from ..message_catalogue.messages import (
    MSG_CHANNEL_COUNT,
    MSG_CPU_WRONG_GRIDS,
    MSG_GPU_WRONG_GRIDS,
    MSG_LENGTH,
    MSG_MIX_LOCAL,
    MSG_ONE_GRID,
    MSG_TRAILING_SHAPES,
)
from ..preprocess.config import get_config
from ..preprocess.images import load_image
from ..preprocess.resize import resize_config
from ..releases import CodePath, PathSource, path_change
from ..request.images import as_request_image
from ..request.producer import CONSUMER, deferred_config, deferred_item, eager_item, grid_row
from ..request.producer import eager_rows as producer_rows
from ..split._replay import replay
from ..split.batch import Batch, Feature, Item, ProcessorOutputForm
from ..split.cause import ErrorInfo
from ..split.classes import ScenarioClass
from ..split.trace import Trace


@frozen
class ExpectedOutcome:
    """What SGLang does with a scenario: ``ok`` or an exception, per rank when ranks differ."""

    outcome: str  # "ok" | "error"
    error: ErrorInfo | None = None
    ranks: dict[int, ErrorInfo | None] | None = None  # rank -> what it raises (None: the rank is ok)
    scenario_class: ScenarioClass = ScenarioClass.NONE
    silent: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "scenario_class", ScenarioClass(self.scenario_class))

    def to_json(self) -> dict[str, Any]:
        """Return the expectation as plain JSON data."""
        return {
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "ranks": None
            if self.ranks is None
            else [
                {"rank": r, "outcome": "ok" if e is None else "error", "error": None if e is None else e.to_json()}
                for r, e in sorted(self.ranks.items())
            ],
            "scenario_class": self.scenario_class.value,
            "silent": self.silent,
        }


@frozen
class Scenario:
    """A named batch, how to replay it, and what SGLang does with it."""

    name: str
    title: str
    description: str
    scenario_class: ScenarioClass
    builder: Callable[[], Batch] = field(repr=False)
    tp_size: int
    code_path: CodePath
    expected: ExpectedOutcome
    modes: tuple[str, ...] = ("pixels", "shapes")

    def __post_init__(self) -> None:
        object.__setattr__(self, "scenario_class", ScenarioClass(self.scenario_class))

    def build(self) -> Batch:
        """Return a fresh batch for this scenario (its runtime facts set: TP size, code path, note)."""
        batch = self.builder()
        batch.attn_tp_size = self.tp_size
        batch.code_path = self.code_path
        batch.code_path_source = PathSource.SCENARIO
        batch.note = self.description
        batch.created_by = f"kimi-viz scenario {self.name}"
        batch.scenario = self.name
        return batch

    def to_json(self) -> dict[str, Any]:
        """Return the scenario's description and expectation as plain JSON data."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "scenario_class": self.scenario_class.value,
            "tp_size": self.tp_size,
            "code_path": self.code_path,
            "modes": list(self.modes),
            "expected": self.expected.to_json(),
        }


def _open(name: str) -> Image.Image:
    return load_image(sample_path(name)).image


def eager_rows(name: str, preset: str = CONSUMER) -> torch.Tensor:
    """Return the checkpoint processor's rows ``[h*w, 3, 14, 14]`` for a sample image."""
    image = as_request_image(name)
    config = get_config(preset)
    return producer_rows(image, resize_config(image.width, image.height, config), config)


def _batch(items: list[Item], processor_output: ProcessorOutputForm = "concatenated") -> Batch:
    return Batch(items=items, processor=get_config(CONSUMER).to_media_proc_cfg(), processor_output=processor_output)


# ------------------------------------------------------------------------------------------------
# The scenarios
# ------------------------------------------------------------------------------------------------
HEALTHY_IMAGES = (
    ("chelsea.png", "gpu"),
    ("microaneurysms.png", "cpu"),
    ("horse.png", "gpu"),
    ("text.png", "cpu"),
    ("astronaut_tiny_20x5.png", "gpu"),
)


def _healthy() -> Batch:
    return _batch([deferred_item(name, backend) for name, backend in HEALTHY_IMAGES])


def _s1(backend: str) -> Callable[[], Batch]:
    def build() -> Batch:
        names = ("chelsea.png", "microaneurysms.png", "astronaut_tiny_20x5.png")
        return _batch([deferred_item(name, backend) for name in names])

    return build


def _s2(backend: str) -> Callable[[], Batch]:
    def build() -> Batch:
        stale = deferred_item("chelsea.png", backend)
        # The upload was 451x340 when image_grid_thw was written; the image was re-cropped to 451x300
        # and grid_thws / resize_config were recomputed, but image_grid_thw was not.
        stale.grids["image_grid_thw"] = [grid_row(resize_config(451, 340, CONSUMER))]
        return _batch([deferred_item("text.png", backend), stale])

    return build


def _s3() -> Batch:
    return _batch(
        [eager_item("astronaut_tiny_20x5.png", local_preprocessed=True), deferred_item("microaneurysms.png", "cpu")]
    )


def _s4(backend: str) -> Callable[[], Batch]:
    def build() -> Batch:
        return _batch([deferred_item("rocket_4200x3150.jpg", backend, preset="kimi-k25")])

    return build


def _s6_output(output: ProcessorOutputForm) -> Callable[[], Batch]:
    def build() -> Batch:
        return _batch(
            [deferred_item("chelsea.png", "cpu"), deferred_item("microaneurysms.png", "cpu")], processor_output=output
        )

    return build


def _s6_feature() -> Batch:
    tiny = eager_item("astronaut_tiny_20x5.png")
    micro = eager_rows("microaneurysms.png")
    # Two images' rows stacked on a new batch axis instead of concatenated: [2, 64, 3, 14, 14].
    stacked = torch.stack([micro, micro])
    return _batch(
        [
            tiny,
            Item(
                grids={"grid_thws": [[1, 8, 8]]},
                feature=Feature.from_tensor(stacked, "stacked"),
                original_size=(102, 102),
                label="microaneurysms.png x2 (stacked)",
            ),
        ]
    )


def _s8() -> Batch:
    item = deferred_item("microaneurysms.png", "gpu")
    t, h, w = item.grids["grid_thws"][0]
    item.grids["grid_thws"] = [[2, h, w]]
    return _batch([deferred_item("text.png", "gpu"), item])


def _s9() -> Batch:
    micro, tiny = eager_rows("microaneurysms.png"), eager_rows("astronaut_tiny_20x5.png")
    aggregated = Item(
        grids={"grid_thws": [[1, 8, 8], [1, 2, 2]]},
        feature=Feature.from_tensor(torch.cat([micro, tiny]), "patches"),
        label="microaneurysms.png + astronaut_tiny_20x5.png",
    )
    return _batch([deferred_item("text.png", "cpu"), aggregated])


def _s10() -> Batch:
    # A cached eager feature from another image (4 rows) under microaneurysms' grid (64 patches).
    stale = eager_item("microaneurysms.png", rows=eager_rows("astronaut_tiny_20x5.png"))
    stale.label = "microaneurysms.png (stale cached feature)"
    return _batch([eager_item("text.png"), stale])


def _s11(backend: str) -> Callable[[], Batch]:
    def build() -> Batch:
        image = _open("camera_vignette_la.png")  # 512x512, mode LA
        two = torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous()  # [2, H, W]
        resize = resize_config(int(two.shape[-1]), int(two.shape[-2]), CONSUMER)
        item = Item(
            grids={"grid_thws": [grid_row(resize)]},
            feature=Feature.from_tensor(two, "chw"),
            deferred=deferred_config(backend, resize),
            original_size=(image.width, image.height),
            label="camera_vignette_la.png as a 2-channel tensor",
        )
        return _batch([deferred_item("microaneurysms.png", backend), item])

    return build


def _s12() -> Batch:
    image = _open("chelsea.png")
    hwc = torch.from_numpy(np.array(image)).contiguous()  # [300, 451, 3]
    # The producer reads width = shape[-1] = 3 and height = shape[-2] = 451.
    resize = resize_config(int(hwc.shape[-1]), int(hwc.shape[-2]), CONSUMER)
    item = Item(
        grids={"grid_thws": [grid_row(resize)]},
        feature=Feature.from_tensor(hwc, "hwc"),
        deferred=deferred_config("gpu", resize),
        original_size=(image.width, image.height),
        label="chelsea.png as an HWC tensor",
    )
    return _batch([deferred_item("text.png", "gpu"), item])


def _s13() -> Batch:
    empty = torch.zeros((3, 5, 0), dtype=torch.uint8)
    item = Item(
        grids={"grid_thws": [[1, 2, 2]]},
        feature=Feature.from_tensor(empty, "chw"),
        deferred=deferred_config("cpu", resize_config(1, 5, CONSUMER)),
        original_size=(0, 5),
        label="an empty 0x5 image",
    )
    return _batch([deferred_item("microaneurysms.png", "cpu"), item])


def _err(type_: str, message: str, cls: ScenarioClass) -> ExpectedOutcome:
    return ExpectedOutcome("error", ErrorInfo(type_, message), scenario_class=cls)


def _ok(cls: ScenarioClass = ScenarioClass.NONE, silent: bool = False, tp: int = 1) -> ExpectedOutcome:
    return ExpectedOutcome("ok", ranks=dict.fromkeys(range(tp)), scenario_class=cls, silent=silent)


def _healthy_scenario(tp: int) -> Scenario:
    """Return the healthy mixed-batch scenario replayed at attention-TP size ``tp``."""
    healthy = ", ".join(f"{n} ({b})" for n, b in HEALTHY_IMAGES)
    return Scenario(
        f"healthy-tp{tp}",
        f"Healthy mixed batch at attention-TP {tp}",
        f"Five sample images, gpu and cpu backends mixed ({healthy}), replayed with the fixed code at "
        f"attention-TP size {tp}: every rank's rows match its grids.",
        ScenarioClass.NONE,
        _healthy,
        tp,
        "post-fix",
        _ok(tp=tp),
    )


def _s1_scenario(backend: str, msg: str) -> Scenario:
    """Return the S1 scenario (shard-local grid index, pre-fix, TP 2) on ``backend``, rank 1 raising ``msg``."""
    fix = path_change("post-fix")
    before = "the post-fix path" if fix is None else fix.pr_text
    return Scenario(
        f"s1-{backend}",
        f"S1: shard-local grid index, {backend} backend (pre-fix, TP 2)",
        "chelsea.png, microaneurysms.png and astronaut_tiny_20x5.png on two ranks with the code before "
        f"{before}: rank 1 materializes images [1, 2] but reads grid_thws_host rows [0, 1].",
        ScenarioClass.S1,
        _s1(backend),
        2,
        "pre-fix",
        ExpectedOutcome(
            "error",
            ErrorInfo("ValueError", msg),
            ranks={0: None, 1: ErrorInfo("ValueError", msg)},
            scenario_class=ScenarioClass.S1,
        ),
    )


def _s2_scenario(backend: str, msg: str) -> Scenario:
    """Return the S2 scenario (a stale image_grid_thw) on ``backend``, raising ``msg``."""
    return Scenario(
        f"s2-{backend}",
        f"S2: stale image_grid_thw, {backend} backend",
        "chelsea.png carries both grid keys; image_grid_thw was written for a 451x340 upload and never "
        "updated, grid_thws and resize_config follow the 451x300 image. SGLang reads image_grid_thw.",
        ScenarioClass.S2,
        _s2(backend),
        1,
        "post-fix",
        _err("ValueError", msg, ScenarioClass.S2),
    )


# The message each backend raises when a rank's rows do not match the grids it reads (S1, S2).
_WRONG_GRID_MESSAGES = (("cpu", MSG_LENGTH), ("gpu", MSG_GPU_WRONG_GRIDS))

# The consumer's patch side in pixels: the trailing sides of every pixel row.
_PATCH = get_config(CONSUMER).patch_size

# Every scenario, one row each, in the order they are listed.
_SCENARIO_ROWS: tuple[Scenario, ...] = (
    *(_healthy_scenario(tp) for tp in (1, 2, 4)),
    *(_s1_scenario(backend, msg) for backend, msg in _WRONG_GRID_MESSAGES),
    *(_s2_scenario(backend, msg) for backend, msg in _WRONG_GRID_MESSAGES),
    Scenario(
        "s3-mixed-local",
        "S3: local preprocessed and deferred images on one rank",
        "astronaut_tiny_20x5.png was preprocessed on the encoder (encoder_local_preprocessed) while "
        "microaneurysms.png stayed deferred; both land on the same rank.",
        ScenarioClass.S3,
        _s3,
        1,
        "post-fix",
        _err("ValueError", MSG_MIX_LOCAL, ScenarioClass.S3),
    ),
    Scenario(
        "s4-cpu",
        "S4: Kimi-K2.5 limits on a Kimi-K3 image, cpu backend",
        "rocket_4200x3150.jpg (65712 patches under K3) was sized by a producer with Kimi-K2.5 limits "
        "(in_patch_limit 16384); the consumer's checkpoint processor uses Kimi-K3's 65536 and resizes differently.",
        ScenarioClass.S4,
        _s4("cpu"),
        1,
        "post-fix",
        _err("ValueError", MSG_CPU_WRONG_GRIDS, ScenarioClass.S4),
    ),
    Scenario(
        "s4-gpu",
        "S4: Kimi-K2.5 limits on a Kimi-K3 image, gpu backend (silent)",
        "rocket_4200x3150.jpg sized with Kimi-K2.5 limits; SGLang's gpu path resizes with the item's own "
        "resize_config, so its grid matches and nothing is raised: the image is encoded at K2.5 resolution.",
        ScenarioClass.S4,
        _s4("gpu"),
        1,
        "post-fix",
        _ok(ScenarioClass.S4, silent=True),
    ),
    Scenario(
        "s6-stacked",
        "S6: the processor returns stacked [B, N, ...] rows",
        f"The checkpoint processor returns pixel_values stacked per image ([2, N, 3, {_PATCH}, {_PATCH}]) instead of "
        "concatenated; SGLang reads pixel_values.shape[0] = 2 as the row count.",
        ScenarioClass.S6,
        _s6_output("stacked"),
        1,
        "post-fix",
        _err("ValueError", MSG_LENGTH, ScenarioClass.S6),
    ),
    Scenario(
        "s6-list",
        "S6: the processor returns a per-image list",
        "The checkpoint processor returns pixel_values as a list of per-image tensors.",
        ScenarioClass.S6,
        _s6_output("list"),
        1,
        "post-fix",
        _err("AttributeError", "'list' object has no attribute 'shape'", ScenarioClass.S6),
    ),
    Scenario(
        "s6-stacked-feature",
        f"S6: an eager feature stacked as [B, N, 3, {_PATCH}, {_PATCH}]",
        "An eager item's feature holds two images' rows stacked on a batch axis instead of concatenated.",
        ScenarioClass.S6,
        _s6_feature,
        1,
        "post-fix",
        _err(
            "ValueError",
            MSG_TRAILING_SHAPES.format(
                f"torch.Size([3, {_PATCH}, {_PATCH}])", f"torch.Size([2, 64, 3, {_PATCH}, {_PATCH}])"
            ),
            ScenarioClass.S6,
        ),
    ),
    Scenario(
        "s8-t2",
        "S8: t > 1 on a deferred image",
        "microaneurysms.png declares grid_thws [2, 8, 8]; the gpu path always produces t = 1.",
        ScenarioClass.S8,
        _s8,
        1,
        "post-fix",
        _err("ValueError", MSG_GPU_WRONG_GRIDS, ScenarioClass.S8),
    ),
    Scenario(
        "s9-two-grids",
        "S9: two grid rows in one item",
        "One item aggregates microaneurysms.png and astronaut_tiny_20x5.png: two grid rows.",
        ScenarioClass.S9,
        _s9,
        1,
        "post-fix",
        _err("ValueError", MSG_ONE_GRID, ScenarioClass.S9),
    ),
    Scenario(
        "s10-stale-eager",
        "S10: a stale eager feature (silent here)",
        "A cached eager feature of 4 rows sits under microaneurysms.png's 64-patch grid; get_image_feature "
        "copies it unchecked and the tower fails later.",
        ScenarioClass.S10,
        _s10,
        1,
        "post-fix",
        _ok(ScenarioClass.S10, silent=True),
    ),
    Scenario(
        "s11-two-channels",
        "S11: a 2-channel tensor, gpu backend",
        "camera_vignette_la.png (LA) sent as a [2, 512, 512] tensor; SGLang's background fill fails on it.",
        ScenarioClass.S11,
        _s11("gpu"),
        1,
        "post-fix",
        _err(
            "RuntimeError",
            "The size of tensor a (0) must match the size of tensor b (2) at non-singleton dimension 1",
            ScenarioClass.S11,
        ),
    ),
    Scenario(
        "s11-cpu-two-channels",
        "S11: a 2-channel tensor, cpu backend",
        "The same [2, 512, 512] tensor on the cpu backend: its first axis is not 1, 3 or 4, so SGLang reads it "
        "as HWC with 512 channels.",
        ScenarioClass.S11,
        _s11("cpu"),
        1,
        "post-fix",
        _err("ValueError", MSG_CHANNEL_COUNT.format(512), ScenarioClass.S11),
    ),
    Scenario(
        "s12-hwc",
        "S12: an HWC tensor read as CHW (silent)",
        "chelsea.png sent as a [300, 451, 3] HWC tensor; producer and gpu path both read it as a "
        "300-channel 3x451 image, so sizes agree and the encoder sees garbage.",
        ScenarioClass.S12,
        _s12,
        1,
        "post-fix",
        _ok(ScenarioClass.S12, silent=True),
    ),
    Scenario(
        "s13-zero-size",
        "S13: a zero-sized image",
        "An empty 0x5 image reaches the cpu backend; the checkpoint processor's resize divides by its width.",
        ScenarioClass.S13,
        _s13,
        1,
        "post-fix",
        _err("ZeroDivisionError", "division by zero", ScenarioClass.S13),
    ),
)


SCENARIOS: dict[str, Scenario] = {sc.name: sc for sc in _SCENARIO_ROWS}


def get_scenario(name: str) -> Scenario:
    """Return the scenario called ``name``; ScenarioError lists the valid names otherwise."""
    key = str(name).strip().lower()
    if key not in SCENARIOS:
        raise ScenarioError(
            f"unknown scenario {name!r}; expected one of: {', '.join(SCENARIOS)} (see `kimi-viz scenario list`)"
        )
    return SCENARIOS[key]


def run_scenario(
    name: str,
    *,
    mode: str = "pixels",
    device: DeviceLike = "auto",
    sglang_version: str | None = None,
    code_path: str | None = None,
) -> Trace:
    """Return the replay :class:`~kimi_viz.split._replay.Trace` of scenario ``name`` (every rank).

    By default the scenario's own code path is replayed; ``sglang_version`` (or ``code_path``) replays
    another release's.
    """
    scenario = get_scenario(name)
    return replay(
        scenario.build(),
        tp_size=scenario.tp_size,
        mode=mode,
        device=device,
        sglang_version=sglang_version,
        code_path=code_path,
    )


__all__ = [
    "Scenario",
    "ExpectedOutcome",
    "SCENARIOS",
    "get_scenario",
    "run_scenario",
    "eager_rows",
    "HEALTHY_IMAGES",
]
