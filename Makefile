# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
# Two install stamps: the demo needs the package and its `demo` extra only; the tests need
# the whole tool chain. The `test` extra holds the `demo` one, so a test install also counts
# as a demo install, and either target works first on a fresh clone.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed-test

.PHONY: demo test extended faults compat compat-site conformance trainer deepspeed parallel lint typecheck differential \
	venv clean gpu gpu-smoke gpu-wheels examples ecosystem

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is pinned for development and CI (a CPU build, from local disk where it is cached).
$(DEMO_STAMP): pyproject.toml constraints-dev.txt | $(BIN)/python
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints-dev.txt -e ".[demo]"
	touch $(DEMO_STAMP)

# Install the package (editable) with its test extras.
$(STAMP): pyproject.toml constraints-dev.txt | $(BIN)/python
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints-dev.txt -e ".[test]"
	touch $(STAMP) $(DEMO_STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Every suite, less the cases marked `extended` (CPU Adam, whose first use compiles it for
# minutes, and the example DeepSpeed configs that need it; most 4- and 8-process layouts; the
# repeats of a suite under its other variants): a faster case of each stays, and the whole
# stays under 30 minutes on 2 cores. `make extended` runs exactly what is left out here.
# The one-process tests run two at a time (pytest-xdist, one per core); the distributed ones,
# which start 2-4 processes each, one at a time.
test: $(STAMP) compat-site lint typecheck
	$(BIN)/python -m pytest -q -n 2 --durations=15 tests -m "not extended and not distributed"
	$(BIN)/python -m pytest -q --durations=25 tests -m "not extended and distributed"

# The cases `make test` leaves out (see `extended` in pyproject.toml).
extended: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25 tests -m extended

# Every DeepSpeed test: ZeRO 0-3 and offload on CPU processes, resume, the example configs.
deepspeed: $(STAMP)
	$(BIN)/python -m pytest -q tests -m deepspeed

# The 4-process layouts (tensor x data parallel, FSDP2 x TP and its checkpoints) alone.
parallel: $(STAMP)
	$(BIN)/python -m pytest -q tests -m four_processes

# The fault attacks alone (they also run in `make test`).
faults: $(STAMP)
	$(BIN)/python -m pytest -q tests/faults

# Hugging Face Accelerate's own test scripts, ported by renaming imports, on 2 processes
# (tests/compat; minutes, so not part of `make test`). Its package goes to a test-only folder,
# never into the virtualenv, so `import accelerate` stays unavailable to overdrive's code.
COMPAT_SITE := .compat/site
COMPAT_VERSION := 1.15.0
$(COMPAT_SITE)/.installed-$(COMPAT_VERSION): | $(BIN)/python
	$(PIP) install --quiet --no-deps --target $(COMPAT_SITE) accelerate==$(COMPAT_VERSION)
	touch $@

# The surface check in `make test` (tests/surface) reads the pinned package's public names here.
compat-site: $(COMPAT_SITE)/.installed-$(COMPAT_VERSION)

compat: $(STAMP) $(COMPAT_SITE)/.installed-$(COMPAT_VERSION)
	OVERDRIVE_COMPAT=1 OVERDRIVE_COMPAT_SITE=$(COMPAT_SITE) $(BIN)/python -m pytest -q tests/compat

# Generated training programs under Hugging Face Accelerate (the pinned package in the
# test-only .compat/site) and under overdrive, as `accelerate` and as `overdrive`, on 1 and 2
# CPU processes, compared bitwise (tests/differential; `make test` runs a fixed slice).
DIFFERENTIAL_COUNT ?= 250
differential: $(STAMP) $(COMPAT_SITE)/.installed-$(COMPAT_VERSION)
	$(BIN)/python -m tests.differential.run --count $(DIFFERENTIAL_COUNT) --nprocs 1 2

# Hugging Face Accelerate's own unit tests (its PyPI source distribution's tests/, the pinned
# version), run against it and, after the mechanical rename, against overdrive; the per-file
# table goes into docs/migrating.md. The test dependencies it needs that overdrive does not
# go to a folder of their own, on the path of both runs. The sdist leaves out the tests' data
# folders (tests/test_configs, tests/test_samples): CONFORMANCE_DATA_REPO=<a git directory of
# its repository> adds them, so the tests that read them run too.
CONFORMANCE_DEPS := parameterized
.conformance/deps/.installed: | $(BIN)/python
	$(PIP) install --quiet --no-deps --target .conformance/deps $(CONFORMANCE_DEPS)
	touch $@

conformance: $(STAMP) $(COMPAT_SITE)/.installed-$(COMPAT_VERSION) .conformance/deps/.installed
	$(BIN)/python -m tests.conformance.run --write-docs

# transformers' own Trainer tests (its repository's tests/trainer at the tag of the pinned
# transformers; not on PyPI, so `tests/trainer_conformance/fetch.py` clones them into the
# ignored .trainer-conformance/src), unchanged, under Hugging Face Accelerate and under
# overdrive; the per-file table goes into docs/trainer.md. Slow, and it needs GitHub (or a
# cache seeded by hand), so it is not part of `make test`. Their test dependencies that
# overdrive does not need go to a folder of their own, on the path of both runs.
TRAINER_DEPS := datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 parameterized==0.9.0
.trainer-conformance/deps/.installed: | $(BIN)/python
	$(PIP) install --quiet --no-deps --target .trainer-conformance/deps $(TRAINER_DEPS)
	touch $@

trainer: $(STAMP) $(COMPAT_SITE)/.installed-$(COMPAT_VERSION) .trainer-conformance/deps/.installed
	$(BIN)/python -m tests.trainer_conformance.run --write-docs

# Hugging Face Accelerate's own examples (its repository's examples/, fetched into the ignored
# .examples/src by tests/examples/fetch.py; EXAMPLES_REPO=<mirror> where GitHub is out of
# reach), adapted to a tiny model and generated data by tests/examples/adapt, run under it
# and, renamed, under overdrive on 1 and 2 CPU processes; the final weights are compared
# and the per-example table goes into docs/migrating.md. Minutes, so not part of `make test`.
# What an example needs and overdrive does not (schedule_free.py's optimizer) goes to a
# folder of its own, on the path of both runs.
EXAMPLES_DEPS := schedulefree==1.4.1
.examples/deps/.installed: | $(BIN)/python
	$(PIP) install --quiet --no-deps --target .examples/deps $(EXAMPLES_DEPS)
	touch $@

examples: $(STAMP) $(COMPAT_SITE)/.installed-$(COMPAT_VERSION) .examples/deps/.installed
	OVERDRIVE_EXAMPLES=1 $(BIN)/python -m pytest -q tests/examples
	$(BIN)/python -m tests.examples.run --write-docs

# TRL's trainers (its scripts and shipped accelerate config files, from its wheel), PEFT and
# diffusers' training scripts (its repository's examples/, fetched into the ignored
# .ecosystem/src by tests/ecosystem/fetch.py; ECOSYSTEM_DIFFUSERS_REPO=<mirror> where GitHub is
# out of reach), unchanged, under Hugging Face Accelerate and under overdrive (`overdrive launch
# --cpu --as_accelerate`) on 1 and 2 CPU processes, with tiny models and data built here; the
# losses, final weights and checkpoints are compared and the per-case table goes into
# docs/ecosystem.md. The libraries go to the test-only .ecosystem/site, never the virtualenv
# (torchvision for diffusers' scripts; datasets and its needs for TRL). Minutes and GitHub, so
# not part of `make test`.
ECOSYSTEM_SITE := .ecosystem/site
ECOSYSTEM_DEPS := trl==1.16.0 peft==0.21.2 diffusers==0.42.1 datasets==5.2.0 dill==0.4.1 \
	multiprocess==0.70.19 torchvision==0.28.0
$(ECOSYSTEM_SITE)/.installed: | $(BIN)/python
	$(PIP) install --quiet --no-deps --target $(ECOSYSTEM_SITE) $(ECOSYSTEM_DEPS)
	touch $@

ecosystem: $(STAMP) $(COMPAT_SITE)/.installed-$(COMPAT_VERSION) $(ECOSYSTEM_SITE)/.installed
	$(BIN)/python -m tests.ecosystem.run --write-docs
	OVERDRIVE_ECOSYSTEM=1 $(BIN)/python -m pytest -q tests/ecosystem

# A real run with the default settings: 2 CPU processes (one gloo group) train on
# scikit-learn's bundled digits and report held-out accuracy gathered across ranks.
demo: $(DEMO_STAMP)
	$(BIN)/overdrive launch --cpu --num_processes 2 examples/digits_ddp.py

# A GPU machine (one H100/H200, no network, python3 with torch and transformers): the
# CUDA tests (`pytest -m gpu tests/gpu`), then the GPU bench recorded in bench/RESULTS.md,
# together under 9 minutes. It installs nothing: it runs this tree's src/ with the machine's
# python3 (this venv's python where one exists); deepspeed and torchao come as carried wheels
# (`make gpu-wheels` here, then bench/README.md, ## gpu). Without a CUDA GPU it fails, never
# skips: its tests would all skip and prove nothing.
GPU_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_ENV := PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} PYTHONUNBUFFERED=1
GPU_SECONDS ?= 500
GPU_TEST_SECONDS ?= 360
GPU_TESTS ?= tests/gpu

gpu:
	@$(GPU_PY) -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)' || { \
	  echo "make gpu: no CUDA GPU visible to $(GPU_PY): make gpu is for a GPU machine (bench/README.md, ## gpu); on a CPU run make gpu-smoke" >&2; exit 2; }
	@start=$$(date +%s); status=0; \
	$(GPU_ENV) timeout -k 10 $(GPU_TEST_SECONDS) $(GPU_PY) -m pytest -q -p no:cacheprovider -m gpu $(GPU_TESTS) || status=1; \
	left=$$(( $(GPU_SECONDS) - $$(date +%s) + start )); [ $$left -ge 120 ] || left=120; \
	$(GPU_ENV) $(GPU_PY) bench/gpu/run.py --write-results --budget-s $$left || status=1; \
	echo "make gpu: $$(( $$(date +%s) - start )) s, exit $$status"; exit $$status

# The same bench, tiny, on CPU processes' gloo: proves the harness where there is no GPU.
gpu-smoke:
	$(GPU_ENV) $(GPU_PY) bench/gpu/run.py --device cpu --smoke

# Here, with network: the wheels a GPU machine lacks (deepspeed and its needs, torchao) into
# .whl/, at this venv's versions, to copy with the tree to a GPU machine.
gpu-wheels:
	$(BIN)/python bench/gpu/wheels.py --dest .whl

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache .mypy_cache .compat .conformance .trainer-conformance .examples .ecosystem
