"""Triage a manifest: replay it, tell the verdict, and write ``report.html``, ``summary.png``, ``trace.json``
and ``issue.md``.

:func:`triage` reads a manifest (folder or ``.zip``), replays SGLang's deferred split under the
release the capture recorded (or the one asked for) on the rank the capture recorded (or every
rank), compares the outcome with what the capture recorded, and returns a :class:`TriageResult`
with the :class:`~kimi_viz.split.verdict.Verdict` and the paths written. :func:`triage_batch` does
the same for a :class:`~kimi_viz.split.batch.Batch` already in memory (the demo uses it).
:meth:`TriageResult.markdown` is ``issue.md`` (an issue body), :meth:`TriageResult.emit_repro` writes
the standalone SGLang test of the batch (:func:`kimi_viz.repro.emit_repro`). This
module only orchestrates: the replay lives in :mod:`kimi_viz.split`, the figures in
:mod:`kimi_viz.plots`, the pages in :mod:`kimi_viz.report`.

Exit codes (``TriageResult.exit_code``) are the verdict status's: 0 clean, 1 error reproduced,
3 silent mismatch, 4 not reproduced, 5 recorded ok but the replay fails; bad input raises the
kit's errors (exit 2 in the CLI).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from ._whatif.fix import with_fix
from ._whatif.protocol import BatchQuestion
from .answer import Answer, batch_answer
from .errors import ArgumentError, ConfigError
from .files import prepare_folder, write_file
from .forward.trace import ForwardTrace
from .manifest import read_manifest
from .manifest.digest import manifest_digest
from .preprocess.config import get_config
from .release_changes.fix_search import FixSearch
from .releases import choose_release
from .report.html import ReportFigure, write_report
from .report.markdown import issue_markdown
from .report.stepper import Stepper
from .report.summary import summary_png
from .repro import emit_repro
from .server_args.sources import ServerReport
from .split._replay import replay
from .split.batch import Batch
from .split.ranks import check_tp_size
from .split.trace import Trace
from .split.verdict import Verdict, build_verdict, format_verdict, trace_document

if TYPE_CHECKING:  # pragma: no cover - the deployment reader loads the scheduler's flags: only with --server-log
    from ._whatif.deployment import Deployment

CODE_PATH_CHOICES = ("post-fix", "pre-fix", "no-split", "both")
MODE_CHOICES = ("auto", "pixels", "shapes")


@dataclass(kw_only=True)
class TriageResult:
    """The replay of one batch: the primary code path's verdict, every path's trace, and the files written."""

    batch: Batch
    source: str  # the manifest path, or a label for an in-memory batch
    code_path: str  # the primary code path (its verdict decides the exit code)
    traces: dict[str, Trace]  # code path -> trace
    tp_size: int
    rank: int | None
    mode: str
    fixes: dict[str, FixSearch] = field(default_factory=dict)  # code path -> the one fix search (failing ones)
    outputs: dict[str, Path] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)  # what the replay had to assume (said in every output)
    manifest: str | None = None  # the manifest read (folder, manifest.json or .zip); None for an in-memory batch
    reproduce: str = ""  # the command that replays it again
    server: ServerReport | None = None  # the server --server / --server-log describe (None: not given)

    @property
    def trace(self) -> Trace:
        """Return the primary code path's trace."""
        return self.traces[self.code_path]

    @cached_property
    def verdict(self) -> Verdict:
        """Return the primary verdict; with several code paths its ``code_paths`` hold the others'."""
        others = {name: trace for name, trace in self.traces.items() if name != self.code_path}
        return build_verdict(self.trace, others=others)

    @cached_property
    def answer(self) -> Answer:
        """Return the primary replay as the kit's one answer: status, errors, why, fixing release, exit code."""
        return batch_answer(self.trace, self.trace.release.release, self.verdict, self.fixes.get(self.code_path))

    @property
    def exit_code(self) -> int:
        """Return the answer's exit code (0, 1, 3, 4 or 5)."""
        return self.answer.exit_code

    def to_json(self) -> dict[str, Any]:
        """Return what ``triage --json`` prints: the verdict's JSON, plus ``"forward_context"`` (the forward pass
        around the call: ``summary``, requests, items, ``call_items``) when the manifest records one."""
        data = self.verdict.to_json(self.fixes)
        if self.batch.forward_context is not None:
            data["forward_context"] = self.batch.forward_context.report_json()
        if self.server is not None:
            data["server"] = self.server.to_json()
        return data

    def describe(self) -> str:
        """Return a one-line description of what was recorded and what was replayed."""
        batch = self.batch
        recorded = "all ranks" if batch.attn_tp_rank is None else f"rank {batch.attn_tp_rank}"
        ranks = "every rank" if self.rank is None else f"rank {self.rank}"
        return (
            f"{len(batch.items)} item{'s' if len(batch.items) != 1 else ''}; "
            f"recorded: attention TP {batch.attn_tp_size}, {recorded}, "
            f"SGLang {batch.sglang_version or 'unknown'}, {batch.code_path} code; replayed: "
            f"{self.trace.release.label}, TP {self.tp_size}, {ranks}, {self.mode} mode"
        )

    def facts(self) -> dict[str, Any]:
        """Return where the batch comes from and how it was replayed (``report.html``'s "Where it comes from")."""
        batch = self.batch
        return {
            "replay": self.describe(),
            "assumed": "; ".join(self.assumptions),
            "manifest": self.source,
            "created by": batch.created_by,
            "SGLang version": batch.sglang_version,
            "recorded code path": batch.code_path,
            "note": batch.note,
            "kimi-viz": __version__,
        }

    def environment(self) -> dict[str, Any]:
        """Return what ``issue.md`` says of the environment: kit version, manifest name and SHA-256, SGLang."""
        env: dict[str, Any] = {"kimi-viz": __version__}
        if self.manifest is not None:
            try:
                name, digest = manifest_digest(self.manifest)
                env["manifest"] = f"{name}, sha256 {digest}"
            except ArgumentError:  # moved or deleted since it was read
                env["manifest"] = f"{Path(self.manifest).name} (no longer readable: no digest)"
        else:
            env["batch"] = self.source
        env["SGLang (recorded)"] = self.batch.sglang_version or "not recorded"
        env["SGLang (replayed)"] = self.trace.release.label
        env["replay"] = self.describe()
        env["assumed"] = "; ".join(self.assumptions)
        return env

    def repro_command(self, out_dir: str = "DIR") -> str:
        """Return the command that writes this batch's standalone SGLang repro (empty for an in-memory batch)."""
        if self.manifest is None:
            return ""
        replay = self.reproduce or f"kimi-viz triage {shlex.quote(self.manifest)}"
        return f"{replay} --emit-repro {shlex.quote(out_dir)}"

    def markdown(self, *, figure: str | None = None) -> str:
        """Return ``issue.md``: the verdict as GitHub-flavoured Markdown to paste as an issue body.

        ``figure``: the PNG beside it to drag into the issue (``None``: say how to write one).
        """
        return issue_markdown(
            self.verdict,
            self.trace,
            environment=self.environment(),
            reproduce=self.reproduce,
            repro=self.repro_command(),
            figure=figure,
            fixes=self.fixes,
        )

    def emit_repro(self, out_dir: str | os.PathLike[str], *, pixels: bool = False) -> Path:
        """Write the standalone SGLang test of this batch (the release and TP size replayed); return its path.

        See :func:`kimi_viz.repro.emit_repro`: no pixels unless ``pixels``, never for a redacted manifest.
        """
        return emit_repro(
            self.batch,
            out_dir,
            sglang_version=self.trace.release.release.version,
            tp_size=self.tp_size,
            manifest=self.manifest,
            pixels=pixels,
        )

    def text(self) -> str:
        """Return the verdict for a terminal: the status first, then ranks, divergence, class and fix."""
        verdict = self.verdict
        blocks = [format_verdict(verdict, fixes=self.fixes), "", f"manifest: {self.source}", self.describe()]
        blocks += [f"assumed: {text}" for text in self.assumptions]
        context = self.batch.forward_context
        if context is not None:
            blocks += ["", *context.lines()]
            first = verdict.divergence.first_image
            origin = None if first is None else context.origin(first)
            if origin is not None:
                blocks.append(f"  the first diverging image, call item {first}, came from {origin}")
        if self.server is not None:
            blocks += ["", *self.server.lines(clean=not self.verdict.status.failed)]
        for name, other in verdict.code_paths.items():
            title = f"== the same batch on the {name} code path =="
            blocks += ["", format_verdict(other, title=title, fixes=self.fixes)]
        if self.outputs:
            blocks.append("")
            blocks.extend(f"wrote {path}" for path in self.outputs.values())
        return "\n".join(blocks)


