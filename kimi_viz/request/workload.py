"""A workload: the requests a deployment receives, each with its images and its text, and when they arrive.

``kimi-viz whatif --requests FILE`` reads one from JSON (``docs/whatif.md``)::

    {"requests": [
        {"id": "r1", "images": ["a.png", "b.png"], "text": {"before": 40, "between": 8, "after": 120}},
        {"id": "r2", "images": ["c.png"], "arrival": 1}
    ]}

``images`` are paths (relative to the file's folder) or sample image names; ``text`` counts the text
tokens before, between and after the images (defaults 32, 8, 32; ``between`` may also list one count
per gap); ``arrival`` is the scheduler step at which the request joins the waiting queue (default 0),
and ``output`` the tokens it generates (default 1: it finishes with its prefill). Conversations and
shared prompts: ``"continues": "t1"`` makes a request a chat's next turn (its prompt is t1's prompt,
t1's output, then its own text and images; every earlier image is re-sent; it arrives once t1 has
finished), ``"system": 200`` starts a request with a 200-token system prompt shared by every request
giving the same count, and ``"waits_for": "t1"`` holds a request back until t1 has finished. Which
requests share a pass, and from which radix prefix each starts, is the scheduler's model
(:mod:`kimi_viz.scheduler`). ``--together IMAGE...`` is the workload of one single-image
request per image, all arriving together.

Two optional keys describe what the server already holds. ``"stale": {"1": "other.png"}`` on a
request says that its image 1 comes back from the preprocessing cache as *other.png*'s eager rows
under image 1's own grid (a stale artifact: class S10). ``"cache": [{"image": "a.png", "tokens": 120}]``
at the top seeds the embedding cache with an entry under *a.png*'s hash holding ``tokens`` rows (an
entry left by a request that sized the image differently).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._records import frozen
from ..errors import WhatIfError
from ..preprocess.config import read_json_file
from ..scheduler.memory import CONTEXT_LEN
from .images import RequestImage, image_sources, probe_image, resolve_image

MAX_REQUESTS = 1000
MAX_IMAGES = 1000  # images in a whole workload (one per request at the request limit)
MAX_TEXT_TOKENS = 1 << 20  # text tokens of one request, before + between + after
REQUEST_KEYS = frozenset({"id", "images", "text", "arrival", "stale", "continues", "waits_for", "output", "system"})
DEFAULT_TEXT = {"before": 32, "between": 8, "after": 32}


@frozen
class Request:
    """One request: its id, its images in order, its text token counts and its arrival."""

    rid: str
    images: tuple[RequestImage, ...]
    before: int = DEFAULT_TEXT["before"]
    between: int = DEFAULT_TEXT["between"]
    after: int = DEFAULT_TEXT["after"]
    arrival: int = 0
    stale: tuple[tuple[int, RequestImage], ...] = ()  # (image, the image whose eager rows the cache hands back)
    gaps: tuple[int, ...] = ()  # text tokens between each pair of images when they differ (a chat request's)
    continues: str | None = None  # the earlier request (a chat's previous turn) whose prompt and output it repeats
    output: int = 1  # the tokens it generates (SGLang's max_new_tokens; the last arrives as its final decode)
    system: int = 0  # tokens of a system prompt every request with the same count shares, before its text
    waits_for: str | None = None  # arrive only once this earlier request has finished (a continuing turn always does)

    def __post_init__(self) -> None:
        if self.continues is not None and self.waits_for is not None:
            raise WhatIfError(
                f"request {self.rid}: a continuing turn arrives once the turn it continues finished; drop waits_for"
            )
        if self.continues is not None and self.system:
            raise WhatIfError(
                f"request {self.rid}: a continuing turn repeats its conversation's system prompt; drop system"
            )
        if self.output < 1:
            raise WhatIfError(f"request {self.rid}: output {self.output}: expected at least 1 generated token")
        if self.gaps and len(self.gaps) != len(self.images) - 1:
            raise WhatIfError(
                f"request {self.rid}: {len(self.gaps)} text gaps for {len(self.images)} images; expected one per gap"
            )

    @property
    def spacing(self) -> int | tuple[int, ...]:
        """Return the text tokens between images: one count for every gap, or one per gap."""
        return self.gaps if self.gaps else self.between

    def gap_list(self) -> list[int]:
        """Return the text tokens of every gap between two images, one count per gap."""
        return list(self.gaps) if self.gaps else [self.between] * max(0, len(self.images) - 1)

    def to_json(self) -> dict[str, Any]:
        """Return ``{"id", "images", "text", "arrival"}`` (images as their labels), and ``"stale"`` when set."""
        data: dict[str, Any] = {
            "id": self.rid,
            "images": [image.label for image in self.images],
            "text": {"before": self.before, "between": list(self.gaps) or self.between, "after": self.after},
            "arrival": self.arrival,
        }
        if self.stale:
            data["stale"] = {str(k): image.label for k, image in self.stale}
        data.update(
            (key, value)
            for key, value, default in (
                ("continues", self.continues, None),
                ("waits_for", self.waits_for, None),
                ("output", self.output, 1),
                ("system", self.system, 0),
            )
            if value != default
        )
        return data


def _joined(earlier: Request, output: int, later: Request) -> Request:
    """Return ``later`` written out whole: ``earlier``'s prompt (already whole), its ``output`` tokens, then
    ``later``'s own."""
    shift = len(earlier.images)
    stale = (*earlier.stale, *((k + shift, image) for k, image in later.stale))
    joint = earlier.after + output + later.before
    if not later.images:
        after, gaps = joint + later.after, earlier.gap_list()
    else:
        after, gaps = later.after, [*earlier.gap_list(), joint, *later.gap_list()]
    images = (*earlier.images, *later.images)
    return Request(
        later.rid,
        images,
        before=earlier.before,
        between=gaps[0] if gaps and len(set(gaps)) == 1 else DEFAULT_TEXT["between"],
        after=after,
        arrival=later.arrival,
        stale=stale,
        gaps=tuple(gaps) if len(set(gaps)) > 1 else (),
        output=later.output,
    )


