"""``issue.md`` (``kimi-viz triage --format markdown``) rendered by a Markdown renderer, and ``triage --emit-repro``.

Every catalogue scenario's issue body is rendered with markdown-it-py (CommonMark plus GitHub's tables)
and read back: the per-image table with one row per image and every cell in place, the status word,
"N of M ranks fail", the release and the fix release, the cause and fix, the ``<details>`` block with
the step trace and the environment, and the PNG to drag in. Labels full of Markdown and HTML stay text;
the only raw HTML is ``<details>``/``<summary>``; a 256-image batch stays under GitHub's body limit
with its table whole. The S1 capture is rendered from the manifest a capture leaves.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from kimi_viz._triage import triage, triage_batch
from kimi_viz.cli import main
from kimi_viz.manifest import read_manifest, redact_batch, write_manifest
from kimi_viz.message_catalogue.messages import MSG_LENGTH
from kimi_viz.report.markdown import BUDGET, GITHUB_LIMIT, MAX_IMAGE_ROWS, md_text
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split.batch import RecordedOutcome
from kimi_viz.split.cause import ErrorInfo
from kimi_viz.split.forward_context import ContextImage, ContextItem, ContextRequest, ForwardContext

HOSTILE = "a|b<script>alert(1)</script>*x* _y_ [z](javascript:x) @someone #1 https://evil.example/p `t`"
COLUMNS = [
    "image",
    "file",
    "size",
    "backend",
    "rank",
    "grid read",
    "grid produced",
    "rows expected",
    "rows produced",
    "match",
]


def render(text: str) -> tuple[str, list]:
    """Return ``text`` rendered as GitHub does tables (CommonMark + table + strikethrough), and its tokens."""
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    return md.render(text), md.parse(text)


class Page(HTMLParser):
    """The rendered page read back: its tags, its tables as lists of rows of cell text, and all its text."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def raw_html(tokens) -> list[str]:
    """Return every raw HTML tag the Markdown itself holds (html_block and html_inline tokens)."""
    found = []
    for token in tokens:
        for piece in [token, *(token.children or [])]:
            if piece.type in ("html_block", "html_inline"):
                found += re.findall(r"</?([a-zA-Z][a-zA-Z0-9-]*)", piece.content)
    return found


def without_code_spans(text: str) -> str:
    """Return ``text`` without its inline code spans (a run of backticks up to the next run of the same length)."""
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", text)


def check_issue(text: str, verdict, *, images: int, fixed_in=None) -> Page:
    """Render ``text`` and check what every issue body holds; return the rendered page."""
    assert len(text) <= BUDGET < GITHUB_LIMIT
    html, tokens = render(text)
    page = Page(html)
    assert set(raw_html(tokens)) <= {"details", "summary"}
    assert raw_html(tokens).count("details") == 2 and raw_html(tokens).count("summary") == 2
    assert "script" not in page.tags and "a" not in page.tags and "img" not in page.tags
    assert text.startswith("# ") and page.tags[0] == "h1"
    words = page.all_text
    style = verdict.style
    assert (
        f"{style.symbol} {style.badge}" in words and f"status {verdict.status.value}, exit {verdict.exit_code}" in words
    )
    assert verdict.rank_summary in words
    assert f"replayed: {verdict.release.label}" in words
    if fixed_in is not None:  # the answer's fix search (TriageResult.fixes)
        assert f"fixed in {fixed_in.release}" in words
    if verdict.error is not None:
        assert f"{verdict.error.type}: {verdict.error.message}" in words
    assert "Cause." in words and "Step trace" in words and "Environment:" in words
    assert "kimi-viz: " in words and "summary.png" in words
    (table,) = [t for t in page.tables if t[0] == COLUMNS]
    rows = table[1:]
    assert all(len(row) == len(COLUMNS) for row in rows)
    assert len(rows) == min(images, MAX_IMAGE_ROWS)
    assert [int(row[0]) for row in rows] == sorted(int(row[0]) for row in rows)
    return page


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenarios_issue_renders_with_its_table_counts_and_verdict(name):
    scenario = SCENARIOS[name]
    batch = scenario.build()
    result = triage_batch(batch, mode="pixels" if "pixels" in scenario.modes else "shapes")
    verdict = result.verdict
    fixed_in = result.answer.fixed_in
    page = check_issue(result.markdown(figure="summary.png"), verdict, images=len(batch.items), fixed_in=fixed_in)
    (table,) = [t for t in page.tables if t[0] == COLUMNS]
    for row, who in zip(table[1:], verdict.images):
        assert row[0] == str(who.image) and row[1] == who.label
    outcomes = {r.image: r for r in verdict.divergence.images}
    for row in table[1:]:
        outcome = outcomes.get(int(row[0]))
        if outcome is not None:
            assert row[4] == str(outcome.rank)
            assert row[7] == str(outcome.expected_rows)
            assert row[8] == ("" if outcome.produced_rows is None else str(outcome.produced_rows))
            assert row[9] == outcome.match_text()
    if verdict.divergence.fix:
        assert verdict.divergence.fix in page.all_text