def _pick_paths(
    code_path: str | None, batch: Batch, sglang_version: str | None, server_version: tuple[str, str] | None = None
) -> list[str]:
    """Return the code paths to replay, the primary first; ``both`` adds the other side of the S1 fix."""
    if code_path is not None and code_path not in CODE_PATH_CHOICES:
        raise ConfigError(f"code_path: expected one of {list(CODE_PATH_CHOICES)}, got {code_path!r}")
    choice = choose_release(
        sglang_version=sglang_version,
        code_path=None if code_path == "both" else code_path,
        recorded_version=batch.sglang_version,
        recorded_code_path=batch.code_path,
        recorded_source=batch.code_path_source,
        server_version=server_version,
    )
    names: list[str] = [choice.code_path]
    if code_path == "both":
        names.append("pre-fix" if choice.code_path == "post-fix" else "post-fix")
    return names


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
    code_path: str | None = None,
    tp: int | None = None,
    mode: str = "auto",
    rank: int | str | None = "recorded",
    device: str = "auto",
    sglang_version: str | None = None,
    source: str = "<batch>",
    title: str | None = None,
    reproduce: str = "",
    manifest: str | os.PathLike | None = None,
    server: Deployment | None = None,
) -> TriageResult:
    """Return the :class:`TriageResult` of replaying ``batch``; write the report files when ``out_dir`` is given.

    ``sglang_version``: replay that release's code path (default: the recorded release, else the code
    path the capture detected, else the newest release, stated). ``code_path``: the lower-level switch,
    ``"post-fix"``, ``"pre-fix"``, ``"no-split"``, or ``"both"`` (the chosen path plus the other side of
    the S1 fix). ``tp``: override the recorded attention-TP size. ``rank``: ``"recorded"`` (the rank
    the capture recorded, else every rank), ``"all"`` or a rank number. ``mode``: ``auto``/``pixels``/
    ``shapes``. ``device``: where gpu-backend items are materialized (``"auto"``: CUDA when present).
    ``manifest``: the manifest ``batch`` was read from (its digest goes in ``issue.md`` and the repro);
    ``reproduce``: the command that replays it again. ``server``: the deployment a launch command or log
    describe: its release replays a batch that recorded none (the capture's own record wins), and the result
    lists its values, where each came from and the flags the kit does not model.
    """
    if mode not in MODE_CHOICES:
        raise ConfigError(f"mode: expected one of {list(MODE_CHOICES)}, got {mode!r}")
    server_version = None
    if server is not None and server.sglang_version is not None:
        server_version = (server.sglang_version, server.report.release)
    tp_size = check_tp_size(batch.attn_tp_size if tp is None else tp, "--tp")
    names = _pick_paths(code_path, batch, sglang_version, server_version)
    replay_rank = _pick_rank(batch, tp_size, rank)
    assumptions = _fill_missing_processor(batch)
    traces = {}
    for name in names:
        if name == names[0]:
            asked: dict[str, Any] = {
                "sglang_version": sglang_version,
                "code_path": code_path if code_path not in (None, "both") else None,
                "server_version": server_version,
            }
        else:
            asked = {"code_path": name}
        traces[name] = replay(batch, tp_size=tp_size, rank=replay_rank, mode=mode, device=device, **asked)
    question = BatchQuestion(batch, replay_rank)
    fixes = {}
    for name, trace in traces.items():
        answer = with_fix(question, batch_answer(trace, trace.release.release))
        if answer.fix is not None:
            fixes[name] = answer.fix
    result = TriageResult(
        batch=batch,
        source=source,
        code_path=names[0],
        traces=traces,
        tp_size=tp_size,
        rank=replay_rank,
        mode=traces[names[0]].mode,
        fixes=fixes,
        assumptions=assumptions,
        manifest=None if manifest is None else str(manifest),
        reproduce=reproduce,
        server=None if server is None else server.report,
    )
    if out_dir is not None:
        result.outputs = write_triage_outputs(result, out_dir, title=title)
    return result


