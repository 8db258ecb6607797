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
    return "\n".join(lines)


__all__ = ["request_table", "call_lines", "verdict_text", "whatif_text"]
