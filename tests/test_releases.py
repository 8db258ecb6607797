"""The release table: every row's code path, how a replay picks a release, and what verdicts say about it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_viz import releases as releases_module
from kimi_viz import whatif
from kimi_viz.errors import ConfigError
from kimi_viz.manifest import read_manifest, write_manifest
from kimi_viz.message_catalogue.messages import MSG_FEATURE_TYPE, MSG_LENGTH
from kimi_viz.release_changes.fix_search import first_fixing_release
from kimi_viz.release_changes.rules import rule_differences
from kimi_viz.releases import FORWARD_RULES, NEWEST, RELEASES, REQUEST_SIDES, PathSource, choose_release, release_for
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split._replay import replay
from kimi_viz.split.verdict import build_verdict, format_verdict

TABLE = {
    "0.5.17": ("no-split", "0.5.17"),
    "0.5.18": ("pre-fix", "0.5.18"),
    "0.5.19": ("post-fix", "0.5.19"),
    "0.5.20": ("post-fix", "0.5.19"),
    "0.5.21": ("post-fix", "0.5.19"),
    "0.5.22": ("post-fix", "0.5.19"),
    "0.5.23": ("post-fix", "0.5.23"),
}
PIL_TYPE = MSG_FEATURE_TYPE.format("<class 'PIL.Image.Image'>")
# What fixes S1: the grid-index fix, as the release table names it.
S1_CHANGE = (
    'SGLang PR #35305 (Fix "wrong grids" crash in DP-sharded vision preprocessing; '
    "models/kimi_k3.py materialize_item_features)"
)
S1_FIXED = f"fixed in 0.5.19: {S1_CHANGE}"


FORWARD = {
    "0.5.17": "0.5.17",
    "0.5.18": "0.5.18",
    "0.5.19": "0.5.19",
    "0.5.20": "0.5.19",
    "0.5.21": "0.5.19",
    "0.5.22": "0.5.22",
    "0.5.23": "0.5.23",
}


def test_the_table_has_every_release_with_its_path_request_side_and_forward_pass():
    assert {v: (r.code_path, r.request_side.version) for v, r in RELEASES.items()} == TABLE
    assert {v: r.forward.version for v, r in RELEASES.items()} == FORWARD
    assert NEWEST == "0.5.23" and list(REQUEST_SIDES) == ["0.5.17", "0.5.18", "0.5.19", "0.5.23"]
    assert list(FORWARD_RULES) == ["0.5.17", "0.5.18", "0.5.19", "0.5.22", "0.5.23"]
    assert REQUEST_SIDES["0.5.19"].label == "0.5.19–0.5.22" and FORWARD_RULES["0.5.19"].releases == (
        "0.5.19",
        "0.5.20",
        "0.5.21",
    )
    # what changed where, as SGLang's mm_schedule.py shows it (docs/pipeline.md §10)
    assert [r.forward.dedupe_by_tokens for r in RELEASES.values()] == [False, False, True, True, True, True, True]
    assert [r.forward.count_from_offsets for r in RELEASES.values()] == [False] + [True] * 6
    assert [r.forward.precomputed_per_item for r in RELEASES.values()] == [False] * 5 + [True] * 2


def test_a_new_release_is_one_entry_in_the_table(tmp_path, monkeypatch):
    """Adding 0.5.24 to RELEASES alone makes it the newest, maps it to itself and keeps every derived table in step."""
    import importlib.util

    source = Path(releases_module.__file__).read_text(encoding="utf-8")
    row = 'Release("0.5.23", "post-fix", SIDE_0_5_23, FORWARD_0_5_23, SCHEDULER_0_5_23, _POST_FIX, SHIPPED_0_5_23)'
    entry = f"        {row},\n"
    assert source.count(entry) == 1
    added = source.replace(
        entry,
        entry + '        Release("0.5.24", "post-fix", SIDE_0_5_23, FORWARD_0_5_23, SCHEDULER_0_5_23, _POST_FIX),\n',
    )
    path = tmp_path / "releases_0_5_24.py"
    for relative in (
        "._records",
        ".errors",
        ".release_changes.shipped",
        ".scheduler_rules",
    ):  # the copy lives outside the package: its imports point back in
        added = added.replace(f"from {relative} import", f"from kimi_viz{relative} import")
    path.write_text(added, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("releases_0_5_24", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "releases_0_5_24", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    assert module.NEWEST == "0.5.24" and module.PATH_RELEASE["post-fix"] == "0.5.24"
    release, sentence = module.release_for("0.5.24")
    assert release.version == "0.5.24" and sentence == "SGLang 0.5.24: post-fix path"
    assert module.REQUEST_SIDES["0.5.23"].releases == ("0.5.23", "0.5.24")
    assert module.PATH_INTRODUCED["post-fix"] == ("0.5.19", S1_CHANGE)
    assert (
        module.RELEASES["0.5.24"].shipped == ()
        and rule_differences(module.RELEASES["0.5.23"], module.RELEASES["0.5.24"]) == ()
    )
    assert module.RELEASE_RANGE == "0.5.17–0.5.24" and module.REQUEST_SIDES["0.5.23"].label == "0.5.23–0.5.24"
    assert "newer than the newest release kimi-viz knows (0.5.24)" in module.release_for("0.5.25")[1]


@pytest.mark.parametrize("version", list(TABLE))
def test_each_release_maps_to_itself(version):
    release, sentence = release_for(version)
    assert release.version == version and sentence == f"SGLang {version}: {TABLE[version][0]} path"


@pytest.mark.parametrize(
    ("text", "base"),
    [("v0.5.18", "0.5.18"), ("0.5.23.post1", "0.5.23"), ("0.5.19+cu129", "0.5.19"), ("0.5.18rc1", "0.5.18")],
)
def test_suffixed_versions_are_taken_as_their_base_release_and_say_so(text, base):
    release, sentence = release_for(text)
    assert release.version == base
    assert sentence.startswith(f"SGLang {text} is taken as {base}") or text == f"v{base}"


@pytest.mark.parametrize("text", ["0.5.24", "0.6.0", "1.0.0"])
def test_a_future_release_replays_the_newest_known_path_and_says_so(text):
    release, sentence = release_for(text)
    assert release.version == "0.5.23"
    assert sentence == (
        f"SGLang {text} is newer than the newest release kimi-viz knows (0.5.23); replaying 0.5.23's post-fix path"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [("0.5.16", "has no Kimi-K3 model"), ("latest", "expected a release"), ("", "expected a release")],
)
def test_a_release_without_kimi_k3_or_garbage_is_a_one_line_error(text, words):
    with pytest.raises(ConfigError, match=words) as info:
        release_for(text)
    assert "\n" not in str(info.value)


def test_the_fix_search_names_the_first_later_release_that_looks_different_and_runs_clean():
    """A question that only sees the code path: 0.5.17's is first fixed where the path changes, 0.5.19; of the
    changes in between it sees (the two code-path changes), the one that alone runs it clean is named."""
    tried = []

    def clean_on(release):
        tried.append((release.version, release.code_path))
        return release.code_path == "post-fix"

    found = first_fixing_release(RELEASES["0.5.17"], clean_on, lambda release: release.code_path)
    assert (found.release, found.change, found.code_path, found.together) == ("0.5.19", S1_CHANGE, "post-fix", False)
    assert found.changes == tuple(c for c in RELEASES["0.5.19"].shipped if c.rules == ("code_path",))
    # 0.5.20-0.5.23 run the same path: not asked; then 0.5.17 with 0.5.18's path alone, with 0.5.19's alone.
    assert tried == [("0.5.18", "pre-fix"), ("0.5.19", "post-fix"), ("0.5.17", "pre-fix"), ("0.5.17", "post-fix")]
    assert first_fixing_release(RELEASES["0.5.23"], clean_on, lambda release: release.code_path) is None


def test_a_batchs_own_code_path_is_chosen_by_how_it_was_found_and_the_sentence_agrees():
    words = {
        PathSource.DETECTED: "detected from SGLang's source by the capture",
        PathSource.SCENARIO: "the scenario's code",
        PathSource.RECORDED: "recorded in the manifest",
    }
    for source, sentence in words.items():
        choice = choose_release(recorded_code_path="pre-fix", recorded_source=source)
        assert choice.chosen_by is source and sentence in choice.note
        assert choice.to_json()["chosen_by"] == source.value
    unsaid = choose_release(recorded_code_path="pre-fix", recorded_source=None)
    assert unsaid.chosen_by is PathSource.RECORDED and "recorded in the manifest" in unsaid.note


def test_choice_order_asked_then_recorded_then_detected_then_assumed():
    asked = choose_release(sglang_version="0.5.18", recorded_version="0.5.23")
    assert (asked.code_path, asked.chosen_by, asked.release.version) == ("pre-fix", "asked", "0.5.18")
    recorded = choose_release(
        recorded_version="0.5.18", recorded_code_path="post-fix", recorded_source=PathSource.DETECTED
    )
    assert (recorded.code_path, recorded.chosen_by) == ("pre-fix", "recorded")
    detected = choose_release(recorded_version=None, recorded_code_path="pre-fix", recorded_source=PathSource.DETECTED)
    assert (detected.code_path, detected.chosen_by, detected.release.version) == ("pre-fix", "detected", "0.5.18")
    # A development build may hold either side of the fix: the capture's source detection decides.
    dev = choose_release(
        recorded_version="0.5.19.dev3", recorded_code_path="pre-fix", recorded_source=PathSource.DETECTED
    )
    assert (dev.code_path, dev.chosen_by) == ("pre-fix", "detected")
    assumed = choose_release(recorded_code_path="post-fix", recorded_source=PathSource.ASSUMED)
    assert (assumed.code_path, assumed.chosen_by, assumed.release.version) == ("post-fix", "assumed", "0.5.23")
    assert "assuming the newest known release, 0.5.23" in assumed.note


def test_code_path_is_the_lower_level_switch_and_says_it_overrides():
    choice = choose_release(sglang_version="0.5.23", code_path="pre-fix")
    assert (choice.code_path, choice.chosen_by, choice.release.version) == ("pre-fix", PathSource.CODE_PATH, "0.5.23")
    assert "the pre-fix path is replayed as asked (--code-path)" in choice.note


@pytest.mark.parametrize("version", list(TABLE))
@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_s1_on_every_release(version, backend):
    """S1's batch (three images at TP 2) on each release: 0.5.17 cannot take deferred items, 0.5.18 fails on
    rank 1, every later release is clean."""
    batch = SCENARIOS[f"s1-{backend}"].build()
    answer = whatif(batch, sglang_version=version, tp_size=2)
    trace = answer.call_trace
    verdict = answer.verdict.to_json(answer.fixes)
    assert verdict["release"]["sglang_version"] == version
    assert verdict["release"]["code_path"] == TABLE[version][0]
    outcomes = [(r.outcome, r.error and r.error.message) for r in trace.ranks]
    if version == "0.5.17":
        if backend == "cpu":  # PIL images reach the tensor check on both ranks
            assert outcomes == [("error", PIL_TYPE), ("error", PIL_TYPE)]
        else:  # raw CHW tensors pass it, then cannot be concatenated on rank 1
            assert outcomes[0] == ("ok", None)
            assert outcomes[1] == (
                "error",
                "multimodal feature tensors must have matching trailing shapes: "
                "expected torch.Size([102, 102]), got torch.Size([3, 5, 20])",
            )
        assert verdict["divergence"]["scenario_class"] == "skew"
        assert verdict["release"]["fixed_in"]["release"] == "0.5.19"  # 0.5.18's path still fails (S1)
    elif version == "0.5.18":
        message = MSG_LENGTH if backend == "cpu" else "Kimi-K3 deferred GPU preprocessing produced wrong grids"
        assert outcomes == [("ok", None), ("error", message)]
        assert verdict["divergence"]["scenario_class"] == "S1"
        assert verdict["release"]["fixed_in"] == {
            "release": "0.5.19",
            "change": S1_CHANGE,
            "code_path": "post-fix",
            "summary": RELEASES["0.5.19"].summary,
            "changes": [
                {
                    "rules": ["code_path"],
                    "prs": [35305],
                    "title": 'Fix "wrong grids" crash in DP-sharded vision preprocessing',
                    "where": "models/kimi_k3.py materialize_item_features",
                    "note": "#36265 backports the same fix to release/v0.5.18 only: no release the kit knows ships it",
                    "release": "0.5.19",
                }
            ],
            "together": False,
        }
    else:
        assert outcomes == [("ok", None), ("ok", None)]
        assert verdict["release"]["fixed_in"] is None


def test_a_healthy_batch_on_0_5_17_is_fixed_by_0_5_18():
    answer = whatif(SCENARIOS["healthy-tp1"].build(), sglang_version="0.5.17", tp_size=1)
    assert answer.error.message == PIL_TYPE
    assert answer.verdict.to_json(answer.fixes)["release"]["fixed_in"]["release"] == "0.5.18"


def test_a_failure_no_release_fixes_says_so_and_a_bare_replay_says_nothing_of_fixes():
    answer = whatif(SCENARIOS["s2-cpu"].build(), sglang_version="0.5.23", tp_size=1)
    assert answer.fix is not None and answer.fixed_in is None
    words = format_verdict(answer.verdict, fixes=answer.fixes)
    assert "not fixed by upgrading: SGLang 0.5.23 runs this same code path" in words
    bare = format_verdict(build_verdict(replay(SCENARIOS["s2-cpu"].build(), sglang_version="0.5.23", mode="shapes")))
    assert "fixed" not in bare  # no fix search ran: neither a fixing release nor "not fixed" is claimed


def _kimi_viz(*args, cwd=None):
    done = subprocess.run([sys.executable, "-m", "kimi_viz", *args], capture_output=True, text=True, cwd=cwd)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def manifest_from_0_5_18(tmp_path_factory):
    """S1's batch as a capture on SGLang 0.5.18 records it: the version, and the path detected from the source."""
    batch = SCENARIOS["s1-cpu"].build()
    batch.sglang_version = "0.5.18"
    batch.code_path, batch.code_path_source = "pre-fix", PathSource.DETECTED
    batch.created_by = "kimi-viz capture"
    return write_manifest(batch, tmp_path_factory.mktemp("m") / "capture-0.5.18")


