"""Answers as a person reads them: terminal text and tables, for every question, its sweep and its shrinking.

:func:`answer_text` is what ``kimi-viz whatif`` prints for any question (a request's items and call, a
workload's passes, a chat request's checks and prompt, then the verdict, why and the fix);
:func:`sweep_text` and :func:`minimized_text` print a sweep and a shrunk failure. Tables are
:class:`kimi_viz.report.Table` values (HTML in Jupyter). Every status is shown as the one table
(``STATUS_STYLES``) shows it. Presenters import the answer; the answer imports none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..answer import Answer, Cell, ChatReplay, Minimized, PairHint, PairSweep, RequestReplay, Sweep
from ..forward.trace import ForwardTrace
from ..forward.workload_replay import LoadResult
from ..request.sides import BuiltRequest
from ..request.workload import Request
from ..split.verdict import Status, format_verdict
from .text_table import Table

if TYPE_CHECKING:  # pragma: no cover - a chat request's checks load only when one is asked
    from ..request.checks import RequestOutcome


def _resize_text(resize: dict | None) -> str | None:
    if not resize:
        return None
    return (
        f"{resize['new_width']}×{resize['new_height']} +{resize['pad_width']}/+{resize['pad_height']}, "
        f"{resize['num_tokens']} tokens"
    )


def request_table(built: BuiltRequest) -> Table:
    """Return one row per request image: size and mode, the grid keys it carries, backend, resize_config, form."""
    rows = []
    for k, (image, item, decision) in enumerate(zip(built.images, built.items, built.decisions)):
        feature = item.feature
        form = "eager rows" if item.deferred is None else f"raw ({feature.layout})"
        rows.append(
            [
                k,
                image.label,
                f"{image.width}×{image.height} {image.mode}" + (" +alpha" if image.has_alpha else ""),
                "; ".join(f"{key}={v[0]}" for key, v in item.grids.items()),
                item.backend or "—",
                _resize_text((item.deferred or {}).get("resize_config")),
                f"{form} {list(feature.shape)}",
                decision.reason,
            ]
        )
    return Table(
        ["image", "file", "size", "grid keys", "backend", "resize_config", "feature", "why this form"],
        rows,
        caption=f"items built by SGLang {built.request_side.label}'s "
        + ("EPD encoder" if built.settings.epd else f"request side ({built.path} path, transport {built.transport})"),
    )


def call_lines(replayed: RequestReplay) -> list[str]:
    """Return the lines saying which images reach get_image_feature and, for EPD cpu, who preprocessed what."""
    call = replayed.call
    lines = []
    if call.called:
        lines.append(
            f"get_image_feature receives request images {call.positions} (as items 0..{len(call.positions) - 1})"
        )
    lines += [f"  image {s.image} skipped: {s.reason}" for s in call.skipped]
    if call.rank_batches is not None and call.owners is not None:
        local = [
            [call.positions[k] for k, it in enumerate(b.items) if it.local_preprocessed] for b in call.rank_batches
        ]
        lines.append(
            f"EPD owner ranks over the whole encode batch (materialize_for_rank): {call.owners}; "
            f"preprocessed on the encoder per rank: {local}"
        )
    return lines


def verdict_lines(answer: Answer) -> list[str]:
    """Return the verdict as the CLI prints it, or the status's badge with what was raised when no call decides."""
    if answer.verdict is not None:
        return [format_verdict(answer.verdict, fixes=answer.fixes)]
    style = answer.style
    if answer.status is Status.NO_CALL:
        return [f"{style.symbol} {style.badge} — nothing reaches get_image_feature"]
    error = answer.error
    return [f"{style.symbol} {style.badge} — {error if error is not None else 'no exception'}"]


def fix_lines(answer: Answer) -> list[str]:
    """Return the fixing release when no verdict already says it, or that no known release fixes it."""
    if answer.fixed_in is not None and answer.verdict is None:
        return [answer.fixed_in.text]
    if answer.fix is not None and answer.fixed_in is None:
        return ["fixed in: no known release runs this clean"]
    return []


