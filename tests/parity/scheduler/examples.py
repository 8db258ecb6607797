"""The example workloads of ``try_it.py`` and ``docs/scheduler-notes.md`` §11, as plain data (no SGLang).

1. A two-turn chat that sends an image, then re-sends the whole first turn (image included) with its
   answer and a new question: page size 1 and 16.
2. Three requests sharing a 100-token system prompt (two put a few tokens of their own in front of
   it), each with its own image, arriving together after a request that put the prompt in the tree;
   chunk size 256: fcfs against lpm.
3. One 1000-token request (two 300-token images) cut by a chunk size of 256, page sizes 1 and 16,
   with a short request arriving one step later.
4. ``--max-prefill-tokens`` (100) below the chunk size (256): where 0.5.18 and 0.5.23 part.
"""

from __future__ import annotations

from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Image, Req

from .workload import Workload, chat_turn

BEGIN, CONTENT, END = 163602, 163604, 163603  # stand-ins for <|media_begin|>, <|media_content|>, <|media_end|>


def text(seed: int, n: int) -> list[int]:
    """Return ``n`` distinct-looking text token ids (deterministic per seed)."""
    return [1000 + (seed * 7919 + k * 104729) % 150_000 for k in range(n)]


def image_block(image_hash: int, tokens: int) -> list:
    return [BEGIN, *text(image_hash, 5), CONTENT, Image(image_hash, tokens), END]


def chat(page_size: int) -> Workload:
    system = text(1, 40)
    turn1 = Req("t1", (*system, *image_block(0xA11CE, 120), *text(2, 13)), max_new_tokens=20)
    answer = turn1.outputs()
    turn2 = chat_turn(turn1, answer, [*text(3, 11)], rid="t2", max_new_tokens=4)
    return Workload(LoadSettings(page_size=page_size, chunked_prefill_size=8192), (turn1, turn2))


def shared_prompt(policy: str) -> Workload:
    system = text(9, 100)
    warm = Req("warm", (*system, *text(10, 7)), max_new_tokens=2)
    own = {0: 6, 1: 3, 2: 0}  # tokens of its own each user puts in front of the system prompt
    users = tuple(
        Req(
            f"u{k}",
            (*text(20 + k, own[k]), *system, *image_block(0xB0 + k, 64), *text(30 + k, 9)),
            arrival=3,
            max_new_tokens=3,
        )
        for k in range(3)
    )
    return Workload(LoadSettings(schedule_policy=policy, page_size=1, chunked_prefill_size=256), (warm, *users))


def long_chunked(page_size: int) -> Workload:
    body = (*text(40, 150), *image_block(0xC0FFEE, 300), *text(41, 200), *image_block(0xD00D, 300), *text(42, 29))
    long = Req("long", body, max_new_tokens=2)
    short = Req("short", tuple(text(43, 50)), arrival=1, max_new_tokens=2)
    return Workload(LoadSettings(page_size=page_size, chunked_prefill_size=256), (long, short))


def prefill_budget_below_chunk() -> Workload:
    first = Req("a", tuple(text(50, 400)), max_new_tokens=1)
    second = Req("b", tuple(text(51, 50)), max_new_tokens=1)
    return Workload(LoadSettings(chunked_prefill_size=256, max_prefill_tokens=100), (first, second))
