"""The scheduler lane's workload: the kit's ``Req`` records and server flags, and both sides' views of a run.

Both sides read the same :class:`Workload`: the kit's model (:func:`kit_schedule`, the package's
:func:`kimi_viz.scheduler.event_loop.schedule`) and SGLang's own scheduler (``real_scheduler.py``, through
:func:`real_payload`). :func:`kit_view` and :func:`real_view` put what each did in the same terms: every
prefill pass (step, windows, the request left chunked, the decode rows, the requests its result
finished), every admitted request's match (the FULL walk, the prefix after the cut back to a saved
state, the branching point) and every state the tree took in.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kimi_viz.releases import RELEASES
from kimi_viz.request.prompt import MEDIA_PAD_ID
from kimi_viz.scheduler.event_loop import Pass, Schedule, schedule
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.req import Image, Part, Req, Window
from kimi_viz.scheduler.server_config import resolve_server


@dataclass(frozen=True)
class Workload:
    """Server flags and the requests, in arrival order (ties keep this order, as the queue does)."""

    settings: LoadSettings
    requests: tuple[Req, ...]
    max_steps: int = 10_000


def real_payload(workload: Workload, release: str) -> dict[str, Any]:
    """Return the workload as the real scheduler reads it on ``release``: the flags, the page the kit resolves
    for them (checked on its own against the release's resolution), every request with its output ids."""
    data = reqs_to_json(workload.settings, list(workload.requests), workload.max_steps)
    data["settings"]["resolved_page_size"] = resolve_server(workload.settings, RELEASES[release]).page_size
    for entry, req in zip(data["requests"], workload.requests):
        entry["output_ids"] = req.outputs()
    return data


View = tuple[list[tuple], list[tuple], list[tuple], list[tuple]]


def kit_schedule(workload: Workload, release: str) -> Schedule:
    """Return the kit's model of ``release``'s scheduler on ``workload``."""
    return schedule(list(workload.requests), workload.settings, RELEASES[release], workload.max_steps)


def kit_passes(workload: Workload, release: str) -> list[Pass]:
    """Return the passes the kit's model of ``release``'s scheduler forms for ``workload``."""
    return list(kit_schedule(workload, release).passes)


def kit_view(planned: Schedule) -> View:
    """Return the kit's schedule as ``(passes, matches, saves)`` in the terms :func:`real_view` uses."""
    passes = [
        (p.step, tuple((w.rid, w.prefix_len, w.extend_input_len) for w in p.windows), p.chunked, p.decoding, p.finished)
        for p in planned.passes
    ]
    matches = []
    for p in planned.passes:
        for w in p.windows:
            m = None if p.formed is None else p.formed.match_of(w.rid)
            if m is not None:
                matches.append((p.step, w.rid, m.full, m.matched, m.branching))
    return passes, matches, sorted((s.step, s.rid, s.depth) for s in planned.saves), kit_pressure(planned)


def kit_pressure(planned: Schedule) -> list[tuple]:
    """Return the kit's retractions, NO_TOKEN steps, memory after each step and what each step evicted, as
    :func:`real_pressure` does."""
    memory = planned.server.memory
    kv, mamba = memory.kv_pool is not None, memory.mamba_pool is not None
    pressure = [("retract" if not r.aborted else "abort", r.step, r.rid) for r in planned.retractions]
    pressure += [("no_token", step) for step in planned.no_token]
    pressure += [
        ("memory", m.step, int(m.kv_available) if kv else None, m.evictable, int(m.mamba_available) if mamba else None)
        for m in planned.memory_after_each_step()
    ]
    pressure += [("evicted", m.step, m.evicted_tokens, m.evicted_states) for m in planned.evictions]
    return sorted(pressure, key=repr)


def real_view(result: dict[str, Any]) -> View:
    """Return what ``real_scheduler.run_workload`` reported, as :func:`kit_view` puts the kit's."""
    passes = [
        (
            p["step"],
            tuple((w["rid"], w["prefix_len"], w["extend_input_len"]) for w in p["windows"]),
            p["chunked"],
            tuple(p["decoding"]),
            tuple(p["finished"]),
        )
        for p in result["passes"]
    ]
    matches = [
        (entry["step"], m["rid"], m.get("full_match", 0), m["prefix_len"], m.get("branching_seqlen"))
        for entry in result["matches"]
        for m in entry["requests"]
    ]
    return passes, matches, sorted(tuple(s) for s in result["saves"]), real_pressure(result)


def real_pressure(result: dict[str, Any]) -> list[tuple]:
    """Return the retractions, NO_TOKEN steps, memory after each step and what each step evicted (KV tokens, mamba
    states), as ``real_scheduler.run_workload`` reported them."""
    settings = result.get("settings", {})
    kv, mamba = settings.get("max_total_tokens") is not None, settings.get("max_mamba_cache_size") is not None
    pressure = [("retract", step, rid) for step, rid in result.get("retractions", [])]
    pressure += [("abort", step, rid) for step, rid in result.get("aborted", [])]
    pressure += [("no_token", step) for step in result.get("no_token", [])]
    pressure += [
        ("memory", step, available if kv else None, evictable, free if mamba else None)
        for step, available, evictable, free in result.get("memory", [])
    ]
    pressure += [("evicted", step, tokens, states) for step, tokens, states in result.get("evictions", [])]
    return sorted(pressure, key=repr)


def view_lines(title: str, workload: Workload, view: View) -> list[str]:
    """Return a run in ``try_it.py``'s format: one line per prefill pass, then the FULL matches and the saves."""
    s = workload.settings
    out = [
        f"## {title}  [page={s.page_size} chunk={s.chunked_prefill_size} mixed={s.enable_mixed_chunk} "
        f"strategy={s.mamba_radix_cache_strategy} overlap={not s.disable_overlap_schedule}]",
        "   lengths: " + ", ".join(f"{r.rid}={r.length}" for r in workload.requests),
    ]
    passes, matches, saves, _ = view
    for step, windows, chunked, decoding, finished in passes:
        extra = f"  chunked={chunked}" if chunked else ""
        extra += f"  decoding={','.join(decoding)}" if decoding else ""
        extra += f"  finished={','.join(finished)}" if finished else ""
        out.append(f"   step {step:3d}: " + " ".join(f"{rid}[{p}+{e}]" for rid, p, e in windows) + extra)
    hits = [
        f"{rid}@{step}: full {full} -> {prefix}" + (f" (branch {branch})" if branch is not None else "")
        for step, rid, full, prefix, branch in matches
        if full
    ]
    if hits:
        out.append("   matches: " + "; ".join(hits))
    out.append("   saves: " + (" ".join(f"{rid}@{step}:{n}" for step, rid, n in saves) or "none"))
    pressure = view[3]
    events = [f"{kind} {rid}@{step}" for kind, step, *rest in pressure if kind in ("retract", "abort") for rid in rest]
    refused = [str(step) for kind, step, *_ in pressure if kind == "no_token"]
    if refused:
        events.append("NO_TOKEN at " + " ".join(sorted(refused, key=int)))
    memory = [p for p in pressure if p[0] == "memory"]
    if memory:
        last = max(memory, key=lambda p: p[1])
        events.append(f"after step {last[1]}: free KV {last[2]}, evictable {last[3]}, free states {last[4]}")
    if events:
        out.append("   memory: " + "; ".join(events))
    return out


def _part_to_json(part: Part) -> Any:
    return {"image": part.image_hash, "length": part.length} if isinstance(part, Image) else int(part)


def _part_from_json(value: Any) -> Part:
    if isinstance(value, dict):
        return Image(int(value["image"]), int(value["length"]))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return Image(int(value[0]), int(value[1]))
    return int(value)


def reqs_to_json(settings: LoadSettings, reqs: list[Req], max_steps: int) -> dict[str, Any]:
    """Return the settings and requests as JSON-able data (images as ``{"image": hash, "length": n}``)."""
    return {
        "settings": settings.to_json(),
        "max_steps": max_steps,
        "requests": [
            {
                "rid": r.rid,
                "parts": [_part_to_json(p) for p in r.parts],
                "arrival": r.arrival,
                "after": r.after,
                "max_new_tokens": r.max_new_tokens,
                "output_ids": None if r.generated_ids is None else list(r.generated_ids),
            }
            for r in reqs
        ],
    }


def reqs_from_json(data: dict[str, Any]) -> tuple[LoadSettings, list[Req], int]:
    """Return the settings, requests and step limit :func:`reqs_to_json` wrote (an image may be ``[hash, n]``)."""
    known = {f.name for f in fields(LoadSettings)}
    settings = LoadSettings(**{k: v for k, v in data.get("settings", {}).items() if k in known})
    reqs = [
        Req(
            str(r["rid"]),
            tuple(_part_from_json(p) for p in r["parts"]),
            arrival=int(r.get("arrival", 0)),
            after=r.get("after"),
            max_new_tokens=int(r.get("max_new_tokens", 1)),
            generated_ids=None if r.get("output_ids") is None else tuple(int(t) for t in r["output_ids"]),
        )
        for r in data["requests"]
    ]
    return settings, reqs, int(data.get("max_steps", 10_000))


def passes_to_json(passes: list[Pass]) -> list[dict[str, Any]]:
    """Return the passes as JSON-able data."""
    return [
        {
            "step": p.step,
            "windows": [
                {"rid": w.rid, "prefix_len": w.prefix_len, "extend_input_len": w.extend_input_len} for w in p.windows
            ],
            "chunked": p.chunked,
            "decoding": list(p.decoding),
            "finished": list(p.finished),
            "release": p.release,
        }
        for p in passes
    ]


def passes_from_json(data: list[dict[str, Any]]) -> list[Pass]:
    """Return the passes :func:`passes_to_json` wrote."""
    return [
        Pass(
            step=int(p["step"]),
            windows=tuple(Window(**w) for w in p["windows"]),
            chunked=p.get("chunked"),
            decoding=tuple(p.get("decoding", ())),
            finished=tuple(p.get("finished", ())),
            release=p.get("release", ""),
        )
        for p in data
    ]


def token_ids(request: Req) -> list[int]:
    """Return the prompt with each image run as ``<|media_pad|>`` tokens (what the processor emits)."""
    ids: list[int] = []
    for part in request.parts:
        ids.extend([MEDIA_PAD_ID] * part.length if isinstance(part, Image) else [int(part)])
    return ids


def image_offsets(request: Req) -> list[tuple[int, int, int]]:
    """Return ``(image_hash, start, end_inclusive)`` per image run (SGLang's item offsets)."""
    spans, pos = [], 0
    for part in request.parts:
        if isinstance(part, Image):
            spans.append((part.image_hash, pos, pos + part.length - 1))
            pos += part.length
        else:
            pos += 1
    return spans


def chat_turn(previous: Req, answer: list[int], new_parts: list[Part], rid: str, **kw: Any) -> Req:
    """Return the next chat turn: ``previous``'s prompt, its answer, then ``new_parts``, arriving after it."""
    return Req(rid, (*previous.parts, *answer, *new_parts), after=previous.rid, **kw)


def text_requests(lengths: list[int], arrivals: list[int] | None = None) -> list[Req]:
    """Return text-only requests ``r0``, ``r1``, ... of ``lengths`` tokens, arriving at ``arrivals`` (default step 0),
    every token distinct so no two share a prefix."""
    requests, start = [], 0
    for k, length in enumerate(lengths):
        arrival = 0 if arrivals is None else arrivals[k]
        requests.append(Req(f"r{k}", tuple(range(start, start + length)), arrival=arrival))
        start += length
    return requests
