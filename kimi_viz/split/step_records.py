"""What each step of the replay records of SGLang's variables: one frozen record per step kind.

A :class:`~kimi_viz.split.trace.Step` holds one of these as its ``variables``. Each record's
``to_json`` gives the ``variables`` object of that step in ``trace.json`` (``docs/outputs.md``: the
keys, their order and their values; unless a record writes its own, its fields under their own names,
in the order the class declares them), and ``key_variables`` the ``(name, value)`` pairs the step view
and the stepper show (the rest stay in ``trace.json``). The views read the record's fields by name,
so a renamed field is a type error, not a variable that quietly drops out of the view.

The grid collection (§6.1), the rank assignment (§6.2), the item selection (§6.3) and the backend
grouping (§6.4) are the whole rank's; the preprocessing (§6.5) and the length check (§6.6) are one
backend group's (:class:`GroupIndices`); the concatenation (§6.7) is the rank's again. The forward
pass's own records (:mod:`kimi_viz.forward.step_records`) extend :class:`StepRecord` too.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from .._records import frozen

#: A JSON object of a snapshot inside a record (an item, a feature, a resize), kept as SGLang's names.
JsonObject = dict[str, Any]
#: ``(name, value)`` pairs of the variables a view shows for a step, in order (None values are left out).
KeyVariables = tuple[tuple[str, Any], ...]


def field_values(record: Any) -> dict[str, Any]:
    """Return a new dict of a frozen record's fields, each under its own name, in the order the class declares them."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


class StepRecord:
    """The variables of one step: what ``trace.json`` holds under ``variables`` and which of them a view shows."""

    def to_json(self) -> dict[str, Any]:
        """Return the step's ``variables`` object for ``trace.json`` (a new dict each call): every field, in order."""
        return field_values(self)

    def key_variables(self) -> KeyVariables:
        """Return the ``(name, value)`` pairs worth showing for this step, in order (none by default)."""
        return ()


# --- §6.1–6.4: the whole call's and the rank's -------------------------------------------------------
@frozen
class GridCollection(StepRecord):
    """§6.1: every item's grids and their source, ``grid_thws_host`` and its patch counts (both None on a raise)."""

    items: list[JsonObject]
    grid_thws_host: list[list[int]] | None
    patch_counts: list[int] | None

    def key_variables(self) -> KeyVariables:
        """Return ``grid_thws_host`` and ``patch_counts``."""
        return (("grid_thws_host", self.grid_thws_host), ("patch_counts", self.patch_counts))


@frozen
class RankAssignment(StepRecord):
    """§6.2: the DP runner's load balancing — every rank's images and load, and this rank's share.

    ``order_largest_first`` is None with attention-TP size 1 (no balancing); ``recorded_image_indices``
    is what the capture recorded for this rank, when it did.
    """

    tp_size: int
    rank: int
    patch_counts: list[int]
    order_largest_first: list[int] | None
    assignment: list[list[int]]
    loads: list[int]
    image_indices: list[int]
    recorded_image_indices: list[int] | None

    def key_variables(self) -> KeyVariables:
        """Return every variable but ``rank`` (the heading names it)."""
        return (
            ("tp_size", self.tp_size),
            ("patch_counts", self.patch_counts),
            ("order_largest_first", self.order_largest_first),
            ("assignment", self.assignment),
            ("loads", self.loads),
            ("image_indices", self.image_indices),
            ("recorded_image_indices", self.recorded_image_indices),
        )


@frozen
class ItemSelection(StepRecord):
    """§6.3 (§9 on 0.5.17): the rank's items and which are locally preprocessed (None: 0.5.17 does not ask)."""

    image_indices: list[int]
    selected: list[JsonObject]
    locally_preprocessed: list[bool] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return ``{"image_indices", "selected"}``, with ``locally_preprocessed`` when the split asks it."""
        data: dict[str, Any] = {"image_indices": self.image_indices, "selected": self.selected}
        if self.locally_preprocessed is not None:
            data["locally_preprocessed"] = self.locally_preprocessed
        return data

    def key_variables(self) -> KeyVariables:
        """Return ``image_indices`` and ``locally_preprocessed``."""
        return (("image_indices", self.image_indices), ("locally_preprocessed", self.locally_preprocessed))


@frozen
class BackendGrouping(StepRecord):
    """§6.4: the eager items used as they are, each backend group's positions and rows read, and the code path."""

    eager: list[JsonObject]
    backend_groups: dict[str, JsonObject]
    code_path: str

    def key_variables(self) -> KeyVariables:
        """Return ``backend_groups``, ``eager`` and ``code_path``."""
        return (("backend_groups", self.backend_groups), ("eager", self.eager), ("code_path", self.code_path))


# --- §6.5–6.6: one backend group --------------------------------------------------------------------
@frozen
class GroupIndices:
    """One backend group as SGLang names it: local ``indices``, ``global_indices`` and the grid rows its checks read."""

    backend: str
    indices: list[int]
    global_indices: list[int]
    grid_rows_read: list[int]

    def to_json(self) -> dict[str, Any]:
        """Return ``{"backend", "indices", "global_indices", "grid_rows_read"}``."""
        return field_values(self)


@frozen
class UnsupportedBackend(StepRecord):
    """§6.5: a group of a backend SGLang does not know (it raises there)."""

    group: GroupIndices

    def to_json(self) -> dict[str, Any]:
        """Return the group's indices."""
        return self.group.to_json()


