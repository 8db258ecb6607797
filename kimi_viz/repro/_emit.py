"""Writing a repro: a standalone pytest file for SGLang's own test suite plus the JSON (and PNGs) it reads.

:func:`emit_repro` takes a :class:`~kimi_viz.split.batch.Batch` (a manifest or a scenario), a
what-if answer or a minimal failing request, builds its :class:`~kimi_viz.repro.case.ReproCase`
(the items as plain data, and what every release does from the kit's replay), and writes
``test_kimi_k3_repro_<slug>.py`` and ``test_kimi_k3_repro_<slug>.json`` into the output folder. The
test file is ``kimi_k3_repro.py.tmpl`` with its docstring, data file name, CI time estimate and
test name filled in: it imports only the standard library, pytest, torch, Pillow (when it rebuilds
an image) and SGLang.

The output folder must be new, empty, or one this function made before (it holds the marker file
:data:`MARKER`), so several repros can share a folder and one ``pytest`` run. Nothing is written
through a link (:mod:`kimi_viz.files`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import __version__, scenarios
from ..answer import Answer, Minimized
from ..errors import ArgumentError, OutputError
from ..files import check_folder, prepare_folder, write_file
from ..manifest.digest import manifest_digest
from ..releases import RELEASES, choose_release, release_for
from ..split.batch import Batch
from .case import RankExpectation, ReproCase, build_case

TEMPLATE = Path(__file__).resolve().parent / "kimi_k3_repro.py.tmpl"
MARKER = ".kimi-viz-repro"
PREFIX = "test_kimi_k3_repro_"
WHAT = "--emit-repro"
WIDTH = 88  # SGLang's line length


def template_text() -> str:
    """Return the emitted test's template (``kimi_k3_repro.py.tmpl``)."""
    return TEMPLATE.read_text(encoding="utf-8")


# --- the source: a batch, a what-if or a minimal request ---------------------------------------------
def _from_batch(
    batch: Batch, sglang_version: str | None, tp_size: int | None, scenario: str | None
) -> tuple[list[Batch], dict[int, int], int, str, dict[str, Any]]:
    if sglang_version is not None:
        release = release_for(sglang_version)[0].version
    else:
        release = choose_release(
            recorded_version=batch.sglang_version,
            recorded_code_path=batch.code_path,
            recorded_source=batch.code_path_source,
        ).release.version
    tp = batch.attn_tp_size if tp_size is None else tp_size
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 64:
        raise ArgumentError(f"tp_size: expected an attention-TP size from 1 to 64, got {tp!r}")
    name = scenario if scenario is not None else batch.scenario
    origin: dict[str, Any] = {"kind": "scenario" if name else "batch"}
    if name:
        origin["scenario"] = name
        if name in scenarios.SCENARIOS:  # the catalogue (and torch) loads here, on first use
            origin["title"] = scenarios.SCENARIOS[name].title
    if batch.created_by:
        origin["created_by"] = batch.created_by
    if batch.sglang_version:
        origin["recorded_release"] = batch.sglang_version
    if batch.attn_tp_rank is not None:
        origin["recorded_rank"] = batch.attn_tp_rank
    if batch.recorded is not None:
        origin["recorded"] = batch.recorded.to_json()
    return [batch], dict.fromkeys(range(tp), 0), tp, release, origin


