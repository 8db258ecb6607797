"""Which SGLang release runs which Kimi-K3 code, in one table, and how a replay picks a release.

Users run a release, not a "variant": :data:`RELEASES` holds, for every release that has a Kimi-K3
model, the three things the kit models of it:

* its **code path** — what ``KimiK3ForConditionalGeneration.get_image_feature`` does with deferred items:

  ========  ============  =============================================================
  release   code path     what ``get_image_feature`` does with deferred items
  ========  ============  =============================================================
  0.5.17    ``no-split``  no deferred split: every feature must already be a tensor
  0.5.18    ``pre-fix``   the split reads ``grid_thws_host[indices]`` (the S1 bug)
  0.5.19-23 ``post-fix``  the split reads ``grid_thws_host[global_indices]``
  ========  ============  =============================================================

* its **request side** (:class:`RequestSide`: ``multimodal/processors/kimi_k3.py`` and its EPD
  encoder: whether it defers, its transports, its preprocessing cache);
* its **forward pass** (:class:`ForwardRules`: ``get_embedding_and_mask`` in ``managers/mm_schedule.py``,
  ``managers/mm_utils.py`` in 0.5.17: how the scheduler's batch becomes one call and how the features
  are spliced back);
* its **scheduler** (:class:`~kimi_viz.scheduler_rules.SchedulerRules`: how it resolves Kimi-K3's
  flags, its hybrid tree, its event loop and its ``PrefillAdder``; the entries live beside this table,
  in :mod:`kimi_viz.scheduler_rules`);
* what it **shipped** over the release before (:class:`~kimi_viz.release_changes.shipped.Change`: each change
  of these rules with the SGLang pull requests that made it; the changes live beside this table, in
  :mod:`kimi_viz.release_changes.shipped`, and the fix search that names them in :mod:`kimi_viz.release_changes`).

Every rule a release runs lives in its entry, and nowhere else: adding a release is one
:class:`Release` entry (plus its tests); :data:`NEWEST`, :data:`RELEASE_RANGE` and every derived
table follow; :func:`release_span` writes a set of releases as ranges, wherever the kit names them.
:func:`choose_release` turns what the user asked for (``sglang_version``, ``code_path``) and what a
manifest recorded into a :class:`ReleaseChoice`: the path to replay, the release it stands for and a
sentence saying how it was chosen, which every verdict repeats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from enum import Enum
from typing import Literal, Protocol, TypeVar

from ._records import frozen
from .errors import ConfigError
from .release_changes.shipped import (
    SHIPPED_0_5_18,
    SHIPPED_0_5_19,
    SHIPPED_0_5_20,
    SHIPPED_0_5_22,
    SHIPPED_0_5_23,
    Change,
)
from .scheduler_rules import (
    SCHEDULER_0_5_17,
    SCHEDULER_0_5_19,
    SCHEDULER_0_5_20,
    SCHEDULER_0_5_22,
    SCHEDULER_0_5_23,
    SchedulerRules,
)

CodePath = Literal["no-split", "pre-fix", "post-fix"]
CODE_PATHS: tuple[CodePath, ...] = ("no-split", "pre-fix", "post-fix")


class PathSource(str, Enum):
    """How the code path a replay runs was chosen (said in every verdict) or how a batch's was found."""

    ASKED = "asked"  # --sglang-version
    CODE_PATH = "code-path"  # --code-path, the lower-level switch
    RECORDED = "recorded"  # the version (or code path) a manifest recorded
    DETECTED = "detected"  # read from SGLang's own source by the capture
    SERVER = "server"  # read from the server's own log (--server-log): a line naming it, or its arguments
    SCENARIO = "scenario"  # a catalogue scenario's own code path
    ASSUMED = "assumed"  # nobody knew: the newest release


