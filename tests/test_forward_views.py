"""The forward pass drawn and stepped: prompts, windows, the call's items, rows on pad tokens, the first wrong one."""

from __future__ import annotations

import pytest
from matplotlib.patches import Rectangle
from test_plots import _text_boxes

from kimi_viz import run_load_scenario
from kimi_viz.plots.forward import draw_forward_pass
from kimi_viz.report.stepper import Stepper


def _texts(ax, prefix: str) -> list[str]:
    """Return the texts whose gid starts with ``prefix`` (a label's two lines read as one, as drawn outside)."""
    return [t.get_text().replace("\n", "  ") for t in ax.texts if (t.get_gid() or "").startswith(prefix)]


def _failing_pass(name: str):
    answer = run_load_scenario(name)
    result = answer.replay
    return result.passes[result.failing_pass if result.failing_pass is not None else 0]


def test_two_requests_in_one_call_show_both_prompts_windows_and_items():
    ax = draw_forward_pass(_failing_pass("s14-two-requests-one-call"))
    assert _texts(ax, "call-label") == ["item 0: r1:0 rocket.jpg  368 tokens", "item 1: r2:0 astronaut.png  361 tokens"]
    windows = {p.get_gid(): (p.get_x(), p.get_x() + p.get_width()) for p in ax.patches if isinstance(p, Rectangle)}
    assert windows == {"window-r1": (0, 441), "window-r2": (0, 434)}
    assert _texts(ax, "prompt-r1-label") == ["r1:0 rocket.jpg  368 pads 40..407"]
    (error,) = _texts(ax, "forward-error")
    assert error.startswith("rank 1 of 2: ValueError: Kimi-K3 deferred GPU preprocessing produced wrong grids")
    assert "raises ValueError (call)" in ax.get_title(loc="left")


def test_the_first_wrong_pad_token_is_marked_with_both_images():
    ax = draw_forward_pass(_failing_pass("s17-stale-eager-epd-more"))
    (line,) = [a for a in ax.lines if a.get_gid() == "first-wrong"]
    assert list(line.get_xdata()) == [169, 169]
    (label,) = _texts(ax, "first-wrong-label")
    assert label == ("first wrong pad 169: r1:1 chelsea.png, stale row 0, should be r1:1 microaneurysms.png row 0")
    assert _texts(ax, "landed-r1-label") == ["r1:0 text.png  rows 0..111", "r1:1 chelsea.png, stale  rows 0..15"]


def test_cache_hits_are_drawn_outside_the_call_with_their_word():
    answer = run_load_scenario("s15-straddling-image")
    ax = draw_forward_pass(answer.replay.passes[1])
    assert _texts(ax, "call-label") == []
    assert _texts(ax, "outside-label") == ["r1:0 chelsea.png  cache hit"]
    assert _texts(ax, "landed-r1-label") == ["r1:0 chelsea.png  rows 42..186"]


@pytest.mark.parametrize("name", ["s14-two-requests-one-call", "s15-straddling-image", "s17-stale-eager-epd-more"])
def test_forward_figures_text_is_readable_and_never_overlaps(name):
    answer = run_load_scenario(name)
    for trace in answer.replay.passes:
        ax = draw_forward_pass(trace)
        boxes = _text_boxes(ax.figure)
        assert [t.get_text() for t, _ in boxes if t.get_fontsize() < 8] == []
        overlapping = [
            (a.get_text(), b.get_text())
            for i, (a, box_a) in enumerate(boxes)
            for b, box_b in boxes[i + 1 :]
            if box_a.overlaps(box_b)
        ]
        assert overlapping == [], name


def test_the_stepper_walks_the_scheduler_the_split_and_stops_where_sglang_raises():
    stepper = Stepper.for_forward(_failing_pass("s14-two-requests-one-call"))
    titles = [stepper.title(k) for k in range(len(stepper))]
    assert titles[:5] == [
        "scheduler §3 The radix prefix each request starts from",
        "scheduler §2 Admit the pass: budgets, windows, the cut",
        "§10 The forward batch: every request's items and window",
        "§10.1 Precomputed rows, or the encoder",
        "§10.3 Look every overlapping item up in the embedding cache",
    ]
    assert titles[5].startswith("§6.1")
    assert stepper.start == len(stepper)  # opens where rank 1 raises: the gpu group's grid check
    assert stepper.heading.startswith("Rank 1 (2 requests prefilled together) of attention-TP 2, SGLang 0.5.18")
    html = stepper.to_html()
    assert html.count('class="kv-stepper kv-static"') == 1 and "Step 10 of 10" in html


