"""Seeded random scheduler workloads (plain data, no SGLang): chats re-sending images, shared prompts, chunking.

:func:`random_workload` draws, per seed, the flags of a Kimi-K3 server: a page given (1, 16 or 64),
set by ``--attention-backend flashmla`` (64) or left to the default backend (1); chunk size 256 to
8192 or off; fcfs or lpm; mixed chunk on or off; sometimes ``--max-prefill-tokens`` below the chunk
size; ``--mamba-radix-cache-strategy`` auto, extra_buffer or no_buffer (with what SGLang requires of
it: page 1, the overlap schedule off); the overlap schedule on or off; sometimes another
``--mamba-track-interval``; sometimes ``--disable-radix-cache``. Requests: 2–7-turn conversations
(each turn re-sends the previous prompt, its answer and new text, sometimes a new image or one sent
before, ending 0 to 90 tokens after its last image, so a save point lands before, inside or after
it), one-shot requests, all opening with one of two shared system prompts (up to 1100 tokens),
images drawn from a small pool (the same image comes back in another conversation, different images
follow identical text), sometimes a burst of short requests arriving together, outputs of 1 to 40
tokens or, now and then, long enough to cross a decode save point.

:func:`memory_workload` draws workloads that run short of memory at page 1, 16 or 64: 3–9 requests (some with an
image, some followed by a next turn) with outputs of 5 to 300 tokens, a KV pool
(``--max-total-tokens``) from just above the longest request to 1500 tokens more, sometimes two to four
request rows (``--max-running-requests``), a mamba state pool of 12 to 40 slots
(``--max-mamba-cache-size``), another ``--schedule-conservativeness``, the radix cache off; every
strategy and loop, fcfs or lpm, chunking and mixed chunk as above.
"""

from __future__ import annotations

import random

from kimi_viz.errors import SettingNotInReleaseError
from kimi_viz.releases import RELEASES
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Image, Part, Req
from kimi_viz.scheduler.server_config import resolve_server

from .workload import Workload, chat_turn

BEGIN, CONTENT, END = 163602, 163604, 163603  # stand-ins for <|media_begin|>, <|media_content|>, <|media_end|>


def _text(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 150_000) for _ in range(n)]


def _image(image_hash: int, tokens: int) -> list[Part]:
    return [BEGIN, CONTENT, Image(image_hash, tokens), END]


def _draw_settings(rng: random.Random) -> LoadSettings:
    way = rng.random()
    page: int | None = None
    backend = None
    if way < 0.35:
        page = rng.choice((1, 16, 64))
    elif way < 0.5:
        backend = "flashmla"  # sets the page to 64
    chunk = rng.choice((256, 512, 1024, 2048, 8192, None, -1))
    chunking = chunk is not None and chunk > 0
    strategy = rng.choices(("auto", "extra_buffer", "no_buffer"), (6, 3, 2))[0]
    no_overlap = rng.random() < 0.35 or strategy == "no_buffer"
    if strategy == "no_buffer":
        page, backend = rng.choice((None, 1)), None
    interval = rng.choice((256, 256, 256, 64, 128, 512))
    return LoadSettings(
        page_size=page,
        attention_backend=backend,
        schedule_policy=rng.choice(("fcfs", "lpm")),
        chunked_prefill_size=chunk,
        max_prefill_tokens=rng.choice((100, 200, 300)) if rng.random() < 0.25 else 16384,
        enable_mixed_chunk=chunking and rng.random() < 0.4,
        mamba_radix_cache_strategy=strategy,
        disable_overlap_schedule=no_overlap,
        mamba_track_interval=interval,
        disable_radix_cache=rng.random() < 0.08,
    )


def _settings(rng: random.Random) -> LoadSettings:
    """Draw flags every release the lane runs accepts for Kimi-K3."""
    while True:
        load = _draw_settings(rng)
        try:
            for version in ("0.5.18", "0.5.23"):
                resolve_server(load, RELEASES[version])
        except SettingNotInReleaseError:
            continue
        return load


def _output(rng: random.Random) -> int:
    return rng.randint(200, 320) if rng.random() < 0.12 else rng.randint(1, 40)


