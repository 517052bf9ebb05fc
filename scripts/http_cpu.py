"""CPU per HTTP recall, split by process, under `wrk` (issue 19; docs/scaling.md, "third round").

On a machine shared with other jobs, requests/s from wrk mostly measure the neighbours. This script counts
what one request costs instead: it loads `--users` users of 1,000 memories (as `usermem bench http_wrk`
does), starts `usermem serve --workers N`, warms up, runs wrk for `--seconds` at `--concurrency`, and reads
the CPU time (user + system, from /proc) spent meanwhile by the server's worker processes, by the
PostgreSQL backends those workers are connected to, by redis-server (the whole server: an upper bound when
others use it too) and by wrk itself, divided by the requests served. The sum, against the machine's
cores, is the throughput the machine could reach if nothing else ran.

    .venv/bin/python scripts/http_cpu.py --backend tiered            # postgres | tiered | sqlite
    .venv/bin/python scripts/http_cpu.py --backend postgres --repeat 3 --concurrency 8 --seconds 10

Needs wrk (apt-get install wrk) and, for postgres / tiered, the local PostgreSQL and Redis of
docs/development.md (USERMEM_BENCH_PG_URL / USERMEM_BENCH_REDIS_URL as for `usermem bench`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

_HZ = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """User + system seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _HZ


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except FileNotFoundError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def _local_ports(pids: list[int], remote_port: int) -> set[int]:
    """Local TCP ports of the sockets these processes hold towards 127.0.0.1:`remote_port`."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except FileNotFoundError:
            continue
    ports: set[int] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        local, remote, inode = parts[1], parts[2], parts[9]
        if inode in inodes and int(remote.split(":")[1], 16) == remote_port:
            ports.add(int(local.split(":")[1], 16))
    return ports


def _pg_backends(base: str, worker_pids: list[int]) -> list[int]:
    """The PostgreSQL backend processes serving the workers' pooled connections."""
    import psycopg

    from usermem.store.postgres import split_url

    conninfo = split_url(base)[0]
    port = int(psycopg.conninfo.conninfo_to_dict(conninfo).get("port") or 5432)
    ports = _local_ports(worker_pids, port)
    with psycopg.connect(conninfo, autocommit=True) as c:
        rows = c.execute("SELECT pid, client_port FROM pg_stat_activity WHERE client_port IS NOT NULL").fetchall()
    return [pid for pid, client_port in rows if client_port in ports]


def _redis_pid() -> int | None:
    found = subprocess.run(["pgrep", "-x", "redis-server"], capture_output=True, text=True).stdout.split()
    return int(found[0]) if found else None


def measure(wrk: str, url: str, users: int, workers: int, concurrency: int, seconds: int, repeat: int,
            env: dict[str, str], pg_base: str | None) -> list[dict[str, Any]]:
    from usermem.bench.http import _free_port
    from usermem.bench.http_wrk import _LUA, _serve

    port = _free_port()
    proc, key = _serve(url, workers, port, env)
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(_LUA % {"users": users, "key": key})
            script = f.name
        target = f"http://127.0.0.1:{port}"
        subprocess.run([wrk, f"-t{min(2, concurrency)}", f"-c{concurrency}", "-d3s", "-s", script, target], capture_output=True,
                       check=False)  # warm-up: pools filled, tiers loaded, code paths hot
        server = [proc.pid, *_descendants(proc.pid)]
        backends = _pg_backends(pg_base, server) if pg_base else []
        redis = _redis_pid() if "USERMEM_REDIS_URL" in env else None
        watched = server + backends + ([redis] if redis else [])
        for _ in range(repeat):
            before = {p: _cpu(p) for p in watched}
            load = os.getloadavg()[0]
            t0 = os.times()
            run = subprocess.run([wrk, f"-t{min(2, concurrency)}", f"-c{concurrency}", f"-d{seconds}s", "-s", script, target],
                                 capture_output=True, text=True, check=False)
            t1 = os.times()
            spent = {p: _cpu(p) - before[p] for p in watched}
            line = next((x for x in run.stdout.splitlines() if x.startswith("JSON ")), None)
            if line is None:
                raise RuntimeError(f"wrk failed: {(run.stderr or run.stdout)[:300]}")
            r = json.loads(line[5:])
            n = max(1, r["requests"])
            ms = {"workers": sum(spent[p] for p in server), "postgres": sum(spent[p] for p in backends),
                  "redis": spent[redis] if redis else 0.0,
                  "wrk": (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system)}
            per = {k: round(1000 * v / n, 3) for k, v in ms.items()}
            total = sum(per.values())
            runs.append({"requests_per_s": round(r["requests"] / r["seconds"], 1), "p50_ms": r["p50_us"] / 1000,
                         "p95_ms": r["p95_us"] / 1000, "non_2xx": r["non2xx"], "errors": r["errors"],
                         "cpu_ms_per_request": per, "cpu_ms_total": round(total, 3),
                         "cpu_bound_requests_per_s": round((os.cpu_count() or 1) * 1000 / total, 0),
                         "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2)})
            print(json.dumps(runs[-1]), flush=True)
        os.unlink(script)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("sqlite", "postgres", "tiered"), default="postgres")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()

    from usermem.bench.http_wrk import _load, ensure_wrk
    from usermem.bench.storage import _ensure_database, _pg_base, _redis_url

    wrk = ensure_wrk()
    if wrk is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    env: dict[str, str] = {}
    tier: dict[str, Any] = {}
    schema = f"http_cpu_{os.getpid()}"
    prefix = f"usermem-http-cpu-{os.getpid()}"
    if a.backend == "tiered":
        env = {"USERMEM_PRESET": "tiered", "USERMEM_REDIS_URL": _redis_url(), "USERMEM_KEY_PREFIX": prefix}
        tier = {"preset": "tiered", "redis_url": _redis_url(), "key_prefix": prefix}
    with tempfile.TemporaryDirectory() as d:
        if a.backend == "sqlite":
            url, base = f"sqlite:///{d}/http_cpu.db", None
        else:
            base = _pg_base()
            _ensure_database(base)
            url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
        try:
            started = time.time()
            _load(url, a.users, **tier)
            print(f"loaded {a.users} users x 1,000 memories in {time.time() - started:.0f} s", flush=True)
            measure(wrk, url, a.users, a.workers, a.concurrency, a.seconds, a.repeat, env, base)
        finally:
            if base is not None:
                import psycopg

                from usermem.store.postgres import split_url

                with psycopg.connect(split_url(base)[0], autocommit=True) as c:
                    c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            if a.backend == "tiered":
                from usermem.store.redis import RedisTier

                keys = RedisTier(_redis_url(), [], prefix=prefix)
                keys.drop_prefix()
                keys.close()


if __name__ == "__main__":
    main()
