"""The message catalogue (kimi_viz.message_catalogue) and what `kimi-viz explain` makes of each entry.

Every entry's text, its fields filled, is recognised as exactly that entry with its numbers, whatever
the log line around it; the three lines SGLang's users report are answered with their stage, numbers
and next step; `--list` groups by stage; docs/pipeline.md §11 is the catalogue's own map; and the
lane's source check (tests/parity/catalogue_check.py) is exercised on a small planted source tree, so
it is known to bite without a real SGLang.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from parity.catalogue_check import check, classify, defined_functions, extract, extract_source

from kimi_viz._explain import KNOWN_MESSAGES, NEXT_BY_STAGE, explain
from kimi_viz.cli import main
from kimi_viz.message_catalogue import BY_KEY, CATALOGUE, by_stage, markdown, messages, release_span
from kimi_viz.message_catalogue.messages import FIELD_FORMS, LOG_KINDS, Message, Site, Stage
from kimi_viz.releases import RELEASES

DOC = Path(__file__).resolve().parent.parent / "docs" / "pipeline.md"
SAMPLE = {
    "n": lambda i: str(101 + i),
    "word": lambda i: f"w{i}x",
    "text": lambda i: f"detail {i}",
    "type": lambda i: "<class 'list'>",
    "dtype": lambda i: "torch.float16",
    "shape": lambda i: f"torch.Size([{i + 2}, 3])",
    "list": lambda i: f"[{i + 1}, 2]",
    "phase": lambda i: "Encoder preprocessing",
}


def _filled(message: Message) -> tuple[str, dict]:
    values = tuple(SAMPLE[form](i) for i, form in enumerate(message.field_forms))
    expected = {
        name: int(value) if form == "n" else value
        for name, form, value in zip(message.field_names, message.field_forms, values)
    }
    return message.sample(values), expected


@pytest.mark.parametrize("message", CATALOGUE, ids=[m.key for m in CATALOGUE])
def test_every_entry_is_recognised_as_itself_with_its_numbers(message):
    text, expected = _filled(message)
    prefix = "[2026-02-03 04:05:06 TP1] " + ("WARNING " if message.logged else f"{'/'.join(message.kinds)}: ")
    found = explain(prefix + text + "\n")
    assert [f.message.key for f in found] == [message.key], text
    assert found[0].values == expected
    known = found[0].message
    assert known.stage == message.stage.value and known.releases == message.releases
    assert known.next_step and known.meaning == message.meaning and known.after == message.after
    for site in message.sites:
        assert f"sglang/srt/{site.file}, {site.function}" in known.raised_in


def test_the_catalogue_is_well_formed():
    assert len(BY_KEY) == len(CATALOGUE) == len({m.template for m in CATALOGUE})
    assert {m.key for m in KNOWN_MESSAGES} >= set(BY_KEY)
    for message in CATALOGUE:
        assert message.meaning and message.after, message.key
        assert message.sites or message.key == "mix-deferred-old", message.key
        for site in message.sites:
            assert site.releases and set(site.releases) <= set(RELEASES), message.key
            assert site.kind in LOG_KINDS or site.kind[0].isupper(), (message.key, site.kind)
        if message.logged:  # a warning says whether the request went on, and with which features
            assert message.after.startswith("Logged"), message.key
    assert {form for m in CATALOGUE for form in m.field_forms} <= set(FIELD_FORMS)


def test_every_msg_constant_is_the_template_of_one_entry():
    constants = {name: value for name, value in vars(messages).items() if name.startswith("MSG_")}
    named = {m.name: m for m in CATALOGUE if m.name}
    assert set(constants) == set(named)
    for name, value in constants.items():
        assert named[name].template == value, name


def test_the_processor_feature_length_message_is_raised_by_0_5_23_from_two_sites():
    message = BY_KEY["processor-length"]
    assert [(s.file, s.function) for s in message.sites if "0.5.23" in s.releases] == [
        ("multimodal/processors/kimi_k3.py", "KimiK3GPUProcessorWrapper.prepare_image_features"),
        ("multimodal/kimi_k3_image_processing.py", "materialize_kimi_k3_cpu_item_features"),
    ]
    assert release_span(message.releases) == "0.5.18–0.5.23"


REPORTED = [
    (
        "Number of tokens in multimodal embedding does not match those in the input text. Got 279 tokens in the "
        "text but 260 tokens from multimodal embeddings",
        "token-mismatch",
        Stage.SPLICE,
        {"prompt_tokens": 279, "feature_rows": 260},
        "19 missing",
        "--together",
    ),
    (
        "Kimi image placeholders must map one-to-one to image data: expected 1, found 0 token(s)",
        "one-to-one",
        Stage.REQUEST,
        {"images": 1, "placeholders": 0},
        "1 image(s) sent, 0 <|media_pad|> placeholder(s)",
        "whatif --chat",
    ),
    (
        "Encoder produced X tokens, but preprocessor metadata expected Y",
        "encoder-produced",
        Stage.EPD,
        {"produced": "X", "expected": "Y"},
        "the encoder produced X feature rows",
        "--serving epd-encoder",
    ),
    (
        "sglang.srt.disaggregation.encoder.server.InternalError: Encoder produced 361 tokens, but preprocessor "
        "metadata expected 414",
        "encoder-produced",
        Stage.EPD,
        {"produced": 361, "expected": 414},
        "53 row(s) missing",
        "--serving epd-encoder",
    ),
]


@pytest.mark.parametrize("line, key, stage, values, reading, next_step", REPORTED)
def test_the_reported_lines_are_answered_with_stage_numbers_and_next_step(
    line, key, stage, values, reading, next_step, capsys
):
    (found,) = explain(line)
    assert (found.message.key, found.message.stage, found.values) == (key, stage.value, values)
    assert reading in found.reading and next_step in found.message.next_step
    assert main(["explain", line]) == 0
    out = capsys.readouterr().out
    for label in ("stage:", "raised in:" if not found.message.logged else "logged in:", "numbers:", "then:", "next:"):
        assert label in out, out
    assert f"stage:     {stage.value} ({stage.number} of 7" in out
    if found.message.logged:
        assert "request runs with wrong features" in out


def test_a_line_cut_short_or_from_an_unknown_release_still_matches_by_text():
    lines = {
        "insufficient-embedding": "sglang 0.5.99 RuntimeError: Insufficient multimodal embedding length: "
        "num_mm_tokens_in_input_ids=5 vs num_mm_tokens_in_embedding=4",
        "discard-cached": "Discarding cached multimodal embedding due to a token-count mismatch: cache_key=ab, "
        "expected_tokens=5, cached_tokens=4",
        "placeholder-tokens": "ValueError: Expected 2 image placeholder token(s), found 1",
    }
    for key, line in lines.items():
        assert [f.message.key for f in explain(line)] == [key], line


def test_a_warning_says_what_sglang_did_next():
    (discard,) = explain(messages.MSG_DISCARD.format("k1", 187, 120))
    assert discard.message.logged and "right features" in discard.message.after
    (hint,) = explain(messages.MSG_RAISE_CHUNK)
    assert "goes on with wrong features" in hint.message.after


def test_list_groups_the_messages_by_stage(capsys):
    assert main(["explain", "--list"]) == 0
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert len(headers) == len(Stage) + 1 and headers[-1] == "kimi-viz (1)"
    for header, (stage, group) in zip(headers, by_stage().items()):
        assert header.startswith(f"{stage.number}. {stage.value}: ") and header.endswith(f"({len(group)})")
    section = out.split(headers[0])[1].split(headers[1])[0]
    assert "one-to-one " in section and "token-mismatch" not in section
    assert main(["explain", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    order = [s.value for s in Stage] + ["kimi-viz"]
    assert [order.index(r["stage"]) for r in rows] == sorted(order.index(r["stage"]) for r in rows)


def test_every_stage_has_a_next_step_that_names_a_kit_command():
    for stage in Stage:
        assert any(word in NEXT_BY_STAGE[stage] for word in ("kimi-viz whatif", "kimi-viz capture")), stage


def test_docs_pipeline_holds_the_generated_map():
    """docs/pipeline.md §11 is `python -m kimi_viz.message_catalogue`; regenerate it when the catalogue changes."""
    text = DOC.read_text(encoding="utf-8")
    assert markdown() in text, "docs/pipeline.md §11 is stale: replace it with `python -m kimi_viz.message_catalogue`"


# --- the lane's source check, on a planted source tree --------------------------------------------------
SOURCE = """
import logging
import warnings
import torch
logger = logging.getLogger(__name__)

