"""``kimi-viz demo``: every report, the gallery and the index are written, linked and self-contained, in time."""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kimi_viz._demo import DEMO_LOAD_SCENARIOS, DEMO_SCENARIOS
from kimi_viz.cli import main
from kimi_viz.releases import RELEASES
from kimi_viz.scenarios import LOAD_SCENARIOS, SCENARIOS

KEY_SCENARIOS = {"healthy-tp2", "s1-cpu", "s2-cpu", "s3-mixed-local", "s4-cpu", "s13-zero-size"}
TIME_LIMIT_S = 120.0


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.hrefs.append(value)


def links_of(page: Path) -> list[str]:
    parser = Links()
    parser.feed(page.read_text())
    return parser.hrefs


def test_demo_scenarios_are_catalogued_and_cover_the_key_ones():
    assert set(DEMO_SCENARIOS) <= set(SCENARIOS)
    assert set(DEMO_SCENARIOS) >= KEY_SCENARIOS
    assert len(set(DEMO_SCENARIOS)) == len(DEMO_SCENARIOS)


def test_demo_tours_the_load_scenarios_of_every_class_and_a_chats_second_turn():
    assert set(DEMO_LOAD_SCENARIOS) <= set(LOAD_SCENARIOS)
    classes = [LOAD_SCENARIOS[name].scenario_class.value for name in DEMO_LOAD_SCENARIOS]
    assert classes == ["S14", "S15", "S16", "S17", "S18", "S19", "S20", "S20"]  # S20: a retraction, an eviction
    chat = LOAD_SCENARIOS["s19-saved-state-reopens-image"].build()
    assert [r.continues for r in chat.requests] == [None, "t1"]  # the conversation: turn 2 continues turn 1


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo-out"
    buffer = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(buffer):
        code = main(["demo", "--out", str(out)])
    return out, code, buffer.getvalue(), time.perf_counter() - started


@pytest.mark.slow
def test_demo_runs_in_time_and_says_where(demo):
    out, code, printed, elapsed = demo
    assert code == 0
    assert elapsed < TIME_LIMIT_S, f"the demo took {elapsed:.1f} s"
    assert printed.splitlines()[-1] == f"open {(out / 'index.html').resolve()}"
    for name in (*DEMO_SCENARIOS, *DEMO_LOAD_SCENARIOS):
        assert re.search(rf"^  {re.escape(name)} ", printed, re.M)
    # One column per field: every outcome starts where the longest name ends, every line fits 120 columns.
    rows = [line for line in printed.splitlines() if line.startswith("  ")]
    width = max(len(n) for n in (*DEMO_SCENARIOS, *DEMO_LOAD_SCENARIOS))
    assert {line[2 + width] for line in rows} == {" "} and {line[3 + width] for line in rows} != {" "}
    assert max(len(line) for line in rows) <= 120
    assert f"wrote {len(DEMO_SCENARIOS) + len(DEMO_LOAD_SCENARIOS)} reports in " in printed
    assert re.search(r"^  s15-straddling-image +✓ CLEAN REPLAY ", printed, re.M)
    # Each line carries its status: a silent mismatch never reads as "ok".
    assert re.search(r"^  s4-gpu +≠ SILENT MISMATCH ", printed, re.M)
    assert re.search(r"^  healthy-tp2 +✓ CLEAN REPLAY ", printed, re.M)
    assert re.search(r"^  s1-cpu +✗ ERROR REPRODUCED: ValueError: Kimi-K3 deferred feature length", printed, re.M)
    assert not re.search(r"^  \S+ +ok ", printed, re.M)


@pytest.mark.slow
def test_demo_index_links_every_report_and_the_gallery(demo):
    out = demo[0]
    index = out / "index.html"
    hrefs = links_of(index)
    for name in DEMO_SCENARIOS:
        assert f"{name}/report.html" in hrefs
        assert f"{name}/issue.md" in hrefs  # the issue body sits beside every report
        for file in ("report.html", "summary.png", "trace.json", "issue.md", "manifest/manifest.json"):
            assert (out / name / file).is_file(), (name, file)
    for name in DEMO_LOAD_SCENARIOS:
        assert f"{name}/report.html" in hrefs and f"{name}/answer.json" in hrefs
        assert (out / name / "report.html").is_file() and (out / name / "answer.json").is_file()
    reports = [h for h in hrefs if h.endswith("/report.html")]
    assert (
        len(reports) == len(set(reports)) == 15 + 4 + 4
    )  # single calls, S14-S17, the chat's second turn (S18, S19), memory pressure (S20 twice)
    assert "gallery/index.html" in hrefs
    for href in hrefs:
        assert (out / href).is_file(), href
    for href in links_of(out / "gallery" / "index.html"):
        assert (out / "gallery" / href).is_file(), href