def _fill_missing_processor(batch: Batch) -> list[str]:
    """Give a batch with cpu-backend items but no processor config the Kimi-K3 preset; return what was assumed.

    A capture records the model's checkpoint-processor config when it can find it; when it could not,
    the consumer is assumed to run Kimi-K3's own ``preprocessor_config.json``.
    """
    if batch.processor is not None or not any(item.backend == "cpu" for item in batch.items):
        return []
    batch.processor = get_config("kimi-k3").to_media_proc_cfg()
    return [
        "the manifest records no processor config for its cpu-backend items; the consumer's checkpoint "
        "processor is taken to be the Kimi-K3 preset (in_patch_limit 65536)"
    ]


def triage(
    manifest_path: str | os.PathLike,
    *,
    out_dir: str | os.PathLike | None = None,
    code_path: str | None = None,
    tp: int | None = None,
    mode: str = "auto",
    rank: int | str | None = "recorded",
    device: str = "auto",
    sglang_version: str | None = None,
    server: Deployment | None = None,
    server_words: Sequence[str] = (),
) -> TriageResult:
    """Return the :class:`TriageResult` of a manifest (folder, manifest.json or .zip); see :func:`triage_batch`
    (``server_words``: the --server / --server-log options as typed, for the command that replays it again)."""
    batch = read_manifest(manifest_path)
    options = (  # the options given, as the command line that replays it again names them
        ("--sglang-version", shlex.quote(sglang_version) if sglang_version else None),
        ("--code-path", code_path or None),
        ("--tp", tp),
        ("--mode", None if mode == "auto" else mode),
        ("--rank", None if rank == "recorded" else "all" if rank is None else rank),
        ("--device", None if device == "auto" else device),
    )
    args = [f"kimi-viz triage {shlex.quote(str(manifest_path))}"]
    args += [f"{option} {value}" for option, value in options if value is not None]
    args += [shlex.quote(word) for word in server_words]
    return triage_batch(
        batch,
        out_dir=out_dir,
        code_path=code_path,
        tp=tp,
        mode=mode,
        rank=rank,
        device=device,
        sglang_version=sglang_version,
        source=str(manifest_path),
        reproduce=" ".join(args),
        manifest=manifest_path,
        server=server,
    )