@frozen
class RequestSide:
    """One version of ``processors/kimi_k3.py`` (and its EPD encoder): what it can build and from where."""

    version: str  # the first release that ships it
    defers: bool  # has _should_defer_gpu_preprocessing
    preprocess_cache: bool  # has --mm-preprocess-cache-size-mb
    transports: tuple[str, ...]  # what --mm-feature-transport accepts
    auto_transport: str  # what the unset flag resolves to on a one-node CUDA server
    encoder_defers: bool  # the EPD encoder keeps raw images with a deferred config
    identity: str
    changes: str  # what this version changes on the request side, one sentence
    # The request's own checks (process_mm_data_async; kimi_viz.request.chat replays them in order):
    one_to_one_line: int = 0  # the line of the one-to-one ``raise`` in processors/kimi_k3.py
    rejects_caller_identity: bool = False  # reject_caller_image_identity runs first (mm_hashes, dict identities)
    checks_spans: bool = False  # compose_request: one <|media_pad|> run per image, else a ValueError

    @property
    def releases(self) -> tuple[str, ...]:
        """Return the releases that ship this request side, oldest first."""
        return tuple(r.version for r in RELEASES.values() if r.request_side is self)

    @property
    def label(self) -> str:
        """Return e.g. ``"0.5.19–0.5.22"`` (:func:`release_span`)."""
        return release_span(self.releases)


@frozen
class ForwardRules:
    """How one release's ``get_embedding_and_mask`` forms the ``get_image_feature`` call and splices the rows back.

    Only the rules that change an outcome for Kimi-K3 image items (one ``<|media_pad|>`` run each) are
    held; ``docs/pipeline.md`` §10 says where each one lives in SGLang's code.
    """

    version: str  # the first release with these rules
    source: str  # the file that holds get_embedding_and_mask
    dedupe_by_tokens: bool  # misses (and cache hits) keyed by (item.hash, token count), not item.hash alone
    discards_stale_cache: bool  # a cache hit whose rows differ from the run is dropped with a warning
    count_from_offsets: bool  # the expected pad count comes from the offsets (0.5.17: from the ids' mask)
    index_copy_scatter: bool  # _scatter_mm_embedding (index_copy_) instead of masked_scatter_
    precomputed_per_item: bool  # precomputed rows are cut per item, not across the request's items
    prefers_cached_after_set: bool  # after storing a miss, a cached entry of the right length is used instead
    rejects_oversized_cache_entry: bool  # an entry larger than the cache is refused without evicting others
    by_item_platforms: tuple[str, ...]  # platforms that call the encoder once per request
    async_assert: bool  # maybe_assert_sum with SGLANG_ENABLE_ASYNC_ASSERT
    changes: str

    @property
    def releases(self) -> tuple[str, ...]:
        """Return the releases that run these rules, oldest first."""
        return tuple(r.version for r in RELEASES.values() if r.forward is self)


@frozen
class Release:
    """One SGLang release: its Kimi-K3 code path, its request side, its forward pass, its scheduler, and the changes
    of these it shipped over the release before."""

    version: str
    code_path: CodePath
    request_side: RequestSide
    forward: ForwardRules
    scheduler: SchedulerRules
    summary: str
    shipped: tuple[Change, ...] = ()  # one per change of the rules above (rule_differences), with its pull requests

    def to_json(self) -> dict[str, str]:
        """Return ``{"version", "code_path", "request_side", "forward", "scheduler", "summary"}`` (rules: versions)."""
        return {
            "version": self.version,
            "code_path": self.code_path,
            "request_side": self.request_side.version,
            "forward": self.forward.version,
            "scheduler": self.scheduler.version,
            "summary": self.summary,
        }


_NO_SPLIT = (
    "no deferred split: every item's feature must already be a tensor; no grid or length check "
    "(a stale feature fails later, in the tower)"
)
_PRE_FIX = (
    "the deferred split without global_indices: the backend groups read grid_thws_host[indices] "
    "with shard-local positions (the S1 bug)"
)
_POST_FIX = "the deferred split with global_indices: the backend groups read grid_thws_host at global positions"
_WITH_XPU = ("hip", "npu", "xpu")

