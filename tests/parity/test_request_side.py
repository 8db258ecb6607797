"""The kit's request-side model (kimi_viz._whatif) against SGLang's REAL request side and EPD encoder producer.

Runs in the real-SGLang lane (``tests/parity/conftest.py``: skipped where ``import sglang`` fails, a
failure under ``KIMI_VIZ_REQUIRE_SGLANG=1``). For seeded random image sets and every option
combination the real code can express on a CPU, the items SGLang builds must match the kit's item for
item: which grid keys it carries and their values, the deferred backend, the ``resize_config``, and
whether the feature is raw or eager (with its shape); for the EPD cpu backend also which items each
rank's ``materialize_for_rank`` preprocessed locally; and equal bytes must give equal item hashes (the
kit's dedup of the embedding-cache call).

What runs for real: ``KimiK3ImageProcessor.process_mm_data_async`` (the cached path with
``prepare_media_artifacts`` / ``prepare_artifact_batch`` / ``compose_request``, the uncached path, the
byte rule ``_should_defer_gpu_preprocessing``, hashing and the transport wrapping of CPU tensors),
``prepare_kimi_k3_encoder_inputs`` and ``EncoderPreprocessOutput.materialize_for_rank`` with SGLang's own
load balancing, and SGLang's ``load_image``. Stand-ins (none of them SGLang code): a byte-level
tokenizer carrying the four Kimi-K3 media tokens, the checkpoint processor (SGLang's own
``navit_resize_config`` for the grids, the kit's checkpoint pixels), the published server config
(``get_mm()`` & co.), and ``kimi_k3.is_cuda``, which the test decides. The EPD encoder's loader is
mirrored (``load_image(data, False)`` then ``convert("RGB")`` for a non-RGB image, as
``_load_single_item`` does), because the encode server itself needs uvicorn & co.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import random
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
from PIL import Image

from .lane import CheckpointImageProcessor, module, record

MEDIA_TOKENS = {
    "<|media_begin|>": 163602,
    "<|media_content|>": 163603,
    "<|media_end|>": 163604,
    "<|media_pad|>": 163605,
}
PAD = MEDIA_TOKENS["<|media_pad|>"]
_SPECIAL = re.compile("(" + "|".join(re.escape(k) for k in MEDIA_TOKENS) + ")")
K3_CFG = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 65536,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "transparent_bg_config": {
        "pattern": "chessboard",
        "chessboard_square_size": 8,
        "chessboard_square_on_top_left": True,
        "chessboard_white_value": 255,
        "chessboard_gray_value": 180,
    },
    "transparent_bg_fill_stage": "after_resize",
}
RANDOM_SETS = 12
MODES = ("RGB", "RGBA", "L", "LA", "P", "P+trns", "CMYK-jpeg", "RGB-jpeg")


# --- stand-ins --------------------------------------------------------------------------------
class TinyTokenizer:
    """Byte-level ids 0..255 plus the Kimi-K3 media tokens."""

    bos_token = eos_token = None

    def encode(self, text, add_special_tokens=True, **kw):
        ids = []
        for part in _SPECIAL.split(text):
            if part in MEDIA_TOKENS:
                ids.append(MEDIA_TOKENS[part])
            elif part:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids, **kw):
        names = {v: k for k, v in MEDIA_TOKENS.items()}
        return "".join(names.get(int(i), chr(int(i)) if int(i) < 256 else "?") for i in list(ids))

    def convert_ids_to_tokens(self, ids):
        names = {v: k for k, v in MEDIA_TOKENS.items()}
        return [names.get(i, chr(i) if i < 256 else f"<{i}>") for i in ids]

    def convert_tokens_to_ids(self, token):
        return MEDIA_TOKENS.get(token)

    def __call__(self, text, return_tensors=None, **kw):
        import torch

        ids = torch.tensor([self.encode(text[0] if isinstance(text, list) else text)])
        return SimpleNamespace(input_ids=ids) if return_tensors else {"input_ids": ids}


class MediaProcessor(CheckpointImageProcessor):
    """The checkpoint media processor: ``media_proc_cfg``, the token count, and ``preprocess``."""

    def media_tokens_calculator(self, media):
        image = media["image"]
        width, height = (image.shape[-1], image.shape[-2]) if hasattr(image, "shape") else image.size
        k25 = module("sglang.srt.multimodal.processors.kimi_k25")
        c = self.config
        resize = k25.navit_resize_config(
            width,
            height,
            c.patch_size,
            c.merge_kernel_size,
            c.in_patch_limit,
            c.patch_limit_on_one_side,
            c.fixed_output_tokens,
        )
        return resize["num_tokens"]

    def preprocess(self, medias, return_tensors="pt", **kw):
        fixed = []
        for media in medias:
            image = media["image"]
            if not isinstance(image, Image.Image):  # a CHW uint8 tensor
                image = Image.fromarray(image.permute(1, 2, 0).contiguous().numpy())
            fixed.append({"type": "image", "image": image})
        return super().preprocess(fixed, return_tensors)


class HFProcessor:
    """What SGLang reads from the checkpoint's AutoProcessor: tokenizer, media processor, __call__."""

    def __init__(self):
        self.tokenizer = TinyTokenizer()
        self.media_processor = MediaProcessor(K3_CFG)
        self.image_processor = self.media_processor

    def __call__(self, text=None, medias=None, **kw):
        import torch

        out = {"input_ids": torch.tensor([self.tokenizer.encode(text[0] if isinstance(text, list) else text)])}
        if medias:
            out.update(self.media_processor.preprocess(medias))
        return out


