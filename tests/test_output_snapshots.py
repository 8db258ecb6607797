"""Every scenario's ``scenario run --json``, ``triage --json`` and ``trace.json`` against snapshots.

The snapshots in ``tests/snapshots/`` were taken from the kit before its modules were regrouped
into sub-packages; the outputs must stay the same except for the changes documented in
``docs/outputs.md`` (applied by :func:`documented_changes` below, so every difference is named).
Regenerate only for a documented change: ``python tests/test_output_snapshots.py --write``.

``issue.md`` is pinned the same way for one scenario per status (``tests/snapshots/issue/<name>.md``,
taken when the file was introduced), with what varies from run to run — the folder, the manifest's
SHA-256 and the kit's version — written as ``WORKDIR``, ``SHA256`` and ``VERSION``; regenerate those
for a documented change with ``python tests/test_output_snapshots.py --write-issue``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import sys
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def compute(name: str, workdir: Path) -> dict:
    """Return the three outputs of scenario ``name``, each as the CLI writes it (parsed JSON)."""
    from kimi_viz.cli import main

    def cli(*args: str) -> dict:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        assert code in (0, 1, 3, 4, 5), err.getvalue()  # the documented verdict exit codes
        return json.loads(out.getvalue())

    manifest = workdir / f"{name}-manifest"
    out = workdir / f"{name}-out"
    scenario_run = cli("scenario", "run", name, "--json", "--manifest-out", str(manifest))
    triage = cli("triage", str(manifest), "--json", "--out", str(out))
    trace = json.loads((out / "trace.json").read_text(encoding="utf-8"))
    return {"scenario_run": scenario_run, "triage": triage, "trace": trace}


S1_FIX_BEFORE = "(0.5.23 or later)"
S1_FIX_NOW = "(0.5.19 or later)"
S1_PRS_BEFORE = "a version with PRs #35305 / #36265 ("
S1_PRS_NOW = "a version with SGLang PR #35305 ("
# Verdict fields added by verdict version 2 (docs/outputs.md, changes 1 and 4-6).
NEW_VERDICT_KEYS = (
    "release",
    "verdict_version",
    "status",
    "status_text",
    "headline",
    "exit_code",
    "recorded",
    "rank_summary",
    "failing_ranks",
    "images",
)
NEW_DIVERGENCE_KEYS = ("cause", "grid_read_from")


def _undo_verdict(verdict: dict) -> dict:
    verdict = {k: v for k, v in verdict.items() if k not in NEW_VERDICT_KEYS}
    divergence = {k: v for k, v in verdict["divergence"].items() if k not in NEW_DIVERGENCE_KEYS}
    # 2. S1's fix names the first fixed release, 0.5.19, where it said 0.5.23.
    if divergence.get("fix"):
        divergence["fix"] = divergence["fix"].replace(S1_FIX_NOW, S1_FIX_BEFORE)
        # 16. S1's fix names its own change from the release table (the backport #36265 is in no known release).
        divergence["fix"] = divergence["fix"].replace(S1_PRS_NOW, S1_PRS_BEFORE)
    # 7. "unknown" is now "unclassified" (always explained by the cause's own text).
    if divergence["scenario_class"] == "unclassified":
        divergence["scenario_class"] = "unknown"
    # 10. A silent S4's batch total expects the consumer's grid for the image (it counted the producer's).
    if divergence["scenario_class"] == "S4" and divergence["silent"]:
        divergence["expected_total"] -= divergence["expected_rows"] - divergence["produced_rows"]
    # 15. Each image row says whether the verdict calls it silently mis-encoded ("silent"); a silent S4's
    # row expects the consumer's grid, as the verdict does (it showed the producer's, and "match": true).
    rows = []
    for row in divergence["images"]:
        row = dict(row)
        if row.pop("silent") and divergence["scenario_class"] == "S4":
            row.update(expected_grid=row["produced_grid"], expected_rows=row["produced_rows"], match=True)
        rows.append(row)
    divergence["images"] = rows
    verdict["divergence"] = divergence
    # 12. "variants" (--variant both) is "code_paths" (--code-path both): one name for the code path.
    if "code_paths" in verdict:
        verdict["variants"] = {k: _undo_verdict(v) for k, v in verdict.pop("code_paths").items()}
    return verdict


def _undo_row(row: dict) -> dict:
    # 8. One name for the grid row read: grid_index_read (the rank's rows said grid_index).
    row = dict(row)
    row["grid_index"] = row.pop("grid_index_read")
    return row


def _undo_trace(trace: dict) -> dict:
    trace = dict(trace)
    # 13. The code path replayed is "code_path" in trace.json (it was "variant"), at the top and in the grouping step.
    trace["variant"] = trace.pop("code_path")
    ranks = []
    for rank in trace["ranks"]:
        rank = dict(rank, images=[_undo_row(r) for r in rank["images"]])
        steps = []
        for step in rank["steps"]:
            variables = dict(step["variables"])
            if "code_path" in variables:
                variables["variant"] = variables.pop("code_path")
            if "row_tracks" in variables:
                rows = [_undo_row(r) for r in variables["row_tracks"]]
                if step["name"] == "group_backends":
                    # 9. The grid rows a group reads are drawn at the grouping step that reads them (they
                    # appeared one step later, at the group's preprocessing).
                    rows = [dict(r, expected_grid=r["declared_grid"], grid_index=r["image"]) for r in rows]
                variables["row_tracks"] = rows
            steps.append(dict(step, variables=variables))
        rank["steps"] = steps
        ranks.append(rank)
    trace["ranks"] = ranks
    return trace


def documented_changes(outputs: dict) -> dict:
    """Return ``outputs`` with every documented change since the snapshots undone (see docs/outputs.md)."""
    trace = _undo_verdict(outputs["trace"])
    trace["trace"] = _undo_trace(trace["trace"])
    return {
        "scenario_run": _undo_verdict(outputs["scenario_run"]),
        "triage": _undo_verdict(outputs["triage"]),
        "trace": trace,
    }


def _names() -> list[str]:
    return sorted(p.stem for p in SNAPSHOTS.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", _names())
def test_outputs_equal_the_snapshot(name, tmp_path):
    expected = json.loads((SNAPSHOTS / f"{name}.json").read_text(encoding="utf-8"))
    assert documented_changes(compute(name, tmp_path)) == expected


ISSUE_SNAPSHOTS = SNAPSHOTS / "issue"
ISSUE_SCENARIOS = ("s1-cpu", "healthy-tp2", "s4-gpu")  # error reproduced, clean, silent mismatch


def compute_issue(name: str, workdir: Path) -> str:
    """Return scenario ``name``'s ``issue.md`` as ``triage --out`` writes it, its run-to-run parts named."""
    from kimi_viz import __version__
    from kimi_viz.cli import main

    manifest = workdir / f"{name}-manifest"
    out = workdir / f"{name}-out"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["scenario", "run", name, "--manifest-out", str(manifest)])
        main(["triage", str(manifest), "--out", str(out)])
    text = (out / "issue.md").read_text(encoding="utf-8")
    digest = hashlib.sha256((manifest / "manifest.json").read_bytes()).hexdigest()
    text = text.replace(str(workdir), "WORKDIR").replace(digest, "SHA256")
    return re.sub(rf"kimi-viz: {re.escape(__version__)}\b", "kimi-viz: VERSION", text)


@pytest.mark.parametrize("name", ISSUE_SCENARIOS)
def test_issue_md_equals_its_snapshot(name, tmp_path):
    expected = (ISSUE_SNAPSHOTS / f"{name}.md").read_text(encoding="utf-8")
    assert compute_issue(name, tmp_path) == expected


if __name__ == "__main__":  # python tests/test_output_snapshots.py --write | --write-issue
    import tempfile

    from kimi_viz.scenarios import SCENARIOS

    if "--write-issue" in sys.argv:
        ISSUE_SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        for scenario in ISSUE_SCENARIOS:
            with tempfile.TemporaryDirectory() as tmp:
                (ISSUE_SNAPSHOTS / f"{scenario}.md").write_text(compute_issue(scenario, Path(tmp)), encoding="utf-8")
            print("wrote issue.md of", scenario)
        sys.exit(0)
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/test_output_snapshots.py --write | --write-issue")
    SNAPSHOTS.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            data = compute(scenario, Path(tmp))
        (SNAPSHOTS / f"{scenario}.json").write_text(
            json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8"
        )
        print("wrote", scenario)
