"""``issue.md``: the verdict as GitHub-flavoured Markdown that reads well pasted as an issue body.

Top to bottom: a title line; the verdict with its status word and exit code; SGLang's error; the
release replayed and the release that fixes it; "N of M ranks fail" with the failing ranks first;
the per-image table (global index, file, size, backend, rank, the grid SGLang read, the grid
produced, rows expected and produced, match), the rows of :func:`~.rows.image_lines` that
``report.html`` shows too; the cause and the fix; the server settings the manifest records and the
workload (the forward pass around the call) when it records one; one ``<details>`` block with the
step trace and the environment (kit version, manifest name and SHA-256, SGLang version); and a
last line saying which PNG to drag into the issue.

Four rules hold for every body written here:

- text that comes from a manifest or a log (file labels, notes, recorded messages, request ids) and
  the kit's own prose around it are escaped (:func:`md_text`: Markdown's punctuation, pipes included,
  backslash-escaped; ``http://`` and ``www.`` made inert, so nothing turns into a link, a mention or
  an issue reference) or put in code spans with a fence longer than any backtick run they hold
  (:func:`md_code`); control characters are shown as escapes, one line per value;
- the only raw HTML is ``<details>`` and ``<summary>``;
- no local path: the commands (replay it, the SGLang repro) name their paths as
  :func:`~kimi_viz.report.public_paths.public_command` does (relative to the current folder below it, else
  the name alone), and the environment's and the settings' values as
  :func:`~kimi_viz.report.public_paths.public_text` does, so no absolute path, user or host name is pasted;
- the body stays under GitHub's limit of :data:`GITHUB_LIMIT` characters: every value is capped, a
  batch of more than :data:`MAX_IMAGE_ROWS` images shows its flagged images and the first ones and
  says how many it leaves out (a table is never cut in the middle), and a body still over
  :data:`BUDGET` is written again more compactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..split.verdict import Fixes, Status, image_sentence, release_lines
from ..terminal import escape_value, safe_text
from .public_paths import public_command, public_text
from .rows import ImageLine, image_lines

if TYPE_CHECKING:  # pragma: no cover
    from ..answer import Answer
    from ..split.trace import RankTrace, Step, Trace
    from ..split.verdict import Verdict

GITHUB_LIMIT = 65_536  # characters in an issue body
BUDGET = 60_000  # what issue.md may use, leaving room for the reporter's own words
MAX_IMAGE_ROWS = 40  # a larger batch shows its flagged images and the first ones
MAX_RANK_LINES = 16
MAX_TEXT = 160  # characters kept of one label, rid or setting
MAX_PROSE = 1_200  # of an explanation, a fix or a note
MAX_MESSAGE = 400  # of an error message
MAX_BLOCK_LINES = 40  # of the forward context's table
GRID_KEYS = ("in_patch_limit", "patch_limit_on_one_side", "patch_size", "merge_kernel_size", "fixed_output_tokens")

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&@#])")
_URL = re.compile(r"(?i)\b(https?|ftp)(:)(?=//)|\b(www)(\.)")
_TICKS = re.compile(r"`+")
_LINE_START = re.compile(r"^(?:([-+=])|(\d{1,9})(?=[.)](?:\s|$)))")


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def md_text(value: Any, *, limit: int = MAX_TEXT) -> str:
    """Return ``value`` as one line of Markdown text that renders as itself (safe in a table cell too).

    Control characters (newlines included) become visible escapes, the text is cut to ``limit``
    characters, Markdown's punctuation is backslash-escaped and URLs are made inert (``https\\://``); a
    leading ``-``, ``+``, ``=`` or ``1.`` is escaped too, so a value that starts a line starts no list.
    """
    text = _cap(escape_value("" if value is None else value).strip(), limit)
    text = _SPECIAL.sub(r"\\\1", text)
    text = _LINE_START.sub(lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\", text)
    return _URL.sub(lambda m: (m.group(1) or m.group(3)) + "\\" + (m.group(2) or m.group(4)), text)


def md_code(value: Any, *, limit: int = MAX_MESSAGE) -> str:
    """Return ``value`` as an inline code span: one line, cut to ``limit``, fenced past its backtick runs."""
    text = _cap(escape_value("" if value is None else value), limit)
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_block(lines: list[str], *, info: str = "text") -> str:
    """Return ``lines`` as a fenced code block (safe text, a fence longer than any backtick run)."""
    body = [safe_text(line).replace("\n", " ") for line in lines]
    longest = max((len(run) for line in body for run in _TICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([f"{fence}{info}", *body, fence])


def _grid(grid: Any) -> str:
    return "" if grid is None else "[" + ", ".join(str(v) for v in grid) + "]"


# --- the sections ------------------------------------------------------------------------------------
def _title(verdict: Verdict, trace: Trace) -> str:
    status, div = verdict.status, verdict.divergence
    if status in (Status.ERROR_REPRODUCED, Status.RECORDED_OK_REPLAY_FAILS) and verdict.error is not None:
        what = f"raises {verdict.error.type}: {verdict.error.message}"
    elif status is Status.NOT_REPRODUCED and verdict.recorded is not None:
        what = f"does not reproduce the recorded {verdict.recorded.error}"
    elif status is Status.SILENT_MISMATCH:
        what = "encodes an image wrongly without raising"
    else:
        what = "replays clean"
    where = [f"SGLang {verdict.release.release.version}", f"attention-TP {trace.tp_size}"]
    if div.scenario_class not in ("none", "unclassified"):
        where.append(str(div.scenario_class))
    return "# " + md_text(f"Kimi-K3 get_image_feature {what} ({', '.join(where)})", limit=MAX_MESSAGE)


def _verdict(verdict: Verdict, fixes: Fixes | None) -> list[str]:
    style = verdict.style
    lines = [
        f"**{style.symbol} {style.badge}** (status `{verdict.status.value}`, exit {verdict.exit_code}): "
        f"{md_text(style.wording, limit=MAX_PROSE)}",
        "",
    ]
    raised = "nothing" if verdict.error is None else md_code(verdict.error)
    lines.append(f"SGLang raises {raised} in `get_image_feature`.")
    if verdict.recorded is not None:
        rec = verdict.recorded
        what = "ok" if rec.outcome == "ok" else str(rec.error)
        differs = " (not the error this replay raises)" if verdict.recorded_differs else ""
        lines.append(f"The capture recorded {md_code(what)}{differs}.")
    lines.append("")
    lines += [f"- {md_text(line, limit=MAX_PROSE)}" for line in release_lines(verdict, fixes)]
    for name, other in verdict.code_paths.items():  # --code-path both: the other side of the S1 fix
        lines.append(
            f"- the same batch on the {md_text(name)} code path: **{other.style.symbol} {other.style.badge}**, "
            f"{md_text(other.rank_summary)}"
        )
    return lines


def _ranks(verdict: Verdict) -> list[str]:
    lines = [f"**{md_text(verdict.rank_summary)}**", ""]
    ordered = sorted(verdict.ranks, key=lambda r: (r.outcome != "error", r.rank))
    failing = [r for r in ordered if r.outcome == "error"]
    healthy = [r for r in ordered if r.outcome != "error"]
    shown = failing[:MAX_RANK_LINES] + (healthy if len(healthy) <= 4 else [])
    for rank in shown:
        indices = rank.image_indices
        images = (
            "no images yet"
            if indices is None
            else f"image{'' if len(indices) == 1 else 's'} " + _cap(", ".join(map(str, indices)), MAX_TEXT)
        )
        what = "ok" if rank.error is None else md_code(rank.error)
        lines.append(f"- rank {rank.rank} ({images}): {what}")
    if len(failing) > MAX_RANK_LINES:
        lines.append(f"- … {len(failing) - MAX_RANK_LINES} more failing ranks (in `trace.json`)")
    if len(healthy) > 4:
        numbers = ", ".join(str(r.rank) for r in healthy[:24]) + (", …" if len(healthy) > 24 else "")
        lines.append(f"- {len(healthy)} ranks pass: {numbers}")
    div = verdict.divergence
    if div.first_image is not None:
        lines.append("")
        where = f" on rank {div.rank}" if div.rank is not None else ""
        counts = (
            ""
            if div.expected_rows is None and div.produced_rows is None
            else f": expected {div.expected_rows} rows, produced {div.produced_rows}"
        )
        who = md_text(image_sentence(verdict, div.first_image), limit=MAX_PROSE)
        lines.append(f"First diverging image: {who}{where}{counts}.")
        if div.grid_read_from is not None:
            lines.append(f"SGLang read the grid of image {div.grid_read_from} for image {div.first_image}.")
    if div.expected_total is not None or div.produced_total is not None:
        lines += [] if div.first_image is not None else [""]
        what = "The check that fails" if verdict.error is not None else "All rows"
        lines.append(f"{what}: expected {div.expected_total}, produced {div.produced_total}.")
    return lines


def _shown_images(lines: list[ImageLine], first: int | None, limit: int) -> list[ImageLine]:
    """Return every line when they fit, else the flagged ones (the first diverging image first) and the first ones."""
    if len(lines) <= limit:
        return lines
    chosen = [line for line in lines if line.image == first] + [line for line in lines if line.flagged] + lines
    picked: dict[int, ImageLine] = {}
    for line in chosen:
        if len(picked) >= limit:
            break
        picked.setdefault(line.image, line)
    return sorted(picked.values(), key=lambda line: line.image)


def _image_cell(line: ImageLine) -> list[str]:
    who, row = line.who, line.row
    size = " ".join(part for part in (line.size_text, who.mode or "") if part)
    read = ""
    if row is not None:
        read = _grid(row.expected_grid) + (f" (image {row.grid_index_read}'s row)" if line.read_elsewhere else "")
    match = line.match_text
    return [
        str(who.image),
        md_text(who.label, limit=80),
        md_text(size, limit=40),
        md_text(who.backend or "eager"),
        "" if row is None else str(row.rank),
        md_text(read),
        md_text(_grid(None if row is None else row.produced_grid)),
        "" if row is None else str(row.expected_rows),
        "" if row is None or row.produced_rows is None else str(row.produced_rows),
        f"**{md_text(match)}**" if line.flagged else md_text(match),
    ]


def _images(verdict: Verdict, limit: int) -> list[str]:
    lines = image_lines(verdict)
    shown = _shown_images(lines, verdict.divergence.first_image, limit)
    out = [
        "## Images",
        "",
        "| image | file | size | backend | rank | grid read | grid produced | rows expected | rows produced | match |",
        "|---:|---|---|---|---:|---|---|---:|---:|---|",
    ]
    out += ["| " + " | ".join(_image_cell(line)) + " |" for line in shown]
    listed = {line.image for line in shown}
    left = [line for line in lines if line.image not in listed]
    if left:
        flagged = sum(1 for line in left if line.flagged)
        missing = sum(1 for line in left if line.row is None)
        counts = [f"{len(left) - flagged - missing} match their grid"]
        counts += [f"{flagged} more are flagged"] if flagged else []
        counts += [f"{missing} were not replayed"] if missing else []
        out += [
            "",
            f"_Not listed: {len(left)} more of the {len(lines)} images ({', '.join(counts)}). "
            "Every image is in `report.html` and `trace.json`._",
        ]
    return out


def _cause(verdict: Verdict) -> list[str]:
    div = verdict.divergence
    why = div.explanation or verdict.style.wording
    out = ["## Cause and fix", "", f"**Cause.** {md_text(why, limit=MAX_PROSE)}"]
    if div.fix:
        out += ["", f"**Fix.** {md_text(div.fix, limit=MAX_PROSE)}"]
    elif verdict.status is Status.CLEAN:
        out += ["", "**Fix.** None needed: every image's rows match its grid."]
    return out


def _settings(trace: Trace) -> list[str]:
    batch = trace.batch
    rank = "every rank recorded" if batch.attn_tp_rank is None else f"recorded on rank {batch.attn_tp_rank}"
    items: list[tuple[str, Any]] = [
        ("SGLang", batch.sglang_version or "not recorded"),
        ("attention-TP size", f"{batch.attn_tp_size} ({rank})"),
        ("code path", f"{batch.code_path} (how it was found: {batch.code_path_source.value})"),
    ]
    if batch.processor is not None:
        keys = [f"{k} {batch.processor[k]}" for k in GRID_KEYS if batch.processor.get(k) is not None]
        items.append(("checkpoint processor", ", ".join(keys) or "recorded"))
    context = batch.forward_context
    if context is not None:
        size = context.chunked_prefill_size
        items.append(("chunked-prefill size", "not recorded" if size is None else "off" if size == -1 else size))
    items += [(f"extra: {key}", value) for key, value in list(batch.manifest_extra().items())[:12]]
    if batch.created_by:
        items.append(("recorded by", batch.created_by))
    out = ["## Server settings", ""]
    out += [
        f"- {md_text(name)}: {md_text(public_text(value) if isinstance(value, str) else value)}"
        for name, value in items
    ]
    if batch.note:
        out += ["", f"Note: {md_text(public_text(batch.note), limit=MAX_PROSE)}"]
    return out


def _workload(verdict: Verdict, trace: Trace, max_lines: int) -> list[str]:
    context = trace.batch.forward_context
    if context is None:
        return []
    summary = md_text(context.summary(), limit=MAX_PROSE)
    out = ["## Workload", "", f"{summary[:1].upper()}{summary[1:]}."]
    first = verdict.divergence.first_image
    origin = None if first is None else context.origin(first)
    if origin is not None:
        out.append(f"The first diverging image, call item {first}, came from {md_text(origin)}.")
    table = [_cap(line, 240) for line in context.lines()[1:]]
    if max_lines and table:
        more = len(table) - max_lines
        table = table[:max_lines] + ([f"  … {more} more lines (trace.json, report.html)"] if more > 0 else [])
        out += ["", md_block(table)]
    return out


def _step_lines(number: int, step: Step) -> list[str]:
    lines = [_cap(f"{number}. {step.name}: {step.title} ({step.spec_ref})", 240)]
    if step.check is not None:
        check = step.check
        verdict = "passes" if check.passed else "FAILS"
        lines.append(_cap(f"   check {check.name}: expected {check.expected}, found {check.actual}: {verdict}", 400))
    if step.error is not None:
        lines.append(_cap(f"   raises {step.error}", MAX_MESSAGE))
    return lines


def _trace_ranks(verdict: Verdict, trace: Trace, count: int) -> list[RankTrace]:
    failing = [r for r in trace.ranks if r.outcome == "error"]
    if failing:
        return failing[:count]
    rank = verdict.divergence.rank
    chosen = [r for r in trace.ranks if r.rank == rank] or trace.ranks[:1]
    return chosen[:count]


def _details(
    verdict: Verdict, trace: Trace, environment: Mapping[str, Any], reproduce: str, repro: str, step_ranks: int
) -> list[str]:
    ranks = _trace_ranks(verdict, trace, step_ranks)
    names = ", ".join(f"rank {r.rank}" for r in ranks)
    out = ["<details>", f"<summary>Step trace{f' ({names})' if names else ''} and environment</summary>", ""]
    for rank in ranks:
        steps = [line for k, step in enumerate(rank.steps, 1) for line in _step_lines(k, step)]
        out += [f"Steps of `get_image_feature` on rank {rank.rank} ({rank.outcome}):", "", md_block(steps), ""]
    if not ranks and step_ranks:
        out += ["No rank was replayed.", ""]
    out += ["Environment:", ""]
    out += [f"- {md_text(name)}: {md_text(value, limit=MAX_PROSE)}" for name, value in environment.items() if value]
    if reproduce:
        out.append(f"- replay it: {md_code(reproduce, limit=MAX_PROSE)}")
    if repro:
        out.append(f"- SGLang repro: {md_code(repro, limit=MAX_PROSE)}")
    return [*out, "", "</details>"]


def _figure(figure: str | None) -> str:
    if figure is None:
        return (
            "Run the triage with `--out DIR` and drag `DIR/summary.png` into this issue: the verdict and the "
            "rows each grid expects against the rows produced, on the failing ranks."
        )
    return (
        f"Drag {md_code(figure, limit=MAX_TEXT)} (written beside `issue.md`) into this issue: the verdict and the "
        "rows each grid expects against the rows produced, on the failing ranks. `report.html` holds the "
        "stepper and the whole trace (zip it to attach it)."
    )


def issue_markdown(
    verdict: Verdict,
    trace: Trace,
    *,
    environment: Mapping[str, Any] | None = None,
    reproduce: str = "",
    repro: str = "",
    figure: str | None = "summary.png",
    fixes: Fixes | None = None,
) -> str:
    """Return ``issue.md`` for a replay: GitHub-flavoured Markdown under :data:`BUDGET` characters (the fixing
    release from the answer's ``fixes``).

    ``environment``: name → value lines of the ``<details>`` block (kit version, manifest digest,
    SGLang version, …); ``reproduce``: the command that replays it; ``repro``: the command that writes
    the standalone SGLang repro; ``figure``: the PNG to drag in (``None``: none written yet).
    """
    env = {name: public_text(value) if isinstance(value, str) else value for name, value in (environment or {}).items()}
    reproduce, repro = public_command(reproduce), public_command(repro)
    text = ""
    # Each try is more compact; the last is bounded by the caps alone, far under the limit.
    for images, steps, block in ((MAX_IMAGE_ROWS, 2, MAX_BLOCK_LINES), (12, 1, 8), (3, 0, 0)):
        parts = [
            [_title(verdict, trace)],
            _verdict(verdict, fixes),
            _ranks(verdict),
            _images(verdict, images),
            _cause(verdict),
            _settings(trace),
            _workload(verdict, trace, block),
            _details(verdict, trace, env, reproduce, repro, steps),
            [_figure(figure)],
        ]
        text = "\n\n".join("\n".join(part) for part in parts if part) + "\n"
        if len(text) <= BUDGET:
            break
    return text


MAX_ANSWER_TEXT = 40_000  # characters of the answer as the terminal prints it, in an answer's issue body
MAX_ANSWER_LINE = 1_000  # of one such line


def answer_issue_markdown(answer: Answer, *, reproduce: str = "", figure: str | None = "forward.png") -> str:
    """Return ``issue.md`` for an answer no single ``get_image_feature`` call decides (a workload that fails in
    the splice, a request the request side refuses, a pass with no call): its status, the error and where it
    is raised, why, the fixing release and the answer as the terminal prints it, under :data:`BUDGET`
    characters; ``figure``: the forward-pass PNG written beside it (``None``: none)."""
    from .answer_views import answer_text, fix_lines  # the answer's own presenters (they import the answer)

    style, error = answer.style, answer.error
    where = answer.stage or "forward pass"
    if error is not None:
        what = f"{where} raises {error.type}: {error.message}"
    elif answer.status is Status.NO_CALL:
        what = f"{answer.kind} reaches no get_image_feature call"
    else:
        what = f"{answer.kind} replays clean"
    head = f"Kimi-K3 {what} (SGLang {answer.release.version}, attention-TP {answer.tp_size})"
    raised = "nothing" if error is None else f"{md_code(error)} in the {md_text(where)}"
    out = [
        "# " + md_text(head, limit=MAX_MESSAGE),
        "",
        f"**{style.symbol} {style.badge}** (status `{answer.status.value}`, exit {answer.exit_code}): "
        f"{md_text(style.wording, limit=MAX_PROSE)}",
        "",
        f"SGLang raises {raised}; no single {md_text('get_image_feature')} call decides this answer.",
        "",
        f"- replayed: SGLang {md_text(answer.release.version)} at attention-TP {answer.tp_size}",
        *(f"- {md_text(line, limit=MAX_PROSE)}" for line in fix_lines(answer)),
        "",
        "## Why",
        "",
        md_text(public_text(answer.why), limit=4 * MAX_PROSE),
    ]
    printed = [_cap(public_text(line), MAX_ANSWER_LINE) for line in answer_text(answer).splitlines()]
    lines: list[str] = []
    used = 0
    for line in printed:
        used += len(line) + 1
        if used > MAX_ANSWER_TEXT:
            lines.append(f"… {len(printed) - len(lines)} more lines: answer.txt holds them all")
            break
        lines.append(line)
    out += ["", "<details>", "<summary>The answer as kimi-viz prints it</summary>", "", md_block(lines), ""]
    if reproduce:
        out += [f"- replay it: {md_code(public_command(reproduce), limit=MAX_PROSE)}", ""]
    out.append("</details>")
    if figure is not None:
        out += [
            "",
            f"Drag {md_code(figure, limit=MAX_TEXT)} (written beside `issue.md`) into this issue: the pass that "
            "decides the answer, each request's window and the rows spliced onto its pad tokens. `report.html` "
            "holds the same figure and the whole answer (zip it to attach it).",
        ]
    return "\n".join(out) + "\n"


class MarkdownView:
    """Markdown a notebook shows rendered (``_repr_markdown_``) and a terminal as its source text."""

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


__all__ = [
    "BUDGET",
    "answer_issue_markdown",
    "GITHUB_LIMIT",
    "MAX_IMAGE_ROWS",
    "MarkdownView",
    "issue_markdown",
    "md_block",
    "md_code",
    "md_text",
]
