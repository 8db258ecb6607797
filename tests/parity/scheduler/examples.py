"""The example workloads of ``try_it.py`` and ``docs/hybrid-tree-notes.md`` §11, as the lane's records (no SGLang).

Each builder returns a lane :class:`~.workload.Workload` (the kit's ``Req`` records and
``LoadSettings``). ``tests/test_admission.py`` holds the kit to what SGLang's own scheduler does with
them (the runs quoted in the notes); ``try_it.py`` prints those runs.

1. ``two_turn_chat``: a 450-token first turn with a 400-token image, 30 generated tokens, then the
   whole first turn, its answer and a question (page 1; extra_buffer with and without overlap,
   no_buffer).
2. ``image_over_save_point``: a 305-token first turn whose image covers tokens 7..300, re-sent.
3. ``shared_system_prompt``: three conversations with the same 1000-token system prompt, one after
   the other.
4. ``short_turns``: a chat whose every turn adds fewer than 64 tokens.
5. ``chunked_long_prompt``: a 700-token prompt at pages 1, 16 and 64, chunk 256 and no chunking,
   then a second turn.
6. ``overlap_arrival``: a request sharing a prompt that arrives one step after that prompt's prefill
   (overlap on and off).
7. ``mixed_chunk_finishing``: ``--enable-mixed-chunk`` with short requests finishing while others
   decode, then a long prompt whose chunk budget counts the decode rows.
8. ``decode_crossing``: a 250-token prompt decoding past 256 (a decode save point), alone and
   inside mixed passes next to a chunked 1500-token prompt; then its next turn.
9. ``track_interval``: ``--mamba-track-interval 100`` on a 150-token prompt decoding 60 tokens.
10. ``off_grid_chunks``: page 16 with mixed chunk, so a continuing chunk starts off the page grid and
    its save point (prefix-relative) is floored to the page by the insert.
11. ``shared_prompt``: three requests sharing a 100-token system prompt (two put a few tokens of their
    own in front of it), each with its own image, after a request that put the prompt in the tree;
    chunk 256, fcfs against lpm.
12. ``long_chunked``: a 1000-token request (two 300-token images) cut by a chunk of 256, pages 1 and 16,
    with a short request one step later: the last chunk is page-ceiled against it.
13. ``prefill_budget_below_chunk``: ``--max-prefill-tokens`` (100) below the chunk (256), where 0.5.18
    and 0.5.23 part (``budget_state()`` checked after an admission, or before each candidate).
14. ``memory_short``: three requests with long outputs in a KV pool of 1555 tokens: the adder refuses the
    third (``NO_TOKEN``), a decode step retracts the second, both are prefilled together later.
15. ``states_short``: a chat's first turn and four other 300-token requests on 12 state slots
    (``--max-mamba-cache-size``, so 2 request rows), chunks of 64 (a save per chunk): the tree's saved
    states are evicted, least recently used first, and the second turn finds none of its own left.
"""

from __future__ import annotations

from typing import Any

from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Image, Part, Req

from .workload import Workload, chat_turn

BEGIN, CONTENT, END = 163602, 163604, 163603  # stand-ins for <|media_begin|>, <|media_content|>, <|media_end|>


def text(seed: int, n: int) -> list[int]:
    """Return ``n`` distinct-looking text token ids (deterministic per seed)."""
    return [1000 + (seed * 7919 + k * 104729) % 150_000 for k in range(n)]


def settings(**kw: Any) -> LoadSettings:
    """The examples' flags: page 1 given, chunk 8192, ``extra_buffer`` (``**kw`` changes them)."""
    base: dict[str, Any] = {"page_size": 1, "mamba_radix_cache_strategy": "extra_buffer"}
    return LoadSettings(**{**base, **kw})


def no_buffer(**kw: Any) -> LoadSettings:
    """``no_buffer`` as SGLang accepts it: page 1 and the overlap schedule off."""
    return settings(mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=True, **kw)


def _turn(previous: Req, new: list[Part], rid: str, **kw: Any) -> Req:
    return chat_turn(previous, previous.outputs(), new, rid, **kw)


def two_turn_chat(s: LoadSettings) -> Workload:
    first: list[Part] = [*text(1, 30), BEGIN, *text(2, 5), CONTENT, Image(0xA11CE, 400), END, *text(3, 12)]
    t1 = Req("t1", tuple(first), max_new_tokens=30)
    return Workload(s, (t1, _turn(t1, text(4, 12), "t2", max_new_tokens=4)))


