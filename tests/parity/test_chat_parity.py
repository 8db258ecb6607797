"""The kit's replay of a client's own request (kimi_viz.request.chat) against SGLang's REAL request side.

Runs in the real-SGLang lane (``tests/parity/conftest.py``). For seeded random requests — chat bodies
with 0 to 4 images as ``image_url`` parts (data URLs, local paths, ``file://`` URLs), ``/generate``
bodies with text or input_ids, ``<|media_pad|>`` missing, extra or written by hand, the escaped
``<|kimi_image_placeholder|>``, a video part, caller ``mm_hashes``, a renderer that ignores
``image_prompts`` — the kit and SGLang must agree: the same exception type and message, or the same
token ids at the media spans (the sequence of media-token ids with each pad run's length, each image's
``image {W}x{H}`` text and pad count, and for ``input_ids`` requests every other id too).

What runs for real: SGLang's ``ChatCompletionRequest`` (the body's validation and ``model_dump``),
``_prepare_kimi_k3_messages`` and the ``kimi_k3`` branch of ``_encode_messages`` with
``neutralize_kimi_k3_image_placeholder`` (compiled from the installed ``serving_chat.py``: the module
itself imports the web stack, which the lane does not install), ``process_content_for_template_format``
(the ``image_data`` collected), ``GenerateReqInput.contains_mm_input``, and
``KimiK3ImageProcessor.process_mm_data_async`` with everything it calls (image loading from the URLs,
the artifact or uncached path, ``_expand_k3_image_prompt_token_ids``, the offsets). Stand-ins, none of
them SGLang code: the checkpoint tokenizer (a byte-level tokenizer carrying the four media tokens, whose
``apply_chat_template`` renders each message as ``<|im_{role}|>{role}<|im_middle|>…<|im_end|>`` and puts
each ``image_prompts`` entry at its image part, or its own ``<|kimi_image_placeholder|>`` when told to
ignore them) and the tokenizer manager's two lines that turn a ``/generate`` text into ids.
"""

from __future__ import annotations
import __future__

import ast
import asyncio
import base64
import copy
import importlib.util
import inspect
import io
import logging
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from PIL import Image

from .lane import module, record
from .test_request_side import MEDIA_TOKENS, PAD, TinyTokenizer, _close, real_processor

CASES = 60
MEDIA_IDS = set(MEDIA_TOKENS.values())
BEGIN, CONTENT, END = (MEDIA_TOKENS[t] for t in ("<|media_begin|>", "<|media_content|>", "<|media_end|>"))
MARKER = "<|kimi_image_placeholder|>"
WORDS = ["what", "is", "in", "this", "picture", "compare", "the", "two", "images", "please", "describe", "42", "猫"]


# --- stand-ins ---------------------------------------------------------------------------------------
class CheckpointTokenizer(TinyTokenizer):
    """The checkpoint tokenizer: byte ids plus the media tokens, and a Kimi-style ``apply_chat_template``."""

    def __init__(self, *, image_prompts: bool = True, typed_tokens: bool = True):
        self.image_prompts = image_prompts
        self.typed_tokens = typed_tokens

    def encode_text(self, text: str) -> list[int]:
        """Encode text a client wrote: media-token text becomes its id only when ``typed_tokens``."""
        return self.encode(text) if self.typed_tokens else list(text.encode("utf-8"))

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True, tools=None, **kwargs):
        """Render as ``<|im_{role}|>{role}<|im_middle|>…<|im_end|>`` with each image part as the renderer's own
        ``<|kimi_image_placeholder|>``, then give the markers, in order, the ``image_prompts`` (when honoured);
        a marker written in the text that reaches the renderer unescaped would take an image's prompt too."""
        prompts = list(kwargs.get("image_prompts") or []) if self.image_prompts else []
        pieces: list[tuple[str, str]] = []  # ("frame" | "user" | "marker", text)
        for message in messages:
            role = message["role"]
            pieces.append(("frame", f"<|im_{role}|>{role}<|im_middle|>"))
            content = message.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            for part in parts:
                if part["type"] == "text":
                    for k, chunk in enumerate(part["text"].split(MARKER)):
                        if k:
                            pieces.append(("marker", MARKER))
                        pieces.append(("user", chunk))
                elif part["type"] == "image_url":
                    pieces.append(("marker", MARKER))
            pieces.append(("frame", "<|im_end|>"))
        if add_generation_prompt:
            pieces.append(("frame", "<|im_assistant|>assistant<|im_middle|>"))
        ids: list[int] = []
        for kind, text in pieces:
            if kind == "marker" and prompts:
                ids += self.encode(prompts.pop(0))  # the renderer's own prompt: special tokens allowed
            else:
                ids += self.encode_text(text) if kind == "user" else list(text.encode())
        return ids


