"""The cost-curve benchmark (issue 19): recall and write latency (wall and CPU) and DB size at
100 / 1,000 / 10,000 memories per user, drawn in cost-curves.png."""

from __future__ import annotations

from pathlib import Path

from usermem.bench import BenchContext
from usermem.bench.scale import SIZES, bench_recall_scale


def test_cost_curves_quick(tmp_path):
    out = bench_recall_scale(BenchContext(out_dir=tmp_path, quick=True))
    assert out["memories_per_user"] == list(SIZES)
    for n in SIZES:
        row = out[f"n{n}"]
        assert row["memories_per_user"] == n
        for series in ("recall_k5", "recall_k5_cpu", "recall_k5_full_scan", "write", "write_cpu"):
            assert 0 < row[series]["p50_ms"] <= row[series]["p95_ms"]
        assert row["db_bytes"] > 0 and row["db_mb_per_million_memories"] > 0
    # The index reads O(k) rows: at 10,000 memories it is far cheaper than scoring every row.
    assert out["n10000"]["recall_k5_cpu"]["p50_ms"] * 5 < out["n10000"]["recall_k5_full_scan"]["p50_ms"]
    assert Path(out["plot"]).stat().st_size > 10_000


def test_semantic_scale_quick(tmp_path):
    from usermem.bench.scale import bench_semantic_scale

    out = bench_semantic_scale(BenchContext(out_dir=tmp_path, quick=True))
    assert out["memories_per_user"] == 500
    for series in ("recall_query_beyond_embedding", "recall_query_beyond_embedding_cpu", "dense_top50",
                   "dense_top50_cpu", "one_query_embedding"):
        assert 0 < out[series]["p50_ms"] <= out[series]["p95_ms"]
    # The scan of the cached matrix is a small part of a recall: no per-row Python.
    assert out["dense_top50_cpu"]["p50_ms"] < out["recall_query_beyond_embedding_cpu"]["p50_ms"]


def test_http_curves_plot_each_measured_backend(tmp_path):
    from usermem.bench.http_wrk import CONCURRENCY, plot_http_curves

    def curve(scale: float) -> dict:
        return {f"c{c}": {"requests_per_s": 900.0 * scale, "p50_ms": c * scale, "p95_ms": 2 * c * scale}
                for c in CONCURRENCY}

    path = plot_http_curves({"sqlite": curve(1.0), "postgres": {"error": "down"}, "tiered": curve(2.0)},
                            tmp_path / "http-curves.png")
    assert path is not None and path.stat().st_size > 10_000
    # nothing measured: no picture
    assert plot_http_curves({"sqlite": {"error": "no wrk"}}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
