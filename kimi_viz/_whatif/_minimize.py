"""The smallest subset (and order) of a failing request's images that still fails the same way: delta debugging.

:func:`minimize` runs Zeller's ``ddmin`` over the request's images, keeping their relative order: a
candidate "still fails" when some rank raises the same exception type and message as the full
request did, on the same release, attention-TP size and server settings (cache hits stay with their
images). The result is 1-minimal: dropping any one kept image makes the failure go away. It then
tries every order of the kept images (up to :data:`MAX_ORDERS` of them) to say whether the order
matters, and names the image to look at: the first diverging image of the minimal request.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..report.tables import Table
from ..request.images import RequestImage, probe_images
from ..request.producer import Mode
from ..request.settings import ServerSettings
from .run import WhatIf, evaluate

MAX_ORDERS = 120  # every order of up to 5 kept images


@dataclass
class Minimized:
    """A failing request shrunk to the images it needs, and the image to look at."""

    images: list[RequestImage]
    settings: ServerSettings
    sglang_version: str
    tp_size: int
    target: tuple[str, str] | None  # the (type, message) kept; None when the request does not fail
    kept: list[int]  # positions in the original request, in request order
    result: WhatIf  # the what-if of the minimal request (of the full one when nothing fails)
    tests: int = 0  # what-ifs the search ran
    orders: list[tuple[list[int], bool]] = field(default_factory=list)  # each order tried and whether it fails

    @property
    def culprit(self) -> int | None:
        """Return the original position of the image to look at (the minimal request's first diverging image)."""
        if self.target is None:
            return None
        local = self.result.culprit()
        return None if local is None else self.kept[local]

    @property
    def order_matters(self) -> bool | None:
        """Return True when some order of the kept images passes, None when orders were not tried."""
        if not self.orders:
            return None
        return not all(fails for _, fails in self.orders)

    def table(self) -> Table:
        """Return one row per original image: kept or dropped, its grid, and whether it is the one to look at."""
        kept = set(self.kept)
        rows = []
        for p, image in enumerate(self.images):
            item = self.result.built.items[self.kept.index(p)] if p in kept else None
            grid = None if item is None else next(iter(item.grids.values()))[0]
            rows.append(
                [
                    p,
                    image.label,
                    f"{image.width}×{image.height}",
                    "kept" if p in kept else "dropped",
                    grid,
                    "look at this one" if p == self.culprit else "",
                ]
            )
        caption = "no failure to shrink" if self.target is None else f"keeps {self.target[0]}: {self.target[1]}"
        return Table(
            ["image", "file", "size", "minimal set", "grid", ""],
            rows,
            caption=caption,
            highlight=[p == self.culprit for p in range(len(self.images))],
        )

    def text(self) -> str:
        """Return the result as ``kimi-viz whatif --minimize`` prints it."""
        where = f"SGLang {self.sglang_version} at attention-TP {self.tp_size}"
        if self.target is None:
            return f"the request passes on {where}: there is no failure to shrink"
        names = [f"{p} ({self.images[p].label})" for p in self.kept]
        lines = [
            f"== minimal failing request on {where} ==",
            f"keeps the failure {self.target[0]}: {self.target[1]}",
            f"minimal set: {len(self.kept)} of {len(self.images)} images, in this order: " + ", ".join(names),
            f"search: {self.tests} what-ifs (ddmin, order kept); every kept image is needed",
        ]
        if self.orders:
            failing = [order for order, fails in self.orders if fails]
            passing = [order for order, fails in self.orders if not fails]
            lines.append(
                f"orders: {len(failing)} of {len(self.orders)} orders fail"
                + (f"; passing orders: {passing[:6]}" if passing else " (the order does not matter)")
            )
        culprit = self.culprit
        if culprit is not None:
            div = self.result.verdict.divergence if self.result.verdict is not None else None
            read = (
                f"; its grid was read from image {self.kept[div.grid_read_from]}"
                if div is not None and div.grid_read_from is not None and div.grid_read_from < len(self.kept)
                else ""
            )
            lines.append(f"look at: image {culprit} ({self.images[culprit].label}){read}")
        items = ", ".join(f"item {k} = image {self.kept[p]}" for k, p in enumerate(self.result.call.positions))
        lines.append(f"why (numbering the minimal call's items: {items}): {self.result.why}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Return the minimal set as JSON: the error kept, the kept positions and labels, the culprit, the orders."""
        return {
            "sglang_version": self.sglang_version,
            "tp_size": self.tp_size,
            "error": None if self.target is None else {"type": self.target[0], "message": self.target[1]},
            "kept": list(self.kept),
            "labels": [self.images[p].label for p in self.kept],
            "culprit": self.culprit,
            "culprit_label": None if self.culprit is None else self.images[self.culprit].label,
            "tests": self.tests,
            "order_matters": self.order_matters,
            "orders": [{"order": order, "fails": fails} for order, fails in self.orders],
            "whatif": self.result.to_json(),
        }


def ddmin(items: list[int], fails: Callable[[list[int]], bool]) -> list[int]:
    """Return a 1-minimal sublist of ``items`` (order kept) for which ``fails`` holds (Zeller's ddmin)."""
    n = 2
    while len(items) >= 2:
        size = len(items)
        chunks = [items[size * i // n : size * (i + 1) // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        for chunk in chunks:
            if fails(chunk):
                items, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [x for x in items if x not in chunk]
                if rest and fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


def minimize(
    images: Sequence[Any],
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    mode: Mode = "shapes",
) -> Minimized:
    """Return the :class:`Minimized` request: the fewest images, in order, that still fail with the same message."""
    probed = probe_images(images)
    settings = (settings if settings is not None else ServerSettings()).check_images(len(probed))
    full = evaluate(probed, settings, sglang_version, tp_size, mode=mode)
    target = full.error_key()
    if target is None:
        return Minimized(probed, settings, full.release.version, full.tp_size, None, [], full, 1)
    cache: dict[tuple[int, ...], WhatIf] = {tuple(range(len(probed))): full}

    def run(positions: Sequence[int]) -> WhatIf:
        key = tuple(positions)
        if key not in cache:
            cache[key] = evaluate(
                [probed[p] for p in key], settings.for_subset(list(key)), sglang_version, tp_size, mode=mode
            )
        return cache[key]

    def fails(positions: list[int]) -> bool:
        return target in run(positions).errors()

    kept = ddmin(list(range(len(probed))), fails)
    orders: list[tuple[list[int], bool]] = []
    if len(kept) > 1:
        for order in itertools.islice(itertools.permutations(kept), MAX_ORDERS):
            orders.append((list(order), fails(list(order))))
    tests = len(cache)
    return Minimized(probed, settings, full.release.version, full.tp_size, target, kept, run(kept), tests, orders)


__all__ = ["MAX_ORDERS", "Minimized", "ddmin", "minimize"]
