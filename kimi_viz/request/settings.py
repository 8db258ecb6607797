"""The server settings that change which items SGLang's request side builds, each with the SGLang flag it stands for.

:class:`ServerSettings` is what ``kimi-viz whatif`` asks about a deployment: normal serving or the
EPD encoder (and its cpu/gpu preprocessing backend), ``--mm-feature-transport``, whether deferred GPU
preprocessing applies at all, the preprocessing cache and which images hit it or the embedding
cache, and which ``preprocessor_config.json`` the producer and the consumer loaded. The attention-TP
size is not a setting here: the sweep varies it. :data:`OPTIONS` lists every setting with its
command-line option and the SGLang flag or environment variable it stands for, a view of the one table of
SGLang's server arguments (:mod:`kimi_viz.server_args`: the spelling, the releases and what it changes come from
there); the CLI and ``docs/whatif.md`` are written from it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, get_args

from .._records import frozen
from ..errors import WhatIfError
from ..releases import FIRST_KIMI_K3, RELEASES, release_span
from ..server_args.table import ENV_VARS, SERVER_ARGS, args_of

Serving = Literal["normal", "epd-encoder"]
EpdBackend = Literal["cpu", "gpu"]
Transport = Literal["auto", "cpu", "cuda_ipc", "cuda_vmm"]
Defer = Literal["auto", "off"]
# How a replay builds the items' features: the real pixels, or their shapes from the image headers alone.
# Here, beside the settings, so that the CLI reads it without importing the producer (and Pillow).
Mode = Literal["pixels", "shapes"]

SERVINGS: tuple[Serving, ...] = get_args(Serving)
EPD_BACKENDS: tuple[EpdBackend, ...] = get_args(EpdBackend)
TRANSPORTS: tuple[Transport, ...] = get_args(Transport)
DEFERS: tuple[Defer, ...] = get_args(Defer)
MODES: tuple[Mode, ...] = get_args(Mode)
DEFAULT_CONFIG = "kimi-k3"
DEFAULT_MODE: Mode = "shapes"  # header-only probing: the same outcomes as pixels, no decoding
IMAGE_PROMPTS = ("honoured", "ignored")  # a chat renderer's image_prompts True, False (--image-prompts)
TYPED_TOKENS = ("ids", "text")  # a chat renderer's typed_tokens True, False (--typed-tokens)


def choices_metavar(choices: tuple[str, ...]) -> str:
    """Return ``{a,b,c}``: how argparse shows an option's choices, for an option that checks its own."""
    return "{" + ",".join(choices) + "}"


@frozen
class Option:
    """One setting: its field, its ``kimi-viz whatif`` option and the SGLang setting it stands for (``dest``: a
    server argument or environment variable of :mod:`kimi_viz.server_args`, whose table says what it changes), with
    what the kit adds (``note``); a setting with no SGLang flag says both itself (``meaning``)."""

    field: str
    option: str
    dest: str | None
    note: str
    own_meaning: str = ""  # what a setting with no SGLang flag (dest None) changes

    @property
    def sglang(self) -> str:
        """Return the SGLang flag or environment variable (from the table) and what the kit adds."""
        if self.dest is None:
            return self.note
        if self.dest in ENV_VARS:
            return f"env {self.dest} {self.note}".strip()
        releases = SERVER_ARGS[self.dest].releases
        main = args_of(releases[-1]).by_dest[self.dest].options[0]
        since = "" if releases[0] == FIRST_KIMI_K3 else f"{release_span(list(releases))}; "
        return f"{main} ({since}{self.note})" if self.note or since else main

    @property
    def meaning(self) -> str:
        """Return what the setting changes: the table's one line for an SGLang setting, else the kit's own."""
        if self.dest is None:
            return self.own_meaning
        return (ENV_VARS[self.dest] if self.dest in ENV_VARS else SERVER_ARGS[self.dest]).effect


def _auto_transport() -> str:
    """Return what an unset --mm-feature-transport resolves to, release by release (from the release table)."""
    by_value: dict[str, list[str]] = {}
    for release in RELEASES.values():
        by_value.setdefault(release.request_side.auto_transport, []).append(release.version)
    return ", ".join(f"{release_span(versions)} to {value}" for value, versions in by_value.items())


