"""Conversations and shared prefixes: the workload's new keys, the radix prefix each request starts from, where
each image's rows come from, the flag search, ``whatif --chat`` over several turns, and the scheduler's options."""

from __future__ import annotations

import json

import pytest

from kimi_viz import whatif
from kimi_viz._whatif.chat import chat_turns, chat_workload
from kimi_viz.cli import main
from kimi_viz.errors import WhatIfError
from kimi_viz.forward.workload_replay import replay_workload, whole_requests
from kimi_viz.message_catalogue.messages import MSG_GPU_WRONG_GRIDS
from kimi_viz.request.chat import parse_request, text_tokens
from kimi_viz.request.checks import check_request
from kimi_viz.request.token_ids import scheduled_requests
from kimi_viz.request.workload import parse_workload
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.prefix import page_floor
from kimi_viz.scheduler.req import Image
from kimi_viz.split.cause import ErrorInfo
from kimi_viz.split.verdict import Status

# t1 ends two text tokens after camera.png's block and generates 2 tokens: 404 prompt tokens, its pad run 40..400.
# Kimi-K3's hybrid tree (extra_buffer, the default) saves t1's state at 384 (404 floored to 64) and takes its KV
# only that far, so the second turn starts at 384, inside camera.png's run, at every page size; a plain radix
# tree would match t1's prompt and answer (406 tokens, floored to the page)
CUT = {
    "requests": [
        {"id": "t1", "images": ["camera.png"], "text": {"after": 2}, "output": 2},
        {"id": "t2", "continues": "t1", "images": ["coffee.png"]},
    ]
}


def _replay(data, version="0.5.18", tp=2, **load):
    return replay_workload(parse_workload(data), sglang_version=version, tp_size=tp, load=LoadSettings(**load))


def test_a_later_turn_is_written_out_whole_and_repeats_the_earlier_ids():
    workload = parse_workload(CUT)
    whole = whole_requests(workload)
    assert [im.label for im in whole[1].images] == ["camera.png", "coffee.png"]
    assert whole[1].before == 32 and whole[1].gap_list() == [2 + 2 + 32] and whole[1].after == 32
    result = _replay(CUT)
    assert result.prompts[0].pad_runs == [(40, 400)] and result.prompts[0].length == 404
    assert result.prompts[1].pad_runs == [(40, 400), (446, 775)] and result.prompts[1].length == 809
    first, second = scheduled_requests(workload, result.prompts, [list(b.images) for b in result.built])
    assert second.parts[: len(first.parts) + 2] == (*first.parts, *first.generated_ids)
    assert second.after == "t1" and first.max_new_tokens == 2
    hashes = [p.image_hash for p in second.parts if isinstance(p, Image)]
    assert hashes == [int(im.digest[:16], 16) for im in whole[1].images]


@pytest.mark.parametrize("page", [1, 16, 64])
def test_the_second_turn_starts_at_the_state_the_first_turn_saved(page):
    result = _replay(CUT, page_size=page, chunked_prefill_size=8192)
    assert result.matched == [0, 384]
    assert [[(result.index(w.rid), w.prefix_len, w.extend_input_len) for w in p.windows] for p in result.plans] == [
        [(0, 0, 404)],
        [(1, 384, 809 - 384)],
    ]
    match = result.prefix_matches()[1]
    # the FULL match is the saved state (the insert was cut there); a plain tree would match the whole first turn
    assert (match.full, match.matched, match.plain) == (384, 384, page_floor(406, page))
    assert result.schedule.saves_of("t1") == [384]
    # t1 prefilled at step 0, decoded at step 1 (and once more at step 2: 0.5.18 does not skip a row finishing in
    # flight); its finish is processed at step 2 after step 2 was formed (the overlap schedule): t2 arrives at 3
    assert result.plans[1].step == 3


