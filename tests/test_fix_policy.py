"""One fix policy for every question: ``triage`` and ``whatif`` name the same fixing release for the same batch.

A question needs a fix when SGLang raises or an image is encoded wrongly (a silent mismatch); a later
release fixes it when neither happens there (``kimi_viz._whatif.fix``). ``triage`` asks a captured batch
through that same search, so the two never part — before, triage searched only when SGLang raised.
The search's result lives once, on the answer, and every presenter of the verdict is handed it.
"""

from __future__ import annotations

import json

import pytest
from PIL import Image

from kimi_viz import Batch, whatif
from kimi_viz._triage import triage_batch
from kimi_viz.preprocess.config import get_config
from kimi_viz.request.producer import deferred_item
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split.verdict import format_verdict


@pytest.fixture(scope="module")
def silent_batch(tmp_path_factory) -> Batch:
    """Three cpu-backend images at TP 2 where 0.5.18's shard-local read hands the last image a grid with the same
    patch count but another shape: the length check passes, the rows are wrong (silent), 0.5.19 reads its own."""
    folder = tmp_path_factory.mktemp("images")
    paths = []
    for name, size in (("wide", (560, 280)), ("square", (300, 300)), ("tall", (280, 560))):
        Image.new("RGB", size, (30, 100, 200)).save(folder / f"{name}.png")
        paths.append(folder / f"{name}.png")
    processor = get_config("kimi-k3").to_media_proc_cfg()
    return Batch(items=[deferred_item(p, "cpu", mode="shapes") for p in paths], processor=processor)


def _both(batch: Batch):
    asked = whatif(batch, sglang_version="0.5.18", tp_size=2)
    triaged = triage_batch(batch, sglang_version="0.5.18", tp=2, rank="all", mode="shapes")
    return asked, triaged


def test_triage_and_whatif_name_the_same_fix_for_an_error(silent_batch):
    asked, triaged = _both(SCENARIOS["s1-cpu"].build())
    assert asked.status.value == triaged.answer.status.value == "error-reproduced"
    assert asked.fixed_in == triaged.answer.fixed_in and asked.fixed_in.release == "0.5.19"


def test_triage_and_whatif_name_the_same_fix_for_a_silent_mismatch(silent_batch):
    asked, triaged = _both(silent_batch)
    assert asked.status.value == triaged.answer.status.value == "silent-mismatch"
    assert asked.fixed_in == triaged.answer.fixed_in and asked.fixed_in.release == "0.5.19"
    # every presenter of the triage says it, from the one search
    assert triaged.to_json()["release"]["fixed_in"]["release"] == "0.5.19"
    assert (
        'fixed in 0.5.19: SGLang PR #35305 (Fix "wrong grids" crash in DP-sharded vision preprocessing; '
        "models/kimi_k3.py materialize_item_features)"
    ) in triaged.text()
    assert json.dumps(triaged.verdict.to_json(triaged.fixes)) == json.dumps(triaged.to_json())


def test_a_replay_without_a_question_claims_no_fix():
    """A bare replay ran no fix search: its verdict names no fixing release and does not say none exists."""
    triaged = triage_batch(SCENARIOS["s2-cpu"].build(), sglang_version="0.5.23", mode="shapes")
    assert triaged.fixes["post-fix"].found is None
    assert "not fixed by upgrading" in format_verdict(triaged.verdict, fixes=triaged.fixes)
    assert "fixed" not in format_verdict(triaged.verdict)