@frozen
class CacheSeed:
    """An embedding-cache entry the workload starts with: ``tokens`` rows under ``image``'s hash."""

    image: RequestImage
    tokens: int


@frozen
class Workload:
    """The requests, in the order they reach the scheduler, and the model's context length their outputs are held to
    (Kimi-K3's unless a server's log says otherwise: its ``context_len=``)."""

    requests: tuple[Request, ...]
    cache: tuple[CacheSeed, ...] = ()
    context_len: int = CONTEXT_LEN

    def __post_init__(self) -> None:
        if not self.requests:
            raise WhatIfError("requests: the workload holds no request; give at least one request with an image")
        if len(self.requests) > MAX_REQUESTS:
            raise WhatIfError(f"requests: {len(self.requests)} requests, over the limit of {MAX_REQUESTS}")
        for request in self.requests:
            if request.output > self.context_len:
                raise WhatIfError(
                    f"request {request.rid}: output {request.output}: expected 1 to {self.context_len} generated "
                    "tokens (the model's context length)"
                )
        images = sum(len(r.images) for r in self.requests)
        if not images:
            raise WhatIfError("requests: no request carries an image; give at least one image")
        if images > MAX_IMAGES:
            raise WhatIfError(f"requests: {images} images in all, over the limit of {MAX_IMAGES}")
        ids = [r.rid for r in self.requests]
        repeated = sorted({rid for rid in ids if ids.count(rid) > 1})
        if repeated:
            raise WhatIfError(f"requests: the id {repeated[0]!r} names two requests; give every request its own id")
        for k, request in enumerate(self.requests):
            for key, rid in (("continues", request.continues), ("waits_for", request.waits_for)):
                if rid is not None and rid not in ids[:k]:
                    raise WhatIfError(
                        f"request {request.rid}: {key} {rid!r}, which is not an earlier request; "
                        "list a conversation's turns in order"
                    )

    def turns(self, k: int) -> list[int]:
        """Return the indices of request ``k``'s conversation up to it, first turn first (``[k]`` alone)."""
        if self.requests[k].continues is None:
            return [k]
        index = {r.rid: j for j, r in enumerate(self.requests)}
        chain = [k]
        while self.requests[chain[0]].continues is not None:
            chain.insert(0, index[self.requests[chain[0]].continues])  # type: ignore[index]
        return chain

    def whole(self, k: int) -> Request:
        """Return request ``k`` written out whole, as the server receives it: its conversation's system prompt,
        every earlier turn's text, images and output, then its own (every image of the conversation re-sent)."""
        chain = [self.requests[j] for j in self.turns(k)]
        first = chain[0]
        request = Request(
            first.rid,
            first.images,
            before=first.system + first.before,
            between=first.between,
            after=first.after,
            arrival=first.arrival,
            stale=first.stale,
            gaps=first.gaps,
            output=first.output,
        )
        for earlier, later in zip(chain, chain[1:]):
            request = _joined(request, earlier.output, later)
        return request

    @property
    def images(self) -> int:
        """Return the number of images in all requests."""
        return sum(len(r.images) for r in self.requests)

    def to_json(self) -> dict[str, Any]:
        """Return the workload in its JSON form."""
        data: dict[str, Any] = {"requests": [r.to_json() for r in self.requests]}
        if self.cache:
            data["cache"] = [{"image": seed.image.label, "tokens": seed.tokens} for seed in self.cache]
        return data


