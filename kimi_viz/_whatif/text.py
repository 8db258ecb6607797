"""Tables and terminal text of a what-if: the items a release built, the call, the verdict and why.

:func:`request_table` shows, per request image, exactly what the request side decided (grid keys and
values, backend, ``resize_config``, raw or eager, and the byte rule); :func:`whatif_text` is what
``kimi-viz whatif`` prints. Tables are :class:`kimi_viz.report.Table` values (HTML in Jupyter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..report.tables import Table
from ..request.sides import BuiltRequest

if TYPE_CHECKING:  # pragma: no cover
    from ..schedule.trace import ForwardTrace
    from .load import LoadAnswer
    from .run import WhatIf


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


def call_lines(result: WhatIf) -> list[str]:
    """Return the lines saying which images reach get_image_feature and, for EPD cpu, who preprocessed what."""
    call = result.call
    lines = []
    if call.called:
        lines.append(
            f"get_image_feature receives request images {call.positions} (as items 0..{len(call.positions) - 1})"
        )
    for s in call.skipped:
        lines.append(f"  image {s.image} skipped: {s.reason}")
    if call.rank_batches is not None and call.owners is not None:
        local = [
            [call.positions[k] for k, it in enumerate(b.items) if it.local_preprocessed] for b in call.rank_batches
        ]
        lines.append(
            f"EPD owner ranks over the whole encode batch (materialize_for_rank): {call.owners}; "
            f"preprocessed on the encoder per rank: {local}"
        )
    return lines


def verdict_text(result: WhatIf) -> str:
    """Return the verdict as the CLI prints it (or a sentence when nothing is called)."""
    from ..split.verdict import format_verdict

    if result.verdict is None:
        return "✓ NO CALL — nothing reaches get_image_feature"
    return format_verdict(result.verdict)


def whatif_text(result: WhatIf) -> str:
    """Return what ``kimi-viz whatif`` prints: the question, the items, the call, the verdict and why."""
    built = result.built
    n = len(built.images)
    lines = [
        f"== what if: {n} image{'s' if n != 1 else ''} on SGLang {result.release.version} "
        f"(request side {built.request_side.label}) at attention-TP {result.tp_size} ==",
        f"settings: {built.settings.sglang_flags()}",
    ]
    lines += [f"note: {t}" for t in result.notes + built.notes]
    lines.append(repr(request_table(built)))
    lines += call_lines(result)
    lines.append("")
    lines.append(verdict_text(result))
    lines.append(f"answer: {result.why}")
    culprit = result.culprit()
    if culprit is not None and result.failed:
        item = result.call.positions.index(culprit)
        lines.append(f"look at: image {culprit} ({built.images[culprit].label}; item {item} of the call)")
    if result.under_load is not None:
        lines.append("")
        lines.append(f"⚠ {result.under_load.text()}")
    return "\n".join(lines)


def workload_table(answer: LoadAnswer) -> Table:
    """Return one row per request: id, images, text before/between/after, arrival, prompt length, pad runs."""
    result = answer.result
    rows = []
    for request, prompt in zip(result.workload.requests, result.prompts):
        rows.append(
            [
                request.rid,
                ", ".join(image.label for image in request.images),
                f"{request.before}/{','.join(map(str, request.gaps)) or request.between}/{request.after}",
                request.arrival,
                prompt.length,
                ", ".join(f"{a}..{b}" for a, b in prompt.pad_runs),
            ]
        )
    return Table(
        ["request", "images", "text before/between/after", "arrival", "prompt tokens", "<|media_pad|> runs"],
        rows,
        caption="the workload: each request's prompt as the request side renders it",
    )


_LOOKUP_WORDS = {
    "miss": "miss",
    "hit": "cache hit",
    "stale-hit": "cached, other length, used",
    "discarded": "stale entry discarded",
    "duplicate": "duplicate",
    "found": "found",
}


def pass_table(answer: LoadAnswer) -> Table:
    """Return one row per prefill pass: its windows, the path, each call's items, the cache, warnings and outcome."""
    result = answer.result
    rows = []
    for k, trace in enumerate(result.passes):
        rows.append(
            [
                k + 1,
                "; ".join(f"{w.rid} [{w.prefix}, {w.prefix + w.extend})" for w in trace.batch if w.extend),
                trace.path,
                " | ".join(
                    ", ".join(f"{i.source.rid}:{i.source.image} ({i.tokens})" for i in call.items)
                    for call in trace.calls
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
        )
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
    lines = []
    for text in trace.warnings:
        lines.append(f"pass {k + 1} warning: {text}")
    if trace.error is not None:
        lines.append(f"pass {k + 1} raises {trace.error.type}: {trace.error.message}")
    return lines


def load_text(answer: LoadAnswer) -> str:
    """Return what ``kimi-viz whatif --requests/--together`` prints: the workload, every pass, the outcome, why."""
    from ..split.verdict import format_verdict

    result = answer.result
    workload = result.workload
    n = len(workload.requests)
    arrivals = len({r.arrival for r in workload.requests})
    lines = [
        f"== what if: {n} request{'s' if n != 1 else ''} ({workload.images} image{'s' if workload.images != 1 else ''}"
        f"{', arriving together' if arrivals == 1 and n > 1 else ''}) on SGLang {result.release.version} "
        f"at attention-TP {result.tp_size} ==",
        f"settings: {result.settings.sglang_flags()} {result.load.flags()}",
    ]
    lines += [f"note: {t}" for t in result.notes]
    lines.append(repr(workload_table(answer)))
    if result.encoder_runs:
        for run in result.encoder_runs:
            outcome = "ok" if run.error is None else f"{run.error.type}: {run.error.message}"
            lines.append(
                f"encode server, request {workload.requests[run.request].rid}: rows per image {run.tokens}; {outcome}"
            )
    if result.passes:
        lines.append(repr(pass_table(answer)))
    for k, trace in enumerate(result.passes):
        lines += _pass_lines(trace, k)
    skipped = len(result.plans) - len(result.passes)
    if skipped > 0:
        lines.append(f"{skipped} later pass(es) never run: the scheduler process died with the error above")
    lines.append("")
    verdict = answer.verdict
    call = answer.call
    if verdict is not None and call is not None:
        mapping = ", ".join(
            f"item {k} = {i.source.rid}'s image {i.source.image} ({i.source.label})" for k, i in enumerate(call.items)
        )
        lines.append(f"the verdict numbers images as the failing call's items: {mapping}")
    if verdict is not None:
        lines.append(format_verdict(verdict))
    else:
        status = answer.status.value
        mark = {"clean": "✓ CLEAN", "error-reproduced": "✗ ERROR REPRODUCED", "silent-mismatch": "⚠ SILENT MISMATCH"}
        lines.append(
            f"{mark[status]} — {result.error.type + ': ' + result.error.message if result.error else 'no exception'}"
        )
    lines.append(f"answer: {answer.why}")
    if answer.fixed_in is not None and verdict is None:
        lines.append(answer.fixed_in.text)
    elif answer.fixed_in is None and answer.status.value != "clean":
        lines.append("fixed in: no known release runs this workload clean")
    return "\n".join(lines)


__all__ = ["request_table", "call_lines", "verdict_text", "whatif_text", "workload_table", "pass_table", "load_text"]
