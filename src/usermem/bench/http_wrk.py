"""HTTP curve with a compiled load generator (issue 19): `wrk` against `usermem serve --workers N`.

Users hold 1,000 memories each; GET /v1/users/{u}/memories?k=5 (recall) rotating over the users, at
concurrency 1 / 8 / 32 / 64, 10 s per step (3 s with --quick), per backend (SQLite file; PostgreSQL when
it answers; the tiered preset, PostgreSQL + Redis, when both answer). wrk runs on the same 2-core machine
as the server (loopback), so generator and server share the CPUs. `wrk` is installed with apt-get when absent and this process may (root); else the benchmark
reports why it did not run. Rate limiting and embeddings are off in the server.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from usermem.bench import BenchContext, Target, benchmark
from usermem.bench.core import T0, synthetic_records
from usermem.config import load_settings
from usermem.engine.memory import Memory

CONCURRENCY = (1, 8, 32, 64)
PER_USER = 1000
GENERATOR = "wrk (compiled, 2 threads) on the same machine as the server, over loopback"
_LUA = """
local users = {}
for i = 0, %(users)d - 1 do users[#users + 1] = "/v1/users/wrk-" .. i .. "/memories?k=5" end
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", users[(n %% #users) + 1], {["Authorization"] = "Bearer %(key)s"})
end
done = function(summary, latency, requests)
  io.write(string.format("JSON {\\"requests\\": %%d, \\"seconds\\": %%f, \\"errors\\": %%d, \\"non2xx\\": %%d, "
    .. "\\"p50_us\\": %%d, \\"p95_us\\": %%d, \\"p99_us\\": %%d}\\n", summary.requests, summary.duration / 1e6,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


def ensure_wrk() -> str | None:
    """The wrk binary, installed from Debian when absent and possible."""
    found = shutil.which("wrk")
    if found or not shutil.which("apt-get") or os.geteuid() != 0:
        return found
    subprocess.run(["apt-get", "install", "-y", "wrk"], capture_output=True, check=False, timeout=600)
    return shutil.which("wrk")


def _serve(url: str, workers: int, port: int, extra_env: dict[str, str] | None = None
           ) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "USERMEM_EMBEDDER": "none", "USERMEM_HYBRID_LEXICAL_WEIGHT": "0", **(extra_env or {})}
    with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
        key_file = f.name
    os.unlink(key_file)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from usermem.interfaces.cli import main; main()", "serve", "--store", url,
         "--port", str(port), "--rate-limit", "0", "--log-level", "warning", "--workers", str(workers),
         "--no-mcp", "--key-file", key_file],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 180
    pids: set[int] = set()
    while time.monotonic() < deadline and len(pids) < workers:
        if proc.poll() is not None:
            raise RuntimeError(f"usermem serve exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with httpx.Client(timeout=0.5) as c:
                pids.add(c.get(f"http://127.0.0.1:{port}/health").json()["worker"])
        except httpx.TransportError:
            time.sleep(0.2)
    if len(pids) < workers:
        proc.terminate()
        raise RuntimeError("usermem serve did not start its workers within 180 s")
    return proc, Path(key_file).read_text(encoding="utf-8").strip()


def _curve(wrk: str, url: str, users: int, ctx: BenchContext, workers: int,
           extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    from usermem.bench.http import _free_port

    port = _free_port()
    proc, key = _serve(url, workers, port, extra_env)
    out: dict[str, Any] = {"memories_per_user": PER_USER, "users": users, "workers": workers}
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(_LUA % {"users": users, "key": key})
            script = f.name
        seconds = ctx.size(10, 3)
        for c in CONCURRENCY:
            run = subprocess.run([wrk, f"-t{min(2, c)}", f"-c{c}", f"-d{seconds}s", "-s", script,
                                  f"http://127.0.0.1:{port}"], capture_output=True, text=True, timeout=seconds + 60)
            line = next((x for x in run.stdout.splitlines() if x.startswith("JSON ")), None)
            if line is None:
                out[f"c{c}"] = {"error": (run.stderr or run.stdout).strip()[:300]}
                continue
            r = json.loads(line[5:])
            out[f"c{c}"] = {"requests_per_s": round(r["requests"] / r["seconds"], 1), "p50_ms": r["p50_us"] / 1000,
                            "p95_ms": r["p95_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
                            "errors": r["errors"], "non_2xx": r["non2xx"]}
        os.unlink(script)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def _load(url: str, users: int, **settings: Any) -> None:
    m = Memory(settings=load_settings(env={}, store_url=url, embedder="none", hybrid_lexical_weight=0.0,
                                      **settings))
    rng = random.Random(19)
    for u in range(users):
        m.store.bulk_insert(synthetic_records("local", f"wrk-{u}", PER_USER, T0, rng))
    m.store.analyze()
    m.close()


@benchmark("http_wrk", targets=[
    Target("sqlite.c8.p95_ms", "<=", 15.0, "HTTP recall p95 at concurrency 8 (SQLite, 1,000 memories/user)"),
    Target("sqlite.c8.requests_per_s", ">=", 1000.0,
           "HTTP recall requests/s at concurrency 8 (SQLite, 1,000 memories/user)"),
], load_generator=GENERATOR)
def bench_http_wrk(ctx: BenchContext) -> dict[str, Any]:
    wrk = ensure_wrk()
    if wrk is None:
        return {"error": "wrk is not installed and could not be installed (apt-get install -y wrk as root)"}
    users = ctx.size(20, 4)
    workers = os.cpu_count() or 1
    out: dict[str, Any] = {"load_generator": GENERATOR, "memories_per_user": PER_USER}
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/wrk.db"
        _load(url, users)
        out["sqlite"] = _curve(wrk, url, users, ctx, workers)
    try:
        from usermem.bench.storage import _ensure_database, _pg_base

        base = _pg_base()
        _ensure_database(base)
        pg = f"{base}{'&' if '?' in base else '?'}schema=wrk_{os.getpid()}"
        _load(pg, users)
        try:
            out["postgres"] = _curve(wrk, pg, users, ctx, workers)
        finally:
            import psycopg

            from usermem.store.postgres import split_url

            with psycopg.connect(split_url(base)[0], autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS wrk_{os.getpid()} CASCADE")
    except Exception as exc:  # PostgreSQL missing: the SQLite curve still stands
        out["postgres"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    out["tiered"] = _tiered_curve(wrk, users, ctx, workers)
    plot = plot_http_curves(out, ctx.out_dir / "http-curves.png")
    if plot is not None:
        out["plot"] = str(plot)
    return out


def plot_http_curves(out: dict[str, Any], path: Path) -> Path | None:
    """p50 / p95 latency and requests/s against concurrency, one line per backend that was measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    drawn = False
    for backend, colour in (("sqlite", "#1b9e77"), ("postgres", "#7570b3"), ("tiered", "#d95f02")):
        res = out.get(backend)
        if not isinstance(res, dict):
            continue
        cs = [c for c in CONCURRENCY if isinstance(res.get(f"c{c}"), dict) and "p95_ms" in res[f"c{c}"]]
        if not cs:
            continue
        drawn = True
        for pct, style in (("p50_ms", "-o"), ("p95_ms", "--^")):
            ax.plot(cs, [res[f"c{c}"][pct] for c in cs], style, color=colour, label=f"{backend} {pct[:3]}")
        bx.plot(cs, [res[f"c{c}"]["requests_per_s"] for c in cs], "-o", color=colour, label=backend)
    if not drawn:
        plt.close(fig)
        return None
    for axis in (ax, bx):
        axis.set_xscale("log", base=2)
        axis.set_xticks(list(CONCURRENCY), [str(c) for c in CONCURRENCY])
        axis.set_xlabel("concurrency")
        axis.legend(fontsize=7)
    fig.suptitle(f"{PER_USER:,} memories/user; load from {GENERATOR}", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("milliseconds")
    ax.set_title("HTTP recall latency")
    bx.set_ylabel("requests/s")
    bx.set_title("HTTP recall throughput")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tiered_curve(wrk: str, users: int, ctx: BenchContext, workers: int) -> dict[str, Any]:
    """The tiered preset (PostgreSQL of record + Redis serving preferences and context), its own schema and
    Redis prefix, both dropped afterwards. Its recall scores every live row (no rank index across tiers)."""
    from usermem.bench.storage import _ensure_database, _pg_base, _redis_url

    prefix = f"usermem-bench-wrk-{os.getpid()}"
    tier = {"preset": "tiered", "redis_url": _redis_url(), "key_prefix": prefix}
    env = {"USERMEM_PRESET": "tiered", "USERMEM_REDIS_URL": _redis_url(), "USERMEM_KEY_PREFIX": prefix}
    schema = f"wrk_tiered_{os.getpid()}"
    try:
        base = _pg_base()
        _ensure_database(base)
        url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
        try:
            _load(url, users, **tier)
            return _curve(wrk, url, users, ctx, workers, env)
        finally:
            import psycopg

            from usermem.store.postgres import split_url
            from usermem.store.redis import RedisTier

            with psycopg.connect(split_url(base)[0], autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            tier_keys = RedisTier(_redis_url(), [], prefix=prefix)
            tier_keys.drop_prefix()
            tier_keys.close()
    except Exception as exc:  # PostgreSQL or Redis missing
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
