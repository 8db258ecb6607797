"""Triage a manifest: replay it, print the verdict, and write ``report.html``, ``summary.png`` and ``trace.json``.

:func:`triage` reads a manifest (folder or ``.zip``), replays SGLang's deferred split on every
rank (or only the rank the capture recorded) under the recorded code variant, the other one, or
both, and returns a :class:`TriageResult` with the verdict (the schema of :mod:`kimi_viz.verdict`)
and the paths written. :func:`triage_batch` does the same for a :class:`~kimi_viz.batch.Batch`
already in memory (the demo uses it).

Exit codes (``TriageResult.exit_code``): 0 when the primary variant replays cleanly, 1 when it
reproduces an error; bad input raises the kit's errors (exit 2 in the CLI).
"""

from __future__ import annotations

import io
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .batch import Batch
from .errors import ConfigError

VARIANTS = ("post-fix", "pre-fix", "no-split")
VARIANT_CHOICES = ("post-fix", "pre-fix", "no-split", "both")
MODE_CHOICES = ("auto", "pixels", "shapes")
PNG_METADATA = {"Software": None}


@dataclass
class TriageResult:
    """The replay of one batch: the primary variant's verdict, every variant's trace, and the files written."""

    batch: Batch
    source: str                                   # the manifest path, or a label for an in-memory batch
    variant: str                                  # the primary variant (its verdict decides the exit code)
    traces: dict[str, Any]                        # variant -> kimi_viz.deferred.Trace
    tp_size: int
    rank: int | None
    mode: str
    outputs: dict[str, Path] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)   # what the replay had to assume (said in every output)

    @property
    def trace(self):
        """Return the primary variant's trace."""
        return self.traces[self.variant]

    @property
    def verdict(self) -> dict[str, Any]:
        """Return the primary verdict; with several variants, plus ``"variants": {name: verdict}``."""
        data = self.trace.verdict()
        if len(self.traces) > 1:
            data["variants"] = {name: trace.verdict() for name, trace in self.traces.items()}
        return data

    @property
    def exit_code(self) -> int:
        """Return 0 when the primary variant replays cleanly, 1 when it reproduces an error."""
        from .verdict import exit_code

        return exit_code(self.trace.verdict())

    def describe(self) -> str:
        """Return a one-line description of what was replayed."""
        batch = self.batch
        recorded = "all ranks" if batch.attn_tp_rank is None else f"rank {batch.attn_tp_rank}"
        ranks = "every rank" if self.rank is None else f"rank {self.rank}"
        release = self.trace.release
        replayed = release.label if release is not None else f"{self.variant} code"
        return (f"{len(batch.items)} items; recorded: attention TP {batch.attn_tp_size}, {recorded}, "
                f"SGLang {batch.sglang_version or 'unknown'}, {batch.code_variant} code; replayed: {replayed}, "
                f"TP {self.tp_size}, {ranks}, {self.mode} mode")

    def text(self) -> str:
        """Return the verdict for a terminal: outcome and exact message per rank, divergence, class and fix."""
        from .verdict import format_verdict

        blocks = [f"manifest: {self.source}", self.describe()]
        blocks += [f"assumed: {text}" for text in self.assumptions]
        for name, trace in self.traces.items():
            marker = " (primary)" if len(self.traces) > 1 and name == self.variant else ""
            blocks.append("")
            blocks.append(format_verdict(trace.verdict(), title=f"== {name} code{marker} =="))
        if self.outputs:
            blocks.append("")
            blocks.extend(f"wrote {path}" for path in self.outputs.values())
        return "\n".join(blocks)


