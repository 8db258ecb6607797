"""The items one release's request side (or EPD encoder) builds for one request, per SGLang's own rules.

Four versions of ``sglang/srt/multimodal/processors/kimi_k3.py`` ship (:data:`~kimi_viz.releases.REQUEST_SIDES`; the
release table's ``Release.request_side`` says which one a release carries). What decides an item:

* **0.5.17** never defers: every item is eager (``[h*w, 3, 14, 14]`` float32 rows) with
  ``image_grid_thw`` only; its EPD encoder runs the HF image processor and gives eager items with
  ``grid_thws`` only. Its ``--mm-feature-transport`` accepts cpu and cuda_ipc and resolves to cuda_ipc
  on a one-node CUDA server.
* **0.5.18** adds deferred GPU preprocessing (``_should_defer_gpu_preprocessing``: transport cpu, a
  CUDA server, and ``raw_bytes <= processed_bytes`` where raw is channels·W·H and processed is
  3·padded_w·padded_h·4): a deferred item keeps the CHW uint8 image (RGBA when it has alpha) with
  ``image_grid_thw`` and a ``backend="gpu"`` config whose ``resize_config`` has the five int keys. The
  preprocessing cache (on by default) decides per image; with it off the decision covers all images
  together. Its EPD encoder (``prepare_kimi_k3_encoder_inputs``) drops alpha and gives ``grid_thws``
  with a ``cpu`` (PIL image) or ``gpu`` (CHW uint8) config; for cpu it preprocesses each rank's own
  images right away (``materialize_for_rank``: eager rows, ``encoder_local_preprocessed``).
* **0.5.19–0.5.22** build the same items as 0.5.18 (items move through
  ``_prepare_mm_items_for_transport``; the published config moves to ``get_mm()``).
* **0.5.23** builds the same items again; an item's identity becomes a content+config+grid SHA-256
  (``set_identity``), equal for the deferred and eager forms, and caller-supplied hashes are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._records import frozen
from ..errors import SettingNotInReleaseError
from ..preprocess.config import ProcessorConfig, get_config
from ..preprocess.resize import ResizeConfig, resize_config
from ..release_changes.rules import releases_where
from ..releases import RequestSide, release_for
from ..split.batch import Feature, Item
from .images import RequestImage
from .producer import Mode, deferred_config, eager_feature, grid_row, raw_feature
from .settings import ServerSettings

Form = Literal["deferred", "eager"]
BuildPath = Literal["cached", "uncached", "no-cache", "encoder"]


def request_side_for(sglang_version: str) -> RequestSide:
    """Return the :class:`RequestSide` the release ships (``Release.request_side``)."""
    release, _ = release_for(sglang_version)
    return release.request_side


@frozen
class Decision:
    """How the request side decided one image: deferred or eager, the two byte counts, and why."""

    image: int
    form: Form
    raw_bytes: int | None
    processed_bytes: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Return ``{"image", "form", "raw_bytes", "processed_bytes", "reason"}``."""
        return {
            "image": self.image,
            "form": self.form,
            "raw_bytes": self.raw_bytes,
            "processed_bytes": self.processed_bytes,
            "reason": self.reason,
        }


@dataclass
class BuiltRequest:
    """The items one release's request side (or EPD encoder) built for a request, and how it decided each."""

    request_side: RequestSide
    settings: ServerSettings
    images: list[RequestImage]
    transport: str  # the resolved --mm-feature-transport
    path: BuildPath
    items: list[Item]  # one per image, in request order
    decisions: list[Decision]
    producer: ProcessorConfig = field(repr=False)
    consumer: ProcessorConfig = field(repr=False)
    mode: Mode = "shapes"
    notes: list[str] = field(default_factory=list)

    @property
    def forms(self) -> list[str]:
        """Return each item's form: ``deferred-gpu``, ``deferred-cpu`` or ``eager``."""
        return [f"deferred-{it.backend}" if it.deferred is not None else "eager" for it in self.items]

    def to_json(self) -> dict[str, Any]:
        """Return what was built: the request side, the resolved transport, the path, each item and decision."""
        return {
            "request_side": self.request_side.version,
            "mm_feature_transport": self.transport,
            "path": self.path,
            "items": [item_json(it) for it in self.items],
            "decisions": [d.to_json() for d in self.decisions],
            "notes": list(self.notes),
        }


