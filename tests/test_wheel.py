"""The wheel's contents as ``pyproject.toml`` declares them: every package of the tree, and the sample images.

Building and installing the wheel for real is ``.ci/wheel-check.sh`` (run by ``.ci/run``); these checks
catch the two ways it silently goes wrong: a new sub-package missing from the explicit list, and the
images no longer mapped from ``data/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

import kimi_viz.data as data
from kimi_viz.errors import ServerInputError

ROOT = Path(__file__).resolve().parent.parent


def setuptools_table() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_the_tree_is_in_the_wheel():
    tree = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kimi_viz").rglob("__init__.py"))
    declared = setuptools_table()["packages"]
    assert sorted(p for p in declared if p != "kimi_viz._data") == tree


def test_the_sample_images_come_from_data_itself():
    table = setuptools_table()
    assert table["package-dir"] == {"kimi_viz._data": "data"}
    assert table["package-data"]["kimi_viz._data"] == ["images/*", "logs/*"]
    assert not (ROOT / "kimi_viz" / "_data").exists(), "data/ is the one source of the images: no copy in the package"
    assert data.images_dir() == ROOT / "data" / "images"
    assert [p.name for p in data.sample_images()] == sorted(
        p.name for p in (ROOT / "data" / "images").iterdir() if p.suffix in (".png", ".jpg")
    )


def test_an_installed_wheels_images_win_over_the_checkout(tmp_path, monkeypatch):
    # The layout pip gives: kimi_viz/data.py beside kimi_viz/_data/images/.
    package = tmp_path / "site-packages" / "kimi_viz"
    (package / "_data" / "images").mkdir(parents=True)
    monkeypatch.delenv("KIMI_VIZ_DATA", raising=False)
    monkeypatch.setattr(data, "__file__", str(package / "data.py"))
    assert data.images_dir() == package / "_data" / "images"
    monkeypatch.setenv("KIMI_VIZ_DATA", str(tmp_path / "mine"))
    assert data.images_dir() == tmp_path / "mine" / "images"


def test_the_sample_log_ships_and_is_the_tests_copy():
    assert [p.name for p in data.sample_logs()] == ["kimi-k3-0.5.18.log"]
    shipped = data.sample_log("kimi-k3-0.5.18.log")
    assert shipped == ROOT / "data" / "logs" / "kimi-k3-0.5.18.log"
    assert shipped.read_bytes() == (ROOT / "tests" / "data" / "server_logs" / "kimi-k3-0.5.18.log").read_bytes()


def test_the_sample_log_is_found_in_an_installed_wheel_and_refuses_other_names(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "kimi_viz"
    (package / "_data" / "images").mkdir(parents=True)
    (package / "_data" / "logs").mkdir()
    (package / "_data" / "logs" / "kimi-k3-0.5.18.log").write_text("server_args=ServerArgs()\n")
    monkeypatch.setattr(data, "__file__", str(package / "data.py"))
    monkeypatch.setenv("KIMI_VIZ_DATA", str(tmp_path / "my-images"))  # other images: the kit's log still found
    assert data.sample_log() == package / "_data" / "logs" / "kimi-k3-0.5.18.log"
    for name in ("missing.log", "../images/x.log", "PROVENANCE.md"):
        with pytest.raises(
            ServerInputError, match=r"^no sample server log named .*; expected one of: kimi-k3-0.5.18.log$"
        ):
            data.sample_log(name)
