"""``kimi-viz inspect``: what the processor does with each image — resize, grid, rows, tokens."""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

from ..preprocess.config import BACKENDS, PROCESSOR_PRESETS, get_config
from ..terminal import escape_value
from . import emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``inspect`` sub-command."""
    parser = subparsers.add_parser(
        "inspect",
        help="show each image's resize, grid, row span and token span",
        description="Run the Kimi processor on images and show, per image, the NaViT resize, the patch "
        "grid, its rows in pixel_values, its merged-token span and a SHA-256 of its rows.",
    )
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    parser.add_argument(
        "--preset", default="kimi-k3", choices=sorted(PROCESSOR_PRESETS), help="processor preset (default kimi-k3)"
    )
    parser.add_argument(
        "--config", metavar="PATH", help="checkpoint folder or preprocessor_config.json (overrides --preset)"
    )
    parser.add_argument("--backend", default="checkpoint", choices=BACKENDS, help="pixel path (default checkpoint)")
    parser.add_argument(
        "--exif-transpose", action="store_true", help="apply EXIF orientation (SGLang's serving loader)"
    )
    parser.add_argument("--alpha", default="keep", choices=("keep", "discard"), help="keep alpha or drop it first")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def rows_sha256(rows: Any) -> str:
    """Return the SHA-256 of rows as C-contiguous float32 bytes."""
    return hashlib.sha256(rows.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()


def inspect_images(args: argparse.Namespace) -> dict[str, Any]:
    """Return the JSON report of ``kimi-viz inspect`` for parsed arguments."""
    from ..preprocess.images import load_image

    config = get_config(args.config) if args.config else get_config(args.preset)
    # Every image is opened (and a bad one refused) before the processor and torch are imported.
    loaded = [load_image(path, exif_transpose=args.exif_transpose, alpha=args.alpha) for path in args.images]
    from ..preprocess.processor import Processor

    processor = Processor(
        config, backend=args.backend, exif_transpose=args.exif_transpose, alpha=args.alpha, keep_images=False
    )
    output = processor.preprocess(loaded)
    images = [
        {
            "path": str(path),
            "source_size": list(record.source_size),
            "source_mode": record.source_mode,
            "resize": record.resize.to_json(),
            "grid_thw": list(record.grid_thw),
            "patches": record.patches,
            "tokens": record.num_tokens,
            "rows": list(record.rows),
            "token_span": list(record.token_span),
            "pixel_values_sha256": rows_sha256(output.image_rows(record.index)),
        }
        for path, record in zip(args.images, output.records)
    ]
    return {
        "preset": config.name,
        "images": images,
        "total_rows": int(output.pixel_values.shape[0]),
        "total_tokens": sum(image["tokens"] for image in images),
    }


def format_table(report: dict[str, Any]) -> str:
    """Return the report as a plain-text table."""
    header = (
        "image",
        "size",
        "mode",
        "resized",
        "pad",
        "grid t,h,w",
        "patches",
        "tokens",
        "rows",
        "tokens at",
        "sha256",
    )
    lines = []
    for image in report["images"]:
        r = image["resize"]
        lines.append(
            (
                escape_value(image["path"]),  # a newline in a file name must not start a line of its own
                "{}x{}".format(*image["source_size"]),
                image["source_mode"],
                f"{r['new_width']}x{r['new_height']}",
                f"+{r['pad_width']},+{r['pad_height']}",
                ",".join(str(v) for v in image["grid_thw"]),
                str(image["patches"]),
                str(image["tokens"]),
                "[{}, {})".format(*image["rows"]),
                "[{}, {})".format(*image["token_span"]),
                image["pixel_values_sha256"][:12],
            )
        )
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    out = [f"preset {report['preset']}"]
    out += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *lines]]
    out.append(f"total: {report['total_rows']} rows, {report['total_tokens']} tokens")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Print the inspect report; return 0."""
    report = inspect_images(args)
    emit(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0