def test_the_stepper_gains_the_splice_steps_after_the_call():
    stepper = Stepper.for_forward(_failing_pass("s17-stale-eager-split"))
    names = [stepper.counts(k)["name"] for k in range(len(stepper))]
    assert names[:5] == ["prefix_match", "admission", "forward_batch", "choose_path", "cache_lookup"]
    assert names[-1] == "split_back"
    last = stepper.counts(len(stepper) - 1)
    assert last["check"] == "FAIL" and last["expected_rows"] == 128 and last["produced_rows"] == 113
    assert last["error"].startswith("RuntimeError: split_with_sizes expects split_sizes to sum exactly to 113")
    fewer = Stepper.for_forward(_failing_pass("s17-stale-eager-epd-fewer"))
    assert [fewer.counts(k)["name"] for k in range(len(fewer))] == [
        "prefix_match",
        "admission",
        "forward_batch",
        "choose_path",
        "count_tokens",
        "adjust_length",
    ]
    assert fewer.heading.startswith("The forward pass (1 request) of attention-TP 1, SGLang 0.5.23 (post-fix path)")


def _chat_passes():
    """Return the passes of a two-turn chat on pages of 64: the second turn starts from a radix prefix of 448."""
    from kimi_viz.forward.workload_replay import replay_workload
    from kimi_viz.request.workload import parse_workload
    from kimi_viz.scheduler.flags import LoadSettings

    workload = parse_workload(
        {
            "requests": [
                {"id": "t1", "images": ["camera.png"], "output": 20, "system": 50},
                {"id": "t2", "continues": "t1", "images": ["coffee.png"]},
                {"id": "o1", "images": ["horse.png"], "system": 50},
            ]
        }
    )
    load = LoadSettings(page_size=64, chunked_prefill_size=1024)
    return replay_workload(workload, sglang_version="0.5.23", tp_size=2, load=load).passes


def test_the_radix_prefix_is_its_own_hatched_labelled_region_with_a_legend_entry():
    first, second = _chat_passes()
    (t2,) = second.batch
    assert (t2.matched, t2.window) == (448, (448, 907))
    ax = draw_forward_pass(second)
    (region,) = [c for c in ax.collections if c.get_gid() == "cached-t2"]
    (corners,) = region.get_paths()
    xs, ys = corners.vertices[:, 0], corners.vertices[:, 1]
    assert (xs.min(), xs.max()) == (0, 448)  # [0, matched), apart from the window [448, 907)
    assert region.get_hatch() == "xx" and all(p.get_hatch() != "xx" for p in ax.collections if p is not region)
    prompt = [c for c in ax.collections if (c.get_gid() or "").startswith("prompt-t2-fills")]
    assert (ys.min(), ys.max()) == (
        prompt[0].get_paths()[0].vertices[:, 1].min(),
        prompt[0].get_paths()[0].vertices[:, 1].max(),
    )
    assert _texts(ax, "cached-t2-label") == ["radix prefix (cached) [0, 448)"]
    legend = ax.get_legend()
    assert legend.get_gid() == "cached-legend"
    assert [t.get_text() for t in legend.get_texts()] == [
        "radix prefix (cached): reused from the tree, never prefilled",
        "saved linear-attention state (Kimi-K3's hybrid tree resumes only here)",
    ]
    assert legend.legend_handles[0].get_hatch() == "xx"
    # the saved states on t2's prompt: turn 1's at 448 (where t2 resumes) and t2's own prefill save
    (ticks,) = [c for c in ax.collections if c.get_gid() == "states-t2"]
    assert [seg[0][0] for seg in ticks.get_segments()] == list(t2.states) and t2.states[0] == 448
    boxes = _text_boxes(ax.figure)
    overlapping = [
        (a.get_text(), b.get_text())
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b) and "cached" in a.get_text() + b.get_text()
    ]
    assert overlapping == []
    # a pass whose requests start from nothing cached draws no such region or label: only the states they saved
    plain = draw_forward_pass(first)
    assert all(t.matched == 0 for t in first.batch)
    assert [t.get_text() for t in plain.get_legend().get_texts()] == [
        "saved linear-attention state (Kimi-K3's hybrid tree resumes only here)"
    ]
    assert [a for a in [*plain.collections, *plain.texts] if "cached" in (a.get_gid() or "")] == []


