"""The emitted repro, run against the real SGLang: it fails and passes exactly as the kit's verdict says.

``kimi_viz.repro.emit_repro`` writes one test file per batch into one folder: every catalogue scenario
the real code can express, at least :data:`FAILING` seeded random batches that the kit says fail on
0.5.18 and as many that fail on 0.5.23, and the S1 capture (``s1-cpu`` as the manifest a capture of
rank 1 leaves on 0.5.18, and its redacted copy, which must carry no pixels). One pytest process of
the installed release runs the folder with ``kimi_viz`` blocked from import; each rank's outcome
must be what the kit's replay of the installed release says: a rank that raises fails with SGLang's
exception type and exact message, a rank that hands over wrong rows fails the row check, every other
rank passes. The S1 capture's repro must fail under 0.5.18 with "Kimi-K3 deferred feature length
does not match image grids" and pass under 0.5.23: it also runs under every other lane venv beside
this one, and both outcomes go in the lane's counts (the CI log). So does the repro that
``kimi-viz triage CAPTURE --emit-repro DIR`` writes, the command line itself, for both manifests.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from kimi_viz.cli import main
from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.message_catalogue.messages import MSG_LENGTH
from kimi_viz.repro import ReproCase, emit_repro
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split.batch import RecordedOutcome
from kimi_viz.split.cause import ErrorInfo

from .batches import random_batch
from .lane import kit_outcomes, record
from .test_replay_parity import NOT_EXPRESSIBLE

FAILING = 20  # random batches failing on each of 0.5.18 and 0.5.23 (the kit's verdict)
MAX_SEEDS = 400
LANE_RELEASES = ("0.5.18", "0.5.23")
RUN = "import sys; sys.modules['kimi_viz'] = None; import pytest; raise SystemExit(pytest.main(sys.argv[1:]))"


def run_folder(python: str, folder: Path, junit: Path) -> dict[str, tuple[str, str]]:
    """Run every repro in ``folder`` in one pytest process; return ``test id -> (outcome, failure text)``."""
    done = subprocess.run(
        [python, "-c", RUN, str(folder), "-q", "-p", "no:cacheprovider", "-W", "ignore", f"--junitxml={junit}"],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=1800,
    )
    assert junit.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    results = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        problem = next((c for c in case if c.tag in ("failure", "error")), None)
        skipped = next((c for c in case if c.tag == "skipped"), None)
        outcome = "failed" if problem is not None else "skipped" if skipped is not None else "passed"
        text = "" if problem is None else f"{problem.get('message', '')}\n{problem.text or ''}"
        results[f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"] = (outcome, text)
    return results


def result_id(test_file: Path, rank: int) -> str:
    return f"{test_file.stem}::{test_file.stem}[rank{rank}]"


def check(name: str, test_file: Path, results: dict, release: str, kit: list | None) -> list[str]:
    """Return one line per rank whose real outcome is not what the kit's verdict for ``release`` says."""
    case = ReproCase.from_json(json.loads(test_file.with_suffix(".json").read_text()))
    expected = case.expected_for(release)
    problems = []
    if kit is not None:  # the data file's expectations are the kit's verdict itself
        for rank, outcome, type_, message in kit:
            e = expected[rank]
            if (outcome == "error") != (e.outcome == "raises") or (
                outcome == "error" and ErrorInfo(type_, message) != e.error
            ):
                problems.append(
                    f"{name}: rank {rank}: data file says {e.text()}, the kit's replay {outcome} {type_} {message}"
                )
    for rank in case.ranks:
        e = expected[rank]
        got = results.get(result_id(test_file, rank))
        if got is None:
            problems.append(f"{name}: rank {rank}: no result from pytest")
            continue
        outcome, text = got
        if e.outcome == "passes" and outcome != "passed":
            problems.append(f"{name}: rank {rank}: the kit says it passes, SGLang {outcome}: {text[:400]}")
        elif e.outcome == "raises" and (outcome != "failed" or str(e.error) not in text):
            problems.append(f"{name}: rank {rank}: the kit says {e.error}; SGLang {outcome}: {text[:400]}")
        elif e.outcome == "wrong-rows" and (outcome != "failed" or "were handed over with" not in text):
            problems.append(f"{name}: rank {rank}: the kit says {e.text()}; SGLang {outcome}: {text[:400]}")
    return problems


