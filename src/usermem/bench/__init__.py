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
           "usermem.bench.relevance", "usermem.bench.privacy", "usermem.bench.http")


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
    (out_dir / f"bench{suffix}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    (out_dir / f"bench{suffix}.md").write_text(render_markdown(report), encoding="utf-8")
    return report


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# usermem benchmarks ({report['at']})", "",
             f"Machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
             f"Python {report['machine']['python']}", ""]
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
