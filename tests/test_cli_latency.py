"""The on-call path stays light: what ``kimi-viz --help``, ``explain``, shapes-mode ``triage`` and ``whatif`` import.

Each command runs in a fresh interpreter (``python -c``) that then lists the heavy libraries it
loaded. ``--help`` and ``explain`` load none of numpy, torch, matplotlib, Pillow or jsonschema;
``triage --json`` of a redacted (shape-only) manifest loads neither torch, matplotlib, Pillow nor
jsonschema (every part of the manifest takes the validation's fast path); with ``--out`` only matplotlib
joins, never its pyplot, and still no torch. A shapes-mode ``whatif`` loads neither torch, matplotlib nor
jsonschema: for two photos (one what-if, a sweep, an EPD encoder), and for a transparent palette, an
opaque palette, a greyscale and a greyscale-with-alpha PNG each clean alone on 0.5.18 at TP 2, so that
the under-load pair hint's replays run too. Structure, not wall time, is what is asserted; the one
figure checked is the CPU time (not wall time) of the child running the shapes ``triage --json``, under
``CPU_BOUND_S``. ``benchmarks/bench_cli.py`` measures the wall times, as ratios to a bare interpreter.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_viz.manifest import write_manifest
from kimi_viz.split.batch import Batch, Feature, Item

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "torch", "matplotlib", "PIL", "jsonschema")
EXPLAIN_LINE = "ValueError: Kimi-K3 deferred feature length does not match image grids"
DEFERRED = {
    "backend": "cpu",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "transparent_bg_config": None,
    "resize_config": {"num_tokens": 1, "new_width": 28, "new_height": 28, "pad_width": 0, "pad_height": 0},
}
CPU_BOUND_S = 1.0  # CPU seconds a shapes triage may use: start-up, the replay and the verdict, no heavy import


def _probe(argv: list[str]) -> tuple[int, str, dict[str, bool], float]:
    """Run ``kimi_viz.cli.main(argv)`` in a fresh interpreter; return (exit code, stdout, heavy modules loaded, s)."""
    code = (
        "import sys, json\n"
        "from kimi_viz.cli import main\n"
        "try:\n"
        f"    rc = main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    rc = exc.code\n"
        f"loaded = {{name: name in sys.modules for name in {HEAVY + ('matplotlib.pyplot',)!r}}}\n"
        "print('\\nLOADED ' + json.dumps(loaded))\n"
        "sys.exit(rc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    out, _, loaded = result.stdout.rpartition("\nLOADED ")
    assert loaded, result.stderr
    return result.returncode, out, json.loads(loaded), cpu


@pytest.fixture(scope="module")
def shapes_manifest(tmp_path_factory) -> Path:
    """A redacted two-item manifest (a cpu-backend image and an eager tensor, shapes only)."""
    batch = Batch(
        [
            Item(
                {"grid_thws": [[1, 2, 2]]},
                Feature.shape_only("image", (28, 28, 3), "uint8"),
                dict(DEFERRED),
                original_size=(28, 28),
                label="a",
            ),
            Item({"grid_thws": [[1, 2, 2]]}, Feature.shape_only("patches", (4, 3, 14, 14), "float32"), label="b"),
        ],
        processor=None,
        attn_tp_size=2,
    )
    return write_manifest(batch, tmp_path_factory.mktemp("latency") / "shapes", redact=True)


@pytest.mark.parametrize("argv", [["--help"], ["explain", EXPLAIN_LINE]], ids=["help", "explain"])
def test_help_and_explain_import_nothing_heavy(argv):
    rc, out, loaded, _ = _probe(argv)
    assert rc == 0 and out.strip()
    assert {name for name, on in loaded.items() if on} == set()


def test_a_shapes_triage_loads_neither_torch_matplotlib_pillow_nor_jsonschema(shapes_manifest):
    rc, out, loaded, cpu = _probe(["triage", "--json", str(shapes_manifest)])
    assert rc == 0, out
    verdict = json.loads(out)
    assert verdict["status"] == "clean" and verdict["outcome"] == "ok"
    assert {name for name in ("torch", "matplotlib", "PIL", "jsonschema") if loaded[name]} == set()
    # CPU time of the child (wall time is the benchmarks' business): importing torch alone costs more than this
    assert cpu < CPU_BOUND_S, f"triage --json used {cpu:.2f} s of CPU, over {CPU_BOUND_S} s"


@pytest.fixture(scope="module")
def out_probe(shapes_manifest, tmp_path_factory) -> tuple[int, str, dict[str, bool], Path]:
    """One ``triage --json --out DIR`` of the shapes manifest: (exit code, stdout, heavy modules loaded, DIR)."""
    out_dir = tmp_path_factory.mktemp("latency-out") / "out"
    rc, out, loaded, _ = _probe(["triage", "--json", str(shapes_manifest), "--out", str(out_dir)])
    return rc, out, loaded, out_dir


def test_a_shapes_triage_with_out_draws_without_pyplot(out_probe):
    rc, out, loaded, out_dir = out_probe
    assert rc == 0, out
    assert {p.name for p in out_dir.iterdir()} == {"report.html", "summary.png", "trace.json", "issue.md"}
    assert loaded["matplotlib"] and not loaded["matplotlib.pyplot"] and not loaded["jsonschema"]


def test_a_shapes_triage_with_out_loads_no_torch(out_probe):
    rc, out, loaded, _ = out_probe
    assert rc == 0, out
    assert not loaded["torch"]


@pytest.mark.parametrize(
    "extra", [[], ["--sweep"], ["--serving", "epd-encoder", "--epd-backend", "cpu"]], ids=["one", "sweep", "epd-cpu"]
)
def test_a_shapes_whatif_loads_no_torch_nor_matplotlib(extra):
    """whatif reads image headers only: SGLang's producer model (request/producer.py) imports no torch for shapes."""
    images = [str(ROOT / "data" / "images" / name) for name in ("chelsea.png", "astronaut.png")]
    deployment = [] if extra == ["--sweep"] else ["--sglang-version", "0.5.18", "--tp", "2"]
    rc, out, loaded, _ = _probe(["whatif", *images, *deployment, *extra])
    assert rc in (0, 1), out
    assert "SGLang" in out
    assert {lib for lib in ("torch", "matplotlib", "jsonschema") if loaded[lib]} == set()


