"""``kimi-viz triage``: replay a captured manifest, print the verdict, and write a self-contained report."""

from __future__ import annotations

import argparse
import json

from . import emit

# kimi_viz._triage's CODE_PATH_CHOICES and MODE_CHOICES, named here so that building the parser does not
# import the replay (and torch); tests/test_hostile_scale.py checks they agree.
CODE_PATH_CHOICES = ("post-fix", "pre-fix", "no-split", "both")
MODE_CHOICES = ("auto", "pixels", "shapes")


def _rank(text: str) -> int | str:
    if text in ("recorded", "all"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'recorded', 'all' or a rank number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a rank >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``triage`` sub-command."""
    parser = subparsers.add_parser(
        "triage",
        help="replay a manifest, print the verdict and write report.html, summary.png and trace.json",
        description="Replay SGLang's deferred split on a manifest (folder, manifest.json or .zip) for every rank "
        "(or the rank the capture recorded) and print the verdict: outcome and exact message per rank, the "
        "first diverging image with both counts, the scenario class and the fix. Exit status: 0 clean, "
        "1 error reproduced, 2 bad input, 3 silent mismatch (nothing raised, an image encoded wrongly), "
        "4 not reproduced (the capture recorded an error this replay does not raise), 5 the capture recorded "
        "success but this replay raises.",
        epilog="--json prints one object in the verdict schema {outcome, error, ranks, divergence}; with "
        '--code-path both it adds "code_paths": {"post-fix": verdict, "pre-fix": verdict} and the top-level '
        "fields are the primary (recorded) code path's.",
    )
    parser.add_argument("manifest", metavar="MANIFEST", help="manifest folder, its manifest.json, or a .zip of it")
    parser.add_argument("--out", metavar="DIR", help="write report.html, summary.png and trace.json here")
    parser.add_argument(
        "--sglang-version",
        metavar="V",
        default=None,
        help="replay the code path of this SGLang release, 0.5.17 ... 0.5.23 (default: the "
        "release the capture recorded, else the path it detected, else the newest, stated)",
    )
    parser.add_argument(
        "--code-path",
        "--variant",  # the option's earlier name, still accepted
        dest="code_path",
        choices=CODE_PATH_CHOICES,
        default=None,
        help="lower-level switch: replay this code path (post-fix, pre-fix, no-split) whatever "
        "the release, or 'both' (the chosen path and the other side of the S1 fix)",
    )
    parser.add_argument("--tp", type=_positive, metavar="N", help="attention-TP size (default: the recorded one)")
    parser.add_argument(
        "--rank",
        type=_rank,
        default="recorded",
        metavar="R",
        help="'recorded' (default: the captured rank, else all), 'all', or a rank number",
    )
    parser.add_argument(
        "--mode",
        choices=MODE_CHOICES,
        default="auto",
        help="pixels, shapes, or auto (shapes when the manifest is redacted; default)",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where gpu-backend items are materialized (default auto: CUDA when present)",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Triage the manifest; return the verdict's exit code (0 clean, 1 error reproduced, 3, 4 or 5)."""
    from ..manifest import check_manifest

    if args.out:
        from ..files import check_folder

        check_folder(args.out, what="--out")
    check_manifest(args.manifest)  # every check, before the replay and torch are imported: a bad manifest fails fast
    from .._triage import triage

    result = triage(
        args.manifest,
        out_dir=args.out,
        code_path=args.code_path,
        tp=args.tp,
        mode=args.mode,
        rank=args.rank,
        device=args.device,
        sglang_version=args.sglang_version,
    )
    if args.json:
        emit(json.dumps(result.verdict.to_json(), indent=2, default=str))
    else:
        emit(result.text())
        if not args.out:
            emit("\n(pass --out DIR to also write report.html, summary.png and trace.json)")
    return result.exit_code