def write_triage_outputs(
    result: TriageResult,
    out_dir: str | os.PathLike,
    *,
    title: str | None = None,
    reproduce: str | None = None,
    question: str = "",
    figures: Sequence[ReportFigure] = (),
    forward: ForwardTrace | None = None,
) -> dict[str, Path]:
    """Write ``report.html``, ``summary.png``, ``trace.json`` (plus ``trace-<path>.json`` for other code paths)
    and ``issue.md``; return their paths. ``reproduce`` (default: the result's own) is the command that
    replays it again; ``question`` and ``figures`` (a what-if's answer text, a workload's forward pass) go in
    the report too; with ``forward`` (the pass the call belongs to) the stepper walks the whole pass, the
    scheduler's prefix match and admission first."""
    if reproduce is not None and reproduce != result.reproduce:
        result = replace(result, reproduce=reproduce)
    out = prepare_folder(out_dir)
    verdict = result.verdict
    png = summary_png(result.trace, verdict)
    outputs = {"summary": write_file(out / "summary.png", png)}
    document = trace_document(result.trace, verdict, result.fixes)
    outputs["trace"] = write_file(out / "trace.json", _json_bytes(document))
    for name, trace in result.traces.items():
        if name != result.code_path:
            other = trace_document(trace, None, result.fixes)
            outputs[f"trace-{name}"] = write_file(out / f"trace-{name}.json", _json_bytes(other))
    outputs["report"] = write_report(
        out / "report.html",
        verdict=verdict,
        trace_json=document,
        batch=result.batch,
        summary_png=png,
        stepper_html=Stepper(result.trace, forward=forward).to_html(),
        title=title or f"kimi-viz triage — {result.trace.release.label}",
        facts=result.facts(),
        reproduce=result.reproduce,
        question=question,
        figures=figures,
        fixes=result.fixes,
    )
    outputs["issue"] = write_file(out / "issue.md", result.markdown(figure="summary.png").encode("utf-8"))
    return outputs


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=1, default=str) + "\n").encode("utf-8")


__all__ = ["TriageResult", "triage", "triage_batch", "write_triage_outputs", "CODE_PATH_CHOICES", "MODE_CHOICES"]