def _pick_variants(variant: str | None, batch: Batch, sglang_version: str | None):
    """Return ``(primary release choice, code paths to replay)``; ``both`` adds the other side of the S1 fix."""
    from .releases import choose_release

    if variant is not None and variant not in VARIANT_CHOICES:
        raise ConfigError(f"variant: expected one of {list(VARIANT_CHOICES)}, got {variant!r}")
    choice = choose_release(sglang_version=sglang_version, variant=None if variant == "both" else variant,
                            recorded_version=batch.sglang_version, recorded_variant=batch.code_variant,
                            recorded_variant_source=batch.code_variant_source)
    names = [choice.code_path]
    if variant == "both":
        names.append("pre-fix" if choice.code_path == "post-fix" else "post-fix")
    return choice, names


def _pick_rank(batch: Batch, tp: int, rank: int | str | None) -> int | None:
    if rank == "recorded":
        recorded = batch.attn_tp_rank
        return recorded if recorded is not None and tp == batch.attn_tp_size and recorded < tp else None
    if rank in (None, "all"):
        return None
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp:
        raise ConfigError(f"rank: expected 'recorded', 'all' or an int in 0..{tp - 1}, got {rank!r}")
    return rank


def triage_batch(
    batch: Batch,
    *,
    out_dir: str | os.PathLike | None = None,
    variant: str | None = None,
    tp: int | None = None,
    mode: str = "auto",
    rank: int | str | None = "recorded",
    device: str = "auto",
    sglang_version: str | None = None,
    source: str = "<batch>",
    title: str | None = None,
    reproduce: str = "",
) -> TriageResult:
    """Return the :class:`TriageResult` of replaying ``batch``; write the report files when ``out_dir`` is given.

    ``sglang_version``: replay that release's code path (default: the recorded release, else the code
    path the capture detected, else the newest release, stated). ``variant``: the lower-level switch,
    ``"post-fix"``, ``"pre-fix"``, ``"no-split"``, or ``"both"`` (the chosen path plus the other side of
    the S1 fix).
    ``tp``: override the recorded attention-TP size. ``rank``: ``"recorded"`` (the rank the capture
    recorded, else every rank), ``"all"`` or a rank number. ``mode``: ``auto``/``pixels``/``shapes``.
    ``device``: where gpu-backend items are materialized (``"auto"``: CUDA when present, else CPU).
    """
    from .deferred import replay

    if mode not in MODE_CHOICES:
        raise ConfigError(f"mode: expected one of {list(MODE_CHOICES)}, got {mode!r}")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise ConfigError(f"--tp: expected a positive integer, got {tp!r}")
    tp_size = batch.attn_tp_size if tp is None else tp
    _, names = _pick_variants(variant, batch, sglang_version)
    primary = names[0]
    replay_rank = _pick_rank(batch, tp_size, rank)
    assumptions = _fill_missing_processor(batch)
    traces = {}
    for name in names:
        if name == primary:
            asked = {"sglang_version": sglang_version,
                     "variant": variant if variant not in (None, "both") else None}
        else:
            asked = {"variant": name}
        traces[name] = replay(batch, tp_size=tp_size, rank=replay_rank, mode=mode, device=device, **asked)
    result = TriageResult(batch, source, primary, traces, tp_size, replay_rank, traces[primary].mode,
                          assumptions=assumptions)
    if out_dir is not None:
        result.outputs = write_outputs(result, out_dir, title=title, reproduce=reproduce)
    return result


def _fill_missing_processor(batch: Batch) -> list[str]:
    """Give a batch with cpu-backend items but no processor config the Kimi-K3 preset; return what was assumed.

    A capture records the model's checkpoint-processor config when it can find it; when it could not,
    the consumer is assumed to run Kimi-K3's own ``preprocessor_config.json``.
    """
    if batch.processor is not None or not any(item.backend == "cpu" for item in batch.items):
        return []
    from .config import get_config

    batch.processor = get_config("kimi-k3").to_media_proc_cfg()
    return ["the manifest records no processor config for its cpu-backend items; the consumer's checkpoint "
            "processor is taken to be the Kimi-K3 preset (in_patch_limit 65536)"]


