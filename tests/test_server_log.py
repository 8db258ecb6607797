"""A server's log read as input: the start-up line as literals (never evaluated), the pool lines, the passes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kimi_viz.errors import ServerInputError
from kimi_viz.server_args.literal import read_arguments
from kimi_viz.server_args.log import KEPT_PREFILLS, MAX_LINE, LogReader, read_log_stream, read_server_log

LOGS = Path(__file__).resolve().parent / "data" / "server_logs"


def test_a_0_5_18_start_up_line_is_read_from_its_repr():
    log = read_server_log(LOGS / "kimi-k3-0.5.18.log")
    arguments = log.start.arguments
    assert arguments is not None and arguments.line == 1
    assert arguments.arguments.form == "repr"
    values = arguments.arguments.values
    assert len(values) == 471  # every field of 0.5.18's ServerArgs but the nested cuda_graph_config
    assert arguments.arguments.unreadable == ("cuda_graph_config",)
    assert (values["tp_size"], values["page_size"], values["mamba_radix_cache_strategy"]) == (2, 1, "no_buffer")
    assert values["disable_overlap_schedule"] is True and values["attention_backend"] == "fa3"
    assert log.start.pool is not None and log.start.pool.line == 3
    pool = log.start.pool
    assert (pool.max_total_num_tokens, pool.chunked_prefill_size, pool.max_running_requests) == (7000, 2048, 48)
    assert (pool.max_prefill_tokens, pool.context_len, pool.available_mem_gb) == (16384, 262144, 9.02)
    assert log.start.mamba is not None and log.start.mamba.max_mamba_cache_size == 96
    assert log.last_prefill is not None and (log.last_prefill.line, log.last_prefill.new_seq) == (4, 2)


def test_a_0_5_23_start_up_line_is_read_from_its_dict_and_only_rank_0s_pool_line_counts():
    log = read_server_log(LOGS / "kimi-k3-0.5.23-dp-attention.log")
    arguments = log.start.arguments
    assert arguments is not None and arguments.arguments.form == "dict"
    values = arguments.arguments.values
    assert len(values) == 546 and not arguments.arguments.unreadable and not arguments.arguments.cut
    assert (values["tp_size"], values["attn_dp_size"], values["page_size"], values["dcp_size"]) == (8, 2, 64, 2)
    assert values["enable_hierarchical_cache"] is True
    assert log.start.pool is not None and log.start.pool.max_total_num_tokens == 1185024  # TP4's 999999 is not rank 0
    assert log.start.mamba is not None and log.start.mamba.line == 3  # the first mamba line of the start-up
    passes = log.prefills
    assert [(p.line, p.new_seq, p.new_token, p.cached_token) for p in passes] == [(8, 1, 441, 0), (10, 2, 768, 448)]
    assert passes[-1].running_req == 1 and passes[-1].queue_req == 0


def test_a_line_cut_short_keeps_the_arguments_before_the_cut():
    line = (LOGS / "kimi-k3-0.5.23-dp-attention.log").read_text().splitlines()[0]
    text = line[line.index("server_args=") + len("server_args=") :]
    cut = read_arguments(text[: len(text) // 3])
    assert cut is not None and cut.cut
    whole = read_arguments(text)
    assert whole is not None
    assert 0 < len(cut.values) < len(whole.values)
    assert all(whole.values[key] == value for key, value in cut.values.items())


def test_nothing_in_a_start_up_line_is_evaluated():
    marker = "__import__('os').system('touch /tmp/kimi-viz-pwned')"
    arguments = read_arguments(f"{{'tp_size': 2, 'model_path': {marker}, 'page_size': (1).__class__}}")
    assert arguments is not None
    assert arguments.values == {"tp_size": 2}
    assert arguments.unreadable == ("model_path", "page_size")
    assert not Path("/tmp/kimi-viz-pwned").exists()
    nested = read_arguments("ServerArgs(tp_size=" + "[" * 100_000 + "]" * 100_000 + ", page_size=16)")
    assert nested is not None and nested.values == {"page_size": 16} and nested.unreadable == ("tp_size",)


def test_quotes_and_brackets_inside_values_do_not_split_them():
    arguments = read_arguments("{'api_key': 'a, b}', 'json_model_override_args': '{\"x\": [1, 2]}', 'tp_size': 4}")
    assert arguments is not None
    assert arguments.values == {"api_key": "a, b}", "json_model_override_args": '{"x": [1, 2]}', "tp_size": 4}


def test_a_log_without_start_up_lines_is_refused_naming_what_was_looked_for(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("[2026-11-30 08:00:00] INFO: starting\nDecode batch, #running-req: 1\n")
    with pytest.raises(ServerInputError) as caught:
        read_server_log(path)
    message = str(caught.value)
    assert "\n" not in message
    assert "no start-up line in its 2 line(s)" in message
    assert "server_args=" in message and "max_total_num_tokens=" in message and "max_mamba_cache_size" in message


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a folder"),
        (lambda p: p.write_bytes(b"\x00\x01ELF\x02" * 100), "holds NUL bytes"),
    ],
)
def test_a_missing_folder_or_binary_log_is_refused_in_one_line(tmp_path, make, expected):
    path = tmp_path / "server.log"
    make(path)
    with pytest.raises(ServerInputError) as caught:
        read_server_log(path)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_huge_line_is_skipped_in_bounded_memory_and_the_start_up_after_it_is_read():
    head = b"x" * (MAX_LINE + 10)  # no line end for more than MAX_LINE bytes: never held whole
    tail = (LOGS / "kimi-k3-0.5.18.log").read_bytes()
    log = read_log_stream(io.BytesIO(head + b"\n" + tail), source="test")
    assert log.skipped_lines == 1
    assert log.start.arguments is not None and log.start.arguments.line == 2
    assert log.start.pool is not None and log.start.pool.max_total_num_tokens == 7000


def test_the_newest_start_up_wins_and_the_prefill_tail_is_bounded():
    first = (LOGS / "kimi-k3-0.5.18.log").read_text()
    second = (LOGS / "kimi-k3-0.5.23-dp-attention.log").read_text()
    prefill = "Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0, token usage: 0.00\n"
    text = first + prefill * (KEPT_PREFILLS + 50) + second
    log = read_log_stream(io.BytesIO(text.encode()), source="test")
    assert log.starts == 2
    assert log.start.arguments is not None and log.start.arguments.arguments.form == "dict"
    assert len(log.prefills) == 2  # the first start-up's passes went with it
    reader = LogReader("test")
    for number, line in enumerate((first + prefill * (KEPT_PREFILLS + 50)).splitlines(), 1):
        reader.feed(number, line)
    assert len(reader.prefills) == KEPT_PREFILLS


def test_a_version_a_person_wrote_into_the_log_names_the_release():
    text = "$ pip show sglang | head -2\nName: sglang\nVersion: 0.5.22\n"
    text += "$ python -c 'import sglang; print(sglang.__version__)'\n"
    text += "sglang==0.5.21\n" + (LOGS / "kimi-k3-0.5.20-startup.log").read_text()
    log = read_log_stream(io.BytesIO(text.encode()), source="test")
    assert log.start.version is not None and (log.start.version.version, log.start.version.line) == ("0.5.21", 5)
