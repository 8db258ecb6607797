"""environment.yml must ask conda-forge for exactly what pyproject.toml asks PyPI for.

The runtime dependencies plus the ``notebooks`` extra, under conda-forge's names (``torch`` is
``pytorch``, ``matplotlib`` is ``matplotlib-base``), with the same version bounds; ``python`` follows
``requires-python``; the project itself is installed with ``pip: [-e .]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPI_TO_CONDA = {"torch": "pytorch", "matplotlib": "matplotlib-base"}
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*?)\s*$")


def split_requirement(text: str) -> tuple[str, str]:
    """Return ``(normalised name, version specifier without spaces)`` of one requirement string.

    An environment marker (``; python_version < '3.11'``) is dropped: conda has none.
    """
    match = REQUIREMENT.match(text.partition(";")[0])
    assert match, f"cannot parse requirement {text!r}"
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
    return name, match.group(3).replace(" ", "")


def load_environment() -> dict:
    """Return environment.yml as parsed YAML."""
    return yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))


def load_project() -> dict:
    """Return the ``[project]`` table of pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def conda_packages(env: dict) -> dict[str, str]:
    """Return ``{name: specifier}`` of the conda (non-pip) dependencies."""
    packages: dict[str, str] = {}
    for entry in env["dependencies"]:
        if isinstance(entry, str):
            name, spec = split_requirement(entry)
            assert name not in packages, f"environment.yml lists {name} twice"
            packages[name] = spec
    return packages


def expected_packages(project: dict) -> dict[str, str]:
    """Return what environment.yml should list, derived from pyproject.toml."""
    wanted = list(project["dependencies"]) + list(project["optional-dependencies"]["notebooks"])
    expected: dict[str, str] = {"python": project["requires-python"].replace(" ", ""), "pip": ""}
    for requirement in wanted:
        name, spec = split_requirement(requirement)
        expected[PYPI_TO_CONDA.get(name, name)] = spec
    return expected


def test_environment_is_named_and_uses_conda_forge_only():
    env = load_environment()
    assert env["name"] == "kimi-viz"
    assert env["channels"] == ["conda-forge"]


def test_environment_matches_pyproject_dependencies_and_notebooks_extra():
    env_packages = conda_packages(load_environment())
    expected = expected_packages(load_project())
    missing = sorted(set(expected) - set(env_packages))
    extra = sorted(set(env_packages) - set(expected))
    assert not missing, f"environment.yml lacks {missing} (from pyproject.toml)"
    assert not extra, f"environment.yml lists {extra}, which pyproject.toml does not ask for"
    for name, spec in expected.items():
        assert env_packages[name] == spec, (
            f"{name}: environment.yml says {env_packages[name]!r}, pyproject.toml {spec!r}"
        )


def test_pypi_names_are_never_used_where_conda_forge_names_differ():
    env_packages = conda_packages(load_environment())
    for pypi_name, conda_name in PYPI_TO_CONDA.items():
        assert pypi_name not in env_packages, f"use conda-forge's {conda_name!r}, not {pypi_name!r}"
        assert conda_name in env_packages


def test_project_itself_is_installed_editable_with_pip():
    pip_sections = [e["pip"] for e in load_environment()["dependencies"] if isinstance(e, dict)]
    assert pip_sections == [["-e ."]]


@pytest.mark.parametrize(
    "text, name, spec",
    [
        ("torch>=2.4", "torch", ">=2.4"),
        ("Jupyter_Lab >= 4.0", "jupyter-lab", ">=4.0"),
        ("tqdm", "tqdm", ""),
        ("tomli>=2.0; python_version < '3.11'", "tomli", ">=2.0"),
    ],
)
def test_split_requirement(text, name, spec):
    assert split_requirement(text) == (name, spec)
