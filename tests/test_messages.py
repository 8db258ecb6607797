"""kimi-viz explain: SGLang's Kimi-K3 vision errors recognised in log text."""

from __future__ import annotations

import json

import pytest

from kimi_viz._explain import KNOWN_MESSAGES, explain
from kimi_viz.cli import main
from kimi_viz.message_catalogue import messages as deferred
from kimi_viz.scenarios import SCENARIOS

FAILING = [name for name, scenario in SCENARIOS.items() if scenario.expected.outcome == "error"]


@pytest.mark.parametrize("name", FAILING)
def test_every_failing_scenario_message_is_recognised_and_points_back_to_it(name):
    expected = SCENARIOS[name].expected
    error = expected.error
    assert error is not None
    found = explain(str(error))
    assert len(found) == 1, [f.message.key for f in found]
    assert found[0].message.exception == error.type
    assert name in found[0].message.scenarios
    assert expected.scenario_class in found[0].message.classes


def test_every_listed_scenario_exists_and_keys_are_unique():
    assert len({m.key for m in KNOWN_MESSAGES}) == len(KNOWN_MESSAGES)
    from kimi_viz.scenarios.under_load import LOAD_SCENARIOS

    for known in KNOWN_MESSAGES:
        assert set(known.scenarios) <= set(SCENARIOS) | set(LOAD_SCENARIOS), known.key


def test_numbers_are_read_from_the_exact_sglang_formats():
    log = "\n".join(
        [
            "ValueError: " + deferred.MSG_PROCESSOR_LENGTH.format(1400, 1444),
            "RuntimeError: Insufficient multimodal embedding length: num_mm_tokens_in_input_ids=414 vs "
            "num_mm_tokens_in_embedding=361. This is an internal error",
            "InternalError: Encoder produced 361 tokens, but preprocessor metadata expected 414",
        ]
    )
    found = {f.message.key: f for f in explain(log)}
    assert found["processor-length"].values == {"produced": 1400, "expected": 1444}
    assert found["processor-length"].reading == "pixel_values has 1400 rows, the grids need 1444 (-44 rows)"
    assert found["insufficient-embedding"].values == {"prompt_tokens": 414, "feature_rows": 361}
    assert "53 missing" in found["insufficient-embedding"].reading
    assert found["encoder-produced"].values == {"produced": 361, "expected": 414}
    assert [found[k].line for k in ("processor-length", "insufficient-embedding", "encoder-produced")] == [1, 2, 3]


def test_a_traceback_that_repeats_the_message_gives_one_match_on_its_line():
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "sglang/srt/models/kimi_k3.py", line 3801, in get_image_feature\n'
        f'    raise ValueError("{deferred.MSG_LENGTH}")\n'
        f"ValueError: {deferred.MSG_LENGTH}\n"
    )
    found = explain(traceback)
    assert [(f.message.key, f.line) for f in found] == [("feature-length", 3)]


def test_unknown_text_is_not_recognised():
    assert explain("CUDA out of memory. Tried to allocate 2.00 GiB") == []


def test_cli_text_json_and_exit_codes(capsys, tmp_path):
    assert main(["explain", "ValueError:", deferred.MSG_GPU_WRONG_GRIDS]) == 0
    out = capsys.readouterr().out
    assert "kimi-viz scenario run s2-gpu" in out and "S1, S2, S8" in out

    log = tmp_path / "server.log"
    log.write_text(
        "INFO ok\n" + "RuntimeError: Insufficient multimodal embedding length: "
        "num_mm_tokens_in_input_ids=10 vs num_mm_tokens_in_embedding=8. This is an internal error\n"
    )
    assert main(["explain", "--file", str(log), "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["key"] == "insufficient-embedding" and entry["line"] == 2
    assert entry["values"] == {"prompt_tokens": 10, "feature_rows": 8}

    assert main(["explain", "nothing to see here"]) == 1
    assert "no known Kimi-K3 vision error" in capsys.readouterr().out

    assert main(["explain", "--file", str(tmp_path / "missing.log")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_list(capsys):
    assert main(["explain", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["key"] for row in listed] == [m.key for m in KNOWN_MESSAGES]


# --- the splice (docs/pipeline.md §10): every load scenario's error and warnings, with their numbers ----------
def test_every_load_scenario_message_is_recognised_with_its_numbers_and_points_to_whatif_together():
    from kimi_viz import LOAD_SCENARIOS, run_load_scenario

    for name, scenario in LOAD_SCENARIOS.items():
        answer = run_load_scenario(name)
        lines = [w for p in answer.replay.passes for w in p.warnings]
        if scenario.expected.error is not None:
            lines.append(str(scenario.expected.error))
        for line in lines:
            found = explain(line)
            assert len(found) == 1, (name, line, [f.message.key for f in found])
            assert "whatif IMAGE... --together" in found[0].message.next_step
            if found[0].message.key != "gpu-wrong-grids":  # S14 is S1 across requests
                assert name in found[0].message.scenarios or scenario.scenario_class in found[0].message.classes


def test_splice_numbers_are_read():
    from kimi_viz.message_catalogue import messages

    (more,) = explain("WARNING " + messages.MSG_TOKEN_MISMATCH.format(16, 187))
    assert more.values == {"prompt_tokens": 16, "feature_rows": 187}
    assert more.reading.startswith("16 pad tokens in the window, 187 rows: SGLang keeps the last 16 rows")
    (fewer,) = explain(messages.MSG_TOKEN_MISMATCH.format(128, 113))
    assert fewer.reading == "128 pad tokens in the window, 113 rows: 15 missing, the Insufficient error follows"
    (split,) = explain("RuntimeError: " + messages.MSG_SPLIT_SIZES.format(294, [284]))
    assert split.reading == "the call returned 294 rows; its 1 item(s) need 284 ([284]): 10 too many"
    (discard,) = explain(messages.MSG_DISCARD.format("596aa1e7cb875eb7", 187, 120))
    assert discard.values == {"cache_key": "596aa1e7cb875eb7", "expected": 187, "cached": 120}
    (assertion,) = explain("RuntimeError: " + messages.MSG_ASYNC_ASSERT)
    assert assertion.message.key == "placeholder-count" and assertion.message.exception == "RuntimeError"