SIDE_0_5_17 = RequestSide(
    "0.5.17",
    defers=False,
    preprocess_cache=False,
    transports=("cpu", "cuda_ipc"),
    auto_transport="cuda_ipc",
    encoder_defers=False,
    identity="hash of the eager feature",
    changes="the first Kimi-K3 request side: eager rows only, no preprocessing cache; the EPD encoder "
    "runs the HF image processor (eager, grid_thws)",
    one_to_one_line=348,
    rejects_caller_identity=False,
    checks_spans=False,
)
SIDE_0_5_18 = RequestSide(
    "0.5.18",
    defers=True,
    preprocess_cache=True,
    transports=("cpu", "cuda_ipc", "cuda_vmm"),
    auto_transport="cpu",
    encoder_defers=True,
    identity="hash of the feature, scoped by the artifact key on the cached path",
    changes="deferred GPU preprocessing (_should_defer_gpu_preprocessing), the preprocessing cache "
    "(per-image decision), and the EPD encoder's deferred cpu/gpu items",
    one_to_one_line=725,
    rejects_caller_identity=False,
    checks_spans=True,
)
# Each later entry is the one before with what changed (dataclasses.replace), so the table reads as a changelog.
SIDE_0_5_19 = replace(
    SIDE_0_5_18,
    version="0.5.19",
    changes="the same items as 0.5.18 (transport wrapping through _prepare_mm_items_for_transport, "
    "config read from get_mm())",
    one_to_one_line=723,
)
SIDE_0_5_23 = replace(
    SIDE_0_5_19,
    version="0.5.23",
    identity="content+config+grid SHA-256 (set_identity), equal for deferred and eager",
    changes="the same items as 0.5.19; identities instead of feature hashes, caller hashes refused",
    one_to_one_line=748,
    rejects_caller_identity=True,
)

FORWARD_0_5_17 = ForwardRules(
    "0.5.17",
    "managers/mm_utils.py",
    dedupe_by_tokens=False,
    discards_stale_cache=False,
    count_from_offsets=False,
    index_copy_scatter=False,
    precomputed_per_item=False,
    prefers_cached_after_set=False,
    rejects_oversized_cache_entry=False,
    by_item_platforms=("hip", "npu"),
    async_assert=False,
    changes="the first Kimi-K3 forward pass: misses deduped by item.hash; the pad count read from the ids",
)
FORWARD_0_5_18 = replace(
    FORWARD_0_5_17,
    version="0.5.18",
    source="managers/mm_schedule.py",
    count_from_offsets=True,
    by_item_platforms=_WITH_XPU,
    async_assert=True,
    changes="mm_schedule.py: the pad count from the offsets (_count_mm_tokens_in_extend), maybe_assert_sum, "
    "XPU encodes per request",
)
FORWARD_0_5_19 = replace(
    FORWARD_0_5_18,
    version="0.5.19",
    dedupe_by_tokens=True,
    discards_stale_cache=True,
    index_copy_scatter=True,
    changes="misses keyed by (item.hash, token count); a cached embedding of another length is discarded "
    "with a warning; rows written with index_copy_",
)
FORWARD_0_5_22 = replace(
    FORWARD_0_5_19,
    version="0.5.22",
    precomputed_per_item=True,
    prefers_cached_after_set=True,
    changes="precomputed rows cut per item (_item_overlap, _slice_item_chunk)",
)
FORWARD_0_5_23 = replace(
    FORWARD_0_5_22,
    version="0.5.23",
    rejects_oversized_cache_entry=True,
    changes="a cache entry larger than the cache is refused without evicting the others",
)

