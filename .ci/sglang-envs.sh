#!/usr/bin/env bash
# Build the virtual environments of the SGLang parity lane: the REAL sglang 0.5.23 and 0.5.18
# releases, importable on a CPU-only machine, each with this kit installed (-e) and the test runners.
# Beside them, the sources of the releases each venv hosts (GUESTS below): the sglang/ folder of each
# guest's wheel under DIR/sources/<release>/, which the lane puts first on PYTHONPATH to import that
# release with its host's packages (tests/parity/server_args_probe.py; make parity passes
# KIMI_VIZ_SGLANG_SOURCES=DIR/sources).
#
#   bash .ci/sglang-envs.sh [DIR]        # DIR defaults to .venv-sglang in the repository root
#   DIR/0.5.23/bin/python -m pytest -q tests/test_sglang_parity.py
#
# CI clones the repository afresh for each run, so pass a DIR outside the clone (say
# /var/cache/kimi-viz-sglang) for the cache to survive between runs; with the default DIR every CI
# run builds both venvs from scratch (about 2 to 3 minutes each on 2 cores).
#
# Each venv is described by constraints/sglang-<release>.txt: the exact pins of every package in it
# (sglang itself aside). sglang goes in with --no-deps: its own requirements name CUDA builds
# (flashinfer, deep-gemm, torch==2.14.1, ...) that neither install nor run here. torch is always the
# CPU wheel torch==2.13.0 from this machine's disk: every pip call that resolves dependencies runs
# with -c constraints/sglang-<release>.txt, which pins it, and the others run with --no-deps.
#
# Cached: a venv whose stamp matches the hash of this script, its constraints file, the release and
# the Python build is left alone (a second run costs seconds); only the kit's editable install is
# redone when the venv was built for a checkout in another folder. Any failure exits non-zero with
# the step that failed; a half-built venv has no stamp, so the next run rebuilds it from scratch.
# A guest's sources are stamped likewise (the wheel they came from): unzipped into a .partial folder,
# import-checked with the host venv, then moved into place. It never touches the main .venv.
#
# Environment: SGLANG_ENVS_PYTHON (default python3.11), SGLANG_ENVS_RELEASES (default
# "0.5.23 0.5.18"), SGLANG_ENVS_CACHE (where `pip download` keeps the sglang wheels; default
# DIR/.cache/wheels).
set -Eeuo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "$SCRIPT")/.." && pwd -P)"
PYTHON="${SGLANG_ENVS_PYTHON:-python3.11}"
RELEASES="${SGLANG_ENVS_RELEASES:-0.5.23 0.5.18}"
# The releases each venv imports besides its own, from their sources (tests/parity/server_args_probe.py HOSTS).
declare -A GUESTS=([0.5.18]="0.5.17 0.5.19 0.5.20" [0.5.23]="0.5.21 0.5.22")
STEP="start"

die() {
  echo "sglang-envs: FAILED: $*" >&2
  exit 1
}
trap 'rc=$?; echo "sglang-envs: FAILED at step: $STEP (exit $rc); see the output above" >&2; exit $rc' ERR
step() {
  STEP="$1"
  echo "sglang-envs: [$(date +%T)] $STEP"
}

DIR="$(realpath -m -- "${1:-$ROOT/.venv-sglang}")"
case "$DIR" in
  / | "$ROOT" | "${HOME:-/}") die "refusing to use $DIR itself as the venv folder" ;;
  "$ROOT/.venv" | "$ROOT/.venv/"*) die "refusing to build inside the main virtual environment ($ROOT/.venv)" ;;
