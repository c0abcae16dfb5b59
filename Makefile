# The two commands: `make run` (the main job) and `make test` (lint, types, tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest test-tools bench clean

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

# One pytest worker per core, at most 4 (`TEST_WORKERS=` runs them in one process). Tests sharing
# the machine's services take a lock and run one at a time (tests/conftest.py). A worker that
# runs out of tests takes some of another's queue (worksteal): with xdist's default, the other's
# queue of slow end-to-end tests left it idle for minutes at the end (9 min 53 s now, against
# 11 min and more before, in the same hour). So a worker may run a file's tests in any order:
# `make pytest PYTEST_ARGS=--reverse-each-file` shows a test that depends on their order.
TEST_WORKERS ?= -n auto --maxprocesses 4 --dist worksteal

# The tests start hundreds of sonde processes: byte-compile sonde first, as an install does
# (an editable install does not, and with PYTHONDONTWRITEBYTECODE set every start compiles it).
pytest: $(STAMP) test-tools
	$(BIN)/python -m compileall -q sonde
	$(BIN)/pytest -q $(TEST_WORKERS) $(PYTEST_ARGS)

# Tools some tests drive for real: Debian's Chromium for the dashboard (never a downloaded
# browser) and iputils' ping for the ping probe. Under CI=true (root on Debian) the missing
# ones are installed; elsewhere those tests skip, saying so.
TEST_PACKAGES := chromium:chromium ping:iputils-ping
test-tools:
	@if [ "$$CI" = "true" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=""; \
		for pair in $(TEST_PACKAGES); do \
			command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair#*:}"; \
		done; \
		if [ -n "$$missing" ]; then \
			echo "installing for the tests:$$missing"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get install -y -q --no-install-recommends $$missing >/dev/null \
			|| { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null; }; \
		fi; \
	fi

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
