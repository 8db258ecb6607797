"""A client's own request (``kimi-viz whatif --chat``): the body read, the ids rendered, the request side's checks
in SGLang's order with its exact messages on every release, the expanded prompt's media spans, and the replay.

The same outcomes are compared with SGLang's real request side in the lane (tests/parity/test_chat_parity.py).
"""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from kimi_viz.cli import main
from kimi_viz.data import sample_path
from kimi_viz.errors import DecompressionBombError, NotAnImageError, WhatIfError
from kimi_viz.message_catalogue.messages import (
    MSG_CALLER_MM_HASHES,
    MSG_GPU_WRONG_GRIDS,
    MSG_IMAGE_ONLY,
    MSG_ONE_TO_ONE,
)
from kimi_viz.preprocess.config import get_config
from kimi_viz.preprocess.resize import resize_config
from kimi_viz.releases import RELEASES
from kimi_viz.request.chat import Renderer, parse_request, read_request, render_request, text_tokens
from kimi_viz.request.checks import check_releases, check_request
from kimi_viz.request.images import decode_data_url
from kimi_viz.request.prompt import MEDIA_PAD_ID, MEDIA_TOKEN_IDS, render_prompt
from kimi_viz.split.cause import ErrorInfo

BEGIN, CONTENT, END = (MEDIA_TOKEN_IDS[t] for t in ("<|media_begin|>", "<|media_content|>", "<|media_end|>"))
CHELSEA = str(sample_path("chelsea.png"))  # 451×300


def data_url(width: int, height: int, kind: str = "PNG") -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buffer, kind)
    return f"data:image/{kind.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


def chat(*parts: dict | str, system: str | None = None) -> dict:
    content = [p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts]
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return {"model": "kimi-k3", "messages": messages}


def image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def tokens(width: int, height: int) -> int:
    return resize_config(width, height, get_config("kimi-k3")).tokens


# --- the reported case -----------------------------------------------------------------------------------
def test_one_image_and_no_media_pad_in_generate_text_raises_on_every_release():
    request = parse_request({"text": "Describe the image.", "image_data": [CHELSEA]})
    outcomes = check_releases(request)
    assert list(outcomes) == list(RELEASES)
    expected = ErrorInfo(
        "ValueError", "Kimi image placeholders must map one-to-one to image data: expected 1, found 0 token(s)"
    )
    assert {v: o.error_info() for v, o in outcomes.items()} == dict.fromkeys(RELEASES, expected)
    assert MSG_ONE_TO_ONE.format(1, 0) == expected.message
    lines = {v: o.error.where for v, o in outcomes.items() if o.error}
    assert lines["0.5.17"].startswith("multimodal/processors/kimi_k3.py:348 ")
    assert lines["0.5.18"].startswith("multimodal/processors/kimi_k3.py:725 ")
    assert lines["0.5.21"].startswith("multimodal/processors/kimi_k3.py:723 ")
    assert lines["0.5.23"].startswith("multimodal/processors/kimi_k3.py:748 ")
    assert [c.name for c in outcomes["0.5.23"].checks] == ["image input only", "caller identities", "one-to-one"]
    assert [c.outcome for c in outcomes["0.5.23"].checks] == ["passed", "passed", "raised"]
    assert [c.name for c in outcomes["0.5.18"].checks] == ["image input only", "one-to-one"]
    assert "nothing reaches the scheduler" in outcomes["0.5.18"].why()


def test_a_chat_image_part_gets_its_media_pad_from_sglang_unless_the_renderer_ignores_image_prompts():
    request = parse_request(chat("What is in this picture?", image(CHELSEA)))
    for version, outcome in check_releases(request).items():
        assert outcome.error is None, version
        assert outcome.rendered.placeholders == 1
        assert any("no <|media_pad|> has to be written" in n for n in outcome.notes)
    for version, outcome in check_releases(request, renderer=Renderer(image_prompts=False)).items():
        assert outcome.error_info() == ErrorInfo("ValueError", MSG_ONE_TO_ONE.format(1, 0)), version
        assert "this renderer ignores them" in outcome.why()


