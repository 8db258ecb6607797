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

from kimi_viz._demo import CHAT_DEPLOYMENT, DEMO_CHAT, DEMO_INPUTS, DEMO_LOAD_SCENARIOS, DEMO_SCENARIOS, LOG_IMAGES
from kimi_viz.cli import main
from kimi_viz.data import sample_log
from kimi_viz.releases import RELEASES
from kimi_viz.scenarios import LOAD_SCENARIOS, SCENARIOS

EVERY = (*DEMO_SCENARIOS, *DEMO_LOAD_SCENARIOS, *DEMO_INPUTS)

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
    for name in EVERY:
        assert re.search(rf"^  {re.escape(name)} ", printed, re.M)
    # One column per field: every outcome starts where the longest name ends, every line fits 120 columns.
    rows = [line for line in printed.splitlines() if line.startswith("  ")]
    width = max(len(n) for n in EVERY)
    assert {line[2 + width] for line in rows} == {" "} and {line[3 + width] for line in rows} != {" "}
    assert max(len(line) for line in rows) <= 120
    assert f"wrote {len(EVERY)} reports in " in printed
    assert re.search(r"^  from-server-log +✗ ERROR REPRODUCED: ValueError: Kimi-K3 deferred GPU", printed, re.M)
    assert re.search(r"^  chat-model-path +✓ CLEAN REPLAY ", printed, re.M)
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
    for name in DEMO_INPUTS:
        assert f"{name}/report.html" in hrefs and f"{name}/answer.json" in hrefs
    assert "from-server-log/server.log" in hrefs and "chat-model-path/chat.json" in hrefs  # the inputs, beside
    reports = [h for h in hrefs if h.endswith("/report.html")]
    # single calls, S14-S17, the chat's second turn (S18, S19), memory pressure (S20 twice), a log and a checkpoint
    assert len(reports) == len(set(reports)) == 15 + 4 + 4 + 2
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
    assert index.count(">yes<") == len(EVERY)  # every row as catalogued (or, for an input, as expected)


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


def test_demo_answers_from_the_sample_server_log_and_with_a_checkpoint_folder(tmp_path, capsys):
    out = tmp_path / "d"
    assert main(["demo", "--out", str(out), "--scenarios", ",".join(DEMO_INPUTS), "--no-gallery"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^  from-server-log +✗ ERROR REPRODUCED: ValueError: Kimi-K3 deferred GPU", printed, re.M)
    assert re.search(r"^  chat-model-path +✓ CLEAN REPLAY ", printed, re.M)
    assert sorted(p.name for p in out.iterdir()) == ["chat-model-path", "from-server-log", "index.html"]
    index = html.unescape((out / "index.html").read_text())
    assert "<h2>Your deployment as input: a server's log, a checkpoint folder</h2>" in index
    assert index.count(">yes<") == 2 and "<h2>Under load" not in index
    log_dir, chat_dir = out / "from-server-log", out / "chat-model-path"

    # The log's answer: the two requests of its failing pass, on the server its start-up lines describe.
    assert sorted(p.name for p in log_dir.iterdir()) == [
        "answer.json",
        "issue.md",
        "report.html",
        "server.log",
        "summary.png",
        "trace.json",
    ]
    assert (log_dir / "server.log").read_bytes() == sample_log().read_bytes()
    log_command = f"kimi-viz whatif {' '.join(LOG_IMAGES)} --together --server-log {log_dir / 'server.log'}"
    assert f"<code>{log_command}</code>" in index
    found = json.loads((log_dir / "answer.json").read_text())
    assert (found["sglang_version"], found["tp_size"], found["status"]) == ("0.5.18", 2, "error-reproduced")
    assert found["error"]["message"] == "Kimi-K3 deferred GPU preprocessing produced wrong grids"
    server = found["server"]
    assert server["inputs"] == [f"--server-log {log_dir / 'server.log'}"]
    assert server["release"] == "SGLang 0.5.18: the arguments of server log line 1 are 0.5.18's"
    assert server["tp"] == "attention-TP 2 = tp_size 2 (server log line 1)"
    assert server["sources"]["max_total_tokens"] == {"value": 7000, "source": "server log line 3", "from": "log"}
    assert server["sources"]["page_size"] == {"value": 1, "source": "server log line 1", "from": "log"}
    # a workload's server is one object: what the flags resolve to, and where each value came from
    assert server["strategy"] == "no_buffer" and server["overlap"] is False and server["memory"]["kv_pool"] == 7000
    assert (
        f"Reproduce: <code>{html.escape(log_command)} --out {log_dir}</code>" in (log_dir / "report.html").read_text()
    )

    # The chat's answer: tokenized by the synthetic checkpoint written beside it, clean; counted, it would fail.
    assert sorted(p.name for p in chat_dir.iterdir()) == [
        "answer.json",
        "answer.txt",
        "chat.json",
        "checkpoint",
        "forward.png",
        "issue.md",
        "report.html",
    ]
    assert json.loads((chat_dir / "chat.json").read_text()) == DEMO_CHAT
    assert "synthetic" in (chat_dir / "checkpoint" / "SYNTHETIC.md").read_text()
    chat_command = (
        f"kimi-viz whatif --chat {chat_dir / 'chat.json'} --model-path {chat_dir / 'checkpoint'} "
        f"{' '.join(CHAT_DEPLOYMENT)}"
    )
    assert f"<code>{chat_command}</code>" in index
    assert (
        "counted instead of tokenized, the same chat is ✗ ERROR REPRODUCED: ValueError: Kimi-K3 deferred GPU" in index
    )
    chat = json.loads((chat_dir / "answer.json").read_text())
    assert (chat["question"], chat["status"], chat["error"]) == ("chat", "clean", None)
    rendered = chat["request_side"]["rendered"]
    assert rendered["by"] == f"tokenized by {chat_dir / 'checkpoint'}"
    assert rendered["input_ids"].count(163605) == rendered["placeholders"] == 2 and rendered["length"] == 219
    assert chat["server"]["sources"]["preprocessor_config.json"]["source"] == f"--model-path {chat_dir / 'checkpoint'}"
    pads = [r["pad_runs"] for r in chat["load"]["requests"]]
    assert pads == [[[211, 578], [588, 948]]]  # tokenized: rocket.jpg straddles the 512 cut, astronaut.png is after it

    # Each printed command asks the same question again.
    for command, answer in ((log_command, found), (chat_command, chat)):
        assert main([*command.split()[1:], "--json"]) == (1 if answer["status"] == "error-reproduced" else 0)
        again = json.loads(capsys.readouterr().out)
        assert (again["status"], again["error"]) == (answer["status"], answer["error"])
