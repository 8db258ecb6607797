"""A client's chat (or ``/generate``) request on a deployment: the request side's own checks, then the load replay.

:func:`whatif_chat` answers ``kimi-viz whatif --chat REQUEST.json``: the body is rendered the way the
release's request side renders it (:mod:`kimi_viz.request.chat`), the request side's checks run in
SGLang's order, and a request they accept becomes a workload of one request whose text lengths come
from the rendered prompt (before the first image block, between blocks, after the last), replayed like
``--requests`` (:func:`~.load.whatif_load`: the ``get_image_feature`` call, the deferred split, the
splice). :func:`sweep_chat` asks the same on every release group × attention-TP 1, 2, 4, 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..report.tables import Table
from ..request.chat import ChatRequest, Renderer
from ..request.checks import RequestOutcome, check_releases, check_request
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import build_request
from ..schedule.workload_replay import LoadSettings, check_workload_settings
from ..schedule.workload import Request, Workload
from ._sweep import SWEEP_TP_SIZES
from .load import LoadAnswer, whatif_load
from .run import WhatIfStatus

if TYPE_CHECKING:  # pragma: no cover
    from ._load_sweep import LoadSweep


def chat_workload(outcome: RequestOutcome, rid: str = "r1") -> Workload:
    """Return the workload of one request: the accepted request's images and its prompt's text lengths."""
    before, gaps, after = outcome.workload_text()
    images = outcome.request.images
    return Workload((Request(rid, images, before=before, after=after, gaps=tuple(gaps) if len(images) > 1 else ()),))


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


@dataclass
class ChatAnswer:
    """A client's request on one release at one attention-TP size: the request side, then the workload replay."""

    outcome: RequestOutcome
    tp_size: int
    load: LoadAnswer | None  # None when the request side raised or the request carries no image

    @property
    def request(self) -> ChatRequest:
        """Return the request as read."""
        return self.outcome.request

    @property
    def status(self) -> WhatIfStatus:
        """Return ``error-reproduced`` (the request side or a later stage raises), ``clean``, ``no-call`` or
        ``silent-mismatch``."""
        if self.outcome.error is not None:
            return WhatIfStatus.ERROR_REPRODUCED
        if self.load is None:
            return WhatIfStatus.NO_CALL
        return self.load.status

    @property
    def stage(self) -> str | None:
        """Return where it fails: ``request side``, ``forward pass`` or None."""
        if self.outcome.error is not None:
            return "request side"
        if self.load is not None and self.load.failed:
            return "forward pass"
        return None

    @property
    def failed(self) -> bool:
        """Return True when SGLang raises anywhere on the path."""
        return self.stage is not None

    @property
    def exit_code(self) -> int:
        """Return 0 clean (or no call), 1 an error, 3 a silent mismatch (the CLI's codes)."""
        if self.outcome.error is not None:
            return 1
        return 0 if self.load is None else self.load.exit_code

    def error_key(self) -> tuple[str, str] | None:
        """Return ``(type, message)`` of what SGLang raises first, or None."""
        key = self.outcome.error_key()
        if key is None and self.load is not None:
            key = self.load.error_key()
        return key

    def check_table(self) -> Table:
        """Return the request side's checks in order: name, where, outcome, detail."""
        marks = {"passed": "✓ passed", "raised": "✗ raised", "skipped": "· skipped"}
        return Table(
            ["check", "where (sglang/srt/)", "outcome", "detail"],
            [[c.name, c.where, marks[c.outcome], c.detail] for c in self.outcome.checks],
            caption=f"SGLang {self.outcome.release.version}'s request side, in order",
        )

    def prompt_table(self) -> Table:
        """Return one row per image: its original size text, where its block sits, its pad run and count."""
        rows = [
            [
                s.image,
                s.label,
                s.caption_text,
                s.begin,
                s.content,
                f"{s.pads[0]}..{s.pads[1]}",
                s.pad_count,
                s.end,
            ]
            for s in self.outcome.media_spans()
        ]
        prompt = self.outcome.prompt
        length = "" if prompt is None else f"{prompt.length} tokens"
        return Table(
            ["image", "source", "size text", "<|media_begin|>", "<|media_content|>", "<|media_pad|> run", "pads"]
            + ["<|media_end|>"],
            rows,
            caption=f"the prompt the request side builds ({length}; text counted, media tokens exact)",
        )

    def text(self) -> str:
        """Return what ``kimi-viz whatif --chat`` prints: the request, its checks, the prompt, then the replay."""
        outcome = self.outcome
        rendered = outcome.rendered
        lines = [
            f"== what if: the request {self.request.source} on SGLang {outcome.release.version} at attention-TP "
            f"{self.tp_size} ==",
            f"request: {self.request.summary()}",
        ]
        if self.request.entry == "chat":
            lines.append(f"renderer (the checkpoint's tokenizer code): {outcome.renderer.describe()}")
        lines.append(
            f"ids handed to process_mm_data_async: {rendered.length} (text counted), "
            f"{rendered.placeholders} <|media_pad|> id(s)"
            + (f" from {', '.join(rendered.pad_origins())}" if rendered.placeholders else "")
        )
        if self.request.ignored:
            lines.append(f"keys not modelled (they change no check): {', '.join(self.request.ignored)}")
        lines += [f"note: {n}" for n in outcome.notes]
        lines.append(repr(self.check_table()))
        if outcome.error is not None:
            lines.append("")
            lines.append(f"✗ REQUEST REFUSED — {outcome.error.type}: {outcome.error.message}")
            lines.append(f"answer: {outcome.why()}")
            tip = advice(outcome)
            if tip:
                lines.append(f"to fix: {tip}")
            return "\n".join(lines)
        if outcome.media_spans():
            lines.append(repr(self.prompt_table()))
        if self.load is None:
            lines.append("")
            lines.append("✓ NO CALL — nothing reaches get_image_feature")
            lines.append(f"answer: {outcome.why()}")
            return "\n".join(lines)
        lines.append("")
        lines.append("then, the request prefilled (the call, the deferred split, the splice):")
        lines.append(self.load.text())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Return the request, the request side's outcome, and the load replay (or None)."""
        error = self.error_key()
        return {
            "request": self.request.to_json(),
            "sglang_version": self.outcome.release.version,
            "tp_size": self.tp_size,
            "status": self.status.value,
            "stage": self.stage,
            "error": None if error is None else {"type": error[0], "message": error[1]},
            "request_side": self.outcome.to_json(),
            "advice": advice(self.outcome),
            "load": None if self.load is None else self.load.to_json(),
        }


