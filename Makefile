# Two entry points for people: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU torch pinned for machines without a GPU; `make TORCH_CONSTRAINTS= test` installs an unpinned torch.
TORCH_CONSTRAINTS ?= constraints/cpu-torch.txt
PIP_CONSTRAINT_ARG := $(if $(TORCH_CONSTRAINTS),-c $(TORCH_CONSTRAINTS),)
DEMO_OUT ?= demo-out

.PHONY: demo test install bench clean

$(VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_CONSTRAINT_ARG) -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/kimi-viz demo --out $(DEMO_OUT)

test: $(VENV)/.installed
	$(PY) -m pytest -q --nbmake --nbmake-timeout=300 tests notebooks

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_processor.py
	$(PY) benchmarks/bench_plots.py
	$(PY) benchmarks/bench_deferred.py
	$(PY) benchmarks/bench_capture.py
	$(PY) benchmarks/bench_encoder.py --device cpu --preset tiny --quick

clean:
	rm -rf $(VENV) build $(DEMO_OUT)
