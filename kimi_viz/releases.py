"""Which SGLang release runs which Kimi-K3 code path (pipeline spec §9), and how a replay picks one.

Users run a release, not a "variant": :data:`RELEASES` maps every release that has a Kimi-K3 model
to the code path of its ``get_image_feature`` and the version of its request side
(``multimodal/processors/kimi_k3.py``):

========  ============  =============================================================
release   code path     what ``get_image_feature`` does with deferred items
========  ============  =============================================================
0.5.17    ``no-split``  no deferred split: every feature must already be a tensor
0.5.18    ``pre-fix``   the split reads ``grid_thws_host[indices]`` (the S1 bug)
0.5.19-22 ``post-fix``  the split reads ``grid_thws_host[global_indices]``
0.5.23    ``post-fix``  the same split as 0.5.19
========  ============  =============================================================

:func:`choose_release` turns what the user asked for (``sglang_version``, ``variant``) and what a
manifest recorded into a :class:`ReleaseChoice`: the path to replay, the release it stands for and
a sentence saying how it was chosen, which every verdict repeats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError

CodePath = Literal["no-split", "pre-fix", "post-fix"]
CODE_PATHS: tuple[CodePath, ...] = ("no-split", "pre-fix", "post-fix")
ChosenBy = Literal["asked", "recorded", "detected", "variant", "assumed"]

FIX_PRS = ("#35305", "#36265")


@dataclass(frozen=True)
class Release:
    """One SGLang release: its Kimi-K3 code path and the version of its request side."""

    version: str
    code_path: CodePath
    request_side: str  # the first release whose processors/kimi_k3.py this one ships
    summary: str

    def to_json(self) -> dict[str, str]:
        """Return ``{"version", "code_path", "request_side", "summary"}``."""
        return {
            "version": self.version,
            "code_path": self.code_path,
            "request_side": self.request_side,
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
_POST_FIX = "the deferred split with global_indices (SGLang PRs #35305 / #36265)"

RELEASES: dict[str, Release] = {
    r.version: r
    for r in (
        Release("0.5.17", "no-split", "0.5.17", _NO_SPLIT),
        Release("0.5.18", "pre-fix", "0.5.18", _PRE_FIX),
        Release("0.5.19", "post-fix", "0.5.19", _POST_FIX),
        Release("0.5.20", "post-fix", "0.5.19", _POST_FIX),
        Release("0.5.21", "post-fix", "0.5.19", _POST_FIX),
        Release(
            "0.5.22", "post-fix", "0.5.19", _POST_FIX + "; drops the CUDA-IPC consumer count, which changes no outcome"
        ),
        Release("0.5.23", "post-fix", "0.5.23", _POST_FIX),
    )
}
NEWEST = "0.5.23"
FIRST_KIMI_K3 = "0.5.17"

#: The release each code path first shipped in, and what changed there (for "fixed in ...").
PATH_INTRODUCED: dict[CodePath, tuple[str, str]] = {
    "no-split": ("0.5.17", "the first Kimi-K3 model"),
    "pre-fix": ("0.5.18", "deferred preprocessing in get_image_feature"),
    "post-fix": ("0.5.19", "SGLang PRs #35305 / #36265"),
}
#: The release whose code a path stands for when only the path is known.
PATH_RELEASE: dict[CodePath, str] = {"no-split": "0.5.17", "pre-fix": "0.5.18", "post-fix": NEWEST}

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(.*)$")
# A development or pre-release build may hold either side of a change: the source detection decides.
_PRERELEASE = re.compile(r"(dev|rc|a\d|b\d)", re.IGNORECASE)


def _key(version: str) -> tuple[int, int, int]:
    match = _VERSION.match(version)
    assert match is not None
    return int(match[1]), int(match[2]), int(match[3])


def parse_version(text: str) -> tuple[tuple[int, int, int], str]:
    """Return ``((major, minor, patch), suffix)`` of an SGLang version such as ``0.5.18`` or ``v0.5.23.post1``."""
    match = _VERSION.match(str(text).strip())
    if match is None:
        raise ConfigError(
            f"sglang_version: expected a release such as 0.5.23, got {text!r}; known releases: {', '.join(RELEASES)}"
        )
    return (int(match[1]), int(match[2]), int(match[3])), match[4]


@dataclass(frozen=True)
class ReleaseChoice:
    """The code path a replay runs, the release it stands for, and how it was chosen (said in every verdict)."""

    code_path: CodePath
    release: Release
    chosen_by: ChosenBy
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
            "chosen_by": self.chosen_by,
            "asked": self.asked,
            "note": self.note,
        }


@dataclass(frozen=True)
class FixRelease:
    """The first later release whose code replays a failing batch clean, and what changed there."""

    release: str
    change: str
    code_path: CodePath

    @property
    def summary(self) -> str:
        """Return the release's code-path summary."""
        return RELEASES[self.release].summary

    @property
    def text(self) -> str:
        """Return e.g. ``"fixed in 0.5.19: SGLang PRs #35305 / #36265"``."""
        return f"fixed in {self.release}: {self.change}"

    def to_json(self) -> dict[str, str]:
        """Return ``{"release", "change", "code_path", "summary"}``."""
        return {"release": self.release, "change": self.change, "code_path": self.code_path, "summary": self.summary}


