# Every target creates .venv when it is missing and installs what it needs, so a fresh clone
# needs nothing but python3 (3.11+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# stamp files: reinstall only when pyproject.toml changes
$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(BIN)/python examples/quickstart.py
	$(BIN)/ragloop ask --demo

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