def hint_text(hint: PairHint) -> str:
    """Return the warning a clean request's answer ends with: the smallest failing pair, the error, the fix."""
    answer = hint.answer
    ranks = answer.failing_ranks
    where = f" on rank {ranks[0]}" if len(ranks) == 1 else (f" on ranks {ranks}" if ranks else "")
    fix = "" if answer.fixed_in is None else f" Fixed in {answer.fixed_in.release}: {answer.fixed_in.change}."
    return (
        "under load: clean alone, but it fails once it shares a prefill batch with another request. Smallest "
        f"failing pair: this request and {hint.partner.label} ({hint.partner.width}×{hint.partner.height}) "
        f"arriving together: their images reach get_image_feature in one call and SGLang raises {answer.error}"
        f"{where} of {answer.tp_size}, killing the scheduler with every request it holds.{fix} "
        f"Check it with: {hint.command}"
    )


def _request_lines(answer: Answer, replayed: RequestReplay) -> list[str]:
    """Return a lone request's text: the question, the items built, the call."""
    built = replayed.built
    n = len(built.images)
    lines = [
        f"== what if: {n} image{'s' if n != 1 else ''} on SGLang {answer.release.version} "
        f"(request side {built.request_side.label}) at attention-TP {answer.tp_size} ==",
        f"settings: {built.settings.sglang_flags()}",
    ]
    lines += [f"note: {t}" for t in (*answer.notes, *built.notes)]
    lines.append(repr(request_table(built)))
    return lines + call_lines(replayed)


def _look_at(answer: Answer, replayed: RequestReplay) -> list[str]:
    """Return the line naming the image to look at in a failing request."""
    culprit = replayed.culprit(answer.verdict)
    if culprit is None or not answer.failed:
        return []
    item = replayed.call.positions.index(culprit)
    return [f"look at: image {culprit} ({replayed.built.images[culprit].label}; item {item} of the call)"]


def _turn(request: Request) -> str:
    """Return how a request starts: the turn it continues, a shared system prompt, or nothing."""
    if request.continues is not None:
        return f"after {request.continues}"
    return f"system {request.system}" if request.system else "—"


def workload_table(result: LoadResult) -> Table:
    """Return one row per request: id, how it starts, images (a later turn's re-sent ones too), its own text,
    arrival step, output, prompt length, radix prefix and pad runs."""
    rows = [
        [
            request.rid,
            _turn(request),
            ", ".join(image.label for image in built.images),
            f"{request.before}/{','.join(map(str, request.gaps)) or request.between}/{request.after}",
            request.arrival,
            request.output,
            prompt.length,
            matched or "—",
            ", ".join(f"{a}..{b}" for a, b in prompt.pad_runs),
        ]
        for request, built, prompt, matched in zip(
            result.workload.requests, result.built, result.prompts, result.matched
        )
    ]
    return Table(
        [
            "request",
            "starts",
            "images",
            "own text before/between/after",
            "arrival step",
            "output",
            "prompt tokens",
            "radix prefix",
            "<|media_pad|> runs",
        ],
        rows,
        caption="the workload: each request's prompt as the server receives it (a later turn re-sends the earlier "
        "ones), and the prefix the radix cache gave it",
    )


def supply_lines(result: LoadResult) -> list[str]:
    """Return one line per image: whether the radix prefix, the embedding cache or a call supplied its rows."""
    return ["where each image's rows came from:"] + [f"  {s.describe()}" for s in result.image_supplies()]


def flag_lines(answer: Answer) -> list[str]:
    """Return what changing one scheduler flag does to a workload's outcome (nothing when not searched)."""
    search = answer.flags
    if search is None:
        return []
    if not search.changes:
        return [f"no single scheduler flag changes the outcome (tried: {', '.join(search.tried)})"]
    return ["which flag changes the outcome:"] + [f"  {c.flag}: {c.status.style.mark}" for c in search.changes]


_LOOKUP_WORDS = {
    "miss": "miss",
    "hit": "cache hit",
    "stale-hit": "cached, other length, used",
    "discarded": "stale entry discarded",
    "duplicate": "duplicate",
    "found": "found",
}