def _error(n):
    return ValueError(f"helper says {n}")

class KimiK3ImageProcessor:
    def process_mm_data_async(self, images, ids):
        if len(images) != ids:
            raise ValueError(
                "Kimi image placeholders must map one-to-one to image data: "
                f"expected {len(images)}, found {ids} token(s)"
            )
        msg = "first part"
        msg += f" then {ids}"
        if ids:
            raise RuntimeError(msg)
        logger.warning("cache %s held %d rows", "k", 3)
        logger.info("progress %d", 1)
        warnings.warn("old path {}".format(ids))
        assert ids, f"{ids=} must be set"
        maybe_assert_sum(ids, 3, "device check")
        raise _error(ids)
        raise
"""


def _tree(tmp_path: Path) -> Path:
    srt = tmp_path / "sglang" / "srt"
    (srt / "multimodal" / "processors").mkdir(parents=True)
    (srt / "multimodal" / "processors" / "kimi_k3.py").write_text(textwrap.dedent(SOURCE))
    return srt


def test_the_source_walk_reads_every_kind_of_message(tmp_path):
    found = extract_source(textwrap.dedent(SOURCE), "multimodal/processors/kimi_k3.py")
    got = {(f.kind, f.template) for f in found}
    assert got == {
        ("ValueError", messages.MSG_ONE_TO_ONE),
        ("RuntimeError", "first part then {}"),
        ("warning", "cache {} held {} rows"),
        ("info", "progress {}"),
        ("UserWarning", "old path {}"),
        ("AssertionError", "ids={} must be set"),
        ("RuntimeError", "device check"),
        ("ValueError", "helper says {}"),
        ("re-raise", None),
    }
    assert {f.function for f in found} == {"KimiK3ImageProcessor.process_mm_data_async"}
    off = {f.template for f in found if classify(f) is not None}
    assert off == {"progress {}", None}  # an info log and a bare re-raise are not on the path


def test_the_source_check_reports_a_gap_a_wrong_range_and_a_stale_claim(tmp_path):
    srt = _tree(tmp_path)
    files, found = extract(srt)
    assert files == ["multimodal/processors/kimi_k3.py"]
    here = "0.5.23"
    site = lambda kind: Site(
        "multimodal/processors/kimi_k3.py", "KimiK3ImageProcessor.process_mm_data_async", kind, (here,)
    )
    on_path = {(f.kind, f.template) for f in found if classify(f) is None}
    catalogue = [
        Message(f"m{i}", text, Stage.REQUEST, (site(kind),), fields=("x",) * text.count("{}"), meaning="m", after="a")
        for i, (kind, text) in enumerate(sorted(on_path))
    ]
    defined = defined_functions(srt, files)
    assert check(catalogue, files, found, here, defined).ok
    gap = check(catalogue[1:], files, found, here, defined)
    assert len(gap.missing) == 1 and sorted(on_path)[0][1] in gap.missing[0] and not gap.wrong_range
    older = [replace(catalogue[0], sites=(replace(catalogue[0].sites[0], releases=("0.5.22",)),)), *catalogue[1:]]
    assert len(check(older, files, found, here, defined).wrong_range) == 1
    stale = [*catalogue, Message("gone", "a text no release has", Stage.REQUEST, (site("ValueError"),), meaning="m")]
    assert check(stale, files, found, here, defined).not_in_sources == [
        "multimodal/processors/kimi_k3.py KimiK3ImageProcessor.process_mm_data_async ValueError: "
        "'a text no release has'"
    ]
    torch_site = Message(
        "t", "torch text", Stage.SPLICE, (replace(site("RuntimeError"), function="nowhere"),), origin="torch"
    )
    assert "no such function" in check([*catalogue, torch_site], files, found, here, defined).not_in_sources[0]


# --- the lane's call graph, on a planted source tree -------------------------------------------------------
GRAPH = {
    "multimodal/processors/base.py": """
