"""The kit's model of SGLang's prefill pass on worked examples taken from the real scheduler's runs.

Every expected pass below is what SGLang's own ``PrefillAdder`` and radix tree formed for the same
workload (``tests/parity/scheduler/try_it.py``, quoted in ``docs/scheduler-notes.md`` §11); the
real-SGLang lane (``tests/parity/scheduler/test_scheduler_parity.py``) holds the model to many more.
"""

from __future__ import annotations

import hashlib

import pytest
from parity.scheduler.examples import chat, long_chunked, prefill_budget_below_chunk, shared_prompt
from parity.scheduler.workload import kit_passes

from kimi_viz.releases import RELEASES as TABLE
from kimi_viz.scheduler.policy import Budget, add_waiting, continue_chunked, form_pass, policy_order
from kimi_viz.scheduler.req import Image, Req
from kimi_viz.scheduler.tree import PrefixMatch, RadixTree, pad_values, padded_ids, prefix_match

RELEASES = ("0.5.18", "0.5.23")
WIDE, ONE = TABLE["0.5.23"].scheduler, TABLE["0.5.18"].scheduler


def _req(rid: str, length: int, prefix: int) -> Req:
    """Return a request of ``length`` distinct tokens that starts from ``prefix`` cached ones."""
    req = Req(rid, tuple(range(length)))
    req.origin_input_ids = tuple(range(length))
    req.prefix_len = prefix
    return req


def _matched(tree: RadixTree, ids) -> int:
    return prefix_match(tree, ids).matched


def _passes(workload, release) -> list[str]:
    out = []
    for p in kit_passes(workload, release):
        windows = " ".join(f"{w.rid}[{w.prefix_len}+{w.extend_input_len}]" for w in p.windows)
        out.append(f"{p.step}: {windows}" + (f" chunked={p.chunked}" if p.chunked else ""))
    return out


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("page", "prefix"), [(1, 200), (16, 192)])
def test_a_second_chat_turn_matches_the_first_turn_and_its_answer_but_the_last_token(release, page, prefix):
    # 181-token prompt, 20 output tokens: 181 + 20 - 1 = 200 in the tree, floored to the page.
    assert _passes(chat(page), release) == ["0: t1[0+181]", f"20: t2[{prefix}+{212 - prefix}]"]


@pytest.mark.parametrize("release", RELEASES)
def test_a_shared_system_prompt_under_fcfs_and_lpm(release):
    assert _passes(shared_prompt("fcfs"), release) == [
        "0: warm[0+107]",
        "3: u0[0+187] u1[0+69] chunked=u1",
        "4: u1[69+115] u2[100+81]",
    ]
    # lpm: u2 (100 cached) first; u0 and u1 share 0 with the tree and u1 shares < 32 with u0 in the queue.
    assert _passes(shared_prompt("lpm"), release) == [
        "0: warm[0+107]",
        "3: u2[100+81] u0[0+175] chunked=u0",
        "4: u0[175+12] u1[0+184]",
    ]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("page", "short"), [(1, 29), (16, 16)])
def test_the_last_chunk_is_page_ceiled_against_the_next_request(release, page, short):
    # 256 - ceil(227) leaves 29 tokens at page 1, 256 - 240 = 16 at page 16.
    assert _passes(long_chunked(page), release) == [
        "0: long[0+256] chunked=long",
        "1: long[256+256] chunked=long",
        "2: long[512+256] chunked=long",
        f"3: long[768+227] short[0+{short}] chunked=short",
        f"4: short[{short}+{50 - short}]",
    ]


def test_max_prefill_tokens_below_the_chunk_size_parts_the_releases():
    assert _passes(prefill_budget_below_chunk(), "0.5.18") == ["0: a[0+256] chunked=a", "1: a[256+144] b[0+50]"]
    assert _passes(prefill_budget_below_chunk(), "0.5.23") == ["0: a[0+256] chunked=a", "1: a[256+144]", "2: b[0+50]"]
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
    tree = RadixTree(page_size=16)
    prompt = list(range(64))
    tree.insert(prompt)
    assert _matched(tree, prompt) == 48  # capped at 63, floored to 48
    a = padded_ids(Req("a", (*range(40), Image(1, 30), 5)), WIDE)
    b = padded_ids(Req("b", (*range(40), Image(2, 30), 5)), WIDE)
    tree = RadixTree(page_size=1)
    tree.insert(a)
    assert _matched(tree, b) == 40 and _matched(tree, a) == len(a) - 1
    assert RadixTree(page_size=1, disabled=True).match(a) == 0


def test_a_waiting_request_is_cut_at_the_page_ceiled_budget():
    # chunk 32 at page 16 less 3 mixed decode rows: 29 left; a 20-token request (charged 32) is cut at 16.
    outcome = add_waiting(Budget(16, 16384 - 3, 29), _req("r", 20, 0), admitted=0)
    assert outcome.cut and outcome.window is not None and outcome.window.extend_input_len == 16
    # a continued chunk is not floored: 29 tokens, charged 32.
    again = continue_chunked(Budget(16, 16384 - 3, 29), _req("r", 100, 16))
    assert again.window is not None and again.window.extend_input_len == 29 and again.budget.rem_chunk == -3


def test_three_ten_token_requests_do_not_share_a_32_token_chunk_at_page_16():
    formed = form_pass(Budget(16, 16384, 32), None, [_req(f"r{k}", 10, 0) for k in range(3)], WIDE)
    assert [w.rid for w in formed.windows] == ["r0", "r1"] and formed.chunked is None
    # what the walk did: each offer charged 16 (10 page-ceiled), the chunk budget spent, r2 never offered
    assert formed.start == Budget(16, 16384, 32) and formed.budget == Budget(16, 16384 - 32, 0)
    assert [(o.rid, o.chunked, o.charged, o.admission.result) for o in formed.offers] == [
        ("r0", False, 16, "continue"),
        ("r1", False, 16, "other"),
    ]
    assert formed.unoffered == ("r2",)


def test_a_prefix_match_records_the_key_the_shared_tokens_and_the_page_floored_match():
    tree = RadixTree(page_size=16)
    tree.insert(list(range(64)))
    match = prefix_match(tree, [*range(40), 999, *range(41, 70)])
    assert match == PrefixMatch(length=70, key=64, shared=40, matched=32)  # key: 69 capped, floored to 64
    assert prefix_match(RadixTree(16, disabled=True), list(range(70))) == PrefixMatch(70, 0, 0, 0)


def test_lpm_deprioritises_a_request_sharing_32_tokens_with_an_earlier_waiting_one():
    tree = RadixTree(page_size=1)
    shared = list(range(40))
    queue = [[*shared, 1], [*shared, 2], [500, 501]]
    assert policy_order("lpm", queue, tree) == [0, 2, 1]
    assert policy_order("fcfs", queue, tree) == [0, 1, 2]