def test_without_the_overlap_schedule_at_page_1_every_insert_saves_a_state():
    # auto resolves to no_buffer: t1's prompt and its finish (prompt + answer - 1) both hold a state
    result = _replay(CUT, page_size=1, disable_overlap_schedule=True)
    assert result.schedule.server.strategy == "no_buffer" and result.matched == [0, 405]
    assert result.schedule.saves_of("t1") == [404, 405] and result.plans[1].step == 2
    # a page the extra buffer needs keeps extra_buffer without the overlap schedule
    paged = _replay(CUT, page_size=64, disable_overlap_schedule=True)
    assert paged.schedule.server.strategy == "extra_buffer" and paged.matched == [0, 384]


def test_where_each_image_came_from_radix_prefix_cache_or_call():
    supplies = _replay(CUT, page_size=16).image_supplies()
    assert [(s.rid, s.image, s.supplier) for s in supplies] == [
        ("t1", 0, "call"),
        ("t2", 0, "embedding cache"),  # the prefix ends at 384, inside the run: looked up, a hit
        ("t2", 1, "call"),
    ]
    # at page 16 a plain tree would stop at 400, the run's last token, and re-open it as well
    assert supplies[1].cut_by_prefix and not supplies[1].reopened_by_cut
    assert supplies[1].describe().endswith("so only tokens 384..400 are filled and its rows are sliced from row 344")
    supplies = _replay(CUT, page_size=1).image_supplies()
    assert supplies[1].supplier == "embedding cache" and supplies[1].reopened_by_cut
    assert "sliced from row 344; re-opened by the hybrid tree's cut back: the request shares 406 tokens" in (
        supplies[1].describe()
    )
    assert "but the deepest saved state is at 384" in supplies[1].describe()
    supplies = _replay(CUT, page_size=1, disable_overlap_schedule=True).image_supplies()
    assert supplies[1].supplier == "radix prefix" and supplies[1].by_pass == ()
    assert "never reaches the call" in supplies[1].describe() and not supplies[1].reopened_by_cut
    supplies = _replay(CUT, page_size=64, cache_mb=0).image_supplies()
    assert supplies[1].supplier == "call" and supplies[1].by_pass == ((1, "call"),)
    assert not supplies[1].reopened_by_cut  # at page 64 a plain tree would stop at 384 as well
    off = _replay(CUT, disable_radix_cache=True)
    assert off.matched == [0, 0] and off.image_supplies()[1].supplier == "embedding cache"


def test_a_prefix_ending_inside_a_resent_image_with_the_cache_off_fails_on_0_5_18_and_names_the_flags():
    workload = parse_workload(CUT)
    answer = whatif(workload, sglang_version="0.5.18", tp_size=2, load=LoadSettings(cache_mb=0))
    assert answer.error == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    assert answer.fixed_in is not None and answer.fixed_in.release == "0.5.19"
    call = answer.replay.failing_call()
    assert [(i.source.rid, i.source.image, i.tokens) for i in call.items] == [("t2", 0, 361), ("t2", 1, 330)]
    assert (
        "Kimi-K3's hybrid tree (UnifiedRadixCache (FULL + MAMBA), extra_buffer) cuts a hit back to a saved state: "
        "t2 matched 406 tokens; the deepest saved state is at 384, so it starts there, re-opening camera.png "
        "(pads 40..400)." in answer.why
    )
    assert answer.flags is not None
    # no_buffer (auto without the overlap schedule, at page 1) saves a state at every insert: t2 starts at 405
    assert [(c.flag, c.status) for c in answer.flags.changes] == [
        ("--disable-overlap-schedule", Status.CLEAN),
        ("SGLANG_VLM_CACHE_SIZE_MB=100", Status.CLEAN),
    ]
    # tried: the page sizes (still 384), the track interval; not extra_buffer (what auto resolves to already)
    # and not no_buffer (refused with the overlap schedule on)
    assert "--page-size 16" in answer.flags.tried and "--mamba-track-interval 64" in answer.flags.tried
    assert not any("--mamba-radix-cache-strategy" in flag for flag in answer.flags.tried)
    from kimi_viz.report.answer_views import answer_text

    text = answer_text(answer)
    assert (
        "which flag changes the outcome:\n  --disable-overlap-schedule: ✓ clean\n  SGLANG_VLM_CACHE_SIZE_MB=100" in text
    )
    assert (
        "note: the server runs UnifiedRadixCache (FULL + MAMBA), extra_buffer, overlap schedule; fa3 attention, "
        "page 1 (--mamba-radix-cache-strategy auto resolved to extra_buffer)" in text
    )
    paged = whatif(workload, sglang_version="0.5.18", tp_size=2, load=LoadSettings(page_size=64, cache_mb=0))
    assert paged.flags is not None and [c.flag for c in paged.flags.changes] == ["SGLANG_VLM_CACHE_SIZE_MB=100"]
    clean = whatif(
        workload, sglang_version="0.5.18", tp_size=2, load=LoadSettings(cache_mb=0, disable_overlap_schedule=True)
    )
    assert clean.status is Status.CLEAN


