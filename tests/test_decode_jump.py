"""Jumping over quiet decode steps gives the answer stepping one by one gives: every pass, match, save, retraction,
NO_TOKEN walk and the pools after every step, on every load scenario and on seeded random workloads with bounded
pools at pages 1, 16 and 64 (``kimi_viz/scheduler/decode_run.py``)."""

from __future__ import annotations

import random

import pytest
from parity.scheduler.random_workloads import memory_workload, random_workload
from parity.scheduler.recency_workloads import recency_workloads
from parity.scheduler.workload import Workload, kit_view

from kimi_viz import LOAD_SCENARIOS
from kimi_viz.forward.workload_replay import replay_workload
from kimi_viz.releases import RELEASES
from kimi_viz.scheduler.decode_run import DecodeRun, advance_rows, pages_opened, quiet_decode_steps
from kimi_viz.scheduler.event_loop import schedule
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.memory import NewTokenRatio
from kimi_viz.scheduler.req import Req

RELEASE_PAIR = ("0.5.18", "0.5.23")


def _both(reqs: list[Req], load: LoadSettings, release: str, max_steps: int | None = None):
    one_by_one = schedule(reqs, load, RELEASES[release], max_steps, stepwise=True)
    jumped = schedule(reqs, load, RELEASES[release], max_steps)
    return one_by_one, jumped


def _same(one_by_one, jumped) -> None:
    assert kit_view(jumped) == kit_view(one_by_one)
    assert jumped.steps == one_by_one.steps and jumped.memory_after_each_step() == list(one_by_one.memory)
    assert [p.formed for p in jumped.passes] == [p.formed for p in one_by_one.passes]


@pytest.mark.parametrize("name", sorted(LOAD_SCENARIOS))
def test_every_load_scenario_jumps_to_the_same_answer(name):
    scenario = LOAD_SCENARIOS[name]
    result = replay_workload(
        scenario.build(),
        sglang_version=scenario.sglang_version,
        tp_size=scenario.tp_size,
        settings=scenario.settings,
        load=scenario.load,
    )
    for release in RELEASE_PAIR:
        one_by_one, jumped = _both(list(result.reqs), scenario.load, release)
        _same(one_by_one, jumped)
        assert not one_by_one.decode_runs


def _random_workloads() -> list[Workload]:
    paged = [memory_workload(seed, page) for page in (16, 64) for seed in range(25)]
    return [memory_workload(seed) for seed in range(40)] + paged + [random_workload(seed) for seed in range(30)]


def test_random_workloads_at_pages_1_16_and_64_jump_to_the_same_answer():
    jumped_steps = 0
    for workload in [*_random_workloads(), *recency_workloads()]:
        for release in RELEASE_PAIR:
            one_by_one, jumped = _both(list(workload.requests), workload.settings, release, workload.max_steps)
            _same(one_by_one, jumped)
            jumped_steps += sum(run.steps for run in jumped.decode_runs)
    assert jumped_steps > 10_000  # the workloads do jump: long stretches are taken in one go


def test_a_long_answer_is_a_few_events_not_its_decode_steps():
    req = Req("r", tuple(range(300)), max_new_tokens=40_960, generated_ids=range(600_000, 640_960))
    load = LoadSettings(max_total_tokens=50_000)
    one_by_one, jumped = _both([req], load, "0.5.23")
    _same(one_by_one, jumped)
    assert jumped.steps == one_by_one.steps == 40_961  # the prefill, 40,959 decode steps, the last result processed
    assert len(jumped.memory) < 600 and len(one_by_one.memory) == 40_961
    # extra_buffer saves on lcm(64, 256): the insert at the finish stops at the last save point, 300 + 40959 -> 41216
    assert [s.depth for s in jumped.saves] == [256, 41_216]


