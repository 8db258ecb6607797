"""The forward pass under load: how a batch of requests becomes one get_image_feature call, and the splice back.

Exact counts and SGLang's (and torch's) exact messages; the real mm_schedule.py of 0.5.18 and 0.5.23
is compared with this model in the parity lane (tests/parity/test_forward_parity.py).
"""

from __future__ import annotations

import pytest

from kimi_viz import sweep, whatif
from kimi_viz.data import sample_path
from kimi_viz.errors import WhatIfError
from kimi_viz.forward.cache import EmbeddingCache
from kimi_viz.forward.embedding import adjust_embedding_length, replay_forward
from kimi_viz.forward.rows import Rows, Source
from kimi_viz.forward.trace import ForwardItem, ForwardRequest
from kimi_viz.forward.workload_replay import replay_workload
from kimi_viz.message_catalogue.messages import (
    MSG_DISCARD,
    MSG_GPU_WRONG_GRIDS,
    MSG_INSUFFICIENT,
    MSG_RAISE_CHUNK,
    MSG_SPLIT_SIZES,
    MSG_TOKEN_MISMATCH,
)
from kimi_viz.releases import RELEASES
from kimi_viz.request.images import probe_image
from kimi_viz.request.settings import ServerSettings
from kimi_viz.request.workload import CacheSeed, Request, Workload, parse_workload, together
from kimi_viz.scheduler.event_loop import schedule
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Req, Window


def image(name: str):
    return probe_image(sample_path(name))


# --- rows -----------------------------------------------------------------------------------------------
def test_rows_follow_torch_slicing_split_and_negative_tails():
    a, b = Source(0, 0, "r1", "a"), Source(1, 0, "r2", "b")
    rows = Rows.cat([Rows.of(a, 4), Rows.of(b, 5)])
    assert len(rows) == 9 and rows.sources() == [a, b]
    assert [(s.rid, r) for s, r in rows.slice(3, 6)] == [("r1", 3), ("r2", 0), ("r2", 1)]
    assert len(rows.slice(7, 100)) == 2  # clamped, as Python slices are
    assert [len(p) for p in rows.split([4, 5])] == [4, 5]
    assert [(s.rid, r) for s, r in rows.tail(2)] == [("r2", 3), ("r2", 4)]
    assert rows.tail(0) == rows  # emb[-0:] keeps every row


# --- the scheduler --------------------------------------------------------------------------------------
def plan_passes(lengths, arrivals, *, chunked_prefill_size, max_prefill_tokens=16384):
    """The passes of text-only requests ``r0``, ``r1``, ... of ``lengths`` (distinct ids: no prefix is shared)
    on 0.5.23."""
    settings = LoadSettings(chunked_prefill_size=chunked_prefill_size, max_prefill_tokens=max_prefill_tokens)
    starts = [sum(lengths[:k]) for k in range(len(lengths))]
    reqs = [
        Req(f"r{k}", tuple(range(s, s + n)), arrival=a) for k, (s, n, a) in enumerate(zip(starts, lengths, arrivals))
    ]
    return schedule(reqs, settings, RELEASES["0.5.23"]).passes


def test_chunked_prefill_follows_sglangs_worked_example():
    """A (3000 tokens) and B (20000) waiting, chunks of 8192: B is cut, then goes alone, then shares."""
    plans = plan_passes([3000, 20000, 500], [0, 0, 0], chunked_prefill_size=8192)
    assert [[(w.rid, w.prefix_len, w.extend_input_len) for w in p.windows] for p in plans] == [
        [("r0", 0, 3000), ("r1", 0, 5192)],
        [("r1", 5192, 8192)],
        [("r1", 13384, 6616), ("r2", 0, 500)],
    ]


def test_without_chunking_the_first_request_is_always_admitted_and_the_budget_stops_the_rest():
    plans = plan_passes([20000, 100, 100], [0, 0, 0], chunked_prefill_size=-1, max_prefill_tokens=16384)
    assert [tuple(w.rid for w in p.windows) for p in plans] == [("r0",), ("r1", "r2")]
    assert plan_passes([10, 10], [0, 1], chunked_prefill_size=8192)[1].windows == (Window("r1", 0, 10),)


# --- one call for every request in the batch -------------------------------------------------------------
def test_two_single_image_requests_prefilled_together_make_one_two_image_call():
    """0.5.18 at TP 2: each request is clean alone; together they fail like S1, on the rank holding image 1."""
    pair = together([sample_path("rocket.jpg"), sample_path("astronaut.png")])
    for one in pair.requests:
        alone = replay_workload(Workload((one,)), sglang_version="0.5.18", tp_size=2)
        assert alone.status == "clean" and len(alone.passes[0].calls[0].items) == 1
    result = replay_workload(pair, sglang_version="0.5.18", tp_size=2)
    call = result.failing_call()
    assert [(i.source.rid, i.source.label) for i in call.items] == [("r1", "rocket.jpg"), ("r2", "astronaut.png")]
    assert [(r.rank, r.image_indices, r.outcome) for r in call.trace.ranks] == [(0, [0], "ok"), (1, [1], "error")]
    assert str(result.error) == f"ValueError: {MSG_GPU_WRONG_GRIDS}" and result.passes[0].stage == "call"
    for version in ("0.5.19", "0.5.23"):
        assert replay_workload(pair, sglang_version=version, tp_size=2).status == "clean"


