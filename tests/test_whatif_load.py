"""``kimi-viz whatif`` under load: workloads, the single-request load warning, sweeps, minimizing, load scenarios.

Exact messages and counts; the forward pass itself is checked against the real mm_schedule.py in the
parity lane (tests/parity/test_forward_parity.py).
"""

from __future__ import annotations

import json

import pytest

from kimi_viz import LOAD_SCENARIOS, answer_json, answer_text, minimize, run_load_scenario, sweep, sweep_pairs, whatif
from kimi_viz._whatif.hint import pair_hint
from kimi_viz._whatif.questions import RequestQuestion, WorkloadQuestion
from kimi_viz.cli import main
from kimi_viz.errors import WhatIfError
from kimi_viz.message_catalogue.messages import (
    MSG_GPU_WRONG_GRIDS,
    MSG_INSUFFICIENT,
    MSG_SPLIT_SIZES,
    MSG_TOKEN_MISMATCH,
)
from kimi_viz.releases import RELEASES
from kimi_viz.report.answer_views import minimized_text, pairs_table
from kimi_viz.request.images import as_request_image
from kimi_viz.request.settings import ServerSettings
from kimi_viz.request.workload import Request, Workload, together
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.split.cause import ErrorInfo


def test_a_request_clean_alone_names_the_smallest_pair_that_fails_together():
    answer = whatif(["rocket.jpg"], sglang_version="0.5.18", tp_size=2)
    assert answer.status.value == "clean"
    hint = answer.under_load
    assert hint is not None
    assert hint.partner.label.endswith("astronaut_tiny_20x5.png")  # the smallest sample image (20×5)
    assert hint.answer.error == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    assert hint.answer.failing_ranks == [1]
    assert hint.answer.fixed_in is not None and hint.answer.fixed_in.release == "0.5.19"
    text = answer_text(answer)
    assert "clean alone, but it fails once it shares a prefill batch" in text
    assert "--together --sglang-version 0.5.18 --tp 2" in text
    assert answer_json(answer)["under_load"]["failing_ranks"] == [1]


def test_no_load_warning_where_pairs_pass():
    assert whatif(["rocket.jpg"], sglang_version="0.5.19", tp_size=2).under_load is None
    assert whatif(["rocket.jpg"], sglang_version="0.5.18", tp_size=1).under_load is None
    assert whatif(["rocket.jpg"], sglang_version="0.5.18", tp_size=2, under_load=False).under_load is None


def test_pair_hint_keeps_a_multi_image_request_whole():
    images = [as_request_image("chelsea.png"), as_request_image("chelsea.png")]
    hint = pair_hint(RequestQuestion(tuple(images), ServerSettings()), RELEASES["0.5.18"], 2)
    assert hint is not None
    assert [len(r.images) for r in hint.answer.replay.workload.requests] == [2, 1]
    assert "--requests pair.json" in hint.command


def test_two_single_image_requests_fail_together_on_the_rank_without_the_prefix():
    answer = whatif(together(["rocket.jpg", "astronaut.png"]), sglang_version="0.5.18", tp_size=2)
    assert answer.error == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    assert answer.failing_ranks == [1]
    call = answer.replay.failing_call()
    assert [(i.source.rid, i.source.image) for i in call.items] == [("r1", 0), ("r2", 0)]
    assert "get_image_feature receives 2 images from 2 requests in one call" in answer.why
    assert "request r1's image 0 (rocket.jpg)" in answer.why and "request r2's image 0 (astronaut.png)" in answer.why
    assert answer.fixed_in is not None and answer.fixed_in.release == "0.5.19"
    assert whatif(together(["rocket.jpg", "astronaut.png"]), sglang_version="0.5.19", tp_size=2).status.value == (
        "clean"
    )
    # alone, each passes
    for name in ("rocket.jpg", "astronaut.png"):
        assert whatif([name], sglang_version="0.5.18", tp_size=2, under_load=False).status.value == "clean"


