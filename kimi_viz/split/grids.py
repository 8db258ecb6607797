"""§6.1: one grid per item — how ``get_image_feature`` builds ``grid_thws_host`` before anything else.

For each item SGLang reads ``image_grid_thw`` when present, else ``grid_thws`` (a ``KeyError`` when
neither is there), requires exactly one ``[t, h, w]`` row, and concatenates the rows into
``grid_thws_host``. Every release from 0.5.17 to 0.5.23 does this the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..message_catalogue.messages import MSG_ONE_GRID
from .batch import GRID_KEYS, Batch
from .state import SGLangRaise, feature_json, outcome_of, probe_torch, raises
from .step_records import GridCollection
from .trace import COLLECT_GRIDS, CauseKind, Check, Step, prod


@dataclass
class CollectedGrids:
    """The grid step, ``grid_thws_host`` (one row per item) and what SGLang raises there, if anything."""

    step: Step
    grid_thws_host: list[list[int]]
    raised: SGLangRaise | None


def collect_grids(batch: Batch) -> CollectedGrids:
    """Return the :class:`CollectedGrids` of ``batch``: its ``grid_thws_host``, or the exception SGLang raises."""
    items_json = []
    grids: list[list[int]] = []
    raised: SGLangRaise | None = None
    rows_per_item = []
    for i, item in enumerate(batch.items):
        source = item.grid_source()
        rows = [[int(v) for v in row] for row in item.grids.get(source, [])] if source else []
        rows_per_item.append(len(rows))
        items_json.append(
            {
                "image": i,
                "label": item.label,
                "grid_source": source,
                "grids": {k: [[int(v) for v in r] for r in item.grids[k]] for k in GRID_KEYS if k in item.grids},
                "backend": item.backend,
                "local_preprocessed": bool(item.local_preprocessed),
                "feature": feature_json(item.feature),
            }
        )
        if raised is not None:
            continue
        if source is None:
            # model_specific_data["grid_thws"] on an item that carries neither key.
            raised = raises("KeyError", repr("grid_thws"), CauseKind.MISSING_GRID, i)
        elif len(rows) != 1:
            raised = raises("ValueError", MSG_ONE_GRID, CauseKind.GRID_ROWS, i, rows=len(rows))
        else:
            grids.append(rows[0])
    if raised is None and (not grids or {len(g) for g in grids} != {3}):
        import torch

        raised = probe_torch(lambda: torch.concat([torch.tensor([g]) for g in grids], dim=0), CauseKind.GRID_CONCAT)
    check = Check("one grid row per item", 1, rows_per_item, raised is None)
    note = "Each item's grid: image_grid_thw when present, else grid_thws; grid_thws_host is their concatenation."
    if raised is not None:
        note += f" SGLang raises {raised.info.type} here."
    error, cause = outcome_of(raised)
    step = Step(
        COLLECT_GRIDS,
        "Collect one grid per item",
        "§6.1",
        GridCollection(
            items_json,
            grids if raised is None else None,
            [prod(g) for g in grids] if raised is None else None,
        ),
        note,
        check,
        error,
        cause,
    )
    return CollectedGrids(step, grids, raised)


__all__ = ["CollectedGrids", "collect_grids"]
