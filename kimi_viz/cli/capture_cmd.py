"""``kimi-viz capture``: run a command (e.g. an SGLang server) and record every failing image batch."""

from __future__ import annotations

import argparse
import shlex
import sys

from ..capture.run import captured_manifests, command_problem, run_captured
from ..errors import CaptureError
from ..files import prepare_folder
from ..terminal import escape_value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``capture`` sub-command."""
    parser = subparsers.add_parser(
        "capture",
        help="run a command and record the batch of every failing get_image_feature call",
        description="Run COMMAND with a sitecustomize shim on PYTHONPATH so that every Python process it "
        "starts wraps KimiK3ForConditionalGeneration.get_image_feature when sglang.srt.models.kimi_k3 is "
        "imported. When a call raises (or on every call with --all) the call's items are written as a "
        "manifest to a new folder under DIR, and the same exception is re-raised unchanged. The exit "
        "code is the command's.",
        epilog="example: kimi-viz capture --out captures -- python -m sglang.launch_server --model-path ...",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the manifests (created)")
    parser.add_argument("--redact", action="store_true", help="store shapes only, no pixels")
    parser.add_argument(
        "--all", dest="all_calls", action="store_true", help="record every call, not only the failing ones"
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the command to run, after --")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the command under capture and return its exit code."""
    command = list(args.argv[1:] if args.argv[:1] == ["--"] else args.argv)
    if not command:
        raise CaptureError(
            "no command given; expected the command to run after --, e.g. "
            "kimi-viz capture --out DIR [--redact] [--all] -- python -m sglang.launch_server ..."
        )
    prepare_folder(args.out, what="--out")
    problem = command_problem(command)
    if problem is not None:
        code, message = problem
        print(f"kimi-viz capture: error: {message}", file=sys.stderr)
        return code
    before = set(captured_manifests(args.out))
    code = run_captured(command, args.out, redact=args.redact, all_calls=args.all_calls)
    new = [p for p in captured_manifests(args.out) if p not in before]
    if new:
        latest = shlex.quote(str(new[-1]))
        triage_out = shlex.quote(str(new[-1] / "triage"))
        print(
            escape_value(
                f"kimi-viz capture: {len(new)} manifest(s) under {args.out}; triage one with: "
                f"kimi-viz triage {latest} --out {triage_out}"
            ),
            file=sys.stderr,
        )
    return code