class Base:
    def __init__(self, proc):
        self._proc = proc
    def load(self):
        return self.process()
    def process(self):
        raise ValueError("base process")
    def unused(self):
        raise ValueError("never called")
""",
    "multimodal/processors/kimi_k3.py": """
from .base import Base
from ..helpers import check as checked
from .. import helpers

class Wrapper:
    def __call__(self, images):
        helpers.deep(images)

class KimiK3ImageProcessor(Base):
    def __init__(self, proc):
        super().__init__(proc)
        self._wrapper = Wrapper()
    async def process_mm_data_async(self, images):
        checked(images)
        return self.load()
    def process(self):
        self._wrapper(1)
        return super().process()
""",
    "multimodal/helpers.py": """
def check(images):
    def inner():
        raise ValueError("nested")
    return inner
def deep(images):
    raise ValueError("deep")
def other():
    raise ValueError("other")
""",
    "managers/tokenizer_manager.py": """
from sglang.srt.multimodal.helpers import other
class TokenizerManager:
    async def _tokenize_one_request(self, obj):
        if obj.plain:
            raise ValueError("text only")
        if should_run_mm_processor:
            raise ValueError("mm branch")
""",
}


def test_the_call_graph_follows_self_super_imports_constructors_and_branches(tmp_path):
    from parity.call_graph import reach

    srt = tmp_path / "sglang" / "srt"
    for rel, text in GRAPH.items():
        (srt / rel).parent.mkdir(parents=True, exist_ok=True)
        (srt / rel).write_text(textwrap.dedent(text))
    graph = reach(srt)
    assert {(e.file, e.function) for e in graph.entries} == {
        ("multimodal/processors/kimi_k3.py", "KimiK3ImageProcessor.process_mm_data_async"),
        ("managers/tokenizer_manager.py", "TokenizerManager._tokenize_one_request"),
    }
    functions = {f"{file}:{name}" for file, name in graph.functions}
    assert {
        "multimodal/processors/base.py:Base.load",  # self.load() in the base class
        "multimodal/processors/kimi_k3.py:KimiK3ImageProcessor.process",  # the override, reached from the base
        "multimodal/processors/base.py:Base.process",  # super().process()
        "multimodal/helpers.py:check",  # from .. import check as checked
        "multimodal/helpers.py:check.inner",  # a nested function handed on
        "multimodal/processors/kimi_k3.py:Wrapper.__call__",  # self._wrapper(...), bound to Wrapper() in __init__
        "multimodal/helpers.py:deep",  # helpers.deep(...)
    } <= functions
    assert not {"multimodal/processors/base.py:Base.unused", "multimodal/helpers.py:other"} & functions
    files, found = extract(srt)
    on_path = {f.template for f in found if classify(f) is None}
    assert on_path == {"base process", "nested", "deep", "mm branch"}  # "text only" is outside the mm branch