def image_over_save_point(s: LoadSettings) -> Workload:
    t1 = Req("t1", (*text(5, 7), Image(0xB0B, 294), *text(6, 4)), max_new_tokens=20)  # the image: tokens 7..300
    return Workload(s, (t1, _turn(t1, text(7, 9), "t2", max_new_tokens=2)))


def shared_system_prompt(s: LoadSettings) -> Workload:
    system = text(8, 1000)
    a = Req("a", (*system, *text(9, 40)), max_new_tokens=4)
    b = Req("b", (*system, *text(10, 40)), after="a", max_new_tokens=4)
    c = Req("c", (*system, *text(11, 40)), after="b", max_new_tokens=4)
    return Workload(s, (a, b, c))


def short_turns(s: LoadSettings) -> Workload:
    turns = [Req("u1", tuple(text(12, 100)), max_new_tokens=10)]
    for k in range(2, 8):
        turns.append(_turn(turns[-1], text(12 + k, 20), f"u{k}", max_new_tokens=10))
    return Workload(s, tuple(turns))


def chunked_long_prompt(s: LoadSettings) -> Workload:
    t1 = Req("t1", (*text(20, 150), BEGIN, CONTENT, Image(0xC0FFEE, 300), END, *text(21, 247)), max_new_tokens=6)
    return Workload(s, (t1, _turn(t1, text(22, 30), "t2", max_new_tokens=2)))


def overlap_arrival(s: LoadSettings) -> Workload:
    shared = text(30, 300)
    a = Req("a", (*shared, *text(31, 20)), max_new_tokens=3)
    return Workload(s, (a, Req("b", (*shared, *text(32, 20)), arrival=1, max_new_tokens=3)))


def mixed_chunk_finishing(s: LoadSettings) -> Workload:
    shorts = [Req(f"d{k}", tuple(text(40 + k, 20)), max_new_tokens=n) for k, n in enumerate((3, 4, 9))]
    long = Req("long", (*text(50, 200), Image(0xD00D, 400)), arrival=3, max_new_tokens=2)
    return Workload(s, (*shorts, long, _turn(long, text(51, 10), "again", max_new_tokens=2)))


def decode_crossing(s: LoadSettings, with_long: bool) -> Workload:
    d = Req("d", tuple(text(60, 250)), max_new_tokens=12)
    reqs = [d, _turn(d, text(61, 20), "again", max_new_tokens=2)]
    if with_long:
        reqs.append(Req("long", tuple(text(62, 1500)), arrival=2, max_new_tokens=1))
    return Workload(s, tuple(reqs))


def track_interval(s: LoadSettings) -> Workload:
    t1 = Req("t1", tuple(text(70, 150)), max_new_tokens=60)
    return Workload(s, (t1, _turn(t1, text(71, 10), "t2", max_new_tokens=2)))


def off_grid_chunks(s: LoadSettings) -> Workload:
    shorts = [Req(f"d{k}", tuple(text(80 + k, 20)), max_new_tokens=40) for k in range(3)]
    long = Req("long", tuple(text(90, 1200)), arrival=2, max_new_tokens=2)
    return Workload(s, (*shorts, long, _turn(long, text(91, 10), "again", max_new_tokens=2)))


def image_block(image_hash: int, tokens: int) -> list[Part]:
    return [BEGIN, *text(image_hash, 5), CONTENT, Image(image_hash, tokens), END]


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
    return Workload(settings(schedule_policy=policy, chunked_prefill_size=256), (warm, *users))


def long_chunked(page_size: int) -> Workload:
    body = (*text(40, 150), *image_block(0xC0FFEE, 300), *text(41, 200), *image_block(0xD00D, 300), *text(42, 29))
    long = Req("long", body, max_new_tokens=2)
    short = Req("short", tuple(text(43, 50)), arrival=1, max_new_tokens=2)
    return Workload(settings(page_size=page_size, chunked_prefill_size=256), (long, short))


def prefill_budget_below_chunk() -> Workload:
    first = Req("a", tuple(text(50, 400)), max_new_tokens=1)
    second = Req("b", tuple(text(51, 50)), max_new_tokens=1)
    return Workload(settings(chunked_prefill_size=256, max_prefill_tokens=100), (first, second))