def test_empty_generate_text_and_input_ids_without_the_pad_raise_found_0():
    for body in ({"text": "", "image_data": CHELSEA}, {"input_ids": [1, 2, 3], "image_data": [CHELSEA]}):
        outcome = check_request(parse_request(body), "0.5.19")
        assert outcome.error_info() == ErrorInfo("ValueError", MSG_ONE_TO_ONE.format(1, 0))
    assert check_request(parse_request({"text": "", "image_data": CHELSEA}), "0.5.19").rendered.length == 0


# --- placeholders extra or written by hand --------------------------------------------------------------------
def test_a_media_pad_written_in_chat_text_is_one_more_placeholder():
    request = parse_request(chat("look: <|media_pad|>", image(CHELSEA)))
    outcome = check_request(request, "0.5.23")
    assert outcome.error_info() == ErrorInfo("ValueError", MSG_ONE_TO_ONE.format(1, 2))
    assert outcome.rendered.pad_origins() == [
        "messages[0].content[0] (written <|media_pad|>)",
        "messages[0].content[1] (image part 0: image_prompts[0])",
    ]
    assert "1 <|media_pad|> written in the text count too" in outcome.why()
    # a tokenizer that encodes media-token text as ordinary text leaves only SGLang's own pad
    assert check_request(request, "0.5.23", renderer=Renderer(typed_tokens=False)).error is None


def test_the_kimi_image_placeholder_written_in_chat_text_is_escaped_and_places_no_image():
    outcome = check_request(parse_request(chat("see <|kimi_image_placeholder|> here", image(CHELSEA))), "0.5.18")
    assert outcome.error is None and outcome.rendered.placeholders == 1
    assert any("<| kimi_image_placeholder |>" in n and "places no image" in n for n in outcome.notes)
    generate = check_request(parse_request({"text": "<|kimi_image_placeholder|>", "image_data": [CHELSEA]}), "0.5.18")
    assert generate.error_info() == ErrorInfo("ValueError", MSG_ONE_TO_ONE.format(1, 0))


def test_hand_written_media_pads_in_generate_text_place_the_images_where_they_are():
    url = data_url(100, 60)
    request = parse_request({"text": "first <|media_pad|> then <|media_pad|> end", "image_data": [CHELSEA, url]})
    outcome = check_request(request, "0.5.23")
    assert outcome.error is None
    spans = outcome.media_spans()
    assert [(s.caption_text, s.pad_count) for s in spans] == [("image 451x300", tokens(451, 300)), ("image 100x60", 12)]
    ids = outcome.token_ids()
    for span in spans:
        assert ids[span.begin] == BEGIN and ids[span.content] == CONTENT and ids[span.end] == END
        assert set(ids[span.pads[0] : span.pads[1] + 1]) == {MEDIA_PAD_ID}
        assert span.content == span.pads[0] - 1 and span.end == span.pads[1] + 1
    assert outcome.prompt is not None and outcome.prompt.pad_runs == [s.pads for s in spans]
    assert check_request(request, "0.5.23", renderer=Renderer(typed_tokens=False)).error_info() == ErrorInfo(
        "ValueError",
        MSG_ONE_TO_ONE.format(2, 0),
    )


def test_input_ids_are_kept_exactly_and_only_the_pads_expand():
    ids = [7, 8, MEDIA_PAD_ID, 9, BEGIN, 10]
    outcome = check_request(parse_request({"input_ids": ids, "image_data": [CHELSEA]}), "0.5.18")
    n = tokens(451, 300)
    expanded = outcome.token_ids()
    assert expanded[:3] == [7, 8, BEGIN]
    span = outcome.media_spans()[0]
    assert (span.begin, span.pads, span.pad_count) == (2, (2 + 1 + 6 + 1, 2 + 1 + 6 + n), n)
    assert expanded[span.end + 1 :] == [9, BEGIN, 10]  # a written <|media_begin|> stays an ordinary id
    assert outcome.workload_text() == (2, [], 3)


# --- the other checks ------------------------------------------------------------------------------------------
def test_video_or_audio_data_raises_image_input_only_on_every_release():
    video = {"type": "video_url", "video_url": {"url": "clip.mp4"}}
    for body in (
        chat("hi", image(CHELSEA), video),
        {"text": "<|media_pad|>", "image_data": CHELSEA, "audio_data": "a"},
    ):
        outcomes = check_releases(parse_request(body))
        assert {o.error_info() for o in outcomes.values()} == {ErrorInfo("ValueError", MSG_IMAGE_ONLY)}
    outcome = check_request(parse_request(chat("hi", image(CHELSEA), video)), "0.5.20")
    assert any("video part is dropped from what the renderer sees" in n for n in outcome.notes)


