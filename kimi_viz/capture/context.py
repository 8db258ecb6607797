"""The forward context of a failing ``get_image_feature`` call, read from the running ``get_embedding_and_mask``.

While SGLang's ``get_embedding_and_mask`` runs, the capture keeps its arguments and its caller's frame
(:class:`~kimi_viz.capture.hook.ForwardCall`). When ``get_image_feature`` raises inside it,
:func:`context_from_call` turns them into a :class:`~kimi_viz.split.forward_context.ForwardContext`:

- the requests and their images: ``embedding_items[items_size[i]:items_size[i + 1]]`` is request
  ``i``'s items, ``prefix_length[i]`` / ``extend_length[i]`` its window, ``item.offsets`` each image's
  placeholder runs (all as SGLang passed them);
- each call item's request and image: by identity with those items (SGLang passes the very objects),
  else by hash and offsets;
- the rid and forward-batch position of each request: from the ``forward_batch`` of the SGLang frame
  that called ``get_embedding_and_mask`` (``general_mm_embed_routine`` / ``prepare_mm_inputs``), by the
  identity of the request's items in ``forward_batch.mm_inputs``; ``forward_batch.rids`` holds the rids;
- which images in the window were embedding-cache hits: their hash is in the module's
  ``embedding_cache.mm_cache`` (read without touching its LRU order);
- the chunked-prefill size: ``get_schedule().chunked_prefill_size`` as the forward function's module
  calls it (what SGLang's own ``_adjust_embedding_length`` reads), else from ``runtime_context``
  (``get_schedule()``, then ``get_server_args()``).

Nothing is imported from SGLang: only modules the process has already loaded are read. Whatever is
not reachable is ``None`` and said so in :attr:`ForwardContext.source`. Never raises: a failure gives
None and a log line, and the call is recorded as before.
"""

from __future__ import annotations

import sys
from typing import Any

from ..split.forward_context import ContextImage, ContextItem, ContextRequest, ForwardContext, ImageStatus
from .names import log

BATCH_FRAME_DEPTH = 8  # SGLang frames above get_embedding_and_mask searched for forward_batch
BY_ITEM_FLAGS = ("_is_hip", "_is_npu", "_is_xpu")  # platforms that encode each request in a call of its own


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except Exception:
        return None


def _runs(item: Any) -> tuple[tuple[int, int], ...]:
    offsets = getattr(item, "offsets", None) or ()
    return tuple((int(start), int(end)) for start, end in offsets)


def _forward_batch(caller: Any) -> Any:
    """Return the ``forward_batch`` of the nearest SGLang frame at or above ``caller``, or None."""
    frame = caller
    for _ in range(BATCH_FRAME_DEPTH):
        if frame is None:
            return None
        if str(frame.f_globals.get("__name__", "")).startswith("sglang."):
            batch = frame.f_locals.get("forward_batch")
            if batch is not None and hasattr(batch, "mm_inputs"):
                return batch
        frame = frame.f_back
    return None


def _batch_positions(batch: Any) -> dict[int, int]:
    """Return ``id(item) -> position of its request in the forward batch`` for every item of ``batch.mm_inputs``."""
    positions: dict[int, int] = {}
    for position, inputs in enumerate(getattr(batch, "mm_inputs", None) or ()):
        for item in getattr(inputs, "mm_items", None) or ():
            positions.setdefault(id(item), position)
    return positions


def _chunked_prefill_size(function: Any) -> tuple[int | None, str]:
    """Return ``(chunked-prefill size, where it was read)``: the ``get_schedule`` the forward function's module
    calls (as ``_adjust_embedding_length`` does), else SGLang's runtime context; ``(None, "")`` when unpublished."""
    module_name = getattr(function, "__module__", "") or ""
    candidates = [
        (sys.modules.get(module_name), "get_schedule", module_name.rpartition(".")[2]),
        (sys.modules.get("sglang.srt.runtime_context"), "get_schedule", "runtime_context"),
        (sys.modules.get("sglang.srt.runtime_context"), "get_server_args", "runtime_context"),
    ]
    for module, getter, where in candidates:
        try:
            value = getattr(module, getter)().chunked_prefill_size
        except Exception:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= -1:
            return value, f"{where}.{getter}()"
    return None, ""


def _cache_keys(function: Any) -> Any:
    """Return the embedding cache's key view of the module that defines ``function`` (None when not readable)."""
    module = sys.modules.get(getattr(function, "__module__", "") or "")
    cache = getattr(module, "embedding_cache", None)
    keys = getattr(cache, "mm_cache", None)
    return keys if hasattr(keys, "__contains__") else None


def _overlaps(runs: tuple[tuple[int, int], ...], start: int, stop: int) -> bool:
    """SGLang's overlap test of an inclusive run ``[s, e]`` with the half-open window ``[start, stop)``."""
    return stop > start and any(end >= start and s < stop for s, end in runs)


