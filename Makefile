# Every target creates .venv when it is missing and installs what it needs, so a fresh clone
# needs nothing but python3 (3.11+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint bench clean browser

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

# The web page's tests drive Debian's headless Chromium and its driver: installed with apt when
# missing (CI runs as root); elsewhere those tests are skipped and say why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends chromium chromium-driver >/dev/null; \
	else echo "note: no chromium/chromedriver and no root apt-get: the page tests are skipped"; fi

test: $(VENV)/.installed-dev browser
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
