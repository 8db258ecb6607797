"""A request clean alone may still fail under load: the smallest sample image that makes it fail beside it.

:func:`pair_hint` prefills the request together with each sample image as a second request (smallest
first, each sample opened only when its turn comes) and returns the first pair that raises, with its
fixing release and the command that replays the pair — written with the paths the user gave, so it
runs from the folder the kit ran in.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..answer import PairHint
from ..data import SAMPLE_IMAGE_SIZES, sample_images
from ..errors import SettingNotInReleaseError
from ..releases import Release
from ..request.images import RequestImage, probe_image
from ..request.workload import Request, Workload
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
        first = f"./{names[0]}" if names[0].startswith("-") else names[0]  # a path, not an option, to argparse
        return f"kimi-viz whatif {shlex.quote(first)} {shlex.quote(partner)} --together {deployment}"
    document = json.dumps({"requests": [{"id": "r1", "images": names}, {"id": "r2", "images": [partner]}]})
    return f"printf '%s' {shlex.quote(document)} > pair.json && kimi-viz whatif --requests pair.json {deployment}"


def _by_pixels(images: list[tuple[RequestImage, Any]]) -> list[tuple[RequestImage, Any]]:
    """Return the (image, source) pairs smallest first: by pixels, then by label."""
    return sorted(images, key=lambda pair: (pair[0].width * pair[0].height, pair[0].label))


class _StaleSizes(Exception):
    """A sample image's header disagrees with SAMPLE_IMAGE_SIZES: the pool is ordered from every header instead."""


def _samples_by_pixels() -> Iterator[tuple[RequestImage, Any]]:
    """Yield the sample images as :func:`_by_pixels` orders them, each opened only when it is reached.

    The order comes from :data:`~kimi_viz.data.SAMPLE_IMAGE_SIZES`; a sample not listed there is opened to
    be placed. A header that disagrees with the table (a replaced file, another ``KIMI_VIZ_DATA``) raises
    :class:`_StaleSizes`, and the caller starts again from every header.
    """
    placed: list[tuple[tuple[int, str], RequestImage | None, Path]] = []
    for path in sample_images():
        size = SAMPLE_IMAGE_SIZES.get(path.name)
        if size is None:
            image = probe_image(path)
            placed.append(((image.width * image.height, image.label), image, path))
        else:
            placed.append(((size[0] * size[1], path.name), None, path))
    placed.sort(key=lambda entry: entry[0])
    for key, known, path in placed:
        image = known if known is not None else probe_image(path)
        if (image.width * image.height, image.label) != key:
            raise _StaleSizes(path.name)
        yield image, path


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
    if candidates is None:
        try:
            return _first_failing(question, release, tp_size, paths, _samples_by_pixels())
        except _StaleSizes:
            candidates = sample_images()
    return _first_failing(question, release, tp_size, paths, _by_pixels([(probe_image(c), c) for c in candidates]))


def _first_failing(
    question: RequestQuestion, release: Release, tp_size: int, paths: Any, pool: Iterable[tuple[RequestImage, Any]]
) -> PairHint | None:
    """Return the hint for the first partner of ``pool`` (not one of the request's own images) that fails."""
    own = {image.digest for image in question.images}
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
