"""`usermem bench`: benchmarks register here and write JSON + a markdown table (+ plots) under reports/.

A benchmark is a function `(ctx: BenchContext) -> dict` registered with @benchmark("name"). It
returns plain numbers (medians, p95, ratios against a baseline measured in the same process).
"""

from __future__ import annotations

import importlib
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BenchFn = Callable[["BenchContext"], dict[str, Any]]
REGISTRY: dict[str, BenchFn] = {}
# Modules that define benchmarks; each registers itself on import.
MODULES = ("usermem.bench.core", "usermem.bench.lifecycle", "usermem.bench.understand", "usermem.bench.storage",
           "usermem.bench.relevance", "usermem.bench.privacy", "usermem.bench.http", "usermem.bench.events")


def benchmark(name: str) -> Callable[[BenchFn], BenchFn]:
    def register(fn: BenchFn) -> BenchFn:
        REGISTRY[name] = fn
        return fn
    return register


@dataclass
class BenchContext:
    out_dir: Path
    quick: bool = False  # small sizes, for the test suite
    progress: Any = None  # rich Progress or None
    notes: list[str] = field(default_factory=list)

    def size(self, full: int, quick: int) -> int:
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


def load_all() -> None:
    for module in MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            continue


def run(names: Sequence[str] | None, out_dir: Path, quick: bool = False, progress: Any = None) -> dict[str, Any]:
    load_all()
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(out_dir=out_dir, quick=quick, progress=progress)
    selected = list(names) if names else sorted(REGISTRY)
    results: dict[str, Any] = {}
    for name in selected:
        if name not in REGISTRY:
            raise KeyError(f"unknown benchmark {name!r}; known: {sorted(REGISTRY)}")
        t = time.perf_counter()
        try:
            results[name] = REGISTRY[name](ctx)
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["_seconds"] = round(time.perf_counter() - t, 2)
    report = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                          "cpus": __import__("os").cpu_count()},
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": quick, "results": results,
              "notes": ctx.notes}
    suffix = "-quick" if quick else ""
    json_path = out_dir / f"bench{suffix}.json"
    if names and json_path.exists():
        # A partial run updates its own entries and keeps the others' last measurements.
        try:
            previous = json.loads(json_path.read_text(encoding="utf-8")).get("results", {})
        except (OSError, ValueError):
            previous = {}
        report["results"] = {**previous, **results}
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    plot = render_plot(report, out_dir / f"bench{suffix}.png")
    (out_dir / f"bench{suffix}.md").write_text(render_markdown(report, plot), encoding="utf-8")
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
    ax.set_title(f"usermem latencies ({report['at']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render_markdown(report: dict[str, Any], plot: Path | None = None) -> str:
    lines = [f"# usermem benchmarks ({report['at']})", "",
             f"Machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
             f"Python {report['machine']['python']}", ""]
    targets = [(name, k, v) for name, res in report["results"].items() for k, v in _flatten(res)
               if k.endswith("meets_target") or k.startswith("meets_")]
    if targets:
        lines += ["## Targets", "", "| benchmark | check | met |", "|---|---|---|"]
        lines += [f"| {name} | {k} | {'yes' if v else 'NO'} |" for name, k, v in targets]
        lines.append("")
    if plot is not None:
        lines += [f"![latencies]({plot.name})", ""]
    for name, res in report["results"].items():
        lines.append(f"## {name}")
        lines.append("")
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
