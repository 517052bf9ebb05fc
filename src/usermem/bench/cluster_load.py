"""A bounded load run against several `usermem serve` instances, in phases with faults (issue 17).

`RoundRobin` is the client side of "stateless instances behind a load balancer": each request goes to
the next instance; a request that could not be *sent* (connection refused: the instance is gone) moves
on to the next one, a request that was sent and got no answer is an error (it may or may not have been
applied, so it is never counted as acknowledged).

`run_phases` drives `clients` threads through a list of `Phase`s. Each phase is bounded in requests and
in seconds and may start with a fault (kill an instance, stop a node) in a background thread. The mix:
writes of a new key (alternating a tier kind and a store-of-record kind), followed by a read of that key
through the *next* instance (read-your-writes across instances: a missing value is a `stale_read`, listed with
what every instance answers for the key 200 ms later, so lag and a lost cache entry tell apart), and
recalls. Per phase: requests, errors by kind, p50/p95/p99, throughput; every acknowledged write is kept
so the caller can check that none was lost. `write_report` writes JSON, Markdown and a PNG (latency over
time with the phases and the errors, and p95 per phase) into a fresh directory.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from usermem.bench import percentiles


class NoInstance(RuntimeError):
    """No instance accepted the connection."""


class RoundRobin:
    """Requests spread over `urls` in turn; a refused connection moves on to the next instance."""

    def __init__(self, urls: Sequence[str], key: str, *, timeout: float = 10.0) -> None:
        self.urls = list(urls)
        self._next = itertools.count()
        self._local = threading.local()
        self.headers = {"Authorization": f"Bearer {key}"}
        self.timeout = timeout

    def _client(self) -> httpx.Client:
        c: httpx.Client | None = getattr(self._local, "client", None)
        if c is None:
            c = httpx.Client(headers=self.headers, timeout=self.timeout)
            self._local.client = c
        return c

    def request(self, method: str, path: str, **kw: Any) -> tuple[str, httpx.Response]:
        """(the instance that answered, its response); NoInstance when none accepted the connection."""
        start = next(self._next)
        for i in range(len(self.urls)):
            url = self.urls[(start + i) % len(self.urls)]
            try:
                return url, self._client().request(method, url + path, **kw)
            except httpx.ConnectError:
                continue  # never sent: safe to try the next instance
        raise NoInstance(f"no instance of {self.urls} accepted the connection")

    def request_to(self, url: str, method: str, path: str, **kw: Any) -> httpx.Response:
        """A request to one given instance (no round robin)."""
        return self._client().request(method, url + path, **kw)

    def close(self) -> None:
        """Close the calling thread's connections (each thread has its own)."""
        c = getattr(self._local, "client", None)
        if c is not None:
            c.close()
            self._local.client = None


@dataclass
class Phase:
    name: str
    requests: int  # this many client iterations (a write and its read, or a recall), more while the fault runs
    seconds: float  # and at most this long
    fault: Callable[[], Any] | None = None  # run in a background thread when the phase starts
    fault_name: str = ""
    writes_only: bool = False  # only writes, no read-back or recall (to measure write throughput)


@dataclass
class Sample:
    t: float  # seconds since the run started
    phase: str
    op: str  # write | read_own | recall
    ms: float
    error: str | None  # None, "http_<status>", or the transport error's class name


@dataclass
class PhaseResult:
    name: str
    fault: str
    seconds: float
    requests: int
    errors: dict[str, int]
    stale_reads: int
    latency: dict[str, float]
    by_op: dict[str, dict[str, float]]
    fault_seconds: float | None = None
    fault_error: str | None = None
    stale: list[dict[str, Any]] = field(default_factory=list)  # the first stale reads, with a re-read each

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


@dataclass
class LoadRun:
    phases: list[PhaseResult] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    acked: list[tuple[str, str, str]] = field(default_factory=list)  # (user, key, value) acknowledged writes

    def as_dict(self) -> dict[str, Any]:
        return {"phases": [{**p.__dict__, "error_count": p.error_count} for p in self.phases],
                "acknowledged_writes": len(self.acked)}


def _error_of(resp: httpx.Response | None, exc: BaseException | None) -> str | None:
    if exc is not None:
        return type(exc).__name__
    assert resp is not None
    return None if resp.status_code < 400 else f"http_{resp.status_code}"