RELEASES: dict[str, Release] = {
    r.version: r
    for r in (
        Release("0.5.17", "no-split", SIDE_0_5_17, FORWARD_0_5_17, SCHEDULER_0_5_17, _NO_SPLIT),
        Release("0.5.18", "pre-fix", SIDE_0_5_18, FORWARD_0_5_18, SCHEDULER_0_5_17, _PRE_FIX, SHIPPED_0_5_18),
        Release("0.5.19", "post-fix", SIDE_0_5_19, FORWARD_0_5_19, SCHEDULER_0_5_19, _POST_FIX, SHIPPED_0_5_19),
        Release("0.5.20", "post-fix", SIDE_0_5_19, FORWARD_0_5_19, SCHEDULER_0_5_20, _POST_FIX, SHIPPED_0_5_20),
        Release("0.5.21", "post-fix", SIDE_0_5_19, FORWARD_0_5_19, SCHEDULER_0_5_20, _POST_FIX),
        Release(
            "0.5.22",
            "post-fix",
            SIDE_0_5_19,
            FORWARD_0_5_22,
            SCHEDULER_0_5_22,
            _POST_FIX + "; drops the CUDA-IPC consumer count, which changes no outcome",
            SHIPPED_0_5_22,
        ),
        Release("0.5.23", "post-fix", SIDE_0_5_23, FORWARD_0_5_23, SCHEDULER_0_5_23, _POST_FIX, SHIPPED_0_5_23),
    )
}


_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(.*)$")
# A development or pre-release build may hold either side of a change: the source detection decides.
_PRERELEASE = re.compile(r"(dev|rc|a\d|b\d)", re.IGNORECASE)


def _key(version: str) -> tuple[int, int, int]:
    match = _VERSION.match(version)
    assert match is not None
    return int(match[1]), int(match[2]), int(match[3])


def release_order() -> tuple[str, ...]:
    """Return the table's releases, oldest first, as the table holds them now."""
    return tuple(sorted(RELEASES, key=_key))


def ordered_releases() -> tuple[Release, ...]:
    """Return the table's entries, oldest first, as the table holds them now."""
    return tuple(RELEASES[version] for version in release_order())


def release_span(releases: Iterable[str]) -> str:
    """Return releases as ranges of consecutive ones in the table: ``0.5.18–0.5.23``, ``0.5.17, 0.5.19–0.5.23``.

    The one way the kit writes a set of releases (help, answers, the message catalogue): a run is closed at the
    newest release it reaches, so it names only releases the kit knows (the data that says which releases run
    something may end open, ``0.5.18+``; what the kit says names them); none is ``none of 0.5.17–0.5.23``.
    """
    order = release_order()
    indices = sorted({order.index(r) for r in releases if r in RELEASES})
    if not indices:
        return f"none of {release_span(order)}"
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(order[run[0]] if len(run) == 1 else f"{order[run[0]]}–{order[run[-1]]}" for run in runs)


_ORDERED = sorted(RELEASES.values(), key=lambda r: _key(r.version))
NEWEST = _ORDERED[-1].version
FIRST_KIMI_K3 = _ORDERED[0].version
#: Every release with a Kimi-K3 model, as help texts and answers name them.
RELEASE_RANGE = release_span(RELEASES)


def path_change(path: CodePath) -> Change | None:
    """Return the change that brought code path ``path`` (None for the first release's path: nothing before it)."""
    first = next(r for r in _ORDERED if r.code_path == path)
    return next((change for change in first.shipped if "code_path" in change.rules), None)


#: The release each code path first shipped in, and what changed there.
PATH_INTRODUCED: dict[CodePath, tuple[str, str]] = {
    path: (
        next(r.version for r in _ORDERED if r.code_path == path),
        "the first Kimi-K3 model" if (change := path_change(path)) is None else change.text,
    )
    for path in CODE_PATHS
}
#: The release whose code a path stands for when only the path is known: the newest that runs it.
PATH_RELEASE: dict[CodePath, str] = {
    path: next(r.version for r in reversed(_ORDERED) if r.code_path == path) for path in CODE_PATHS
}
#: Every distinct request side and forward pass, oldest first (derived from the table).
REQUEST_SIDES: dict[str, RequestSide] = {r.request_side.version: r.request_side for r in _ORDERED}
FORWARD_RULES: dict[str, ForwardRules] = {r.forward.version: r.forward for r in _ORDERED}


