# usermem — every target bootstraps .venv from pyproject.toml on a fresh machine (Python 3.11 + apt + PyPI).
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DATA    := data

.PHONY: run test bench lint demo services browser clean-venv typecheck

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# The main job: the HTTP service on the embedded SQLite default (no other service needed).
run: $(STAMP)
	@mkdir -p $(DATA)
	$(BIN)/usermem serve --store sqlite:///$(DATA)/usermem.db

demo: $(STAMP)
	@mkdir -p $(DATA)
	$(BIN)/usermem demo --store sqlite:///$(DATA)/demo.db

# Starts PostgreSQL / Redis / NATS on 127.0.0.1 when they are not running (Debian packages), then runs all tests.
services:
	@bash scripts/ensure_services.sh

# Debian's headless Chromium + CJK fonts for the console's browser tests (installed when absent).
browser:
	@bash scripts/ensure_browser.sh

test: $(STAMP) services browser
	@bash scripts/run_tests.sh

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