esac
mkdir -p "$DIR" || die "cannot create $DIR"
CACHE="${SGLANG_ENVS_CACHE:-$DIR/.cache/wheels}"
mkdir -p "$CACHE"
SOURCES="$DIR/sources"

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set SGLANG_ENVS_PYTHON to a CPython 3.11)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1), the parity lane needs CPython 3.11 (sglang's cp311 wheels)"

# One build at a time per DIR (two CI jobs on one machine would otherwise rm -rf each other's venv).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$DIR/.lock"
  flock 9
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONNOUSERSITE=1
unset VIRTUAL_ENV PYTHONPATH PIP_REQUIRE_VIRTUALENV || true

# ---------------------------------------------------------------------------------------------
# torchvision placeholder. sglang imports torchvision at module load on the Kimi-K3 paths
# (sglang.srt.configs -> nano_nemotron_vl -> multimodal.internvl_utils: `import torchvision.transforms`
# and `from torchvision.transforms.functional import InterpolationMode`), and transformers, which
# decides that torchvision is there from importlib.util.find_spec alone, then runs
# `from torchvision.io import ImageReadMode, decode_image`, `from torchvision.transforms import
# InterpolationMode`, `from torchvision.transforms.functional import pil_to_tensor` and
# `from torchvision.transforms.v2 import functional`. PyPI's torchvision cannot be used: it fails to
# import beside the CPU torch 2.13.0 ("operator torchvision::nms does not exist"), and the releases
# that do match pull a multi-GB CUDA torch. No Kimi-K3 code path calls torchvision, so the
# placeholder defines only those import-time names (the two enums with torchvision's members and
# values; the functions raise NotImplementedError) and any other attribute raises AttributeError
# saying it is a placeholder. It has no dist-info, so pip never sees it as installed.
write_torchvision_placeholder() {
  local site="$1" tv="$1/torchvision"
  rm -rf "$tv"
  mkdir -p "$tv/io" "$tv/transforms/v2"
  cat >"$tv/_placeholder.py" <<'PY'
"""Placeholder torchvision written by .ci/sglang-envs.sh (see the comment there)."""

MESSAGE = ("this torchvision is a placeholder written by .ci/sglang-envs.sh: PyPI's torchvision does not import "
           "beside the CPU torch 2.13.0, and the Kimi-K3 paths never call it; only the names that SGLang and "
           "transformers touch at import time exist")


def missing(module, name):
    raise AttributeError(f"{module}.{name}: {MESSAGE}")


def unavailable(qualname):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"{qualname}: {MESSAGE}")

    stub.__name__ = qualname.rsplit(".", 1)[-1]
    stub.__qualname__ = stub.__name__
    return stub
PY
  cat >"$tv/__init__.py" <<'PY'
"""Placeholder torchvision for the SGLang parity venvs (see _placeholder.py)."""

__version__ = "0.0.0+placeholder"
PLACEHOLDER = True

from . import io, transforms  # noqa: E402,F401


def __getattr__(name):
    from ._placeholder import missing

    missing(__name__, name)
PY
  cat >"$tv/io/__init__.py" <<'PY'
from enum import Enum

from .._placeholder import missing, unavailable


class ImageReadMode(Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


decode_image = unavailable("torchvision.io.decode_image")
decode_jpeg = unavailable("torchvision.io.decode_jpeg")


def __getattr__(name):
    missing(__name__, name)
PY
  cat >"$tv/transforms/__init__.py" <<'PY'
from .._placeholder import missing
from . import functional, v2  # noqa: F401
from .functional import InterpolationMode  # noqa: F401


def __getattr__(name):
    missing(__name__, name)
PY
  cat >"$tv/transforms/functional.py" <<'PY'
from enum import Enum

from .._placeholder import missing, unavailable


class InterpolationMode(Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


pil_to_tensor = unavailable("torchvision.transforms.functional.pil_to_tensor")
to_tensor = unavailable("torchvision.transforms.functional.to_tensor")


def __getattr__(name):
    missing(__name__, name)
PY
  cat >"$tv/transforms/v2/__init__.py" <<'PY'
from ..._placeholder import missing
from . import functional  # noqa: F401


def __getattr__(name):
    missing(__name__, name)
PY
  cat >"$tv/transforms/v2/functional.py" <<'PY'
from ..._placeholder import missing


def __getattr__(name):
    missing(__name__, name)
PY
}

# The venv must hold exactly the pinned packages, plus sglang and the kit.
check_pins() {
  local py="$1" cons="$2" rel="$3"
  "$py" - "$cons" "$rel" <<'PY'
import re, sys
from importlib import metadata

cons, rel = sys.argv[1], sys.argv[2]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
want = {}
for line in open(cons):
    line = line.split("#", 1)[0].strip()
    if line:
        name, _, version = line.partition("==")
        want[norm(name)] = version.strip()
have = {norm(d.metadata["Name"]): d.version.split("+")[0] for d in metadata.distributions()}
extra = {"pip": None, "sglang": rel, "kimi-viz": None}
problems = []
for name, version in sorted(have.items()):
    if name in extra:
        if extra[name] and version != extra[name]:
            problems.append(f"{name} is {version}, expected {extra[name]}")
    elif name not in want:
        problems.append(f"{name}=={version} is installed but not pinned in {cons}")
    elif version != want[name]:
        problems.append(f"{name} is {version} but {cons} pins {want[name]}")
problems += [f"{name}=={version} is pinned but not installed" for name, version in sorted(want.items())
             if name not in have]
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
PY
}

# Every module the parity lane uses must import, with the names it reaches for.
smoke_check() {
  local py="$1" rel="$2"
  "$py" - "$rel" <<'PY'
import importlib, sys, warnings

warnings.filterwarnings("ignore")
rel = sys.argv[1]
import torch

assert torch.__version__.startswith("2.13.0") and torch.version.cuda is None, \
    f"torch must be the CPU build 2.13.0, got {torch.__version__} (cuda {torch.version.cuda})"
import torchvision

assert getattr(torchvision, "PLACEHOLDER", False), "torchvision is not the placeholder"
import sglang

assert sglang.__version__ == rel, f"sglang is {sglang.__version__}, expected {rel}"
need = {
    "sglang.srt.models.kimi_k3": ["KimiK3ForConditionalGeneration", "KimiK3VisionTower", "KimiK3MultiModalProjector"],
    "sglang.srt.models.kimi_k3_vl": ["KimiK3VisionTower", "KimiK3MultiModalProjector"],
    "sglang.srt.configs.kimi_k3": ["KimiK3VisionConfig"],
    "sglang.srt.multimodal.kimi_k3_image_processing": ["DEFERRED_PREPROCESSING_KEY", "KimiK3DeferredPreprocessing"],
    "sglang.srt.multimodal.mm_utils": ["get_dp_encoder_lb_assignment", "run_dp_sharded_mrope_vision_model"],
    "sglang.srt.multimodal.processors.kimi_k25": ["navit_resize_config", "_gpu_preprocess_images",
                                                 "_grid_thw_from_resize_config"],
    "sglang.srt.multimodal.processors.kimi_k3": [],
    "sglang.srt.managers.schedule_batch": ["MultimodalDataItem", "Modality"],
    "pytest": [], "hypothesis": [], "pytest_timeout": [], "matplotlib.pyplot": [],
    "kimi_viz.split._replay": ["replay"], "kimi_viz.scenarios": ["SCENARIOS"],
}
if rel == "0.5.18":
    need.update({"xgrammar": [], "httpx": []})
failed = []
for name, attrs in need.items():
    sys.dont_write_bytecode = name.startswith("kimi_viz")  # no __pycache__ in the checkout
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        failed.append(f"import {name}: {type(exc).__name__}: {exc}")
        continue
    failed += [f"{name} has no {attr}" for attr in attrs if not hasattr(module, attr)]
if failed:
    print("\n".join(failed), file=sys.stderr)
    sys.exit(1)
print(f"sglang-envs: sglang {sglang.__version__}, torch {torch.__version__}: all Kimi-K3 modules import")
PY
}

# The kit, editable, from this checkout. Its dependencies are all pinned, so -c adds nothing.
install_kit() {
  local v="$1" cons="$2"
  step "$(basename "$v"): kit (-e $ROOT)"
  "$v/bin/python" -m pip install -qq --no-warn-conflicts --no-build-isolation -c "$cons" -e "$ROOT"
  echo "$ROOT" >"$v/.kimi-viz-root"
}

# The wheel of sglang==$rel in $CACHE (downloaded with the host venv's pip, --no-deps, when missing).
wheel_of() {
  local rel="$1" py="$2" wheel
  wheel="$(ls "$CACHE"/sglang-"$rel"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ]; then
    "$py" -m pip download -qq --no-deps --only-binary=:all: -d "$CACHE" "sglang==$rel" >&2
    wheel="$(ls "$CACHE"/sglang-"$rel"-*.whl 2>/dev/null | head -n1 || true)"
  fi
  [ -n "$wheel" ] || die "pip download left no sglang-$rel wheel in $CACHE"
  echo "$wheel"
}

build() {
  local rel="$1" v="$DIR/$1" cons="$ROOT/constraints/sglang-$1.txt" stamp wheel site start
  [ -f "$cons" ] || die "no constraints file for sglang $rel: $cons"
  grep -qx 'torch==2.13.0\( .*\)\{0,1\}' "$cons" || die "$cons must pin torch==2.13.0 (the CPU wheel)"
  stamp="$({ cat "$SCRIPT" "$cons"; echo "release=$rel"; "$PYTHON" -VV; } | sha256sum | cut -d' ' -f1)"

  if [ -x "$v/bin/python" ] && [ "$(cat "$v/.sglang-envs-stamp" 2>/dev/null)" = "$stamp" ]; then
    if [ "$(cat "$v/.kimi-viz-root" 2>/dev/null)" != "$ROOT" ]; then
      install_kit "$v" "$cons"
    fi
    echo "sglang-envs: $v is up to date (stamp $stamp)"
    return 0
  fi

  start=$SECONDS
  step "$rel: new venv $v"
  if [ -e "$v" ] && [ ! -f "$v/pyvenv.cfg" ]; then
    die "$v exists and is not a virtual environment; not removing it"
  fi
  rm -rf "$v"
  "$PYTHON" -m venv "$v"
  local pip=("$v/bin/python" -m pip)

  # --no-compile: byte-compiling torch, triton and sglang on install costs minutes on 2 cores; the
  # import check below compiles (and caches) just the modules the lane imports.
  step "$rel: pinned packages from $cons (torch==2.13.0 CPU)"
  "${pip[@]}" install -qq --no-compile -c "$cons" -r "$cons"

  step "$rel: download sglang==$rel (--no-deps) into $CACHE"
  wheel="$(wheel_of "$rel" "$v/bin/python")"

  step "$rel: install $(basename "$wheel") --no-deps"
  "${pip[@]}" install -qq --no-compile --no-deps --no-warn-conflicts "$wheel"

  step "$rel: torchvision placeholder"
  site="$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  write_torchvision_placeholder "$site"

  install_kit "$v" "$cons"

  step "$rel: check the venv holds exactly the pins of $cons"
  check_pins "$v/bin/python" "$cons" "$rel"

  # With PYTHONDONTWRITEBYTECODE unset, this import check also leaves the .pyc files of every
  # module the lane imports in the venv, so later runs (where that variable may be set) start fast.
  step "$rel: import check"
  (unset PYTHONDONTWRITEBYTECODE; MPLBACKEND=Agg smoke_check "$v/bin/python" "$rel")

  echo "$stamp" >"$v/.sglang-envs-stamp"
  echo "sglang-envs: built $v in $((SECONDS - start)) s ($(du -sh "$v" | cut -f1))"
}

# A guest release's sources: only sglang/ of its wheel, in $SOURCES/$rel, import-checked with its host's venv.
sources() {
  local host="$1" rel="$2" py="$DIR/$1/bin/python" dest="$SOURCES/$2" wheel stamp
  [ -x "$py" ] || die "no venv for sglang $host at $DIR/$host, which hosts $rel"
  step "$rel: sources (hosted by the $host venv)"
  wheel="$(wheel_of "$rel" "$py")"
  stamp="sglang==$rel from $(basename "$wheel")"
  if [ "$(cat "$dest/.sglang-sources-stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$dest/sglang/srt/server_args.py" ]; then
    echo "sglang-envs: $dest is up to date ($stamp)"
    return 0
  fi
  rm -rf "$dest" "$dest.partial"
  mkdir -p "$dest.partial"
  step "$rel: unzip sglang/ of $(basename "$wheel") into $dest"
  "$py" - "$wheel" "$dest.partial" <<'PY'
import sys, zipfile

wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    members = [name for name in archive.namelist() if name.startswith("sglang/")]
    if not any(name == "sglang/srt/server_args.py" for name in members):
        sys.exit(f"{wheel} holds no sglang/srt/server_args.py")
    archive.extractall(dest, members)  # ZipFile.extractall keeps every member inside dest
PY
  step "$rel: import check with the $host venv (PYTHONPATH=$dest)"
  PYTHONPATH="$dest.partial" PYTHONDONTWRITEBYTECODE=1 "$py" -c '
import sys, warnings
warnings.filterwarnings("ignore")
import sglang
from sglang.srt.server_args import ServerArgs
want = sys.argv[1]
if sglang.__version__ != want or not sglang.__file__.startswith(sys.argv[2]):
    sys.exit(f"import sglang gave {sglang.__version__} from {sglang.__file__}, expected {want} from {sys.argv[2]}")
' "$rel" "$dest.partial"
  mv "$dest.partial" "$dest"
  echo "$stamp" >"$dest/.sglang-sources-stamp"
}

for rel in $RELEASES; do
  build "$rel"
done
for rel in $RELEASES; do
  for guest in ${GUESTS[$rel]:-}; do
    sources "$rel" "$guest"
  done
done
STEP="done"
echo "sglang-envs: ready: $(for rel in $RELEASES; do printf '%s ' "$DIR/$rel"; done)"
echo "sglang-envs: sources: $(for rel in $RELEASES; do for g in ${GUESTS[$rel]:-}; do printf '%s ' "$SOURCES/$g"; done; done)"