def parse_version(text: str) -> tuple[tuple[int, int, int], str]:
    """Return ``((major, minor, patch), suffix)`` of an SGLang version such as ``0.5.18`` or ``v0.5.23.post1``."""
    match = _VERSION.match(str(text).strip())
    if match is None:
        raise ConfigError(
            f"sglang_version: expected a release such as 0.5.23, got {text!r}; known releases: {', '.join(RELEASES)}"
        )
    return (int(match[1]), int(match[2]), int(match[3])), match[4]


@frozen
class ReleaseChoice:
    """The code path a replay runs, the release it stands for, and how it was chosen (said in every verdict)."""

    code_path: CodePath
    release: Release
    chosen_by: PathSource
    asked: str | None  # the version string asked for or recorded, as given
    note: str  # one sentence: which release and path, and why

    @property
    def label(self) -> str:
        """Return e.g. ``"SGLang 0.5.18 (pre-fix path)"``."""
        return f"SGLang {self.release.version} ({self.code_path} path)"

    def to_json(self) -> dict[str, object]:
        """Return the choice as plain JSON data."""
        return {
            "sglang_version": self.release.version,
            "code_path": self.code_path,
            "chosen_by": self.chosen_by.value,
            "asked": self.asked,
            "note": self.note,
        }


class _Versioned(Protocol):
    @property
    def version(self) -> str: ...


RuleT = TypeVar("RuleT", bound=_Versioned)


def rule_in_force(rules: Sequence[RuleT], version: str) -> RuleT:
    """Return the last of ``rules`` (each with the ``version`` it starts at, oldest first) that ``version`` runs."""
    number = parse_version(release_for(version)[0].version)[0]
    return [rule for rule in rules if parse_version(rule.version)[0] <= number][-1]


def release_for(version: str) -> tuple[Release, str]:
    """Return ``(release whose code runs, sentence)`` for an SGLang version string; raise ConfigError before 0.5.17.

    A known release maps to itself; a post-release or local build (``0.5.18.post1``, ``0.5.23+cu129``)
    to its base release; a version after the newest known one replays the newest known path and
    says so; a pre-release or development build of a known release is taken as that release, said.
    """
    numbers, suffix = parse_version(version)
    base = ".".join(str(n) for n in numbers)
    if numbers < _key(FIRST_KIMI_K3):
        raise ConfigError(
            f"sglang_version: SGLang {version} has no Kimi-K3 model (it first shipped in "
            f"{FIRST_KIMI_K3}); expected one of {', '.join(RELEASES)} or later"
        )
    if numbers > _key(NEWEST) or base not in RELEASES:
        newest = RELEASES[NEWEST]
        return newest, (
            f"SGLang {version} is newer than the newest release kimi-viz knows ({NEWEST}); replaying "
            f"{NEWEST}'s {newest.code_path} path"
        )
    release = RELEASES[base]
    if suffix:
        return release, f"SGLang {version} is taken as {base} ({release.code_path} path)"
    return release, f"SGLang {base}: {release.code_path} path"


def as_code_path(value: object, name: str = "code_path") -> CodePath:
    """Return ``value`` as a :data:`CodePath`; raise ConfigError naming ``name`` for anything else."""
    for path in CODE_PATHS:
        if value == path:
            return path
    raise ConfigError(f"{name}: expected one of {list(CODE_PATHS)}, got {value!r}")


#: How a batch's own code path was found, as the verdict's sentence says it (its JSON says the key).
_RECORDED_PATH_WORDS: dict[PathSource, str] = {
    PathSource.DETECTED: "detected from SGLang's source by the capture",
    PathSource.SCENARIO: "the scenario's code",
    PathSource.RECORDED: "recorded in the manifest",
}


