"""Where the sample images live, found from the package rather than the working directory."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ImageNotFoundError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")


def data_dir() -> Path:
    """Return the folder holding ``images/``.

    ``$KIMI_VIZ_DATA`` wins; else an installed wheel's ``kimi_viz/_data`` (built from the repository's
    ``data/``, see ``[tool.setuptools.package-dir]`` in ``pyproject.toml``); else, in a checkout or an
    editable install, the repository's ``data/`` itself.
    """
    env = os.environ.get("KIMI_VIZ_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    installed = here / "_data"
    if (installed / "images").is_dir():
        return installed
    return here.parent / "data"


def images_dir() -> Path:
    """Return the folder of sample images."""
    return data_dir() / "images"


def sample_images() -> list[Path]:
    """Return the paths of every sample image, sorted by file name."""
    folder = images_dir()
    if not folder.is_dir():
        raise ImageNotFoundError(
            f"sample images folder {folder} does not exist; expected the kit's data/images/ "
            "(set KIMI_VIZ_DATA to the folder holding images/ if you installed the kit elsewhere)"
        )
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def sample_path(name: str) -> Path:
    """Return the path of one sample image by file name (e.g. ``"horse.png"``)."""
    path = images_dir() / name
    if not path.is_file():
        names = ", ".join(p.name for p in sample_images())
        raise ImageNotFoundError(f"no sample image named {name!r}; expected one of: {names}")
    return path


# The eight ordinary photos used by scenarios, the demo and the processor benchmark
# (22160 patches under K3).
SAMPLE_PHOTOS = (
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "rocket.jpg",
    "hubble_deep_field.jpg",
    "retina.jpg",
    "horse.png",
    "camera.png",
)