def pass_table(result: LoadResult) -> Table:
    """Return one row per prefill pass: its windows, the path, each call's items, the cache, warnings and outcome."""
    rows = [
        [
            k + 1,
            "; ".join(
                f"{w.rid} [{w.prefix}, {w.prefix + w.extend})"
                + (" after radix prefix" if w.prefix == w.matched > 0 else "")
                for w in trace.batch
                if w.extend
            ),
            trace.path,
            " | ".join(
                ", ".join(f"{i.source.rid}:{i.source.image} ({i.tokens})" for i in call.items) for call in trace.calls
            )
            or "—",
            ", ".join(
                f"{u.source.rid}:{u.source.image} {_LOOKUP_WORDS[u.outcome]}"
                for u in trace.lookups
                if u.outcome != "miss"
            )
            or "—",
            len(trace.warnings),
            "ok" if trace.error is None else f"{trace.error.type} ({trace.stage})",
        ]
        for k, trace in enumerate(result.passes)
    ]
    return Table(
        [
            "pass",
            "windows [prefix, prefix+extend)",
            "path",
            "get_image_feature items (tokens)",
            "cache",
            "warnings",
            "outcome",
        ],
        rows,
        caption="prefill passes: requests prefilled together share one get_image_feature call per pass",
    )


def _pass_lines(trace: ForwardTrace, k: int) -> list[str]:
    """Return a pass's warnings and error, each on a line."""
    lines = [f"pass {k + 1} warning: {text}" for text in trace.warnings]
    if trace.error is not None:
        lines.append(f"pass {k + 1} raises {trace.error.type}: {trace.error.message}")
    return lines


def _load_lines(answer: Answer, result: LoadResult) -> list[str]:
    """Return a workload's text: the requests, the encode server, every pass, and the failing call's items."""
    workload = result.workload
    n = len(workload.requests)
    together = (
        len({r.arrival for r in workload.requests}) == 1
        and n > 1
        and all(r.continues is None for r in workload.requests)
    )
    lines = [
        f"== what if: {n} request{'s' if n != 1 else ''} ({workload.images} image{'s' if workload.images != 1 else ''}"
        f"{', arriving together' if together else ''}) on SGLang {result.release.version} "
        f"at attention-TP {result.tp_size} ==",
        f"settings: {result.settings.sglang_flags()} {result.load.flags()}",
    ]
    lines += [f"note: {t}" for t in answer.notes]
    lines.append(repr(workload_table(result)))
    for run in result.encoder_runs:
        outcome = "ok" if run.error is None else str(run.error)
        lines.append(
            f"encode server, request {workload.requests[run.request].rid}: rows per image {run.tokens}; {outcome}"
        )
    if result.passes:
        lines.append(repr(pass_table(result)))
    for k, trace in enumerate(result.passes):
        lines += _pass_lines(trace, k)
    skipped = len(result.plans) - len(result.passes)
    if skipped > 0:
        lines.append(f"{skipped} later pass(es) never run: the scheduler process died with the error above")
    lines += supply_lines(result)
    lines.append("")
    call = result.failing_call()
    if answer.verdict is not None and call is not None:
        mapping = ", ".join(
            f"item {k} = {i.source.rid}'s image {i.source.image} ({i.source.label})" for k, i in enumerate(call.items)
        )
        lines.append(f"the verdict numbers images as the failing call's items: {mapping}")
    return lines


def advice(outcome: RequestOutcome) -> str | None:
    """Return what to change in the request so the request side accepts it, or None when it does."""
    error = outcome.error
    if error is None:
        return None
    request, n, m = outcome.request, len(outcome.request.images), outcome.rendered.placeholders
    if outcome.raised_check == "one-to-one":
        if m > n:
            return (
                f"remove the {m - n} extra <|media_pad|> (written in the text or in input_ids): SGLang places one "
                "image at every <|media_pad|> id"
            )
        if request.entry == "chat":
            return (
                "send each image as an image_url part and serve the checkpoint's tokenizer code, whose "
                "apply_chat_template puts SGLang's image_prompts (<|media_pad|>) at the image parts"
            )
        return f"put one <|media_pad|> where each image goes ({n} in all); on /generate SGLang adds none itself"
    if outcome.raised_check == "caller identities":
        return "drop mm_hashes: from 0.5.23 the image identities come from the processor only"
    return "send images only: Kimi-K3's request side refuses video and audio data"


