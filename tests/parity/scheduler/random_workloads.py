"""Seeded random scheduler workloads (plain data, no SGLang): chats re-sending images, shared prompts, chunking.

:func:`random_workload` draws, per seed: page size 1, 16 or 64; chunk size 256 to 2048 or off
(``None`` or ``-1``); fcfs or lpm; mixed chunk on or off; sometimes ``--max-prefill-tokens`` below the
chunk size. Requests: 2-4-turn conversations (each turn re-sends the previous prompt, its answer and
new text, sometimes a new image or one sent before), one-shot requests, all opening with one of two
shared system prompts, images drawn from a small pool (so the same image comes back in another
conversation, and different images follow identical text), and sometimes a burst of short requests
arriving together, arriving over the first steps.
"""

from __future__ import annotations

import random

from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Image, Part, Req

from .workload import Workload, chat_turn

BEGIN, CONTENT, END = 163602, 163604, 163603  # stand-ins for <|media_begin|>, <|media_content|>, <|media_end|>


def _text(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 150_000) for _ in range(n)]


def _image(image_hash: int, tokens: int) -> list[Part]:
    return [BEGIN, CONTENT, Image(image_hash, tokens), END]


def _settings(rng: random.Random) -> LoadSettings:
    page = rng.choice((1, 16, 64))
    chunk = rng.choice((256, 512, 1024, 2048, None, -1))
    chunking = chunk is not None and chunk > 0
    max_prefill = 16384
    if rng.random() < 0.3:  # below the chunk size: where 0.5.18 and 0.5.23 part
        max_prefill = rng.choice((100, 200, 300))
    return LoadSettings(
        page_size=page,
        schedule_policy=rng.choice(("fcfs", "lpm")),
        chunked_prefill_size=chunk,
        max_prefill_tokens=max_prefill,
        enable_mixed_chunk=chunking and rng.random() < 0.4,
    )


def _conversation(rng: random.Random, name: str, system: list[int], images: list[tuple[int, int]]) -> list[Req]:
    turns = rng.randint(2, 4)
    first_image = rng.choice(images)
    parts: list[Part] = [*system, *_image(*first_image), *_text(rng, rng.randint(3, 40))]
    turn = Req(f"{name}t0", tuple(parts), arrival=rng.randint(0, 6), max_new_tokens=rng.randint(1, 8))
    out = [turn]
    for k in range(1, turns):
        new: list[Part] = _text(rng, rng.randint(2, 30))
        if rng.random() < 0.5:
            new += _image(*rng.choice(images))
        turn = chat_turn(turn, turn.outputs(), new, rid=f"{name}t{k}", max_new_tokens=rng.randint(1, 8))
        out.append(turn)
    return out


def _single(rng: random.Random, name: str, system: list[int], images: list[tuple[int, int]]) -> Req:
    parts: list[Part] = [*_text(rng, rng.randint(0, 4)), *system] if rng.random() < 0.3 else [*system]
    for _ in range(rng.randint(0, 2)):
        parts += _image(*rng.choice(images))
    parts += _text(rng, rng.randint(1, 300))
    return Req(name, tuple(parts), arrival=rng.randint(0, 8), max_new_tokens=rng.randint(1, 6))


def _burst(rng: random.Random, name: str, system: list[int]) -> list[Req]:
    """Several short requests arriving together: passes the chunk budget packs, page rounding and all."""
    step = rng.randint(0, 8)
    return [
        Req(f"{name}b{k}", (*system[: rng.randint(0, len(system))], *_text(rng, rng.randint(1, 90))), step, None, 2)
        for k in range(rng.randint(3, 6))
    ]


def random_workload(seed: int) -> Workload:
    """Return workload number ``seed`` (the same every run)."""
    rng = random.Random(seed)
    systems = [_text(rng, rng.randint(20, 150)) for _ in range(2)]
    images = [(rng.getrandbits(64), rng.randint(16, 600)) for _ in range(rng.randint(2, 4))]
    requests: list[Req] = []
    for c in range(rng.randint(1, 3)):
        requests += _conversation(rng, f"c{c}", rng.choice(systems), images)
    for s in range(rng.randint(1, 4)):
        requests.append(_single(rng, f"s{s}", rng.choice(systems), images))
    if rng.random() < 0.5:
        requests += _burst(rng, "u", rng.choice(systems))
    requests.sort(key=lambda r: r.arrival)  # the queue's order for ties: the workload's order
    return Workload(_settings(rng), tuple(requests))