def test_user_text_full_of_markdown_and_html_stays_text(tmp_path):
    batch = SCENARIOS["s1-cpu"].build()
    for item in batch.items:
        item.label = f"{HOSTILE}\nline two"
    batch.note = HOSTILE
    batch.extra = {"odd|key": HOSTILE}
    batch.recorded = RecordedOutcome("error", ErrorInfo("ValueError", HOSTILE))
    batch.created_by = HOSTILE
    manifest = write_manifest(batch, tmp_path / HOSTILE.replace("/", "_")[:40])
    result = triage(manifest, out_dir=tmp_path / "out")
    text = (tmp_path / "out" / "issue.md").read_text(encoding="utf-8")
    assert text == result.markdown(figure="summary.png")
    page = check_issue(text, result.verdict, images=3, fixed_in=result.answer.fixed_in)
    (table,) = [t for t in page.tables if t[0] == COLUMNS]
    label = md_text(f"{HOSTILE}\nline two", limit=80)
    assert label.endswith("…")
    for row in table[1:]:  # the label is one cell, shown as typed (cut at 80 characters, its newline escaped)
        assert row[1] == f"{HOSTILE}\\nline two"[:79] + "…"
    words = page.all_text
    assert HOSTILE in words  # the note, whole
    assert "<script>" in words  # as text, never as an element
    # Nothing links or mentions: outside code spans, URLs, @names and #numbers are escaped in the Markdown.
    plain = without_code_spans(text)
    assert "evil.example" in plain and "someone" in plain
    assert not re.search(r"(?i)https?://|www\.", plain)
    assert not re.search(r"(?<!\\)@someone|(?<!\\)#1\b", plain)


def test_a_256_image_batch_stays_under_githubs_limit_with_its_table_whole():
    batch = redact_batch(SCENARIOS["s1-cpu"].build())
    items = []
    for k in range(256):
        item = copy.deepcopy(batch.items[k % 3])
        item.label = f"{k:03d} {HOSTILE} " + "y" * 300
        items.append(item)
    batch.items = items
    result = triage_batch(batch, tp=8, mode="shapes")
    verdict = result.verdict
    assert verdict.rank_summary == "8 of 8 ranks fail"
    text = result.markdown(figure="summary.png")
    page = check_issue(text, verdict, images=256, fixed_in=result.answer.fixed_in)
    (table,) = [t for t in page.tables if t[0] == COLUMNS]
    flagged = [r.image for r in verdict.divergence.images if r.flagged]
    shown = [int(row[0]) for row in table[1:]]
    assert verdict.divergence.first_image in shown
    assert set(shown) <= set(flagged)  # every listed image is a flagged one while flagged ones are left
    left = 256 - len(shown)
    match = re.search(
        r"Not listed: (\d+) more of the 256 images \((\d+) match their grid, (\d+) more are flagged\)", page.all_text
    )
    assert match and int(match.group(1)) == left
    assert int(match.group(3)) == len(flagged) - len(shown)
    assert text.index("Not listed") > text.index(table[-1][0])  # after the table, never inside it


