"""Every message SGLang raises or logs on the Kimi vision path, in every release the kit knows: the catalogue.

The entries are data: one TOML file per part of the pipeline in ``data/``, listed in pipeline order
by :data:`STAGE_FILES` (``request``, ``processor``, ``call``, ``split``, ``encoder``, ``splice``, and
the EPD transfer's two sides ``epd_encoder`` and ``epd_receiver``, each with its embedding delivery),
read by :func:`~._load.load` into :data:`CATALOGUE`. Each entry (:class:`~kimi_viz.message_catalogue.messages.Message`)
holds its template, its sites (file under ``sglang/srt``, function, exception type or log level,
releases), the numbers it carries, what it means and what SGLang does next. To add a message, add a
``[[message]]`` table to its stage's file (``data/common.toml`` says how one is written) and regenerate
``docs/pipeline.md`` §11 (``python -m kimi_viz.message_catalogue``). :mod:`kimi_viz._explain` derives
its patterns from here; the real-SGLang lane (``tests/parity/test_message_catalogue.py``) walks each
installed release's files and fails when a message on the path is missing here or a release range is
wrong; ``docs/pipeline.md`` §11 is :func:`markdown`.
"""

from __future__ import annotations

from ..releases import release_span
from ._load import load
from .messages import Message, Stage

# The stage files of data/ (data/<name>.toml), in pipeline order: their entries, file after file, are the catalogue.
STAGE_FILES = (
    "request",
    "processor",
    "call",
    "split",
    "encoder",
    "splice",
    "epd_encoder",
    "epd_encoder_delivery",
    "epd_receiver",
    "epd_receiver_delivery",
)

# Read from data/ the first time either is asked for (__getattr__), then plain names of the module: the
# commands that never look a message up (kimi-viz --help, triage, whatif) do not parse the files.
CATALOGUE: tuple[Message, ...]  # every entry, file after file
BY_KEY: dict[str, Message]  # the entries by key


def _catalogue() -> tuple[Message, ...]:
    """Return :data:`CATALOGUE`, reading the files (and setting :data:`BY_KEY`) the first time."""
    if "CATALOGUE" not in globals():
        catalogue = load(STAGE_FILES)
        globals().update(CATALOGUE=catalogue, BY_KEY={message.key: message for message in catalogue})
    return globals()["CATALOGUE"]


def __getattr__(name: str) -> object:
    """Return ``CATALOGUE`` or ``BY_KEY`` on first use (PEP 562); any other name is missing."""
    if name not in ("CATALOGUE", "BY_KEY"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _catalogue()
    return globals()[name]


STAGE_WHAT = {
    Stage.REQUEST: "the chat request, its prompt and its <|media_pad|> placeholders",
    Stage.PROCESSOR: "the request side loads, sizes and grids each image and builds its item",
    Stage.CALL: "get_image_feature gathers the items, grids and eager features of one forward pass",
    Stage.SPLIT: "the deferred split: each rank preprocesses its own images (gpu, cpu, EPD owner-side)",
    Stage.ENCODER: "the vision tower",
    Stage.SPLICE: "mm_schedule splits the rows back per item, adjusts their length and scatters them",
    Stage.EPD: "encoder disaggregation: the encode server and the language server receiving its embedding",
}


def by_stage(messages: tuple[Message, ...] | None = None) -> dict[Stage, list[Message]]:
    """Return the messages (the catalogue's by default) by stage, in pipeline order (each stage, maybe empty)."""
    grouped: dict[Stage, list[Message]] = {stage: [] for stage in Stage}
    for message in _catalogue() if messages is None else messages:
        grouped[message.stage].append(message)
    return grouped


def where(message: Message) -> list[str]:
    """Return one line per file and function that emits ``message``: ``file, function (kind, releases)``."""
    lines: dict[tuple[str, str], list[str]] = {}
    for site in message.sites:
        kinds = lines.setdefault((site.file, site.function), [])
        kinds.append(f"{site.kind} {release_span(site.releases)}")
    return [f"sglang/srt/{file}, {function} ({', '.join(kinds)})" for (file, function), kinds in lines.items()]


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def markdown() -> str:
    """Return docs/pipeline.md §11: every stage with its messages (generated; a test keeps the doc in step)."""
    out = [
        "## 11. Every message on the path, by stage",
        "",
        "Generated from `kimi_viz.message_catalogue` (`python -m kimi_viz.message_catalogue` prints it); "
        "`kimi-viz explain` recognises each of these in a log, whatever the release, and `kimi-viz explain "
        "--list` prints the same map. Files are under `sglang/srt/`; a kind in lower case is a log level "
        "(SGLang logs the line and goes on). Messages torch or Python raise on SGLang's behalf are marked "
        "(torch) / (python).",
        "",
    ]
    for stage, messages in by_stage().items():
        out += [f"### {stage.number}. {stage.value}: {STAGE_WHAT[stage]} ({len(messages)})", ""]
        out += ["| key | kind | message | where | releases |", "|---|---|---|---|---|"]
        for message in messages:
            origin = "" if message.origin == "sglang" else f" ({message.origin})"
            functions = "<br>".join(dict.fromkeys(f"{s.file} `{s.function}`" for s in message.sites)) or "—"
            out.append(
                f"| {message.key} | {'/'.join(message.kinds) or '—'}{origin} | {_cell(message.template)} "
                f"| {functions} | {release_span(message.releases)} |"
            )
        out.append("")
    return "\n".join(out)
