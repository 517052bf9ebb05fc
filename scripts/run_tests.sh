#!/usr/bin/env bash
# Runs the whole suite. pytest's exit code 5 ("no tests collected") is a failure here, never a pass.
# With USERMEM_REQUIRE_BACKENDS=1 (.ci/run) a missing PostgreSQL, Redis or NATS fails its tests (tests/backends.py).
# In parallel with pytest-xdist: one worker per core (USERMEM_TEST_WORKERS=N to choose, 0 for one process).
# --dist loadfile: a test file runs whole in one worker, in file order — module fixtures (a built wheel, a
# private pgvector server or Redis cluster, one browser) are made once and a module's last test may count what
# its others did (tests/test_api_fuzz.py). (xdist_group / --dist loadgroup does nothing under pytest 9.2 with
# pytest-xdist 3.8: the group suffix it writes into item._nodeid is no longer read.) Each worker has its own
# PostgreSQL database, schemas, Redis key prefixes, NATS streams, ports and tmp paths (tests/backends.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONHASHSEED=0
workers="${USERMEM_TEST_WORKERS:-auto}"
parallel=(-n "$workers" --dist loadfile)
[ "$workers" = "0" ] && parallel=()
.venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run_tests: pytest collected no tests — treating as failure" >&2
  exit 1
fi
exit "$rc"