def run_phases(rr: RoundRobin, phases: Sequence[Phase], *, clients: int = 4, users: int = 20,
               run: LoadRun | None = None, user_prefix: str = "u") -> LoadRun:
    """Drive the phases in order (see the module docstring). Never raises for request failures.
    `run`: the record to fill (a fault may watch it, e.g. to strike once some writes were acknowledged)."""
    run = run if run is not None else LoadRun()
    t0 = time.monotonic()
    seq = itertools.count()
    for phase in phases:
        _run_phase(rr, phase, run, t0, seq, clients, users, user_prefix)
    return run


def _run_phase(rr: RoundRobin, phase: Phase, run: LoadRun, t0: float, seq: Iterator[int], clients: int,
               users: int, user_prefix: str) -> None:
    lock = threading.Lock()
    fault_info: dict[str, Any] = {}
    fault_thread = None
    if phase.fault is not None:
        fault_fn = phase.fault

        def fault() -> None:
            began = time.monotonic()
            try:
                fault_fn()
            except Exception as exc:  # reported with the phase, the load goes on
                fault_info["error"] = f"{type(exc).__name__}: {exc}"
            fault_info["seconds"] = time.monotonic() - began
        fault_thread = threading.Thread(target=fault, name=f"fault-{phase.name}", daemon=True)
        fault_thread.start()
    budget = itertools.count()
    started = time.monotonic()
    deadline = started + phase.seconds
    samples: list[Sample] = []
    stale = [0]
    stale_seen: list[dict[str, Any]] = []

    def timed(op: str, method: str, path: str, ok: tuple[int, ...] = (),
              **kw: Any) -> tuple[str, httpx.Response] | None:
        begin = time.monotonic()
        resp: httpx.Response | None = None
        exc: BaseException | None = None
        url = ""
        try:
            url, resp = rr.request(method, path, **kw)
        except (httpx.HTTPError, NoInstance) as e:
            exc = e
        end = time.monotonic()
        error = None if resp is not None and resp.status_code in ok else _error_of(resp, exc)
        s = Sample(begin - t0, phase.name, op, (end - begin) * 1000, error)
        with lock:
            samples.append(s)
        return (url, resp) if s.error is None and resp is not None else None

    def note_stale(user: str, key: str, kind: str, value: str, wrote_via: str, read_via: str,
                   body: Any) -> None:
        """A stale read, with what each instance answers for the key a moment later (lag or loss)."""
        time.sleep(0.2)
        again: dict[str, Any] = {}
        for url in rr.urls:
            try:
                r = rr.request_to(url, "GET", f"/v1/users/{user}/memories", params={"keys": key, "k": 5})
                again[url] = [x.get("value") for x in _records(r.json())] if r.status_code == 200 else r.status_code
            except httpx.HTTPError as e:
                again[url] = type(e).__name__
        with lock:
            stale[0] += 1
            if len(stale_seen) < 10:
                stale_seen.append({"t": round(time.monotonic() - t0, 3), "user": user, "key": key, "kind": kind,
                                   "value": value, "wrote_via": wrote_via, "read_via": read_via,
                                   "answer": _records(body), "after_200ms": again})

    def client() -> None:
        # Until the request budget is spent and the fault is over (the load covers the whole fault), or the time.
        while time.monotonic() < deadline and (next(budget) < phase.requests
                                               or (fault_thread is not None and fault_thread.is_alive())):
            i = next(seq)
            user = f"{user_prefix}{(i // 3) % users}"  # every user gets writes and recalls
            if i % 3 == 2 and not phase.writes_only:
                timed("recall", "GET", f"/v1/users/{user}/memories", (404,), params={"k": 5})  # 404: no such user yet
                continue
            kind = "preference" if i % 2 else "fact"
            key, value = f"k{i}", f"v{i} {phase.name}"
            wrote = timed("write", "POST", "/v1/memories", json={
                "user_id": user, "kind": kind, "key": key, "value": value, "source": "user_confirmed"})
            if wrote is None:
                continue
            with lock:
                run.acked.append((user, key, value))
            if phase.writes_only:
                continue
            got = timed("read_own", "GET", f"/v1/users/{user}/memories", params={"keys": key, "k": 5})
            if got is not None and value not in {r.get("value") for r in _records(got[1].json())}:
                note_stale(user, key, kind, value, wrote[0], got[0], got[1].json())

    threads = [threading.Thread(target=client, name=f"load-{n}") for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if fault_thread is not None:
        fault_thread.join(120)
    elapsed = time.monotonic() - started
    errors = Counter(s.error for s in samples if s.error is not None)
    ok = [s.ms / 1000 for s in samples if s.error is None]
    by_op = {op: percentiles([s.ms / 1000 for s in samples if s.op == op and s.error is None])
             for op in ("write", "read_own", "recall")}
    run.phases.append(PhaseResult(
        phase.name, phase.fault_name, round(elapsed, 3), len(samples), dict(errors), stale[0],
        {**percentiles(ok), "rps": round(len(samples) / elapsed, 1) if elapsed else 0.0}, by_op,
        round(fault_info["seconds"], 3) if "seconds" in fault_info else None, fault_info.get("error"), stale_seen))
    run.samples.extend(samples)


def _records(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, list):
        return [r for r in body if isinstance(r, dict)]
    if isinstance(body, dict):
        items = body.get("items")  # RecallOut: items of {memory, score, ...}
        if isinstance(items, list):
            return [r.get("memory", r) for r in items if isinstance(r, dict)]
    return []


def write_report(run: LoadRun, out_dir: Path, *, title: str, conditions: dict[str, Any]) -> dict[str, Path]:
    """JSON, Markdown and (when matplotlib is installed) a PNG in `out_dir`, which must not exist yet."""
    out_dir.mkdir(parents=True, exist_ok=False)
    paths = {"json": out_dir / "cluster-load.json", "md": out_dir / "cluster-load.md"}
    data = {"title": title, "conditions": conditions, **run.as_dict()}
    paths["json"].write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    png = plot(run, out_dir / "cluster-load.png", title)
    if png is not None:
        paths["png"] = png
    lines = [f"# {title}", "", "Conditions: " + ", ".join(f"{k}: {v}" for k, v in conditions.items()), "",
             "| phase | fault | s | requests | req/s | p50 ms | p95 ms | errors | stale reads |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for p in run.phases:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(p.errors.items())) or "0"
        lines.append(f"| {p.name} | {p.fault or '—'} | {p.seconds} | {p.requests} | {p.latency.get('rps')} | "
                     f"{p.latency.get('p50_ms', '—')} | {p.latency.get('p95_ms', '—')} | {errs} | {p.stale_reads} |")
    lines += ["", f"Acknowledged writes: {len(run.acked)}."]
    if png is not None:
        lines += ["", f"![latency per phase]({png.name})"]
    paths["md"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def plot(run: LoadRun, path: Path, title: str) -> Path | None:
    """Latency of every request over time (errors in red, phases shaded) and p95 / errors per phase."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), gridspec_kw={"height_ratios": [3, 2]})
    ok = [s for s in run.samples if s.error is None]
    bad = [s for s in run.samples if s.error is not None]
    top.scatter([s.t for s in ok], [max(s.ms, 0.1) for s in ok], s=4, alpha=0.5, label="ok")
    top.scatter([s.t for s in bad], [max(s.ms, 0.1) for s in bad], s=14, marker="x", color="red", label="error")
    for i, p in enumerate(run.phases):
        ts = [s.t for s in run.samples if s.phase == p.name]
        if ts:
            top.axvspan(min(ts), max(ts), alpha=0.08 if i % 2 else 0.16, color="grey")
            top.text(min(ts), 0.98 if i % 2 == 0 else 0.91, p.name, fontsize=7, va="top",
                     transform=top.get_xaxis_transform())
    top.set_yscale("log")
    top.set_xlabel("seconds since start")
    top.set_ylabel("ms (log)")
    top.legend(loc="upper right", fontsize=7)
    top.set_title(title, fontsize=9)
    names = [p.name for p in run.phases]
    xs = range(len(names))
    bottom.bar([x - 0.2 for x in xs], [p.latency.get("p95_ms", 0) for p in run.phases], width=0.4, label="p95 ms")
    twin = bottom.twinx()
    twin.bar([x + 0.2 for x in xs], [p.error_count for p in run.phases], width=0.4, color="red", alpha=0.6,
             label="errors")
    bottom.set_xticks(list(xs), names, fontsize=7, rotation=15)
    bottom.set_ylabel("p95 ms")
    twin.set_ylabel("errors")
    bottom.legend(loc="upper left", fontsize=7)
    twin.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
