# Rota — the two commands: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VENDOR := src/rota/dashboard/static/vendor
VENDOR_STAMP := $(VENDOR)/.copied

.PHONY: install run test test-fast lint typecheck unit soak clean

install: $(STAMP) $(VENDOR_STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# The dashboard's front-end libraries, from the npm registry (versions pinned in package.json and
# package-lock.json), copied into the package's static folder. Nothing runs in the browser's build.
$(VENDOR_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "make: npm is needed for the dashboard's assets (apt-get install npm)" >&2; exit 1; }
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@mkdir -p $(VENDOR)
	cp node_modules/htmx.org/dist/htmx.min.js node_modules/htmx-ext-sse/dist/sse.min.js \
	   node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css $(VENDOR)/
	@touch $(VENDOR_STAMP)

run: install
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

test: install lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

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