def test_caller_mm_hashes_are_refused_from_0523_only():
    request = parse_request({"text": "<|media_pad|>", "image_data": [CHELSEA], "mm_hashes": ["h"]})
    outcomes = check_releases(request)
    assert outcomes["0.5.23"].error_info() == ErrorInfo("ValueError", MSG_CALLER_MM_HASHES)
    assert outcomes["0.5.23"].error.where == "multimodal/processors/kimi_common.py reject_caller_image_identity"
    assert all(outcomes[v].error is None for v in RELEASES if v != "0.5.23")
    assert any("no reject_caller_image_identity" in n for n in outcomes["0.5.22"].notes)


def test_no_multimodal_data_means_no_check_and_a_stray_pad_stays_a_token():
    outcome = check_request(parse_request(chat("hello <|media_pad|>")), "0.5.18")
    assert outcome.error is None and not outcome.processed
    assert outcome.checks[-1].outcome == "skipped"
    assert outcome.token_ids().count(MEDIA_PAD_ID) == 1
    assert "never calls the image processor" in outcome.why() and "no image behind them" in outcome.why()


def test_the_cache_off_path_names_its_own_checks():
    from kimi_viz.request.settings import ServerSettings

    request = parse_request({"text": "<|media_pad|>", "image_data": [CHELSEA]})
    cached = [c.name for c in check_request(request, "0.5.19").checks]
    uncached = [c.name for c in check_request(request, "0.5.19", settings=ServerSettings(preprocess_cache_mb=0)).checks]
    oldest = [c.name for c in check_request(request, "0.5.17").checks]
    assert cached == ["image input only", "one-to-one", "load", "placeholder tokens", "image spans"]
    assert uncached == ["image input only", "one-to-one", "images loaded", "placeholder tokens"]
    assert oldest == uncached


# --- the prompt and the workload ---------------------------------------------------------------------------
def test_text_is_counted_by_the_documented_rule():
    assert text_tokens("") == 0
    assert text_tokens("Hello, world!") == 4  # Hello | , | world | ! (the space joins the word)
    assert text_tokens("internationalization") == 3  # 20 letters, 8 per token
    assert text_tokens("12345") == 2 and text_tokens("猫猫") == 2 and text_tokens("a\n\nb") == 3


def test_a_chat_prompt_becomes_a_workload_with_its_own_gaps_and_the_same_pad_runs():
    from kimi_viz import whatif
    from kimi_viz._whatif.chat import chat_workload
    from kimi_viz.split.cause import ErrorInfo

    body = chat("first", image(CHELSEA), "and a much longer text between the two images", image(data_url(64, 64)), "?")
    request = parse_request(body)
    answer = whatif(request, sglang_version="0.5.18", tp_size=2)
    outcome = answer.replay.outcome
    before, gaps, after = outcome.workload_text()
    workload = chat_workload([outcome])
    assert workload.requests[0].gaps == tuple(gaps) and len(gaps) == 1
    assert before + sum(gaps) + after + sum(len(range(*s)) for s in _blocks(outcome)) == outcome.prompt.length
    assert answer.replay.load is not None
    assert answer.replay.load.prompts[0].pad_runs == outcome.prompt.pad_runs
    assert answer.replay.load.prompts[0].length == outcome.prompt.length
    # two images of different grids in one call: 0.5.18's deferred split fails on rank 1 (S1); 0.5.19 reads its own
    assert (answer.stage, answer.exit_code) == ("forward pass", 1)
    assert answer.error == ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS)
    assert whatif(request, sglang_version="0.5.19", tp_size=2).status.value == "clean"


def _blocks(outcome):
    return [(s.begin, s.end + 1) for s in outcome.media_spans()]


