"""explain reads the server from the log: every answer names the server its start-up lines describe and the pass that
raised (its ``Prefill batch`` line), with the load classes that fit and the whatif command that replays that server."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from kimi_viz._explain import LiveExplainer, explain, explain_stream
from kimi_viz.cli import main

LOGS = Path(__file__).resolve().parent / "data" / "server_logs"
DP_LOG = LOGS / "kimi-k3-0.5.23-dp-attention.log"
OLD_LOG = LOGS / "kimi-k3-0.5.18.log"
ERROR = "ValueError: Kimi-K3 deferred feature length does not match image grids"


def test_an_answer_names_the_server_and_the_pass_that_raised(capsys):
    assert main(["explain", "--file", str(DP_LOG)]) == 0
    out = capsys.readouterr().out
    assert (
        "  server:    SGLang 0.5.23 (the arguments of line 1 fit it), attention-TP 4 (tp_size 8 / attention-DP 2), "
        "page 64, chunk 8192; UnifiedRadixCache (FULL + MAMBA), auto, overlap schedule; KV pool 1185024 tokens, "
        "128 request rows, mamba pool 480 slots (start-up from line 1)"
    ) in out
    assert "  pass:      line 10: Prefill batch, #new-seq 2, #new-token 768, #cached-token 448" in out
    assert "S14: #new-seq 2: 2 requests shared the failing pass" in out
    assert "S18/S19: #cached-token 448: a radix prefix was used" in out
    assert f"  replay:    kimi-viz whatif IMAGE... --together --server-log {DP_LOG}" in out


def test_the_json_answer_carries_the_server_and_the_pass(capsys):
    assert main(["explain", "--json", "--file", str(OLD_LOG)]) == 0
    [found] = json.loads(capsys.readouterr().out)
    server = found["server"]
    assert server["releases"] == ["0.5.18"] and server["attention_tp"] == 2 and server["page_size"] == 1
    assert server["chunked_prefill_size"] == 2048 and server["start_line"] == 1
    assert server["pass"] == {"line": 4, "new_seq": 2, "new_token": 875, "cached_token": 0}
    assert [c["class"] for c in server["load_classes"]] == ["S14"]


def test_a_lone_request_with_no_prefix_is_said_to_be_no_load_case():
    text = OLD_LOG.read_text().replace("#new-seq: 2, #new-token: 875", "#new-seq: 1, #new-token: 441")
    [found] = explain(text)
    assert found.server is not None
    assert [name for name, _ in found.server.load_classes()] == ["alone"]


def test_the_passes_of_an_earlier_start_up_never_describe_a_later_error():
    restarted = OLD_LOG.read_text() + DP_LOG.read_text().replace(
        "Prefill batch, #new-seq: 2, #new-token: 768, #cached-token: 448", "Decode batch, #running-req: 1"
    )
    found = explain_stream(io.BytesIO(restarted.encode()))
    assert [item.server.start.first_line for item in found] == [1, 9]
    assert found[1].server.prefill.line == 16  # the new start-up's own pass, not the old one's
    assert found[1].server.facts.releases == ("0.5.23",)


def test_a_followed_log_names_the_server_as_lines_arrive():
    live = LiveExplainer("--server-log server.log")
    events = []
    for line in DP_LOG.read_bytes().splitlines(keepends=True):
        events += live.feed(line)
    events += live.close()
    [event] = [e for e in events if not e.repeat]
    context = event.incident.first.server
    assert context is not None and context.prefill is not None and context.prefill.new_seq == 2
    assert context.command() == "kimi-viz whatif IMAGE... --together --server-log server.log"
    assert event.incident.first.traceback_from == 11


def test_text_explained_against_another_logs_server_or_a_launch_command(capsys):
    assert main(["explain", ERROR, "--server-log", str(OLD_LOG)]) == 0
    out = capsys.readouterr().out
    assert "server:    SGLang 0.5.18 (the arguments of line 1 fit it), attention-TP 2" in out
    assert f"--together --server-log {OLD_LOG}" in out
    command = "python -m sglang.launch_server --model-path m --tp 8 --dp 2 --enable-dp-attention"
    assert main(["explain", ERROR, "--server", command]) == 0
    out = capsys.readouterr().out
    assert "attention-TP 4 (tp_size 8 / attention-DP 2)" in out and "(its launch command)" in out
    assert "--together --server 'python -m sglang.launch_server --model-path m --tp 8 --dp 2" in out
    assert "--sglang-version V" in out


def test_stdin_explained_says_to_save_the_log_first():
    done = subprocess.run(
        [sys.executable, "-m", "kimi_viz", "explain"], input=OLD_LOG.read_bytes(), capture_output=True, timeout=120
    )
    assert done.returncode == 0
    assert b"--server-log SERVER.log (save the log to a file first)" in done.stdout
