# The two commands: `make run` (the main job) and `make test` (lint, types, tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest browser bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The quick start's local agent refuses root unless told; a root shell (a container) gets --allow-root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

run: $(STAMP)
	$(BIN)/sonde up $(ROOT_FLAG)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check sonde tests benchmarks
	$(BIN)/ruff format --check sonde tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) browser
	$(BIN)/pytest -q $(PYTEST_ARGS)

# The dashboard's tests drive Debian's Chromium (never a downloaded browser). Under CI=true
# (root on Debian) it is installed when missing; elsewhere those tests skip, saying so.
browser:
	@if [ "$$CI" = "true" ] && ! command -v chromium >/dev/null && [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the dashboard's tests"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q --no-install-recommends chromium >/dev/null \
		|| { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; }; \
	fi

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
