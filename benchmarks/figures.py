"""What every benchmark script does with its figures: ``--json PATH`` writes them there as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_figures(path: str | None, figures: dict[str, Any]) -> None:
    """Write ``figures`` as indented JSON to ``path`` (its folder made first); do nothing when ``path`` is None."""
    if path is None:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(figures, indent=2) + "\n")