def test_cli_together_names_both_requests_and_exits_1(capsys):
    code = main(["whatif", "rocket.jpg", "astronaut.png", "--together", "--sglang-version", "0.5.18", "--tp", "2"])
    out = capsys.readouterr().out
    assert code == 1
    assert "2 requests (2 images, arriving together)" in out
    assert "item 0 = r1's image 0 (rocket.jpg), item 1 = r2's image 0 (astronaut.png)" in out
    assert "rank 1: images [1] -> ValueError: " + MSG_GPU_WRONG_GRIDS in out
    assert "fixed in 0.5.19" in out
    assert main(["whatif", "rocket.jpg", "astronaut.png", "--together", "--sglang-version", "0.5.19", "--tp", "2"]) == 0


def test_cli_workload_passes_mode_and_device_on(monkeypatch, capsys):
    import kimi_viz._whatif.questions as questions

    seen = {}
    real = questions.replay_workload

    def spy(workload, **kwargs):
        seen.update(mode=kwargs["mode"], device=kwargs["device"])
        return real(workload, **kwargs)

    monkeypatch.setattr(questions, "replay_workload", spy)
    argv = ["whatif", "chelsea.png", "--together", "--sglang-version", "0.5.23", "--tp", "1"]
    assert main([*argv, "--mode", "shapes", "--device", "cpu"]) == 0
    assert seen == {"mode": "shapes", "device": "cpu"}