def _locate(calls: list, embedded: list[list[Any]]) -> list[tuple[int, int] | None]:
    """Return ``(request, image)`` of each call item: by identity, else by hash and offsets (each image once)."""
    where = {id(item): (r, i) for r, items in enumerate(embedded) for i, item in enumerate(items)}
    found: list[tuple[int, int] | None] = [where.get(id(item)) for item in calls]
    missing = [k for k, place in enumerate(found) if place is None]
    if not missing:
        return found
    # The rest by (hash, offsets): each embedded image once, the first free one in request order.
    used = {place for place in found if place is not None}
    free: dict[Any, list[tuple[int, int]]] = {}
    for r, items in enumerate(embedded):
        for i, other in enumerate(items):
            digest = getattr(other, "hash", None)
            if digest is not None and (r, i) not in used:
                free.setdefault((digest, _runs(other)), []).append((r, i))
    for k in missing:
        item = calls[k]
        places = free.get((getattr(item, "hash", None), _runs(item)))
        if places:
            found[k] = places.pop(0)
    return found


def _build(forward: Any, calls: list) -> ForwardContext | None:
    embedding_items = list(forward.argument("embedding_items"))
    sizes = [int(v) for v in forward.argument("items_size")]
    prefix = list(forward.argument("prefix_length"))
    extend = list(forward.argument("extend_length"))
    embedded = [embedding_items[sizes[r] : sizes[r + 1]] for r in range(len(sizes) - 1)]
    places = _locate(calls, embedded)
    if all(place is None for place in places):
        log("the running get_embedding_and_mask does not hold this call's items; recorded without the forward context")
        return None
    notes = [f"{getattr(forward.function, '__module__', '?')}.{getattr(forward.function, '__name__', '?')}"]
    absent = []

    batch = _forward_batch(forward.caller)
    positions = _batch_positions(batch) if batch is not None else {}
    rids = getattr(batch, "rids", None) if batch is not None else None
    if batch is None:
        absent.append("rid and forward-batch position (no forward_batch in the calling SGLang frames)")
    elif not isinstance(rids, (list, tuple)):
        absent.append("rid (forward_batch.rids is not set)")
    cache = _cache_keys(forward.function)
    if cache is None:
        absent.append("embedding-cache hits (the module's embedding_cache is not readable)")
    by_item = any(getattr(sys.modules.get(forward.function.__module__), flag, False) is True for flag in BY_ITEM_FLAGS)
    call_index = {place: k for k, place in enumerate(places) if place is not None}
    call_hashes: dict[Any, int] = {}
    for k, item in enumerate(calls):
        call_hashes.setdefault(getattr(item, "hash", None), k)
    call_requests = {place[0] for place in places if place is not None}

    requests = []
    for r, items in enumerate(embedded):
        p = _int_or_none(prefix[r]) if r < len(prefix) else None
        e = _int_or_none(extend[r]) if r < len(extend) else None
        start, stop = (p or 0), (p or 0) + (e or 0)
        images = []
        for i, item in enumerate(items):
            runs = _runs(item)
            status: ImageStatus
            call_item: int | None = None
            if (r, i) in call_index:
                status, call_item = "in-call", call_index[(r, i)]
            elif p is None or not _overlaps(runs, start, stop):
                status = "outside-window"
            elif getattr(item, "hash", None) is not None and getattr(item, "hash", None) in call_hashes:
                status, call_item = "same-image", call_hashes[item.hash]
            elif cache is not None and (not by_item or r in call_requests) and _safe_contains(cache, item):
                status = "cache-hit"
            else:
                status = "not-in-call"
            images.append(ContextImage(runs, status, call_item))
        position = _request_position(items, positions)
        batch_rid = (
            rids[position]
            if position is not None and isinstance(rids, (list, tuple)) and position < len(rids)
            else None
        )
        rid = None if batch_rid is None else str(batch_rid)
        requests.append(ContextRequest(p, e, tuple(images), rid=rid, batch_index=position))
    size, size_from = _chunked_prefill_size(forward.function)
    if size is None:
        absent.append("chunked_prefill_size (no published SGLang runtime context)")
    else:
        notes.append(f"chunked_prefill_size from {size_from}")
    if batch is not None and isinstance(rids, (list, tuple)):
        notes.append("rids from forward_batch.rids")
    if by_item:
        notes.append("a by-item platform (HIP/NPU/XPU): each request's misses are a call of their own")
    source = "; ".join(notes) + ("; not exposed: " + "; ".join(absent) if absent else "")
    items_out = tuple(ContextItem(None, None) if place is None else ContextItem(*place) for place in places)
    return ForwardContext(tuple(requests), items_out, chunked_prefill_size=size, source=source)


def _safe_contains(cache: Any, item: Any) -> bool:
    try:
        return bool(item.hash in cache)
    except Exception:
        return False


def _request_position(items: list, positions: dict[int, int]) -> int | None:
    """Return the forward-batch position of a request's items (None when unknown or inconsistent)."""
    found = {positions.get(id(item)) for item in items}
    return next(iter(found)) if len(found) == 1 else None


def context_from_call(forward: Any, items: Any) -> ForwardContext | None:
    """Return the :class:`ForwardContext` of the call of ``items`` inside the running ``forward``; never raises.

    ``forward`` is :func:`kimi_viz.capture.hook.running_forward` at the time of the call (None: the call
    did not run inside ``get_embedding_and_mask``, and None is returned).
    """
    if forward is None:
        return None
    try:
        return _build(forward, list(items))
    except Exception as exc:
        log(f"could not record the forward context ({type(exc).__name__}: {exc}); recorded without it")
        return None


__all__ = ["context_from_call"]
