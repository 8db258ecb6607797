"""`kimi-viz explain --follow`: a live log explained as its lines arrive.

One answer per incident (its repeats folded with a count), a traceback joined to its final line, a file
followed through rotation and truncation, Ctrl-C a clean exit with a summary, and memory bounded on a
stream of millions of lines. The children are real processes; every wait has a hang guard of 60 s or
more and no test asserts on time.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kimi_viz._explain import MAX_INCIDENTS, LiveExplainer
from kimi_viz.cli import main

HANG_GUARD_S = 60
LAYOUT = "ValueError: Invalid batch layout [2, 1] for 3 requests\n"
ONE_TO_ONE = "ValueError: Kimi image placeholders must map one-to-one to image data: expected 1, found 0 token(s)\n"
LENGTH = "ValueError: Kimi-K3 deferred feature length does not match image grids\n"
ENV = {**os.environ, "PYTHONUNBUFFERED": "0"}


class Lines:
    """A child's output read line by line in a thread, so a test can wait for one line with a hang guard."""

    def __init__(self, stream):
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in iter(stream.readline, ""):
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def until(self, predicate) -> str:
        """Return the first line from now on that ``predicate`` accepts (fail after HANG_GUARD_S)."""
        while True:
            try:
                line = self.queue.get(timeout=HANG_GUARD_S)
            except queue.Empty:
                pytest.fail(f"no such line within {HANG_GUARD_S} s; seen: {self.seen[-20:]}")
            if line is None:
                pytest.fail(f"the output ended first; seen: {self.seen[-20:]}")
            self.seen.append(line)
            if predicate(line):
                return line

    def rest(self) -> list[str]:
        """Return every line until the output ends."""
        out = []
        while (line := self.queue.get(timeout=HANG_GUARD_S)) is not None:
            out.append(line)
        return out


def _child(*args: str, stdin=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kimi_viz", "explain", "--follow", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def test_the_first_answer_arrives_before_the_pipe_closes():
    child = _child()
    out = Lines(child.stdout)
    child.stdin.write("INFO decode batch 12\n" + ONE_TO_ONE)
    child.stdin.flush()
    first = out.until(lambda line: line.startswith("line "))
    assert first == "line 2: ValueError: " + ONE_TO_ONE.removeprefix("ValueError: ").rstrip("\n")
    assert child.poll() is None  # still reading: the answer came from an open pipe
    child.stdin.write(ONE_TO_ONE * 3)
    child.stdin.close()
    rest = out.rest()
    assert child.wait(timeout=HANG_GUARD_S) == 0
    assert [line for line in rest if line.startswith("line ")] == [
        "line 3: again: incident 1 (one-to-one), 2 times since line 2"
    ]
    assert rest[-3:] == [
        "  one-to-one (request): 1 incident(s), 4 line(s), lines 2-5",
        "  latest 1 incident(s):",
        "    incident 1: one-to-one x4, line 2-5",
    ]
    assert "summary: 1 incident(s) of 1 known message(s) in 5 line(s)" in rest


def test_a_traceback_is_one_answer_on_its_final_line():
    live = LiveExplainer()
    log = (
        "Traceback (most recent call last):\n"
        '  File "kimi_k3.py", line 9, in process_mm_data_async\n'
        '    raise ValueError(f"Kimi-K3 deferred feature length does not match image grids")\n'
        "\n" + LENGTH
    )
    events = live.feed(log.encode()) + live.close()
    assert [(e.incident.number, e.repeat, e.line, e.count) for e in events] == [(1, False, 5, 1)]
    assert events[0].incident.first.traceback_from == 1
    assert events[0].text().splitlines()[0] == (
        "line 5 (traceback from line 1): ValueError: Kimi-K3 deferred feature length does not match image grids"
    )


def test_lines_split_across_reads_and_a_last_line_without_newline_are_explained():
    live = LiveExplainer()
    data = (LAYOUT + LENGTH.rstrip("\n")).encode()
    events = []
    for index in range(0, len(data), 7):
        events += live.feed(data[index : index + 7])
    events += live.close()
    assert [(e.incident.first.message.key, e.line) for e in events] == [("epd-batch-layout", 1), ("feature-length", 2)]
    assert live.lines == 1 and live.incidents == 2


def test_a_rotated_and_a_truncated_file_are_followed(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO start\n" + LAYOUT)
    child = _child(str(log), stdin=subprocess.DEVNULL)
    out, err = Lines(child.stdout), Lines(child.stderr)
    assert out.until(lambda line: line.startswith("line ")) == "line 2: InternalError: " + LAYOUT.removeprefix(
        "ValueError: "
    ).rstrip("\n")
    log.rename(tmp_path / "server.log.1")
    log.write_text(ONE_TO_ONE)
    assert err.until(lambda line: "was replaced" in line) == (
        f"kimi-viz explain: {str(log)!r} was replaced; following the new file"
    )
    assert out.until(lambda line: line.startswith("line ")).startswith("line 3: ValueError: Kimi image placeholders")
    log.write_text("")  # truncated in place (same file)
    assert err.until(lambda line: "was truncated" in line) == (
        f"kimi-viz explain: {str(log)!r} was truncated; reading it from its start"
    )
    with log.open("a") as handle:
        handle.write(LENGTH)
    assert out.until(lambda line: line.startswith("line ")) == "line 4: ValueError: " + LENGTH.removeprefix(
        "ValueError: "
    ).rstrip("\n")
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=HANG_GUARD_S) == 0
    rest = out.rest()
    assert "summary: 3 incident(s) of 3 known message(s) in 4 line(s)" in rest
    assert "Traceback" not in "\n".join(err.rest())


def test_ctrl_c_ends_with_a_summary_and_the_explain_exit_codes(tmp_path):
    child = _child()
    out, err = Lines(child.stdout), Lines(child.stderr)
    child.stdin.write("INFO nothing to see\n" * 3)
    child.stdin.flush()
    child.stdin.write(LAYOUT)
    child.stdin.flush()
    out.until(lambda line: line.startswith("line 4: "))
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=HANG_GUARD_S) == 0
    assert out.rest()[-4:] == [
        "summary: 1 incident(s) of 1 known message(s) in 4 line(s)",
        "  epd-batch-layout (EPD transfer): 1 incident(s), 1 line(s), lines 4-4",
        "  latest 1 incident(s):",
        "    incident 1: epd-batch-layout x1, line 4",
    ]
    assert err.rest() == ["kimi-viz explain: following standard input; Ctrl-C ends it with a summary"]

    quiet = _child()
    out, err = Lines(quiet.stdout), Lines(quiet.stderr)
    err.until(lambda line: line.startswith("kimi-viz explain: following standard input"))
    quiet.send_signal(signal.SIGINT)  # waiting on an open pipe that has said nothing yet
    assert quiet.wait(timeout=HANG_GUARD_S) == 1
    assert out.rest() == ["summary: no known Kimi-K3 vision error in 0 line(s)"]
    assert err.rest() == []
    quiet.stdin.close()


