#!/usr/bin/env bash
# The console's browser tests (tests/test_console_browser.py) drive Debian's headless Chromium with CJK fonts.
# Installs `chromium` and `fonts-noto-cjk` from the Debian archive when they are absent (never a browser
# download from elsewhere: Playwright's own browser CDN is not used). Idempotent; prints one status line.
# Exits 0 even when the install fails (the browser tests then skip with the reason — or fail under
# USERMEM_REQUIRE_BACKENDS=1), 1 only with --strict.
set -uo pipefail
STRICT=0
[ "${1:-}" = "--strict" ] && STRICT=1
case "${USERMEM_REQUIRE_BACKENDS:-}" in 1|true|yes|on) STRICT=1 ;; esac
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi

have_fonts() { command -v fc-list >/dev/null 2>&1 && [ "$(fc-list 2>/dev/null | grep -ci "Noto Sans CJK")" -gt 0 ]; }
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
have_fonts || need+=(fonts-noto-cjk)
if [ "${#need[@]}" -eq 0 ]; then
  echo "Chromium: ok ($(/usr/bin/chromium --version 2>/dev/null | head -n1), CJK fonts present)"
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || true
fi
if [ -x /usr/bin/chromium ] && have_fonts; then
  echo "Chromium: ok (installed ${need[*]} from the Debian archive)"
  exit 0
fi
echo "Chromium: FAILED (could not install ${need[*]} with apt-get)" >&2
[ "$STRICT" -eq 1 ] && exit 1
exit 0
