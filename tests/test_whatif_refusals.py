"""Refused before work, told right: what whatif refuses is refused before the replay, in words that name the
input as typed, the release as substituted and an option that changes nothing as such."""

from __future__ import annotations

import json

from kimi_viz.cli import main


def test_an_out_folder_that_cannot_be_made_is_refused_with_nothing_printed(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["whatif", "rocket.jpg", "--sglang-version", "0.5.23", "--tp", "1", "--out", str(blocker / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "--out" in captured.err and "lies under the file" in captured.err
    assert main(["whatif", "rocket.jpg", "--sglang-version", "0.5.23", "--tp", "1", "--out", "/proc/kimi-viz-x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot create the folder" in captured.err


def test_an_unknown_top_level_workload_key_is_named(capsys, tmp_path):
    path = tmp_path / "workload.json"
    path.write_text(json.dumps({"requests": [{"images": ["rocket.jpg"]}], "reqeusts": []}))
    assert main(["whatif", "--requests", str(path), "--sglang-version", "0.5.23", "--tp", "1"]) == 2
    assert "unknown key(s) 'reqeusts'" in capsys.readouterr().err


def test_a_substituted_release_is_named_as_substituted(capsys):
    argv = ["whatif", "--together", "rocket.jpg", "--sglang-version", "0.5.24", "--tp", "1"]
    assert main([*argv, "--attention-backend", "cutlass_mla"]) == 2
    error = capsys.readouterr().err
    assert "SGLang 0.5.23 refuses these flags" in error
    assert "SGLang 0.5.24 is newer than the newest release kimi-viz knows (0.5.23); replaying 0.5.23" in error


def test_an_option_that_changes_nothing_without_its_partner_says_so(capsys):
    argv = ["whatif", "--together", "rocket.jpg", "--sglang-version", "0.5.23", "--tp", "1", "--json"]
    assert main([*argv, "--schedule-conservativeness", "2"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert (
        "--schedule-conservativeness 2 changes nothing here: it acts only with --max-total-tokens (unbounded here)"
        in notes
    )