def check_table(outcome: RequestOutcome) -> Table:
    """Return the request side's checks in order: name, where, outcome, detail."""
    marks = {"passed": "✓ passed", "raised": "✗ raised", "skipped": "· skipped"}
    return Table(
        ["check", "where (sglang/srt/)", "outcome", "detail"],
        [[c.name, c.where, marks[c.outcome], c.detail] for c in outcome.checks],
        caption=f"SGLang {outcome.release.version}'s request side, in order",
    )


def prompt_table(outcome: RequestOutcome) -> Table:
    """Return one row per image: its original size text, where its block sits, its pad run and count."""
    rows = [
        [s.image, s.label, s.caption_text, s.begin, s.content, f"{s.pads[0]}..{s.pads[1]}", s.pad_count, s.end]
        for s in outcome.media_spans()
    ]
    length = "" if outcome.prompt is None else f"{outcome.prompt.length} tokens"
    return Table(
        ["image", "source", "size text", "<|media_begin|>", "<|media_content|>", "<|media_pad|> run", "pads"]
        + ["<|media_end|>"],
        rows,
        caption=f"the prompt the request side builds ({length}; text {outcome.rendered.by}, media tokens exact)",
    )


def _chat_lines(answer: Answer, replayed: ChatReplay) -> list[str]:
    """Return a client's request's text: the request, its rendering and checks, the prompt, then its workload."""
    outcome = replayed.outcome
    request, rendered = outcome.request, outcome.rendered
    lines = [
        f"== what if: the request {request.source} on SGLang {outcome.release.version} at attention-TP "
        f"{answer.tp_size} ==",
        f"request: {request.summary()}",
    ]
    if request.entry == "chat":
        lines.append(f"renderer (the checkpoint's tokenizer code): {outcome.renderer.describe()}")
    lines.append(
        f"ids handed to process_mm_data_async: {rendered.length} ({rendered.by}), "
        f"{rendered.placeholders} <|media_pad|> id(s)"
        + (f" from {', '.join(rendered.pad_origins())}" if rendered.placeholders else "")
    )
    if request.ignored:
        lines.append(f"keys not modelled (they change no check): {', '.join(request.ignored)}")
    lines += [f"note: {n}" for n in outcome.notes]
    lines.append(repr(check_table(outcome)))
    if outcome.error is not None:
        tip = advice(outcome)
        return [*lines, "", f"✗ REQUEST REFUSED — {outcome.error.error}"] + (
            [f"answer: {answer.why}"] + ([f"to fix: {tip}"] if tip else [])
        )
    if outcome.media_spans():
        lines.append(repr(prompt_table(outcome)))
    if replayed.load is None:
        return lines
    lines += ["", "then, the request prefilled (the call, the deferred split, the splice):"]
    return lines + _load_lines(answer, replayed.load)


def answer_text(answer: Answer) -> str:
    """Return what ``kimi-viz whatif`` prints for any question: the question, its replay, the verdict, why, the fix."""
    request, chat, workload = answer.request, answer.chat, answer.workload
    if request is not None:
        lines = _request_lines(answer, request) + [""]
    elif chat is not None:
        lines = _chat_lines(answer, chat)
        if chat.outcome.error is not None:
            return "\n".join(lines)
        lines += [""] if chat.load is None else []
    elif workload is not None:
        lines = _load_lines(answer, workload)
    else:
        lines = []
    lines += verdict_lines(answer)
    lines.append(f"answer: {answer.why}")
    lines += _look_at(answer, request) if request is not None else fix_lines(answer)
    lines += flag_lines(answer)
    lines += server_lines(answer)
    if answer.under_load is not None:
        lines += ["", f"⚠ {hint_text(answer.under_load)}"]
    return "\n".join(lines)


def server_lines(answer: Answer) -> list[str]:
    """Return the server read from a launch command or a log (:meth:`ServerReport.lines`), or nothing."""
    server = answer.server
    if server is None or not server.from_inputs:
        return []
    return ["", *server.lines(clean=not answer.status.failed)]


