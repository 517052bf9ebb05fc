"""The Redis tier on a real Redis Cluster (three local primaries this test starts and stops)."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
import redis

import backends
from usermem import Memory, Op
from usermem.config import Settings
from usermem.model import Kind
from usermem.store.redis import RedisTier

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
T0 = 1_790_000_000.0


def _free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 55_000 and port not in ports:  # the cluster bus listens on port + 10000
            ports.append(port)
    return ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    server, cli = backends.require_binary("redis-server"), backends.require_binary("redis-cli")
    workdir = tmp_path_factory.mktemp("cluster")
    ports = _free_ports(3)
    procs = [subprocess.Popen([server, "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                               "--cluster-config-file", f"nodes-{p}.conf", "--save", "", "--appendonly", "no",
                               "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p in ports]
    try:
        for p in ports:
            for _ in range(100):
                try:
                    redis.Redis(port=p).ping()
                    break
                except redis.RedisError:
                    time.sleep(0.05)
        r = subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas",
                            "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            backends.unavailable(f"could not create a local Redis Cluster: {r.stdout[-300:]} {r.stderr[-300:]}")
        for _ in range(200):
            if all(redis.Redis(port=p).cluster("INFO").get("cluster_state") == "ok" for p in ports):
                break
            time.sleep(0.05)
        yield f"redis+cluster://127.0.0.1:{ports[0]}/0"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def test_tiered_preset_on_redis_cluster(cluster, tmp_path):
    url = cluster
    settings = Settings().with_overrides(store_url=backends.postgres_url(tmp_path), redis_url=url,
                                         preset="tiered", key_prefix="clu")
    m = Memory(settings=settings)
    plain = Memory(backends.postgres_url(tmp_path))
    try:
        tier = m.store.route[Kind.PREFERENCE]
        assert isinstance(tier, RedisTier) and tier.cluster
        users = [f"user-{i}" for i in range(12)]  # spread over the three primaries
        for i, user in enumerate(users):
            assert m.write("acme", user, "preference", "likes", f"tea {i}", source="user_confirmed",
                           now=T0).op is Op.ADD
            m.write("acme", user, "context", "topic", "退款", session_id="s1", now=T0)
            m.write("acme", user, "fact", "city", "杭州", source="user_confirmed", now=T0)
        for user in users:
            m.recall("acme", user, k=10, now=T0 + 1)  # fill
            m.write("acme", user, "preference", "likes", "coffee", source="user_confirmed", now=T0 + 2)
            m.recall("acme", user, k=10, now=T0 + 3, mark_used=True)
        slots = set()
        for user in users:
            got = sorted((r.key, r.value, r.id, r.last_used_at) for r in m.recall("acme", user, k=10, now=T0 + 4))
            want = sorted((r.key, r.value, r.id, r.last_used_at) for r in plain.recall("acme", user, k=10, now=T0 + 4))
            assert got == want and ("likes", "coffee") in {(g[0], g[1]) for g in got}
            keys = tier.keys_of("acme", user)
            user_slots = {tier.client.keyslot(k) for k in keys}
            assert len(keys) >= 4 and len(user_slots) == 1  # one hash slot per user
            slots |= user_slots
        nodes = {tier.client.get_node_from_key(tier.user_prefix("acme", u) + ":ver").port for u in users}
        assert len(nodes) >= 2  # users really live on different primaries
        assert m.store.stats["hits"] > 0
        assert m.forget_user("acme", users[0], now=T0 + 5) == 4
        prefix = tier.user_prefix("acme", users[0])
        assert tier.keys_of("acme", users[0]) == [prefix + ":ver"]
        assert m.recall("acme", users[0], k=10, now=T0 + 6) == []
    finally:
        m.close()
        plain.close()
        backends.drop_schema(tmp_path)