def item_json(item: Item) -> dict[str, Any]:
    """Return the facts of an item the request side decides: grid keys and values, backend, resize_config, form."""
    deferred = item.deferred or {}
    return {
        "label": item.label,
        "grids": {k: [list(r) for r in v] for k, v in item.grids.items()},
        "backend": item.backend,
        "resize_config": deferred.get("resize_config"),
        "feature": "eager" if item.deferred is None else "raw",
        "feature_layout": item.feature.layout,
        "feature_shape": list(item.feature.shape),
        "local_preprocessed": item.local_preprocessed,
    }


def resolve_transport(side: RequestSide, settings: ServerSettings) -> tuple[str, str]:
    """Return ``(transport the processor sees, sentence)``; raise SettingNotInReleaseError for a refused value."""
    asked = settings.transport
    if asked != "auto" and asked not in side.transports:
        raise SettingNotInReleaseError(
            f"--mm-feature-transport {asked}: SGLang {side.label} accepts only {', '.join(side.transports)}; "
            "pick one of those or another release"
        )
    if settings.epd:
        note = "the encode server (--encoder-only) always uses the cpu transport"
        return "cpu", note + ("" if asked in ("auto", "cpu") else f" (--mm-feature-transport {asked} is overridden)")
    if asked == "auto":
        return side.auto_transport, (
            f"--mm-feature-transport unset: SGLang {side.label} resolves it to {side.auto_transport} on a "
            "one-node CUDA server"
        )
    return asked, f"--mm-feature-transport {asked}"


def build_path(side: RequestSide, settings: ServerSettings) -> BuildPath:
    """Return the request side's path outside EPD: ``no-cache`` before 0.5.18, else ``uncached`` with the
    preprocessing cache off (``--mm-preprocess-cache-size-mb 0``), else ``cached``."""
    if not side.preprocess_cache:
        return "no-cache"
    return "uncached" if settings.preprocess_cache_mb == 0 else "cached"


def encoder_preprocesses(settings: ServerSettings, side: RequestSide) -> bool:
    """Return True when the EPD encoder preprocesses the raw images itself (no cached artifact reaches it)."""
    return settings.epd and side.encoder_defers and settings.backend == "cpu"


def _byte_counts(image: RequestImage, resize: ResizeConfig) -> tuple[int, int]:
    raw = image.channels() * image.width * image.height
    width, height = resize.padded_size
    return raw, 3 * width * height * 4


def _defer_gate(side: RequestSide, settings: ServerSettings, transport: str) -> str | None:
    """Return why no image can defer (None when the byte rule decides)."""
    if not side.defers:
        return f"SGLang {side.label}'s request side has no deferred preprocessing: every image is eager"
    if transport != "cpu":
        return f"the {transport} transport never defers (_should_defer_gpu_preprocessing needs cpu)"
    if settings.defer == "off":
        return "is_cuda() is False on this server: _should_defer_gpu_preprocessing never defers"
    return None


def _decide(
    images: list[RequestImage], resizes: list[ResizeConfig], gate: str | None, path: BuildPath
) -> list[Decision]:
    if gate is not None:
        return [Decision(k, "eager", None, None, gate) for k in range(len(images))]
    counts = [_byte_counts(im, r) for im, r in zip(images, resizes)]
    if path == "uncached":
        raw, processed = sum(c[0] for c in counts), sum(c[1] for c in counts)
        form: Form = "deferred" if raw <= processed else "eager"
        why = (
            f"the preprocessing cache is off: one decision for all images, raw {raw} B "
            f"{'<=' if raw <= processed else '>'} processed {processed} B"
        )
        return [Decision(k, form, c[0], c[1], why) for k, c in enumerate(counts)]
    out = []
    for k, (raw, processed) in enumerate(counts):
        defer = raw <= processed
        out.append(
            Decision(
                k,
                "deferred" if defer else "eager",
                raw,
                processed,
                f"raw {raw} B {'<=' if defer else '>'} processed {processed} B"
                + ("" if defer else " (a strong downscale: preprocessing now sends fewer bytes)"),
            )
        )
    return out


