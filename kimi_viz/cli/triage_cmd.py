"""``kimi-viz triage``: replay a captured manifest, print the verdict, and write a self-contained report.

``--format markdown`` prints ``issue.md`` (an issue body); ``--emit-repro DIR`` also writes the
standalone SGLang test of the batch (its path on stderr, so ``--format json`` stays one object).
"""

from __future__ import annotations

import argparse
import json
import os

from ..devices import DEVICES
from ..errors import ArgumentError
from ..files import check_folder
from ..releases import CODE_PATHS, RELEASE_RANGE
from ..request.settings import MODES
from . import emit
from .server_input import add_server_input, model_from_args

# kimi_viz._triage's CODE_PATH_CHOICES and MODE_CHOICES, from the tables that define them so that building
# the parser does not import the replay (and torch); tests/test_hostile_scale.py checks they agree.
CODE_PATH_CHOICES = (*reversed(CODE_PATHS), "both")  # newest first, then both sides of the S1 fix
MODE_CHOICES = ("auto", *MODES)
FORMATS = ("text", "json", "markdown")


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
        help="replay a manifest, print the verdict and write report.html, summary.png, trace.json and issue.md",
        description="Replay SGLang's deferred split on a manifest (folder, manifest.json or .zip) for every rank "
        "(or the rank the capture recorded) and print the verdict: outcome and exact message per rank, the "
        "first diverging image with both counts, the scenario class and the fix. Exit status: 0 clean, "
        "1 error reproduced, 2 bad input, 3 silent mismatch (nothing raised, an image encoded wrongly), "
        "4 not reproduced (the capture recorded an error this replay does not raise), 5 the capture recorded "
        "success but this replay raises.",
        epilog="--format json (or --json) prints one object in the verdict schema {outcome, error, ranks, "
        "divergence}; with "
        '--code-path both it adds "code_paths": {"post-fix": verdict, "pre-fix": verdict} and the top-level '
        "fields are the primary (recorded) code path's. A manifest that records the forward pass around the "
        'call adds "forward_context": which request and image each item came from. --format markdown prints '
        "issue.md: GitHub-flavoured Markdown to paste as an issue body.",
    )
    parser.add_argument("manifest", metavar="MANIFEST", help="manifest folder, its manifest.json, or a .zip of it")
    parser.add_argument(
        "--out", metavar="DIR", help="write report.html, summary.png, trace.json and issue.md (the issue body) here"
    )
    parser.add_argument(
        "--sglang-version",
        metavar="V",
        default=None,
        help=f"replay the code path of this SGLang release, {RELEASE_RANGE} (default: the "
        "release the capture recorded, else the path it detected, else the newest, stated)",
    )
    parser.add_argument(
        "--code-path",
        "--variant",  # the option's earlier name, still accepted
        dest="code_path",
        choices=CODE_PATH_CHOICES,
        default=None,
        help=f"lower-level switch: replay this code path ({', '.join(reversed(CODE_PATHS))}) whatever "
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
        choices=DEVICES,
        default="auto",
        help="where gpu-backend items are materialized (default auto: CUDA when present)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text (default), json (the verdict as one JSON object) or markdown (issue.md: an issue body)",
    )
    parser.add_argument("--json", action="store_true", help="the same as --format json")
    parser.add_argument(
        "--emit-repro",
        metavar="DIR",
        help="also write a standalone pytest file that runs SGLang's own get_image_feature on this batch at the "
        "release and attention-TP size replayed: it fails on a release with the bug and passes on the fix "
        "(no pixels: every image is rebuilt from its shape)",
    )
    add_server_input(parser)
    parser.set_defaults(func=run)


def _output_format(args: argparse.Namespace) -> str:
    if args.json and args.format not in (None, "json"):
        raise ArgumentError(f"--json is --format json: drop one of --json and --format {args.format}")
    return "json" if args.json else args.format or "text"


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse a bad --out or --emit-repro before anything is replayed."""
    if args.out:
        check_folder(args.out, what="--out")
    if args.emit_repro is not None:
        from ..repro import check_repro_folder

        if args.out and os.path.abspath(args.out) == os.path.abspath(args.emit_repro):
            raise ArgumentError(
                "--emit-repro and --out name the same folder: the repro goes in a folder of its own "
                "(e.g. --out triage-out --emit-repro triage-out/repro)"
            )
        check_repro_folder(args.emit_repro)


def run(args: argparse.Namespace) -> int:
    """Triage the manifest; return the verdict's exit code (0 clean, 1 error reproduced, 3, 4 or 5)."""
    output = _output_format(args)
    _check_outputs(args)
    from ..manifest import check_manifest

    check_manifest(args.manifest)  # every check, before the replay and torch are imported: a bad manifest fails fast
    from .._triage import triage

    server = None
    if args.server is not None or args.server_log is not None or args.model_path is not None:
        from .._whatif.deployment import DeploymentInput, read_deployment

        server = read_deployment(
            DeploymentInput(
                server=args.server,
                server_log=args.server_log,
                sglang_version=args.sglang_version,
                needs_release=False,
                model=model_from_args(args),
            )
        )
    words = [
        word
        for option in ("--server", "--server-log", "--model-path")
        if getattr(args, option[2:].replace("-", "_")) is not None
        for word in (option, getattr(args, option[2:].replace("-", "_")))
    ]
    result = triage(
        args.manifest,
        out_dir=args.out,
        code_path=args.code_path,
        tp=args.tp,
        mode=args.mode,
        rank=args.rank,
        device=args.device,
        sglang_version=args.sglang_version,
        server=server,
        server_words=words,
    )
    if output == "json":
        emit(json.dumps(result.to_json(), indent=2, default=str))
    elif output == "markdown":
        # With --out, issue.md is already written: print that file rather than render it again.
        text = result.outputs["issue"].read_text(encoding="utf-8") if args.out else result.markdown(figure=None)
        emit(text.rstrip("\n"))
    else:
        emit(result.text())
        if not args.out:
            emit("\n(pass --out DIR to also write report.html, summary.png, trace.json and issue.md)")
    if args.emit_repro is not None:
        path = result.emit_repro(args.emit_repro)
        emit(f"kimi-viz triage: wrote the repro {path} (run it with: python -m pytest {path.parent})", err=True)
    return result.exit_code
