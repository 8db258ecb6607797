"""The ``kimi-viz`` command: one sub-command per module in this package.

Each sub-command module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the handler. The kit's own errors become a one-line message and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import KimiVizError

SUBCOMMANDS = ("inspect", "encode", "scenario", "triage", "capture", "explain", "demo")


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level argument parser with every sub-command registered."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="kimi-viz",
        description="Investigate how SGLang turns images into Kimi-K3 vision features.",
    )
    parser.add_argument("--version", action="version", version=f"kimi-viz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}_cmd").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (0 ok, 1 reproduced error, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KimiVizError as exc:
        print(f"kimi-viz {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
