"""This checkout against an earlier release, in the same run: is the hot path any slower than before?

The earlier release's sources are taken from git (`git archive <ref> src`) into a temporary folder; the
same probe (single writes, then `recall(k=5)` of a user holding 1,000 memories, embeddings off so only the
pipeline is timed) runs in fresh processes, alternating baseline / current for several rounds so a noisy
shared machine affects both sides alike. Reported: per-side medians of the per-round p50/p95 and the ratio
current / baseline. The baseline is `USERMEM_BENCH_BASELINE` (default: the first release, 330691f).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

from usermem.bench import BenchContext, Target, benchmark

DEFAULT_BASELINE = "330691f"  # the first release (issues 2-8), before the renovation of issue 11

PROBE = r"""
import json, statistics, sys, tempfile, time
from usermem import Memory
from usermem.config import load_settings

writes, per_user, recalls = (int(a) for a in sys.argv[1:4])
T0 = 1_790_000_000.0
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]
with tempfile.TemporaryDirectory() as d:
    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{d}/ab.db", embedder="none",
                                      hybrid_lexical_weight=0.0))
    w = []
    for i in range(writes):
        t = time.perf_counter()
        m.write("bench", f"u{i % 50}", "preference", f"k{i % 200}", f"value {i}", source="user_confirmed",
                now=T0 + i)
        w.append(time.perf_counter() - t)
    for start in range(0, per_user, 250):
        m.write_many("bench", "target", [{"kind": "fact" if i % 2 else "preference", "key": f"key{i}",
                                          "value": f"remembered value {i}", "source": "user_confirmed"}
                                         for i in range(start, min(per_user, start + 250))], now=T0)
    r = []
    for i in range(recalls):
        t = time.perf_counter()
        m.recall("bench", "target", 5, now=T0 + 3600 + i)
        r.append(time.perf_counter() - t)
    m.close()
print(json.dumps({"write_p50_us": statistics.median(w) * 1e6, "write_p95_us": pct(w, 0.95) * 1e6,
                  "recall_p50_ms": statistics.median(r) * 1e3, "recall_p95_ms": pct(r, 0.95) * 1e3}))
"""


def _repo_root() -> Path | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    root = Path(out)
    return root if (root / "src" / "usermem").is_dir() else None


def _extract(root: Path, ref: str, into: Path) -> str:
    """The baseline's `src/` under `into`; returns the full commit id."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=root, capture_output=True,
                            text=True, timeout=10, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "src"], cwd=root, capture_output=True,
                             timeout=60, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


def _probe(src: Path, writes: int, per_user: int, recalls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("USERMEM_")}
    done = subprocess.run([sys.executable, "-c", PROBE, str(writes), str(per_user), str(recalls)], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the probe failed on {src}: {last}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@benchmark("release_ab", targets=[
    Target("ratio.write_p50", "<=", 1.10, "single write p50, this checkout / baseline release (same run)"),
    Target("ratio.recall_p50", "<=", 1.10, "recall k=5 p50 at 1,000 memories, this checkout / baseline release"),
], load_generator="in fresh processes on this machine, baseline and current alternating")
def bench_release_ab(ctx: BenchContext) -> dict[str, Any]:
    root = _repo_root()
    if root is None:
        return {"skipped": "not a git checkout: the baseline release's sources come from git"}
    ref = os.environ.get("USERMEM_BENCH_BASELINE", DEFAULT_BASELINE)
    writes, per_user, recalls, rounds = ctx.size(2000, 300), 1000, ctx.size(1000, 200), ctx.size(3, 1)
    sides: dict[str, list[dict[str, float]]] = {"baseline": [], "current": []}
    with tempfile.TemporaryDirectory() as d:
        commit = _extract(root, ref, Path(d))
        sources = {"baseline": Path(d) / "src", "current": root / "src"}
        for _ in range(rounds):
            for side in ("baseline", "current"):
                sides[side].append(_probe(sources[side], writes, per_user, recalls))
    med = {side: {m: round(statistics.median(r[m] for r in runs), 3) for m in runs[0]} for side, runs in sides.items()}
    # "write_p50_us" -> "write_p50": the ratio has no unit
    ratio = {m.rsplit("_", 1)[0]: round(med["current"][m] / med["baseline"][m], 3) for m in med["current"]}
    return {"baseline_ref": ref, "baseline_commit": commit[:12], "rounds": rounds, "writes": writes,
            "memories_per_user": per_user, "recalls": recalls, "baseline": med["baseline"],
            "current": med["current"], "ratio": ratio}