GENERATOR = r"""
import sys
out = sys.stdout.buffer
lines = int(sys.argv[1])
filler = b"INFO 2026-02-03 04:05:06 TP0 decode batch, #running-req: 3, #token: 5120, gen throughput (token/s): 812.5\n"
chunk = []
for i in range(lines):
    if i % 1000 == 999:
        chunk.append(b"ValueError: Invalid batch layout [2, 1] for %d requests\n" % (i // 1000))
    elif i % 1000 == 499:
        chunk.append(b"ValueError: Kimi-K3 deferred feature length does not match image grids\n")
    else:
        chunk.append(filler)
    if len(chunk) == 4096:
        out.write(b"".join(chunk)); chunk = []
out.write(b"".join(chunk))
"""
FOLLOWER = r"""
import sys
from kimi_viz.cli import main
code = main(["explain", "--follow", "--json"])
status = open("/proc/self/status").read()
peak = [line for line in status.splitlines() if line.startswith("VmHWM:")][0]
print(f"{code} {int(peak.split()[1])}", file=sys.stderr)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux) to read the peak memory")
def test_millions_of_lines_are_followed_in_bounded_memory(tmp_path):
    lines = 3_000_000
    events = tmp_path / "events.jsonl"
    generator = subprocess.Popen([sys.executable, "-c", GENERATOR, str(lines)], stdout=subprocess.PIPE)
    with events.open("w") as sink:
        follower = subprocess.run(
            [sys.executable, "-c", FOLLOWER],
            stdin=generator.stdout,
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
            timeout=600,  # a hang guard only
        )
    generator.stdout.close()
    assert generator.wait(timeout=HANG_GUARD_S) == 0
    code, peak_kib = follower.stderr.split()[-2:]
    assert code == "0"
    assert int(peak_kib) <= 300 * 1024, f"peak RSS {int(peak_kib) >> 10} MiB"
    import json

    records = [json.loads(line) for line in events.read_text().splitlines()]
    new = [r for r in records if "matched" in r]
    repeats = [r for r in records if "count" in r]
    assert len(new) == 3001 > MAX_INCIDENTS
    assert [r["count"] for r in repeats] == [2, 10, 100, 1000]
    assert records[-1] == {
        "summary": {
            "lines": lines,
            "incidents": 3001,
            "messages": {
                "feature-length": {"incidents": 1, "lines": 3000},
                "epd-batch-layout": {"incidents": 3000, "lines": 3000},
            },
        }
    }


def test_follow_refuses_a_missing_file_a_folder_and_text_in_one_line(tmp_path, capsys):
    assert main(["explain", "--follow", str(tmp_path / "nope.log")]) == 2
    assert main(["explain", "--follow", str(tmp_path)]) == 2
    assert main(["explain", "--follow", str(tmp_path / "nope.log"), "some text"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"kimi-viz explain: error: --follow {str(tmp_path / 'nope.log')!r}: no such file; "
        "expected a log file to follow",
        f"kimi-viz explain: error: --follow {str(tmp_path)!r}: is a folder; expected a regular log file",
        "kimi-viz explain: error: --follow reads a live log; pass the file as --follow LOG, without TEXT or --file",
    ]
