# Rota — the two commands: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: what running needs (make run), and the development tools on top (make test, lint,
# typecheck, …). A venv made by make run is upgraded by the first make test; either stamp is
# redone when pyproject.toml or constraints.txt changes (the dev one after the run one).
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# The extras `rota dev` and the distributed mode run with (no test, lint, tracing or bench tools:
# `.[dev]` brings those, `rota bench`'s psutil with its `bench` extra).
RUN_EXTRAS := postgres,redis,rabbitmq,email,encryption
VENDOR := src/rota/dashboard/static/vendor
VENDOR_STAMP := $(VENDOR)/.copied

.PHONY: install install-run run test test-fast lint typecheck unit soak clean

install-run: $(RUN_STAMP) $(VENDOR_STAMP)
install: $(DEV_STAMP) $(VENDOR_STAMP)

# pip is upgraded first: the venv's own (23.2 with Python 3.11) takes twice as long to install.
# --no-compile: make run leaves the bytecode to Python's first import of what it uses (about 5 s
# less to wait); the development install compiles the whole venv, in parallel, for the tests'
# many processes (and for shells with PYTHONDONTWRITEBYTECODE set, where nothing is cached).
$(RUN_STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[$(RUN_EXTRAS)]'
	@touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev]'
	$(BIN)/python -m compileall -q -j0 $(VENV)/lib >/dev/null
	@touch $(DEV_STAMP)

# The front-end libraries of the dashboard and of the API docs (/docs, /redoc), from the npm
# registry (versions pinned in package.json and package-lock.json), copied into the package's
# static folder by hatch_build.py (npm ci, and ReDoc's one file fetched alone and checked against
# the integrity package-lock.json pins), which also runs as the package build's hook: a wheel or
# an sdist carries them. Nothing runs in the browser's build. It writes $(VENDOR_STAMP) last.
$(VENDOR_STAMP): package.json package-lock.json hatch_build.py
	$(PYTHON) hatch_build.py

run: install-run
	$(BIN)/rota dev

lint: install
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: install
	$(BIN)/mypy

# PYTEST_ARGS: more pytest options for test, test-fast and unit (.ci/run adds --durations=30).
PYTEST_ARGS ?=

unit: install
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The suite in two parts: everything that leaves the shared services alone, spread over
# TEST_WORKERS processes (pytest-xdist; the machine has 2 cores, and the e2e tests spend much
# of their time waiting); then, alone, the tests that stop or restart PostgreSQL or RabbitMQ
# (marker `exclusive`). Both parts always run; the target fails if either did.
TEST_WORKERS ?= 2
test: install lint typecheck
	@rc=0; \
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal -m "not exclusive" $(PYTEST_ARGS) || rc=$$?; \
	$(BIN)/pytest -m exclusive $(PYTEST_ARGS) || rc=$$?; \
	exit $$rc

# The fast tier (docs/development.md): the unit tests and the contract suites on the adapters
# that need no service (SQLite, memory, in-process); no PostgreSQL, Redis or RabbitMQ. In -k,
# "unit" is the tests/unit folder: every unit test is kept, whatever its name.
FAST := -m "not postgres" -k "unit or not (postgres or redis or rabbitmq)"
test-fast: install
	$(BIN)/pytest tests/unit tests/contract $(FAST) $(PYTEST_ARGS)

# The chaos soak (docs/reliability.md): MINUTES of load and random faults on 2 servers and 2
# workers against the real services, then its checks. SEED replays a run, FAULTS picks kinds
# (comma-separated), MAX_SHARED caps the PostgreSQL/RabbitMQ restarts (shared with other users),
# DIR keeps the logs and report there (default: a new temporary directory).
MINUTES ?= 10
soak: install
	$(BIN)/python -m tests.e2e.soak --minutes $(MINUTES) $(if $(SEED),--seed $(SEED)) \
	  $(if $(FAULTS),--faults $(FAULTS)) $(if $(MAX_SHARED),--max-shared $(MAX_SHARED)) \
	  $(if $(DIR),--dir $(DIR))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache node_modules $(VENDOR)