def triage(
    manifest_path: str | os.PathLike,
    *,
    out_dir: str | os.PathLike | None = None,
    variant: str | None = None,
    tp: int | None = None,
    mode: str = "auto",
    rank: int | str | None = "recorded",
    device: str = "auto",
    sglang_version: str | None = None,
) -> TriageResult:
    """Return the :class:`TriageResult` of a manifest (folder, manifest.json or .zip); see :func:`triage_batch`."""
    from .manifest import read_manifest

    batch = read_manifest(manifest_path)
    args = [f"kimi-viz triage {shlex.quote(str(manifest_path))}"]
    if sglang_version:
        args.append(f"--sglang-version {shlex.quote(sglang_version)}")
    if variant:
        args.append(f"--variant {variant}")
    if tp is not None:
        args.append(f"--tp {tp}")
    if mode != "auto":
        args.append(f"--mode {mode}")
    if rank != "recorded":
        args.append(f"--rank {'all' if rank is None else rank}")
    if device != "auto":
        args.append(f"--device {device}")
    return triage_batch(batch, out_dir=out_dir, variant=variant, tp=tp, mode=mode, rank=rank,
                        device=device, sglang_version=sglang_version, source=str(manifest_path),
                        reproduce=" ".join(args))


# ------------------------------------------------------------------------------------------
# Outputs
# ------------------------------------------------------------------------------------------
MAX_SUMMARY_RANKS = 8


def _summary_ranks(trace) -> list:
    """Return the ranks the summary shows: every rank (the failing one first when there are too many)."""
    ranks = list(trace.ranks)
    if len(ranks) <= MAX_SUMMARY_RANKS:
        return ranks
    failing = trace.failing_rank
    chosen = ([failing] if failing is not None else []) + [r for r in ranks if r is not failing]
    return sorted(chosen[:MAX_SUMMARY_RANKS], key=lambda r: r.rank)


def _valid_grid(grid: Any) -> bool:
    return (isinstance(grid, (list, tuple)) and len(grid) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in grid))


def rank_figure(trace, rank):
    """Return a Figure of one rank's rows: expected against produced (row spans, or bars as a fallback)."""
    from .layout import BatchLayout

    rows = list(rank.images)
    # Spans are numbered by their position on this rank; name the global image when it differs.
    labels = [(r.get("label") or f"image {r['image']}") + ("" if r["image"] == pos else f", global image {r['image']}")
              for pos, r in enumerate(rows)]
    expected = [r.get("expected_grid") for r in rows]
    produced = [r.get("produced_grid") for r in rows]
    outcome = "ok" if rank.error is None else f"{rank.error.type}: {rank.error.message}"
    if len(outcome) > 110:
        outcome = outcome[:107] + "..."
    heading = f"rank {rank.rank} of attention-TP {trace.tp_size}, {trace.variant} code: {outcome}"
    if rows and all(_valid_grid(g) for g in expected) and all(_valid_grid(g) for g in produced):
        from .plots.rows import draw_row_spans

        ax = draw_row_spans(BatchLayout.from_grids(expected, labels=labels),
                            produced=BatchLayout.from_grids(produced, labels=labels))
        ax.set_title(f"{heading}\n{ax.get_title()}", fontsize=ax.title.get_fontsize())
        return ax.figure
    return _bars_figure(rows, labels, heading)


def summary_png(trace, *, dpi: int = 100) -> bytes:
    """Return ``summary.png``: each replayed rank's expected and produced rows, stacked top to bottom."""
    from PIL import Image

    pngs = [figure_png(rank_figure(trace, rank), dpi=dpi) for rank in _summary_ranks(trace)]
    if not pngs:
        return figure_png(_bars_figure([], [], "no rank was replayed"), dpi=dpi)
    if len(pngs) == 1:
        return pngs[0]
    pictures = [Image.open(io.BytesIO(png)) for png in pngs]
    width = max(p.width for p in pictures)
    sheet = Image.new("RGB", (width, sum(p.height for p in pictures)), "white")
    y = 0
    for picture in pictures:
        sheet.paste(picture.convert("RGB"), (0, y))
        y += picture.height
    buffer = io.BytesIO()
    sheet.save(buffer, format="PNG", optimize=False, compress_level=6)
    return buffer.getvalue()