# --- the published server config -----------------------------------------------------------------
BAGS: dict[str, SimpleNamespace] = {}


def _set_bags(transport: str, cache_mb) -> SimpleNamespace:
    mm = SimpleNamespace(
        allowed_media_domains=None,
        media_url_max_file_size_mb=64,
        mm_feature_transport=transport,
        image_processor_backend="auto",
        disable_fast_image_processor=False,
        mm_process_config={},
        mm_preprocess_cache_size_mb=cache_mb,
        trust_mm_content_hashes=False,
        mm_io_worker_num=1,
        mm_processor_worker_num=1,
        mm_enable_dp_encoder=False,
    )
    BAGS.update(
        mm=mm,
        serving=SimpleNamespace(skip_tokenizer_init=False, tokenizer_worker_num=1, tokenizer_path=None),
        exec=SimpleNamespace(deterministic=SimpleNamespace(rl_on_policy_target=None)),
        model=SimpleNamespace(revision=None, model_path="stub", trust_remote_code=True),
        parallel=SimpleNamespace(tp_size=1, attn_tp_size=1, attn_tp_rank=0),
    )
    return SimpleNamespace(
        **vars(mm),
        skip_tokenizer_init=False,
        tokenizer_worker_num=1,
        base_gpu_id=0,
        tp_size=1,
        rl_on_policy_target=None,
    )


_ACCESSORS = {
    "get_mm": "mm",
    "get_serving": "serving",
    "get_exec": "exec",
    "get_model": "model",
    "get_parallel": "parallel",
}
_PATCHED: list = []
_ORIGINALS: list[tuple[Any, str, Any]] = []  # (module, accessor, the function it had before)


@contextmanager
def sglang_accessors_restored() -> Iterator[None]:
    """Give the ``get_exec()``-style accessors :func:`_patch_accessors` replaced their own functions back while the
    block runs (code that reads the published server context, such as the scheduler driver, needs them)."""
    with ExitStack() as stack:
        for mod, accessor, original in _ORIGINALS:
            stack.enter_context(mock.patch.object(mod, accessor, original))
        yield


def _patch_accessors() -> None:
    """Point every ``get_mm()``-style accessor the request side reads at :data:`BAGS` (once per process)."""
    if _PATCHED:
        return
    _set_bags("cpu", None)
    names = [
        "sglang.srt.runtime_context",
        "sglang.srt.multimodal.processors.base_processor",
        "sglang.srt.multimodal.processors.kimi_k25",
        "sglang.srt.multimodal.processors.kimi_k3",
        "sglang.srt.multimodal.cache.identity",
        "sglang.srt.multimodal.cache",
        "sglang.srt.multimodal.processors.kimi_common",
        "sglang.srt.multimodal.transport.memory_pool",
    ]
    for name in names:
        try:
            mod = module(name)
        except ImportError:
            continue  # a release without this module
        for accessor, key in _ACCESSORS.items():
            if hasattr(mod, accessor):
                _ORIGINALS.append((mod, accessor, getattr(mod, accessor)))
                setattr(mod, accessor, (lambda k: lambda: BAGS[k])(key))
        _PATCHED.append(name)