def test_triage_of_a_0_5_18_capture_names_the_release_and_the_fix(manifest_from_0_5_18):
    code, out, err = _kimi_viz("triage", str(manifest_from_0_5_18))
    assert (code, err) == (1, "")
    assert (
        "replayed: SGLang 0.5.18 (pre-fix path) — SGLang 0.5.18: pre-fix path (the version the capture recorded)"
    ) in out
    assert S1_FIXED in out
    code, out, _ = _kimi_viz("triage", str(manifest_from_0_5_18), "--json")
    release = json.loads(out)["release"]
    assert (release["sglang_version"], release["chosen_by"], release["fixed_in"]["release"]) == (
        "0.5.18",
        "recorded",
        "0.5.19",
    )


def test_the_same_capture_replays_clean_as_0_5_23(manifest_from_0_5_18):
    code, out, err = _kimi_viz("triage", str(manifest_from_0_5_18), "--sglang-version", "0.5.23", "--json")
    assert (code, err) == (0, "")
    verdict = json.loads(out)
    assert verdict["outcome"] == "ok"
    assert (verdict["release"]["sglang_version"], verdict["release"]["chosen_by"]) == ("0.5.23", "asked")


def test_the_release_is_in_the_report(manifest_from_0_5_18, tmp_path):
    code, _, _ = _kimi_viz("triage", str(manifest_from_0_5_18), "--out", str(tmp_path / "out"))
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert code == 1
    assert "SGLang 0.5.18 (pre-fix path)" in html and S1_FIXED.replace('"', "&quot;") in html


def test_manifests_keep_how_the_code_path_was_found(manifest_from_0_5_18):
    batch = read_manifest(manifest_from_0_5_18)
    assert (batch.sglang_version, batch.code_path, batch.code_path_source) == ("0.5.18", "pre-fix", PathSource.DETECTED)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--sglang-version", "0.5.16"], "SGLang 0.5.16 has no Kimi-K3 model"),
        (["--sglang-version", "nightly"], "sglang_version: expected a release such as 0.5.23, got 'nightly'"),
    ],
)
def test_bad_release_on_the_command_line(manifest_from_0_5_18, args, words):
    code, out, err = _kimi_viz("triage", str(manifest_from_0_5_18), *args)
    assert code == 2 and out == "" and words in err and err.count("\n") == 1


def test_scenario_run_takes_a_release():
    code, out, _ = _kimi_viz("scenario", "run", "s1-cpu", "--sglang-version", "0.5.21", "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["release"]["sglang_version"] == "0.5.21" and verdict["outcome"] == "ok"
