# MemoryGuard: `make run` shows the policy on the project's example traces,
# `make test` runs everything CI runs. Both set themselves up on first use.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: setup run demo test lint typecheck unit faults soak bench bench-sidecar bench-hostile bench-operator crds traces clean

PARTS   := core sidecar operator devkit

# The parts are distributions that depend on each other by name: installed
# together, from this checkout, never looked up by name alone.
$(STAMP): pyproject.toml $(PARTS:%=%/pyproject.toml)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(PARTS:%=-e ./%) -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job on its embedded default: replay the example traces through the
# policy beside a static threshold, and draw why it acted.
run: $(STAMP)
	$(BIN)/memoryguard-kuberay bench
	$(BIN)/memoryguard-kuberay simulate --plot simulate.png examples/traces/leak_steady.csv examples/traces/healthy_gc_sawtooth.csv examples/traces/fragmentation_flattens.csv examples/traces/plasma_never_released.csv

lint: $(STAMP)
	$(BIN)/ruff check --no-cache core sidecar operator devkit tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy $(PARTS:%=%/src)

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/memoryguard-kuberay bench

# Regenerate the project's example traces (deterministic for the seed).
traces: $(STAMP)
	$(BIN)/memoryguard-kuberay gen-traces examples/traces

clean:
	rm -rf $(VENV) build dist */build *.egg-info */src/*.egg-info simulate.png

bench-sidecar: $(STAMP)
	$(BIN)/python benchmarks/sidecar_bench.py

crds: $(STAMP)
	$(BIN)/python -m memoryguard_kuberay.operator.crd > crds/memoryguard.io_memoryguards.yaml

bench-hostile: $(STAMP)
	$(BIN)/python benchmarks/hostile_answers.py

bench-operator: $(STAMP)
	$(BIN)/python benchmarks/operator_scale.py

# The fault matrix alone (it is part of `make test` too); prints the matrix.
faults: $(STAMP)
	$(BIN)/pytest -q tests/faults

# About 10 minutes, not in CI: 200 workers, faults at random; exits 1 on any
# invariant violation.
soak: $(STAMP)
	$(BIN)/python benchmarks/soak.py

# The embedded demo: the real operator and sidecars on an emulated cluster.
demo: $(STAMP)
	$(BIN)/memoryguard-kuberay demo