def _from_whatif(
    result: Answer, sglang_version: str | None, tp_size: int | None
) -> tuple[list[Batch], dict[int, int], int, str, dict[str, Any]]:
    replayed = result.request
    if replayed is None:
        raise ArgumentError(
            "emit_repro: a workload's or a chat request's answer spans several calls; emit the repro of one "
            "request (kimi-viz whatif IMAGE ...) or of a captured batch"
        )
    call = replayed.call
    if call.batch is None:
        raise ArgumentError(
            "the request never reaches get_image_feature (every image is a cache hit or a duplicate): "
            "there is no call to reproduce"
        )
    release = result.release.version
    if sglang_version is not None and release_for(sglang_version)[0].version != release:
        raise ArgumentError(f"sglang_version: the what-if ran SGLang {release}, not {sglang_version}")
    if tp_size is not None and tp_size != call.tp_size:
        raise ArgumentError(f"tp_size: the what-if ran attention-TP {call.tp_size}, not {tp_size}")
    if call.rank_batches is not None:
        batches, mapping = list(call.rank_batches), {r: r for r in range(call.tp_size)}
    else:
        batches, mapping = [call.batch], dict.fromkeys(range(call.tp_size), 0)
    origin = {
        "kind": "whatif",
        "images": [image.label for image in replayed.built.images],
        "positions": list(call.positions),
        "settings": replayed.built.settings.to_json(),
    }
    return batches, mapping, call.tp_size, release, origin


def _source(
    source: Batch | Answer | Minimized, sglang_version: str | None, tp_size: int | None, scenario: str | None
) -> tuple[list[Batch], dict[int, int], int, str, dict[str, Any]]:
    if isinstance(source, Batch):
        return _from_batch(source, sglang_version, tp_size, scenario)
    if isinstance(source, Answer):
        return _from_whatif(source, sglang_version, tp_size)
    if isinstance(source, Minimized):
        batches, mapping, tp, release, origin = _from_whatif(source.answer, sglang_version, tp_size)
        origin.update(
            kind="minimized",
            request_images=[unit.label for unit in source.units],
            kept=list(source.kept),
            error=None if source.target is None else source.target.to_json(),
        )
        return batches, mapping, tp, release, origin
    raise ArgumentError(f"emit_repro: expected a kimi_viz Batch, Answer or Minimized, got {type(source).__name__}")


ARCHIVE_SUFFIX = ".zip"  # the one suffix a manifest's name loses: a zipped capture
MAX_SLUG = 160  # a file name stays well under the 255 bytes a file system allows, with prefix and suffixes


def _manifest_name(origin: Mapping[str, Any]) -> str | None:
    """Return the manifest's whole folder (or file) name, less ``.zip``; None when the origin has none.

    Only a zipped capture's suffix goes: ``real-0.5.18-tp4-rank3`` stays whole (its dots are not a suffix).
    """
    if "manifest" not in origin:
        return None
    name = Path(str(origin["manifest"])).name or str(origin["manifest"])
    return name[: -len(ARCHIVE_SUFFIX)] if name.lower().endswith(ARCHIVE_SUFFIX) and name != ARCHIVE_SUFFIX else name


# --- the output folder -----------------------------------------------------------------------------
def check_repro_folder(out_dir: str | os.PathLike[str]) -> Path:
    """Return the output folder; OutputError for a link, a file, or a non-empty folder this function did not make.

    Nothing is created: a command calls it before any work, so a bad ``--emit-repro`` is refused first.
    """
    folder = check_folder(out_dir, what=WHAT)
    if folder.is_dir():
        marker = folder / MARKER
        made_here = marker.is_file() and not marker.is_symlink()
        if not made_here and any(folder.iterdir()):
            raise OutputError(
                f"{WHAT} {str(folder)!r}: is not empty and was not made by kimi-viz {WHAT}; "
                "choose a new or empty folder"
            )
    return folder


def _slug(text: str) -> str:
    """Return ``text`` as a part of a Python module name: every run of other characters (dots too) one ``_``."""
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:MAX_SLUG].strip("_")
    return slug or "batch"


def _png(image: Any) -> bytes | None:
    buffer = io.BytesIO()
    try:
        image.save(buffer, format="PNG")
    except (OSError, ValueError, KeyError):  # a mode PNG cannot hold: the test rebuilds the image from its shape
        return None
    return buffer.getvalue()