def _random_cases() -> tuple[list, dict[str, int]]:
    chosen, failing = [], dict.fromkeys(LANE_RELEASES, 0)
    for seed in range(MAX_SEEDS):
        if min(failing.values()) >= FAILING:
            break
        case = random_batch(seed)
        fails = {
            v: any(o == "error" for _, o, _, _ in kit_outcomes(case.batch, case.tp_size, v)) for v in LANE_RELEASES
        }
        if any(fails.values()):
            chosen.append(case)
            for v, f in fails.items():
                failing[v] += f
    return chosen, failing


def _s1_capture(tmp_path: Path) -> tuple[Path, Path]:
    """Write s1-cpu as the manifest a capture of rank 1 leaves on 0.5.18, and its redacted copy; return both."""
    batch = SCENARIOS["s1-cpu"].build()
    batch.sglang_version, batch.attn_tp_rank = "0.5.18", 1
    batch.recorded = RecordedOutcome("error", ErrorInfo("ValueError", MSG_LENGTH))
    batch.created_by = "kimi-viz capture"
    return (
        write_manifest(batch, tmp_path / "captures" / "s1-rank1"),
        write_manifest(batch, tmp_path / "captures" / "s1-rank1-redacted", redact=True),
    )


def _other_lane_pythons(release: str) -> dict[str, str]:
    """Return the other lane releases' interpreters found beside this venv (``.venv-sglang/<release>``)."""
    found = {}
    for other in LANE_RELEASES:
        python = Path(sys.prefix).parent / other / "bin" / "python"
        if other != release and python.is_file():
            found[other] = str(python)
    return found


def _s1_text(results: dict, files: list[Path]) -> str:
    parts = []
    for test_file in files:
        case = ReproCase.from_json(json.loads(test_file.with_suffix(".json").read_text()))
        outcomes = [results.get(result_id(test_file, r), ("missing", "")) for r in case.ranks]
        failed = [
            f"rank {r} fails with " + next((line for line in t.splitlines() if MSG_LENGTH in line), t[:80]).strip()
            for r, (o, t) in zip(case.ranks, outcomes)
            if o != "passed"
        ]
        parts.append("; ".join(failed) if failed else "passes")
    return " / ".join(sorted(set(parts)))


def test_emitted_repros_fail_and_pass_as_the_kit_says(release, tmp_path):
    folder = tmp_path / "repros"
    emitted: list[tuple[str, Path, list | None]] = []
    for name, scenario in SCENARIOS.items():
        if name in NOT_EXPRESSIBLE:
            continue
        batch = scenario.build()
        test_file = emit_repro(batch, folder)
        emitted.append((name, test_file, kit_outcomes(batch, scenario.tp_size, release, mode="pixels")))
    randoms, failing = _random_cases()
    for case in randoms:
        test_file = emit_repro(case.batch, folder, name=f"random_seed{case.seed}")
        emitted.append((case.description, test_file, kit_outcomes(case.batch, case.tp_size, release)))
    plain, redacted = _s1_capture(tmp_path)
    s1 = [
        emit_repro(read_manifest(plain), folder, manifest=plain, scenario="s1-cpu", name="s1_capture"),
        emit_repro(read_manifest(redacted), folder, manifest=redacted, scenario="s1-cpu", name="s1_capture_redacted"),
    ]
    emitted += [(f"S1 capture {p.stem}", p, None) for p in s1]

    # A redacted manifest's repro carries no pixels; neither does any repro emitted without pixels=True.
    pngs = sorted(p.name for p in folder.rglob("*.png"))
    redacted_case = json.loads(s1[1].with_suffix(".json").read_text())
    assert redacted_case["source"]["redacted"] is True
    assert all(it["feature"]["png"] is None for b in redacted_case["batches"] for it in b["items"])
    assert "no pixels" in s1[1].read_text()

    results = run_folder(sys.executable, folder, tmp_path / "junit.xml")
    problems = []
    for name, test_file, kit in emitted:
        problems += check(name, test_file, results, release, kit)

    s1_by_release = {release: _s1_text(results, s1)}
    s1_folder = tmp_path / "s1"
    s1_folder.mkdir()
    for test_file in s1:  # the same two files, for the other lane releases
        for suffix in (".py", ".json"):
            shutil.copy2(test_file.with_suffix(suffix), s1_folder)
    for other, python in _other_lane_pythons(release).items():
        other_results = run_folder(python, s1_folder, tmp_path / f"junit-{other}.xml")
        copies = [s1_folder / p.name for p in s1]
        for test_file in copies:
            problems += [
                f"under {other}: {p}"
                for p in check(f"S1 capture {test_file.stem}", test_file, other_results, other, None)
            ]
        s1_by_release[other] = _s1_text(other_results, copies)
    if "0.5.18" in s1_by_release:
        expected = f"rank 1 fails with ValueError: {MSG_LENGTH}"
        assert s1_by_release["0.5.18"] == expected, s1_by_release
    if "0.5.23" in s1_by_release:
        assert s1_by_release["0.5.23"] == "passes", s1_by_release

    ranks = [
        r for _, p, _ in emitted for r in ReproCase.from_json(json.loads(p.with_suffix(".json").read_text())).ranks
    ]
    failed = sum(1 for outcome, _ in results.values() if outcome == "failed")
    record(
        "repro",
        cases=len(emitted),
        scenarios=len(SCENARIOS) - len(NOT_EXPRESSIBLE),
        random=len(randoms),
        **{f"random_failing_on_{v}": n for v, n in failing.items()},
        rank_tests=len(ranks),
        rank_tests_failed=failed,
        pngs=len(pngs),
        disagreements=len(problems),
        s1_capture="; ".join(f"under {v}: {text}" for v, text in sorted(s1_by_release.items())),
    )
    assert pngs == []
    assert min(failing.values()) >= FAILING, failing
    assert problems == []