def test_requests_sharing_a_system_prompt_start_from_nothing_unless_a_state_lies_on_what_they_share():
    data = {
        "requests": [
            {"id": "a", "images": ["camera.png"], "system": 50, "text": {"before": 0}},
            {"id": "b", "images": ["astronaut.png"], "system": 50, "text": {"before": 0}, "arrival": 1},
            {"id": "c", "images": ["camera.png"], "system": 50, "text": {"before": 0}, "arrival": 2},
        ]
    }
    result = _replay(data, version="0.5.23")
    start, end = result.prompts[0].pad_runs[0]
    assert result.prompts[1].pad_runs[0][0] == start == 58  # the same 512×512 block: only the pad values differ
    assert [p.length for p in result.prompts] == [452, 452, 452]
    a, b, c = result.prefix_matches()
    # the overlap schedule: a's insert is processed while b's pass is formed, so b matches nothing
    assert (b.full, b.matched) == (0, 0)
    # c shares the system prompt, camera.png's pads and two tokens after them (420) with a, whose KV entered the tree
    # up to its saved state at 448: the split at 420 holds no state, so c starts from the root and saves its own
    # state at the branching point 384 instead of at 448
    assert (c.full, c.matched, c.branching, end) == (420, 0, 384, 418)
    assert result.matched == [0, 0, 0] and result.schedule.saves_of("c") == [384]
    # without the overlap schedule b sees a's insert: the system prompt and the block header match, never the pads
    # of another image's hash; no_buffer saved a's state only at its prompt's end, so b starts from 0 as well
    normal = _replay(data, version="0.5.23", disable_overlap_schedule=True)
    assert (normal.prefix_matches()[1].full, normal.matched) == (start, [0, 0, 0])


def test_a_workload_file_with_conversations_round_trips_and_refuses_what_cannot_be():
    workload = parse_workload(
        {
            "requests": [
                {"id": "t1", "images": ["camera.png"], "system": 20, "output": 5},
                {"id": "t2", "continues": "t1", "text": {"before": 4, "after": 0}},
                {"id": "u", "images": ["coffee.png"], "waits_for": "t1"},
            ]
        }
    )
    assert parse_workload(workload.to_json()) == workload
    assert workload.to_json()["requests"][1] == {
        "id": "t2",
        "images": [],
        "text": {"before": 4, "between": 8, "after": 0},
        "arrival": 0,
        "continues": "t1",
    }
    for bad, words in (
        ({"requests": [{"images": ["camera.png"], "id": "a", "continues": "a"}]}, "continues 'a', which is not an"),
        ({"requests": [{"images": ["camera.png"], "waits_for": 3}]}, "waits_for: expected the id of an earlier"),
        (
            {"requests": [{"id": "a", "images": ["camera.png"]}, {"continues": "a", "system": 4}]},
            "repeats its conversation's system prompt",
        ),
        ({"requests": [{"continues": None, "images": []}]}, "no images; give at least one"),
        ({"requests": [{"images": ["camera.png"], "output": 262145}]}, r"expected 1 to 262144 generated tokens \(the"),
    ):
        with pytest.raises(WhatIfError, match=words):
            parse_workload(bad)