def test_a_body_over_the_budget_is_written_again_more_compactly(monkeypatch):
    from kimi_viz.report import markdown

    result = triage_batch(SCENARIOS["healthy-tp4"].build(), mode="shapes")
    full = result.markdown()
    monkeypatch.setattr(markdown, "BUDGET", len(full) - 1)
    compact = result.markdown()
    assert len(compact) < len(full)
    html, tokens = render(compact)
    assert set(raw_html(tokens)) <= {"details", "summary"} and "<table>" in html


def _s1_capture(tmp_path: Path, **extra) -> Path:
    """s1-cpu as the manifest a capture of rank 1 leaves on SGLang 0.5.18 (the lane's S1 capture)."""
    batch = SCENARIOS["s1-cpu"].build()
    batch.sglang_version, batch.attn_tp_rank = "0.5.18", 1
    batch.recorded = RecordedOutcome("error", ErrorInfo("ValueError", MSG_LENGTH))
    batch.created_by = "kimi-viz capture"
    return write_manifest(batch, tmp_path / "captures" / "s1-rank1", **extra)


def test_the_s1_capture_renders_as_an_issue(tmp_path):
    manifest = _s1_capture(tmp_path)
    result = triage(manifest, out_dir=tmp_path / "out")
    text = result.outputs["issue"].read_text(encoding="utf-8")
    assert result.outputs["issue"] == tmp_path / "out" / "issue.md"
    page = check_issue(text, result.verdict, images=3, fixed_in=result.answer.fixed_in)
    words = page.all_text
    title = text.splitlines()[0]
    assert f"raises ValueError: {MSG_LENGTH}" in title and "SGLang 0.5.18, attention-TP 2, S1" in title
    assert "✗ ERROR REPRODUCED (status error-reproduced, exit 1)" in words
    assert "rank 1 fails" in words and f"rank 1 (images 1, 2): ValueError: {MSG_LENGTH}" in words
    assert (
        'fixed in 0.5.19: SGLang PR #35305 (Fix "wrong grids" crash in DP-sharded vision preprocessing; '
        "models/kimi_k3.py materialize_item_features)"
    ) in words
    (table,) = [t for t in page.tables if t[0] == COLUMNS]
    assert table[1] == ["0", "chelsea.png", "451×300 RGB", "cpu", "", "", "", "", "", "not replayed"]
    assert table[2] == [
        "1",
        "microaneurysms.png",
        "102×102 L",
        "cpu",
        "1",
        "[1, 22, 34] (image 0's row)",
        "[1, 8, 8]",
        "748",
        "64",
        "NO",
    ]
    assert "SGLang read the grid of image 0 for image 1." in words
    assert "The check that fails: expected 812, produced 68." in words
    assert "Fix. Upgrade SGLang to a version with SGLang PR #35305 (0.5.19 or later)" in words
    digest = hashlib.sha256((manifest / "manifest.json").read_bytes()).hexdigest()
    details = words[words.index("Step trace (rank 1) and environment") :]
    assert f"manifest: s1-rank1, sha256 {digest}" in details
    assert "SGLang (recorded): 0.5.18" in details and "kimi-viz: " in details
    assert "6. length_check_cpu" in details and f"raises ValueError: {MSG_LENGTH}" in details
    # the manifest lies outside the folder the tests run in: the issue names its folder alone, never its path
    assert f"kimi-viz triage {manifest.name} --emit-repro DIR" in details and str(manifest) not in text
    assert text.rstrip().splitlines()[-1].startswith("Drag `summary.png` (written beside `issue.md`)")
    assert "SGLang: 0.5.18" in words and "attention-TP size: 2 (recorded on rank 1)" in words
    both = triage(manifest, code_path="both").markdown()
    assert "- the same batch on the post-fix code path: **? NOT REPRODUCED**, the replayed rank passes" in both