def failing_pass(answer: Answer | None) -> int | None:
    """Return a workload's failing pass as a sweep cell shows it (a chat request's is said in its own answer)."""
    workload = None if answer is None or answer.kind != "workload" else answer.workload
    return None if workload is None else workload.failing_pass


def _cell_text(sweep: Sweep, cell_index: int) -> str:
    """Return a sweep cell as the table shows it: the status's mark, the error's letter and ranks, or the class."""
    cell = sweep.cells[cell_index]
    mark = cell.status.style.mark
    answer = cell.answer
    if answer is not None and cell.error is not None:
        mark = cell.status.style.symbol
    if answer is None or cell.error is None:
        if cell.status is Status.SILENT_MISMATCH and answer is not None and answer.verdict is not None:
            return f"{mark} {answer.verdict.divergence.scenario_class}"
        return mark
    ranks = answer.failing_ranks
    where = "" if not ranks else (f" rank {ranks[0]}" if len(ranks) == 1 else f" ranks {','.join(map(str, ranks))}")
    stage = f" ({answer.stage})" if answer.stage in ("request side", "encode server") else ""
    passes = failing_pass(answer)
    at = "" if passes is None else f" pass {passes + 1}"
    return f"{mark} {sweep.legend[cell.error]}{where}{at}{stage}"


def sweep_table(sweep: Sweep) -> Table:
    """Return the sweep: one row per release group (with its code path), one column per TP size."""
    rows, marks = [], []
    for group in sweep.rows:
        index = [k for k, c in enumerate(sweep.cells) if c.releases == group]
        label = sweep.cells[index[0]].label
        rows.append([label, group[0].code_path] + [_cell_text(sweep, k) for k in index])
        marks.append(any(sweep.cells[k].status.failed for k in index))
    return Table(
        ["release", "code path"] + [f"TP {t}" for t in sweep.tp_sizes], rows, caption=sweep.subject, highlight=marks
    )


def _tp_text(failing: list[int], tp_sizes: tuple[int, ...]) -> str:
    """Return ``every TP size``, ``TP ≥ 2`` when every size from the lowest failing one fails, else the sizes."""
    low = min(failing)
    if sorted(failing) == sorted(tp_sizes) and len(failing) > 1:
        return "every TP size"
    if [t for t in tp_sizes if t >= low] == sorted(failing) and len(failing) > 1:
        return f"TP ≥ {low}"
    return "TP " + ", ".join(map(str, sorted(failing)))


def sweep_summary(sweep: Sweep) -> str:
    """Return one sentence, e.g. ``"fails on 0.5.18 at TP ≥ 2 (A); clean from 0.5.19"``."""
    parts, last_bad, legend = [], -1, sweep.legend
    for i, group in enumerate(sweep.rows):
        cells = [c for c in sweep.cells if c.releases == group]
        label = cells[0].label
        failing = [c.tp_size for c in cells if c.error is not None]
        silent = [c.tp_size for c in cells if c.status is Status.SILENT_MISMATCH]
        if failing:
            letters = sorted({legend[c.error] for c in cells if c.error is not None})
            parts.append(f"fails on {label} at {_tp_text(failing, sweep.tp_sizes)} ({', '.join(letters)})")
            last_bad = i
        if silent:
            parts.append(f"silent mismatch on {label} at {_tp_text(silent, sweep.tp_sizes)}")
            last_bad = i
        if all(c.status is Status.NOT_APPLICABLE for c in cells):
            parts.append(f"{label} refuses these settings" + (f" ({cells[0].reason})" if cells[0].reason else ""))
    if last_bad < 0:
        return "clean on every release and attention-TP size" + ("; " + "; ".join(parts) if parts else "")
    rows = sweep.rows
    parts.append(
        f"clean from {rows[last_bad + 1][0].version}"
        if last_bad + 1 < len(rows)
        else "not fixed in any release kimi-viz knows"
    )
    return "; ".join(parts)


