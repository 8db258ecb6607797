"""Memory pressure: the pools as options, the budgets, eviction, retraction, and what the answer says of them.

The passes, retractions and pools below are what SGLang's own allocators, tree and ``retract_decode`` did with
the same workloads (``tests/data/scheduler_runs/``, the real-SGLang lane's memory workloads).
"""

from __future__ import annotations

import json

import pytest
from parity.scheduler.examples import example
from parity.scheduler.workload import kit_schedule

from kimi_viz import LOAD_SCENARIOS, run_load_scenario, whatif
from kimi_viz.cli import main
from kimi_viz.errors import SettingNotInReleaseError, WhatIfError
from kimi_viz.plots import draw_forward_pass
from kimi_viz.releases import RELEASES
from kimi_viz.scheduler.event_loop import schedule
from kimi_viz.scheduler.flags import FLAG_OF, LoadSettings, alternatives
from kimi_viz.scheduler.memory import NewTokenRatio, resolve_memory
from kimi_viz.scheduler.radix_cache import RadixCache, lost_on
from kimi_viz.scheduler.req import Req
from kimi_viz.scheduler.server_config import resolve_server

S20 = "s20-retraction-meets-requests"


def test_the_memory_options_have_sglangs_names_defaults_and_say_where_to_read_a_servers_values():
    assert LoadSettings().max_total_tokens is None and LoadSettings().schedule_conservativeness == 1.0
    assert "max_total_num_tokens=" in FLAG_OF["max_total_tokens"].help
    assert "max_mamba_cache_size:" in FLAG_OF["max_mamba_cache_size"].help
    assert FLAG_OF["schedule_conservativeness"].parse("2") == 2.0
    with pytest.raises(WhatIfError, match="--schedule-conservativeness -1: expected a number > 0"):
        FLAG_OF["schedule_conservativeness"].parse("-1")
    with pytest.raises(WhatIfError, match="--max-total-tokens 0: expected a number >= 1"):
        FLAG_OF["max_total_tokens"].parse("0")
    assert LoadSettings(max_total_tokens=1555).flags().startswith("--chunked-prefill-size 8192 --max-total-tokens 1555")


def test_the_request_rows_and_the_ratio_as_each_release_derives_them():
    memory = resolve_memory(4000, None, None, 1.0, strategy="extra_buffer", overlap=True, at_least_one_row=False)
    assert memory.request_rows == 2000  # the 2048 estimate, at most half the pool
    assert (memory.ratio_init, memory.ratio_min) == (0.7, 0.7 * 0.14) and memory.ratio_decay == (0.7 - 0.098) / 600
    # the mamba pool over a running request's slots: 3, plus 2 ping-pong with extra_buffer and overlap
    assert (
        resolve_memory(None, None, 50, 1.0, strategy="extra_buffer", overlap=True, at_least_one_row=False).request_rows
        == 10
    )
    assert (
        resolve_memory(None, None, 50, 1.0, strategy="no_buffer", overlap=False, at_least_one_row=False).request_rows
        == 16
    )
    assert resolve_memory(None, 0, None, 1.0, strategy=None, overlap=True, at_least_one_row=True).request_rows == 1
    assert resolve_memory(None, 0, None, 1.0, strategy=None, overlap=True, at_least_one_row=False).request_rows == 0
    # kept: 20 outputs + 20 steps against 600 budgeted
    assert NewTokenRatio.after_retract([20], [600]) == 40 / 601
    unbounded = resolve_server(LoadSettings(), RELEASES["0.5.23"]).memory
    assert not unbounded.bounded and unbounded.describe().startswith("memory unbounded")


def test_memory_at_page_64_pools_whole_pages_and_a_request_the_pool_cannot_hold_is_refused():
    blackwell = resolve_server(LoadSettings(gpu="blackwell", max_total_tokens=5000), RELEASES["0.5.23"])
    assert (blackwell.page_size, blackwell.memory.kv_pool) == (64, 4992)  # 78 whole pages of 64
    assert blackwell.memory.describe() == "KV pool 4992 tokens, 2048 request rows, mamba state pool unbounded"
    req = Req("big", tuple(range(900)), max_new_tokens=200)
    with pytest.raises(WhatIfError, match="request big: its 900 prompt tokens and 200 outputs need 1102 KV tokens"):
        schedule([req], LoadSettings(max_total_tokens=1000), RELEASES["0.5.23"])
    with pytest.raises(WhatIfError) as refused:
        schedule([req], LoadSettings(gpu="blackwell", max_total_tokens=1100), RELEASES["0.5.23"])
    assert str(refused.value) == (
        "request big: its 900 prompt tokens and 200 outputs need 1228 KV tokens, but the KV pool holds 1088 in whole "
        "pages of 64 (--max-total-tokens 1100; the trtllm_mla attention backend sets the page to 64); give a larger "
        "pool (SGLang would cut its outputs short)"
    )