def test_the_stepper_opens_with_the_prefix_match_and_the_admission_from_the_scheduler():
    first, second = _chat_passes()
    stepper = Stepper.for_forward(second)
    assert [stepper.counts(k)["name"] for k in range(3)] == ["prefix_match", "admission", "forward_batch"]
    match, admission = second.steps[:2]
    (t2,) = match.variables.to_json()["requests"]
    assert t2 == {
        "rid": "t2",
        "continues_chunk": False,
        "padded_length": 907,
        "key": 896,  # capped at 906, floored to the page of 64
        "shared": 448,
        "matched": 448,
        "full": 448,  # turn 1 saved its state at 448 (its prompt floored to 64), also the page floor
        "plain": 448,
        "branching": None,
        "prefix": 448,
        "cached_images": [],
        "match_ends_inside": {"image": 0, "label": "camera.png", "offsets": [90, 450]},
    }
    assert t2["matched"] == second.batch[0].matched
    assert "The prefix ends inside camera.png (pads 90..450) at 448" in match.note
    assert "looked up in the embedding cache" in match.note
    data = admission.variables.to_json()
    assert data["start_budget"] == {"rem_input_tokens": 16384, "rem_chunk_tokens": 1024, "page_size": 64}
    assert [(o["rid"], o["window"], o["charged"], o["cut"]) for o in data["offers"]] == [("t2", [448, 907], 512, False)]
    assert data["cut"] is None and data["unoffered"] == []
    assert "charged 512 (page-ceiled)" in admission.note and "Nobody cut." in admission.note
    # the first pass: both requests admitted, nothing cached
    assert [r["matched"] for r in first.steps[0].variables.to_json()["requests"]] == [0, 0]
    assert [o["rid"] for o in first.steps[1].variables.to_json()["offers"]] == ["t1", "o1"]


def test_the_admission_step_shows_the_chunked_request_first_the_cut_and_who_was_never_offered():
    from kimi_viz.forward.workload_replay import replay_workload
    from kimi_viz.request.workload import parse_workload
    from kimi_viz.scheduler.flags import LoadSettings

    workload = parse_workload(
        {
            "requests": [
                {"id": "t1", "images": ["text.png"], "output": 3, "system": 40},
                {"id": "t2", "continues": "t1", "images": ["chelsea.png"]},
                {"id": "o2", "images": ["astronaut.png"], "arrival": 4},
                {"id": "o3", "images": ["rocket.jpg"], "arrival": 4},
            ]
        }
    )
    # t1 (225 tokens) finishes at step 2, processed at step 3 (the overlap schedule): t2 arrives at step 4,
    # queued before o2 and o3
    load = LoadSettings(page_size=16, chunked_prefill_size=256, max_prefill_tokens=300)
    passes = replay_workload(workload, sglang_version="0.5.23", tp_size=1, load=load).passes
    cut, continued = passes[1], passes[2]
    (t2,) = cut.steps[0].variables.to_json()["requests"]
    # t1's prefill saved its state at 192 (225 floored to 64) and its KV entered the tree only that far; a plain
    # tree would match 224 (t1's prompt and first outputs, floored to the page)
    assert (t2["full"], t2["plain"], t2["matched"], t2["branching"]) == (192, 224, 192, None)
    assert [i["label"] for i in t2["cached_images"]] == ["text.png"]
    assert "the tree shares 192, floored to the page: 192 (a plain radix tree would match 224" in cut.steps[0].note
    assert "Inside it, never reaching the call: text.png (pads 80..191)." in cut.steps[0].note
    data = cut.steps[1].variables.to_json()
    assert (data["cut"], data["unoffered"], data["offers"][0]["window"]) == ("t2", ["o2", "o3"], [192, 448])
    assert data["budget_state_before_candidate"] is True
    first, second = continued.steps[1].variables.to_json()["offers"]
    assert (first["rid"], first["chunked"], first["window"], first["charged"]) == ("t2", True, [448, 488], 48)
    assert (second["rid"], second["cut"], continued.steps[1].variables.to_json()["unoffered"]) == ("o2", True, ["o3"])
    assert continued.steps[0].variables.to_json()["requests"][0] == {
        "rid": "t2",
        "continues_chunk": True,
        "matched": 192,
        "prefix": 448,
        "cached_images": [{"image": 0, "label": "text.png", "offsets": [80, 191]}],
        "match_ends_inside": None,
    }
