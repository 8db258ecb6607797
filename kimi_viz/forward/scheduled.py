"""The scheduler's two steps before a pass it formed, as the report shows them: the radix prefix match, the admission.

:func:`scheduler_steps` turns the :class:`~kimi_viz.scheduler.event_loop.SchedulerStep` the scheduler's
model recorded while it formed a pass (each waiting request's
:class:`~kimi_viz.scheduler.prefix.PrefixMatch`, the adder's :class:`~kimi_viz.scheduler.policy.PassForm`:
budgets, offers, the cut) into the two :class:`~kimi_viz.split.trace.Step` s the stepper shows before
the forward pass's own:

* ``prefix_match`` (``docs/scheduler-notes.md`` §3, ``docs/hybrid-tree-notes.md`` §2): per request of
  the pass, its padded ids' match in the radix tree (over a key capped at ``len - 1`` and floored to the
  page, the tokens shared floored to the page: the FULL match), cut back to the deepest saved
  linear-attention state on it (with what a plain tree would match, and the branching point where the
  request saves its own) — tokens ``[0, matched)`` come from the cache, and an image whose pad run lies inside
  them never reaches the call; where the match ends inside an image's pad run, the image overlaps
  the window and is looked up in the embedding cache. The chunked request is not matched again: it
  continues from its last window's end.
* ``admission`` (§2, §6): the budgets the adder starts with, the chunked request first, then each
  waiting request in the policy's order: its window, what it charged (its extend ceiled to the page),
  whether it was cut; the requests the walk never reached; the budgets left.

The numbers are the scheduler model's own; only the images' positions come from the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..scheduler.event_loop import Pressure, SchedulerStep
from ..scheduler.policy import Budget, Offer
from ..scheduler.prefix import PrefixMatch
from ..split.step_records import JsonObject
from ..split.trace import Step
from .step_records import PassAdmission, RadixMatches
from .trace import ADMISSION, PREFIX_MATCH, ForwardItem, ForwardRequest


def scheduler_steps(batch: Sequence[ForwardRequest], scheduled: SchedulerStep) -> list[Step]:
    """Return the prefix-match and admission steps of a pass the scheduler's model formed (``scheduled``)."""
    return [_match_step(batch, scheduled), _admission_step(scheduled)]


def _image(item: ForwardItem) -> JsonObject:
    return {"image": item.source.image, "label": item.source.label, "offsets": list(item.offsets)}


def _pads(item: ForwardItem) -> str:
    return f"{item.source.label} (pads {item.offsets[0]}..{item.offsets[1]})"


def _request_match(request: ForwardRequest, scheduled: SchedulerStep) -> tuple[JsonObject, str]:
    """Return one request's entry of the prefix-match step and its sentence."""
    match = scheduled.match_of(request.rid)
    matched = request.matched
    inside = [i for i in request.items if i.cut(matched) == "cached"]
    straddling = next((i for i in request.items if i.cut(matched) == "cut"), None)
    entry: JsonObject = {"rid": request.rid, "continues_chunk": match is None}
    if match is None:
        entry |= {"matched": matched, "prefix": request.prefix}
        first = f"its radix prefix was [0, {matched})" if matched else "nothing was cached"
        words = (
            f"{request.rid} continues its chunked prefill from {request.prefix}, not matched again "
            f"({first} when first admitted)."
        )
    else:
        entry |= {"padded_length": match.length, "key": match.key, "shared": match.shared, "matched": matched}
        entry |= {"full": match.full, "plain": match.plain, "branching": match.branching, "prefix": request.prefix}
        words = (
            f"{request.rid}: {match.length} padded ids, key capped at {max(match.length - 1, 0)} and floored to the "
            f"page: {match.key}; the tree shares {match.shared}, floored to the page: {match.full}"
            + _cut_back_words(match, scheduled)
            + (f" — tokens [0, {matched}) are cached, never prefilled." if matched else " — nothing cached.")
        )
    entry["cached_images"] = [_image(i) for i in inside]
    entry["match_ends_inside"] = None if straddling is None else _image(straddling)
    if inside:
        words += f" Inside it, never reaching the call: {', '.join(_pads(i) for i in inside)}."
    if straddling is not None:
        words += (
            f" The prefix ends inside {_pads(straddling)} at {matched}: its pads {matched}..{straddling.offsets[1]} "
            "are prefilled, so the image is looked up in the embedding cache"
            + (" (the cut back re-opened it)." if _reopened(straddling, match) else ".")
        )
    return entry, words


def _reopened(item: ForwardItem, match: PrefixMatch | None) -> bool:
    """Return True when a plain tree's match would have held the whole image and the hybrid tree's cut exposed it."""
    return match is not None and item.cut(max(match.full, match.plain or 0)) == "cached"


def _cut_back_words(match: PrefixMatch, scheduled: SchedulerStep) -> str:
    """Return what the hybrid tree made of the FULL match: where it was cut back, what a plain tree would match."""
    if not scheduled.server.hybrid:
        return ""
    words = ""
    if match.plain is not None and match.plain > match.full:
        words += (
            f" (a plain radix tree would match {match.plain}: earlier requests' KV entered this tree only up to "
            "their saved states)"
        )
    if match.matched < match.full:
        saved = f"the deepest saved state is at {match.matched}" if match.matched else "no saved state on it"
        words += f"; Kimi-K3's hybrid tree ({scheduled.server.strategy}) cuts it back: {saved}"
    elif match.full:
        words += f"; a state is saved at {match.full}"
    if match.branching is not None:
        words += f"; it will save its own state at the branching point {match.branching}"
    return words