def test_a_repeated_image_is_encoded_once_and_its_rows_land_on_both_requests():
    pair = together([sample_path("chelsea.png"), sample_path("chelsea.png")])
    result = replay_workload(pair, sglang_version="0.5.23", tp_size=1)
    trace = result.passes[0]
    assert len(trace.calls) == 1 and len(trace.calls[0].items) == 1
    assert [(p.request, p.run.source.rid, p.run.count) for p in trace.placements] == [(0, "r1", 187), (1, "r1", 187)]
    assert trace.misplaced() == []  # the same rows are the right rows for the same image


# --- a straddling image ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("cache_mb", "calls"), [(100, [1, 0, 0]), (0, [1, 1, 0])])
def test_an_image_cut_by_chunked_prefill_is_encoded_whole_and_sliced_per_chunk(cache_mb, calls):
    """chelsea's 187 pads at positions 108..294 cut at 150: rows 0..41 land in pass 1, 42..186 in pass 2."""
    workload = Workload((Request("r1", (image("chelsea.png"),), before=100),))
    result = replay_workload(
        workload, sglang_version="0.5.23", tp_size=1, load=LoadSettings(chunked_prefill_size=150, cache_mb=cache_mb)
    )
    assert result.prompts[0].pad_runs == [(108, 294)] and result.status == "clean"
    assert [len(t.calls) for t in result.passes] == calls  # a second pass re-encodes only with no cache
    placed = [[(p.start, p.run.start, p.run.count) for p in t.placements] for t in result.passes]
    assert placed == [[(108, 0, 42)], [(150, 42, 145)], []]


# --- the embedding cache -------------------------------------------------------------------------------------
def test_a_stale_cache_entry_is_used_as_is_before_0_5_19_and_discarded_after():
    workload = Workload((Request("r1", (image("chelsea.png"),)),), cache=(CacheSeed(image("chelsea.png"), 120),))
    key = image("chelsea.png").digest[:16]
    for version in ("0.5.17", "0.5.18"):
        result = replay_workload(workload, sglang_version=version, tp_size=1)
        assert str(result.error) == "RuntimeError: " + MSG_INSUFFICIENT.format(187, 120)
        assert result.passes[0].warnings == [MSG_TOKEN_MISMATCH.format(187, 120)] and not result.passes[0].calls
    for version in ("0.5.19", "0.5.23"):
        result = replay_workload(workload, sglang_version=version, tp_size=1)
        assert result.status == "clean" and result.passes[0].warnings == [MSG_DISCARD.format(key, 187, 120)]
        assert len(result.passes[0].calls) == 1


def test_the_cache_is_an_lru_bounded_in_bytes_and_0_5_23_refuses_an_oversized_entry():
    a, b = Source(0, 0, "r1", "a"), Source(1, 0, "r2", "b")
    for rejects, left in ((False, []), (True, ["a"])):
        cache = EmbeddingCache(100, row_bytes=4, rejects_oversized=rejects)
        assert cache.set("a", Rows.of(a, 8)) and cache.used_bytes == 32
        assert not cache.set("b", Rows.of(b, 40))  # 160 bytes, over the whole cache
        assert cache.keys() == left
    cache = EmbeddingCache(0)
    assert not cache.set("a", Rows.of(a, 1)) and len(cache) == 0  # SGLANG_VLM_CACHE_SIZE_MB=0 stores nothing


# --- S10 followed to the splice ------------------------------------------------------------------------------
def test_a_stale_eager_feature_fails_at_the_split_back_on_the_per_image_path():
    """microaneurysms' 16 pads get astronaut_tiny's 4 rows (1 token): torch's own split error, with both counts."""
    stale = Request(
        "r1", (image("text.png"), image("microaneurysms.png")), stale=((1, image("astronaut_tiny_20x5.png")),)
    )
    for version in ("0.5.17", "0.5.18", "0.5.23"):
        result = replay_workload(Workload((stale,)), sglang_version=version, tp_size=1)
        assert str(result.error) == "RuntimeError: " + MSG_SPLIT_SIZES.format(113, [112, 16])
        assert result.passes[0].stage == "split-back"


def test_a_stale_eager_feature_on_the_precomputed_path_warns_then_raises_with_both_counts():
    stale = Request(
        "r1", (image("text.png"), image("microaneurysms.png")), stale=((1, image("astronaut_tiny_20x5.png")),)
    )
    epd = ServerSettings(serving="epd-encoder", epd_backend="gpu")
    result = replay_workload(Workload((stale,)), sglang_version="0.5.23", tp_size=1, settings=epd)
    trace = result.passes[0]
    assert trace.path == "precomputed" and not trace.calls
    assert trace.warnings == [MSG_TOKEN_MISMATCH.format(128, 113)]
    assert str(result.error) == "RuntimeError: " + MSG_INSUFFICIENT.format(128, 113)


