#!/usr/bin/env bash
# Make sure PostgreSQL (5432), Redis (6379) and NATS with JetStream (4222) answer on 127.0.0.1.
#
# Each service is first *checked* (pg_isready / redis-cli ping / a TCP connect to the NATS port) and
# only started when it does not answer: from an existing Debian cluster/binary, else after installing
# the Debian package (apt-get; nothing is downloaded from anywhere else). Idempotent: running it again
# when everything answers changes nothing. Prints one status line per service and exits 0 even when a
# service cannot be started (the tests that need it are then skipped with the reason); exits 1 only
# with --strict, which is implied by USERMEM_REQUIRE_BACKENDS=1 (set by .ci/run: missing backends fail).
set -uo pipefail

STRICT=0
[ "${1:-}" = "--strict" ] && STRICT=1
case "${USERMEM_REQUIRE_BACKENDS:-}" in 1|true|yes|on) STRICT=1 ;; esac
PG_PORT=${USERMEM_PG_PORT:-5432}
REDIS_PORT=${USERMEM_REDIS_PORT:-6379}
NATS_PORT=${USERMEM_NATS_PORT:-4222}
failed=0

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi

apt_ready=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || { echo "ensure_services: apt-get not available to install $*" >&2; return 1; }
  if [ "$apt_ready" -eq 0 ]; then $SUDO apt-get update -qq >/dev/null 2>&1 || true; apt_ready=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() {  # wait_for SECONDS CMD...: retry CMD every 0.5 s
  local n=$(( $1 * 2 )); shift
  for _ in $(seq 1 "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}
report() {  # report NAME OK|FAILED DETAIL
  if [ "$2" = ok ]; then echo "$1: ok ($3)"; else echo "$1: FAILED ($3)"; echo "ensure_services: $1 FAILED: $3" >&2; failed=1; fi
}

# --- PostgreSQL -------------------------------------------------------------------------------------------
pg_ready() {
  if command -v pg_isready >/dev/null 2>&1; then pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; else port_open "$PG_PORT"; fi
}
if pg_ready; then
  report PostgreSQL ok "already running on 127.0.0.1:$PG_PORT"
else
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql postgresql-client || true
  fi
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1)
  if [ -z "$ver" ] && ls /usr/lib/postgresql >/dev/null 2>&1; then
    ver=$(ls /usr/lib/postgresql | sort -V | tail -n1)
    [ -n "$ver" ] && $SUDO pg_createcluster "$ver" main >/dev/null 2>&1 || true
  fi
  if [ -z "$ver" ]; then
    report PostgreSQL FAILED "no PostgreSQL installation found and apt-get could not install one"
  else
    conf="/etc/postgresql/$ver/main"
    # Local development only: trust connections from this machine (the tests connect as postgres).
    if [ -f "$conf/pg_hba.conf" ] && ! grep -q "usermem-trust" "$conf/pg_hba.conf"; then
      $SUDO sed -i '1i # usermem-trust\nlocal all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' \
        "$conf/pg_hba.conf"
    fi
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start >/dev/null 2>&1 \
      || $SUDO pg_ctlcluster "$ver" main start >/dev/null 2>&1 || true
    if wait_for 30 pg_ready; then
      report PostgreSQL ok "started cluster $ver/main"
    else
      report PostgreSQL FAILED "cluster $ver/main did not accept connections on 127.0.0.1:$PG_PORT"
    fi
  fi
fi

# --- pgvector (optional) ----------------------------------------------------------------------------------
# The semantic benchmark and the pgvector tests use PostgreSQL's `vector` extension where it exists. When the
# running server does not offer it, install Debian's postgresql-<major>-pgvector if the archive has it (it
# is not in every archive: then the pgvector tests and benchmark rows say "skipped" with the reason).
# Never a failure: the store works without it (vectors then live in no PostgreSQL table).
pg_has_vector() {
  command -v psql >/dev/null 2>&1 || return 1
  [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -Atqc \
        "SELECT 1 FROM pg_available_extensions WHERE name='vector'" 2>/dev/null)" = "1" ]
}
if pg_ready && command -v psql >/dev/null 2>&1; then
  if pg_has_vector; then
    echo "pgvector: ok (available)"
  else
    major=$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -Atqc "SHOW server_version_num" 2>/dev/null | cut -c1-2)
    if [ -n "$major" ] && apt_install "postgresql-$major-pgvector" && pg_has_vector; then
      echo "pgvector: ok (installed postgresql-$major-pgvector)"
    else
      echo "pgvector: not available (no postgresql-${major:-?}-pgvector package in this apt archive; optional)"
    fi
  fi
fi

# --- Redis ------------------------------------------------------------------------------------------------
redis_ready() {
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = "PONG" ]
  else
    port_open "$REDIS_PORT"
  fi
}
if redis_ready; then
  report Redis ok "already running on 127.0.0.1:$REDIS_PORT"
else
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server redis-tools || true
  if ! command -v redis-server >/dev/null 2>&1; then
    report Redis FAILED "redis-server is not installed and apt-get could not install it"
  else
    $SUDO mkdir -p /var/lib/redis /var/log/redis
    # A cache tier: no persistence (docs/storage.md explains why usermem loses nothing when it restarts).
    $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/usermem-dev.log >/dev/null 2>&1 || true
    if wait_for 15 redis_ready; then report Redis ok "started on 127.0.0.1:$REDIS_PORT"
    else report Redis FAILED "redis-server did not answer PING on 127.0.0.1:$REDIS_PORT"; fi
  fi
fi

# --- NATS (JetStream) ---------------------------------------------------------------------------------------
# A NATS server announces JetStream in the INFO line it sends on connect ("jetstream":true).
nats_info() { (exec 3<>"/dev/tcp/127.0.0.1/$NATS_PORT" && IFS= read -r -t 3 line <&3 && printf '%s' "$line") 2>/dev/null; }
nats_js_ready() { case "$(nats_info)" in *'"jetstream":true'*) return 0 ;; *) return 1 ;; esac; }
if port_open "$NATS_PORT"; then
  if nats_js_ready; then
    report NATS ok "already listening on 127.0.0.1:$NATS_PORT with JetStream"
  else
    report NATS FAILED "a server on 127.0.0.1:$NATS_PORT answers without JetStream (restart it with -js)"
  fi
else
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_install nats-server || true
  bin=$(command -v nats-server || echo /usr/sbin/nats-server)
  if [ ! -x "$bin" ]; then
    report NATS FAILED "nats-server is not installed and apt-get could not install it"
  else
    $SUDO mkdir -p /var/lib/nats-server
    if command -v start-stop-daemon >/dev/null 2>&1; then
      $SUDO start-stop-daemon --start --oknodo --background --exec "$bin" -- -a 127.0.0.1 -p "$NATS_PORT" -js \
        -sd /var/lib/nats-server -l /var/log/nats-server.log >/dev/null 2>&1 || true
    else
      nohup $SUDO "$bin" -a 127.0.0.1 -p "$NATS_PORT" -js -sd /var/lib/nats-server >/dev/null 2>&1 &
    fi
    if wait_for 15 nats_js_ready; then report NATS ok "started on 127.0.0.1:$NATS_PORT with JetStream"
    else report NATS FAILED "nats-server did not answer with JetStream on 127.0.0.1:$NATS_PORT"; fi
  fi
fi

if [ "$STRICT" -eq 1 ] && [ "$failed" -ne 0 ]; then exit 1; fi
exit 0
