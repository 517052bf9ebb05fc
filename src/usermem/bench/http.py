"""HTTP load run: a loopback load generator against `usermem serve` on the embedded SQLite store.

Recall (GET /v1/users/{u}/memories?k=5) and write (POST /v1/memories) requests/s and p50/p95/p99 at
concurrency 1, 8 and 32. Bounded in count and in time per step. The server runs in its own process
(so the generator does not share its interpreter), with rate limiting off and embeddings off (vector
indexing of writes is measured by the relevance benchmarks); target: recall p95 <= 15 ms at concurrency 8.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from usermem.bench import BenchContext, Target, benchmark, percentiles

CONCURRENCY = (1, 8, 32)
TARGET_RECALL_P95_MS = 15.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, db: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "USERMEM_EMBEDDER": "none", "USERMEM_HYBRID_LEXICAL_WEIGHT": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from usermem.interfaces.cli import main; main()", "serve", "--store",
             f"sqlite:///{db}", "--port", str(self.port), "--rate-limit", "0", "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"usermem serve exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                if httpx.get(self.url + "/health", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError("usermem serve did not start within 60 s")
        self.key = Path(f"{db}.local-key").read_text(encoding="utf-8").strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class _Conn:
    """One keep-alive HTTP/1.1 connection with hand-written framing: a lean generator leaves the CPU to the
    server (httpx would cost more per request than the server's own work)."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {key}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n".encode() + self.auth
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
        self.writer.write(head + b"\r\n" + (body or b""))
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            if line[:15].lower() == b"content-length:":
                length = int(line[15:].strip())
        if length:
            await self.reader.readexactly(length)
        return int(status_line.split(b" ", 2)[1])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _load(url: str, key: str, concurrency: int, total: int, seconds: float, make: Any) -> dict[str, Any]:
    """Send up to `total` requests (stopping after `seconds`) from `concurrency` connections."""
    host, port = url.split("//", 1)[1].split(":")
    latencies: list[float] = []
    errors = 0
    sent = 0
    deadline = time.perf_counter() + seconds

    async def worker(n: int) -> None:
        nonlocal errors, sent
        rng = random.Random(n)
        conn = _Conn(host, int(port), key)
        try:
            while sent < total and time.perf_counter() < deadline:
                sent += 1
                method, path, body = make(rng)
                payload = json.dumps(body).encode() if body is not None else None
                t = time.perf_counter()
                try:
                    ok = await conn.request(method, path, payload) == 200
                except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
                    ok = False
                    conn.close()
                    conn = _Conn(host, int(port), key)
                if ok:
                    latencies.append(time.perf_counter() - t)
                else:
                    errors += 1
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - start
    out = percentiles(latencies)
    out.update(rps=round(len(latencies) / elapsed, 1), errors=errors, seconds=round(elapsed, 2))
    return out


@benchmark("http", targets=[Target("recall.c8.p95_ms", "<=", TARGET_RECALL_P95_MS, "HTTP recall p95 at concurrency 8")],
           load_generator="a separate process on the same machine (asyncio keep-alive clients), sharing its "
                          "cores with the server")
def bench_http(ctx: BenchContext) -> dict[str, Any]:
    users = ctx.size(200, 20)
    per_user = ctx.size(20, 5)
    total = ctx.size(3000, 150)
    seconds = ctx.size(20.0, 3.0)
    tmp = tempfile.TemporaryDirectory(prefix="usermem-bench-http-")
    server = _Server(Path(tmp.name) / "bench.db")
    task = ctx.progress.add_task("http load", total=2 * len(CONCURRENCY) + 1) if ctx.progress else None
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=60) as c:
            for u in range(users):
                writes = [{"kind": "preference" if j % 3 else "fact", "key": f"field_{j}",
                           "value": f"value {j} of user {u} / 用户{u}的第{j}项", "source": "user_confirmed"}
                          for j in range(per_user)]
                c.post("/v1/memories/batch", json={"user_id": f"user{u}", "writes": writes}).raise_for_status()
        if task is not None:
            ctx.progress.advance(task)

        def recall(rng: random.Random) -> tuple[str, str, None]:
            return "GET", f"/v1/users/user{rng.randrange(users)}/memories?k=5", None

        counter = iter(range(10**9))

        def write(rng: random.Random) -> tuple[str, str, dict[str, Any]]:
            i = next(counter)
            return "POST", "/v1/memories", {"user_id": f"user{rng.randrange(users)}", "kind": "preference",
                                            "key": f"load_{i % 50}", "value": f"v{i} 偏好", "source": "user_confirmed"}

        results: dict[str, Any] = {"recall": {}, "write": {}}
        for name, make in (("recall", recall), ("write", write)):
            for clients in CONCURRENCY:
                results[name][f"c{clients}"] = asyncio.run(_load(server.url, server.key, clients, total, seconds,
                                                                 make))
                if task is not None:
                    ctx.progress.advance(task)
    finally:
        server.stop()
        tmp.cleanup()
    p95 = results["recall"]["c8"].get("p95_ms")
    results["setup"] = {"users": users, "memories_per_user": per_user, "max_requests_per_step": total,
                        "max_seconds_per_step": seconds, "store": "sqlite (file, WAL)", "server": "uvicorn, 1 process",
                        "generator": "asyncio keep-alive connections (one per concurrent client), separate process"}
    ctx.notes.append(f"http: recall p95 at concurrency 8 = {p95} ms (target <= {TARGET_RECALL_P95_MS} ms); "
                     "load generator and server share the machine's cores")
    return results