def _conversation() -> dict:
    return {
        "model": "kimi-k3",
        "messages": [
            {"role": "system", "content": "You describe photographs."},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "camera.png"}},
                    {"type": "text", "text": "What is this?"},
                ],
            },
            {"role": "assistant", "content": "A man with a camera on a tripod in a field."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And this one?"},
                    {"type": "image_url", "image_url": {"url": "coffee.png"}},
                ],
            },
        ],
    }


def test_a_chat_body_with_an_earlier_turn_is_two_turns_the_second_continuing_the_first():
    request = parse_request(_conversation())
    turns = chat_turns(request)
    assert [(len(body.messages), len(body.images), output) for body, output in turns] == [
        (2, 1, text_tokens("A man with a camera on a tripod in a field.") + 1),
        (4, 2, 1),
    ]
    outcomes = [check_request(body, "0.5.23") for body, _ in turns]
    workload = chat_workload(outcomes, [output for _, output in turns])
    first, second = workload.requests
    assert (first.rid, second.rid, second.continues, first.output) == ("turn1", "turn2", "turn1", turns[0][1])
    whole = workload.whole(1)
    assert [im.label for im in whole.images] == [im.label for im in outcomes[1].request.images]
    before, gaps, after = outcomes[1].workload_text()
    assert (whole.before, whole.gap_list(), whole.after) == (before, gaps, after)