def sweep_text(sweep: Sweep) -> str:
    """Return the sweep as terminal text: the table, each error's letter, the summary, and why per row."""
    lines = [repr(sweep_table(sweep))]
    lines += [f"{letter}: {error}" for error, letter in sweep.legend.items()]
    lines.append(f"summary: {sweep_summary(sweep)}")
    for group in sweep.rows:
        cells = [c for c in sweep.cells if c.releases == group]
        pick = next((c for c in cells if c.status not in (Status.CLEAN, Status.NO_CALL)), cells[-1])
        lines.append(
            f"why: {pick.label} (TP {pick.tp_size}): {pick.reason if pick.answer is None else pick.answer.why}"
        )
    return "\n".join(lines)


def pairs_table(swept: PairSweep) -> Table:
    """Return one row per pair that fails somewhere: the two images, the releases and TP sizes, the error."""
    rows = []
    by_pair: dict[tuple[int, int], list[Cell]] = {}
    for pair, cell in swept.failing():
        by_pair.setdefault(pair, []).append(cell)
    for (a, b), cells in by_pair.items():
        where = ", ".join(f"{c.label} TP {c.tp_size}" for c in cells)
        error = cells[0].error
        rows.append([swept.images[a].label, swept.images[b].label, where, "" if error is None else error.type])
    return Table(
        ["request r1", "request r2", "fails on", "error"],
        rows,
        caption=f"{len(by_pair)} of {len(swept.pairs)} pairs fail when the two requests are prefilled together",
    )


def minimized_table(found: Minimized) -> Table:
    """Return one row per original image: its request, kept or dropped, and whether it is the one to look at."""
    kept = set(found.kept)
    culprit = culprit_unit(found)
    rows = [
        [
            unit.request or "",
            unit.position,
            unit.label,
            "" if unit.image is None else f"{unit.image.width}×{unit.image.height}",
            "kept" if k in kept else "dropped",
            "look at this one" if k == culprit else "",
        ]
        for k, unit in enumerate(found.units)
    ]
    caption = "no failure to shrink" if found.target is None else f"keeps {found.target}"
    return Table(
        ["request", "image", "file", "size", "minimal set", ""],
        rows,
        caption=caption,
        highlight=[k == culprit for k in range(len(found.units))],
    )


def culprit_unit(found: Minimized) -> int | None:
    """Return the unit to look at: the minimal request's first diverging image, or None."""
    request = found.answer.request
    if found.target is None or request is None:
        return None
    local = request.culprit(found.answer.verdict)
    return None if local is None else found.kept[local]


def minimized_text(found: Minimized) -> str:
    """Return the result as ``kimi-viz whatif --minimize`` prints it."""
    answer = found.answer
    where = f"SGLang {answer.release.version} at attention-TP {answer.tp_size}"
    if found.target is None:
        return f"nothing fails on {where}: there is no failure to shrink"
    names = [
        f"{found.units[k].label}" + (f" of {found.units[k].request}" if found.units[k].request else "")
        for k in found.kept
    ]
    lines = [f"== minimal failing question on {where} ==", f"keeps the failure {found.target}"]
    if not found.units:  # a workload of conversation turns only: each turn re-sends the earlier images
        lines.append("nothing to shrink: a conversation's turns are kept whole, and no other request carries images")
    elif not found.kept:
        lines.append(
            f"minimal set: none of the {len(found.units)} images that can go: the conversation's turns, kept whole, "
            "fail by themselves"
        )
    else:
        lines += [
            f"minimal set: {len(found.kept)} of {len(found.units)} images, in this order: " + ", ".join(names),
            f"search: {found.tests} answers (ddmin, order kept); every kept image is needed",
        ]
    if found.orders:
        passing = [list(order) for order, fails in found.orders if not fails]
        failing = len(found.orders) - len(passing)
        lines.append(
            f"orders: {failing} of {len(found.orders)} orders fail"
            + (f"; passing orders: {passing[:6]}" if passing else " (the order does not matter)")
        )
    lines += [repr(minimized_table(found))] if found.units else []
    lines.append(f"why: {answer.why}")
    return "\n".join(lines)


__all__ = [
    "request_table",
    "call_lines",
    "verdict_lines",
    "hint_text",
    "workload_table",
    "pass_table",
    "check_table",
    "prompt_table",
    "advice",
    "answer_text",
    "failing_pass",
    "sweep_table",
    "sweep_summary",
    "sweep_text",
    "pairs_table",
    "minimized_table",
    "culprit_unit",
    "minimized_text",
]
