"""``kimi-viz scenario``: list the scenario catalogue, or replay one scenario and print its verdict."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ScenarioError
from ..files import check_output
from ..releases import CODE_PATHS, RELEASE_RANGE
from ..request.settings import MODES
from . import again, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``scenario`` sub-command with its ``list`` and ``run`` actions."""
    parser = subparsers.add_parser(
        "scenario",
        help="list the reproducible scenarios, or replay one and print its verdict",
        description="Named batches built from the sample images, one per way SGLang's deferred split breaks "
        "(S1 ... S13) plus healthy batches, each with the outcome SGLang gives on its code path; and workloads under "
        "load (S14 ...: requests prefilled together, chunked prefill, the embedding cache, the splice).",
    )
    actions = parser.add_subparsers(dest="scenario_action", metavar="ACTION")
    listing = actions.add_parser(
        "list",
        help="list the scenarios and their expected outcomes",
        description="List every scenario: name, class, TP size, code path and the outcome SGLang gives.",
    )
    listing.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    listing.set_defaults(func=run_list)
    running = actions.add_parser(
        "run",
        help="replay one scenario and print its verdict",
        description="Replay a scenario on every rank and print the verdict: outcome and exact message per rank, "
        "the first diverging image with both counts, the scenario class and the fix. Exit status: 0 clean "
        "replay, 1 the error is reproduced, 2 bad input, 3 a silent mismatch (rows agree, the image is encoded "
        "wrongly).",
        epilog="--json prints the verdict schema {outcome, error, ranks, divergence} shared with "
        "`kimi-viz triage --json`.",
    )
    running.add_argument("name", metavar="NAME", help="scenario name (see `kimi-viz scenario list`)")
    running.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    running.add_argument(
        "--manifest-out", metavar="DIR", help="also write the scenario's batch as a manifest folder (or .zip) here"
    )
    running.add_argument(
        "--redact", action="store_true", help="with --manifest-out: write shape-only features (no pixels)"
    )
    running.add_argument(
        "--out",
        metavar="DIR",
        help="also write report.html, summary.png, trace.json and issue.md here (a workload's report with its "
        "forward-pass figure)",
    )
    running.add_argument(
        "--mode",
        choices=MODES,
        default="pixels",
        help="materialize pixels (default) or derive rows from shapes only",
    )
    running.add_argument(
        "--sglang-version",
        metavar="V",
        default=None,
        help=f"replay the code path of this SGLang release ({RELEASE_RANGE}; default: the scenario's own path)",
    )
    running.add_argument(
        "--code-path",
        "--variant",  # the option's earlier name, still accepted
        dest="code_path",
        choices=tuple(reversed(CODE_PATHS)),  # newest first
        default=None,
        help="lower-level switch: replay this code path whatever the release",
    )
    running.set_defaults(func=run_scenario_cmd)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_list(args: argparse.Namespace) -> int:
    """Print the catalogue (a table, or JSON with ``--json``); return 0."""
    from ..scenarios.catalogue import SCENARIOS
    from ..scenarios.under_load import LOAD_SCENARIOS

    if args.json:
        listed = [s.to_json() for s in SCENARIOS.values()] + [s.to_json() for s in LOAD_SCENARIOS.values()]
        emit(json.dumps(listed, indent=2))
        return 0
    width = max(len(name) for name in [*SCENARIOS, *LOAD_SCENARIOS])
    emit(f"{'NAME':<{width}}  CLASS  TP  CODE PATH  EXPECTED")
    for scenario in SCENARIOS.values():
        expected = scenario.expected
        what = "ok" + (" (silent)" if expected.silent else "") if expected.outcome == "ok" else str(expected.error)
        emit(
            f"{scenario.name:<{width}}  {scenario.scenario_class:<5}  {scenario.tp_size:>2}  "
            f"{scenario.code_path:<9}  {what}"
        )
    emit("")
    emit("under load (workloads: several requests, chunked prefill, the embedding cache; pipeline spec §10):")
    emit(f"{'NAME':<{width}}  CLASS  TP  RELEASE    EXPECTED")
    for load in LOAD_SCENARIOS.values():
        want = load.expected
        what = want.status.value if want.error is None else str(want.error)
        if want.fixed_in:
            what += f" (fixed in {want.fixed_in})"
        emit(f"{load.name:<{width}}  {load.scenario_class:<5}  {load.tp_size:>2}  {load.sglang_version:<9}  {what}")
    return 0


def _run_load(args: argparse.Namespace) -> int:
    """Replay a load scenario (a workload) and print every pass; return the answer's exit code."""
    from .._whatif.under_load import run_load_scenario
    from ..report.answer_documents import answer_json
    from ..report.answer_views import answer_text
    from ..scenarios.under_load import get_load_scenario

    scenario = get_load_scenario(args.name)
    if args.manifest_out or args.code_path:
        option = "--manifest-out" if args.manifest_out else "--code-path"
        raise ScenarioError(
            f"{option}: {scenario.name} is a workload of several passes, not one call's batch; drop {option} "
            "(--sglang-version picks the release)"
        )
    answer = run_load_scenario(scenario.name, sglang_version=args.sglang_version)
    if args.json:
        emit(json.dumps(answer_json(answer), indent=2, default=str))
    else:
        emit(f"== {scenario.name}: {scenario.title} ==")
        emit(scenario.description)
        emit(answer_text(answer))
    if args.out:
        from .._whatif.outputs import write_answer  # the report's figures load matplotlib

        title = f"{scenario.name}: {scenario.title}"
        written = write_answer(answer, args.out, reproduce=again(args.command_line), title=title)
        emit(f"kimi-viz scenario: wrote {', '.join(str(p) for p in written.values())}", err=True)
    return answer.exit_code


def run_scenario_cmd(args: argparse.Namespace) -> int:
    """Replay one scenario; print its verdict; return 0 (clean) or 1 (error reproduced)."""
    from .._triage import triage_batch  # the replay, its one fix search, and the report when --out asks for it
    from ..manifest import write_manifest
    from ..scenarios.catalogue import get_scenario
    from ..scenarios.under_load import LOAD_SCENARIOS
    from ..split.verdict import format_verdict

    if str(args.name).strip().lower() in LOAD_SCENARIOS:
        return _run_load(args)
    scenario = get_scenario(args.name)
    for option, value in (("--manifest-out", args.manifest_out), ("--out", args.out)):
        if value:
            check_output(value, what=option)  # refused before the replay runs
    batch = scenario.build()
    if args.manifest_out:
        path = write_manifest(batch, args.manifest_out, redact=args.redact)
        emit(f"kimi-viz scenario: wrote the manifest of {scenario.name} to {path}", err=True)
    result = triage_batch(
        batch,
        out_dir=args.out or None,
        code_path=args.code_path,
        tp=scenario.tp_size,
        mode=args.mode,
        rank="all",
        sglang_version=args.sglang_version,
        source=f"scenario {scenario.name}",
        title=f"kimi-viz scenario — {scenario.name}: {scenario.title}",
        reproduce=again(args.command_line),
    )
    if args.out:
        emit(f"kimi-viz scenario: wrote {', '.join(str(p) for p in result.outputs.values())}", err=True)
    verdict = result.verdict
    if args.json:
        emit(json.dumps(verdict.to_json(result.fixes), indent=2, default=str))
    else:
        emit(format_verdict(verdict, title=f"== {scenario.name}: {scenario.title} ==", fixes=result.fixes))
    return verdict.exit_code