def memory_short() -> Workload:
    a = Req("r1", tuple(text(100, 434)), max_new_tokens=604)
    b = Req("r2", tuple(text(101, 242)), arrival=38, max_new_tokens=445)
    c = Req("r3", tuple(text(102, 441)), arrival=383, max_new_tokens=178)
    return Workload(settings(max_total_tokens=1555), (a, b, c))


def states_short() -> Workload:
    t1 = Req("t1", tuple(text(111, 300)), max_new_tokens=20)
    others = [Req(f"o{k}", tuple(text(130 + k, 300)), arrival=25 + 2 * k, max_new_tokens=20) for k in range(4)]
    t2 = _turn(t1, text(120, 40), "t2", max_new_tokens=10)
    t2 = Req(t2.rid, t2.parts, arrival=60, after="t1", max_new_tokens=10)
    return Workload(settings(max_mamba_cache_size=12, chunked_prefill_size=64), (t1, *others, t2))


def examples() -> list[tuple[str, Workload]]:
    """Every example: ``(title, workload)``."""
    mixed: dict[str, Any] = {"chunked_prefill_size": 256, "enable_mixed_chunk": True}
    out = [
        ("two-turn chat, page 1, extra_buffer, overlap", two_turn_chat(settings())),
        ("two-turn chat, page 1, extra_buffer, no overlap", two_turn_chat(settings(disable_overlap_schedule=True))),
        ("two-turn chat, page 1, no_buffer", two_turn_chat(no_buffer())),
        ("image over the save point, extra_buffer", image_over_save_point(settings())),
        ("image over the save point, no_buffer", image_over_save_point(no_buffer())),
        ("shared 1000-token system prompt, extra_buffer", shared_system_prompt(settings())),
        ("shared 1000-token system prompt, no_buffer", shared_system_prompt(no_buffer())),
        ("turns adding < 64 tokens, extra_buffer", short_turns(settings())),
        ("turns adding < 64 tokens, no_buffer", short_turns(no_buffer())),
    ]
    for page in (1, 16, 64):
        for chunk in (256, None):
            title = f"700-token prompt, page {page}, chunk {chunk or 'off'}, extra_buffer"
            out.append((title, chunked_long_prompt(settings(page_size=page, chunked_prefill_size=chunk))))
    out += [
        ("700-token prompt, chunk 256, no_buffer", chunked_long_prompt(no_buffer(chunked_prefill_size=256))),
        ("arrival one step after a shared prefill, overlap", overlap_arrival(settings())),
        (
            "arrival one step after a shared prefill, no overlap",
            overlap_arrival(settings(disable_overlap_schedule=True)),
        ),
        ("mixed chunk, rows finishing, extra_buffer, overlap", mixed_chunk_finishing(settings(**mixed))),
        (
            "mixed chunk, rows finishing, extra_buffer, no overlap",
            mixed_chunk_finishing(settings(disable_overlap_schedule=True, **mixed)),
        ),
        ("mixed chunk, rows finishing, no_buffer", mixed_chunk_finishing(no_buffer(**mixed))),
        ("decode past 256, alone, extra_buffer", decode_crossing(settings(chunked_prefill_size=256), False)),
        ("decode past 256 inside mixed passes, extra_buffer", decode_crossing(settings(**mixed), True)),
        (
            "decode past 256 next to a chunked prompt, no mixing",
            decode_crossing(settings(chunked_prefill_size=256), True),
        ),
        ("track interval 100, extra_buffer", track_interval(settings(mamba_track_interval=100))),
        (
            "chunks off the page grid, page 16, mixed chunk, extra_buffer",
            off_grid_chunks(settings(page_size=16, **mixed)),
        ),
        ("shared 100-token prompt behind own tokens, fcfs", shared_prompt("fcfs")),
        ("shared 100-token prompt behind own tokens, lpm", shared_prompt("lpm")),
        ("1000-token prompt cut by chunk 256, page 1", long_chunked(1)),
        ("1000-token prompt cut by chunk 256, page 16", long_chunked(16)),
        ("--max-prefill-tokens 100 below chunk 256", prefill_budget_below_chunk()),
        ("three long decodes in a 1555-token KV pool", memory_short()),
        ("a chat's states evicted from 12 state slots", states_short()),
    ]
    return out


def example(title: str) -> Workload:
    """Return the example of that title."""
    return dict(examples())[title]