def test_the_workload_section_holds_the_forward_context():
    batch = SCENARIOS["s1-cpu"].build()
    batch.items = batch.items[:2]
    batch.sglang_version = "0.5.18"
    batch.forward_context = ForwardContext(
        requests=(
            ContextRequest(0, 420, (ContextImage(((3, 189),), "in-call", 0),), rid="req-a"),
            ContextRequest(2, 30, (ContextImage(((3, 18),), "in-call", 1),), rid="<b>req|b</b>"),
        ),
        items=(ContextItem(0, 0), ContextItem(1, 0)),
        chunked_prefill_size=8192,
    )
    result = triage_batch(batch)
    text = result.markdown()
    html, tokens = render(text)
    assert set(raw_html(tokens)) <= {"details", "summary"}
    words = Page(html).all_text
    assert "This call held 2 images from 2 requests." in words
    assert "The first diverging image, call item 1, came from request 1 (rid <b>req|b</b>), image 0." in words
    assert "chunked-prefill size: 8192" in words
    assert "Run the triage with --out DIR and drag DIR/summary.png" in words


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_format_markdown_prints_issue_md_and_json_stays_an_alias(tmp_path):
    manifest = _s1_capture(tmp_path)
    code, out, err = run_cli("triage", str(manifest), "--out", str(tmp_path / "out"), "--format", "markdown")
    assert (code, err) == (1, "")
    assert out == (tmp_path / "out" / "issue.md").read_text(encoding="utf-8")
    code, as_json, _ = run_cli("triage", str(manifest), "--json")
    code2, as_format, _ = run_cli("triage", str(manifest), "--format", "json")
    assert code == code2 == 1 and json.loads(as_json) == json.loads(as_format)
    code, _, err = run_cli("triage", str(manifest), "--json", "--format", "markdown")
    assert code == 2 and "--json is --format json" in err


def test_triage_emit_repro_writes_the_batch_test_and_says_where(tmp_path):
    manifest = _s1_capture(tmp_path)
    repro = tmp_path / "repro"
    code, out, err = run_cli("triage", str(manifest), "--format", "json", "--emit-repro", str(repro))
    assert code == 1 and json.loads(out)["status"] == "error-reproduced"  # stdout stays one JSON object
    (test_file,) = repro.glob("test_kimi_k3_repro_*.py")
    assert f"kimi-viz triage: wrote the repro {test_file} (run it with: python -m pytest {repro})" in err
    case = json.loads(test_file.with_suffix(".json").read_text())
    digest = hashlib.sha256((manifest / "manifest.json").read_bytes()).hexdigest()
    assert case["source"]["manifest_sha256"] == digest and case["release"] == "0.5.18" and case["tp_size"] == 2
    assert "kimi_viz" not in test_file.read_text().split('"""', 2)[2]  # the code imports no kit


def test_a_redacted_manifests_repro_carries_no_pixels(tmp_path):
    manifest = _s1_capture(tmp_path, redact=True)
    assert all(item.feature.kind == "shape_only" for item in read_manifest(manifest).items)
    repro = tmp_path / "repro"
    code, _, err = run_cli("triage", str(manifest), "--emit-repro", str(repro))
    assert code == 1 and "wrote the repro" in err
    files = sorted(p.relative_to(repro).as_posix() for p in repro.rglob("*") if p.is_file())
    assert [f for f in files if not f.startswith(".")] == [
        f"{Path(f).stem}.{ext}" for f in files if f.endswith(".py") for ext in ("json", "py")
    ]
    assert not [p for p in repro.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp")]
    case = json.loads(next(repro.glob("*.json")).read_text())
    assert case["source"]["redacted"] is True
    assert all(it["feature"]["png"] is None for b in case["batches"] for it in b["items"])


def test_a_bad_emit_repro_folder_is_refused_before_the_replay(tmp_path):
    manifest = _s1_capture(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    out = tmp_path / "out"
    code, stdout, err = run_cli("triage", str(manifest), "--out", str(out), "--emit-repro", str(taken))
    assert (code, stdout) == (2, "") and "--emit-repro" in err and "not empty" in err
    assert not out.exists()  # refused before anything was replayed or written
    code, _, err = run_cli("triage", str(manifest), "--out", str(out), "--emit-repro", str(out))
    assert code == 2 and "name the same folder" in err
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli("triage", str(manifest), "--emit-repro", str(tmp_path / "file"))
    assert code == 2 and "--emit-repro" in err
