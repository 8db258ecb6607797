"""One answer for every question: a captured batch is asked, swept and shrunk like a request, and every
question writes the tracker's files with ``--out`` (report.html, summary.png, trace.json, issue.md, answer.json).

Exact statuses, errors, release rows and file contents; the request and workload answers themselves are
checked in test_whatif.py, test_whatif_load.py and test_chat.py.
"""

from __future__ import annotations

import json

import pytest

from kimi_viz import Answer, Status, answer_json, get_scenario, minimize, sweep, sweep_text, whatif
from kimi_viz.cli import main
from kimi_viz.message_catalogue.messages import MSG_GPU_WRONG_GRIDS
from kimi_viz.split.cause import ErrorInfo

GPU_GRIDS = ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)


def test_a_captured_batch_is_a_question_like_any_other():
    batch = get_scenario("s1-gpu").build()
    answer = whatif(batch, sglang_version="0.5.18", tp_size=2)
    assert isinstance(answer, Answer) and answer.status is Status.ERROR_REPRODUCED
    assert answer.error == GPU_GRIDS and answer.failing_ranks == [1] and answer.exit_code == 1
    assert answer.fixed_in is not None and answer.fixed_in.release == "0.5.19"
    assert answer_json(answer)["question"] == "batch"
    assert whatif(batch, sglang_version="0.5.19", tp_size=2).status is Status.CLEAN


def test_a_captured_batch_sweeps_by_code_path_and_shrinks_to_the_items_it_needs():
    batch = get_scenario("s1-gpu").build()
    swept = sweep(batch, tp_sizes=(1, 2))
    # a batch's items are already built: releases that run one code path are one row
    assert [tuple(r.version for r in row) for row in swept.rows] == [
        ("0.5.17",),
        ("0.5.18",),
        ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
    ]
    assert [(c.label, c.tp_size) for c in swept.cells if c.error == GPU_GRIDS] == [("0.5.18", 2)]
    # 0.5.17 has no deferred split: the raw features cannot be concatenated there
    assert "fails on 0.5.17 at every TP size (A, B); fails on 0.5.18 at TP 2 (C); clean from 0.5.19" in sweep_text(
        swept
    )
    found = minimize(batch, sglang_version="0.5.18", tp_size=2)
    assert found.target == GPU_GRIDS and len(found.kept) == 2 and found.exit_code == 1


