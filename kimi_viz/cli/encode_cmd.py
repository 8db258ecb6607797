"""``kimi-viz encode``: run the vision tower on images and account for every row and token.

For each image: its grid, the ``pixel_values`` rows it brings in, the feature rows (one per
``<|media_pad|>`` token) that come out, and the time the encoder took. Without ``--checkpoint``
the weights are random (seed 0): shapes, counts and timings are real, the features are not.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..devices import DEVICES, resolve_device
from ..errors import CheckpointError
from ..preprocess.config import read_checkpoint_config, read_json_file
from ..terminal import escape_value
from . import emit

# The encoder presets (kimi_viz.encoder.config.ENCODER_PRESETS), named here so that building the
# parser does not import torch; tests/test_hostile_json.py checks the two agree.
ENCODER_PRESET_NAMES = ("kimi-k25", "kimi-k3", "tiny")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``encode`` sub-command."""
    parser = subparsers.add_parser(
        "encode",
        help="run the vision encoder; show rows in and feature rows out per image",
        description="Preprocess images with the Kimi processor and run the vision tower and projector. "
        "Prints, per image, the grid, the pixel_values rows in, the feature rows (tokens) out and the time.",
    )
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    parser.add_argument(
        "--preset",
        default="kimi-k3",
        choices=ENCODER_PRESET_NAMES,
        help="encoder shapes when no checkpoint is given (default kimi-k3, random weights)",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="checkpoint folder: config.json, model.safetensors.index.json and the vision shards",
    )
    parser.add_argument("--device", default="auto", choices=DEVICES, help="default auto")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), help="default bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


if TYPE_CHECKING:  # pragma: no cover - torch loads when a command encodes
    import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _precheck_checkpoint(folder: str) -> None:
    """Refuse a checkpoint whose config.json or shard index is not strict JSON, before importing torch."""
    root = Path(folder)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist; pass the folder holding config.json")
    if os.path.lexists(root / "config.json"):
        read_checkpoint_config(root)
    index = root / "model.safetensors.index.json"
    if os.path.lexists(index):
        read_json_file(index, error=CheckpointError, limit=64 << 20)


def encode_images(args: argparse.Namespace) -> dict[str, Any]:
    """Return the JSON report of ``kimi-viz encode`` for parsed arguments."""
    from ..preprocess.images import load_image

    # Every image is opened (and a bad one refused) before torch and the encoder are loaded, and the
    # checkpoint's JSON files are read strictly (the encoder then checks the values against its limits).
    loaded = [load_image(path) for path in args.images]
    if args.checkpoint:
        _precheck_checkpoint(args.checkpoint)
    from ..encoder import VisionEncoder, processor_preset_for, resolve_dtype
    from ..preprocess.processor import Processor

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    started = time.perf_counter()
    if args.checkpoint:
        encoder = VisionEncoder.from_checkpoint(args.checkpoint, device=device, dtype=dtype)
        report = encoder.load_report
        weights: dict[str, Any] = {
            "source": "checkpoint",
            "folder": str(args.checkpoint),
            "load_report": None if report is None else report.to_json(),
        }
    else:
        encoder = VisionEncoder.random(args.preset, seed=0, device=device, dtype=dtype)
        weights = {"source": "random", "seed": 0}
    processor_preset = processor_preset_for(encoder.config)
    load_ms = (time.perf_counter() - started) * 1e3

    output = Processor(processor_preset, backend="checkpoint", keep_images=False).preprocess(loaded)
    images = []
    for path, record in zip(args.images, output.records):
        rows = output.image_rows(record.index)
        _sync(device)
        begin = time.perf_counter()
        encoded = encoder.encode(rows, [record.grid_thw])
        _sync(device)
        elapsed = (time.perf_counter() - begin) * 1e3
        tokens_out = int(encoded.features.shape[0])
        images.append(
            {
                "path": str(path),
                "grid_thw": list(record.grid_thw),
                "rows_in": int(rows.shape[0]),
                "rows": list(record.rows),
                "tokens_out": tokens_out,
                "token_span": list(record.token_span),
                "media_pad_tokens": record.num_tokens,
                "tokens_match": tokens_out == record.num_tokens,
                "feature_dim": int(encoded.features.shape[1]),
                "time_ms": round(elapsed, 3),
            }
        )
    return {
        "encoder": encoder.config.name,
        "processor": processor_preset,
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "parameters": encoder.num_parameters(),
        "weights": weights,
        "load_ms": round(load_ms, 1),
        "images": images,
        "total_rows_in": sum(i["rows_in"] for i in images),
        "total_tokens_out": sum(i["tokens_out"] for i in images),
    }


def format_table(report: dict[str, Any]) -> str:
    """Return the report as a fixed-width table with a one-line header."""
    weights = report["weights"]
    source = (
        f"checkpoint {escape_value(weights['folder'])}"
        if weights["source"] == "checkpoint"
        else "random weights (seed 0)"
    )
    lines = [
        f"encoder {report['encoder']} ({report['parameters'] / 1e6:.1f} M parameters, {source}) on "
        f"{report['device']} in {report['dtype']}; loaded in {report['load_ms']:.0f} ms",
        f"{'#':>3}  {'grid t×h×w':<12} {'rows in':>8} {'tokens out':>10} {'<|media_pad|>':>13} {'time ms':>9}  image",
    ]
    for i, item in enumerate(report["images"]):
        grid = "×".join(str(v) for v in item["grid_thw"])
        check = "" if item["tokens_match"] else "  MISMATCH"
        lines.append(
            f"{i:>3}  {grid:<12} {item['rows_in']:>8} {item['tokens_out']:>10} {item['media_pad_tokens']:>13} "
            f"{item['time_ms']:>9.1f}  {escape_value(item['path'])}{check}"
        )
    lines.append(f"     {'total':<12} {report['total_rows_in']:>8} {report['total_tokens_out']:>10}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the encode report; return 0, or 1 when a token count disagrees with the processor."""
    report = encode_images(args)
    emit(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0 if all(item["tokens_match"] for item in report["images"]) else 1