def real_chat_layer(tokenizer):
    """Return SGLang's own chat-layer code for kimi_k3, compiled from the installed serving_chat.py."""
    spec = importlib.util.find_spec("sglang.srt.entrypoints.openai.serving_chat")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = {
        "KIMI_K3_IMAGE_PLACEHOLDER",
        "KIMI_K3_IMAGE_PLACEHOLDER_ESCAPED",
        "neutralize_kimi_k3_image_placeholder",
        "neutralize_kimi_k3_image_placeholder_value",
    }
    methods = {
        "_prepare_kimi_k3_messages",
        "_encode_messages",
        "_effective_tools",
        "_handle_last_assistant_message",
        "_append_assistant_prefix_to_prompt_ids",
    }
    body: list[ast.stmt] = []
    for node in tree.body:
        named = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
        if named or (isinstance(node, ast.FunctionDef) and node.name in names):
            body.append(node)
        elif isinstance(node, ast.ClassDef) and node.name == "OpenAIServingChat":
            kept = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in methods]
            assert {"_prepare_kimi_k3_messages", "_encode_messages"} <= {n.name for n in kept}
            body.append(ast.ClassDef(name="ServingChatCode", bases=[], keywords=[], body=kept, decorator_list=[]))
    tree = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    code = compile(tree, spec.origin, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    protocol = module("sglang.srt.entrypoints.openai.protocol")
    namespace = {**vars(protocol), "__name__": "serving_chat_code", "logger": logging.getLogger("kimi"), "copy": copy}
    exec(code, namespace)
    serving = namespace["ServingChatCode"].__new__(namespace["ServingChatCode"])
    serving.chat_encoding_spec = "kimi_k3"
    serving._encoding_adapter = None
    serving._reasoning_detector = None
    serving.tokenizer_manager = SimpleNamespace(tokenizer=tokenizer)
    return serving


def real_request(body: dict, proc, *, image_prompts: bool, typed_tokens: bool):
    """Return what SGLang's request side does with ``body``: ("error", type, message) or ("ok", ids, offsets, pre)."""
    io_struct = module("sglang.srt.managers.io_struct")
    tokenizer = CheckpointTokenizer(image_prompts=image_prompts, typed_tokens=typed_tokens)
    if "messages" in body:
        protocol = module("sglang.srt.entrypoints.openai.protocol")
        jinja = module("sglang.srt.parser.jinja_template_utils")
        request = protocol.ChatCompletionRequest.model_validate(body)
        serving = real_chat_layer(tokenizer)
        messages = [m.model_dump() for m in request.messages]
        image_data: list = []
        video_data: list = []
        audio_data: list = []
        modalities: list = []
        kwargs = (
            {"image_data": image_data} if "image_data" in inspect.signature(serving._encode_messages).parameters else {}
        )
        input_ids = serving._encode_messages(copy.deepcopy(messages), request, None, tools=None, **kwargs)
        for message in request.messages:
            msg_dict = message.model_dump()
            if msg_dict.get("content") is None:
                msg_dict["content"] = ""
            jinja.process_content_for_template_format(
                msg_dict, "openai", image_data, video_data, audio_data, modalities
            )
        obj = io_struct.GenerateReqInput(
            input_ids=input_ids, image_data=image_data, video_data=video_data, audio_data=audio_data
        )
    else:
        obj = io_struct.GenerateReqInput(
            text=body.get("text"),
            input_ids=body.get("input_ids"),
            image_data=body.get("image_data"),
            video_data=body.get("video_data"),
            mm_hashes=body.get("mm_hashes"),
        )
        if obj.input_ids is not None:
            input_ids = list(obj.input_ids)
        elif not obj.text and obj.contains_mm_input():  # _tokenize_one_request: the processor supplies the ids
            input_ids = []
        else:
            input_ids = tokenizer.encode_text(obj.text)
    pre = list(input_ids)
    if not obj.contains_mm_input():
        return ("not-processed", pre)
    if obj.image_data is not None and not isinstance(obj.image_data, list):
        obj.image_data = [obj.image_data]
    try:
        out = asyncio.run(
            proc.process_mm_data_async(
                image_data=obj.image_data, audio_data=obj.audio_data, input_text=input_ids, request_obj=obj
            )
        )
    except Exception as exc:  # noqa: BLE001 - SGLang's own exception is the outcome compared
        return ("error", type(exc).__name__, str(exc))
    ids = [int(i) for i in out.input_ids]
    return ("ok", ids, [tuple(int(v) for v in it.offsets[0]) for it in out.mm_items], pre)


# --- what is compared -------------------------------------------------------------------------------------
def media_view(ids: list) -> list:
    """Return the media tokens in order, each run of pads as ("pads", n); other ids are dropped."""
    out: list = []
    for token in ids:
        if token == PAD and out and isinstance(out[-1], tuple):
            out[-1] = ("pads", out[-1][1] + 1)
        elif token == PAD:
            out.append(("pads", 1))
        elif token in MEDIA_IDS:
            out.append(token)
    return out


def real_blocks(ids: list[int], offsets: list[tuple[int, int]]) -> tuple[list, list[int]]:
    """Return each image's (size text, pad count) read off SGLang's ids, and the ids outside the blocks."""
    decode = TinyTokenizer().decode
    blocks, outside, cursor = [], [], 0
    for start, end in offsets:
        assert ids[start - 1] == CONTENT and ids[end + 1] == END and set(ids[start : end + 1]) == {PAD}
        begin = max(k for k in range(start) if ids[k] == BEGIN)
        blocks.append((decode(ids[begin + 1 : start - 1]), end - start + 1))
        outside += ids[cursor:begin]
        cursor = end + 2
    return blocks, outside + ids[cursor:]


def kit_request(body: dict, release: str, folder: Path, *, image_prompts: bool, typed_tokens: bool, cache_mb):
    """Return the kit's outcome in the same shape as :func:`real_request`."""
    from kimi_viz.request.chat import Renderer, parse_request
    from kimi_viz.request.checks import check_request
    from kimi_viz.request.settings import ServerSettings

    request = parse_request(body, folder=folder, source="case")
    outcome = check_request(
        request,
        release,
        renderer=Renderer(image_prompts=image_prompts, typed_tokens=typed_tokens),
        settings=ServerSettings(defer="off", preprocess_cache_mb=cache_mb),
    )
    return request, outcome


def compare(name: str, real, request, outcome) -> list[str]:
    """Return one line per disagreement between SGLang's outcome and the kit's."""
    from kimi_viz.split.cause import ErrorInfo

    placeholders = outcome.rendered.placeholders
    if real[0] == "error":
        ours = outcome.error_info()
        theirs = ErrorInfo(real[1], real[2])
        return [] if ours == theirs else [f"{name}: SGLang raised {theirs}; the kit raised {ours or 'nothing'}"]
    if outcome.error is not None:
        return [f"{name}: SGLang accepted the request, the kit raised {outcome.error_info()}"]
    pre = real[-1]
    found = []
    if pre.count(PAD) != placeholders:
        found.append(f"{name}: {pre.count(PAD)} <|media_pad|> ids reach the processor, the kit counts {placeholders}")
    if real[0] == "not-processed":
        if outcome.processed:
            found.append(f"{name}: SGLang never calls the processor, the kit does")
        if media_view(pre) != media_view(outcome.token_ids()):
            found.append(f"{name}: media ids {media_view(pre)} != kit {media_view(outcome.token_ids())}")
        return found
    _, ids, offsets, _ = real
    spans = outcome.media_spans()
    blocks, outside = real_blocks(ids, offsets)
    ours = [(s.caption_text, s.pad_count) for s in spans]
    if blocks != ours:
        found.append(f"{name}: image blocks {blocks} != kit {ours}")
    if media_view(ids) != media_view(outcome.token_ids()):
        found.append(f"{name}: media ids {media_view(ids)} != kit {media_view(outcome.token_ids())}")
    if request.entry == "generate-ids":
        kit_ids = outcome.token_ids()
        kit_outside, cursor = [], 0
        for span in spans:
            kit_outside += kit_ids[cursor : span.begin]
            cursor = span.end + 1
        kit_outside += kit_ids[cursor:]
        if outside != kit_outside:
            found.append(f"{name}: the ids outside the image blocks differ")
    return found


# --- random requests --------------------------------------------------------------------------------------
def random_png(rng: random.Random) -> bytes:
    width, height = rng.randint(1, 400), rng.randint(1, 300)
    mode = rng.choice(["RGB", "RGBA", "L", "P", "RGB-jpeg"])
    pixels = np.asarray(np.random.default_rng(rng.randrange(2**31)).integers(0, 256, (height, width, 3)), np.uint8)
    image = Image.fromarray(pixels, "RGB")
    buffer = io.BytesIO()
    if mode == "RGB-jpeg":
        image.save(buffer, "JPEG", quality=80)
    else:
        image.convert(mode).save(buffer, "PNG")
    return buffer.getvalue()


def image_url(rng: random.Random, folder: Path, k: int) -> str:
    data = random_png(rng)
    kind = "jpeg" if data[:2] == b"\xff\xd8" else "png"
    how = rng.random()
    if how < 0.7:
        return f"data:image/{kind};base64," + base64.b64encode(data).decode()
    path = folder / f"image{k}.{kind}"
    path.write_bytes(data)
    return path.as_uri() if how < 0.85 else str(path)


def words(rng: random.Random, low: int = 1, high: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def with_written(rng: random.Random, text: str, pads: int) -> str:
    """Insert ``pads`` written <|media_pad|>, and sometimes another media token or the Kimi marker."""
    pieces = text.split(" ")
    for _ in range(pads):
        pieces.insert(rng.randint(0, len(pieces)), "<|media_pad|>")
    if rng.random() < 0.15:
        pieces.insert(rng.randint(0, len(pieces)), "<|kimi_image_placeholder|>")
    if rng.random() < 0.1:
        pieces.insert(
            rng.randint(0, len(pieces)), rng.choice(["<|media_begin|>", "<|media_end|>", "<|media_content|>"])
        )
    return " ".join(pieces)


def random_case(seed: int, folder: Path) -> tuple[dict, dict]:
    """Return a random body and how the checkpoint tokenizer renders it."""
    rng = random.Random(seed)
    images = rng.randint(0, 4)
    urls = [image_url(rng, folder, k) for k in range(images)]
    render = {"image_prompts": rng.random() > 0.2, "typed_tokens": rng.random() > 0.2}
    kind = rng.random()
    if kind < 0.6:  # chat
        messages: list[dict] = []
        if rng.random() < 0.5:
            messages.append({"role": rng.choice(["system", "developer"]), "content": words(rng)})
        parts: list[dict] = [{"type": "text", "text": words(rng)}]
        for url in urls:
            parts.insert(rng.randint(0, len(parts)), {"type": "image_url", "image_url": {"url": url}})
        written = rng.choice([0, 0, 0, 1, 2])
        for _ in range(written):
            text_parts = [p for p in parts if p["type"] == "text"]
            target = rng.choice(text_parts)
            target["text"] = with_written(rng, target["text"], 1)
        if rng.random() < 0.15:
            parts.append({"type": "text", "text": with_written(rng, words(rng), 0) + " <|kimi_image_placeholder|>"})
        if rng.random() < 0.05:
            parts.append({"type": "video_url", "video_url": {"url": "clip.mp4"}})
        messages.append({"role": "user", "content": parts})
        if rng.random() < 0.3:
            messages += [{"role": "assistant", "content": words(rng)}, {"role": "user", "content": words(rng)}]
        return {"model": "kimi-k3", "messages": messages}, render
    body: dict = {"image_data": urls} if urls or rng.random() < 0.5 else {}
    pads = max(0, images + rng.choice([0, 0, -1, 1]))
    if kind < 0.85:
        body["text"] = "" if rng.random() < 0.1 else with_written(rng, words(rng), pads)
    else:
        ids = [rng.randrange(256) for _ in range(rng.randint(0, 30))]
        for _ in range(pads):
            ids.insert(rng.randint(0, len(ids)), PAD)
        body["input_ids"] = ids
    if urls and rng.random() < 0.1:
        body["mm_hashes"] = ["caller-hash"] * len(urls)
    return body, render


def test_the_kit_replays_a_clients_request_like_the_real_request_side(release, tmp_path):
    disagreements: list[str] = []
    outcomes = {"raised": 0, "accepted": 0, "not-processed": 0}
    messages: dict[str, int] = {}
    processors = {None: real_processor("cpu", None, False), 0: real_processor("cpu", 0, False)}
    try:
        for seed in range(CASES):
            folder = tmp_path / f"case{seed}"
            folder.mkdir()
            body, render = random_case(seed, folder)
            cache_mb = None if seed % 3 else 0
            real = real_request(body, processors[cache_mb], **render)
            request, outcome = kit_request(body, release, folder, cache_mb=cache_mb, **render)
            name = (
                f"{release} seed {seed} ({request.entry}, {len(request.images)} images, {render}, cache_mb={cache_mb})"
            )
            disagreements += compare(name, real, request, outcome)
            if real[0] == "error":
                outcomes["raised"] += 1
                template = real[2].split(": expected")[0]
                messages[template] = messages.get(template, 0) + 1
            else:
                outcomes["accepted" if real[0] == "ok" else "not-processed"] += 1
    finally:
        for proc in processors.values():
            _close(proc)
    record("chat", cases=CASES, disagreements=len(disagreements), **outcomes)
    print(
        f"\nchat-request parity on SGLang {release}: {CASES} requests ({outcomes}), "
        f"{len(disagreements)} disagreements; raised: {messages}",
        file=sys.stderr,
    )
    assert disagreements == [], "\n".join(disagreements[:20])
    assert outcomes["raised"] >= 10 and outcomes["accepted"] >= 10  # both sides of the checks were exercised


def test_one_image_and_no_media_pad_raises_what_the_real_request_side_raises(release, tmp_path):
    """The reported case: one image, no <|media_pad|> in the text, on every entry point."""
    from kimi_viz.message_catalogue.messages import MSG_ONE_TO_ONE

    rng = random.Random(7)
    url = image_url(rng, tmp_path, 0)
    cases = [
        ({"text": "Describe the image.", "image_data": [url]}, True),
        ({"text": "", "image_data": [url]}, True),
        ({"input_ids": list(b"Describe the image."), "image_data": [url]}, True),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe."}, _image(url)]}]}, False),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe."}, _image(url)]}]}, True),
    ]
    proc = real_processor("cpu", None, False)
    disagreements = []
    try:
        for k, (body, honoured) in enumerate(cases):
            real = real_request(body, proc, image_prompts=honoured, typed_tokens=True)
            request, outcome = kit_request(
                body, release, tmp_path, image_prompts=honoured, typed_tokens=True, cache_mb=None
            )
            disagreements += compare(f"{release} reported case {k}", real, request, outcome)
            expected = ("ok",) if k == 4 else ("error", "ValueError", MSG_ONE_TO_ONE.format(1, 0))
            if real[: len(expected)] != expected:
                disagreements.append(f"{release} reported case {k}: SGLang gave {real[:3]}, expected {expected}")
    finally:
        _close(proc)
    record("chat-reported", cases=len(cases), disagreements=len(disagreements))
    assert disagreements == [], "\n".join(disagreements)


def _image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}