def test_render_prompt_takes_one_gap_per_pair_of_images():
    prompt = render_prompt([4, 4, 4], [(28, 28)] * 3, before=1, between=[2, 5], after=1)
    starts = [s.start for s in prompt.segments if s.kind == "media_begin"]
    width = 1 + 4 + 1 + 4 + 1  # begin, caption, content, pads, end
    assert starts == [1, 1 + width + 2, 1 + 2 * width + 7]
    with pytest.raises(ValueError, match="between has 1 gaps for 3 images"):
        render_prompt([4, 4, 4], [(28, 28)] * 3, between=[2])


def test_a_request_file_may_list_one_gap_per_pair(tmp_path):
    from kimi_viz.request.workload import parse_workload

    data = {"requests": [{"images": ["chelsea.png", "coffee.png"], "text": {"between": [3]}}]}
    assert parse_workload(data).requests[0].gaps == (3,)
    data["requests"][0]["text"]["between"] = [3, 4]
    with pytest.raises(WhatIfError, match="2 counts for 2 images"):
        parse_workload(data)


# --- reading the body ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the body: expected an object"),
        ({"messages": []}, "messages: expected a non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role: expected one of system"),
        (chat({"type": "input_image", "image_url": "x"}), "refuses it: HTTP 400"),
        (chat({"type": "image_url", "image_url": "a.png"}), 'expected {"url": ...}'),
        (chat(image("https://example.com/cat.png")), "kimi-viz has no network access: save the image"),
        (chat(image("ftp://host/cat.png")), "a ftp: URL"),
        ({"text": "x", "input_ids": [1]}, "exactly one of text and input_ids"),
        ({"text": ["a", "b"]}, "send one request at a time"),
        ({"input_ids": [1, -2]}, "expected token ids from 0"),
        ({"text": "x", "image_data": [["a.png"]]}, "expected an image URL or a list"),
    ],
)
def test_bad_bodies_get_one_line_naming_the_field(body, message):
    with pytest.raises(WhatIfError) as caught:
        parse_request(body, source="req.json")
    text = str(caught.value)
    assert message in text and text.startswith("req.json: ") and "\n" not in text


def test_data_urls_are_bounded_and_checked_before_decoding():
    url = data_url(20, 10)
    assert decode_data_url(url, label="u").size == (20, 10)
    with pytest.raises(DecompressionBombError, match="over the 10-byte limit"):
        decode_data_url(url, label="u", max_bytes=10)
    with pytest.raises(NotAnImageError, match="not valid base64"):
        decode_data_url("data:image/png;base64,@@@@", label="u")
    with pytest.raises(NotAnImageError, match="without ;base64"):
        decode_data_url("data:image/png,abc", label="u")
    with pytest.raises(NotAnImageError):
        parse_request(chat(image("data:image/png;base64," + base64.b64encode(b"not an image").decode())))


def test_read_request_resolves_paths_beside_the_file_and_limits_its_size(tmp_path, monkeypatch):
    import kimi_viz.request.chat as chat_module  # the limit is read at call time

    (tmp_path / "cat.png").write_bytes(sample_path("chelsea.png").read_bytes())
    path = tmp_path / "req.json"
    path.write_text(json.dumps(chat("hi", image("cat.png"), image((tmp_path / "cat.png").as_uri()))))
    request = read_request(path)
    assert [im.label for im in request.images] == ["cat.png", "cat.png"] and request.source == str(path)
    monkeypatch.setattr(chat_module, "MAX_CHAT_BYTES", 10)
    with pytest.raises(WhatIfError, match="over the 10-byte limit"):
        read_request(path)


def test_render_request_counts_roles_and_the_generation_prompt():
    rendered = render_request(parse_request(chat("hi", system="be brief")))
    assert rendered.length == (4 + text_tokens("be brief")) + (4 + text_tokens("hi")) + 3


# --- the command --------------------------------------------------------------------------------------------------
def test_cli_chat_prints_the_exact_message_and_exits_1(tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"text": "Describe the image.", "image_data": [CHELSEA]}))
    assert main(["whatif", "--chat", str(path), "--sglang-version", "0.5.18", "--tp", "2"]) == 1
    out = capsys.readouterr().out
    assert f"✗ REQUEST REFUSED — ValueError: {MSG_ONE_TO_ONE.format(1, 0)}" in out
    assert "to fix: put one <|media_pad|> where each image goes" in out
    assert main(["whatif", "--chat", str(path), "--sweep"]) == 1
    out = capsys.readouterr().out
    # every release group refuses it at every TP size, each row saying why with its own site
    assert out.count("✗ A (request side)") == 5 * 4 and f"A: ValueError: {MSG_ONE_TO_ONE.format(1, 0)}" in out
    assert out.count(MSG_ONE_TO_ONE.format(1, 0)) == 1 + 5
    assert "fails on 0.5.17 at every TP size (A)" in out


