"""Would this request fail on my deployment? The verb ``whatif`` and its two companions, ``sweep`` and ``minimize``.

Private: the public names are exported from :mod:`kimi_viz`. Read in order: :mod:`.run` (one what-if:
the request side's items, the call, the replay on every rank and the verdict; :mod:`.why` says why),
then :mod:`._sweep` (releases × attention-TP sizes), :mod:`._minimize` (the smallest failing set) and
:mod:`.text` (tables and terminal text).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "WhatIf": "run",
    "whatif": "run",
    "Sweep": "_sweep",
    "sweep": "_sweep",
    "Minimized": "_minimize",
    "minimize": "_minimize",
    "request_table": "text",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
