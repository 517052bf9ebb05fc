#!/usr/bin/env bash
# The TypeScript client's tests (tests/test_ts_client.py) run node's own test runner (`node --test`, Node >= 18),
# and tests/test_ts_types.py type-checks its .d.ts/.ts files with `tsc`. Installs Debian's `nodejs` when node is
# absent or older than 18, and Debian's `node-typescript` when tsc is absent (never a download from elsewhere).
# Idempotent; prints one status line per tool. Exits 0 even when the install fails (the test then skips with the reason — or fails
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

UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 0
  if [ "$UPDATED" -eq 0 ]; then $SUDO apt-get update -qq >/dev/null 2>&1 || true; UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || true
}
FAILED=0

if ok; then
  echo "Node: ok ($("$(command -v node || command -v nodejs)" --version))"
else
  apt_install nodejs
  if ok; then
    echo "Node: ok (installed nodejs $(node_major) from the Debian archive)"
  else
    echo "Node: FAILED (node >= 18 is not installed and apt-get could not install Debian's nodejs)" >&2
    FAILED=1
  fi
fi

if command -v tsc >/dev/null 2>&1; then
  echo "tsc: ok ($(tsc --version))"
else
  apt_install node-typescript
  if command -v tsc >/dev/null 2>&1; then
    echo "tsc: ok (installed node-typescript $(tsc --version) from the Debian archive)"
  else
    echo "tsc: FAILED (tsc is not installed and apt-get could not install Debian's node-typescript)" >&2
    FAILED=1
  fi
fi
[ "$FAILED" -eq 1 ] && [ "$STRICT" -eq 1 ] && exit 1
exit 0