def test_cli_chat_json_and_the_load_replay(tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(json.dumps(chat("What is this?", image(CHELSEA))))
    assert main(["whatif", "--chat", str(path), "--sglang-version", "0.5.18", "--tp", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "clean" and data["stage"] is None
    [span] = data["request_side"]["media_spans"]
    assert span["caption"] == "image 451x300" and span["pad_count"] == tokens(451, 300)
    assert data["load"]["status"] == "clean"
    assert main(["whatif", "--chat", str(path), "--image-prompts", "ignored", "--sweep", "--json"]) == 1
    cells = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {c["stage"] for c in cells} == {"request side"} and len(cells) == 5 * 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--chat", "r.json", "a.png"], "--chat FILE with IMAGE"),
        (["--chat", "r.json", "--minimize"], "--chat with --minimize"),
        (["a.png", "--image-prompts", "ignored"], "add --chat FILE"),
        (["--chat", "r.json", "--image-prompts", "maybe"], "--image-prompts 'maybe'"),
        (["--chat", "missing.json"], "missing.json: cannot be read"),
        (["--chat", "r.json", "--embedding-cache-hit", "0"], "a workload models its caches itself"),
        (["--chat", "r.json", "--preprocess-cache-hit", "0"], "a workload models its caches itself"),
    ],
)
def test_cli_refuses_chat_options_that_do_not_fit(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.json").write_text(json.dumps({"text": "<|media_pad|>", "image_data": [CHELSEA]}))
    assert main(["whatif", *argv, "--sglang-version", "0.5.18", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- the figure -------------------------------------------------------------------------------------------------
def test_draw_prompt_labels_every_block_and_the_refused_ids():
    from kimi_viz.plots import draw_prompt

    request = parse_request(chat("compare", image(CHELSEA), "with", image(data_url(64, 48))))
    ax = draw_prompt(check_request(request, "0.5.18"))
    texts = [t.get_text() for t in ax.texts]
    assert any("image 451x300" in t and f"{tokens(451, 300)} pads" in t for t in texts)
    assert any(t.startswith("<|media_begin|>\n163602 at ") for t in texts)
    assert any(f"{tokens(64, 48)} × <|media_pad|> 163605" in t for t in texts)
    assert min(t.get_fontsize() for t in ax.texts) >= 8
    refused = draw_prompt(check_request(request, "0.5.18", renderer=Renderer(image_prompts=False)))
    error = [t for t in refused.texts if t.get_gid() == "request-error"]
    assert len(error) == 1 and MSG_ONE_TO_ONE.format(2, 0) in error[0].get_text().replace("\n", " ")
    markers = [t.get_text() for t in refused.texts if t.get_text().startswith("<|kimi_image_placeholder|>")]
    assert len(markers) == 2 and "(image part 1): not <|media_pad|>" in markers[1]
    plain = draw_prompt(render_prompt([4], [(28, 28)]))
    assert any(t.get_text() == "image 0\n4 pads" for t in plain.texts)


def test_dropping_an_image_keeps_the_text_gaps_around_it():
    from kimi_viz._whatif.questions import WorkloadQuestion
    from kimi_viz.request.images import as_request_image
    from kimi_viz.request.settings import ServerSettings
    from kimi_viz.request.workload import Request, Workload

    images = tuple(as_request_image(n) for n in ("chelsea.png", "coffee.png", "rocket.jpg"))
    workload = Workload((Request("r1", images, gaps=(3, 5)),))
    question = WorkloadQuestion(workload, ServerSettings())
    assert question.subset([0, 2]).workload.requests[0].gaps == (8,)
    assert question.subset([1]).workload.requests[0].gaps == ()
    assert workload.to_json()["requests"][0]["text"]["between"] == [3, 5]
    with pytest.raises(WhatIfError, match="2 text gaps for 2 images"):
        Request("r1", images[:2], gaps=(3, 5))
