"""A request clean alone may still fail under load: the smallest sample image that makes it fail beside it.

:func:`pair_hint` prefills the request together with each sample image as a second request (smallest
first) and returns the first pair that raises, with its fixing release and the command that replays
the pair — written with the paths the user gave, so it runs from the folder the kit ran in.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..answer import PairHint
from ..data import sample_images
from ..errors import SettingNotInReleaseError
from ..releases import Release
from ..request.images import RequestImage, probe_image
from ..schedule.workload import Request, Workload
from .fix import answer_on, with_fix
from .questions import RequestQuestion, WorkloadQuestion


def _name(source: Any, image: RequestImage) -> str:
    """Return how the command names an image: the path as the user gave it, else its label."""
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else image.label


def _sample_name(path: Path) -> str:
    """Return a sample image's name as the kit resolves it from any folder, or its path where a file shadows it."""
    return path.name if not Path(path.name).exists() else str(path.resolve())


def _command(names: list[str], partner: str, release: Release, tp_size: int) -> str:
    """Return the shell command that replays the request and its partner arriving together."""
    deployment = f"--sglang-version {release.version} --tp {tp_size}"
    if len(names) == 1:
        return f"kimi-viz whatif {shlex.quote(names[0])} {shlex.quote(partner)} --together {deployment}"
    document = json.dumps({"requests": [{"id": "r1", "images": names}, {"id": "r2", "images": [partner]}]})
    return f"printf '%s' {shlex.quote(document)} > pair.json && kimi-viz whatif --requests pair.json {deployment}"


def pair_hint(
    question: RequestQuestion,
    release: Release,
    tp_size: int,
    *,
    paths: Any = None,
    candidates: Sequence[Any] | None = None,
) -> PairHint | None:
    """Return the smallest partner image (by pixels) that makes a clean request fail when both arrive together.

    ``candidates`` default to the kit's sample images; the request comes first (``r1``), the partner
    second (``r2``, a single-image request), as two clients sending at once. ``paths`` are the request's
    images as the user named them (for the command). A release refusing the settings gives None.
    """
    if question.settings.epd or question.settings.embedding_cache_hits or question.settings.preprocess_cache_hits:
        return None  # a workload models normal serving with the caches left to the scheduler
    own = {image.digest for image in question.images}
    sources = list(candidates) if candidates is not None else sample_images()
    pool = sorted(
        ((probe_image(c), c) for c in sources), key=lambda pair: (pair[0].width * pair[0].height, pair[0].label)
    )
    request = Request("r1", question.images)
    for tried, (partner, source) in enumerate((p for p in pool if p[0].digest not in own), start=1):
        pair = WorkloadQuestion(Workload((request, Request("r2", (partner,)))), question.settings)
        try:
            answer = answer_on(pair, release, tp_size)
        except SettingNotInReleaseError:
            return None
        if answer.failed:
            given = list(paths) if isinstance(paths, (list, tuple)) else [paths] * len(question.images)
            names = [_name(g, image) for g, image in zip(given, question.images)]
            other = _sample_name(Path(source)) if isinstance(source, (str, Path)) else _name(None, partner)
            return PairHint(partner, with_fix(pair, answer), tried, _command(names, other, release, tp_size))
    return None


__all__ = ["pair_hint"]