def together(images: list[Any]) -> Workload:
    """Return one single-image request per image (ids ``r1``, ``r2``, …), all arriving together."""
    probed = [image if isinstance(image, RequestImage) else probe_image(image) for image in image_sources(images)]
    return Workload(tuple(Request(f"r{k + 1}", (image,)) for k, image in enumerate(probed)))


def single(images: list[Any], rid: str = "r1") -> Workload:
    """Return the workload of one request carrying ``images``."""
    probed = tuple(image if isinstance(image, RequestImage) else probe_image(image) for image in image_sources(images))
    return Workload((Request(rid, probed),))


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TEXT_TOKENS:
        raise WhatIfError(f"{where}: expected a token count from 0 to {MAX_TEXT_TOKENS}, got {value!r}")
    return value


def _parse_request(entry: Any, where: str, k: int, probed: Callable[[str], RequestImage], context_len: int) -> Request:
    """Return the :class:`Request` of one workload entry, read strictly (``where`` names it in errors)."""
    if not isinstance(entry, dict):
        raise WhatIfError(f"{where}: expected an object with images, got {_kind(entry)}")
    unknown = set(entry) - REQUEST_KEYS
    if unknown:
        raise WhatIfError(
            f"{where}: unknown key {sorted(unknown)[0]!r}; expected id, images, text, arrival, stale, continues, "
            "waits_for, output, system"
        )
    rid = entry.get("id", f"r{k + 1}")
    if not isinstance(rid, str) or not rid or len(rid) > 64:
        raise WhatIfError(f"{where}.id: expected a string of 1 to 64 characters, got {rid!r}")
    continues = entry.get("continues")
    if continues is not None and not isinstance(continues, str):
        raise WhatIfError(f"{where}.continues: expected the id of an earlier request, got {continues!r}")
    names = entry.get("images", [] if continues is not None else None)
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise WhatIfError(f"{where}.images: expected a list of image paths or sample names")
    if not names and continues is None:
        raise WhatIfError(f"{where}.images: no images; give at least one, or continue an earlier request")
    text = entry.get("text", {})
    if not isinstance(text, dict) or set(text) - set(DEFAULT_TEXT):
        raise WhatIfError(f"{where}.text: expected {{before, between, after}} token counts, got {text!r}")
    gaps: tuple[int, ...] = ()
    if isinstance(text.get("between"), list):
        gaps = tuple(_count(v, f"{where}.text.between[{g}]") for g, v in enumerate(text["between"]))
        text = {key: value for key, value in text.items() if key != "between"}
    counts = {key: _count(text.get(key, default), f"{where}.text.{key}") for key, default in DEFAULT_TEXT.items()}
    arrival = _count(entry.get("arrival", 0), f"{where}.arrival")
    images = tuple(probed(name) for name in names)
    stale = entry.get("stale", {})
    if not isinstance(stale, dict):
        raise WhatIfError(f'{where}.stale: expected {{"image index": "image path"}}, got {stale!r}')
    pairs = []
    for key, name in stale.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) < len(images)) or not isinstance(name, str):
            raise WhatIfError(f"{where}.stale: {key!r}: expected an image index of this request and an image path")
        pairs.append((int(key), probed(name)))
    if gaps and len(gaps) != len(images) - 1:
        raise WhatIfError(f"{where}.text.between: {len(gaps)} counts for {len(images)} images; expected one per gap")
    stale_pairs = tuple(sorted(pairs, key=lambda p: p[0]))
    output = _count(entry.get("output", 1), f"{where}.output")
    system = _count(entry.get("system", 0), f"{where}.system")
    if not 1 <= output <= context_len:
        raise WhatIfError(
            f"{where}.output: expected 1 to {context_len} generated tokens (the model's context length), got {output}"
        )
    waits_for = entry.get("waits_for")
    if waits_for is not None and not isinstance(waits_for, str):
        raise WhatIfError(f"{where}.waits_for: expected the id of an earlier request, got {waits_for!r}")
    return Request(
        rid,
        images,
        before=counts["before"],
        between=counts["between"],
        after=counts["after"],
        arrival=arrival,
        stale=stale_pairs,
        gaps=gaps,
        continues=continues,
        output=output,
        system=system,
        waits_for=waits_for,
    )


