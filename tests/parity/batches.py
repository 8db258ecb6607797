"""Seeded random batches for the lane: what a real deployment sends, bent the ways §7 names.

Each batch: attention-TP 1–8; 1–8 images from ``data/`` with random crops (at most 640 px a side so
the real torch path stays quick on a CPU) in mode RGB, RGBA, L or P; each image deferred to the gpu
or the cpu backend; sometimes a stale second grid key (``image_grid_thw`` written for another crop);
sometimes an image sized by a producer with Kimi-K2.5 limits for the Kimi-K3 consumer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image

from kimi_viz.data import sample_path
from kimi_viz.preprocess.config import get_config
from kimi_viz.preprocess.resize import resize_config
from kimi_viz.request import deferred_item
from kimi_viz.split.batch import Batch

SOURCES = (
    "chelsea.png",
    "coffee.png",
    "astronaut.png",
    "rocket.jpg",
    "horse.png",
    "camera.png",
    "text.png",
    "microaneurysms.png",
    "retina.jpg",
    "hubble_deep_field.jpg",
)
MODES = ("RGB", "RGBA", "L", "P")
MAX_SIDE = 640


@dataclass
class RandomBatch:
    """A seeded batch and how it was made (for the failure message)."""

    seed: int
    tp_size: int
    batch: Batch
    description: str


def _open(name: str) -> Image.Image:
    with Image.open(sample_path(name)) as image:
        image.load()
        return image.convert("RGB")


def random_batch(seed: int) -> RandomBatch:
    """Return the batch of ``seed`` (the same batch for the same seed, on every machine)."""
    rng = random.Random(seed)
    tp = rng.randint(1, 8)
    items, notes = [], []
    for k in range(rng.randint(1, 8)):
        name = rng.choice(SOURCES)
        source = _open(name)
        width = rng.randint(8, min(MAX_SIDE, source.width))
        height = rng.randint(8, min(MAX_SIDE, source.height))
        left, top = rng.randint(0, source.width - width), rng.randint(0, source.height - height)
        image = source.crop((left, top, left + width, top + height))
        mode = rng.choice(MODES)
        if mode == "RGBA":
            image = image.convert("RGBA")
            image.putalpha(Image.linear_gradient("L").resize(image.size))
        elif mode == "P":
            image = image.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
        elif mode == "L":
            image = image.convert("L")
        backend = rng.choice(("gpu", "cpu"))
        preset = "kimi-k25" if rng.random() < 0.15 else "kimi-k3"
        item = deferred_item(image, backend, preset=preset, label=name)
        item.label = f"{name} {width}x{height}+{left}+{top} {mode}"
        note = f"{k}: {item.label} {backend}" + (" k25-producer" if preset == "kimi-k25" else "")
        if rng.random() < 0.2:  # a stale second grid key
            stale = resize_config(
                max(1, width + rng.randint(-200, 200)), max(1, height + rng.randint(-200, 200)), "kimi-k3"
            )
            item.grids["image_grid_thw"] = [[int(v) for v in stale.grid]]
            note += f" stale image_grid_thw {item.grids['image_grid_thw'][0]}"
        items.append(item)
        notes.append(note)
    batch = Batch(items=items, processor=get_config("kimi-k3").to_media_proc_cfg(), attn_tp_size=tp)
    return RandomBatch(seed, tp, batch, f"seed {seed}, TP {tp}: " + "; ".join(notes))
