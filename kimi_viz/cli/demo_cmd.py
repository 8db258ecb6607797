"""``kimi-viz demo``: replay the healthy batch, the key scenarios and the load scenarios, then answer from a server's
log and with a checkpoint folder; write their reports and the gallery."""

from __future__ import annotations

import argparse

from ..files import check_folder
from ..scenarios import DEMO_INPUTS, DEMO_LOAD_SCENARIOS, DEMO_SCENARIOS
from . import emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` sub-command."""
    parser = subparsers.add_parser(
        "demo",
        help="replay the healthy batch, the key failure scenarios and the load scenarios; write reports and the "
        "figure gallery",
        description="Replay the healthy batch and the key scenarios on the sample images, then the load scenarios "
        "(workloads through the scheduler, a chat's second turn among them), then answer two questions from what a "
        "user has: the kit's sample server log (--server-log) and a chat tokenized by a synthetic checkpoint folder "
        "(--model-path); write a self-contained report for each (plus its manifest, or for a workload its "
        "forward-pass figure, or its input), the figure gallery, and an index.html linking them all.",
    )
    parser.add_argument("--out", default="demo-out", metavar="DIR", help="output folder (default demo-out)")
    parser.add_argument(
        "--scenarios",
        metavar="NAMES",
        default=",".join((*DEMO_SCENARIOS, *DEMO_LOAD_SCENARIOS, *DEMO_INPUTS)),
        help="comma-separated names: single-call or load scenarios, or the answers read from inputs "
        f"({', '.join(DEMO_INPUTS)}) (default: %(default)s)",
    )
    parser.add_argument("--no-gallery", action="store_true", help="skip the figure gallery")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the demo and print where it is; return 0."""
    from .._demo import run_demo
    from ..scenarios.catalogue import get_scenario
    from ..scenarios.under_load import LOAD_SCENARIOS

    check_folder(args.out, what="--out")
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    for name in names:
        if name.lower() not in LOAD_SCENARIOS and name not in DEMO_INPUTS:
            get_scenario(name)  # an unknown name is refused before anything is written
    emit(f"kimi-viz demo: replaying {len(names)} scenarios into {args.out}/")
    index = run_demo(args.out, scenarios=names, gallery=not args.no_gallery, progress=emit)
    emit(f"open {index.resolve()}")
    return 0
