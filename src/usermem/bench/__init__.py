"""`usermem bench`: benchmarks register here and write JSON + a markdown table (+ plots) under reports/.

A benchmark is a function `(ctx: BenchContext) -> dict` registered with ``@benchmark("name", targets=...)``.
It returns plain numbers (medians, p95, ratios against a baseline measured in the same process).

Honest reports (issue 11):

* one report = one run. Every report states its run id, start and end time, the machine (platform, CPU
  count, load average before and after) and, per benchmark, where the load generator ran and how many
  memories each user held. Nothing is merged from an older file.
* a run of every benchmark writes ``bench.{json,md,png}``; a run of some of them (``usermem bench http``)
  writes its own ``bench-partial-<run id>.*`` and leaves the full report alone. ``--quick`` runs (smoke
  tests, small sizes) always write ``bench-quick.*``, replaced whole on every quick run.
* targets are declared with the benchmark (:class:`Target`); the Targets table lists every declared
  target of every benchmark that was run as met or MISSED — a benchmark that failed or could not run
  misses its targets, it does not drop them.
* a benchmark that raises (or reports a part as ``{"error": ...}``) is listed in ``report["errors"]``;
  ``usermem bench`` then exits non-zero.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

N = TypeVar("N", int, float)
BenchFn = Callable[["BenchContext"], dict[str, Any]]
REGISTRY: dict[str, BenchFn] = {}
# Modules that define benchmarks; each registers itself on import.
MODULES = ("usermem.bench.core", "usermem.bench.lifecycle", "usermem.bench.understand", "usermem.bench.storage",
           "usermem.bench.relevance", "usermem.bench.privacy", "usermem.bench.http", "usermem.bench.events",
           "usermem.bench.release", "usermem.bench.scale", "usermem.bench.http_wrk", "usermem.bench.writes")
IN_PROCESS = "in the benchmark process, on the machine described above"


@dataclass(frozen=True, slots=True)
class Target:
    """A declared goal: the number at `metric` (a dotted path in the benchmark's result) `op` `value`."""

    metric: str
    op: Literal["<=", ">="]
    value: float
    label: str = ""
    # A companion number shown beside a miss (a dotted path too): the CPU time of the calling thread beside a
    # wall time, so a miss caused by waiting for a core on a shared machine reads as such. Never decides.
    beside: str = ""

    def check(self, result: dict[str, Any]) -> dict[str, Any]:
        """One row of the Targets table: met, or missed with the measured value or the reason it is missing."""
        row: dict[str, Any] = {"target": self.label or self.metric, "metric": self.metric,
                               "threshold": f"{self.op} {self.value:g}", "measured": None}
        if "error" in result:
            return {**row, "met": False, "why": f"benchmark failed: {result['error']}"}
        value: Any = result
        for part in self.metric.split("."):
            if isinstance(value, dict) and ("error" in value or "skipped" in value):
                return {**row, "met": False, "why": f"not measured: {value.get('error') or value.get('skipped')}"}
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return {**row, "met": False, "why": "not measured: the result has no such number"}
        met = value <= self.value if self.op == "<=" else value >= self.value
        why = None
        if not met and self.beside:
            other: Any = result
            for part in self.beside.split("."):
                other = other.get(part) if isinstance(other, dict) else None
            if isinstance(other, int | float) and not isinstance(other, bool):
                why = f"{self.beside} = {other:g}"
        return {**row, "measured": value, "met": bool(met), "why": why}


@dataclass(frozen=True, slots=True)
class Spec:
    """What a benchmark declares besides its function."""

    targets: tuple[Target, ...] = ()
    load_generator: str = IN_PROCESS


SPECS: dict[str, Spec] = {}


def benchmark(name: str, *, targets: Sequence[Target] = (),
              load_generator: str = IN_PROCESS) -> Callable[[BenchFn], BenchFn]:
    def register(fn: BenchFn) -> BenchFn:
        REGISTRY[name] = fn
        SPECS[name] = Spec(tuple(targets), load_generator)
        return fn
    return register


@dataclass
class BenchContext:
    out_dir: Path
    quick: bool = False  # small sizes, for the test suite
    progress: Any = None  # rich Progress or None
    notes: list[str] = field(default_factory=list)

    def size(self, full: N, quick: N) -> N:
        return quick if self.quick else full


def percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/mean in milliseconds."""
    ms = sorted(s * 1000 for s in samples_s)
    if not ms:
        return {"n": 0}

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, round(p / 100 * (len(ms) - 1)))]

    return {"n": len(ms), "p50_ms": round(pct(50), 4), "p95_ms": round(pct(95), 4), "p99_ms": round(pct(99), 4),
            "mean_ms": round(statistics.fmean(ms), 4)}


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def timed_cpu(fn: Callable[[], Any], repeat: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of this thread) per call: on a shared, loaded machine the CPU time says
    what a call costs, the wall time what a caller waited (both are reported; neither replaces the other)."""
    wall, cpu = [], []
    for _ in range(repeat):
        c = time.thread_time()
        t = time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    return wall, cpu


LOAD_ERRORS: dict[str, str] = {}  # module -> why it could not be imported (reported, never silently dropped)


def load_all() -> None:
    for module in MODULES:
        try:
            importlib.import_module(module)
            LOAD_ERRORS.pop(module, None)
        except ImportError as exc:
            LOAD_ERRORS[module] = f"{type(exc).__name__}: {exc}"


def machine() -> dict[str, Any]:
    """The machine a run measured: enough to tell two machines (or a loaded one) apart."""
    from usermem.evals import machine as _machine

    return dict(_machine())


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def memories_per_user(result: dict[str, Any]) -> Any:
    """How many memories each measured user held, as the benchmark reported it (None: not applicable)."""
    for path in ("memories_per_user", "memories_of_user", "setup.memories_per_user", "memories"):
        value: Any = result
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            return value
    return None


def errors(report: dict[str, Any]) -> list[str]:
    """`name: message` for every benchmark (or part of one, e.g. storage.postgres) that failed."""
    out: list[str] = []
    for name, res in report["results"].items():
        if "error" in res:
            out.append(f"{name}: {res['error']}")
        out += [f"{name}.{k}: {v['error']}" for k, v in res.items() if isinstance(v, dict) and "error" in v]
    return out


def report_paths(out_dir: Path, run_id: str, quick: bool, complete: bool) -> dict[str, Path]:
    stem = "bench-quick" if quick else ("bench" if complete else f"bench-partial-{run_id}")
    return {"json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md", "png": out_dir / f"{stem}.png"}


def run(names: Sequence[str] | None, out_dir: Path, quick: bool = False, progress: Any = None) -> dict[str, Any]:
    """Run the named benchmarks (default: all) and write this run's own report; returns it.

    The report's "errors" lists what failed (the CLI exits non-zero then); "files" names what was written.
    """
    load_all()
    selected = list(names) if names else sorted(REGISTRY)
    unknown = [n for n in selected if n not in REGISTRY]
    if unknown:
        raise KeyError(f"unknown benchmark(s) {unknown}; known: {sorted(REGISTRY)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(out_dir=out_dir, quick=quick, progress=progress)
    run_id, started = new_run_id(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    host = machine()
    results: dict[str, Any] = {}
    for name in selected:
        t = time.perf_counter()
        try:
            results[name] = REGISTRY[name](ctx)
        except Exception as exc:  # one failing benchmark must not hide the others: recorded, exit non-zero
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["_seconds"] = round(time.perf_counter() - t, 2)
    host["load_1m_at_end"] = round(os.getloadavg()[0], 2)
    complete = set(selected) >= set(REGISTRY) and not LOAD_ERRORS
    report: dict[str, Any] = {
        "run": {"id": run_id, "started_at": started, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "quick": quick, "complete": complete, "benchmarks": selected},
        "machine": host, "at": started, "quick": quick,
        "setup": {name: {"load_generator": SPECS[name].load_generator,
                         "memories_per_user": memories_per_user(results[name])} for name in selected},
        "results": results,
        "targets": [{"benchmark": name, **t.check(results[name])} for name in selected for t in SPECS[name].targets],
        "notes": ctx.notes,
    }
    report["errors"] = [f"{module} (not loaded): {why}" for module, why in LOAD_ERRORS.items()] + errors(report)
    paths = report_paths(out_dir, run_id, quick, complete)
    report["files"] = {k: str(v) for k, v in paths.items()}
    plot = render_plot(report, paths["png"])
    if plot is None:
        report["files"].pop("png")
    paths["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    paths["md"].write_text(render_markdown(report, plot), encoding="utf-8")
    return report


def latency_rows(report: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(label, p50, p95) for every latency distribution in the report."""
    rows = []
    for name, res in report["results"].items():
        for key, value in _flatten(res):
            if key.endswith("p95_ms"):
                stem = key[: -len("p95_ms")]
                p50 = dict(_flatten(res)).get(stem + "p50_ms")
                if isinstance(p50, int | float) and isinstance(value, int | float):
                    rows.append((f"{name}.{stem.rstrip('._')}", float(p50), float(value)))
    return rows


def render_plot(report: dict[str, Any], path: Path) -> Path | None:
    """Horizontal bars of p50 and p95 for every latency in the report (log scale)."""
    rows = latency_rows(report)
    if not rows:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    height = max(3.0, 0.28 * len(rows) + 1.2)
    fig, ax = plt.subplots(figsize=(10, height))
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], [r[2] for r in rows], height=0.4, label="p95", color="#d95f02")
    ax.barh([y - 0.2 for y in ys], [r[1] for r in rows], height=0.4, label="p50", color="#1b9e77")
    ax.set_yticks(list(ys), [r[0] for r in rows], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale)")
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    ax.set_title(f"usermem latencies — run {report.get('run', {}).get('id', report.get('at'))}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _one_line(text: str) -> str:
    """A message fit for one markdown table cell or list item (server errors span lines and may hold '|')."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(report: dict[str, Any], plot: Path | None = None) -> str:
    run, host = report.get("run", {}), report["machine"]
    scope = ("all benchmarks" if run.get("complete") else "only " + ", ".join(run.get("benchmarks", [])))
    if report.get("quick"):
        scope += " — QUICK sizes: a smoke test, not a measurement"
    lines = [f"# usermem benchmarks — run {run.get('id', '?')}", "",
             "One run, one machine: every number below comes from this run; nothing is merged from another "
             "run or machine.", "",
             f"- benchmarks: {scope}",
             f"- started {run.get('started_at', report.get('at'))}, finished {run.get('finished_at', '?')}",
             f"- machine: {host.get('hostname', '?')} — {host['platform']}, {host['cpus']} CPUs "
             f"({host.get('cpus_usable', host['cpus'])} usable), Python {host['python']}, load average (1 min) "
             f"{host.get('load_1m_at_start', '?')} at start, {host.get('load_1m_at_end', '?')} at end", ""]
    if report.get("errors"):
        lines += ["## Errors", ""] + [f"- {_one_line(e)}" for e in report["errors"]] + [""]
    targets = report.get("targets", [])
    if targets:
        met = sum(1 for t in targets if t["met"])
        lines += ["## Targets", "", f"{met} of {len(targets)} met.", "",
                  "| benchmark | target | threshold | measured | result |", "|---|---|---|---|---|"]
        for t in targets:
            result = "met" if t["met"] else "MISSED" + (f" ({_one_line(t['why'])})" if t.get("why") else "")
            measured = "—" if t["measured"] is None else f"{t['measured']:g}"
            lines.append(f"| {t['benchmark']} | {t['target']} | {t['threshold']} | {measured} | {result} |")
        lines.append("")
    if plot is not None:
        lines += [f"![latencies]({plot.name})", ""]
    setup = report.get("setup", {})
    for name, res in report["results"].items():
        lines.append(f"## {name}")
        lines.append("")
        if name in setup:
            mpu = setup[name]["memories_per_user"]
            lines += [f"Load generator: {setup[name]['load_generator']}. Memories per user: "
                      f"{'n/a' if mpu is None else mpu}.", ""]
        lines.append("| metric | value |")
        lines.append("|---|---|")
        for k, v in _flatten(res):
            lines.append(f"| {k} | {v} |")
        lines.append("")
    for note in report.get("notes", []):
        lines.append(f"- {note}")
    return "\n".join(lines) + "\n"


def _flatten(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_flatten(v, name + "."))
        else:
            out.append((name, v))
    return out