def _recorded_choice(
    recorded_version: str | None,
    recorded_code_path: str | None,
    recorded_source: PathSource | None,
    server_version: tuple[str, str] | None,
) -> ReleaseChoice | None:
    """Return the choice a manifest's record (else the server's log) makes, or None when neither says a release."""
    detected = recorded_code_path in CODE_PATHS and recorded_source is PathSource.DETECTED
    if recorded_version:
        found: Release | None
        try:
            found, sentence = release_for(recorded_version)
        except ConfigError:
            found = None
        prerelease = bool(_PRERELEASE.search(parse_version(recorded_version)[1])) if found else False
        if found is not None and not (prerelease and detected):
            return ReleaseChoice(
                found.code_path,
                found,
                PathSource.RECORDED,
                recorded_version,
                sentence + " (the version the capture recorded)",
            )
    if server_version is not None and not detected:
        release, sentence = release_for(server_version[0])
        return ReleaseChoice(
            release.code_path, release, PathSource.SERVER, server_version[0], f"{sentence} ({server_version[1]})"
        )
    if recorded_code_path in CODE_PATHS and recorded_source is not PathSource.ASSUMED:
        path = as_code_path(recorded_code_path)
        release = RELEASES[PATH_RELEASE[path]]
        how = recorded_source if recorded_source in _RECORDED_PATH_WORDS else PathSource.RECORDED
        what = _RECORDED_PATH_WORDS[how]
        unknown = f"SGLang {recorded_version} is not a release kimi-viz knows; " if recorded_version else ""
        return ReleaseChoice(
            path,
            release,
            how,
            recorded_version,
            f"{unknown}the {path} code path, {what}, as in SGLang {release.version}",
        )
    return None


def choose_release(
    *,
    sglang_version: str | None = None,
    code_path: str | None = None,
    recorded_version: str | None = None,
    recorded_code_path: str | None = None,
    recorded_source: PathSource | None = None,
    server_version: tuple[str, str] | None = None,
) -> ReleaseChoice:
    """Return the :class:`ReleaseChoice` for a replay.

    In order: ``code_path`` when given (the lower-level switch, said as such); else ``sglang_version``;
    else the version a manifest recorded; else the code path a manifest recorded, unless it was only
    assumed (``recorded_source`` says how it was found: detected from SGLang's source by the capture,
    a scenario's own, or recorded by a person or tool); else the release the server's log gives
    (``server_version``: the version and how the log gave it); else the newest known release, stated as an
    assumption.
    """
    asked_path = None if code_path is None else as_code_path(code_path)
    if sglang_version is not None:
        release, sentence = release_for(sglang_version)
        if asked_path is not None and asked_path != release.code_path:
            return ReleaseChoice(
                asked_path,
                release,
                PathSource.CODE_PATH,
                sglang_version,
                f"{sentence}, but the {asked_path} path is replayed as asked (--code-path)",
            )
        return ReleaseChoice(release.code_path, release, PathSource.ASKED, sglang_version, sentence + " (asked)")
    if asked_path is not None:
        release = RELEASES[PATH_RELEASE[asked_path]]
        return ReleaseChoice(
            asked_path,
            release,
            PathSource.CODE_PATH,
            None,
            f"the {asked_path} code path, as in SGLang {release.version} (--code-path)",
        )
    recorded = _recorded_choice(recorded_version, recorded_code_path, recorded_source, server_version)
    if recorded is not None:
        return recorded
    release = RELEASES[NEWEST]
    return ReleaseChoice(
        release.code_path,
        release,
        PathSource.ASSUMED,
        recorded_version,
        f"no SGLang version was recorded; assuming the newest known release, {NEWEST} "
        f"({release.code_path} path); pass --sglang-version to replay another",
    )


__all__ = [
    "rule_in_force",
    "CodePath",
    "CODE_PATHS",
    "PathSource",
    "RequestSide",
    "ForwardRules",
    "Release",
    "RELEASES",
    "REQUEST_SIDES",
    "FORWARD_RULES",
    "NEWEST",
    "FIRST_KIMI_K3",
    "RELEASE_RANGE",
    "SchedulerRules",
    "PATH_INTRODUCED",
    "as_code_path",
    "ReleaseChoice",
    "choose_release",
    "release_for",
    "release_span",
    "release_order",
    "ordered_releases",
    "path_change",
    "parse_version",
]
