# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed-test

.PHONY: demo test faults lint typecheck venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Install the package (editable) with its test extras; torch is pinned for development and CI.
$(STAMP): pyproject.toml constraints-dev.txt | $(BIN)/python
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints-dev.txt -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) lint
	$(BIN)/python -m pytest -q tests

# The fault attacks alone (they also run in `make test`).
faults: $(STAMP)
	$(BIN)/python -m pytest -q tests/faults

# A real run with the default settings: 2 CPU processes (one gloo group) train on
# scikit-learn's bundled digits and report held-out accuracy gathered across ranks.
demo: $(STAMP)
	$(BIN)/overdrive launch --cpu --num_processes 2 examples/digits_ddp.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
