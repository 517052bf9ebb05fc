#!/usr/bin/env bash
# Make sure PostgreSQL (5432), Redis (6379) and NATS with JetStream (4222) answer on 127.0.0.1.
# Each is started from Debian's packages when absent; nothing is downloaded from anywhere else.
set -uo pipefail

apt_ready=0
apt_install() {
  if [ "$apt_ready" -eq 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; apt_ready=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}
port_open() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
wait_port() { for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 0.5; done; return 1; }

# --- PostgreSQL ---
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql postgresql-client
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1)
  if [ -z "$ver" ]; then
    ver=$(ls /usr/lib/postgresql | sort -V | tail -n1)
    pg_createcluster "$ver" main >/dev/null 2>&1 || true
  fi
  conf="/etc/postgresql/$ver/main"
  if [ -f "$conf/pg_hba.conf" ] && ! grep -q "usermem-trust" "$conf/pg_hba.conf"; then
    sed -i '1i # usermem-trust\nlocal all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$conf/pg_hba.conf"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start >/dev/null 2>&1 || true
  wait_port 5432 || echo "ensure_services: PostgreSQL did not start" >&2
fi

# --- Redis ---
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null 2>&1 || true
  wait_port 6379 || echo "ensure_services: Redis did not start" >&2
fi

# --- NATS (JetStream) ---
if ! port_open 4222; then
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_install nats-server
  mkdir -p /var/lib/nats-server
  bin=$(command -v nats-server || echo /usr/sbin/nats-server)
  start-stop-daemon --start --oknodo --background --exec "$bin" -- -a 127.0.0.1 -p 4222 -js \
    -sd /var/lib/nats-server -l /var/log/nats-server.log >/dev/null 2>&1 || true
  wait_port 4222 || echo "ensure_services: NATS did not start" >&2
fi
exit 0
