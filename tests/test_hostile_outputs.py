"""Hostile output paths: ``--out`` / ``--manifest-out`` that is a file, lies under a file, or is (or holds) a link.

The security hole this covers: ``kimi-viz capture`` suggests ``kimi-viz triage M --out M/triage``, an
output folder *inside a received manifest folder*. If the sender made ``M/triage`` a link, or put
``report.html``, ``summary.png`` or ``trace.json`` there as links to files of the receiver's, triage
wrote through them. Now a linked folder is refused (exit 2, one line) and a linked file is replaced
by the new file: the files the links point at are never touched. The same holds for the manifests
``scenario run --manifest-out`` and ``demo`` write, and for ``capture --out``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_hostile_support import Case, check_case, run_cases

VICTIM = b"# the receiver's own file: never to be overwritten\n"


def received_manifest(folder: Path) -> Path:
    from test_hostile_manifests import manifest

    return manifest(folder, name="received")


def victim(folder: Path, name: str = "victim.txt") -> Path:
    outside = folder / "outside"
    outside.mkdir(exist_ok=True)
    path = outside / name
    path.write_bytes(VICTIM)
    return path


def untouched(*names: str):
    def check(run, folder):
        outside = folder / "outside"
        for path in outside.iterdir():
            assert path.read_bytes() == VICTIM, f"{path} was written through a link: " + run.describe()
        assert sorted(p.name for p in outside.iterdir()) == sorted(names or ("victim.txt",)), run.describe()

    return check


def replaced(*files: str):
    base = untouched(*[f"{Path(f).stem}-victim{Path(f).suffix}" for f in files])

    def check(run, folder):
        base(run, folder)
        out = folder / "received" / "triage"
        for name in files:
            assert not (out / name).is_symlink() and (out / name).stat().st_size > 0, run.describe()

    return check


def linked_out_folder(folder: Path) -> list[str]:
    manifest = received_manifest(folder)
    victim(folder)
    os.symlink(folder / "outside", manifest / "triage")
    return ["triage", str(manifest), "--out", str(manifest / "triage")]


def linked_files(*names: str, both_paths: bool = False):
    def build(folder: Path) -> list[str]:
        manifest = received_manifest(folder)
        out = manifest / "triage"
        out.mkdir()
        for name in names:
            os.symlink(victim(folder, f"{Path(name).stem}-victim{Path(name).suffix}"), out / name)
        return ["triage", str(manifest), "--out", str(out), *(["--code-path", "both"] if both_paths else [])]

    return build


def a_file(folder: Path) -> Path:
    path = folder / "a-file"
    path.write_text("not a folder")
    return path


def scenario_into(make):
    def build(folder: Path) -> list[str]:
        return ["scenario", "run", "healthy-tp2", "--mode", "shapes", "--manifest-out", str(make(folder))]

    return build


def linked_manifest_json(folder: Path) -> Path:
    out = folder / "m"
    out.mkdir()
    os.symlink(victim(folder), out / "manifest.json")
    return out


def linked_zip(folder: Path) -> Path:
    path = folder / "m.zip"
    os.symlink(victim(folder), path)
    return path


def linked_images_folder(folder: Path) -> Path:
    out = folder / "m"
    out.mkdir()
    victim(folder)
    os.symlink(folder / "outside", out / "images")
    return out


def demo_with_linked_index(folder: Path) -> list[str]:
    out = folder / "demo"
    out.mkdir()
    os.symlink(victim(folder), out / "index.html")
    return ["demo", "--out", str(out), "--scenarios", "healthy-tp2", "--no-gallery"]


def demo_linked_out(folder: Path) -> list[str]:
    victim(folder)
    os.symlink(folder / "outside", folder / "demo")
    return ["demo", "--out", str(folder / "demo"), "--scenarios", "healthy-tp2", "--no-gallery"]


CASES = [
    # --- a file, or under a file -----------------------------------------------------------------------
    Case(
        "triage-out-is-a-file",
        lambda f: ["triage", str(received_manifest(f)), "--out", str(a_file(f))],
        words=("--out", "a-file", "is the file"),
    ),
    Case(
        "triage-out-under-a-file",
        lambda f: ["triage", str(received_manifest(f)), "--out", str(a_file(f) / "x" / "y")],
        words=("--out", "lies under the file"),
    ),
    Case("manifest-out-is-a-file", scenario_into(a_file), words=("--manifest-out", "a-file")),
    Case("manifest-out-under-a-file", scenario_into(lambda f: a_file(f) / "m"), words=("--manifest-out", "lies under")),
    Case(
        "manifest-out-zip-under-a-file",
        scenario_into(lambda f: a_file(f) / "m.zip"),
        words=("--manifest-out", "a-file"),
    ),
    Case("demo-out-is-a-file", lambda f: ["demo", "--out", str(a_file(f)), "--no-gallery"], words=("--out", "a-file")),
    # --- the security hole: links inside a received manifest folder -----------------------------------
    Case("triage-out-folder-is-a-link", linked_out_folder, words=("--out", "symbolic link"), check=untouched()),
    Case(
        "triage-every-output-is-a-link",
        linked_files("report.html", "summary.png", "trace.json", "trace-pre-fix.json", both_paths=True),
        code=(0, 1),
        check=replaced("report.html", "summary.png", "trace.json", "trace-pre-fix.json"),
    ),
    Case("manifest-out-json-is-a-link", scenario_into(linked_manifest_json), code=(0, 1), check=untouched()),
    Case("manifest-out-zip-is-a-link", scenario_into(linked_zip), code=(0, 1), check=untouched()),
    Case(
        "manifest-out-images-is-a-link",
        scenario_into(linked_images_folder),
        words=("--manifest-out", "symbolic link"),
        check=untouched(),
    ),
    Case(
        "manifest-out-is-a-link",
        scenario_into(lambda f: (victim(f), os.symlink(f / "outside", f / "m"), f / "m")[2]),
        words=("symbolic link",),
        check=untouched(),
    ),
    Case("demo-index-is-a-link", demo_with_linked_index, code=0, check=untouched()),
    Case("demo-out-is-a-link", demo_linked_out, words=("--out", "symbolic link"), check=untouched()),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("hostile-outputs"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_hostile_output(case, runs):
    run, folder = runs[case.name]
    check_case(case, run, folder)