OPTIONS: tuple[Option, ...] = (
    Option(
        "serving",
        f"--serving {choices_metavar(SERVINGS)}",
        "encoder_only",
        "normal: a plain `python -m sglang.launch_server`; epd-encoder: that flag, with a `--language-only` server "
        "beside it",
    ),
    Option(
        "epd_backend",
        f"--epd-backend {choices_metavar(EPD_BACKENDS)}",
        "SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU",
        "(0: cpu, the default; 1: gpu, unless --image-processor-backend pil)",
    ),
    Option(
        "transport",
        f"--mm-feature-transport {choices_metavar(TRANSPORTS)}",
        "mm_feature_transport",
        f"auto: the flag unset, which a one-node CUDA server resolves in {_auto_transport()}; --encoder-only "
        "always to cpu",
    ),
    Option(
        "defer",
        f"--defer {choices_metavar(DEFERS)}",
        None,
        "no flag: `sglang.srt.utils.is_cuda()` (auto: a CUDA server, where SGLang defers an image when its "
        "raw bytes are at most its processed float32 bytes; off: a non-CUDA server, which never defers)",
        "whether _should_defer_gpu_preprocessing can say yes",
    ),
    Option(
        "preprocess_cache_mb",
        "--mm-preprocess-cache-size-mb N",
        "mm_preprocess_cache_size_mb",
        "unset: 256 MiB for Kimi-K3; 0 disables it",
    ),
    Option(
        "preprocess_cache_hits",
        "--preprocess-cache-hit I[,J...]",
        None,
        "images an earlier request already sent while the preprocessing cache was on",
        "a hit returns the cached artifact (the same feature, form and hash as a miss would build)",
    ),
    Option(
        "embedding_cache_hits",
        "--embedding-cache-hit I[,J...]",
        None,
        "images whose vision embedding is cached: the scheduler's cache (env SGLANG_VLM_CACHE_SIZE_MB) in "
        "normal serving, the encoder's `--enable-mm-global-cache` in EPD",
        "hits skip get_image_feature; in EPD the encoder still preprocessed them for their owner rank",
    ),
    Option(
        "producer_config",
        "--producer-config PRESET|preprocessor_config.json",
        None,
        "the preprocessor_config.json the tokenizer manager (or the EPD encoder) loads: `--tokenizer-path`, "
        "else `--model-path` (the kit's --model-path DIR reads it from the folder)",
        "the limits the items' grids and resize_config come from",
    ),
    Option(
        "consumer_config",
        "--consumer-config PRESET|preprocessor_config.json",
        None,
        "the preprocessor_config.json the model process loads: `--model-path` (a mismatch: --tokenizer-path "
        "pointing at another checkpoint's processor)",
        "the limits the consumer's checkpoint processor (cpu backend) applies; default: the producer's",
    ),
)
OPTION_OF = {o.field: o for o in OPTIONS}


def _indices(value: Any, name: str) -> tuple[int, ...]:
    try:
        found = sorted({int(v) for v in value})
    except (TypeError, ValueError):
        raise WhatIfError(f"{name}: expected image positions (0, 1, ...), got {value!r}") from None
    if any(v < 0 for v in found):
        raise WhatIfError(f"{name}: expected image positions from 0, got {found}; the first image is 0")
    return tuple(found)