def test_a_server_with_no_request_row_names_the_pool_that_left_none():
    with pytest.raises(SettingNotInReleaseError) as kv:
        resolve_server(LoadSettings(max_total_tokens=1), RELEASES["0.5.23"])
    assert str(kv.value) == (
        "SGLang 0.5.23 cannot start Kimi-K3 with these flags: --max-total-tokens 1 is a KV pool of 0 request rows (at "
        "most half of its 1 token); give --max-total-tokens 2 or more"
    )
    with pytest.raises(SettingNotInReleaseError, match="its 10 tokens, 0 tokens in whole pages of 64.*128 or more"):
        resolve_server(LoadSettings(gpu="blackwell", max_total_tokens=10), RELEASES["0.5.18"])
    with pytest.raises(SettingNotInReleaseError, match="too small .* max_mamba_cache_size=3, mamba_ratio=5"):
        resolve_server(LoadSettings(max_mamba_cache_size=3), RELEASES["0.5.23"])
    one = resolve_server(LoadSettings(max_running_requests=1), RELEASES["0.5.23"]).memory
    assert one.describe() == "KV pool unbounded, 1 request row, mamba state pool unbounded"
    huge = resolve_server(LoadSettings(max_mamba_cache_size=10**9), RELEASES["0.5.23"]).memory
    assert huge.describe() == "KV pool unbounded, 4096 request rows, mamba state pool 1000000000 slots"


@pytest.mark.parametrize(("release", "step"), [("0.5.18", 607), ("0.5.23", 606)])
def test_a_decode_step_that_does_not_fit_retracts_the_row_with_the_fewest_outputs(release, step):
    planned = kit_schedule(example("three long decodes in a 1555-token KV pool"), release)
    (retraction,) = planned.retractions
    assert (retraction.step, retraction.rid, retraction.outputs, retraction.aborted) == (460, "r2", 421, False)
    # r3 is refused (NO_TOKEN) until r1 finishes; then r3 and r2 (from its saved state at 192) share a pass
    assert planned.no_token == (383, 461, step)
    last = planned.passes[-1]
    assert (last.step, [(w.rid, w.prefix_len) for w in last.windows]) == (step, [("r3", 0), ("r2", 192)])
    assert last.formed.pressure.retracted == ((460, "r2"),)
    # the pools after every step: never more than the pool, never negative
    assert all(0 <= m.kv_available <= 1555 for m in planned.memory)


def test_the_states_pool_evicts_the_trees_saved_states_and_a_later_turn_finds_none_of_its_own():
    planned = kit_schedule(example("a chat's states evicted from 12 state slots"), "0.5.23")
    assert planned.server.memory.request_rows == 2  # 12 slots over 5 per request (extra_buffer, overlap)
    assert sum(m.evicted_states for m in planned.memory) == 16 and all(m.mamba_available >= 0 for m in planned.memory)
    turn2 = next(w for p in planned.passes for w in p.windows if w.rid == "t2")
    assert turn2.prefix_len == 0  # with ample slots it starts from turn 1's state at 256


