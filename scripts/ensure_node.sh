#!/usr/bin/env bash
# The TypeScript client's tests (tests/test_ts_client.py) run node's own test runner (`node --test`, Node >= 18).
# Installs Debian's `nodejs` when node is absent or older than 18 (never a download from elsewhere). Idempotent;
# prints one status line. Exits 0 even when the install fails (the test then skips with the reason — or fails
# under USERMEM_REQUIRE_BACKENDS=1), 1 only with --strict (implied by USERMEM_REQUIRE_BACKENDS=1).
set -uo pipefail
STRICT=0
[ "${1:-}" = "--strict" ] && STRICT=1
case "${USERMEM_REQUIRE_BACKENDS:-}" in 1|true|yes|on) STRICT=1 ;; esac
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi

node_major() {
  local bin
  bin=$(command -v node || command -v nodejs) || return 1
  "$bin" --version 2>/dev/null | sed -n 's/^v\([0-9]*\).*/\1/p'
}
ok() { local m; m=$(node_major) && [ -n "$m" ] && [ "$m" -ge 18 ]; }

if ok; then
  echo "Node: ok ($("$(command -v node || command -v nodejs)" --version))"
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs >/dev/null 2>&1 || true
fi
if ok; then
  echo "Node: ok (installed nodejs $(node_major) from the Debian archive)"
  exit 0
fi
echo "Node: FAILED (node >= 18 is not installed and apt-get could not install Debian's nodejs)" >&2
[ "$STRICT" -eq 1 ] && exit 1
exit 0