def test_whatif_chat_replays_the_conversation_beside_other_requests(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chat.json").write_text(json.dumps(_conversation()))
    (tmp_path / "others.json").write_text(json.dumps({"requests": [{"id": "u1", "images": ["horse.png"]}]}))
    argv = ["whatif", "--chat", "chat.json", "--requests", "others.json", "--sglang-version", "0.5.23", "--tp", "2"]
    assert main([*argv, "--page-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "after radix prefix; u1 [0, 253)" in out
    # turn1: 390 tokens, 13 generated; its prefill saved its state at 384 (390 floored to 64), where turn2 starts;
    # a plain radix tree would match 390 + 13 - 1 floored to the page
    assert (
        "turn2    after turn1  camera.png, coffee.png  7/8/4                          0             1       753" in out
    )
    assert "turn2 [384, 753) after radix prefix" in out and page_floor(390 + 13 - 1, 16) == 400
    assert "turn2 image 0 (camera.png, pad tokens 20..380): the radix prefix (tokens 0..383 cached)" in out
    assert "u1 image 0 (horse.png, pad tokens 40..219): call (pass 2: call)" in out
    assert "no single scheduler flag changes the outcome (tried: --disable-radix-cache" in out
    assert "turn2 matched 400 tokens; the deepest saved state is at 384, so it starts there." in out
    assert "note: the server runs UnifiedRadixCache (FULL + MAMBA), extra_buffer, overlap schedule" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    load = data["load"]
    assert [r["id"] for r in load["requests"]] == ["turn1", "turn2", "u1"]
    assert load["requests"][2]["waits_for"] == "turn1"
    assert [(i["request"], i["image"], i["supplier"]) for i in load["images"]] == [
        ("turn1", 0, "call"),
        ("turn2", 0, "radix prefix"),
        ("turn2", 1, "call"),
        ("u1", 0, "call"),
    ]
    assert data["flags"]["changes"] == [] and "--page-size 16" in data["flags"]["tried"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["chelsea.png", "--page-size", "16"], "--page-size describes a workload"),
        (["chelsea.png", "--disable-radix-cache"], "--disable-radix-cache describes a workload"),
        (["chelsea.png", "--together", "--schedule-policy", "lof"], "--schedule-policy 'lof': expected one of fcfs"),
        (["chelsea.png", "--together", "--page-size", "0"], "--page-size 0: expected a number >= 1"),
        (
            ["chelsea.png", "--together", "--page-size", "64", "--chunked-prefill-size", "1000"],
            "--chunked-prefill-size 1000: SGLang requires a multiple of --page-size 64",
        ),
        (["chelsea.png", "--together", "--max-prefill-tokens", "x"], "--max-prefill-tokens 'x': expected a whole"),
    ],
)
def test_the_scheduler_options_are_refused_in_one_line_where_they_do_not_fit(extra, message, capsys):
    assert main(["whatif", *extra, "--sglang-version", "0.5.23", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_scheduler_options_reach_the_scheduler(capsys):
    argv = ["whatif", "chelsea.png", "coffee.png", "--together", "--sglang-version", "0.5.23", "--tp", "1"]
    flags = ["--page-size", "16", "--chunked-prefill-size", "256", "--max-prefill-tokens", "300"]
    assert main([*argv, *flags, "--schedule-policy", "lpm", "--enable-mixed-chunk", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    load = data["load"]
    assert {k: load[k] for k in ("page_size", "chunked_prefill_size", "max_prefill_tokens")} == {
        "page_size": 16,
        "chunked_prefill_size": 256,
        "max_prefill_tokens": 300,
    }
    assert load["schedule_policy"] == "lpm" and load["enable_mixed_chunk"] is True
    windows = [[(w["request"], w["prefix_length"], w["extend_length"]) for w in p["windows"]] for p in data["passes"]]
    assert windows[0] == [(0, 0, 256)]  # chelsea's 263-token prompt cut at the chunk, floored to the page
    assert all(w[2] <= 256 for p in windows for w in p)


def test_minimize_keeps_a_conversation_whole_and_shrinks_only_the_other_requests(capsys):
    from kimi_viz import minimize

    load = LoadSettings(page_size=64, cache_mb=0)
    alone = minimize(parse_workload(CUT), sglang_version="0.5.18", tp_size=2, load=load)
    assert alone.units == () and alone.target == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    data = {"requests": [*CUT["requests"], {"id": "u1", "images": ["horse.png", "rocket.jpg"], "waits_for": "t1"}]}
    found = minimize(parse_workload(data), sglang_version="0.5.18", tp_size=2, load=load)
    assert [(u.request, u.label) for u in found.units] == [("u1", "horse.png"), ("u1", "rocket.jpg")]
    assert found.kept == () and found.target == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    from kimi_viz.report.answer_views import minimized_text

    assert "minimal set: none of the 2 images that can go: the conversation's turns" in minimized_text(found)


def test_minimize_of_a_conversation_alone_says_there_is_nothing_to_shrink(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conv.json").write_text(json.dumps(CUT))
    argv = ["whatif", "--requests", "conv.json", "--sglang-version", "0.5.18", "--tp", "2", "--minimize"]
    assert main([*argv, "--page-size", "64", "--mm-embedding-cache-size", "0"]) == 1
    out = capsys.readouterr().out
    assert "nothing to shrink: a conversation's turns are kept whole, and no other request carries images" in out


def test_a_workloads_report_steps_through_the_whole_pass_scheduler_first(tmp_path):
    from kimi_viz import run_load_scenario
    from kimi_viz._whatif.outputs import write_answer

    answer = run_load_scenario("s18-prefix-reopens-image")
    written = write_answer(answer, tmp_path / "out", reproduce="kimi-viz scenario run s18-prefix-reopens-image")
    page = written["report"].read_text(encoding="utf-8")
    first, second = (
        page.index("step 1: The radix prefix each request starts from"),
        page.index("step 2: Admit the pass"),
    )
    assert first < second and "step 3: " in page  # then the forward pass's own steps
    assert "where each image&#x27;s rows came from" in page or "where each image's rows came from" in page