def test_whatif_out_writes_the_deciding_calls_report_with_the_forward_pass(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["whatif", "rocket.jpg", "astronaut.png", "--together", "--sglang-version", "0.5.18", "--tp", "2"]
    assert main([*argv, "--out", str(out)]) == 1
    assert sorted(p.name for p in out.iterdir()) == [
        "answer.json",
        "issue.md",
        "report.html",
        "summary.png",
        "trace.json",
    ]
    assert "kimi-viz whatif: wrote" in capsys.readouterr().err
    document = json.loads((out / "answer.json").read_text())
    assert (document["question"], document["status"], document["exit_code"]) == ("workload", "error-reproduced", 1)
    report = (out / "report.html").read_text()
    assert "<h2>The forward pass</h2>" in report and "<h2>The question</h2>" in report
    assert "kimi-viz whatif rocket.jpg astronaut.png --together --sglang-version 0.5.18 --tp 2" in report
    issue = (out / "issue.md").read_text()
    assert MSG_GPU_WRONG_GRIDS in issue and "0.5.19" in issue
    # the server settings name the path the replay ran (0.5.18's), not a default the batch never had
    assert "- replayed: SGLang 0.5.18 (pre-fix path)" in issue
    assert "- code path: pre-fix (how it was found: recorded)" in issue


@pytest.mark.parametrize(("version", "path"), [("0.5.17", "no-split"), ("0.5.18", "pre-fix"), ("0.5.23", "post-fix")])
def test_a_one_request_whatif_reports_the_code_path_it_replayed(tmp_path, version, path):
    out = tmp_path / "out"
    main(["whatif", "rocket.jpg", "astronaut.png", "--sglang-version", version, "--tp", "2", "--out", str(out)])
    issue = (out / "issue.md").read_text()
    assert f"- replayed: SGLang {version} ({path} path)" in issue
    assert f"- code path: {path} (how it was found: recorded)" in issue
    assert json.loads((out / "trace.json").read_text())["release"]["code_path"] == path


def test_whatif_out_without_a_call_writes_the_answer_alone(tmp_path):
    out = tmp_path / "out"
    argv = ["whatif", "chelsea.png", "--embedding-cache-hit", "0", "--sglang-version", "0.5.23", "--tp", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["answer.json", "answer.txt", "issue.md"]
    assert json.loads((out / "answer.json").read_text())["status"] == "no-call"
    assert "∅ NO CALL — nothing reaches get_image_feature" in (out / "answer.txt").read_text()
    issue = (out / "issue.md").read_text()
    assert issue.startswith("# Kimi-K3 request reaches no get\\_image\\_feature call (SGLang 0.5.23, attention-TP 1)\n")
    assert "**∅ NO CALL** (status `no-call`, exit 0)" in issue and "Drag" not in issue  # no figure was written


def test_a_workload_failing_in_the_splice_gets_an_issue_body_of_its_own(tmp_path):
    """S17 fails where the call's rows are split back, not in get_image_feature: its issue body says so."""
    out = tmp_path / "s17"
    assert main(["scenario", "run", "s17-stale-eager-split", "--out", str(out)]) == 1
    issue = (out / "issue.md").read_text()
    title = issue.splitlines()[0]
    assert title.startswith("# Kimi-K3 forward pass raises RuntimeError: split\\_with\\_sizes expects split\\_sizes")
    assert title.endswith("(SGLang 0.5.23, attention-TP 1)")
    assert "**✗ ERROR REPRODUCED** (status `error-reproduced`, exit 1)" in issue
    assert "`RuntimeError: split_with_sizes expects split_sizes to sum exactly to 113" in issue
    assert "- fixed in: no known release runs this clean" in issue
    assert "r1 image 1 (microaneurysms.png) yields 1 rows for 16 pads" in issue  # the why
    assert "- replay it: `kimi-viz scenario run s17-stale-eager-split`" in issue
    assert "Drag `forward.png` (written beside `issue.md`)" in issue and (out / "forward.png").is_file()
    assert str(tmp_path) not in issue and len(issue) < 60_000


def test_scenario_run_out_writes_the_report_of_a_batch_and_of_a_workload(tmp_path):
    assert main(["scenario", "run", "s1-cpu", "--mode", "shapes", "--out", str(tmp_path / "s1")]) == 1
    assert {"report.html", "summary.png", "trace.json", "issue.md"} <= {p.name for p in (tmp_path / "s1").iterdir()}
    assert "kimi-viz scenario — s1-cpu" in (tmp_path / "s1" / "report.html").read_text()
    assert main(["scenario", "run", "s14-two-requests-one-call", "--out", str(tmp_path / "s14")]) == 1
    assert "<h2>The forward pass</h2>" in (tmp_path / "s14" / "report.html").read_text()
    # No single call decides a clean workload: its report is the answer with the forward-pass figure.
    assert main(["scenario", "run", "s15-straddling-image", "--out", str(tmp_path / "s15")]) == 0
    names = sorted(p.name for p in (tmp_path / "s15").iterdir())
    assert names == ["answer.json", "answer.txt", "forward.png", "issue.md", "report.html"]
    page = (tmp_path / "s15" / "report.html").read_text()
    assert "<h2>The forward pass</h2>" in page and 'src="data:image/png;base64,' in page
    assert "s15-straddling-image: S15: an image straddling two prefill chunks" in page
    assert 'id="kv-answer-json"' in page and "http://" not in page


def test_out_is_refused_with_sweep_and_where_it_cannot_write(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["whatif", "chelsea.png", "--sweep", "--out", str(tmp_path / "o")]) == 2
    assert "--out with --sweep" in capsys.readouterr().err
    argv = ["whatif", "chelsea.png", "--sglang-version", "0.5.23", "--tp", "1", "--out", str(tmp_path / "file")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