@frozen
class ServerSettings:
    """The server settings of one deployment that change the items (see :data:`OPTIONS` for the SGLang flags)."""

    serving: Serving = "normal"
    epd_backend: EpdBackend | None = None  # None: the encoder's default (cpu); only with serving="epd-encoder"
    transport: Transport = "auto"
    defer: Defer = "auto"
    preprocess_cache_mb: int | None = None  # None: the release's default (256 MiB for Kimi-K3)
    preprocess_cache_hits: tuple[int, ...] = ()
    embedding_cache_hits: tuple[int, ...] = ()
    producer_config: str = DEFAULT_CONFIG
    consumer_config: str | None = None  # None: the producer's

    def __post_init__(self) -> None:
        choices = (
            ("serving", self.serving, SERVINGS),
            ("transport", self.transport, TRANSPORTS),
            ("defer", self.defer, DEFERS),
        )
        for name, value, allowed in choices:
            if value not in allowed:
                raise WhatIfError(f"{name}: expected one of {list(allowed)}, got {value!r}")
        if self.epd_backend is not None and self.epd_backend not in EPD_BACKENDS:
            raise WhatIfError(f"epd_backend: expected one of {list(EPD_BACKENDS)}, got {self.epd_backend!r}")
        mb = self.preprocess_cache_mb
        if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 0):
            raise WhatIfError(f"preprocess_cache_mb: expected a size in MiB >= 0 (0 disables the cache), got {mb!r}")
        object.__setattr__(self, "preprocess_cache_hits", _indices(self.preprocess_cache_hits, "preprocess_cache_hits"))
        object.__setattr__(self, "embedding_cache_hits", _indices(self.embedding_cache_hits, "embedding_cache_hits"))
        self._check_consistent()

    def _check_consistent(self) -> None:
        epd = self.serving == "epd-encoder"
        if self.epd_backend is not None and not epd:
            raise WhatIfError(
                f"--epd-backend {self.epd_backend}: the backend is the EPD encoder's "
                "(SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU); add --serving epd-encoder or drop --epd-backend"
            )
        if self.preprocess_cache_hits and self.preprocess_cache_mb == 0:
            raise WhatIfError(
                "--preprocess-cache-hit with --mm-preprocess-cache-size-mb 0: a disabled cache has no hits; "
                "drop one of the two"
            )
        if epd and self.preprocess_cache_hits:
            raise WhatIfError(
                "--preprocess-cache-hit with --serving epd-encoder: the preprocessing cache is the request "
                "side's (tokenizer manager), the EPD encoder has none; use --embedding-cache-hit for the "
                "encoder's --enable-mm-global-cache"
            )
        if epd and self.preprocess_cache_mb is not None:
            raise WhatIfError(
                "--mm-preprocess-cache-size-mb with --serving epd-encoder: the EPD encoder builds its items "
                "without the request side's preprocessing cache; drop the option"
            )
        if epd and self.consumer_config is not None and self.consumer_config != self.producer_config:
            raise WhatIfError(
                f"--consumer-config {self.consumer_config} with --serving epd-encoder: the EPD encoder builds "
                "and consumes its deferred items with one image processor (preprocess_mm_for_encoder keeps it "
                "as _encoder_image_processor), so they cannot differ; drop --consumer-config"
            )

    @property
    def epd(self) -> bool:
        """Return True for the EPD encoder."""
        return self.serving == "epd-encoder"

    @property
    def backend(self) -> EpdBackend:
        """Return the EPD encoder's backend (``cpu`` unless ``gpu`` was asked)."""
        return self.epd_backend or "cpu"

    @property
    def consumer(self) -> str:
        """Return the consumer's processor config (the producer's unless a mismatch was asked)."""
        return self.consumer_config or self.producer_config

    @property
    def mismatch(self) -> bool:
        """Return True when the producer and the consumer load different processor configs."""
        return self.consumer != self.producer_config

    def check_images(self, n_images: int) -> ServerSettings:
        """Return ``self`` when every cache-hit position names one of ``n_images`` images, else raise WhatIfError."""
        for name, hits in (
            ("--preprocess-cache-hit", self.preprocess_cache_hits),
            ("--embedding-cache-hit", self.embedding_cache_hits),
        ):
            bad = [h for h in hits if h >= n_images]
            if bad:
                raise WhatIfError(
                    f"{name} {','.join(map(str, bad))}: the request has {n_images} image(s), positions 0 to "
                    f"{n_images - 1}; name images by their position in the request"
                )
        return self

    def for_subset(self, positions: list[int]) -> ServerSettings:
        """Return these settings for a request made of ``positions`` of this one (cache hits follow their images)."""
        where = {p: k for k, p in enumerate(positions)}
        return replace(
            self,
            preprocess_cache_hits=tuple(where[p] for p in self.preprocess_cache_hits if p in where),
            embedding_cache_hits=tuple(where[p] for p in self.embedding_cache_hits if p in where),
        )

    def sglang_flags(self) -> str:
        """Return the SGLang command-line flags and environment these settings stand for, as one line."""
        parts = ["--encoder-only" if self.epd else "(normal serving)"]
        if self.epd:
            parts.append(f"SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU={1 if self.backend == 'gpu' else 0}")
        if self.transport != "auto":
            parts.append(f"--mm-feature-transport {self.transport}")
        if self.preprocess_cache_mb is not None:
            parts.append(f"--mm-preprocess-cache-size-mb {self.preprocess_cache_mb}")
        if self.defer == "off":
            parts.append("(a non-CUDA server: is_cuda() is False)")
        if self.mismatch:
            parts.append(f"--tokenizer-path <{self.producer_config}> --model-path <{self.consumer}>")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """Return the settings as plain JSON data, plus the SGLang flags they stand for."""
        return {
            "serving": self.serving,
            "epd_backend": self.backend if self.epd else None,
            "mm_feature_transport": self.transport,
            "defer": self.defer,
            "mm_preprocess_cache_size_mb": self.preprocess_cache_mb,
            "preprocess_cache_hits": list(self.preprocess_cache_hits),
            "embedding_cache_hits": list(self.embedding_cache_hits),
            "producer_config": self.producer_config,
            "consumer_config": self.consumer,
            "sglang_flags": self.sglang_flags(),
        }


__all__ = [
    "DEFAULT_MODE",
    "IMAGE_PROMPTS",
    "TYPED_TOKENS",
    "Serving",
    "EpdBackend",
    "Transport",
    "Defer",
    "SERVINGS",
    "EPD_BACKENDS",
    "TRANSPORTS",
    "DEFERS",
    "Mode",
    "MODES",
    "choices_metavar",
    "Option",
    "OPTIONS",
    "OPTION_OF",
    "ServerSettings",
]