def _conversation(rng: random.Random, name: str, system: list[int], images: list[tuple[int, int]]) -> list[Req]:
    turns = rng.randint(2, 7)
    parts: list[Part] = [*system, *_image(*rng.choice(images)), *_text(rng, rng.randint(0, 90))]
    turn = Req(f"{name}t0", tuple(parts), arrival=rng.randint(0, 6), max_new_tokens=_output(rng))
    out = [turn]
    for k in range(1, turns):
        new: list[Part] = _text(rng, rng.randint(2, 60))
        if rng.random() < 0.5:
            new += [*_image(*rng.choice(images)), *_text(rng, rng.randint(0, 90))]
        turn = chat_turn(turn, turn.outputs(), new, rid=f"{name}t{k}", max_new_tokens=_output(rng))
        out.append(turn)
    return out


def _single(rng: random.Random, name: str, system: list[int], images: list[tuple[int, int]]) -> Req:
    parts: list[Part] = [*_text(rng, rng.randint(0, 4)), *system] if rng.random() < 0.3 else [*system]
    for _ in range(rng.randint(0, 2)):
        parts += _image(*rng.choice(images))
    parts += _text(rng, rng.randint(1, 300))
    return Req(name, tuple(parts), arrival=rng.randint(0, 8), max_new_tokens=_output(rng))


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
    systems = [_text(rng, rng.choice((rng.randint(20, 150), rng.randint(300, 1100)))) for _ in range(2)]
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


def memory_workload(seed: int, page: int = 1) -> Workload:
    """Return memory workload number ``seed`` at ``page`` (the same every run): a small pool the requests outgrow.
    Page 1 draws the workloads it always drew; pages 16 and 64 draw their own, with the radix cache on (0.5.18's
    tree asserts page 1 with the radix cache off) and a pool of whole pages that holds the longest request."""
    rng = random.Random(10_000 + seed if page == 1 else 20_000 + 1_000 * page + seed)
    system = _text(rng, rng.choice((0, 64, 200)))
    images = [(rng.getrandbits(64), rng.randint(20, 150)) for _ in range(3)]
    requests: list[Req] = []
    for k in range(rng.randint(3, 9)):
        parts: list[Part] = [*system, *_text(rng, rng.randint(20, 200))]
        if rng.random() < 0.3:
            parts += [*_image(*rng.choice(images)), *_text(rng, rng.randint(1, 40))]
        req = Req(f"r{k}", tuple(parts), arrival=rng.randint(0, 150), max_new_tokens=rng.randint(5, 300))
        requests.append(req)
        if rng.random() < 0.35:
            new = _text(rng, rng.randint(5, 80))
            requests.append(chat_turn(req, req.outputs(), new, f"r{k}b", max_new_tokens=rng.randint(5, 200)))
    longest = max(r.length + r.max_new_tokens for r in requests)
    strategy = rng.choice(("default", "default", "no_buffer", "extra_buffer"))
    chunk = rng.choice((None, 128, 256, 8192))
    low = longest + 10 if page == 1 else longest + 2 * page + page
    load = LoadSettings(
        page_size=page,
        max_total_tokens=rng.randint(low, low + 1500),
        chunked_prefill_size=chunk,
        enable_mixed_chunk=chunk is not None and rng.random() < 0.3,
        disable_overlap_schedule=strategy != "default",
        mamba_radix_cache_strategy="extra_buffer" if strategy == "extra_buffer" else "auto",
        schedule_policy=rng.choice(("fcfs", "fcfs", "lpm")),
        mamba_track_interval=rng.choice((256, 64)),
        max_running_requests=rng.randint(1, 4) if rng.random() < 0.3 else None,
        max_mamba_cache_size=rng.randint(12, 40) if rng.random() < 0.3 else None,
        schedule_conservativeness=rng.choice((0.3, 2.0)) if rng.random() < 0.2 else 1.0,
        disable_radix_cache=rng.random() < 0.1 and page == 1,
    )
    return Workload(load, tuple(requests), max_steps=40_000)