@frozen
class GpuGrids:
    """What the gpu group produced, and the grids its check expects (``grid_thws_host`` at the rows read)."""

    produced_grids: list[list[int]]
    produced_rows: list[int]
    expected_grids: list[list[int]]
    expected_from: str

    def to_json(self) -> dict[str, Any]:
        """Return ``{"produced_grids", "produced_rows", "expected_grids", "expected_from"}``."""
        return field_values(self)


@frozen
class GpuPreprocess(StepRecord):
    """§6.5, gpu backend: the group, each image's input as far as staging got, and its grids (None: it raised first)."""

    group: GroupIndices
    inputs: list[JsonObject]
    grids: GpuGrids | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the group's indices, ``inputs`` and, once produced, the grids."""
        data = {**self.group.to_json(), "inputs": self.inputs}
        if self.grids is not None:
            data.update(self.grids.to_json())
        return data

    def key_variables(self) -> KeyVariables:
        """Return the group's positions and rows read, then the expected and produced grids and rows."""
        grids = self.grids
        return (
            ("indices", self.group.indices),
            ("global_indices", self.group.global_indices),
            ("grid_rows_read", self.group.grid_rows_read),
            ("expected_grids", None if grids is None else grids.expected_grids),
            ("produced_grids", None if grids is None else grids.produced_grids),
            ("produced_rows", None if grids is None else grids.produced_rows),
        )


@frozen
class CpuGrids:
    """What the checkpoint processor produced, the items' ``grid_thws`` it compares with, and ``pixel_values``' rows.

    ``expected_grids`` is None when an item carries no ``grid_thws``; ``pixel_values_rows`` is None for a
    per-image list output.
    """

    produced_grids: list[list[int]]
    produced_rows: list[int]
    expected_grids: list[list[int]] | None
    expected_from: str
    processor_output: str
    pixel_values_rows: int | None

    def to_json(self) -> dict[str, Any]:
        """Return ``produced_grids`` to ``pixel_values_rows``."""
        return field_values(self)


@frozen
class CpuPreprocess(StepRecord):
    """§6.5, cpu backend: the group, each image's input and own resize, the consumer's ``media_proc_cfg``, its grids.

    ``inputs`` is empty and ``grids`` None when the checkpoint processor cannot take an image.
    """

    group: GroupIndices
    inputs: list[JsonObject]
    processor: JsonObject
    grids: CpuGrids | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the group's indices, ``inputs``, ``processor`` and, once produced, the grids."""
        data = {**self.group.to_json(), "inputs": self.inputs, "processor": self.processor}
        if self.grids is not None:
            data.update(self.grids.to_json())
        return data

    def key_variables(self) -> KeyVariables:
        """Return the group's positions, the expected and produced grids and rows, and the processor's output."""
        grids = self.grids
        return (
            ("indices", self.group.indices),
            ("global_indices", self.group.global_indices),
            ("expected_grids", None if grids is None else grids.expected_grids),
            ("produced_grids", None if grids is None else grids.produced_grids),
            ("produced_rows", None if grids is None else grids.produced_rows),
            ("processor_output", None if grids is None else grids.processor_output),
        )


@frozen
class LengthCheck(StepRecord):
    """§6.6: the group's ``patch_counts`` from the grids read, their sum, ``pixel_values.shape[0]`` and the split.

    ``split`` (each image's rows put back in place) is None when the check raises.
    """

    group: GroupIndices
    patch_counts: list[int]
    sum_patch_counts: int
    pixel_values_rows: int | None
    processor_output: str
    split: list[JsonObject] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the group's indices, the counts and the output kind, then ``split`` when the rows were split."""
        data = {
            **self.group.to_json(),
            "patch_counts": self.patch_counts,
            "sum_patch_counts": self.sum_patch_counts,
            "pixel_values_rows": self.pixel_values_rows,
            "processor_output": self.processor_output,
        }
        if self.split is not None:
            data["split"] = self.split
        return data

    def key_variables(self) -> KeyVariables:
        """Return the group's positions and rows read and the counts (the cpu group's output kind too)."""
        shown: KeyVariables = (
            ("indices", self.group.indices),
            ("global_indices", self.group.global_indices),
            ("grid_rows_read", self.group.grid_rows_read),
            ("patch_counts", self.patch_counts),
            ("sum_patch_counts", self.sum_patch_counts),
            ("pixel_values_rows", self.pixel_values_rows),
        )
        if self.group.backend == "cpu":
            shown += (("processor_output", self.processor_output),)
        return shown


# --- §6.7: the rank's concatenation -----------------------------------------------------------------
@frozen
class Concatenation(StepRecord):
    """§6.7: the branch, each feature's rows and trailing shape, their total (None on a raise), the grids' total."""

    branch: str
    features: list[JsonObject]
    total_rows: int | None
    rows_from_grids: int

    def key_variables(self) -> KeyVariables:
        """Return ``branch``, ``total_rows`` and ``rows_from_grids``."""
        return (("branch", self.branch), ("total_rows", self.total_rows), ("rows_from_grids", self.rows_from_grids))


__all__ = [
    "JsonObject",
    "KeyVariables",
    "StepRecord",
    "GridCollection",
    "RankAssignment",
    "ItemSelection",
    "BackendGrouping",
    "GroupIndices",
    "UnsupportedBackend",
    "GpuGrids",
    "GpuPreprocess",
    "CpuGrids",
    "CpuPreprocess",
    "LengthCheck",
    "Concatenation",
]
