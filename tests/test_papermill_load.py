"""papermill runs notebooks/06_under_load.ipynb with a deployment's parameters: images, release, TP, chunk size."""

from __future__ import annotations

import re
from pathlib import Path

from test_papermill_whatif import execute

from kimi_viz.data import sample_path

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "06_under_load.ipynb"
GPU_GRIDS = "Kimi-K3 deferred GPU preprocessing produced wrong grids"
UNBOUNDED = "memory unbounded (no --max-total-tokens, --max-running-requests or --max-mamba-cache-size)"


def _row(text: str, request: str, image: str) -> list[str]:
    """Return the cells of the first table row of ``request``'s ``image`` in the notebook's text (two-space columns)."""
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"\s{2,}", line.strip())]
        if cells[:2] == [request, image]:
            return cells
    raise AssertionError(f"no row for {request} {image}")


def test_two_requests_fail_together_on_0518_at_tp2(tmp_path):
    images = [str(sample_path("rocket.jpg")), str(sample_path("astronaut.png"))]
    notebook, text = execute(tmp_path, notebook=NOTEBOOK, images=images, sglang_version="0.5.18", tp=2, device="cpu")
    injected = [c for c in notebook.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'sglang_version = "0.5.18"' in injected[0].source
    alone = text.split("error-reproduced")[0]
    assert alone.count("clean") >= 2  # each request alone passes
    assert "error-reproduced  [1]" in text and "fixed in 0.5.19" in text
    assert "get_image_feature receives 2 images from 2 requests in one call" in text
    assert "0.5.18         pre-fix    ✓ clean  ✗ A rank 1 pass 1" in text  # the sweep's row: TP 1, TP 2
    assert "r1 [150, 300)" in text and "cache hit" in text  # the straddling image's second chunk
    # Section 7: the section-6 chat counted, then tokenized by the synthetic checkpoint, at a chunk of 512: the
    # counted prompt puts both images in pass 1 (0.5.18 raises); the tokenized one cuts rocket.jpg in two and
    # encodes astronaut.png in pass 2 alone (clean).
    cut = re.sub(r" {2,}", "  ", text)
    assert (
        "counted (no --model-path)  768  [0, 512), [512, 768)  25..392: pass 1  402..762: pass 1–2 (straddles)  "
        "error-reproduced: ValueError: Kimi-K3 deferred GPU preprocessing produced wrong grids" in cut
    )
    assert re.search(
        r"tokenized by \S+/Kimi-K3-synthetic  964  \[0, 512\), \[512, 964\)  211\.\.578: pass 1–2 \(straddles\)  "
        r"588\.\.948: pass 2  clean",
        cut,
    )
    assert (
        "KimiK3ForConditionalGeneration  models/kimi_k3.py (multimodal/processors/kimi_k3.py)  163605 / 163605" in cut
    )
    assert "203  163605  <|media_pad|>" in cut and "219 ids, 2 <|media_pad|> (id 163605)" in cut
    # The second turn of a chat (its own release, 0.5.23, default flags): it shares 503 tokens with turn 1, but the
    # hybrid tree holds turn 1's state only at 448 (484 floored to 64), inside camera.png: the cut re-opens it.
    assert "UnifiedRadixCache (FULL + MAMBA), extra_buffer, overlap schedule; fa3 attention, page 1  t1@448" in text
    assert "2     t2       907            90..450, 544..873   503     448          [448, 907)  ok" in text
    row = _row(text, "t2", "camera.png")
    assert row[2:] == ["90..450", "448", "embedding cache (re-opened by the cut back)", "pass 2: embedding cache"]
    assert any(o.get("data", {}).get("image/png") for c in notebook.cells for o in c.get("outputs", []))
    # Section 8 at its defaults (0.5.18, TP 2, a 1555-token pool): r2 retracted, then prefilled beside r3
    rows = re.sub(r" {2,}", "  ", text)  # table columns: two spaces apart
    assert f"{UNBOUNDED}  clean  r1 | r2 | r3" in rows
    assert (
        "KV pool 1555 tokens, 777 request rows, mamba state pool unbounded  error-reproduced  r1 | r2 | r3, r2" in rows
    )
    assert "retracted  r2 at 460 (421 outputs)" in rows and "NO_TOKEN  383, 461, 607" in rows
    assert "the tree evicted  607: 640 tokens, 1 state, 698: 384 tokens, 1 state" in rows
    # and the chat turn whose prefix memory evicted: turn 2 starts at 0 and horse.png meets rocket.jpg
    assert f"{UNBOUNDED}  clean  256  r2: rocket.jpg" in rows
    assert (
        "KV pool 900 tokens, 450 request rows, mamba state pool unbounded  error-reproduced  0  "
        "t2: horse.png, r2: rocket.jpg" in rows
    )
    assert "t2's cached prefix was evicted (tokens 192..255 at step 231, tokens 0..191 at step 295)" in text


def test_the_same_requests_pass_from_0519_with_another_chunk_size(tmp_path):
    _, text = execute(
        tmp_path,
        notebook=NOTEBOOK,
        images=["chelsea.png", "coffee.png", "rocket.jpg"],
        sglang_version="0.5.23",
        tp=4,
        chunked_prefill_size=100,
        memory_sglang_version="0.5.23",
        memory_pool=3110,
        device="cpu",
    )
    before_the_sweep = text.split("release        code path  TP 1")
    assert len(before_the_sweep) == 2 and "error-reproduced" not in before_the_sweep[0]
    assert "every pad token receives its own image's feature row" in text
    assert "r1 [100, 200)" in text
    # section 8 with a pool twice as large on 0.5.23: nothing retracted, each request prefilled alone
    rows = re.sub(r" {2,}", "  ", text)
    assert "KV pool 3110 tokens, 1555 request rows, mamba state pool unbounded  clean  r1 | r2 | r3" in rows
    assert "retracted  —" in rows and "NO_TOKEN  —" in rows


def test_the_chats_second_turn_re_opens_its_first_image_at_page_16_as_well(tmp_path):
    _, text = execute(
        tmp_path,
        notebook=NOTEBOOK,
        chat_sglang_version="0.5.18",
        chat_tp=1,
        page_size=16,
        chat_chunked_prefill_size=256,
        chat_cache_mb=0,
        device="cpu",
    )
    assert "--chunked-prefill-size 256 --page-size 16 SGLANG_VLM_CACHE_SIZE_MB=0 (cuda)" in text
    # a plain tree would stop at 496, past camera.png; the saved state is at 448 whatever the page
    assert "5     t2       907            90..450, 544..873   496     448          [448, 704)  ok" in text
    assert _row(text, "t2", "camera.png")[2:] == ["90..450", "448", "call (re-opened by the cut back)", "pass 5: call"]
    assert _row(text, "t2", "coffee.png")[2:] == ["544..873", "448", "call", "pass 5: call, pass 6: call"]