def whatif_chat(
    request: ChatRequest,
    *,
    sglang_version: str,
    tp_size: int,
    renderer: Renderer | None = None,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    mode: Mode = "shapes",
    device: Any = "auto",
) -> ChatAnswer:
    """Return the :class:`ChatAnswer` of a client's request on one deployment."""
    settings = check_workload_settings(settings if settings is not None else ServerSettings())
    if not settings.epd:  # a flag or value the release refuses is refused first, as for any request
        build_request([], settings, sglang_version)
    outcome = check_request(request, sglang_version, renderer=renderer, settings=settings)
    answer = None
    if outcome.error is None and outcome.processed and request.images:
        answer = whatif_load(
            chat_workload(outcome),
            sglang_version=sglang_version,
            tp_size=tp_size,
            settings=settings,
            load=load,
            mode=mode,
            device=device,
        )
    return ChatAnswer(outcome, tp_size, answer)


@dataclass
class ChatSweep:
    """A client's request on every release: the request side's outcome, and the load sweep where it passes."""

    request: ChatRequest
    outcomes: dict[str, RequestOutcome]
    load: LoadSweep | None  # the load sweep over the release groups that accept the request
    tp_sizes: tuple[int, ...]

    def table(self) -> Table:
        """Return one row per release: the request side's outcome and, when it raises, SGLang's message."""
        rows = []
        for version, outcome in self.outcomes.items():
            error = outcome.error
            rows.append(
                [
                    version,
                    "✓ accepted" if error is None else "✗ raises",
                    f"{outcome.rendered.placeholders} / {len(self.request.images)}",
                    "—" if error is None else f"{error.type}: {error.message}",
                ]
            )
        return Table(
            ["SGLang", "request side", "<|media_pad|> ids / images", "exception"],
            rows,
            caption="the request's own checks on every release (kimi_k3.py process_mm_data_async)",
        )

    def text(self) -> str:
        """Return what ``kimi-viz whatif --chat FILE --sweep`` prints."""
        lines = [f"request: {self.request.summary()}", repr(self.table())]
        if self.load is not None:
            lines.append("where the request side accepts it, the request prefilled:")
            lines.append(self.load.text())
        return "\n".join(lines)

    @property
    def failed(self) -> bool:
        """Return True when some release raises somewhere."""
        return any(o.error is not None for o in self.outcomes.values()) or (
            self.load is not None and any(c.error is not None for c in self.load.cells)
        )

    def to_json(self) -> list[dict[str, Any]]:
        """Return one object per release group × TP size: the request side's error there, or the load cell."""
        from ._load_sweep import release_groups

        cells: list[dict[str, Any]] = []
        load_cells = {} if self.load is None else {(c.releases[0].version, c.tp_size): c for c in self.load.cells}
        for group in release_groups():
            outcome = self.outcomes[group[0].version]
            for tp in self.tp_sizes:
                if outcome.error is not None or (group[0].version, tp) not in load_cells:
                    error = outcome.error
                    cells.append(
                        {
                            "release": group[0].version,
                            "releases": [r.version for r in group],
                            "tp_size": tp,
                            "status": "error-reproduced" if error is not None else WhatIfStatus.NO_CALL.value,
                            "stage": "request side" if error is not None else None,
                            "error": None if error is None else {"type": error.type, "message": error.message},
                            "why": outcome.why(),
                        }
                    )
                    continue
                cell = load_cells[(group[0].version, tp)].to_json()
                cell["stage"] = "forward pass" if cell["error"] is not None else None
                cells.append(cell)
        return cells


def sweep_chat(
    request: ChatRequest,
    *,
    renderer: Renderer | None = None,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    tp_sizes: Sequence[int] = SWEEP_TP_SIZES,
) -> ChatSweep:
    """Return the :class:`ChatSweep` of ``request``: its checks on every release, then the load sweep where they
    pass."""
    from ._load_sweep import LoadSweep, sweep_load

    settings = check_workload_settings(settings if settings is not None else ServerSettings())
    outcomes = check_releases(request, renderer=renderer, settings=settings)
    accepted = [o for o in outcomes.values() if o.error is None and o.processed and request.images]
    swept = None
    if accepted:
        full = sweep_load(chat_workload(accepted[0]), settings=settings, load=load, tp_sizes=tp_sizes)
        cells = [c for c in full.cells if outcomes[c.releases[0].version].error is None]
        swept = LoadSweep(full.workload, full.tp_sizes, cells)
    return ChatSweep(request, outcomes, swept, tuple(tp_sizes))


__all__ = ["ChatAnswer", "ChatSweep", "advice", "chat_workload", "whatif_chat", "sweep_chat"]