def real_processor(transport: str, cache_mb, is_cuda: bool):
    """Return SGLang's own KimiK3ImageProcessor under these settings (``kimi_k3.is_cuda`` decided here)."""
    _patch_accessors()
    server_args = _set_bags(transport, cache_mb)
    k3 = module("sglang.srt.multimodal.processors.kimi_k3")
    k3.is_cuda = lambda: is_cuda
    hf_config = SimpleNamespace(
        media_placeholder_token_id=PAD,
        model_type="kimi_k3",
        architectures=["KimiK3ForConditionalGeneration"],
        vision_config=SimpleNamespace(merge_kernel_size=[2, 2]),
    )
    hf_config.to_dict = lambda: {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"]}
    return k3.KimiK3ImageProcessor(hf_config, server_args, HFProcessor(), None, skip_mm_pool=True)


def _close(proc) -> None:
    for name in ("io_executor", "cpu_executor"):
        executor = getattr(proc, name, None)
        if executor is not None:
            executor.shutdown(wait=False)


def send(proc, datas: list[bytes]) -> list:
    """Return the MultimodalDataItems SGLang's request side builds for one request carrying ``datas``."""
    prompt = TinyTokenizer().encode("".join(f"image {i}: <|media_pad|>\n" for i in range(len(datas))) + "describe")
    request = SimpleNamespace(video_data=None, audio_data=None, mm_content_hashes=None, mm_hashes=None)
    return asyncio.run(proc.process_mm_data_async(list(datas), prompt, request)).mm_items


# --- item facts --------------------------------------------------------------------------------------
def real_facts(item) -> dict:
    """Return the facts of a real item: grid keys and values, backend, resize_config, raw/eager, shape, local."""
    import torch

    data = item.model_specific_data
    grids = {k: data[k].tolist() for k in ("image_grid_thw", "grid_thws") if k in data}
    deferred = data.get("kimi_k3_deferred_preprocessing")
    feature = item.feature
    if isinstance(feature, Image.Image):
        form, shape = "raw", [feature.height, feature.width, len(feature.getbands())]
    else:
        assert isinstance(feature, torch.Tensor), type(feature)
        eager = feature.dtype == torch.float32 and feature.dim() == 4
        form, shape = ("eager" if eager else "raw"), list(feature.shape)
    return {
        "grids": grids,
        "backend": None if deferred is None else deferred.backend,
        "resize_config": None if deferred is None else {k: int(v) for k, v in deferred.resize_config.items()},
        "form": form,
        "shape": shape,
        "local": bool(data.get("encoder_local_preprocessed", False)),
    }


def kit_facts(item) -> dict:
    """Return the same facts of a kit item."""
    deferred = item.deferred
    form = "eager" if deferred is None or item.local_preprocessed else "raw"
    return {
        "grids": {k: [list(r) for r in v] for k, v in item.grids.items()},
        "backend": None if deferred is None else deferred["backend"],
        "resize_config": None if deferred is None else dict(deferred["resize_config"]),
        "form": form,
        "shape": list(item.feature.shape),
        "local": bool(item.local_preprocessed),
    }


def diff(name: str, real: list[dict], ours: list[dict]) -> list[str]:
    """Return one line per item whose facts differ (or one line when the item counts differ)."""
    if len(real) != len(ours):
        return [f"{name}: SGLang built {len(real)} items, the kit {len(ours)}"]
    return [f"{name}: item {k}: SGLang {r} != kit {o}" for k, (r, o) in enumerate(zip(real, ours)) if r != o]


# --- random images -----------------------------------------------------------------------------------
def random_image(rng: random.Random) -> bytes:
    """Return the encoded bytes of a random image: one of :data:`MODES`, small, or a strip SGLang keeps eager."""
    mode = rng.choice(MODES)
    if rng.random() < 0.15:  # a strip wider than 2 x 7168 px: downscaled so hard the byte rule keeps it eager
        width, height = rng.randint(15000, 24000), rng.randint(20, 60)
    else:
        width, height = rng.randint(1, 700), rng.randint(1, 500)
    pixels = np.asarray(np.random.default_rng(rng.randrange(2**31)).integers(0, 256, (height, width, 4)), np.uint8)
    image = Image.fromarray(pixels, "RGBA")
    buffer = io.BytesIO()
    if mode == "CMYK-jpeg":
        image.convert("CMYK").save(buffer, "JPEG", quality=80)
    elif mode == "RGB-jpeg":
        image.convert("RGB").save(buffer, "JPEG", quality=80)
    elif mode == "P+trns":
        image.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(buffer, "PNG", transparency=0)
    else:
        image.convert(mode).save(buffer, "PNG")
    return buffer.getvalue()


def random_request(seed: int) -> list[bytes]:
    """Return 1-5 random images, sometimes with one repeated."""
    rng = random.Random(seed)
    datas = [random_image(rng) for _ in range(rng.randint(1, 5))]
    if len(datas) > 1 and rng.random() < 0.3:
        datas.insert(rng.randrange(len(datas) + 1), rng.choice(datas))
    return datas


# --- the comparisons ------------------------------------------------------------------------------------
def _kit_built(datas, settings, release):
    from kimi_viz.request.images import probe_image
    from kimi_viz.request.sides import build_request

    images = [probe_image(d, label=f"img{k}") for k, d in enumerate(datas)]
    return build_request(images, settings, release)


def compare_request_side(
    release: str, datas: list[bytes], *, transport: str, cache_mb, is_cuda: bool, hits: tuple[int, ...]
) -> tuple[list[str], int]:
    """Return ``(disagreements, items compared)`` for one request under one option combination."""
    from kimi_viz.request.settings import ServerSettings

    settings = ServerSettings(
        transport=transport,
        defer="auto" if is_cuda else "off",
        preprocess_cache_mb=cache_mb,
        preprocess_cache_hits=hits,
    )
    proc = real_processor(transport, cache_mb, is_cuda)
    try:
        if hits:
            send(proc, [datas[h] for h in hits])  # an earlier request: these images are now preprocessing-cache hits
        items = send(proc, datas)
    finally:
        _close(proc)
    name = f"{release} transport={transport} cache_mb={cache_mb} is_cuda={is_cuda} hits={hits} n={len(datas)}"
    found = diff(
        name, [real_facts(it) for it in items], [kit_facts(it) for it in _kit_built(datas, settings, release).items]
    )
    hashes = [it.hash for it in items]
    for (a, da), (b, db) in itertools.combinations(enumerate(datas), 2):
        if (hashes[a] == hashes[b]) != (da == db):
            found.append(f"{name}: items {a} and {b}: equal bytes {da == db} but equal hashes {hashes[a] == hashes[b]}")
    return found, len(items)


def encoder_load(data: bytes):
    """Return the image the EPD encoder hands its preprocessor (SGLang's load_image, then _load_single_item's rule)."""
    utils = module("sglang.srt.utils")
    image, _ = utils.load_image(data, False)
    return image.convert("RGB") if image.mode != "RGB" else image


def compare_encoder(release: str, datas: list[bytes], *, backend: str, tp_size: int) -> tuple[list[str], int]:
    """Return ``(disagreements, items compared)`` for the EPD encoder: the items, then each rank's local ones."""
    from kimi_viz.forward.call import model_call
    from kimi_viz.request.settings import ServerSettings

    processing = module("sglang.srt.multimodal.kimi_k3_image_processing")
    settings = ServerSettings(serving="epd-encoder", epd_backend=backend)  # type: ignore[arg-type]
    built = _kit_built(datas, settings, release)
    name = f"{release} EPD backend={backend} TP {tp_size} n={len(datas)}"

    def produce():
        media = [{"type": "image", "image": encoder_load(d)} for d in datas]
        return processing.prepare_kimi_k3_encoder_inputs(
            media, MediaProcessor(K3_CFG), use_gpu_preprocessing=backend == "gpu"
        )

    found = diff(name, [real_facts(it) for it in produce().mm_items], [kit_facts(it) for it in built.items])
    compared = len(datas)
    call = model_call(built, tp_size, release)
    for rank in range(tp_size):
        output = produce()
        if output.materialize_local_items is not None:
            output.materialize_for_rank(rank, tp_size)
        ours = call.rank_batches[rank].items if call.rank_batches is not None else built.items
        found += diff(f"{name} rank {rank}", [real_facts(it) for it in output.mm_items], [kit_facts(it) for it in ours])
        compared += len(datas)
    return found, compared


def test_the_kit_builds_the_items_the_real_request_side_builds(release):
    disagreements, cases, items = [], 0, 0
    combos = [(t, c, cuda) for t in ("cpu", "cuda_ipc", "cuda_vmm") for c in (None, 0) for cuda in (True, False)]
    for seed in range(RANDOM_SETS):
        datas = random_request(seed)
        rng = random.Random(1000 + seed)
        for transport, cache_mb, is_cuda in combos:
            hits: tuple[int, ...] = ()
            if cache_mb is None and rng.random() < 0.5:
                hits = tuple(sorted(rng.sample(range(len(datas)), rng.randint(1, len(datas)))))
            found, n = compare_request_side(
                release, datas, transport=transport, cache_mb=cache_mb, is_cuda=is_cuda, hits=hits
            )
            disagreements += found
            cases += 1
            items += n
    record("request-side", cases=cases, items=items, disagreements=len(disagreements))
    print(
        f"\nrequest-side parity on SGLang {release}: {cases} cases, {items} items, {len(disagreements)} disagreements",
        file=sys.stderr,
    )
    assert disagreements == [], "\n".join(disagreements[:20])


def test_the_kit_builds_the_items_the_real_epd_encoder_builds(release):
    disagreements, cases, items = [], 0, 0
    for seed in range(RANDOM_SETS):
        datas = random_request(100 + seed)
        for backend in ("cpu", "gpu"):
            for tp_size in (1, 2, 4):
                found, n = compare_encoder(release, datas, backend=backend, tp_size=tp_size)
                disagreements += found
                cases += 1
                items += n
    record("epd-encoder", cases=cases, items=items, disagreements=len(disagreements))
    print(
        f"\nEPD-encoder parity on SGLang {release}: {cases} cases, {items} items, {len(disagreements)} disagreements",
        file=sys.stderr,
    )
    assert disagreements == [], "\n".join(disagreements[:20])


def test_the_byte_rule_decides_like_the_real_one(release):
    """Every random image, alone and in a set: the kit's deferral decision equals _should_defer_gpu_preprocessing."""
    from kimi_viz.request.images import probe_image
    from kimi_viz.request.settings import ServerSettings
    from kimi_viz.request.sides import build_request

    proc = real_processor("cpu", None, True)
    disagreements, cases = [], 0
    try:
        for seed in range(RANDOM_SETS):
            datas = random_request(200 + seed)
            loaded = [Image.open(io.BytesIO(d)) for d in datas]
            images = [probe_image(d) for d in datas]
            for settings, real in (
                (ServerSettings(), [proc._should_defer_gpu_preprocessing([im]) for im in loaded]),
                (ServerSettings(preprocess_cache_mb=0), [proc._should_defer_gpu_preprocessing(loaded)] * len(loaded)),
            ):
                ours = [d.form == "deferred" for d in build_request(images, settings, release).decisions]
                cases += 1
                if ours != real:
                    disagreements.append(
                        f"seed {seed} cache_mb={settings.preprocess_cache_mb}: SGLang {real}, kit {ours}"
                    )
    finally:
        _close(proc)
    record("byte-rule", cases=cases, disagreements=len(disagreements))
    assert disagreements == [], "\n".join(disagreements)
    assert cases == 2 * RANDOM_SETS
