#!/usr/bin/env bash
# Runs the whole suite. pytest's exit code 5 ("no tests collected") is a failure here, never a pass.
# With USERMEM_REQUIRE_BACKENDS=1 (.ci/run) a missing PostgreSQL, Redis or NATS fails its tests (tests/backends.py).
# In parallel with pytest-xdist: one worker per core (USERMEM_TEST_WORKERS=N to choose, 0 for one process);
# tests marked xdist_group run in one worker (--dist loadgroup). Each worker has its own PostgreSQL database,
# schemas, Redis key prefixes, NATS streams, ports and tmp paths (tests/backends.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONHASHSEED=0
workers="${USERMEM_TEST_WORKERS:-auto}"
parallel=(-n "$workers" --dist loadgroup)
[ "$workers" = "0" ] && parallel=()
.venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run_tests: pytest collected no tests — treating as failure" >&2
  exit 1
fi
exit "$rc"
