"""What-ifs under load: several requests prefilled together, chunked prefill, the embedding cache.

:func:`whatif_load` answers for a whole workload (``kimi-viz whatif --requests FILE`` or ``--together``):
every prefill pass replayed on one release and attention-TP size (:func:`~kimi_viz.schedule.workload_replay.replay_workload`),
the first error with the requests and images of the call that raised it, and why. :func:`pair_hint`
is what a single-request what-if adds when the request is clean alone: the smallest sample image that
makes it fail once the two are prefilled together (on 0.5.18 at attention-TP >= 2, any image whose
grid differs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ..errors import SettingNotInReleaseError
from ..releases import PATH_INTRODUCED, RELEASES, FixRelease, Release, release_for
from ..request.images import RequestImage, probe_image
from ..request.producer import Mode
from ..request.settings import ServerSettings
from ..schedule.workload_replay import LoadResult, LoadSettings, replay_workload
from ..schedule.trace import CallRecord, ForwardItem, ForwardRequest, ForwardTrace
from ..schedule.workload import Request, Workload
from ..split.verdict import EXIT_CODES, Verdict, build_verdict
from .status import WhatIfStatus


@dataclass
class LoadAnswer:
    """The answer for a workload on one release at one attention-TP size, with why and what fixes it."""

    result: LoadResult
    fixed_in: FixRelease | None = None

    @property
    def release(self) -> Release:
        """Return the release replayed."""
        return self.result.release

    @property
    def tp_size(self) -> int:
        """Return the attention-TP size."""
        return self.result.tp_size

    @property
    def status(self) -> WhatIfStatus:
        """Return ``clean``, ``error-reproduced`` or ``silent-mismatch``."""
        return WhatIfStatus(self.result.status)

    @property
    def failed(self) -> bool:
        """Return True when SGLang raises somewhere on the path."""
        return self.result.failed

    @property
    def exit_code(self) -> int:
        """Return 0 clean, 1 error, 3 silent mismatch (the CLI's codes)."""
        return EXIT_CODES[self.result.status]

    def error_key(self) -> tuple[str, str] | None:
        """Return ``(type, message)`` of what SGLang raises, or None."""
        error = self.result.error
        return None if error is None else (error.type, error.message)

    def errors(self) -> set[tuple[str, str]]:
        """Return every ``(type, message)`` raised (on any rank of the failing call, or elsewhere on the path)."""
        call = self.result.failing_call()
        if call is not None and call.trace is not None:
            return {(r.error.type, r.error.message) for r in call.trace.ranks if r.error is not None}
        key = self.error_key()
        return set() if key is None else {key}

    @property
    def call(self) -> CallRecord | None:
        """Return the ``get_image_feature`` call that raised, or None."""
        return self.result.failing_call()

    @property
    def verdict(self) -> Verdict | None:
        """Return the verdict of the call that raised (or of the encode server's), or None."""
        run = self.result.encoder_error
        trace = run.trace if run is not None else (None if self.call is None else self.call.trace)
        if trace is None:
            return None
        return build_verdict(trace if self.fixed_in is None else replace(trace, fixed_in=self.fixed_in))

    @property
    def failing_ranks(self) -> list[int]:
        """Return the ranks that raise in the failing call."""
        verdict = self.verdict
        return [] if verdict is None else verdict.failing_ranks

    @property
    def why(self) -> str:
        """Return one paragraph: where on the path it fails and why, or why every row lands where it should."""
        return load_why(self.result)

    def workload_table(self) -> Any:
        """Return the requests as a table: images, text lengths, arrival, prompt length, pad runs."""
        from .text import workload_table

        return workload_table(self)

    def pass_table(self) -> Any:
        """Return the prefill passes as a table: windows, path, the call's items, cache, warnings, outcome."""
        from .text import pass_table

        return pass_table(self)

    def text(self) -> str:
        """Return what ``kimi-viz whatif --requests`` prints."""
        from .text import load_text

        return load_text(self)

    def to_json(self) -> dict[str, Any]:
        """Return the answer as JSON: every pass and its replay, the status, why and the fixing release."""
        data = self.result.to_json()
        data["status"] = self.status.value
        data["why"] = self.why
        data["failing_ranks"] = self.failing_ranks
        data["fixed_in"] = None if self.fixed_in is None else self.fixed_in.to_json()
        verdict = self.verdict
        data["verdict"] = None if verdict is None else verdict.to_json()
        return data


def _names(call: CallRecord) -> str:
    return ", ".join(
        f"call item {k} = request {i.source.rid}'s image {i.source.image} ({i.source.label})"
        for k, i in enumerate(call.items)
    )


def load_why(result: LoadResult) -> str:
    """Return why a workload fails on this deployment (naming requests and images), or why nothing fails."""
    run = result.encoder_error
    if run is not None:
        rid = result.workload.requests[run.request].rid
        verdict = build_verdict(run.trace) if run.trace is not None else None
        tail = "" if verdict is None else " " + verdict.divergence.explanation
        return f"The encode server's get_image_feature call for request {rid} raises.{tail}"
    failing = result.failing_pass
    if failing is not None:
        trace = result.passes[failing]
        return _why_pass(result, trace, failing)
    for k, trace in enumerate(result.passes):
        wrong = trace.misplaced()
        if wrong:
            owner, item, placement = wrong[0]
            last = placement.run.count - 1
            rows = f"rows {placement.run.start}..{placement.run.start + last}"
            cut = _cut_rows(trace)
            return (
                f"Nothing raises, but in pass {k + 1} the pad tokens {placement.start}..{placement.start + last} "
                f"of request {owner.rid}'s image {item.source.image} ({item.source.label}) receive {rows} of "
                f"{placement.run.source.label}: the image is spliced with another image's features (silent).{cut}"
            )
        for call in trace.calls:
            if call.trace is not None and call.trace.divergence.silent:
                return f"In pass {k + 1}, get_image_feature raises nothing, but {call.trace.divergence.explanation}"
    calls = sum(len(t.calls) for t in result.passes)
    shared = [t for t in result.passes for c in t.calls if len({i.source.request for i in c.items}) > 1]
    parts = [
        f"{_count(len(result.passes), 'prefill pass', 'prefill passes')}, "
        f"{_count(calls, 'get_image_feature call')}: every call passes, and every pad token receives its own "
        "image's feature row."
    ]
    if shared:
        parts.append(
            f"{_count(len(shared), 'call')} held images of several requests and passed the deferred split on "
            "every rank."
        )
    parts += _straddles(result)
    warned = [w for t in result.passes for w in t.warnings]
    if warned:
        parts.append(f"SGLang logs {_count(len(warned), 'warning')} on the way (first: {warned[0]})")
    return " ".join(parts)


def _uneven(trace: ForwardTrace) -> list[tuple[ForwardRequest, ForwardItem, int]]:
    """Return the precomputed items whose rows are not their pad tokens: (request, item, rows)."""
    return [
        (request, item, len(item.precomputed))
        for request in trace.batch
        for item in request.items
        if item.precomputed is not None and len(item.precomputed) != item.tokens
    ]


def _cut_rows(trace: ForwardTrace) -> str:
    """Return the sentence naming the precomputed rows get_embedding_chunk cut without a word, or ''."""
    if trace.path != "precomputed":
        return ""
    parts = [
        f"request {r.rid}'s image {i.source.image} ({i.source.label}) brought {_count(n, 'row')} "
        f"for {i.tokens} pad tokens: "
        f"get_embedding_chunk kept the first {i.tokens} and cut rows {i.tokens}..{n - 1}"
        for r, i, n in _uneven(trace)
        if n > i.tokens
    ]
    return "" if not parts else " On the precomputed path " + "; ".join(parts) + "."


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _straddles(result: LoadResult) -> list[str]:
    """Return a sentence per image whose pad run spans several passes: who encodes it and where later rows come from."""
    out = []
    for r, request in enumerate(result.workload.requests):
        runs = result.prompts[r].pad_runs
        for i, (start, end) in enumerate(runs):
            passes = [
                k
                for k, trace in enumerate(result.passes)
                for w in trace.batch
                if w.index == r and w.extend > 0 and end >= w.prefix and start < w.prefix + w.extend
            ]
            if len(passes) < 2:
                continue
            encoded = [
                k
                for k in passes
                for call in result.passes[k].calls
                if any(c.source.request == r and c.source.image == i for c in call.items)
            ]
            label = request.images[i].label
            later = (
                "its rows for the later passes come from the embedding cache"
                if len(encoded) == 1
                else f"it is encoded whole again in pass{'es' if len(encoded) > 2 else ''} "
                f"{', '.join(str(k + 1) for k in encoded[1:])} "
                "(the embedding cache is off or evicted it)"
            )
            out.append(
                f"Request {request.rid}'s image {i} ({label}) straddles passes "
                f"{', '.join(str(k + 1) for k in passes)}: SGLang encodes an overlapping image whole "
                f"(pass {encoded[0] + 1 if encoded else passes[0] + 1}) and slices each pass's part; {later}."
            )
    return out


def _why_pass(result: LoadResult, trace: ForwardTrace, k: int) -> str:
    stage, error = trace.stage, trace.error
    assert error is not None
    requests = ", ".join(f"{r.rid} [{r.prefix}, {r.prefix + r.extend})" for r in trace.batch)
    lead = f"Pass {k + 1} prefills {requests}{' together' if len(trace.batch) > 1 else ''}. "
    if stage == "call":
        call = next(c for c in trace.calls if c.trace is not None and c.trace.error is not None)
        assert call.trace is not None
        verdict = build_verdict(call.trace)
        many = len({i.source.request for i in call.items})
        how = (
            f"get_image_feature receives {len(call.items)} images from {many} requests in one call ({_names(call)}). "
            if many > 1
            else f"get_image_feature receives {len(call.items)} image(s) ({_names(call)}). "
        )
        return lead + how + verdict.divergence.explanation
    if stage == "split-back":
        call = trace.calls[-1]
        parts = ", ".join(
            f"{i.source.rid} image {i.source.image} ({i.source.label}) yields {n} rows for {i.tokens} pads"
            for i, n in zip(call.items, call.produced)
        )
        return (
            lead + f"The call's rows are split back by each item's pad tokens and do not add up: {parts}. An item's "
            "feature does not follow its grid (a stale eager feature: class S10); torch.split raises, and the "
            "scheduler dies with every request it holds."
        )
    if stage == "adjust":
        return (
            lead
            + "The window's pad tokens outnumber the embedding's rows: "
            + (
                "the precomputed rows the encode server sent are fewer than the pads ("
                + "; ".join(
                    f"request {r.rid}'s image {i.source.image} ({i.source.label}) brought {_count(n, 'row')} "
                    f"for {i.tokens} pad tokens"
                    for r, i, n in _uneven(trace)
                )
                + "; a stale eager feature on the encoder: class S10 on the EPD path)"
                if trace.path == "precomputed"
                else "a cached embedding of another length was used as it is (this release keys the cache by "
                "item.hash alone and never checks the length; 0.5.19 discards it with a warning)"
            )
            + f". {error.type}: {error.message}"
        )
    return lead + f"{error.type}: {error.message}"


def whatif_load(
    workload: Workload,
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
    mode: Mode = "shapes",
    device: Any = "auto",
    find_fix: bool = True,
) -> LoadAnswer:
    """Return the :class:`LoadAnswer` of ``workload`` on one deployment; a failure names its fixing release."""
    result = replay_workload(
        workload, sglang_version=sglang_version, tp_size=tp_size, settings=settings, load=load, mode=mode, device=device
    )
    answer = LoadAnswer(result)
    return with_fix(answer, settings, load) if find_fix else answer


def with_fix(answer: LoadAnswer, settings: ServerSettings | None, load: LoadSettings | None) -> LoadAnswer:
    """Return ``answer`` with the first later release that replays its workload clean (none when it is clean)."""
    result = answer.result
    return LoadAnswer(result, _load_fix(result, settings, load) if result.status != "clean" else None)


def _load_fix(result: LoadResult, settings: ServerSettings | None, load: LoadSettings | None) -> FixRelease | None:
    """Return the first later release on which the workload replays clean, and what changed there."""
    current = list(RELEASES).index(result.release.version)
    for version in list(RELEASES)[current + 1 :]:
        release = RELEASES[version]
        try:
            later = replay_workload(
                result.workload, sglang_version=version, tp_size=result.tp_size, settings=settings, load=load
            )
        except SettingNotInReleaseError:
            continue
        if later.status != "clean":
            continue
        if release.code_path != result.release.code_path:
            change = PATH_INTRODUCED[release.code_path][1]
        elif release.forward is not result.release.forward:
            change = release.forward.changes
        else:
            change = release.request_side.changes
        return FixRelease(version, change, release.code_path)
    return None


@dataclass(frozen=True)
class LoadHint:
    """A request clean alone that fails once prefilled with another: the smallest such partner and the answer."""

    request: tuple[RequestImage, ...]
    partner: RequestImage
    answer: LoadAnswer
    tried: int  # candidate partners tried

    def command(self) -> str:
        """Return the command that replays the failing pair (``--together``, or ``--requests`` with its JSON)."""
        deployment = f"--sglang-version {self.answer.release.version} --tp {self.answer.tp_size}"
        if len(self.request) == 1:
            names = " ".join(_shell(i.label) for i in (*self.request, self.partner))
            return f"kimi-viz whatif {names} --together {deployment}"
        document = json.dumps(self.answer.result.workload.to_json(), ensure_ascii=False)
        return f"kimi-viz whatif --requests pair.json {deployment}   (pair.json: {document})"

    def text(self) -> str:
        """Return the warning the single-request answer ends with: the smallest failing pair, the error, the fix."""
        error = self.answer.error_key()
        ranks = self.answer.failing_ranks
        where = f" on rank {ranks[0]}" if len(ranks) == 1 else (f" on ranks {ranks}" if ranks else "")
        raised = f"{error[0]}: {error[1]}" if error else "an error"
        fixed = self.answer.fixed_in
        fix = "" if fixed is None else f" Fixed in {fixed.release}: {fixed.change}."
        return (
            "under load: clean alone, but it fails once it shares a prefill batch with another request. Smallest "
            f"failing pair: this request and {self.partner.label} ({self.partner.width}×{self.partner.height}) "
            f"arriving together: their images reach get_image_feature in one call and SGLang raises {raised}"
            f"{where} of {self.answer.tp_size}, killing the scheduler with every request it holds.{fix} "
            f"Check it with: {self.command()}"
        )

    def to_json(self) -> dict[str, Any]:
        """Return ``{"partner", "error", "failing_ranks", "tried"}``."""
        error = self.answer.error_key()
        return {
            "partner": self.partner.label,
            "partner_size": [self.partner.width, self.partner.height],
            "error": None if error is None else {"type": error[0], "message": error[1]},
            "failing_ranks": self.answer.failing_ranks,
            "tried": self.tried,
        }


def _shell(text: str) -> str:
    import shlex

    return shlex.quote(text)


def pair_hint(
    images: list[RequestImage],
    *,
    sglang_version: str,
    tp_size: int,
    settings: ServerSettings | None = None,
    candidates: list[Any] | None = None,
) -> LoadHint | None:
    """Return the smallest sample image (by pixels) that makes a clean request fail when the two arrive together.

    ``candidates`` default to the kit's sample images; the request comes first, the partner second
    (a single-image request of its own), as two clients sending at once.
    """
    from ..data import sample_images

    release, _ = release_for(sglang_version)
    own = {image.digest for image in images}
    pool = [probe_image(c) for c in (candidates if candidates is not None else sample_images())]
    pool = sorted((p for p in pool if p.digest not in own), key=lambda p: (p.width * p.height, p.label))
    request = Request("r1", tuple(images))
    for tried, partner in enumerate(pool, start=1):
        workload = Workload((request, Request("r2", (partner,))))
        try:
            answer = whatif_load(
                workload, sglang_version=release.version, tp_size=tp_size, settings=settings, find_fix=False
            )
        except SettingNotInReleaseError:
            return None
        if answer.failed:
            return LoadHint(tuple(images), partner, with_fix(answer, settings, None), tried)
    return None


def run_load_scenario(name: str, *, sglang_version: str | None = None, tp_size: int | None = None) -> LoadAnswer:
    """Return the :class:`LoadAnswer` of load scenario ``name`` (S14 onward) on its own deployment by default."""
    from ..scenarios.under_load import get_load_scenario

    scenario = get_load_scenario(name)
    return whatif_load(
        scenario.build(),
        sglang_version=sglang_version or scenario.sglang_version,
        tp_size=tp_size or scenario.tp_size,
        settings=scenario.settings,
        load=scenario.load,
    )


__all__ = ["LoadAnswer", "LoadHint", "load_why", "whatif_load", "pair_hint", "run_load_scenario"]