def test_cli_json_gives_every_pass(capsys):
    argv = ["whatif", "chelsea.png", "--together", "--chunked-prefill-size", "150", "--sglang-version", "0.5.23"]
    assert main([*argv, "--tp", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["passes"]) == 2
    first, second = (p["replay"] for p in data["passes"])
    assert [c["items"][0]["label"] for c in first["calls"]] == ["chelsea.png"]
    assert second["calls"] == [] and second["lookups"][0]["outcome"] == "hit"


def test_requests_file_with_text_lengths_and_the_cache_off(tmp_path, capsys):
    document = {"requests": [{"id": "long", "images": ["chelsea.png"], "text": {"before": 100, "after": 20}}]}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(document))
    argv = ["whatif", "--requests", str(path), "--sglang-version", "0.5.23", "--tp", "1", "--json"]
    assert main([*argv, "--chunked-prefill-size", "150", "--mm-embedding-cache-size", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"][0]["pad_runs"] == [[108, 294]]
    # chunks [0, 150), [150, 300), [300, 314): chelsea is encoded whole twice (nothing cached); the last has no image
    assert [len(p["replay"]["calls"]) for p in data["passes"]] == [1, 1, 0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["a.png", "--chunked-prefill-size", "8"], "--chunked-prefill-size describes a workload"),
        (["a.png", "--together", "--requests", "w.json"], "--together with --requests: pick one"),
        (["--requests", "w.json", "a.png"], "--requests FILE with IMAGEs"),
        (["chelsea.png", "--together", "--platform", "tpu"], "--platform 'tpu': expected one of cuda, cpu"),
        (["chelsea.png", "--together", "--mm-embedding-cache-size", "-1"], "--mm-embedding-cache-size -1"),
    ],
)
def test_cli_refuses_load_options_that_do_not_fit(argv, message, capsys):
    assert main(["whatif", *argv, "--sglang-version", "0.5.18", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_sweep_rows_are_the_release_groups():
    swept = sweep(together(["rocket.jpg", "astronaut.png"]))
    assert [tuple(r.version for r in g) for g in swept.rows] == [
        ("0.5.17",),
        ("0.5.18",),
        ("0.5.19", "0.5.20", "0.5.21"),
        ("0.5.22",),
        ("0.5.23",),
    ]
    failing = [(c.releases[0].version, c.tp_size) for c in swept.cells if c.error is not None]
    assert failing == [("0.5.18", 2), ("0.5.18", 4), ("0.5.18", 8)]


def test_pairs_sweep_fails_exactly_the_pairs_whose_grids_differ_on_0_5_18():
    names = ["chelsea.png", "chelsea_exif_orientation6.jpg", "rocket.jpg", "coffee.png"]
    swept = sweep_pairs(names)
    groups = 5  # 0.5.17, 0.5.18, 0.5.19–0.5.21, 0.5.22, 0.5.23: the rules a workload without memory options can see
    assert len(swept.pairs) == 6 and all(len(s.cells) == groups * 4 for s in swept.sweeps)
    failing = {(swept.images[a].label, swept.images[b].label) for (a, b), _ in swept.failing()}
    # the EXIF-tagged copy is stored 451×300 like chelsea.png (the request side reads the stored size):
    # one grid, so that pair passes; the other five differ
    assert len(failing) == 5 and ("chelsea.png", "chelsea_exif_orientation6.jpg") not in failing
    where = {(c.releases[0].version, c.tp_size) for _, c in swept.failing()}
    assert where == {("0.5.18", 2), ("0.5.18", 4), ("0.5.18", 8)}
    # each pair's cells are the workload question's own answers: the same rows, statuses and errors as sweep()
    alone = sweep(together([names[0], names[2]]))
    pair = swept.sweeps[swept.pairs.index((0, 2))]
    assert pair.rows == alone.rows
    assert [(c.status, c.error, c.answer.why) for c in pair.cells] == [
        (c.status, c.error, c.answer.why) for c in alone.cells
    ]
    assert pairs_table(swept).caption == "5 of 6 pairs fail when the two requests are prefilled together"
    same = sweep_pairs(["chelsea.png", "chelsea.png"])
    assert same.failing() == []  # equal grids: the shard-local read finds the right grid


def test_minimize_keeps_requests_and_images_that_fail_together():
    workload = Workload(
        (
            Request("a", (as_request_image("chelsea.png"), as_request_image("chelsea.png"))),
            Request("b", (as_request_image("rocket.jpg"),)),
            Request("c", (as_request_image("chelsea.png"),)),
        )
    )
    found = minimize(workload, sglang_version="0.5.18", tp_size=2)
    assert found.target == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    minimal = found.answer.replay.workload
    assert minimal.images == 2 and len(minimal.requests) == 2
    assert whatif(minimal, sglang_version="0.5.18", tp_size=2).error == found.target
    question = WorkloadQuestion(workload, ServerSettings())
    for k in range(len(found.kept)):  # 1-minimal: dropping any kept image loses the failure
        rest = [u for j, u in enumerate(found.kept) if j != k]
        assert whatif(question.subset(rest), sglang_version="0.5.18", tp_size=2).error is None
    assert "minimal set: 2 of 4 images, in this order: rocket.jpg of b, chelsea.png of c" in minimized_text(found)


def test_subset_drops_empty_requests_and_moves_stale_entries_with_their_image():
    stale = as_request_image("astronaut_tiny_20x5.png")
    request = Request("r", (as_request_image("text.png"), as_request_image("microaneurysms.png")), stale=((1, stale),))
    workload = Workload((request, Request("s", (as_request_image("chelsea.png"),))))
    kept = WorkloadQuestion(workload, ServerSettings()).subset([1]).workload
    assert [r.rid for r in kept.requests] == ["r"]
    assert kept.requests[0].stale == ((0, stale),)


@pytest.mark.parametrize("name", list(LOAD_SCENARIOS))
def test_load_scenarios_give_what_they_state(name):
    scenario = LOAD_SCENARIOS[name]
    answer = run_load_scenario(name)
    expected = scenario.expected
    result = answer.replay
    assert answer.status.value == expected.status
    assert answer.error == expected.error
    assert tuple(answer.failing_ranks) == expected.failing_ranks
    assert tuple(w for p in result.passes for w in p.warnings) == expected.warnings
    assert (answer.fixed_in.release if answer.fixed_in else None) == expected.fixed_in
    assert sum(len(p.calls) for p in result.passes) == expected.calls
    assert len(result.passes) == expected.passes


def test_s10_followed_to_the_splice_names_both_counts():
    split = run_load_scenario("s17-stale-eager-split")
    assert split.error == ErrorInfo("RuntimeError", MSG_SPLIT_SIZES.format(113, [112, 16]))
    assert "microaneurysms.png) yields 1 rows for 16 pads" in split.why
    fewer = run_load_scenario("s17-stale-eager-epd-fewer")
    assert fewer.replay.passes[0].warnings == [MSG_TOKEN_MISMATCH.format(128, 113)]
    assert fewer.error == ErrorInfo("RuntimeError", MSG_INSUFFICIENT.format(128, 113))
    assert "brought 1 row for 16 pad tokens" in fewer.why
    more = run_load_scenario("s17-stale-eager-epd-more")
    assert more.status.value == "silent-mismatch" and more.exit_code == 3
    assert "receive rows 0..15 of chelsea.png" in more.why
    assert "kept the first 16 and cut rows 16..186" in more.why


def test_stale_cache_entry_is_discarded_with_sglangs_warning_from_0_5_19():
    answer = run_load_scenario("s16-stale-cache-entry", sglang_version="0.5.19")
    assert answer.status.value == "clean"
    (warning,) = answer.replay.passes[0].warnings
    assert warning.startswith("Discarding cached multimodal embedding due to a token-count mismatch: cache_key=")
    assert warning.endswith("expected_tokens=187, cached_tokens=120. Recomputing embedding.")
    assert "SGLang logs 1 warning on the way" in answer.why


def test_whatif_builds_a_later_turn_with_every_image_of_its_conversation():
    """A continuing turn re-sends its conversation's images: whatif builds and replays it written out whole."""
    from kimi_viz.forward.workload_replay import replay_workload

    scenario = LOAD_SCENARIOS["s18-prefix-reopens-image"]
    for version in ("0.5.18", "0.5.23"):
        answer = whatif(scenario.build(), sglang_version=version, tp_size=2, load=scenario.load)
        direct = replay_workload(scenario.build(), sglang_version=version, tp_size=2, load=scenario.load)
        assert [len(b.items) for b in answer.replay.built] == [1, 2]
        assert answer.replay.prompts == direct.prompts and answer.status.value == direct.status.value


def test_s18_the_saved_state_reopens_the_first_turns_image_at_every_page_with_the_cache_off():
    scenario = LOAD_SCENARIOS["s18-prefix-reopens-image"]
    failing = run_load_scenario(scenario.name).replay
    second = failing.passes[1]
    (turn2,) = second.batch
    assert (turn2.matched, turn2.prefix) == (448, 448) and failing.prompts[1].pad_runs[0] == (90, 450)
    match = failing.prefix_matches()[1]
    assert (match.full, match.plain) == (448, 448)  # at page 64 a plain tree stops at 448 as well
    called = [(i.source.rid, i.source.label) for i in second.calls[0].items]
    assert called == [("t2", "camera.png"), ("t2", "coffee.png")]
    # the hybrid tree cuts the hit back to turn 1's saved state at 448 whatever the page
    for load in (LoadSettings(page_size=16, cache_mb=0), LoadSettings(cache_mb=0)):
        answer = whatif(scenario.build(), sglang_version="0.5.18", tp_size=2, load=load)
        assert answer.status.value == "error-reproduced" and answer.replay.matched == [0, 448], load
    # the cache holding camera.png, or no_buffer (a state at every insert: turn 2 starts at 503) at page 1
    for load in (LoadSettings(page_size=64), LoadSettings(cache_mb=0, disable_overlap_schedule=True)):
        answer = whatif(scenario.build(), sglang_version="0.5.18", tp_size=2, load=load)
        assert answer.status.value == "clean", load
        assert [i.source.label for p in answer.replay.passes[1:] for c in p.calls for i in c.items] == ["coffee.png"]
    no_buffer = LoadSettings(cache_mb=0, disable_overlap_schedule=True)
    assert whatif(scenario.build(), sglang_version="0.5.18", tp_size=2, load=no_buffer).replay.matched == [0, 503]


def test_s19_only_the_hybrid_trees_cut_back_reopens_the_last_image_at_the_default_flags():
    scenario = LOAD_SCENARIOS["s19-saved-state-reopens-image"]
    assert (scenario.load.page_size, scenario.load.mamba_radix_cache_strategy, scenario.load.cache_mb) == (
        None,
        "auto",
        0,
    )
    answer = run_load_scenario(scenario.name)
    replay = answer.replay
    assert answer.error == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    assert replay.schedule.server.strategy == "extra_buffer" and replay.schedule.server.page_size == 1
    assert [p.length for p in replay.prompts] == [395, 667] and replay.prompts[0].pad_runs == [(60, 389)]
    match = replay.prefix_matches()[1]
    # turn 1 saved its state at 384 (395 floored to 64); a plain tree would match its prompt and answer, 407 tokens
    assert (match.plain, match.full, match.matched) == (407, 384, 384)
    supplies = {(s.rid, s.image): s for s in replay.image_supplies()}
    again, chelsea = supplies[("t2", 0)], supplies[("t2", 1)]
    assert again.reopened_by_cut and again.supplier == "call" and chelsea.supplier == "call"
    assert "re-opening coffee.png (pads 60..389)" in answer.why
    assert answer.flags is not None and [c.flag for c in answer.flags.changes] == [
        "--disable-overlap-schedule",
        "SGLANG_VLM_CACHE_SIZE_MB=100",
    ]
    assert answer.fixed_in is not None and answer.fixed_in.release == "0.5.19"


def test_a_later_turns_images_are_named_from_its_whole_conversation():
    from kimi_viz import workload_table

    load = LoadSettings(page_size=16, chunked_prefill_size=256, cache_mb=0)
    answer = whatif(LOAD_SCENARIOS["s18-prefix-reopens-image"].build(), sglang_version="0.5.18", tp_size=1, load=load)
    assert "Request t2's image 1 (coffee.png) straddles passes 3, 4" in answer.why
    assert "t2       after t1   camera.png, coffee.png  32/8/32" in str(workload_table(answer.replay))


def test_cli_scenario_run_a_load_scenario(capsys):
    assert main(["scenario", "run", "s14-two-requests-one-call"]) == 1
    out = capsys.readouterr().out
    assert "== s14-two-requests-one-call: S14" in out and "2 images from 2 requests" in out
    assert main(["scenario", "run", "s14-two-requests-one-call", "--sglang-version", "0.5.19"]) == 0
    assert main(["scenario", "run", "s15-straddling-image", "--manifest-out", "x"]) == 2
    assert "is a workload of several passes" in capsys.readouterr().err


def test_an_empty_workload_is_refused():
    with pytest.raises(WhatIfError, match="the workload holds no request"):
        Workload(())
    with pytest.raises(WhatIfError, match="pairs sweep needs 2 to 64 images"):
        sweep_pairs(["chelsea.png"])
    with pytest.raises(WhatIfError, match="0.5.99"):
        sweep_pairs(["chelsea.png", "rocket.jpg"], releases=("0.5.99",))
    assert LoadSettings().flags().startswith("--chunked-prefill-size 8192")


def test_the_sample_size_table_matches_every_sample_header():
    from kimi_viz.data import SAMPLE_IMAGE_SIZES, sample_images
    from kimi_viz.request.images import probe_image

    headers = {path.name: probe_image(path).size for path in sample_images()}
    assert headers == SAMPLE_IMAGE_SIZES


@pytest.mark.parametrize(
    "image, version, tp",
    [
        ("rocket.jpg", "0.5.18", 2),
        ("astronaut_tiny_20x5.png", "0.5.18", 2),  # its own image is no partner: the next smallest is tried
        ("microaneurysms.png", "0.5.18", 4),
        ("text.png", "0.5.17", 2),
    ],
)
def test_the_hint_opens_samples_lazily_and_answers_as_opening_them_all(image, version, tp, monkeypatch):
    import kimi_viz._whatif.hint as hint_module
    from kimi_viz.data import sample_images

    question = RequestQuestion((as_request_image(image),), ServerSettings())
    release = RELEASES[version]

    def seen(hint):
        return None if hint is None else (hint.partner, hint.tried, hint.command, hint.answer.error)

    everything = seen(pair_hint(question, release, tp, candidates=sample_images()))
    opened = []
    probe = hint_module.probe_image
    monkeypatch.setattr(hint_module, "probe_image", lambda src, **kw: opened.append(src) or probe(src, **kw))
    assert seen(pair_hint(question, release, tp)) == everything
    if everything is not None:
        assert len(opened) <= everything[1] + 1  # the partners tried (and the request's own image, skipped)
    stale = dict(hint_module.SAMPLE_IMAGE_SIZES, **{"astronaut_tiny_20x5.png": (5000, 5000), "text.png": (1, 1)})
    monkeypatch.setattr(hint_module, "SAMPLE_IMAGE_SIZES", stale)
    assert seen(pair_hint(question, release, tp)) == everything  # a stale table: every header is read instead
