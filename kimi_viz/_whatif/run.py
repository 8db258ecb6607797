"""One what-if: build the items a release would build for a request, replay ``get_image_feature`` on every rank.

:func:`whatif` answers "would this request fail on SGLang V at attention-TP N with these settings?":
the release's request side builds the items (:mod:`.request_side`), the scheduler or the EPD encoder
turns them into each rank's call (:mod:`.call`), the kit's replay runs that release's
``get_image_feature`` on every rank, and :class:`WhatIf` holds the verdict plus one paragraph saying
why it fails or why nothing fails (eager features skip the deferred split; at TP 1 local and global
positions agree; ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import SettingNotInReleaseError
from ..releases import PATH_INTRODUCED, REQUEST_SIDES, FixRelease, Release, release_for
from ..request.images import RequestImage, probe_images
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..request.sides import BuiltRequest, build_request
from ..schedule.call import ModelCall, model_call, replay_call
from ..split.trace import Trace
from ..split.verdict import Verdict, build_verdict
from .status import WhatIfStatus
from .why import why_text

if TYPE_CHECKING:  # pragma: no cover
    from .load import LoadHint


NO_CALL = WhatIfStatus.NO_CALL


@dataclass
class WhatIf:
    """The answer for one request on one release at one attention-TP size."""

    release: Release
    tp_size: int
    built: BuiltRequest
    call: ModelCall
    trace: Trace | None  # None when nothing reaches get_image_feature
    verdict: Verdict | None
    notes: list[str] = field(default_factory=list)
    under_load: LoadHint | None = None  # clean alone, but fails when prefilled with this partner

    @property
    def status(self) -> WhatIfStatus:
        """Return the verdict's status (clean, error-reproduced, silent-mismatch) or ``no-call``."""
        return WhatIfStatus.NO_CALL if self.verdict is None else WhatIfStatus(self.verdict.status.value)

    @property
    def why(self) -> str:
        """Return one paragraph: why the request fails on this deployment, or why nothing fails."""
        return why_text(self)

    @property
    def failed(self) -> bool:
        """Return True when some rank raises."""
        return self.verdict is not None and self.verdict.outcome == "error"

    @property
    def exit_code(self) -> int:
        """Return the verdict's exit code (0 when nothing is called)."""
        return 0 if self.verdict is None else self.verdict.exit_code

    def error_key(self) -> tuple[str, str] | None:
        """Return ``(type, message)`` of the first failing rank's error, or None."""
        if self.verdict is None or self.verdict.error is None:
            return None
        return self.verdict.error.type, self.verdict.error.message

    def errors(self) -> set[tuple[str, str]]:
        """Return every ``(type, message)`` some rank raises."""
        if self.verdict is None:
            return set()
        return {(r.error.type, r.error.message) for r in self.verdict.ranks if r.error is not None}

    def culprit(self) -> int | None:
        """Return the request position of the first diverging image (the one to look at), or None."""
        if self.verdict is None or self.verdict.divergence.first_image is None:
            return None
        g = self.verdict.divergence.first_image
        return self.call.positions[g] if 0 <= g < len(self.call.positions) else None

    def text(self) -> str:
        """Return the answer as terminal text: the request side's items, the call, then the verdict."""
        from .text import whatif_text

        return whatif_text(self)

    def to_json(self) -> dict[str, Any]:
        """Return the answer as JSON: release, TP size, settings, images, items built, call, status, why, verdict."""
        return {
            "sglang_version": self.release.version,
            "notes": list(self.notes),
            "request_side": self.built.request_side.version,
            "tp_size": self.tp_size,
            "settings": self.built.settings.to_json(),
            "images": [im.to_json() for im in self.built.images],
            "built": self.built.to_json(),
            "call": self.call.to_json(),
            "status": self.status.value,
            "why": self.why,
            "culprit": self.culprit(),
            "verdict": None if self.verdict is None else self.verdict.to_json(),
            "under_load": None if self.under_load is None else self.under_load.to_json(),
        }


def evaluate(
    images: Sequence[RequestImage],
    settings: ServerSettings,
    sglang_version: str,
    tp_size: int,
    *,
    mode: Mode = "shapes",
    device: Any = "auto",
    built: BuiltRequest | None = None,
) -> WhatIf:
    """Return the :class:`WhatIf` of probed ``images`` (no fix search; ``built`` reuses an item build)."""
    release, sentence = release_for(sglang_version)
    images = list(images)
    built = built if built is not None else build_request(images, settings, release.request_side, mode=mode)
    call = model_call(built, tp_size, release.version)
    trace = replay_call(call, release.version, mode=mode, device=device)
    verdict = None if trace is None else build_verdict(trace)
    # A future release or a build of a known one (0.5.24, 0.5.18.post1) runs a known release's code: say which.
    notes = [sentence] if sglang_version.strip() != release.version else []
    return WhatIf(release, call.tp_size, built, call, trace, verdict, notes)


def _fix(result: WhatIf, mode: Mode) -> FixRelease | None:
    """Return the first later release whose whole pipeline (request side and model) runs this request clean."""
    sides = list(REQUEST_SIDES.values())
    current = sides.index(result.built.request_side)
    for side in sides[current + 1 :]:
        version = side.releases[0]
        try:
            later = evaluate(result.built.images, result.built.settings, version, result.tp_size, mode="shapes")
        except SettingNotInReleaseError:  # a setting this release refuses: look further
            continue
        if later.failed or (later.verdict is not None and later.verdict.divergence.silent):
            continue
        path = later.release.code_path
        if path != result.release.code_path:
            change = PATH_INTRODUCED[path][1]
        else:
            change = f"its request side builds other items ({side.changes})"
        return FixRelease(version, change, path)
    return None


def _load_applies(settings: ServerSettings) -> bool:
    """Return True when a workload can model these settings (normal serving, caches left to the workload)."""
    return not (settings.epd or settings.embedding_cache_hits or settings.preprocess_cache_hits)


def whatif(
    images: Sequence[Any],
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    mode: Mode = "shapes",
    device: Any = "auto",
    find_fix: bool = True,
    under_load: bool = True,
) -> WhatIf:
    """Return the :class:`WhatIf` of a request carrying ``images`` (paths, bytes or PIL images) on one deployment.

    ``settings`` are the server settings (default: SGLang's defaults, normal serving on a one-node
    CUDA server); ``mode="shapes"`` reads only the image headers, ``"pixels"`` materializes the pixels
    too. With ``find_fix`` a failing request also names the first later release that runs it clean.
    With ``under_load`` a request that is clean alone is also prefilled together with each sample
    image as a second request (smallest first): ``WhatIf.under_load`` names the first that fails.
    """
    probed = probe_images(images)
    settings = settings if settings is not None else ServerSettings()
    result = evaluate(probed, settings, sglang_version, tp_size, mode=mode, device=device)
    if find_fix and result.failed and result.verdict is not None and result.trace is not None:
        fix = _fix(result, mode)
        result = replace(
            result, trace=replace(result.trace, fixed_in=fix), verdict=replace(result.verdict, fixed_in=fix)
        )
    if under_load and result.status is WhatIfStatus.CLEAN and _load_applies(settings):
        from .load import pair_hint

        hint = pair_hint(probed, sglang_version=result.release.version, tp_size=result.tp_size, settings=settings)
        result = replace(result, under_load=hint)
    return result


__all__ = ["WhatIf", "WhatIfStatus", "NO_CALL", "whatif", "evaluate"]
