"""The forward context of a manifest: its typed model, the manifest round trip and validation, what triage
says about it (text, JSON, report) and its figure; and that a manifest without it triages as before."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import warnings
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kimi_viz._triage import triage, triage_batch
from kimi_viz.cli import main
from kimi_viz.errors import ManifestError
from kimi_viz.manifest import ManifestWarning, manifest_payload, read_manifest, validate_manifest_json, write_manifest
from kimi_viz.manifest import format as manifest_format
from kimi_viz.manifest.fastcheck import document_is_plainly_valid
from kimi_viz.manifest.schema import _validator, schema_path
from kimi_viz.plots.call_requests import MAX_REQUESTS, draw_call_requests
from kimi_viz.plots.palette import color_for
from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split.forward_context import (
    IMAGE_STATUSES,
    ContextImage,
    ContextItem,
    ContextRequest,
    ForwardContext,
)

CONTEXT = ForwardContext(
    requests=(
        ContextRequest(0, 420, (ContextImage(((3, 189),), "in-call", 0),), rid="req-a", batch_index=0),
        ContextRequest(2, 30, (ContextImage(((3, 18),), "in-call", 1),), rid="req-b", batch_index=2),
        ContextRequest(
            0,
            40,
            (
                ContextImage(((1, 2),), "cache-hit"),
                ContextImage(((5, 191),), "same-image", 0),
                ContextImage(((300, 310),), "outside-window"),
            ),
            rid="req-c",
            batch_index=3,
        ),
    ),
    items=(ContextItem(0, 0), ContextItem(1, 0)),
    chunked_prefill_size=8192,
    source="a test",
)
CONTEXT_JSON = {
    "requests": [
        {
            "rid": "req-a",
            "batch_index": 0,
            "prefix_len": 0,
            "extend_len": 420,
            "images": [{"offsets": [[3, 189]], "status": "in-call", "call_item": 0}],
        },
        {
            "rid": "req-b",
            "batch_index": 2,
            "prefix_len": 2,
            "extend_len": 30,
            "images": [{"offsets": [[3, 18]], "status": "in-call", "call_item": 1}],
        },
        {
            "rid": "req-c",
            "batch_index": 3,
            "prefix_len": 0,
            "extend_len": 40,
            "images": [
                {"offsets": [[1, 2]], "status": "cache-hit", "call_item": None},
                {"offsets": [[5, 191]], "status": "same-image", "call_item": 0},
                {"offsets": [[300, 310]], "status": "outside-window", "call_item": None},
            ],
        },
    ],
    "items": [{"request": 0, "image": 0}, {"request": 1, "image": 0}],
    "chunked_prefill_size": 8192,
    "source": "a test",
}
TEXT = [
    "forward pass: this call held 2 images from 2 requests; chunked-prefill size: 8192",
    "  item  request  rid    image  pad tokens [start, end]  prefix  extend  window",
    "  0     0        req-a  0      [3, 189]                 0       420     [0, 420)",
    "  1     1        req-b  0      [3, 18]                  2       30      [2, 32)",
    "  not in this call: request 2 (rid req-c) image 0, pad tokens [1, 2]: embedding-cache hit",
    "  not in this call: request 2 (rid req-c) image 1, pad tokens [5, 191]: same image (hash) as call item 0",
    "  not in this call: request 2 (rid req-c) image 2, pad tokens [300, 310]: outside this forward's window",
]


def _batch(context: ForwardContext | None = CONTEXT):
    """The S1 batch of two images at attention-TP 2 on 0.5.18 (image 1 fails on rank 1), with a context."""
    batch = SCENARIOS["s1-cpu"].build()
    batch.items = batch.items[:2]
    batch.sglang_version, batch.attn_tp_size = "0.5.18", 2
    batch.forward_context = context
    return batch


def _quiet_read(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return read_manifest(path)


# --- the model -------------------------------------------------------------------------------
def test_the_summary_counts_images_and_requests_with_singulars_right():
    assert CONTEXT.summary() == "this call held 2 images from 2 requests"
    one = ForwardContext((ContextRequest(0, 9, (ContextImage(((3, 6),), "in-call", 0),)),), (ContextItem(0, 0),))
    assert one.summary() == "this call held 1 image from 1 request"
    two_from_one = ForwardContext(
        (ContextRequest(0, 9, (ContextImage(((1, 2),), "in-call", 0), ContextImage(((4, 6),), "in-call", 1))),),
        (ContextItem(0, 0), ContextItem(0, 1)),
    )
    assert two_from_one.summary() == "this call held 2 images from 1 request"
    lost = replace(one, items=(ContextItem(0, 0), ContextItem(None, None)))
    assert lost.summary() == "this call held 2 images from 1 request (1 image not found among the forward's requests)"
    assert (lost.origin(0), lost.origin(1), lost.origin(2)) == ("request 0, image 0", None, None)
    assert CONTEXT.origin(1) == "request 1 (rid req-b), image 0"


def test_the_text_table_names_each_items_request_rid_image_offsets_and_window():
    assert CONTEXT.lines() == TEXT
    assert CONTEXT.item_rows()[1] == {
        "item": 1,
        "request": 1,
        "rid": "req-b",
        "image": 0,
        "offsets": [[3, 18]],
        "tokens": 16,
        "prefix_len": 2,
        "extend_len": 30,
        "window": [2, 32],
    }
    absent = ForwardContext(
        (ContextRequest(None, None, (ContextImage(((0, 3),), "in-call", 0),)),), (ContextItem(0, 0),)
    )
    assert absent.lines()[:3] == [
        "forward pass: this call held 1 image from 1 request; chunked-prefill size: not recorded",
        "  item  request  rid  image  pad tokens [start, end]  prefix  extend  window",
        "  0     0        -    0      [0, 3]                   ?       ?       ?",
    ]


def test_to_json_and_back():
    assert CONTEXT.to_json() == CONTEXT_JSON
    assert ForwardContext.from_json(CONTEXT_JSON) == CONTEXT
    report = CONTEXT.report_json()
    assert report["summary"] == "this call held 2 images from 2 requests"
    assert [row["rid"] for row in report["call_items"]] == ["req-a", "req-b"]


def test_one_set_of_image_statuses():
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    enum = schema["$defs"]["context_image"]["properties"]["status"]["enum"]
    assert tuple(enum) == manifest_format.CONTEXT_IMAGE_STATUSES == IMAGE_STATUSES
    defs = schema["$defs"]
    limits = {
        defs["forward_context"]["properties"]["requests"]["maxItems"],
        defs["forward_context"]["properties"]["items"]["maxItems"],
        defs["context_request"]["properties"]["images"]["maxItems"],
        defs["context_image"]["properties"]["offsets"]["maxItems"],
    }
    assert limits == {manifest_format.MAX_CONTEXT_ENTRIES}


# --- the manifest ----------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", ["", ".zip"], ids=["folder", "zip"])
def test_the_context_round_trips_through_a_manifest(tmp_path, suffix):
    path = write_manifest(_batch(), tmp_path / f"m{suffix}")
    assert _quiet_read(path).forward_context == CONTEXT
    obj, _ = manifest_payload(_batch())
    assert obj["forward_context"] == CONTEXT_JSON
    assert document_is_plainly_valid(obj)  # the fast path takes it, and the schema agrees
    assert list(_validator().iter_errors(obj)) == []


def test_a_manifest_without_the_context_has_no_key_and_reads_none(tmp_path):
    obj, _ = manifest_payload(_batch(None))
    assert "forward_context" not in obj
    assert _quiet_read(write_manifest(_batch(None), tmp_path / "m")).forward_context is None


def _valid() -> dict:
    obj, _ = manifest_payload(_batch())
    return obj


def _context(obj: dict) -> dict:
    return obj["forward_context"]


def _image(obj: dict, r: int, i: int) -> dict:
    return obj["forward_context"]["requests"][r]["images"][i]


BAD = [
    (lambda o: o.update(forward_context="x"), "forward_context", "expected an object, got the string 'x'"),
    (lambda o: _context(o).pop("items"), "forward_context.items", "missing required key 'items'"),
    (
        lambda o: _context(o)["requests"][0].update(prefix_len=-1),
        "forward_context.requests[0].prefix_len",
        "expected a value >= 0, got the integer -1",
    ),
    (
        lambda o: _context(o)["requests"][1].update(extend_len="30"),
        "forward_context.requests[1].extend_len",
        "expected an integer or null, got the string '30'",
    ),
    (
        lambda o: _context(o)["requests"][1].update(prefix_len=True),
        "forward_context.requests[1].prefix_len",
        "expected an integer or null, got the boolean true",
    ),
    (
        lambda o: _context(o)["requests"][0].update(rid=5),
        "forward_context.requests[0].rid",
        "expected a string or null, got the integer 5",
    ),
    (
        lambda o: _context(o)["requests"][0].pop("images"),
        "forward_context.requests[0].images",
        "missing required key 'images'",
    ),
    (
        lambda o: _image(o, 2, 0).update(status="hit"),
        "forward_context.requests[2].images[0].status",
        'expected one of "in-call", "cache-hit", "same-image", "outside-window", "not-in-call", got the string',
    ),
    (
        lambda o: _image(o, 0, 0).update(offsets=[[3]]),
        "forward_context.requests[0].images[0].offsets[0]",
        "expected a list of exactly 2 entries, got 1",
    ),
    (
        lambda o: _image(o, 0, 0).update(offsets=[[189, 3]]),
        "forward_context.requests[0].images[0].offsets[0]",
        "the run [189, 3] ends before it starts",
    ),
    (
        lambda o: _context(o).update(chunked_prefill_size=-2),
        "forward_context.chunked_prefill_size",
        "expected a value >= -1, got the integer -2",
    ),
    (
        lambda o: _context(o)["items"].pop(),
        "forward_context.items",
        "1 entry for a call of 2 items; expected one per item, in call order",
    ),
    (
        lambda o: _image(o, 2, 1).update(call_item=7),
        "forward_context.requests[2].images[1].call_item",
        "call item 7 is out of range for a call of 2 items",
    ),
    (
        lambda o: _image(o, 1, 0).update(call_item=None),
        "forward_context.requests[1].images[0].call_item",
        'an image "in-call" must name its call_item',
    ),
    (
        lambda o: _context(o)["items"].reverse(),
        "forward_context.requests[0].images[0].call_item",
        'this image says it is call item 0, but forward_context.items[0] is {"request": 1, "image": 0}',
    ),
    (
        lambda o: (
            _image(o, 1, 0).update(status="not-in-call", call_item=None),
            _context(o)["items"][1].update(request=5),
        ),
        "forward_context.items[1].request",
        "request 5 is out of range for 3 requests",
    ),
    (
        lambda o: (
            _image(o, 1, 0).update(status="not-in-call", call_item=None),
            _context(o)["items"][1].update(image=4),
        ),
        "forward_context.items[1].image",
        "image 4 is out of range for request 1's 1 images",
    ),
    (
        lambda o: (
            _image(o, 1, 0).update(status="not-in-call", call_item=None),
            _context(o)["items"][1].update(request=None),
        ),
        "forward_context.items[1]",
        "image 0 without its request; expected both or neither",
    ),
    (
        lambda o: (
            _image(o, 1, 0).update(status="not-in-call", call_item=None),
            _context(o)["items"][1].update(image=None),
        ),
        "forward_context.items[1]",
        "request 1 without its image; expected both or neither",
    ),
    (
        lambda o: _context(o)["items"][1].update(request=2, image=0),
        "forward_context.requests[1].images[0].call_item",
        'this image says it is call item 1, but forward_context.items[1] is {"request": 2, "image": 0}',
    ),
    (
        lambda o: _image(o, 1, 0).update(status="cache-hit", call_item=None),
        "forward_context.items[1].image",
        'call item 1 comes from request 1\'s image 0, whose status is "cache-hit"; expected "in-call" with call_item 1',
    ),
]


@pytest.mark.parametrize(("mutate", "path", "words"), BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_bad_values_are_one_line_errors_naming_their_json_path(tmp_path, capsys, mutate, path, words):
    obj = _valid()
    mutate(obj)
    with pytest.raises(ManifestError) as caught:
        validate_manifest_json(obj)
    message = str(caught.value)
    assert caught.value.json_path == path
    assert message.startswith(f"{path}: ") and words in message, message
    assert "\n" not in message
    write_manifest(_batch(), tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    with pytest.raises(ManifestError, match=re.escape(f"{path}: ")):
        read_manifest(tmp_path)
    assert main(["triage", str(tmp_path)]) == 2  # the command refuses it as bad input, naming the path
    assert f"{path}: " in capsys.readouterr().err


def test_unknown_keys_in_the_context_are_warnings(tmp_path):
    obj = _valid()
    _context(obj)["requests"][0]["note"] = "x"
    _image(obj, 0, 0)["hash"] = 7
    assert not document_is_plainly_valid(obj)
    assert validate_manifest_json(obj) == [
        "forward_context.requests[0].images[0].hash: unknown key 'hash' (ignored)",
        "forward_context.requests[0].note: unknown key 'note' (ignored)",
    ]
    write_manifest(_batch(), tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(obj))
    with pytest.warns(ManifestWarning) as caught:
        assert read_manifest(tmp_path).forward_context == CONTEXT
    assert sorted(str(w.message).split(": ", 1)[1] for w in caught) == [
        "forward_context.requests[0].images[0].hash: unknown key 'hash' (ignored)",
        "forward_context.requests[0].note: unknown key 'note' (ignored)",
    ]


def test_absent_values_are_null_and_optional_keys_may_be_left_out():
    obj = _valid()
    context = _context(obj)
    context["requests"][0].update(rid=None, batch_index=None, prefix_len=None, extend_len=None)
    del context["requests"][1]["rid"], context["requests"][1]["batch_index"], context["source"]
    context["chunked_prefill_size"] = None
    del _image(obj, 2, 0)["call_item"]
    assert validate_manifest_json(obj) == []
    read = ForwardContext.from_json(context)
    assert (read.requests[0].rid, read.requests[0].window, read.requests[1].rid) == (None, None, None)
    assert read.chunked_prefill_size is None and read.source == ""


# --- triage ----------------------------------------------------------------------------------
def _section(text: str) -> str:
    start = text.index('<section id="kv-forward-context-section">')
    return text[start : text.index("</section>", start) + len("</section>")]


def test_triage_text_json_and_report_say_how_many_images_from_how_many_requests(tmp_path, capsys):
    manifest = write_manifest(_batch(), tmp_path / "m")
    assert main(["triage", str(manifest)]) == 1
    out = capsys.readouterr().out.splitlines()
    start = out.index(TEXT[0])
    assert out[start : start + len(TEXT) + 1] == [
        *TEXT,
        "  the first diverging image, call item 1, came from request 1 (rid req-b), image 0",
    ]
    assert main(["triage", str(manifest), "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["forward_context"] == CONTEXT.report_json()
    assert printed["forward_context"]["summary"] == "this call held 2 images from 2 requests"
    assert printed["divergence"]["first_image"] == 1  # the failing image is call item 1: request 1, rid req-b
    assert printed["forward_context"]["call_items"][1]["rid"] == "req-b"
    result = triage(manifest, out_dir=tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    section = _section(html)
    assert '<p class="kv-summary" id="kv-forward-summary">this call held 2 images from 2 requests</p>' in section
    assert "<p>Chunked-prefill size: 8192.</p>" in section
    assert (
        '<p id="kv-forward-first">The first diverging image, call item 1, came from request 1 (rid req-b), image 0.</p>'
        in section
    )
    assert section.count('<img alt="each request of the forward pass') == 1
    rows = re.findall(r'<tr data-item="(\d)">(.*?)</tr>', section)
    assert [r[0] for r in rows] == ["0", "1"]
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", rows[1][1])]
    assert cells == ["1", "1", "req-b", "0", "[3, 18]", "16", "2", "30", "[2, 32)"]
    assert "request 2 (rid req-c), image 0 (pad tokens <code>[1, 2]</code>): embedding-cache hit" in section
    embedded = re.search(r'<script type="application/json" id="kv-forward-context">(.*?)</script>', section)
    assert embedded is not None and json.loads(embedded.group(1)) == CONTEXT.report_json()
    assert result.to_json()["forward_context"]["summary"] == "this call held 2 images from 2 requests"


def test_one_image_from_one_request(tmp_path):
    batch = _batch(
        ForwardContext((ContextRequest(0, 9, (ContextImage(((3, 6),), "in-call", 0),)),), (ContextItem(0, 0),))
    )
    batch.items = batch.items[:1]
    result = triage_batch(batch, source="m", out_dir=tmp_path)
    assert "forward pass: this call held 1 image from 1 request; chunked-prefill size: not recorded" in result.text()
    assert ">this call held 1 image from 1 request</p>" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_a_manifest_without_the_context_triages_exactly_as_before(tmp_path):
    """The context only adds: its text block, its JSON key and its report section; nothing else changes."""
    with_context = triage_batch(_batch(), source="m", out_dir=tmp_path / "with")
    without = triage_batch(_batch(None), source="m", out_dir=tmp_path / "without")
    assert "forward pass:" not in without.text() and "forward_context" not in without.to_json()
    assert without.to_json() == without.verdict.to_json(without.fixes)
    text_with = with_context.text().replace(str(tmp_path / "with"), "OUT")
    block = "\n".join(["", *TEXT, "  the first diverging image, call item 1, came from request 1 (rid req-b), image 0"])
    assert text_with.replace("\n" + block, "") == without.text().replace(str(tmp_path / "without"), "OUT")
    assert {k: v for k, v in with_context.to_json().items() if k != "forward_context"} == without.to_json()
    html_with = (tmp_path / "with" / "report.html").read_text(encoding="utf-8")
    html_without = (tmp_path / "without" / "report.html").read_text(encoding="utf-8")
    assert "kv-forward" not in html_without

    def same(html: str) -> str:  # each stepper on a page gets the next number of the process
        return re.sub(r"kv-stepper-\d+", "kv-stepper-N", html)

    assert same(html_with.replace(_section(html_with), "")) == same(html_without)
    for name in ("summary.png", "trace.json"):
        assert (tmp_path / "with" / name).read_bytes() == (tmp_path / "without" / name).read_bytes()


# --- the figure ------------------------------------------------------------------------------
def _renderer(figure):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def _text_boxes(figure):
    from matplotlib.text import Text

    renderer = _renderer(figure)
    return [
        (t, Text.get_window_extent(t, renderer))
        for t in figure.findobj(Text)
        if t.get_visible() and t.get_text().strip()
    ]


def _collection(ax: Axes, gid: str):
    [found] = [c for c in ax.collections if c.get_gid() == gid]
    return found


def test_the_figure_draws_each_requests_prompt_window_and_images():
    ax = draw_call_requests(CONTEXT)
    assert isinstance(ax.figure, Figure)
    assert ax.get_title(loc="left").splitlines()[0] == "get_image_feature: this call held 2 images from 2 requests"
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "request 0 · rid req-a\nprefix 0, extend 420",
        "request 1 · rid req-b\nprefix 2, extend 30",
        "request 2 · rid req-c\nprefix 0, extend 40",
    ]
    labels = {t.get_gid(): t.get_text() for t in ax.texts if (t.get_gid() or "").startswith("request")}
    assert labels == {
        "request0-label-0": "item 0",
        "request1-label-0": "item 1",
        "request2-label-0": "cache hit",
        "request2-label-1": "same as item 0",
        "request2-label-2": "outside window",
    }
    windows = [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in _collection(ax, "windows").get_paths()]
    assert windows == [(0, 420), (2, 32), (0, 40)]
    prefixes = [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in _collection(ax, "prefix-bands").get_paths()]
    assert prefixes == [(0, 2)]
    prompts = [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in _collection(ax, "prompt-strips").get_paths()]
    assert prompts == [(0, 420), (0, 32), (0, 311)]  # to the window's end or the last image's end
    even = _collection(ax, "request0-fills-even")
    odd = _collection(ax, "request1-fills-odd")
    assert matplotlib.colors.to_hex(even.get_facecolor()[0]) == color_for(0).lower()
    assert matplotlib.colors.to_hex(odd.get_facecolor()[0]) == color_for(1).lower() and odd.get_hatch() == "///"
    others = _collection(ax, "request2-fills-odd")  # not in the call: white, hatched, dashed
    assert {matplotlib.colors.to_hex(c) for c in others.get_facecolor()} == {"#ffffff"}


def test_the_figure_has_no_small_or_overlapping_text():
    ax = draw_call_requests(CONTEXT)
    assert ax.figure.dpi == 100
    boxes = _text_boxes(ax.figure)
    assert [t.get_text() for t, _ in boxes if t.get_fontsize() < 8] == []
    overlapping = [
        (a.get_text(), b.get_text())
        for i, (a, box) in enumerate(boxes)
        for b, other in boxes[i + 1 :]
        if box.overlaps(other)
    ]
    assert overlapping == []


def test_the_figure_draws_on_a_given_axes_and_caps_the_requests():
    figure = Figure(figsize=(8, 6))
    given = figure.add_subplot()
    assert draw_call_requests(CONTEXT, ax=given) is given
    many = ForwardContext(
        tuple(ContextRequest(0, 8, (ContextImage(((2, 3),), "in-call", r),)) for r in range(MAX_REQUESTS + 4)),
        tuple(ContextItem(r, 0) for r in range(MAX_REQUESTS + 4)),
    )
    ax = draw_call_requests(many)
    assert len(ax.get_yticklabels()) == MAX_REQUESTS
    assert ax.get_xlabel().endswith("\n4 more requests not drawn (see the table)")
    assert ax.get_title(loc="left").startswith("get_image_feature: this call held 20 images from 20 requests")


def test_the_figure_never_touches_pyplot():
    code = (
        "import sys, io\n"
        "from kimi_viz.split.forward_context import ForwardContext, ContextRequest, ContextImage, ContextItem\n"
        "from kimi_viz.plots.call_requests import draw_call_requests\n"
        "c = ForwardContext((ContextRequest(0, 9, (ContextImage(((3, 6),), 'in-call', 0),)),), (ContextItem(0, 0),))\n"
        "draw_call_requests(c).figure.savefig(io.BytesIO(), format='png')\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_manifest_writer_copies_nothing_it_should_not():
    """The context is a frozen value: writing a batch twice gives the same JSON, and the batch keeps its object."""
    batch = _batch()
    first, _ = manifest_payload(batch)
    second, _ = manifest_payload(copy.deepcopy(batch))
    assert first["forward_context"] == second["forward_context"] and batch.forward_context is CONTEXT