def parse_workload(
    data: Any, *, folder: Path | None = None, source: str = "the workload", context_len: int = CONTEXT_LEN
) -> Workload:
    """Return the :class:`Workload` a parsed JSON document describes; image paths are relative to ``folder``, each
    request's ``output`` at most ``context_len`` (a server log's ``context_len=``; Kimi-K3's by default)."""
    if isinstance(data, dict) and set(data) - {"requests", "cache"}:
        unknown = ", ".join(repr(key) for key in sorted(set(data) - {"requests", "cache"}, key=str)[:3])
        raise WhatIfError(
            f'{source}: unknown key(s) {unknown}; a workload has "requests" (and optionally "cache") at its top'
        )
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise WhatIfError(f'{source}: expected {{"requests": [{{"images": [...]}}, ...]}}, got {_kind(data)}')
    raw = data["requests"]
    if len(raw) > MAX_REQUESTS:
        raise WhatIfError(f"{source}: {len(raw)} requests, over the limit of {MAX_REQUESTS}")
    seen: dict[str, RequestImage] = {}

    def probed(name: str) -> RequestImage:
        """The image ``name`` names, probed once however many requests send it (one copy of its bytes)."""
        if name not in seen:
            seen[name] = probe_image(resolve_image(name, folder), label=name)
        return seen[name]

    requests = [
        _parse_request(entry, f"{source}: requests[{k}]", k, probed, context_len) for k, entry in enumerate(raw)
    ]
    seeds = []
    cache = data.get("cache", [])
    if not isinstance(cache, list) or len(cache) > MAX_IMAGES:
        raise WhatIfError(f"{source}: cache: expected a list of {{image, tokens}} entries (at most {MAX_IMAGES})")
    for k, seed in enumerate(cache):
        where = f"{source}: cache[{k}]"
        if not isinstance(seed, dict) or set(seed) != {"image", "tokens"} or not isinstance(seed["image"], str):
            raise WhatIfError(f'{where}: expected {{"image": path, "tokens": count}}, got {seed!r}')
        seeds.append(
            CacheSeed(
                probed(seed["image"]),
                _count(seed["tokens"], f"{where}.tokens"),
            )
        )
    return Workload(tuple(requests), tuple(seeds), context_len)


def read_workload(path: str | os.PathLike, *, context_len: int = CONTEXT_LEN) -> Workload:
    """Return the :class:`Workload` of a JSON file (``--requests FILE``), read strictly and within limits (outputs
    up to ``context_len``: a server log's ``context_len=``; Kimi-K3's by default)."""
    path = Path(path)
    data = read_json_file(path, error=WhatIfError, limit=1 << 20)
    return parse_workload(data, folder=path.parent, source=str(path), context_len=context_len)


def _kind(value: Any) -> str:
    return (
        type(value).__name__
        if not isinstance(value, (dict, list))
        else ("an object" if isinstance(value, dict) else "a list")
    )


__all__ = [
    "MAX_REQUESTS",
    "MAX_IMAGES",
    "CONTEXT_LEN",
    "DEFAULT_TEXT",
    "Request",
    "CacheSeed",
    "Workload",
    "together",
    "single",
    "parse_workload",
    "read_workload",
]