def _with_pngs(case: ReproCase, batches: list[Batch], folder: str) -> tuple[ReproCase, dict[str, bytes]]:
    """Return the case with a PNG named for every image that has pixels, and the PNG bytes by relative path."""
    files: dict[str, bytes] = {}
    new_batches = []
    for b, (specs, batch) in enumerate(zip(case.batches, batches)):
        out = []
        for k, (spec, item) in enumerate(zip(specs, batch.items)):
            image = item.feature.image
            data = None if image is None or spec.feature.layout != "image" else _png(image)
            if data is None:
                out.append(spec)
                continue
            name = f"{folder}/image{k}.png" if len(batches) == 1 else f"{folder}/batch{b}_image{k}.png"
            files[name] = data
            out.append(dataclasses.replace(spec, feature=dataclasses.replace(spec.feature, png=name)))
        new_batches.append(out)
    return dataclasses.replace(case, batches=new_batches), files


# --- the docstring ---------------------------------------------------------------------------------
def _clean(text: Any) -> str:
    """Return ``text`` safe inside a docstring: one line, no quotes that could end it, no escapes."""
    out = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return out.replace("\\", "/").replace('"', "'")


def _para(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(_clean(text), WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") or [""]


def _release_summary(by_rank: Mapping[int, RankExpectation], ranks: list[int]) -> str:
    failing = [by_rank[r] for r in ranks if by_rank[r].fails]
    if not failing:
        return "passes on every rank"
    return "; ".join(f"rank {e.rank} {e.text()}" for e in failing)


def _expected_lines(case: ReproCase) -> list[str]:
    groups: list[tuple[list[str], str]] = []
    for version in RELEASES:
        summary = _release_summary(case.expected[version], case.ranks)
        if groups and groups[-1][1] == summary:
            groups[-1][0].append(version)
        else:
            groups.append(([version], summary))
    lines = []
    for versions, summary in groups:
        label = versions[0] if len(versions) == 1 else f"{versions[0]} to {versions[-1]}"
        lines += _para(f"SGLang {label}: {summary}", "    ")
    return lines


def _origin_lines(case: ReproCase) -> list[str]:
    src = case.source
    kind = src.get("kind")
    where = {
        "scenario": f"the kit's scenario {src.get('scenario')} ({src.get('title', 'no title')})",
        "manifest": f"the manifest {src.get('manifest')}",
        "whatif": "a what-if of the request " + ", ".join(src.get("images", [])),
        "minimized": (
            f"the minimal failing set of a {len(src.get('request_images', []))}-image request: images "
            + ", ".join(f"{p} ({label})" for p, label in zip(src.get("kept", []), src.get("images", [])))
        ),
    }.get(kind or "", "a batch built in Python")
    lines = _para(f"Emitted by kimi-viz {src.get('kimi_viz', __version__)} from {where}.")
    if src.get("scenario") and kind != "scenario":
        lines += _para(f"Scenario: {src['scenario']} ({src.get('title', 'no title')}).")
    if src.get("manifest_sha256"):
        lines += _para(
            f"Manifest sha256: {src['manifest_sha256']}" + (" (redacted: no pixels)." if src.get("redacted") else ".")
        )
    if src.get("recorded"):
        rec = src["recorded"]
        what = "ok" if rec.get("error") is None else f"{rec['error']['type']}: {rec['error']['message']}"
        rank = f" on rank {src['recorded_rank']}" if "recorded_rank" in src else ""
        lines += _para(f"The capture recorded{rank}: {what}.")
    lines += _para(
        f"Replayed by the kit on SGLang {case.release} ({case.code_path} path) at attention-TP {case.tp_size}: "
        + _release_summary(case.expected[case.release], case.ranks)
        + "."
    )
    lines += _para(f"Data sha256: {case.digest()}.")
    return lines


def _docstring(case: ReproCase, data_name: str, pngs: bool) -> str:
    src = case.source
    short = (
        src.get("scenario")
        or _manifest_name(src)
        or {
            "whatif": "a what-if request",
            "minimized": "a minimal failing request",
        }.get(src.get("kind", ""), "a batch")
    )
    images = sum(len(batch) for batch in case.batches) if len(case.batches) > 1 else case.images
    lines = _para(f"Kimi-K3 get_image_feature regression from kimi-viz: {short}.") + [""]
    lines += _origin_lines(case)
    lines += ["", "Expected outcome per release (the kit's replay of each release):"]
    lines += _expected_lines(case)
    lines += [""]
    lines += _para(
        f"What it runs: SGLang's own KimiK3ForConditionalGeneration.get_image_feature on {images} "
        f"MultimodalDataItems with the real deferred configs, on attention-TP rank(s) {case.ranks} of "
        f"{case.tp_size}, on the CPU, with no weights: the model is made with __new__ and a stub vision tower, "
        "and SGLang's vision-DP runner is replaced by one that takes the rank's share from SGLang's own "
        "get_dp_encoder_lb_assignment and calls the loader with it. The cpu backend's checkpoint processor "
        "(it ships with the weights) is a stand-in that resizes with SGLang's navit_resize_config."
    )
    lines += _para(
        "What it asserts (what the fixed release must do): nothing raises, and every image the rank "
        "owns is handed to materialize_multimodal_features with exactly prod(grid) rows. A release with "
        "the bug fails with SGLang's own exception."
    )
    lines += [""]
    pixels = (
        "PNG files beside it for the images whose pixels were asked for; every other image is"
        if pngs
        else "no pixels: every image is"
    )
    lines += _para(
        f"Data: {data_name} beside this file (grids, deferred configs, feature shapes and dtypes, ranks, "
        f"expectations; {pixels} a constant image or tensor of its recorded shape, since SGLang's row counts "
        "depend only on shapes)."
    )
    lines += _para("Run: python -m pytest <this file> -v  (sglang, torch and pytest; no GPU, no kimi-viz).")
    lines += _para(
        "Into SGLang's suite: copy this file and its data file, unchanged, into "
        "test/registered/unit/models/; it follows test_kimi_k3_vision.py (register_cpu_ci, _K3TowerStub, "
        "the __new__ model, mock_patch of run_dp_sharded_mrope_vision_model, "
        "get_context().override_server_args and get_parallel().override)."
    )
    return "\n".join(lines) + "\n"


def dumps(data: Mapping[str, Any]) -> str:
    """Return the data file's JSON: one key a line, and one item, rank or expectation a line."""

    def one(value: Any) -> str:
        return json.dumps(value, allow_nan=False, separators=(", ", ": "))

    def rows(values: list[Any], indent: str) -> str:
        return "[\n" + ",\n".join(indent + " " + one(v) for v in values) + "\n" + indent + "]"

    lines = []
    for key, value in data.items():
        if key == "batches":
            text = "[\n" + ",\n".join('  {"items": ' + rows(b["items"], "  ") + "}" for b in value) + "\n ]"
        elif key == "expected":
            text = "{\n" + ",\n".join(f"  {one(v)}: {rows(e, '  ')}" for v, e in value.items()) + "\n }"
        elif key == "ranks":
            text = rows(value, " ")
        else:
            text = one(value)
        lines.append(f" {one(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}"


# --- writing -----------------------------------------------------------------------------------------
def _est_time(case: ReproCase) -> int:
    elements = sum(math.prod(spec.feature.shape) for batch in case.batches for spec in batch)
    return max(1, math.ceil(0.5 * len(case.ranks) + elements / 6e6))


def render(case: ReproCase, stem: str, *, pngs: bool = False) -> str:
    """Return the text of the test file ``<stem>.py`` for ``case`` (its data file is ``<stem>.json``)."""
    text = template_text()
    for key, value in (
        ("__DOCSTRING__", _docstring(case, f"{stem}.json", pngs)),
        ("__EST_TIME__", str(_est_time(case))),
        ("__DATA_FILE__", json.dumps(f"{stem}.json")),
        ("__TEST_NAME__", stem),
    ):
        text = text.replace(key, value)
    return text


def emit_repro(
    source: Batch | Answer | Minimized,
    out_dir: str | os.PathLike[str],
    *,
    sglang_version: str | None = None,
    tp_size: int | None = None,
    scenario: str | None = None,
    manifest: str | os.PathLike[str] | None = None,
    name: str | None = None,
    pixels: bool = False,
) -> Path:
    """Write a standalone SGLang regression test for ``source`` into ``out_dir``; return the test file's path.

    ``source`` is a :class:`~kimi_viz.split.batch.Batch` (read from a manifest, or a scenario's),
    the :class:`~kimi_viz.answer.Answer` of one request or a :class:`~kimi_viz.answer.Minimized`
    request (its minimal failing request is what is written). ``sglang_version`` is the release the
    verdict is for (default: the what-if's, else the batch's recorded release or code path, as
    :func:`~kimi_viz.replay` chooses); ``tp_size`` the attention-TP size (default: the batch's).
    ``scenario`` and ``manifest`` (the path the batch was read from; its sha256 goes in the
    docstring) name the origin; ``name`` the file (``test_kimi_k3_repro_<name>.py``; default: the
    origin and the first 8 hex digits of the data digest). ``pixels=True`` also writes the PNG of
    every image that has pixels; by default, and always for a redacted batch, no pixels are written.

    Files written: ``test_kimi_k3_repro_<slug>.py``, ``test_kimi_k3_repro_<slug>.json`` and, with
    pixels, ``test_kimi_k3_repro_<slug>_images/*.png``, plus the folder's marker :data:`MARKER`.
    Raises ArgumentError for a bad argument, ConfigError for a batch SGLang's objects cannot hold
    and OutputError for an output that is a link, a file or a non-empty folder it did not make.
    """
    if not isinstance(pixels, bool):
        raise ArgumentError(f"pixels: expected True or False, got {pixels!r}")
    folder = check_repro_folder(out_dir)
    batches, mapping, tp, release, origin = _source(source, sglang_version, tp_size, scenario)
    origin["kimi_viz"] = __version__
    if manifest is not None:
        path, digest = manifest_digest(manifest)
        origin.update(kind="manifest" if origin["kind"] in ("batch", "scenario") else origin["kind"])
        origin.update(manifest=path, manifest_sha256=digest)
    if isinstance(source, Batch):  # a redacted capture: its features carry shapes only
        origin["redacted"] = any(item.feature.kind == "shape_only" for item in source.items)
    case = build_case(batches, tp_size=tp, release=release, source=origin, rank_batch=mapping)
    base = name if name is not None else origin.get("scenario") or _manifest_name(origin) or origin["kind"]
    stem = PREFIX + (_slug(base) if name is not None else f"{_slug(base)}_{case.digest()[:8]}")
    files: dict[str, bytes] = {}
    if pixels:
        case, files = _with_pngs(case, batches, f"{stem}_images")
    folder = prepare_folder(folder, what=WHAT)
    if not (folder / MARKER).is_file():
        write_file(
            folder / MARKER, f"made by kimi-viz {__version__} {WHAT}: {PREFIX}*.py tests and their data\n".encode()
        )
    images = folder / f"{stem}_images"
    if images.is_dir() and not images.is_symlink():
        for old in images.glob("*.png"):
            if old.is_symlink() or old.is_file():
                old.unlink()
    if files:
        prepare_folder(images, what=WHAT)
        for relative, data in files.items():
            write_file(folder / relative, data)
    elif images.is_dir() and not images.is_symlink() and not any(images.iterdir()):
        images.rmdir()
    data_json = dumps(case.to_json()) + "\n"
    write_file(folder / f"{stem}.json", data_json.encode("utf-8"))
    return write_file(folder / f"{stem}.py", render(case, stem, pngs=bool(files)).encode("utf-8"))


__all__ = ["MARKER", "TEMPLATE", "check_repro_folder", "emit_repro", "render", "template_text"]
