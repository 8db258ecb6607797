"""The message catalogue against the installed release's own files: complete, and its release ranges right.

Runs in the real-SGLang lane (``tests/parity/conftest.py``). ``call_graph.reach`` builds the installed
``sglang`` package's call graph with ``ast`` (located by ``importlib.util.find_spec``, nothing imported
from it) from the Kimi entry points of this release; ``catalogue_check.extract`` lists every message
raised, asserted or logged in the files it reaches, and ``catalogue_check.classify`` keeps those emitted
in a reached function unless a listed, reasoned rule takes them out (``OFF_PATH``). The check fails when a
message on the path is missing from :data:`kimi_viz.message_catalogue.CATALOGUE`, when the catalogue
has the message at that site but not for this release, when it claims this release for a site whose
message the release does not have, or when a torch / Python message names a function the release does
not define. A new release's messages show up here as a red lane, not as a silent gap; the planted gap
(an entry deleted from a copy of the catalogue, another entry's range shortened) shows the check bites.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from kimi_viz.message_catalogue import CATALOGUE

from .call_graph import reach
from .catalogue_check import check, defined_functions, extract
from .lane import record

PLANTED = ("token-mismatch", "one-to-one")  # deleted / range-shortened in the planted copies


def _srt() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed as a package"
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


CATALOGUE_FILES = sorted({site.file for message in CATALOGUE for site in message.sites})


def _walk():
    srt = _srt()
    files, found = extract(srt, also=CATALOGUE_FILES)
    return files, found, defined_functions(srt, files)


def test_the_call_graph_reaches_every_kimi_stage_from_the_entry_points(release):
    graph = reach(_srt())
    record("call-graph", entries=len(graph.entries), functions=len(graph.functions), files=len(graph.files))
    reached = {file for file, _ in graph.functions}
    for file in (
        "multimodal/processors/kimi_k3.py",
        "multimodal/processors/base_processor.py",
        "multimodal/processors/kimi_common.py",
        "models/kimi_k3_vl.py",
        "multimodal/mm_utils.py",
        "managers/mm_utils.py",
        "managers/tokenizer_manager.py",
    ):
        assert file in reached or file in {f for f, _ in graph.regions}, file
    assert any(file.startswith("disaggregation/") for file in reached)  # the EPD encoder and receiver
    assert ("models/kimi_k3_vl.py", "KimiK3VisionTower.forward") in graph.functions  # self.vision_tower(...)


def test_the_catalogue_holds_every_message_on_the_path_of_the_installed_release(release):
    files, found, defined = _walk()
    report = check(CATALOGUE, files, found, release, defined)
    record(
        "messages", **report.counts(), disagreements=len(report.missing + report.wrong_range + report.not_in_sources)
    )
    assert len(files) >= 12 and report.on_path >= 90, report.describe()  # the walk found the path's files
    assert report.ok, report.describe()


def test_a_message_deleted_from_the_catalogue_turns_the_check_red(release):
    files, found, defined = _walk()
    deleted = [message for message in CATALOGUE if message.key != PLANTED[0]]
    gap = check(deleted, files, found, release, defined)
    shortened = [
        replace(m, sites=tuple(replace(s, releases=tuple(r for r in s.releases if r != release)) for s in m.sites))
        if m.key == PLANTED[1]
        else m
        for m in CATALOGUE
    ]
    short = check(shortened, files, found, release, defined)
    caught = [
        any("Number of tokens in multimodal embedding" in line for line in gap.missing),
        any("must map one-to-one" in line for line in short.wrong_range),
    ]
    record("messages-gap", plants=len(PLANTED), caught=sum(caught), missing=len(gap.missing))
    assert caught == [True, True], gap.describe() + "\n" + short.describe()
    assert not gap.wrong_range and not gap.not_in_sources and not short.missing
