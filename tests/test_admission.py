"""The kit's model of SGLang's prefill pass on worked examples taken from the real scheduler's runs.

Every expected pass, match and save below is what SGLang's own scheduler, hybrid tree and event loop did
with the same workload (``tests/parity/scheduler/try_it.py``, recorded in ``tests/data/scheduler_runs/``
and quoted in ``docs/hybrid-tree-notes.md`` §11); the
real-SGLang lane (``tests/parity/scheduler/test_scheduler_parity.py``) holds the model to many more.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from parity.scheduler.examples import example, examples
from parity.scheduler.workload import kit_schedule, kit_view, view_lines

from kimi_viz.releases import RELEASES as TABLE
from kimi_viz.scheduler.policy import AddReqResult, Budget, PrefillAdder, policy_order
from kimi_viz.scheduler.prefix import PlainTree, PrefixMatch, pad_values, padded_ids, prefix_match
from kimi_viz.scheduler.radix_cache import RadixCache
from kimi_viz.scheduler.req import Image, Req

RELEASES = ("0.5.18", "0.5.23")
WIDE, ONE = TABLE["0.5.23"].scheduler, TABLE["0.5.18"].scheduler
DATA = Path(__file__).parent / "data" / "scheduler_runs"  # try_it.py's output on each release's own scheduler


def _req(rid: str, length: int, prefix: int) -> Req:
    """Return a request of ``length`` distinct tokens that starts from ``prefix`` cached ones."""
    req = Req(rid, tuple(range(length)))
    req.origin_input_ids = tuple(range(length))
    req.prefix_len = prefix
    return req


def _matched(tree: PlainTree, ids) -> int:
    return prefix_match(tree, ids).matched


def _run_lines(release: str) -> list[str]:
    """The kit's model of ``release`` on every example, in ``try_it.py``'s format."""
    out = [f"# SGLang {release}: real prefill passes with the hybrid tree (rid[prefix_len+extend_input_len])"]
    for title, workload in examples():
        out += view_lines(title, workload, kit_view(kit_schedule(workload, release)))
    return out


def _recorded(release: str) -> list[str]:
    return (DATA / f"{release}.txt").read_text().splitlines()


@pytest.mark.parametrize("release", RELEASES)
def test_every_example_gives_sglangs_own_passes_matches_and_saves(release):
    kit, real = _run_lines(release), _recorded(release)
    assert len(kit) == len(real)
    for mine, theirs in zip(kit, real):
        assert mine == theirs


def _run(title: str, release: str) -> list[str]:
    lines = [
        line.strip() for line in view_lines(title, example(title), kit_view(kit_schedule(example(title), release)))
    ]
    return [line for line in lines if line.startswith(("step", "matches", "saves"))]


@pytest.mark.parametrize("release", RELEASES)
def test_a_second_chat_turn_is_cut_back_to_the_deepest_saved_state(release):
    # 450-token prompt, 30 outputs: the plain tree would give 479; extra_buffer saved only at 448.
    overlap = _run("two-turn chat, page 1, extra_buffer, overlap", release)
    assert overlap == [
        "step   0: t1[0+450]",
        "step  31: t2[448+44]",
        "matches: t2@31: full 448 -> 448",
        "saves: t1@1:448",
    ]
    no_buffer = _run("two-turn chat, page 1, no_buffer", release)
    assert no_buffer[1:3] == ["step  30: t2[479+13]", "matches: t2@30: full 479 -> 479"]
    shared = _run("shared 1000-token system prompt, extra_buffer", release)
    assert shared[3] == "matches: b@5: full 1000 -> 0 (branch 960); c@10: full 1000 -> 960"


def test_the_decode_save_grid_parts_the_releases():
    # --mamba-track-interval 100: 0.5.18 saves at 200 while decoding; 0.5.23 only on lcm(64, 100) = 1600.
    assert _run("track interval 100, extra_buffer", "0.5.18")[1:] == [
        "step  61: t2[200+20]",
        "matches: t2@61: full 200 -> 200",
        "saves: t1@1:128 t1@60:200",
    ]
    assert _run("track interval 100, extra_buffer", "0.5.23")[1:] == [
        "step  61: t2[128+92]",
        "matches: t2@61: full 128 -> 128",
        "saves: t1@1:128 t2@62:192",
    ]
    assert [TABLE[r].scheduler.decode_track_on_checkpoint_grid for r in TABLE] == [False, False] + [True] * 5


def test_finished_rows_in_the_chunk_budget_part_the_releases():
    # mixed chunk 256 without overlap: 0.5.18 still counts the row d0 finished in the decode step before.
    title = "mixed chunk, rows finishing, extra_buffer, no overlap"
    assert _run(title, "0.5.18")[1] == "step   3: long[0+253]  chunked=long  decoding=d1,d2  finished=d1"
    assert _run(title, "0.5.23")[1] == "step   3: long[0+254]  chunked=long  decoding=d1,d2  finished=d1"
    # with overlap, 0.5.18 decodes d0 once more inside the mixed pass; 0.5.22 and later leave it out
    title = "mixed chunk, rows finishing, extra_buffer, overlap"
    assert _run(title, "0.5.18")[1] == "step   3: long[0+253]  chunked=long  decoding=d0,d1,d2  finished=d1"
    assert _run(title, "0.5.22")[1] == "step   3: long[0+253]  chunked=long  decoding=d1,d2  finished=d1"


def test_max_prefill_tokens_below_the_chunk_size_parts_the_releases():
    title = "--max-prefill-tokens 100 below chunk 256"
    assert _run(title, "0.5.18")[1] == "step   1: a[256+144] b[0+50]  finished=a,b"
    assert _run(title, "0.5.23")[1:3] == ["step   1: a[256+144]  finished=a", "step   2: b[0+50]  finished=b"]
    assert not TABLE["0.5.18"].scheduler.budget_state_before_candidate
    assert TABLE["0.5.22"].scheduler.budget_state_before_candidate is False
    assert TABLE["0.5.23"].scheduler.budget_state_before_candidate


def test_pad_values_per_release():
    h = 0xA11CE << 40
    assert pad_values(h, ONE.wide_pads) == (1_000_000 + h % 2**30,)
    digest = hashlib.sha256(b"sglang-mm-wide-pad-v1" + h.to_bytes(8, "big")).digest()
    wide = tuple(1_000_000 + (int.from_bytes(digest[i : i + 8], "big") & (2**62 - 1)) for i in range(0, 32, 8))
    assert pad_values(h, WIDE.wide_pads) == wide
    ids = padded_ids(Req("r", (7, Image(h, 6), 8)), WIDE)
    assert ids == (7, *wide, *wide[:2], 8)
    assert padded_ids(Req("r", (7, Image(h, 3))), ONE) == (7, *[1_000_000 + h % 2**30] * 3)


def test_a_match_is_page_floored_capped_and_stops_at_a_different_image():
    tree = PlainTree(page_size=16)
    prompt = list(range(64))
    tree.insert(prompt)
    assert _matched(tree, prompt) == 48  # capped at 63, floored to 48
    a = padded_ids(Req("a", (*range(40), Image(1, 30), 5)), WIDE)
    b = padded_ids(Req("b", (*range(40), Image(2, 30), 5)), WIDE)
    tree = PlainTree(page_size=1)
    tree.insert(a)
    assert _matched(tree, b) == 40 and _matched(tree, a) == len(a) - 1
    assert PlainTree(page_size=1, disabled=True).match(a) == 0


def test_a_waiting_request_is_cut_at_the_page_ceiled_budget():
    # chunk 32 at page 16 less 3 mixed decode rows: 29 left; a 20-token request (charged 32) is cut at 16.
    adder = PrefillAdder(Budget(16, 16384 - 3, 29), WIDE)
    outcome = adder.add_one_req(_req("r", 20, 0))
    assert outcome.cut and outcome.window is not None and outcome.window.extend_input_len == 16
    assert adder.new_chunked_req == "r" and adder.budget == Budget(16, 16384 - 3 - 16, 13)
    # a continued chunk is not floored: 29 tokens, charged 32.
    again = PrefillAdder(Budget(16, 16384 - 3, 29), WIDE).add_chunked_req(_req("r", 100, 16))
    assert again.window is not None and again.window.extend_input_len == 29 and again.budget.rem_chunk == -3
    assert again.result is AddReqResult.CONTINUE and f"{again.result}" == "continue"


def test_three_ten_token_requests_do_not_share_a_32_token_chunk_at_page_16():
    adder = PrefillAdder(Budget(16, 16384, 32), WIDE)
    formed = adder.form(None, [_req(f"r{k}", 10, 0) for k in range(3)])
    assert [w.rid for w in formed.windows] == ["r0", "r1"] and formed.chunked is None
    # what the walk did: each offer charged 16 (10 page-ceiled), the chunk budget spent, r2 never offered
    assert formed.start == Budget(16, 16384, 32) and formed.budget == Budget(16, 16384 - 32, 0)
    assert [(o.rid, o.chunked, o.charged, o.admission.result) for o in formed.offers] == [
        ("r0", False, 16, "continue"),
        ("r1", False, 16, "other"),
    ]
    assert formed.unoffered == ("r2",) and formed.stop is AddReqResult.OTHER and adder.budget_state() == "other"


def test_a_prefix_match_records_the_key_the_shared_tokens_and_the_page_floored_match():
    tree = PlainTree(page_size=16)
    tree.insert(list(range(64)))
    match = prefix_match(tree, [*range(40), 999, *range(41, 70)])
    assert match == PrefixMatch(length=70, key=64, shared=40, matched=32, full=32)  # key: 69 capped, floored to 64
    assert prefix_match(PlainTree(16, disabled=True), list(range(70))) == PrefixMatch(70, 0, 0, 0)


def test_lpm_deprioritises_a_request_sharing_32_tokens_with_an_earlier_waiting_one():
    tree = RadixCache(page_size=1)
    shared = list(range(40))
    queue = [[*shared, 1], [*shared, 2], [500, 501]]
    assert policy_order("lpm", queue, tree) == [0, 2, 1]
    assert policy_order("fcfs", queue, tree) == [0, 1, 2]


def test_a_hybrid_match_is_cut_back_to_the_deepest_saved_state_and_splits_where_it_ends():
    tree = RadixCache(page_size=1)
    ids = list(range(1000))
    assert tree.insert(ids[:700], state=False)[1:] == (700, False)  # FULL KV only: no state taken in
    assert tree.insert(ids[:448], state=True)[1:] == (0, True)  # a state on the split node at 448
    assert tree.insert(ids[:448], state=True)[1:] == (0, False)  # already held
    match = tree.match_prefix(ids[:799])
    # FULL matches 700 tokens; the deepest state on the path is at 448
    assert (match.full, match.depth, match.states) == (700, 448, (448,))
    # a path that leaves the saved prefix before 448 finds no state, and splits the node where it leaves
    other = [*ids[:300], -1, *ids[301:800]]
    assert (tree.match_prefix(other).full, tree.match_prefix(other).depth) == (300, 0)
    assert sorted(n.depth for n in tree.nodes) == [300, 448, 700]
    assert (tree.total, tree.states, tree.evictable) == (700, 1, 700)


def test_eviction_takes_unlocked_leaves_least_recently_used_first_and_states_alone_from_inner_nodes():
    tree = RadixCache(page_size=1)
    system = list(range(384))
    a, _, _ = tree.insert([*system, *range(1000, 1256)], state=True)
    b, _, _ = tree.insert([*system, *range(2000, 2256)], state=True)
    s, _, _ = tree.insert(system, state=True)  # splits at 384: a state on the inner node
    c, _, _ = tree.insert(list(range(5000, 5512)), state=True)
    tree.match_prefix([*system, *range(1000, 1256)])  # a is the most recent
    assert (tree.total, tree.states) == (384 + 256 + 256 + 512, 4)
    # two states: b's leaf goes whole (its KV and state), then s's state alone (its KV stays: a is below it)
    freed = tree.evict(states=2)
    assert (freed.tokens, freed.states) == (256, 2) and not s.state and b not in tree.nodes
    assert tree.match_prefix([*system, *range(2000, 2100)]).depth == 0
    # a locked prefix is never evicted: locking a protects its path
    mamba = tree.lock(a)
    assert tree.evictable == 512 and tree.evict(tokens=10).tokens == 512  # c, the only unlocked leaf
    tree.unlock(a, mamba)
    assert tree.evict(tokens=300).tokens == 256 + 384  # a's leaf, then s (now a leaf); nodes go whole
