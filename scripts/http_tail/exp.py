"""Experiment harness for the HTTP tail (docs/scaling.md, "engine threads"): `exp.py load` copies the http_wrk data
(20 users x 1,000 memories) into schemas pgtail_pg / pgtail_ti; `exp.py run --backend postgres|tiered [--src DIR]
[--env K=V ...]` serves it with 2 workers (probe/sitecustomize.py times each worker from the inside) and runs wrk
at c=8, printing wrk percentiles and the in-worker ones (app / queue / exec / off-CPU / loop gap, ms)."""
from pathlib import Path
import json, os, sys, subprocess, tempfile, time, glob, statistics, argparse
p = argparse.ArgumentParser()
p.add_argument("cmd")
p.add_argument("--src", default=str(Path(__file__).resolve().parents[2] / "src"))
p.add_argument("--backend", default="postgres")
p.add_argument("--c", default="8")
p.add_argument("--secs", type=int, default=8)
p.add_argument("--workers", type=int, default=2)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--env", action="append", default=[])
p.add_argument("--url-extra", default="")
p.add_argument("--tag", default="")
a = p.parse_args()
sys.path.insert(0, a.src)
os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parent / "probe") + ":" + a.src
from usermem.bench.http_wrk import _load, _serve, _LUA, ensure_wrk
from usermem.bench.storage import _ensure_database, _pg_base, _redis_url
base = _pg_base()
USERS = 20
PG = f"{base}{'&' if '?' in base else '?'}schema=pgtail_pg"
TI = f"{base}{'&' if '?' in base else '?'}schema=pgtail_ti"
TIER = {"preset": "tiered", "redis_url": _redis_url(), "key_prefix": "pgtail-ti"}
TENV = {"USERMEM_PRESET": "tiered", "USERMEM_REDIS_URL": _redis_url(), "USERMEM_KEY_PREFIX": "pgtail-ti"}
if a.cmd == "load":
    _ensure_database(base)
    import psycopg
    from usermem.store.postgres import split_url
    with psycopg.connect(split_url(base)[0], autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS pgtail_pg CASCADE"); c.execute("DROP SCHEMA IF EXISTS pgtail_ti CASCADE")
    _load(PG, USERS)
    _load(TI, USERS, **TIER)
    print("loaded"); sys.exit()
from usermem.bench.http import _free_port
url = (PG if a.backend == "postgres" else TI) + a.url_extra
env = dict(TENV) if a.backend == "tiered" else {}
for e in a.env:
    k, v = e.split("=", 1); env[k] = v
probe = tempfile.mkdtemp(prefix="probe")
env["PGTAIL_PROBE"] = probe
port = _free_port()
proc, key = _serve(url, a.workers, port, env)
wrk = ensure_wrk()
res = {}
try:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_LUA % {"users": USERS, "key": key}); script = f.name
    # warm-up
    subprocess.run([wrk, "-t1", "-c2", "-d2s", "-s", script, f"http://127.0.0.1:{port}"], capture_output=True)
    for c in [int(x) for x in a.c.split(",")]:
        la = os.getloadavg()[0]
        t0c = os.times()
        run = subprocess.run([wrk, f"-t{min(a.threads, c)}", f"-c{c}", f"-d{a.secs}s", "-s", script,
                              f"http://127.0.0.1:{port}"], capture_output=True, text=True)
        line = next(x for x in run.stdout.splitlines() if x.startswith("JSON "))
        r = json.loads(line[5:])
        res[c] = dict(rps=round(r["requests"] / r["seconds"]), p50=r["p50_us"] / 1000, p95=r["p95_us"] / 1000,
                      p99=r["p99_us"] / 1000, err=r["errors"] + r["non2xx"], load=round(la, 2))
finally:
    proc.terminate(); proc.wait(60)
def pct(xs, q):
    xs = sorted(xs); return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else None
stats = {"app": [], "queue": [], "exec": [], "loopgap": [], "gc": [], "offcpu": []}
for fn in glob.glob(probe + "/stats-*.json"):
    s = json.load(open(fn))
    for k in stats: stats[k] += s[k]
srv = {k: (pct(stats[k], .5), pct(stats[k], .95), pct(stats[k], .99)) for k in ("app", "queue", "exec", "offcpu", "loopgap")}
gcs = [d for g, d in stats["gc"] if g == 2]
srv["gc"] = {g: (sum(1 for x, _ in stats["gc"] if x == g), round(1000 * max([d for x, d in stats["gc"] if x == g] or [0]), 2)) for g in (0, 1, 2)}
print(json.dumps({"tag": a.tag, "backend": a.backend, "w": a.workers, "t": a.threads, "env": a.env, "wrk": res, "srv(p50,p95,p99 ms)": srv}))