def test_s20_memory_puts_two_requests_in_one_call_that_never_meet_with_ample_memory():
    scenario = LOAD_SCENARIOS[S20]
    answer = run_load_scenario(S20)
    replay = answer.replay
    assert answer.status.value == "error-reproduced" and list(answer.failing_ranks) == [1]
    assert [(i.source.rid, i.source.label) for i in replay.failing_call().items] == [
        ("r3", "rocket.jpg"),
        ("r2", "horse.png"),
    ]
    ample = replay.with_ample_memory()
    assert [[w.rid for w in p.windows] for p in ample.passes] == [["r1"], ["r2"], ["r3"]]
    assert (
        "Memory pressure (KV pool 1555 tokens, 777 request rows, mamba state pool unbounded): r2 was retracted at "
        "step 460 (the KV pool ran short while decoding; its 421 outputs are prefilled again); with ample memory r2, "
        "r3 never share a pass; memory pressure put them together in pass 3" in answer.why
    )
    assert answer.flags is not None and ("--max-total-tokens 3110", "clean") in [
        (c.flag, c.status.value) for c in answer.flags.changes
    ]
    assert answer.fixed_in is not None and answer.fixed_in.release == "0.5.19"
    assert (
        whatif(scenario.build(), sglang_version="0.5.18", tp_size=2, load=LoadSettings(cache_mb=0)).status.value
        == "clean"
    )
    # the figure and the stepper say it
    trace = replay.passes[-1]
    assert trace.memory.startswith("r2 retracted at step 460; the tree evicted")
    ax = draw_forward_pass(trace)
    assert "memory since the previous pass: r2 retracted at step 460" in ax.get_title(loc="left")
    assert "r2 prompt (242 tokens, retracted at step 460: prefilled again)" in [t.get_text() for t in ax.texts]
    admission = trace.steps[1]
    data = admission.variables.to_json()
    assert data["stop"] == "no_token" and data["memory"]["retracted"] == [{"step": 460, "rid": "r2"}]
    assert "The walk stopped on NO_TOKEN" in admission.note and "Memory since the previous pass: r2 retracted" in (
        admission.note
    )


def test_a_second_turn_fails_only_when_memory_evicted_its_prefix():
    """S20's chat: with ample memory turn 2 starts past horse.png; with 900 KV tokens the tree evicted turn 1's
    prefix (the steps and tokens SGLang's own tree evicts, tests/parity), so horse.png meets rocket.jpg."""
    name = "s20-evicted-turn-meets-request"
    answer = run_load_scenario(name)
    replay = answer.replay
    assert answer.status.value == "error-reproduced" and LOAD_SCENARIOS[name].scenario_class.value == "S20"
    assert [(i.source.rid, i.source.label) for i in replay.failing_call().items] == [
        ("t2", "horse.png"),
        ("r2", "rocket.jpg"),
    ]
    assert [(m.step, m.evicted_tokens, m.evicted_states) for m in replay.schedule.evictions][:2] == [
        (231, 64, 1),
        (295, 192, 1),
    ]
    ample = replay.with_ample_memory()
    third = ample.passes[2]
    assert [(w.rid, w.prefix_len) for w in third.windows] == [("t2", 256), ("r2", 0)]
    assert (
        "Memory pressure (KV pool 900 tokens, 450 request rows, mamba state pool unbounded): t2's cached prefix was "
        "evicted (tokens 192..255 at step 231, tokens 0..191 at step 295): it starts at 0 where ample memory leaves "
        "256; horse.png went back into pass 3's call beside r2's rocket.jpg; NO_TOKEN held prefill back at 1 step "
        "(200) up to pass 3." in answer.why
    )
    # the failing pass's figure and stepper say whose prefix the evictions since the previous pass took
    trace = replay.passes[2]
    assert trace.memory.startswith("the tree evicted 768 KV tokens and 4 saved states (t2's cached prefix among them)")
    assert "(t2's cached prefix among them)" in draw_forward_pass(trace).get_title(loc="left")
    assert trace.steps[1].variables.to_json()["memory"]["prefix_evicted"] == ["t2"]
    # the plain tree beside never evicts: no cut-back story is told for an evicted prefix
    assert "cuts a hit back" not in answer.why and replay.prefix_matches()[2].plain is None
    assert answer.flags is not None and ("--max-total-tokens 1800", "clean") in [
        (c.flag, c.status.value) for c in answer.flags.changes
    ]


def test_the_tree_logs_what_each_eviction_took_and_a_request_recognises_its_own_path():
    cache = RadixCache(page_size=1)
    first, other = tuple(range(100, 140)), tuple(range(500, 520))
    cache.insert(first, state=True)
    cache.insert(other, state=False)
    freed = cache.evict(tokens=50)
    assert (freed.tokens, freed.states) == (60, 1)  # least recently used first: first's node, then other's
    assert [(p.kind, p.start, p.end) for p in cache.lost] == [("kv", 0, 40), ("kv", 0, 20)]
    turn2 = (*first, 7, 8, 9)
    assert [(p.start, p.end) for p in lost_on(turn2, cache.lost)] == [(0, 40)]
    assert lost_on(tuple(range(100, 120)), cache.lost) == []  # shorter than the node: not the same path


