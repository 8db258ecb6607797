"""Where the sample data lives (images, a server log), found from the package rather than the working directory."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ImageNotFoundError, ServerInputError

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
    return kit_data_dir()


def kit_data_dir() -> Path:
    """Return the kit's own data folder: an installed wheel's ``kimi_viz/_data``, else the checkout's ``data/``
    (``$KIMI_VIZ_DATA`` is not read: it names other images, never the kit's sample log)."""
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


def sample_logs() -> list[Path]:
    """Return the paths of the kit's sample server logs (``data/logs/*.log``), sorted by file name."""
    folder = kit_data_dir() / "logs"
    return sorted(folder.glob("*.log")) if folder.is_dir() else []


def sample_log(name: str = "kimi-k3-0.5.18.log") -> Path:
    """Return the path of one of the kit's sample server logs by file name (``data/logs/PROVENANCE.md`` says how it
    was made): a Kimi-K3 server on SGLang 0.5.18 at attention-TP 2 whose get_image_feature raised."""
    path = kit_data_dir() / "logs" / name
    if Path(name).name != name or not path.is_file() or path.suffix != ".log":
        names = ", ".join(p.name for p in sample_logs()) or "none (the kit's data/logs/ is missing)"
        raise ServerInputError(f"no sample server log named {name!r}; expected one of: {names}")
    return path


# Each sample image's (width, height), as its header gives it: the under-load hint orders the samples by pixels
# without opening every file, and opens only the partners it tries (tests/test_whatif_load.py holds this to
# the files; a file whose header disagrees, or one not listed, is opened to be placed).
SAMPLE_IMAGE_SIZES = {
    "astronaut.png": (512, 512),
    "astronaut_tiny_20x5.png": (20, 5),
    "camera.png": (512, 512),
    "camera_vignette_la.png": (512, 512),
    "chelsea.png": (451, 300),
    "chelsea_exif_orientation6.jpg": (451, 300),
    "coffee.png": (600, 400),
    "coffee_cmyk.jpg": (600, 400),
    "coffee_palette_transparent.png": (600, 400),
    "horse.png": (400, 328),
    "hubble_deep_field.jpg": (1000, 872),
    "hubble_panorama_8000x100.jpg": (8000, 100),
    "microaneurysms.png": (102, 102),
    "retina.jpg": (1411, 1411),
    "rocket.jpg": (640, 427),
    "rocket_4200x3150.jpg": (4200, 3150),
    "text.png": (448, 172),
}


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