def _bars_figure(rows: list[dict], labels: list[str], heading: str):
    """Return a bar figure of expected and produced rows per image (for errors raised before any rows exist)."""
    from matplotlib.figure import Figure

    from .plots.palette import color_for

    figure = Figure(figsize=(8.5, 0.6 + 0.45 * max(1, len(rows))), layout="constrained")
    ax = figure.add_subplot()
    if not rows:
        ax.text(0.5, 0.5, "no image reached this rank's backend groups", ha="center", va="center")
        ax.set_axis_off()
        ax.set_title(heading, loc="left", fontsize=9)
        return figure
    ys = list(range(len(rows)))
    expected = [int(r.get("expected_rows") or 0) for r in rows]
    produced = [r.get("produced_rows") for r in rows]
    ax.barh([y - 0.2 for y in ys], expected, height=0.38, color=color_for(0), label="expected rows (grid)")
    ax.barh([y + 0.2 for y in ys], [p or 0 for p in produced], height=0.38, color=color_for(1),
            hatch="//", edgecolor="black", label="produced rows")
    for y, e, p in zip(ys, expected, produced):
        ax.text(e, y - 0.2, f" {e}", va="center", fontsize=7)
        ax.text(p or 0, y + 0.2, f" {p if p is not None else 'not materialized'}", va="center", fontsize=7)
    ax.set_yticks(ys, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("pixel_values rows")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(heading, loc="left", fontsize=9)
    return figure


def figure_png(figure, *, dpi: int = 110) -> bytes:
    """Return a Figure as PNG bytes (no software metadata)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata=PNG_METADATA)
    return buffer.getvalue()


def write_outputs(result: TriageResult, out_dir: str | os.PathLike, *, title: str | None = None,
                  reproduce: str = "") -> dict[str, Path]:
    """Write ``report.html``, ``summary.png`` and ``trace.json`` (plus ``trace-<variant>.json`` for others)."""
    from . import __version__
    from .report import write_report

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = summary_png(result.trace)
    summary = out / "summary.png"
    summary.write_bytes(png)
    trace_json = result.trace.to_json()
    trace_path = out / "trace.json"
    trace_path.write_text(json.dumps(trace_json, indent=1, default=str) + "\n", encoding="utf-8")
    outputs = {"summary": summary, "trace": trace_path}
    for name, trace in result.traces.items():
        if name != result.variant:
            path = out / f"trace-{name}.json"
            path.write_text(json.dumps(trace.to_json(), indent=1, default=str) + "\n", encoding="utf-8")
            outputs[f"trace-{name}"] = path
    batch = result.batch
    facts = {
        "replay": result.describe(),
        "assumed": "; ".join(result.assumptions),
        "manifest": result.source,
        "created by": batch.created_by,
        "SGLang version": batch.sglang_version,
        "recorded code variant": batch.code_variant,
        "note": batch.note,
        "kimi-viz": __version__,
    }
    others = {name: trace.verdict() for name, trace in result.traces.items() if name != result.variant}
    outputs["report"] = write_report(
        out / "report.html",
        verdict=result.trace.verdict(),
        trace_json=trace_json,
        batch=batch,
        summary_png=png,
        stepper_html=_stepper_html(result.trace),
        title=title or f"kimi-viz triage — {result.trace.release.label if result.trace.release else result.variant}",
        facts=facts,
        other_verdicts=others,
        reproduce=reproduce,
    )
    return outputs


def _stepper_html(trace) -> str:
    from .stepper import Stepper

    return Stepper(trace).to_html()
