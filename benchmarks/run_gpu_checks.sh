#!/usr/bin/env bash
# The one script to run on a GPU machine: CUDA pixels against the CPU path, the encoder's GPU checks, its benchmark.
#
#   benchmarks/run_gpu_checks.sh [OUTDIR]        # OUTDIR defaults to $OUT, else ./gpu-results
#
# Needs a Python with a CUDA build of torch and the kit's dependencies (set PYTHON to choose it): the encoder
# imports nothing else at module level, the benchmark uses random weights (no safetensors), and
# tqdm is imported only when a progress bar is asked for (never here: stderr goes to a log).
# Writes into OUTDIR:
#   environment.txt        GPU, driver, torch and CUDA versions
#   bench_encoder.json     checks, matmul ceiling, every timing row and the targets
#   bench_encoder.md       the same as markdown tables (also printed to stdout)
#   bench_encoder.log      progress and warnings
#   gpu_pixels.json/.md    SGLang's torch pixel path on CUDA against the CPU, every sample image, both presets
# Exit status: 1 when a correctness check (encoder or pixels) fails, else that of the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-${OUT:-gpu-results}}"
mkdir -p "$OUTDIR"

if [ -z "${PYTHON:-}" ]; then
  for candidate in python3 python .venv/bin/python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import numpy, torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      PYTHON="$candidate"; break
    fi
  done
fi
PYTHON="${PYTHON:-python3}"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi not available"
  "$PYTHON" -c "import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda available', torch.cuda.is_available())"
} > "$OUTDIR/environment.txt" 2>&1
cat "$OUTDIR/environment.txt"

timeout 120 "$PYTHON" benchmarks/gpu_pixels.py --device cuda --json "$OUTDIR/gpu_pixels.json" | tee "$OUTDIR/gpu_pixels.md"
pixels=${PIPESTATUS[0]}

timeout "${BENCH_TIMEOUT:-480}" "$PYTHON" benchmarks/bench_encoder.py --checks --json "$OUTDIR/bench_encoder.json" \
  2> "$OUTDIR/bench_encoder.log"
status=$?
echo "--- bench_encoder.log (tail)"
tail -n 30 "$OUTDIR/bench_encoder.log"
[ "$pixels" -eq 0 ] || { echo "CUDA pixels differ from the CPU path by more than one level (see gpu_pixels.md)"; exit 1; }
exit $status
