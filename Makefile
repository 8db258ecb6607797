# Two entry points for people: `make demo` and `make test`. Both create .venv when it is missing.
# For developers: `make lint`, `make test-fast` (no browser, no slow tests) and `make parity` (the
# real-SGLang lane, in its own venvs under .venv-sglang/).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU torch pinned for machines without a GPU; `make TORCH_CONSTRAINTS= test` installs an unpinned torch.
TORCH_CONSTRAINTS ?= constraints/cpu-torch.txt
PIP_CONSTRAINT_ARG := $(if $(TORCH_CONSTRAINTS),-c $(TORCH_CONSTRAINTS),)
DEMO_OUT ?= demo-out
SGLANG_ENVS ?= .venv-sglang
PARITY_RELEASES ?= 0.5.23 0.5.18
PARITY_REPORT ?= build/parity.jsonl

.PHONY: demo screenshots test test-fast lint parity wheel-check install bench clean

$(VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_CONSTRAINT_ARG) -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/kimi-viz demo --out $(DEMO_OUT)

# The README's pictures, regenerated from a fresh `make demo` (figures copied, two reports as Chromium shows them).
screenshots: demo
	$(PY) docs/regenerate_images.py $(DEMO_OUT)

test: $(VENV)/.installed
	$(PY) -m pytest -q --nbmake --nbmake-timeout=300 tests notebooks --ignore=tests/parity

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not browser and not slow" tests --ignore=tests/parity

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check kimi_viz tests benchmarks docs notebooks/*.py
	$(VENV)/bin/ruff format --check kimi_viz tests benchmarks docs notebooks/*.py
	$(VENV)/bin/mypy

# The real SGLang releases, each in a venv of its own (CPU torch, sglang --no-deps), and the sources of
# the releases each venv hosts (server arguments: $(SGLANG_ENVS)/sources); the lane fails, never skips,
# when a release does not import or a hosted release's sources are missing. Counts per release: $(PARITY_REPORT).
parity:
	bash .ci/sglang-envs.sh $(SGLANG_ENVS)
	mkdir -p $(dir $(PARITY_REPORT)) && rm -f $(PARITY_REPORT)
	for release in $(PARITY_RELEASES); do \
	  KIMI_VIZ_REQUIRE_SGLANG=1 KIMI_VIZ_PARITY_REPORT=$(PARITY_REPORT) KIMI_VIZ_SGLANG_SOURCES=$(abspath $(SGLANG_ENVS))/sources \
	    $(SGLANG_ENVS)/$$release/bin/python -m pytest -q -p no:cacheprovider -W ignore tests/parity || exit 1; \
	done
	$(PYTHON) tests/parity/summary.py $(PARITY_REPORT)

# Build the sdist and wheel, twine-check them, install the wheel in a clean venv and run the demo there.
wheel-check:
	PYTHON=$(PYTHON) bash .ci/wheel-check.sh

# The processor benchmark times SGLang's own torch path when the lane's 0.5.23 venv is there (else a transcription).
bench: $(VENV)/.installed
	if [ -x $(SGLANG_ENVS)/0.5.23/bin/python ]; then $(SGLANG_ENVS)/0.5.23/bin/python benchmarks/bench_processor.py; \
	else $(PY) benchmarks/bench_processor.py; fi
	$(PY) benchmarks/bench_plots.py
	$(PY) benchmarks/bench_deferred.py
	$(PY) benchmarks/bench_capture.py
	$(PY) benchmarks/bench_cli.py
	$(PY) benchmarks/bench_whatif.py
	$(PY) benchmarks/bench_load.py
	$(PY) benchmarks/bench_conversation_sweep.py
	if [ -x $(SGLANG_ENVS)/0.5.23/bin/python ]; then KIMI_VIZ_SGLANG_ENV=$(SGLANG_ENVS)/0.5.23 $(PY) benchmarks/bench_memory.py; \
	else $(PY) benchmarks/bench_memory.py; fi
	if [ -x $(SGLANG_ENVS)/0.5.23/bin/python ]; then KIMI_VIZ_SGLANG_ENV=$(SGLANG_ENVS)/0.5.23 $(PY) benchmarks/bench_peak_hours.py; \
	else $(PY) benchmarks/bench_peak_hours.py; fi
	$(PY) benchmarks/bench_encoder.py --device cpu --preset tiny --quick

clean:
	rm -rf $(VENV) $(SGLANG_ENVS) build $(DEMO_OUT)
