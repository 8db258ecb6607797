#!/usr/bin/env bash
# The kit as users get it from pip: build the sdist and the wheel, `twine check` both, install the
# wheel in a clean venv outside the checkout (CPU torch pinned by the constraints file) and run the
# demo, every scenario and the notebooks' sample-data look-up from there, in a folder that is not
# the checkout, so nothing can come from the source tree.
# Usage: .ci/wheel-check.sh [WORK_DIR]   (default: a fresh temporary folder, removed afterwards)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
constraints="$repo/constraints/cpu-torch.txt"
work="${1:-}"
if [ -z "$work" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
step() { echo "--- $1"; }

step "build the sdist and the wheel"
"$python" -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q build twine
# Run from outside the checkout: its build/ folder would shadow the `build` package.
(cd "$work" && "$work/build-env/bin/python" -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1) \
  || { tail -30 "$work/build.log" >&2; exit 1; }
ls -l "$work/dist"
step "twine check"
"$work/build-env/bin/twine" check --strict "$work"/dist/*
wheel="$(ls "$work"/dist/kimi_viz-*.whl)"
images=$(unzip -l "$wheel" | grep -c 'kimi_viz/_data/images/.*\.\(png\|jpg\)$' || true)
echo "the wheel carries $images sample images"
[ "$images" -eq "$(ls "$repo"/data/images/*.png "$repo"/data/images/*.jpg | wc -l)" ] \
  || { echo "the wheel does not carry every image of data/images" >&2; exit 1; }
logs=$(unzip -l "$wheel" | grep -c 'kimi_viz/_data/logs/.*\.log$' || true)
echo "the wheel carries $logs sample server log(s)"
[ "$logs" -eq "$(ls "$repo"/data/logs/*.log | wc -l)" ] \
  || { echo "the wheel does not carry every log of data/logs" >&2; exit 1; }

step "install the wheel in a clean venv"
"$python" -m venv "$work/user-env"
"$work/user-env/bin/pip" install -q -c "$constraints" "$wheel"
kv="$work/user-env/bin/kimi-viz"
run_dir="$work/elsewhere"
mkdir -p "$run_dir"
cd "$run_dir"
"$work/user-env/bin/python" - <<'EOF'
import kimi_viz, kimi_viz.data as data
where = data.images_dir()
assert "site-packages" in str(where), f"sample images read from {where}, not from the installed wheel"
print(f"kimi_viz {kimi_viz.__version__} from {kimi_viz.__file__}; {len(data.sample_images())} sample images in {where}")
log = kimi_viz.sample_log()
assert "site-packages" in str(log), f"sample log read from {log}, not from the installed wheel"
print(f"sample server log {log}")
EOF

step "kimi-viz demo from the installed wheel"
"$kv" demo --out "$run_dir/demo-out"
ls "$run_dir/demo-out"

step "every scenario from the installed wheel"
count=0
names="$("$kv" scenario list --json | "$work/user-env/bin/python" -c 'import json, sys; print("\n".join(s["name"] for s in json.load(sys.stdin)))')"
for name in $names; do
  # 0 clean, 1 error reproduced, 3 silent mismatch: the verdicts a scenario can have; 2 is bad input.
  code=0
  "$kv" scenario run "$name" >"$run_dir/scenario.txt" 2>&1 || code=$?
  case "$code" in
    0|1|3) ;;
    *) echo "scenario $name exited $code from the wheel:" >&2; cat "$run_dir/scenario.txt" >&2; exit 1 ;;
  esac
  count=$((count + 1))
done
echo "$count scenarios ran from the installed wheel"

step "pip install . (not editable) from the checkout, then run from elsewhere"
"$work/user-env/bin/pip" install -q --force-reinstall --no-deps "$repo"
"$work/user-env/bin/python" -c "import kimi_viz.data as d; assert 'site-packages' in str(d.images_dir()); print(len(d.sample_images()), 'sample images in', d.images_dir())"
code=0
"$kv" scenario run s1-cpu >/dev/null || code=$?
[ "$code" -eq 1 ] || { echo "scenario s1-cpu exited $code after pip install . (expected 1, the error reproduced)" >&2; exit 1; }
echo "pip install . gives a kit whose scenarios run"