@pytest.fixture(scope="module")
def palette_png(tmp_path_factory) -> Path:
    """An opaque palette (``P``) PNG: the coffee photo quantised to 256 colours."""
    from PIL import Image

    path = tmp_path_factory.mktemp("latency-images") / "coffee_palette.png"
    with Image.open(ROOT / "data" / "images" / "coffee.png") as image:
        image.convert("P", palette=Image.Palette.ADAPTIVE).save(path)
    return path


@pytest.mark.parametrize(
    "name",
    ["coffee_palette_transparent.png", "palette", "camera.png", "camera_vignette_la.png"],
    ids=["transparent-palette", "palette", "greyscale", "greyscale-alpha"],
)
def test_a_shapes_whatif_with_its_under_load_hint_loads_no_torch(name, palette_png):
    """A request clean alone on 0.5.18 at TP 2 gets the under-load pair hint; its replays take no torch either."""
    image = palette_png if name == "palette" else ROOT / "data" / "images" / name
    rc, out, loaded, _ = _probe(["whatif", str(image), "--sglang-version", "0.5.18", "--tp", "2"])
    assert rc == 0, out
    assert "status: clean" in out and "under load: clean alone" in out and "Smallest failing pair" in out
    assert {lib for lib in ("torch", "matplotlib", "jsonschema") if loaded[lib]} == set()


@pytest.mark.parametrize("together", [False, True], ids=["image-with-hint", "together"])
def test_a_shapes_whatif_loads_no_numpy_nor_torch(together):
    """Image headers come from Pillow alone: neither the request side, the replay nor the hint needs numpy."""
    images = ["coffee_palette_transparent.png"] if not together else ["chelsea.png", "astronaut_tiny_20x5.png"]
    paths = [str(ROOT / "data" / "images" / name) for name in images]
    rc, out, loaded, _ = _probe(
        ["whatif", *paths, *(["--together"] if together else []), "--sglang-version", "0.5.18", "--tp", "2"]
    )
    assert rc == (1 if together else 0), out
    assert ("status: error-reproduced" in out) if together else ("Smallest failing pair" in out)
    assert {lib for lib in ("numpy", "torch", "matplotlib", "jsonschema") if loaded[lib]} == set()