def test_the_quiet_steps_stop_where_the_pool_would_evict_or_a_row_finish():
    rows = [Req("a", (1,), max_new_tokens=100), Req("b", (2,), max_new_tokens=100)]
    rows[0].kv_committed_len, rows[1].kv_committed_len = 16, 20
    # page 16, 64 free tokens, a page per row kept free: step 16 opens a's second page (32 left), step 17 b's (16)
    assert pages_opened([16, 20], 16, 16) == 32 and pages_opened([16, 20], 17, 16) == 48
    assert quiet_decode_steps(rows, 16, 64, 1, 1000) == 17
    assert quiet_decode_steps(rows, 16, 31, 1, 1000) == 0
    assert quiet_decode_steps(rows, 1, 64, 1, 1000) == 32  # page 1: two tokens a step, two kept free
    # nothing evictable: the over-estimate evicts nothing, a step is quiet while its own pages fit — 64 free tokens
    # are steps 0 (a), 12 (b), 16 (a) and 28 (b): four pages, the fifth (step 32, a) does not fit
    assert pages_opened([16, 20], 33, 16) == 80
    assert quiet_decode_steps(rows, 16, 64, 0, 1000) == 32
    assert quiet_decode_steps(rows, 16, 15, 0, 1000) == 0
    assert quiet_decode_steps(rows, 16, 16, 0, 1000) == 12
    rows[1].output_len = 90  # the 10th step's result brings b's 100th token, its last: 9 steps are quiet
    assert quiet_decode_steps(rows, 16, float("inf"), 1, 1000) == 9
    assert quiet_decode_steps(rows, 16, float("inf"), 1, 5) == 5


def test_advancing_rows_takes_pages_outputs_and_the_last_save_point():
    row = Req("a", (1,), max_new_tokens=1000)
    row.kv_committed_len, row.output_len = 250, 10
    # overlap: the batch in flight carries 250 + 40 = 290; the processed ones reached 289, past the save at 256
    tracked = advance_rows([row], 40, 16, 256, processed_last=1)
    assert (row.kv_committed_len, row.output_len, row.owned, row.mamba_last_track_seqlen) == (290, 50, 48, 256)
    assert tracked == {}
    row.kv_committed_len = 500
    assert advance_rows([row], 12, 16, 256, processed_last=1) == {id(row): 512}  # the save in flight
    assert row.mamba_last_track_seqlen == 256  # not processed yet


def test_a_decode_run_writes_out_the_pools_after_each_step():
    run = DecodeRun(7, 3, (15, 16), 16, 100.0, 5, 2.0, 0.1, 0.098, 0.001)
    steps = list(run.memory_steps())
    assert [(m.step, m.kv_available, m.evictable, m.mamba_available) for m in steps] == [
        (7, 84.0, 5, 2.0),  # 16 starts a page at the first step
        (8, 68.0, 5, 2.0),  # 15 + 1 = 16 starts one at the second
        (9, 68.0, 5, 2.0),
    ]
    assert [m.ratio for m in steps] == [0.1 - 0.001, 0.098, 0.098]


def test_a_jumped_run_decays_the_ratio_to_the_very_floats_of_one_step_at_a_time():
    rng = random.Random(7)
    for _ in range(3000):
        init = rng.choice([0.7, 1.0, 0.35])
        low = init * rng.choice([0.1, 0.14, 1.0])
        decay = (init - low) / rng.choice([600, 7, 1])
        current = rng.choice([init, low, rng.uniform(0.0, 1.0), rng.uniform(low, init)])
        steps = rng.choice([0, 1, 2, rng.randint(0, 700), rng.randint(0, 1_000_000)])
        jumped, stepped = NewTokenRatio(init, low, decay, current), NewTokenRatio(init, low, decay, current)
        jumped.decay_steps(steps)
        for _ in range(min(steps, 3000)):  # the minimum holds it within 2,000 steps here
            stepped.decay_step()
        assert jumped.current == stepped.current, (init, low, decay, current, steps)
