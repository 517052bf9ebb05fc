# usermem — every target bootstraps .venv from pyproject.toml on a fresh machine (Python >= 3.11 + apt + PyPI).
# PY: the first of python3.13 / python3.12 / python3.11 / python3 on PATH that is >= 3.11 (override: make PY=...).
PY      ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
             command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
             && { echo $$p; break; }; done)
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
RUNSTAMP:= $(VENV)/.installed-run
DATA    := data
PORT    ?= 8000

.PHONY: run test test-cluster test-thorough bench lint demo services browser node clean-venv typecheck

# The dev install (tests, lint, benchmarks): everything.
$(STAMP): pyproject.toml
	@test -n "$(PY)" || { echo "need Python >= 3.11 on PATH (python3.13, python3.12, python3.11 or python3)"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP) $(RUNSTAMP)

# What running needs: the package and its `server` extra only.
$(RUNSTAMP): pyproject.toml
	@test -n "$(PY)" || { echo "need Python >= 3.11 on PATH (python3.13, python3.12, python3.11 or python3)"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[server]'
	@touch $(RUNSTAMP)

# The main job: the HTTP service on the embedded SQLite default (no other service needed). make run PORT=9000
run: $(RUNSTAMP)
	@mkdir -p $(DATA)
	$(BIN)/usermem serve --store sqlite:///$(DATA)/usermem.db --port $(PORT)

demo: $(RUNSTAMP)
	@mkdir -p $(DATA)
	$(BIN)/usermem demo --store sqlite:///$(DATA)/demo.db

# Starts PostgreSQL / Redis / NATS on 127.0.0.1 when they are not running (Debian packages), then runs all tests.
services:
	@bash scripts/ensure_services.sh

# Debian's headless Chromium + CJK fonts for the console's browser tests (installed when absent).
browser:
	@bash scripts/ensure_browser.sh

# Debian's nodejs (>= 18) for the TypeScript client's tests (node --test; installed when absent).
node:
	@bash scripts/ensure_node.sh

test: $(STAMP) services browser node
	@bash scripts/run_tests.sh

# The cluster and fault tests (tests/cluster/, never collected by `make test`): a PostgreSQL primary + replica,
# a Redis Cluster, a JetStream cluster and usermem instances, all on loopback, started and stopped by the tests;
# one process (the pieces listen on fixed ports).
test-cluster: $(STAMP) services
	@USERMEM_TEST_WORKERS=0 bash scripts/run_tests.sh tests/cluster

# Nightly / before a release: every hypothesis property with its full example count (tests/props.py).
test-thorough: $(STAMP) services browser node
	@USERMEM_HYPOTHESIS_PROFILE=thorough bash scripts/run_tests.sh

bench: $(STAMP) services
	$(BIN)/usermem bench --out reports

# ruff, the layer contracts of pyproject.toml [tool.importlinter] (docs/architecture.md), mypy --strict.
lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/lint-imports
	$(BIN)/mypy

clean-venv:
	rm -rf $(VENV)

# mem0 OSS vs usermem on one workload and one local embedder (never in CI). mem0ai goes into its own venv,
# created here; the report lands in reports/bench-peers.{json,md,png} (docs/evaluation.md).
PEERS := .venv-peers
MEM0  ?= mem0ai==2.2.1
.PHONY: bench-peers
bench-peers: $(STAMP)
	@test -x $(PEERS)/bin/python || $(PY) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q '$(MEM0)'
	MEM0_TELEMETRY=False $(BIN)/python scripts/bench_peers.py --peers-python $(PEERS)/bin/python --out reports