def test_triage_emit_repro_of_the_s1_capture_fails_on_0_5_18_and_passes_on_0_5_23(release, tmp_path):
    """``kimi-viz triage CAPTURE --emit-repro DIR``, the command line itself, on the S1 capture and its redacted
    copy: each repro fails on 0.5.18 with SGLang's message and passes on 0.5.23; the redacted one has no image."""
    plain, redacted = _s1_capture(tmp_path)
    folders = {"s1 capture": tmp_path / "repro", "s1 capture redacted": tmp_path / "repro-redacted"}
    files = []
    for manifest, folder in zip((plain, redacted), folders.values()):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["triage", str(manifest), "--emit-repro", str(folder)])
        (test_file,) = folder.glob("test_kimi_k3_repro_*.py")
        assert code == 1 and f"wrote the repro {test_file}" in err.getvalue()
        files.append(test_file)
    # The redacted manifest's repro folder holds the test and its data, and not one image.
    redacted_files = [p for p in folders["s1 capture redacted"].rglob("*") if p.is_file()]
    images = [p for p in redacted_files if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp", ".bmp")]
    assert sorted(p.name for p in redacted_files if not p.name.startswith(".")) == sorted(
        [files[1].name, files[1].with_suffix(".json").name]
    )
    assert json.loads(files[1].with_suffix(".json").read_text())["source"]["redacted"] is True

    shared = tmp_path / "both"
    shared.mkdir()
    for test_file in files:
        for suffix in (".py", ".json"):
            shutil.copy2(test_file.with_suffix(suffix), shared)
    copies = [shared / p.name for p in files]
    by_release, problems = {}, []
    for version, python in {release: sys.executable, **_other_lane_pythons(release)}.items():
        results = run_folder(python, shared, tmp_path / f"junit-cli-{version}.xml")
        for test_file in copies:
            problems += [f"under {version}: {p}" for p in check(test_file.stem, test_file, results, version, None)]
        by_release[version] = _s1_text(results, copies)
    if "0.5.18" in by_release:
        assert by_release["0.5.18"] == f"rank 1 fails with ValueError: {MSG_LENGTH}", by_release
    if "0.5.23" in by_release:
        assert by_release["0.5.23"] == "passes", by_release
    record(
        "triage-repro",
        cases=len(copies),
        images_in_redacted=len(images),
        disagreements=len(problems),
        s1_capture="; ".join(f"under {v}: {text}" for v, text in sorted(by_release.items())),
    )
    assert problems == []
