"""Would this request fail on my deployment? The items a release's request side builds, replayed on every rank.

Read in pipeline order: :mod:`.settings` (the server settings and the SGLang flags they stand for),
:mod:`.images` (each image's header), :mod:`.request_side` (the items each release builds),
:mod:`.call` (what reaches ``get_image_feature`` on each rank), :mod:`.run` (one what-if and its
verdict, :mod:`.why` the reason), then :mod:`.sweep` (releases × TP sizes), :mod:`.minimize` (the
smallest failing set) and :mod:`.report` (tables and text). Names are imported lazily; the
functions ``sweep`` and ``minimize`` share their modules' names, so import them from those modules.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ServerSettings": "settings",
    "OPTIONS": "settings",
    "RequestImage": "images",
    "probe_image": "images",
    "image_sources": "images",
    "REQUEST_SIDES": "request_side",
    "build_request": "request_side",
    "model_call": "call",
    "WhatIf": "run",
    "whatif": "run",
    "Sweep": "sweep",
    "Minimized": "minimize",
    "items_table": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_viz.whatif' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
