"""Where the items of one ``get_image_feature`` call came from: the forward pass around the call.

Under load SGLang's ``get_embedding_and_mask`` (``managers/mm_schedule.py`` from 0.5.18,
``managers/mm_utils.py`` in 0.5.17) collects the embedding-cache misses of every request of the
prefill batch whose window overlaps an image, deduplicates them by hash and encodes them in one
``get_image_feature`` call; so one failing call may hold images of several requests. A capture records
that context when SGLang exposes it (:mod:`kimi_viz.capture.context`) as a :class:`ForwardContext`:

- :class:`ContextRequest` — one request with images, in SGLang's order (``items_size``): its rid and
  position in the forward batch when known, its prefix and extend lengths (the window
  ``[prefix, prefix + extend)`` of its prompt this forward computes) and its images;
- :class:`ContextImage` — one image of a request: its placeholder runs (SGLang's inclusive ``offsets``
  in the request's prompt) and its :data:`ImageStatus` in this forward (in the call, an embedding-cache
  hit, the same image as a call item, outside the window, or not in the call for a reason not recorded);
- :class:`ContextItem` — one item of the call: the request and image it came from.

What SGLang did not expose on that path is ``None`` (never guessed). :meth:`ForwardContext.summary`
is the sentence every view leads with: "this call held 2 images from 2 requests".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from .._records import frozen

ImageStatus = Literal["in-call", "cache-hit", "same-image", "outside-window", "not-in-call"]
IMAGE_STATUSES: tuple[ImageStatus, ...] = ("in-call", "cache-hit", "same-image", "outside-window", "not-in-call")
STATUS_TEXT: dict[str, str] = {
    "in-call": "in this call",
    "cache-hit": "embedding-cache hit",
    "same-image": "same image (hash) as a call item",
    "outside-window": "outside this forward's window",
    "not-in-call": "not in this call",
}


def plural(count: int, word: str) -> str:
    """Return ``"1 image"`` / ``"2 images"``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _runs_text(offsets: Sequence[Sequence[int]]) -> str:
    return ", ".join(f"[{start}, {end}]" for start, end in offsets) or "(none)"


