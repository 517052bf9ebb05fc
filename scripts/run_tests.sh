#!/usr/bin/env bash
# Runs the whole suite. pytest's exit code 5 ("no tests collected") is a failure here, never a pass.
# With USERMEM_REQUIRE_BACKENDS=1 (.ci/run) a missing PostgreSQL, Redis or NATS fails its tests (tests/backends.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONHASHSEED=0
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run_tests: pytest collected no tests — treating as failure" >&2
  exit 1
fi
exit "$rc"
