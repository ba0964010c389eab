# MemoryGuard: `make run` shows the policy on the project's example traces,
# `make test` runs everything CI runs. Both set themselves up on first use.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

PHONY_TIERS := check e2e replays ray emulator realk8s
.PHONY: setup run demo test lint typecheck unit $(PHONY_TIERS) faults real-pods cgroupv2 soak bench bench-sidecar bench-hostile bench-tenants bench-tenants-real bench-flood bench-state bench-operator detection-sets psi-at-the-limit real-leak crds traces clean

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

# Tests in tiers, each selected by its marker (pyproject.toml's markers;
# tests/conftest.py marks the folders): `make check` is the fast tier for
# every change (lint, types, the core and the units, in two lanes as
# tests/lanes.py splits them);
# `make test` is everything, what CI runs.
FAST := not (replays or e2e or ray or realk8s or realpods or slow or faults or emulator or cgroupv2)

check: lint typecheck
	$(BIN)/python -m tests.lanes --fast "$(FAST)"

unit: $(STAMP)
	$(BIN)/python -m tests.lanes --fast "$(FAST)"

e2e: $(STAMP)
	$(BIN)/pytest -q -m e2e

# Whole trace sets replayed through the policy (the examples, the shared
# labelled traces, every behaviour drawn afresh): a handful stay in `check`.
replays: $(STAMP)
	$(BIN)/pytest -q -m replays

ray: $(STAMP)
	$(BIN)/pytest -q -m ray

emulator: $(STAMP)
	$(BIN)/pytest -q -m emulator

# Where ../shared/realk8s is beside the checkout: the real control plane and
# the real KubeRay (v1.7.0 and v1.5.1); skipped, saying why, elsewhere.
realk8s: $(STAMP)
	$(BIN)/pytest -q -s -m realk8s

# Two pytest processes at once, the tiers split between them (tests/lanes.py
# says how and why); the tiers' own targets above run one alone.
test: lint typecheck
	$(BIN)/python -m tests.lanes

# The policy beside a static 90% threshold: on the examples (every behaviour
# of the field, issue 13's included); on 60 pods drawn afresh from wide ranges
# (a seed the examples do not use); and on the real Ray leak `make real-leak`
# recorded (its test profile; it reached its OOM 11 minutes in, so it counts
# as caught a minute ahead, not ten).
bench: $(STAMP)
	$(BIN)/memoryguard-kuberay bench
	rm -rf .bench-drawn && $(BIN)/memoryguard-kuberay gen-traces --random 60 --seed 2026 .bench-drawn
	$(BIN)/memoryguard-kuberay bench .bench-drawn --no-cost
	rm -rf .bench-field && $(BIN)/memoryguard-kuberay gen-traces --field 4 --seed 39 .bench-field
	$(BIN)/memoryguard-kuberay bench .bench-field --no-cost
	$(BIN)/memoryguard-kuberay bench examples/recorded --guard examples/guards/test-profile.yaml --safety-seconds 60 --no-cost

# Every trace set the detection rules were read against, those drawn after,
# and two sets of the known limit, set by set (about 20 minutes of CPU, 12-14
# of wall time; --save/--against F to list what a change moved, --guard G to
# replay with a guard's settings: benchmarks/detection_sets.py).
detection-sets: $(STAMP)
	$(BIN)/python benchmarks/detection_sets.py $(ARGS)

# Regenerate the project's example traces (deterministic for the seed).
traces: $(STAMP)
	$(BIN)/memoryguard-kuberay gen-traces examples/traces

clean:
	rm -rf $(VENV) build dist */build *.egg-info */src/*.egg-info simulate.png demo.png demo-heatmap.png .bench-drawn

bench-sidecar: $(STAMP)
	$(BIN)/python benchmarks/sidecar_bench.py

crds: $(STAMP)
	$(BIN)/python -m memoryguard_kuberay.operator.crd > crds/memoryguard.io_memoryguards.yaml
	cp crds/memoryguard.io_memoryguards.yaml charts/memoryguard/crds/

bench-hostile: $(STAMP)
	$(BIN)/python benchmarks/hostile_answers.py

# One tenant's 700 hostile pods beside another tenant's leak, the real
# operator between them: its peak RSS, its longest health answer, and when
# the other tenant's leak was evicted, against the same run alone (issue 24);
# then the attacks on the real sidecar (issue 44, 6 and 7). Both are run;
# a miss in either fails it.
bench-tenants: $(STAMP)
	$(BIN)/python benchmarks/hostile_tenants.py; a=$$?; $(BIN)/python benchmarks/hostile_sidecar.py; b=$$?; \
	  test $$a -eq 0 -a $$b -eq 0

# The attacks of issue 44 that go through the API, on the real control plane
# (../shared/realk8s), against the operator as the chart installs it.
bench-tenants-real: $(STAMP)
	$(BIN)/python benchmarks/hostile_tenants_real.py

# A legitimate poller beside a request flood on one real sidecar (issue 24).
bench-flood: $(STAMP)
	$(BIN)/python benchmarks/sidecar_flood.py

# The policy's state per pod once its windows hold their whole history (issue 25).
bench-state: $(STAMP)
	$(BIN)/python benchmarks/policy_state.py

bench-operator: $(STAMP)
	$(BIN)/python benchmarks/operator_scale.py

# The fault matrix alone (it is part of `make test` too); prints the matrix.
faults: $(STAMP)
	$(BIN)/pytest -q -m faults

# As root where ../shared/realk8s is beside the checkout (part of make test):
# the real-pod tier alone (the kit's whole cluster, the chart's operator pod,
# the project's images, a real leak, a real Prometheus).
real-pods: $(STAMP)
	$(BIN)/pytest -q -s tests/realpods

# The sidecar on a real cgroup v2 kernel, and the v1 layout of that kernel
# (../shared/cgroupv2 under QEMU; root): two VMs, about 8 minutes.
cgroupv2: $(STAMP)
	$(BIN)/pytest -q -s -m cgroupv2

# About 10 minutes, not in CI: 200 workers, faults at random; exits 1 on any
# invariant violation.
soak: $(STAMP)
	$(BIN)/python benchmarks/soak.py

# As root, about 10 minutes, not in CI: memory pressure (PSI) of a cgroup held
# at 70-96% of its memory.max on a real cgroup v2 kernel (../shared/cgroupv2),
# with a page-cache working set that fits beside it or not (docs/facts.md).
psi-at-the-limit: $(STAMP)
	$(BIN)/python benchmarks/psi_at_the_limit.py

# As root, at most 15 minutes, not in CI: a real Ray in a memory cgroup with a
# real limit leaks until the kernel OOM-kills it; the policy (test profile,
# examples/guards/test-profile.yaml) runs on the real sidecar's samples as
# they arrive, and the ladder beside it. Prints the lead; exits 1 if the
# kernel came first. The trace is kept in examples/recorded. The ladder's
# other cases: `make real-leak ARGS="--workload cyclic"` (or cache).
real-leak: $(STAMP)
	$(BIN)/python benchmarks/real_leak.py $(ARGS)

# The embedded demo: the real operator and sidecars on an emulated cluster.
demo: $(STAMP)
	$(BIN)/memoryguard-kuberay demo