def test_an_unbounded_answer_says_so_and_the_json_carries_the_pools(capsys):
    assert main(["scenario", "run", S20, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["server"]["memory"]["kv_pool"] == 1555 and data["retractions"][0]["request"] == "r2"
    assert data["no_token_steps"] == [383, 461, 607] and data["evictions"]
    answer = whatif(LOAD_SCENARIOS[S20].build(), sglang_version="0.5.23", tp_size=1)
    assert "memory: memory unbounded (no --max-total-tokens, --max-running-requests or --max-mamba-cache-size)" in (
        answer.replay.notes
    )


def test_the_flag_search_tries_a_larger_pool_only_where_one_is_set():
    tried = [label for label, _ in alternatives(LoadSettings(max_total_tokens=1555, max_running_requests=4))]
    assert "--max-total-tokens 3110" in tried and "--max-running-requests 8" in tried
    assert "--schedule-conservativeness 2" in tried
    plain = [label for label, _ in alternatives(LoadSettings())]
    assert not any("max-" in label or "conservativeness" in label for label in plain)


def test_a_page_64_pool_takes_whole_pages_at_the_prefill_and_on_each_page_boundary():
    req = Req("r", tuple(range(100)), max_new_tokens=40)
    planned = schedule([req], LoadSettings(gpu="blackwell", max_total_tokens=1000), RELEASES["0.5.23"], stepwise=True)
    assert (planned.server.page_size, planned.server.memory.kv_pool) == (64, 960)  # 15 whole pages
    free = {m.step: m.kv_available for m in planned.memory}
    # the 100-token prefill takes two pages (its second partial); the insert cut to the save at 64 moves one into
    # the tree, which counts it, so the free KV stays 960 - 128; the decode that starts position 128 (step 29: the
    # prefill at 0, the decodes from step 1 at length 100) takes a third page
    assert free[0] == free[28] == 832 and free[29] == 768
    assert [(s.step, s.depth) for s in planned.saves] == [(1, 64)]


def test_the_waiting_prefixes_are_refreshed_every_32nd_call_that_finds_a_waiting_queue(monkeypatch):
    from parity.scheduler.recency_workloads import recency_workload

    from kimi_viz.scheduler import event_loop

    workload = recency_workload(64, 36, 34, 5, False)
    refreshed = kit_schedule(workload, "0.5.23")
    starts = {w.rid: (p.step, w.prefix_len) for p in refreshed.passes for w in p.windows if w.rid in ("w1", "w2")}
    # the 32nd call touched w1's and w2's prefixes: the pool then evicts the long prompt's older states, and both
    # next turns start from their earlier turns' finish states (50 prompt tokens and 4 outputs)
    assert starts == {"w1": (48, 54), "w2": (48, 54)}
    monkeypatch.setattr(event_loop.Scheduler, "_touch_waiting_prefixes", lambda self: None)
    unrefreshed = kit_schedule(workload, "0.5.23")
    # unrefreshed, the pool evicts b's finish state (its oldest) and w2 starts from an earlier one, a pass later
    starts = {w.rid: (p.step, w.prefix_len) for p in unrefreshed.passes for w in p.windows if w.rid in ("w1", "w2")}
    assert starts == {"w1": (49, 54), "w2": (50, 43)}


@pytest.mark.parametrize(("waiting", "refreshes"), [(128, 0), (129, 1)])
def test_lpm_past_128_waiting_runs_as_fcfs_and_refreshes(waiting, refreshes):
    from kimi_viz.scheduler.event_loop import Scheduler

    release = RELEASES["0.5.23"]
    reqs = [Req(f"q{k}", tuple(range(10 * k, 10 * k + 10)), max_new_tokens=2) for k in range(waiting)]
    scheduler = Scheduler(resolve_server(LoadSettings(schedule_policy="lpm"), release), reqs, release)
    scheduler.step()
    assert scheduler.refreshes == refreshes  # the first call refreshes and counts only under a cache-agnostic policy
