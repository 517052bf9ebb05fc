"""A local cluster on loopback for the cluster tests and the cluster load run (docs/scaling.md, issue 17).

Every piece is a real server process this module starts in a fresh directory and stops again:

* `PgPair` — a PostgreSQL primary and a streaming replica (initdb + pg_basebackup from the Debian
  packages), optionally with synchronous replication; `crash_primary()` and `promote()` are the fault
  and the runbook step (docs/runbook-failover.md).
* `RedisCluster` — redis-server in cluster mode, three primaries and (by default) one replica each, a
  short node timeout so a stopped primary fails over in seconds.
* `NatsCluster` — three nats-server nodes with JetStream in one cluster (routes on loopback).
* `Instances` — N stateless `usermem serve` processes on one store of record, one Redis and one NATS URL.

Nothing here sleeps blindly: every wait polls a condition until a deadline and raises `ClusterError`
naming what did not happen. Ports come from fixed ranges away from the shared services (PostgreSQL
5432, Redis 6379, NATS 4222), skipping ports that are taken.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

PG_PORTS = 5540  # the first port tried for the PostgreSQL pair
REDIS_PORTS = 7100  # cluster bus: port + 10000
NATS_PORTS = 4240  # client ports; routes at port + 2000
HTTP_PORTS = 8740


class ClusterError(RuntimeError):
    """A node did not start, stop or reach the expected state in time."""


class MissingBinary(ClusterError):
    """A server binary is not installed (scripts/ensure_services.sh installs the Debian packages)."""


def wait_until(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.05) -> None:
    """Poll `check` until it returns True; ClusterError after `timeout` seconds. Exceptions count as False."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            if check():
                return
        except Exception as exc:  # a node that is still starting refuses connections
            last = exc
        if time.monotonic() >= deadline:
            raise ClusterError(f"{what}: not reached within {timeout:.0f} s" + (f" (last error: {last})" if last else ""))
        time.sleep(interval)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(first: int, n: int, *, also: Sequence[int] = (), avoid: set[int] | None = None) -> list[int]:
    """n free loopback ports from `first` upwards; `also`: offsets that must be free too (a cluster bus)."""
    found: list[int] = []
    port = first
    avoid = avoid or set()
    while len(found) < n:
        if port > first + 500:
            raise ClusterError(f"no {n} free ports between {first} and {first + 500}")
        if port not in avoid and all(port_free(port + d) for d in (0, *also)):
            found.append(port)
        port += 1
    return found


def find_binary(name: str, *, pg: bool = False) -> str:
    """The path of a server binary; PostgreSQL's from /usr/lib/postgresql/<newest>/bin."""
    if pg:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                          if p.parent.name.isdigit() else 0)
        for bindir in reversed(versions):
            if (bindir / name).exists():
                return str(bindir / name)
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if Path(p).exists()),
                                      None)
    if path is None:
        raise MissingBinary(f"{name} is not installed (scripts/ensure_services.sh installs the Debian package)")
    return path