def fix_release(path: CodePath) -> FixRelease:
    """Return the :class:`FixRelease` of the release that introduced ``path``."""
    version, change = PATH_INTRODUCED[path]
    return FixRelease(version, change, path)


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


def fixed_in(path: CodePath) -> tuple[str, str] | None:
    """Return ``(release, what changed)`` of the first release whose code path comes after ``path``, or None."""
    order = CODE_PATHS.index(path)
    if order + 1 >= len(CODE_PATHS):
        return None
    return PATH_INTRODUCED[CODE_PATHS[order + 1]]


def later_paths(path: CodePath) -> list[CodePath]:
    """Return the code paths of releases after ``path``'s, oldest first."""
    return list(CODE_PATHS[CODE_PATHS.index(path) + 1 :])


def choose_release(
    *,
    sglang_version: str | None = None,
    variant: str | None = None,
    recorded_version: str | None = None,
    recorded_variant: str | None = None,
    recorded_variant_source: str | None = None,
) -> ReleaseChoice:
    """Return the :class:`ReleaseChoice` for a replay.

    In order: ``variant`` when given (the lower-level switch, said as such); else ``sglang_version``;
    else the version a manifest recorded; else the code path the capture detected from SGLang's source
    (``recorded_variant`` with ``recorded_variant_source`` ``"detected"``, or any recorded variant of a
    manifest with no version); else the newest known release, stated as an assumption.
    """
    if variant is not None and variant not in CODE_PATHS:
        raise ConfigError(f"variant: expected one of {list(CODE_PATHS)}, got {variant!r}")
    if sglang_version is not None:
        release, sentence = release_for(sglang_version)
        if variant is not None and variant != release.code_path:
            return ReleaseChoice(
                variant,
                release,
                "variant",
                sglang_version,
                f"{sentence}, but the {variant} path is replayed as asked (--variant)",
            )
        return ReleaseChoice(release.code_path, release, "asked", sglang_version, sentence + " (asked)")
    if variant is not None:
        chosen: CodePath = variant
        release = RELEASES[PATH_RELEASE[chosen]]
        return ReleaseChoice(
            chosen,
            release,
            "variant",
            None,
            f"the {variant} code path, as in SGLang {release.version} (--variant)",
        )
    detected = recorded_variant in CODE_PATHS and recorded_variant_source == "detected"
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
                "recorded",
                recorded_version,
                sentence + " (the version the capture recorded)",
            )
    if recorded_variant in CODE_PATHS and recorded_variant_source != "assumed":
        path: CodePath = recorded_variant
        release = RELEASES[PATH_RELEASE[path]]
        what = {"detected": "detected from SGLang's source by the capture", "scenario": "the scenario's code"}.get(
            recorded_variant_source or "", "recorded in the manifest"
        )
        unknown = f"SGLang {recorded_version} is not a release kimi-viz knows; " if recorded_version else ""
        return ReleaseChoice(
            path,
            release,
            "detected",
            recorded_version,
            f"{unknown}the {path} code path, {what}, as in SGLang {release.version}",
        )
    release = RELEASES[NEWEST]
    return ReleaseChoice(
        release.code_path,
        release,
        "assumed",
        recorded_version,
        f"no SGLang version was recorded; assuming the newest known release, {NEWEST} "
        f"({release.code_path} path); pass --sglang-version to replay another",
    )


__all__ = [
    "CodePath",
    "CODE_PATHS",
    "Release",
    "RELEASES",
    "NEWEST",
    "FIX_PRS",
    "ReleaseChoice",
    "FixRelease",
    "fix_release",
    "choose_release",
    "release_for",
    "fixed_in",
    "later_paths",
    "parse_version",
]