@pytest.mark.slow
def test_demo_reports_match_the_catalogue_and_are_self_contained(demo):
    out = demo[0]
    for page in out.rglob("*.html"):
        text = page.read_text()
        assert "http://" not in text and "https://" not in text, page
    for name in DEMO_SCENARIOS:
        page = (out / name / "report.html").read_text()
        verdict = json.loads(re.search(r'id="kv-verdict-json">(.*?)</script>', page, re.S).group(1))
        expected = SCENARIOS[name].expected
        assert verdict["outcome"] == expected.outcome, name
        message = None if expected.error is None else expected.error.message
        assert (verdict["error"] or {}).get("message") == message, name
        assert verdict["divergence"]["scenario_class"] == expected.scenario_class, name
        assert 'class="kv-stepper' in page
        assert not re.search(r'\b(src|href)="(?!data:|#)', page), name
    index = (out / "index.html").read_text()
    assert index.count(">yes<") == len(DEMO_SCENARIOS) + len(DEMO_LOAD_SCENARIOS)  # every row "as catalogued"


@pytest.mark.slow
def test_demo_load_reports_hold_their_forward_pass_and_answer(demo):
    out = demo[0]
    index = (out / "index.html").read_text()
    assert "<h2>Under load: workloads through the scheduler</h2>" in index
    issues = 0
    for name in DEMO_LOAD_SCENARIOS:
        scenario = LOAD_SCENARIOS[name]
        page = (out / name / "report.html").read_text()
        assert "<h2>The forward pass</h2>" in page, name
        assert re.search(r'<img alt="Prefill pass \d+: [^"]*" src="data:image/png;base64,', page), name
        assert not re.search(r'\b(src|href)="(?!data:|#)', page), name
        assert f"{name}: {scenario.title}" in html.unescape(page)
        document = json.loads((out / name / "answer.json").read_text())
        expected = scenario.expected
        assert document["status"] == expected.status.value, name
        assert document["error"] == (None if expected.error is None else expected.error.to_json()), name
        assert document["sglang_version"] == scenario.sglang_version and document["tp_size"] == scenario.tp_size
        # Every answer has an issue body; a deciding call's names, in its server settings, the path the replay ran.
        issue = (out / name / "issue.md").read_text()
        if issue.startswith("# Kimi-K3 get\\_image\\_feature raises"):
            issues += 1
            path = RELEASES[scenario.sglang_version].code_path
            assert f"- replayed: SGLang {scenario.sglang_version} ({path} path)" in issue, name
            assert f"- code path: {path} (how it was found: recorded)" in issue, name
    assert issues == 5  # S14, S18, S19 and both S20: each fails in its get_image_feature call
    chat = json.loads((out / "s18-prefix-reopens-image" / "answer.json").read_text())
    second = chat["passes"][1]["replay"]["requests"][0]
    assert (second["rid"], second["matched_prefix"]) == ("t2", 448)  # turn 1's saved state, also the page floor
    chat = json.loads((out / "s19-saved-state-reopens-image" / "answer.json").read_text())
    second = chat["passes"][1]["replay"]["requests"][0]
    assert (second["rid"], second["matched_prefix"]) == ("t2", 384)  # the saved state a plain tree would pass by
    assert [i["reopened_by_cut"] for i in chat["images"]] == [False, True, False]
    assert chat["server"]["strategy"] == "extra_buffer" and chat["saves"][0] == {
        "step": 1,
        "request": "t1",
        "depth": 384,
    }


@pytest.mark.slow
def test_demo_manifest_replays_with_triage(demo, capsys):
    out = demo[0]
    assert main(["triage", str(out / "s2-cpu" / "manifest"), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["error"] == {
        "type": "ValueError",
        "message": "Kimi-K3 deferred feature length does not match image grids",
    }


def test_demo_subset_without_gallery(tmp_path, capsys):
    assert (
        main(["demo", "--out", str(tmp_path / "d"), "--scenarios", "s3-mixed-local,s9-two-grids", "--no-gallery"]) == 0
    )
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["index.html", "s3-mixed-local", "s9-two-grids"]
    assert "gallery" not in (tmp_path / "d" / "index.html").read_text()
    assert main(["demo", "--out", str(tmp_path / "e"), "--scenarios", "no-such-scenario"]) == 2
    assert "unknown scenario 'no-such-scenario'" in capsys.readouterr().err