def _match_step(batch: Sequence[ForwardRequest], scheduled: SchedulerStep) -> Step:
    """Return the prefix-match step: each request's radix match and the images inside it."""
    entries, words = zip(*(_request_match(r, scheduled) for r in batch)) if batch else ((), ())
    page = scheduled.form.start.page_size
    return Step(
        PREFIX_MATCH,
        "The radix prefix each request starts from",
        "scheduler §3",
        RadixMatches(scheduled.policy, page, list(entries)),
        " ".join(words),
    )


def _budget(budget: Budget) -> JsonObject:
    return {"rem_input_tokens": budget.rem_input, "rem_chunk_tokens": budget.rem_chunk, "page_size": budget.page_size}


def _budget_words(budget: Budget) -> str:
    chunk = "off" if budget.rem_chunk is None else str(budget.rem_chunk)
    return f"input {budget.rem_input}, chunk {chunk}"


def _offer(offer: Offer) -> tuple[JsonObject, str]:
    """Return one offer's entry of the admission step and its sentence."""
    window = offer.admission.window
    remaining = offer.length - offer.prefix_len
    entry: JsonObject = {
        "rid": offer.rid,
        "chunked": offer.chunked,
        "prefix": offer.prefix_len,
        "remaining": remaining,
        "window": None if window is None else [window.prefix_len, window.prefix_len + window.extend_input_len],
        "charged": offer.charged,
        "cut": offer.admission.cut,
        "result": offer.admission.result,
        "budget_after": _budget(offer.admission.budget),
    }
    who = f"{offer.rid} (the chunked request, first)" if offer.chunked else offer.rid
    if window is None:
        return entry, f"{who}: refused, its {remaining} tokens do not fit ({offer.admission.result})."
    lo, hi = window.prefix_len, window.prefix_len + window.extend_input_len
    words = (
        f"{who}: window [{lo}, {hi}) of its {remaining} remaining tokens, charged {offer.charged} "
        f"(page-ceiled){', cut at the budget' if offer.admission.cut else ''}; "
        f"left: {_budget_words(offer.admission.budget)}."
    )
    return entry, words


def _admission_step(scheduled: SchedulerStep) -> Step:
    """Return the admission step: the budgets, every offer in order, who was never offered and who was cut."""
    form = scheduled.form
    entries, words = zip(*(_offer(o) for o in form.offers)) if form.offers else ((), ())
    before = scheduled.rules.budget_state_before_candidate
    decode = f", less {scheduled.mixed_rows} decode rows" if scheduled.mixed_rows else ""
    note = [
        f"Policy {scheduled.policy}. Budgets at the start: {_budget_words(form.start)} "
        f"(pages of {form.start.page_size}{decode})."
    ]
    note += list(words)
    if form.unoffered:
        when = "before each candidate" if before else "after each admission"
        note.append(f"Never offered (the budget was spent; budget_state() {when}): {', '.join(form.unoffered)}.")
    note.append(f"Cut: {form.chunked}, continued first next pass." if form.chunked else "Nobody cut.")
    if form.stop == "no_token":
        left = "" if form.rem_total is None else f" (rem_total_tokens left: {form.rem_total:g})"
        note.append(f"The walk stopped on NO_TOKEN: the KV pool cannot take the next request{left}.")
    elif form.stop == "rows":
        note.append("The walk stopped: no request row is left (--max-running-requests).")
    if scheduled.pressure is not None and not scheduled.pressure.quiet:
        note.append(f"Memory since the previous pass: {memory_sentence(scheduled.pressure)}.")
    return Step(
        ADMISSION,
        "Admit the pass: budgets, windows, the cut",
        "scheduler §2",
        PassAdmission(
            scheduled.policy,
            before,
            _budget(form.start),
            list(entries),
            list(form.unoffered),
            form.chunked,
            _budget(form.budget),
            form.stop,
            form.rem_total,
            None if scheduled.pressure is None else _pressure(scheduled.pressure),
        ),
        " ".join(note),
    )


def memory_sentence(pressure: Pressure) -> str:
    """Return what memory did before a pass, in words ("" when nothing)."""
    parts = [f"{rid} retracted at step {step}" for step, rid in pressure.retracted]
    if pressure.evicted_tokens or pressure.evicted_states:
        whose = ", ".join(f"{rid}'s" for rid in pressure.prefix_evicted)
        among = f" ({whose} cached prefix among them)" if whose else ""
        parts.append(
            f"the tree evicted {pressure.evicted_tokens} KV tokens and {pressure.evicted_states} saved "
            f"state{'' if pressure.evicted_states == 1 else 's'}{among}"
        )
    if pressure.refused_steps:
        parts.append(no_token_phrase(pressure.refused_steps))
    return "; ".join(parts)


def no_token_phrase(steps: Sequence[int]) -> str:
    """Return the words for the steps whose adder walk stopped on NO_TOKEN ("NO_TOKEN held prefill back at 2 steps
    (383, 461)"), the first four steps named."""
    shown = ", ".join(str(step) for step in steps[:4]) + (", …" if len(steps) > 4 else "")
    return f"NO_TOKEN held prefill back at {len(steps)} step{'s' if len(steps) > 1 else ''} ({shown})"


def _pressure(pressure: Pressure) -> JsonObject:
    return {
        "retracted": [{"step": step, "rid": rid} for step, rid in pressure.retracted],
        "evicted_tokens": pressure.evicted_tokens,
        "evicted_states": pressure.evicted_states,
        "no_token_steps": list(pressure.refused_steps),
        "prefix_evicted": list(pressure.prefix_evicted),
    }


__all__ = ["memory_sentence", "no_token_phrase", "scheduler_steps"]