def build_request(
    images: list[RequestImage], settings: ServerSettings, side: RequestSide | str, *, mode: Mode = "shapes"
) -> BuiltRequest:
    """Return the :class:`BuiltRequest`: the items ``side`` (a :class:`RequestSide` or release) builds for ``images``.

    ``mode="shapes"`` gives shape-only features (no pixel decoded); ``"pixels"`` the real raw images and
    eager rows. Raises :class:`~kimi_viz.errors.SettingNotInReleaseError` when the release does not accept
    a setting (a transport or cache flag it lacks).
    """
    side = side if isinstance(side, RequestSide) else request_side_for(side)
    settings.check_images(len(images))
    if settings.preprocess_cache_mb is not None and not side.preprocess_cache:
        since = releases_where("request_side.preprocess_cache")[0]
        raise SettingNotInReleaseError(
            f"--mm-preprocess-cache-size-mb: SGLang {side.label} has no preprocessing cache (it came in {since}); "
            f"drop the option or pick {since} or later"
        )
    transport, transport_note = resolve_transport(side, settings)
    producer = get_config(settings.producer_config)
    consumer = get_config(settings.consumer)
    resizes = [resize_config(im.width, im.height, producer) for im in images]
    notes = [transport_note]
    if settings.epd:
        built = _encoder_items(images, resizes, settings, side, producer, mode, notes)
        path: BuildPath = "encoder"
        items, decisions = built
    else:
        path = build_path(side, settings)
        decisions = _decide(images, resizes, _defer_gate(side, settings, transport), path)
        items = []
        gpu_eager = settings.defer == "auto"  # a CUDA server preprocesses eager images with SGLang's torch path
        for image, resize, decision in zip(images, resizes, decisions):
            if decision.form == "deferred":
                feature = raw_feature(image, "gpu", mode=mode)
                config = deferred_config("gpu", resize, producer)
            else:
                feature = eager_feature(image, resize, producer, mode=mode, gpu=gpu_eager)
                config = None
            items.append(
                Item(
                    grids={"image_grid_thw": [grid_row(resize)]},
                    feature=feature,
                    deferred=config,
                    original_size=image.size,
                    label=image.label,
                )
            )
        if settings.preprocess_cache_hits:
            hits = ", ".join(str(h) for h in settings.preprocess_cache_hits)
            notes.append(
                f"preprocessing-cache hits ({hits}): "
                + (
                    "SGLang " + side.label + " has no preprocessing cache, so they are processed again (same items)"
                    if not side.preprocess_cache
                    else "the cached artifacts are returned as built the first time: the same feature, form "
                    "and hash, so the items do not change"
                )
            )
    if settings.mismatch:
        notes.append(
            f"the producer loaded {producer.name!r} limits and the consumer {consumer.name!r}: grids and "
            "resize_config follow the producer"
        )
    return BuiltRequest(side, settings, images, transport, path, items, decisions, producer, consumer, mode, notes)


def _encoder_items(
    images: list[RequestImage],
    resizes: list[ResizeConfig],
    settings: ServerSettings,
    side: RequestSide,
    producer: ProcessorConfig,
    mode: Mode,
    notes: list[str],
) -> tuple[list[Item], list[Decision]]:
    """Return the EPD encoder's items (before any owner-side materialization) and their decisions."""
    items, decisions = [], []
    for k, (image, resize) in enumerate(zip(images, resizes)):
        grids = {"grid_thws": [grid_row(resize)]}
        if not side.encoder_defers:
            why = f"SGLang {side.label}'s encoder runs the HF image processor: eager rows"
            feature = eager_feature(image, resize, producer, mode=mode, discard_alpha=True)
            items.append(Item(grids=grids, feature=feature, original_size=image.size, label=image.label))
            decisions.append(Decision(k, "eager", None, None, why))
            continue
        backend = settings.backend
        feature = raw_feature(image, backend, mode=mode, discard_alpha=True)
        items.append(
            Item(
                grids=grids,
                feature=feature,
                deferred=deferred_config(backend, resize, producer),
                original_size=image.size,
                label=image.label,
            )
        )
        why = f"the EPD encoder defers every image ({backend} backend); alpha dropped on load" + (
            ", each rank preprocesses its own images right away" if backend == "cpu" else ""
        )
        decisions.append(Decision(k, "deferred", None, None, why))
    return items, decisions


def local_rows_feature(image: RequestImage, config: ProcessorConfig, mode: Mode) -> Feature:
    """Return the eager rows the EPD encoder's owner-side materialization (the checkpoint processor) gives an image."""
    resize = resize_config(image.width, image.height, config)
    return eager_feature(image, resize, config, mode=mode, discard_alpha=True)


__all__ = [
    "Form",
    "BuildPath",
    "request_side_for",
    "Decision",
    "BuiltRequest",
    "item_json",
    "resolve_transport",
    "build_path",
    "build_request",
    "encoder_preprocesses",
    "local_rows_feature",
]