def test_more_precomputed_rows_than_pads_are_cut_silently_to_the_first_ones():
    stale = Request("r1", (image("text.png"), image("microaneurysms.png")), stale=((1, image("chelsea.png")),))
    epd = ServerSettings(serving="epd-encoder", epd_backend="gpu")
    result = replay_workload(Workload((stale,)), sglang_version="0.5.23", tp_size=1, settings=epd)
    trace = result.passes[0]
    assert result.status == "silent-mismatch" and trace.warnings == [] and trace.error is None
    ((request, item, placement),) = trace.misplaced()
    assert item.source.label == "microaneurysms.png" and placement.run.source.label == "chelsea.png, stale"
    assert (placement.run.start, placement.run.count) == (0, 16)  # the first 16 of chelsea's 187 rows


def test_more_rows_than_tokens_keep_the_last_ones_with_both_warnings():
    """_adjust_embedding_length: the last rows are kept (emb[-n:]), every row when n is 0; fewer rows raise."""
    a, b = Source(0, 0, "r1", "a"), Source(1, 0, "r2", "b")
    rows = Rows.cat([Rows.of(a, 3), Rows.of(b, 3)])
    kept, warnings, error = adjust_embedding_length(rows, 4)
    assert [(s.rid, r) for s, r in kept] == [("r1", 1), ("r1", 2), ("r2", 0), ("r2", 1), ("r2", 2)][1:]
    assert warnings == [MSG_TOKEN_MISMATCH.format(4, 6), MSG_RAISE_CHUNK] and error is None
    assert adjust_embedding_length(rows, 4, -1)[1] == [MSG_TOKEN_MISMATCH.format(4, 6)]  # chunked prefill off
    assert len(adjust_embedding_length(rows, 0)[0]) == 6  # emb[-0:] keeps all
    kept, warnings, error = adjust_embedding_length(rows, 9)
    assert str(error) == "RuntimeError: " + MSG_INSUFFICIENT.format(9, 6) and len(warnings) == 1


def test_a_pass_whose_windows_touch_no_image_calls_nothing():
    src = Source(0, 0, "r1", "a")
    request = ForwardRequest(
        index=0, rid="r1", items=(ForwardItem(src, "h", (10, 13), None),), prefix=0, extend=10, length=20
    )
    calls = []
    trace = replay_forward(
        [request],
        release=RELEASES["0.5.23"],
        tp_size=1,
        cache=EmbeddingCache.of_megabytes(100),
        encode=lambda items: calls.append(items) or (Rows(), None),
    )
    assert trace.outcome == "ok" and calls == [] and trace.placements == []


# --- the workload file ----------------------------------------------------------------------------------------
def test_a_workload_file_is_read_strictly():
    workload = parse_workload(
        {"requests": [{"id": "a", "images": ["chelsea.png"], "text": {"before": 5}, "arrival": 1}]}
    )
    assert workload.requests[0].before == 5 and workload.requests[0].arrival == 1
    for bad, words in (
        ({"requests": []}, "holds no request"),
        ({"requests": [{"images": []}]}, "no images; give at least one, or continue an earlier request"),
        ({"requests": [{"images": ["chelsea.png"], "continues": "r9"}]}, "continues 'r9', which is not an earlier"),
        ({"requests": [{"images": ["chelsea.png"], "output": 0}]}, "expected 1 to 262144 generated tokens"),
        ({"requests": [{"images": ["chelsea.png"], "colour": 1}]}, "unknown key 'colour'"),
        (
            {"requests": [{"id": "x", "images": ["chelsea.png"]}, {"id": "x", "images": ["chelsea.png"]}]},
            "two requests",
        ),
        ({"requests": [{"images": ["chelsea.png"], "text": {"before": -1}}]}, "token count"),
    ):
        with pytest.raises(WhatIfError, match=words):
            parse_workload(bad)


def test_a_conversation_asked_through_whatif_and_sweep_builds_every_turn_whole():
    horse, coffee = probe_image(sample_path("horse.png")), probe_image(sample_path("coffee.png"))
    workload = Workload(
        (Request("t1", (horse,), output=8), Request("t2", (coffee,), continues="t1"), Request("t3", (), continues="t2"))
    )
    alone = replay_workload(workload, sglang_version="0.5.23", tp_size=2)
    answer = whatif(workload, sglang_version="0.5.23", tp_size=2, find_fix=False)
    assert answer.status is alone.status
    assert answer.replay.plans == alone.plans
    swept = sweep(workload, tp_sizes=(2,))
    assert all(cell.answer is not None for cell in swept.cells)