def _kill(proc: subprocess.Popen[Any] | None, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# -- PostgreSQL primary + streaming replica ------------------------------------------------------------------

class PgPair:
    """A primary on `ports[0]` and a streaming replica on `ports[1]`, both on 127.0.0.1, trust auth.

    `synchronous=True` makes the primary wait for the replica to flush every commit
    (synchronous_standby_names): an acknowledged write is on both, so promoting the replica after the
    primary crashed loses none. Data directories live under `root` (owned by the postgres user when
    this runs as root, as initdb requires).
    """

    APP = "usermem_replica"

    def __init__(self, root: Path, *, synchronous: bool = True, database: str = "usermem") -> None:
        self.initdb = find_binary("initdb", pg=True)
        self.pg_ctl = find_binary("pg_ctl", pg=True)
        self.basebackup = find_binary("pg_basebackup", pg=True)
        self.root = root
        self.database = database
        self.synchronous = synchronous
        self.primary_port, self.replica_port = free_ports(PG_PORTS, 2)
        self.primary_dir, self.replica_dir = root / "primary", root / "replica"
        self.promoted = False
        self._as: list[str] = []
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(root, "postgres", "postgres")

    def url(self, port: int | None = None, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return (f"postgresql://postgres@127.0.0.1:{port or self.primary_port}/{self.database}"
                + (f"?{query}" if query else ""))

    @property
    def replica_url(self) -> str:
        return self.url(self.replica_port)

    def _run(self, *cmd: str, timeout: float = 120) -> None:
        r = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=timeout, check=False)
        if r.returncode != 0:
            raise ClusterError(f"{' '.join(cmd[:2])} failed: {r.stdout[-500:]} {r.stderr[-500:]}")

    def _ctl(self, data: Path, *args: str) -> None:
        self._run(self.pg_ctl, "-D", str(data), "-l", str(data / "server.log"), "-w", "-t", "60", *args)

    def start(self) -> PgPair:
        import psycopg

        self._run(self.initdb, "-D", str(self.primary_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--locale=C.UTF-8")
        settings = [f"port = {self.primary_port}", "listen_addresses = '127.0.0.1'",
                    f"unix_socket_directories = '{self.primary_dir}'", "wal_level = replica",
                    "max_wal_senders = 5", "hot_standby = on", "fsync = off", "shared_buffers = 32MB",
                    "max_connections = 60", "wal_keep_size = 128MB", "log_min_messages = warning"]
        with open(self.primary_dir / "postgresql.conf", "a", encoding="utf-8") as fh:
            fh.write("\n# usermem cluster test\n" + "\n".join(settings) + "\n")
        self._ctl(self.primary_dir, "start")
        with psycopg.connect(self._dsn(self.primary_port, "postgres"), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{self.database}"')
        self._run(self.basebackup, "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres", "-D",
                  str(self.replica_dir), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        with open(self.replica_dir / "postgresql.auto.conf", "a", encoding="utf-8") as fh:
            fh.write(f"port = {self.replica_port}\nunix_socket_directories = '{self.replica_dir}'\n"
                     f"primary_conninfo = 'host=127.0.0.1 port={self.primary_port} user=postgres "
                     f"application_name={self.APP}'\n")
        self._ctl(self.replica_dir, "start")
        wait_until("the replica streams from the primary", self._streaming, 60)
        if self.synchronous:  # after the base backup: the replica must not inherit it
            with psycopg.connect(self._dsn(self.primary_port, "postgres"), autocommit=True) as c:
                c.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{self.APP}'")
                c.execute("SELECT pg_reload_conf()")
            wait_until("the replica is the synchronous standby", lambda: self._streaming("sync"), 30)
        return self

    @staticmethod
    def _dsn(port: int, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{database}"

    def _streaming(self, mode: str | None = None) -> bool:
        import psycopg

        with psycopg.connect(self._dsn(self.primary_port, "postgres"), autocommit=True, connect_timeout=2) as c:
            rows = c.execute("SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                             (self.APP,)).fetchall()
        return any(r[0] == "streaming" and (mode is None or r[1] == mode) for r in rows)

    def replay_lag_bytes(self) -> int:
        """How far the replica's replay is behind the primary's WAL position, in bytes."""
        import psycopg

        with psycopg.connect(self._dsn(self.primary_port, "postgres"), autocommit=True, connect_timeout=2) as c:
            row = c.execute("SELECT COALESCE(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), -1)"
                            " FROM pg_stat_replication").fetchone()
        return int(row[0]) if row else -1

    def crash_primary(self) -> None:
        """The fault: the primary stops at once, like a crash (no shutdown checkpoint)."""
        self._ctl(self.primary_dir, "stop", "-m", "immediate")

    def promote(self) -> None:
        """Runbook step 2 (docs/runbook-failover.md): the replica becomes a primary that accepts writes."""
        self._run(self.pg_ctl, "-D", str(self.replica_dir), "-w", "-t", "60", "promote")
        self.promoted = True

    def stop(self) -> None:
        for data in (self.primary_dir, self.replica_dir):
            if (data / "postmaster.pid").exists():
                with contextlib.suppress(ClusterError, subprocess.SubprocessError):
                    self._ctl(data, "stop", "-m", "fast")


# -- Redis Cluster ---------------------------------------------------------------------------------------------

class RedisCluster:
    """`primaries` primaries with `replicas` replicas each, on loopback; node timeout `node_timeout_ms`."""

    def __init__(self, root: Path, *, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 1000) -> None:
        self.server = find_binary("redis-server")
        self.cli = find_binary("redis-cli")
        self.root = root
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.n_primaries = primaries
        self.ports = free_ports(REDIS_PORTS, primaries * (1 + replicas), also=(10_000,))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """Every node as a seed: an instance (re)starts while any one of them answers."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/0"

    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}/0" for p in self.ports]

    def start(self) -> RedisCluster:
        import redis

        self.root.mkdir(parents=True, exist_ok=True)
        for p in self.ports:
            self.procs[p] = subprocess.Popen(
                [self.server, "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", f"nodes-{p}.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
                 "--save", "", "--appendonly", "no", "--dir", str(self.root)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in self.ports:
            wait_until(f"redis-server on {p} answers", partial(redis.Redis(port=p).ping), 20)
        r = subprocess.run([self.cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                            "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                           capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            raise ClusterError(f"redis-cli --cluster create failed: {r.stdout[-400:]} {r.stderr[-400:]}")
        wait_until("every Redis node reports cluster_state ok", self.healthy, 30)
        return self

    def info(self, port: int) -> dict[str, Any]:
        import redis

        return dict(redis.Redis(port=port, socket_timeout=1).cluster("INFO"))

    def alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def healthy(self) -> bool:
        """Every running node says cluster_state ok and sees all 16384 slots served."""
        for p in self.alive():
            info = self.info(p)
            if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != 16384:
                return False
        return True

    def primaries(self) -> list[int]:
        """Ports of the running nodes that are primaries now."""
        import redis

        out = []
        for p in self.alive():
            role = redis.Redis(port=p, socket_timeout=1).execute_command("ROLE")  # type: ignore[no-untyped-call]
            if role[0] in (b"master", "master"):
                out.append(p)
        return out

    def stop_node(self, port: int) -> None:
        """The fault: a node disappears (SIGKILL, nothing saved)."""
        _kill(self.procs[port], signal.SIGKILL)

    def failed_over(self) -> bool:
        """A replica of every stopped primary took over: as many primaries as at the start, all slots served."""
        return len(self.primaries()) == self.n_primaries and self.healthy()

    def stop(self) -> None:
        for proc in self.procs.values():
            _kill(proc)


# -- NATS JetStream cluster --------------------------------------------------------------------------------------

class NatsCluster:
    """`size` nats-server nodes with JetStream, routed to each other on loopback."""

    def __init__(self, root: Path, *, size: int = 3, name: str = "usermem-test") -> None:
        self.server = find_binary("nats-server")
        self.root = root
        self.name = name
        self.ports = free_ports(NATS_PORTS, size, also=(2000,))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def url(self, port: int | None = None) -> str:
        return f"nats://127.0.0.1:{port or self.ports[0]}"

    def start_node(self, port: int) -> None:
        routes = ",".join(f"nats://127.0.0.1:{p + 2000}" for p in self.ports if p != port)
        store = self.root / f"n{port}"
        store.mkdir(parents=True, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [self.server, "-a", "127.0.0.1", "-p", str(port), "-n", f"n{port}", "-js", "-sd", str(store),
             "--cluster_name", self.name, "--cluster", f"nats://127.0.0.1:{port + 2000}", "--routes", routes],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> NatsCluster:
        for p in self.ports:
            self.start_node(p)
        for p in self.ports:
            wait_until(f"nats-server on {p} has JetStream with a meta leader", partial(self._js_ready, p), 60,
                       interval=0.25)
        return self

    def _js_ready(self, port: int) -> bool:
        import asyncio

        async def probe() -> bool:
            nc = await self.connect(port)
            try:
                await nc.jetstream().account_info()
                return True
            finally:
                await nc.close()

        return asyncio.run(asyncio.wait_for(probe(), 5))

    async def connect(self, port: int | None = None) -> Any:
        import nats

        async def quiet(_exc: Exception) -> None:
            return None

        return await nats.connect(self.url(port), connect_timeout=2, allow_reconnect=False,
                                  max_reconnect_attempts=0, error_cb=quiet)

    def add_stream(self, stream: str, subjects: Sequence[str], replicas: int = 3, max_age: float = 86_400.0) -> None:
        """Create the stream with `replicas` copies (retried while the cluster elects its leaders)."""
        import asyncio

        from nats.js.api import StreamConfig

        async def create() -> bool:
            nc = await self.connect(self.alive()[0])
            try:
                await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=list(subjects),
                                                             num_replicas=replicas, max_age=max_age))
                return True
            finally:
                await nc.close()

        wait_until(f"stream {stream} (R{replicas}) created", lambda: asyncio.run(asyncio.wait_for(create(), 10)), 60,
                   interval=0.5)

    def stream_info(self, stream: str, port: int | None = None) -> Any:
        import asyncio

        async def get() -> Any:
            nc = await self.connect(port or self.alive()[0])
            try:
                return await nc.jetstream().stream_info(stream)
            finally:
                await nc.close()

        return asyncio.run(asyncio.wait_for(get(), 10))

    def alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def stop_node(self, port: int) -> None:
        _kill(self.procs[port], signal.SIGKILL)

    def stop(self) -> None:
        for proc in self.procs.values():
            _kill(proc)


# -- usermem serve instances -----------------------------------------------------------------------------------

@dataclass
class Instance:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Instances:
    """`usermem serve` processes sharing one configuration (environment `env`, store `store_url`)."""

    store_url: str
    env: dict[str, str]
    root: Path
    workers: int = 1
    items: list[Instance] = field(default_factory=list)

    def start(self, n: int, *, timeout: float = 90) -> Instances:
        used = {i.port for i in self.items}
        for port in free_ports(HTTP_PORTS, n, avoid=used):
            self.items.append(self._spawn(port))
        for inst in self.items[-n:]:
            self.wait_ready(inst, timeout)
        return self

    def _spawn(self, port: int) -> Instance:
        log = self.root / f"serve-{port}.log"
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-c", "from usermem.interfaces.cli import main; main()", "serve", "--store",
               self.store_url, "--port", str(port), "--log-level", "warning", "--workers", str(self.workers),
               "--rate-limit", "0", "--key-file", str(self.root / "local-key"), "--no-mcp"]
        # The same usermem as this process (a source checkout on PYTHONPATH, not only the installed one).
        source = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join([source, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
        with open(log, "ab") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                    env={**os.environ, **self.env, "PYTHONPATH": path},
                                    cwd=self.root, start_new_session=True)  # its own group: kill -9 takes workers
        return Instance(port, proc, log)

    def wait_ready(self, inst: Instance, timeout: float = 90) -> None:
        import httpx

        def ready() -> bool:
            if inst.proc.poll() is not None:
                raise ClusterError(f"usermem serve on {inst.port} exited: {inst.log.read_text()[-800:]}")
            return httpx.get(inst.url + "/ready", timeout=1).status_code == 200

        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except ClusterError:
                raise
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"usermem serve on {inst.port} not ready in {timeout:.0f} s: "
                                   f"{inst.log.read_text()[-800:]}")
            time.sleep(0.1)

    @property
    def urls(self) -> list[str]:
        return [i.url for i in self.items if i.proc.poll() is None]

    def kill(self, index: int) -> Instance:
        """The fault: kill -9 of an instance (and of its worker processes)."""
        inst = self.items[index]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(inst.proc.pid, signal.SIGKILL)
        inst.proc.wait(10)
        return inst

    def restart(self, index: int, timeout: float = 90) -> Instance:
        old = self.items[index]
        _kill(old.proc)
        self.items[index] = self._spawn(old.port)
        self.wait_ready(self.items[index], timeout)
        return self.items[index]

    def stop(self) -> None:
        for inst in self.items:
            _kill(inst.proc)
            with contextlib.suppress(ProcessLookupError):  # workers left behind by a killed supervisor
                os.killpg(inst.proc.pid, signal.SIGKILL)


def temp_root(prefix: str = "usermem-cluster-") -> Path:
    """A fresh directory for node data (under /tmp, readable by the postgres user)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


# -- all of it together ------------------------------------------------------------------------------------------

@dataclass
class Deployment:
    """Instances of `usermem serve` on the PostgreSQL pair (reads on the replica), the Redis Cluster (the
    `tiered` preset) and the JetStream cluster (an R3 stream, created before the instances start)."""

    pg: PgPair
    redis: RedisCluster
    nats: NatsCluster
    instances: Instances
    key: str
    stream: str
    tenant: str = "local"

    @classmethod
    def start(cls, pg: PgPair, redis: RedisCluster, nats: NatsCluster, root: Path, *, instances: int = 2,
              stream: str = "UMCLUSTER", prefix: str = "umcluster") -> Deployment:
        nats.add_stream(stream, [f"{prefix}.>"], replicas=3)
        leader = int(str(nats.stream_info(stream).cluster.leader).lstrip("n"))
        store_url = pg.url(read_replica=f"127.0.0.1:{pg.replica_port}")
        env = {"USERMEM_PRESET": "tiered", "USERMEM_REDIS_URL": redis.url, "USERMEM_KEY_PREFIX": "umcluster",
               "USERMEM_NATS_URL": nats.url(leader), "USERMEM_NATS_STREAM": stream,
               "USERMEM_NATS_SUBJECT_PREFIX": prefix, "USERMEM_EMBEDDER": "none",
               "USERMEM_HYBRID_LEXICAL_WEIGHT": "0", "HF_HUB_OFFLINE": "1"}
        # The first instance migrates the schema and makes the key (root/local-key) the others reuse.
        group = Instances(store_url, env, root).start(1)
        if instances > 1:
            group.start(instances - 1)
        key = (root / "local-key").read_text(encoding="utf-8").strip()
        return cls(pg, redis, nats, group, key, stream)

    def stream_leader(self) -> int:
        return int(str(self.nats.stream_info(self.stream).cluster.leader).lstrip("n"))

    def stream_messages(self) -> int:
        return int(self.nats.stream_info(self.stream).state.messages)

    def current_values(self, port: int | None = None) -> set[tuple[str, str, str]]:
        """(user, key, value) of every current memory of the tenant, read from the server on `port`."""
        import psycopg

        with psycopg.connect(self.pg.url(port), autocommit=True, connect_timeout=3) as c:
            rows = c.execute("SELECT user_id, key, value #>> '{}' FROM memories WHERE tenant = %s"
                             " AND superseded_by IS NULL AND deleted_at IS NULL", (self.tenant,)).fetchall()
        return {(str(u), str(k), str(v)) for u, k, v in rows}

    def stop(self) -> None:
        self.instances.stop()