@frozen
class ContextImage:
    """One image of a request in the forward pass (one of its ``MultimodalDataItem`` s)."""

    offsets: tuple[tuple[int, int], ...]  # SGLang's inclusive (start, end) placeholder runs in the request's prompt
    status: ImageStatus
    call_item: int | None = None  # the call item it is ("in-call") or shares its hash with ("same-image")

    @property
    def tokens(self) -> int:
        """Return the number of placeholder tokens of the image (its rows in the call)."""
        return sum(end - start + 1 for start, end in self.offsets)

    def describe(self) -> str:
        """Return ``"call item 1"``, ``"embedding-cache hit"``, ``"same image (hash) as call item 0"`` …"""
        if self.status == "in-call" and self.call_item is not None:
            return f"call item {self.call_item}"
        if self.status == "same-image" and self.call_item is not None:
            return f"same image (hash) as call item {self.call_item}"
        return STATUS_TEXT[self.status]

    def to_json(self) -> dict[str, Any]:
        """Return ``{"offsets", "status", "call_item"}``."""
        return {
            "offsets": [[int(start), int(end)] for start, end in self.offsets],
            "status": self.status,
            "call_item": self.call_item,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ContextImage:
        """Return the image of a validated manifest entry."""
        return cls(
            offsets=tuple((int(start), int(end)) for start, end in value["offsets"]),
            status=value["status"],
            call_item=value.get("call_item"),
        )


@frozen
class ContextRequest:
    """One request with images in the forward pass, in SGLang's request order."""

    prefix_len: int | None  # tokens already in the KV cache (radix hit or earlier chunks); None: not passed
    extend_len: int | None  # tokens this forward computes; None: not passed (SGLang then uses 0)
    images: tuple[ContextImage, ...] = ()
    rid: str | None = None  # the request id, when the forward batch exposes it
    batch_index: int | None = None  # the request's position in the forward batch (text-only requests count)

    @property
    def window(self) -> tuple[int, int] | None:
        """Return the half-open window ``(prefix, prefix + extend)`` of the prompt this forward computes."""
        if self.prefix_len is None:
            return None
        return self.prefix_len, self.prefix_len + (self.extend_len or 0)

    def name(self, index: int) -> str:
        """Return ``"request 0 (rid a1)"``, or ``"request 0"`` when no rid was recorded."""
        return f"request {index}" + (f" (rid {self.rid})" if self.rid is not None else "")

    def to_json(self) -> dict[str, Any]:
        """Return ``{"rid", "batch_index", "prefix_len", "extend_len", "images"}``."""
        return {
            "rid": self.rid,
            "batch_index": self.batch_index,
            "prefix_len": self.prefix_len,
            "extend_len": self.extend_len,
            "images": [image.to_json() for image in self.images],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ContextRequest:
        """Return the request of a validated manifest entry."""
        return cls(
            prefix_len=value.get("prefix_len"),
            extend_len=value.get("extend_len"),
            images=tuple(ContextImage.from_json(image) for image in value["images"]),
            rid=value.get("rid"),
            batch_index=value.get("batch_index"),
        )


@frozen
class ContextItem:
    """One item of the call: the request (index into :attr:`ForwardContext.requests`) and its image it came from."""

    request: int | None  # None: the item was not found among the forward's requests
    image: int | None

    def to_json(self) -> dict[str, Any]:
        """Return ``{"request", "image"}``."""
        return {"request": self.request, "image": self.image}


@frozen
class ForwardContext:
    """The forward pass around one ``get_image_feature`` call: its requests, and where each call item came from."""

    requests: tuple[ContextRequest, ...]
    items: tuple[ContextItem, ...]  # one per item of the call, in call order
    chunked_prefill_size: int | None = None  # the server's chunked-prefill size (-1: off); None: not reachable
    source: str = ""  # where each fact was read, and what SGLang did not expose

    def call_requests(self) -> list[int]:
        """Return the indices of the requests the call's items came from, in order of first appearance."""
        return list(dict.fromkeys(item.request for item in self.items if item.request is not None))

    def summary(self) -> str:
        """Return ``"this call held 2 images from 2 requests"`` (and how many items were not found, if any)."""
        text = f"this call held {plural(len(self.items), 'image')} from {plural(len(self.call_requests()), 'request')}"
        lost = sum(1 for item in self.items if item.request is None)
        if lost:
            text += f" ({plural(lost, 'image')} not found among the forward's requests)"
        return text

    def item_rows(self) -> list[dict[str, Any]]:
        """Return one row per call item: ``item``, ``request``, ``rid``, ``image``, ``offsets``, ``tokens``,
        ``prefix_len``, ``extend_len`` and ``window`` (``None`` where not recorded)."""
        rows = []
        for k, item in enumerate(self.items):
            request = self.requests[item.request] if item.request is not None else None
            image = request.images[item.image] if request is not None and item.image is not None else None
            rows.append(
                {
                    "item": k,
                    "request": item.request,
                    "rid": None if request is None else request.rid,
                    "image": item.image,
                    "offsets": None if image is None else [list(run) for run in image.offsets],
                    "tokens": None if image is None else image.tokens,
                    "prefix_len": None if request is None else request.prefix_len,
                    "extend_len": None if request is None else request.extend_len,
                    "window": None if request is None or request.window is None else list(request.window),
                }
            )
        return rows

    def origin(self, item: int) -> str | None:
        """Return where call item ``item`` came from, ``"request 1 (rid req-b), image 0"``; None when not recorded."""
        if not 0 <= item < len(self.items):
            return None
        place = self.items[item]
        if place.request is None or place.image is None:
            return None
        return f"{self.requests[place.request].name(place.request)}, image {place.image}"

    def others(self) -> list[tuple[int, int, ContextImage]]:
        """Return ``(request, image, ContextImage)`` for every image of the forward that is not a call item."""
        return [
            (r, i, image)
            for r, request in enumerate(self.requests)
            for i, image in enumerate(request.images)
            if image.status != "in-call"
        ]

    def chunked_text(self) -> str:
        """Return the chunked-prefill size as the views say it: a number, ``off (-1)`` or ``not recorded``."""
        size = self.chunked_prefill_size
        return "not recorded" if size is None else "off (-1)" if size == -1 else str(size)

    def lines(self) -> list[str]:
        """Return the summary, a table of the call's items, and the forward's other images (for a terminal)."""
        out = [f"forward pass: {self.summary()}; chunked-prefill size: {self.chunked_text()}"]
        header = ("item", "request", "rid", "image", "pad tokens [start, end]", "prefix", "extend", "window")
        table = [header]
        for row in self.item_rows():
            table.append(
                (
                    str(row["item"]),
                    "?" if row["request"] is None else str(row["request"]),
                    "-" if row["rid"] is None else str(row["rid"]),
                    "?" if row["image"] is None else str(row["image"]),
                    "?" if row["offsets"] is None else _runs_text(row["offsets"]),
                    "?" if row["prefix_len"] is None else str(row["prefix_len"]),
                    "?" if row["extend_len"] is None else str(row["extend_len"]),
                    "?" if row["window"] is None else f"[{row['window'][0]}, {row['window'][1]})",
                )
            )
        widths = [max(len(line[c]) for line in table) for c in range(len(header))]
        out += ["  " + "  ".join(cell.ljust(widths[c]) for c, cell in enumerate(line)).rstrip() for line in table]
        for r, i, image in self.others():
            out.append(
                f"  not in this call: {self.requests[r].name(r)} image {i}, pad tokens {_runs_text(image.offsets)}: "
                f"{image.describe()}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """Return the manifest's ``forward_context`` object."""
        return {
            "requests": [request.to_json() for request in self.requests],
            "items": [item.to_json() for item in self.items],
            "chunked_prefill_size": self.chunked_prefill_size,
            "source": self.source,
        }

    def report_json(self) -> dict[str, Any]:
        """Return :meth:`to_json` plus ``"summary"`` and ``"call_items"`` (what ``triage --json`` prints)."""
        return {"summary": self.summary(), **self.to_json(), "call_items": self.item_rows()}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ForwardContext:
        """Return the context of a validated manifest ``forward_context`` object."""
        return cls(
            requests=tuple(ContextRequest.from_json(request) for request in value["requests"]),
            items=tuple(ContextItem(item.get("request"), item.get("image")) for item in value["items"]),
            chunked_prefill_size=value.get("chunked_prefill_size"),
            source=value.get("source", ""),
        )


__all__ = [
    "IMAGE_STATUSES",
    "STATUS_TEXT",
    "ContextImage",
    "ContextItem",
    "ContextRequest",
    "ForwardContext",
    "ImageStatus",
    "plural",
]
