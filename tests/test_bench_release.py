"""The same-run comparison with an earlier release (usermem bench release_ab), in quick mode."""

from __future__ import annotations

from pathlib import Path

from usermem.bench import BenchContext
from usermem.bench.release import bench_release_ab


def test_release_ab_times_both_sides_in_one_run(tmp_path: Path) -> None:
    result = bench_release_ab(BenchContext(out_dir=tmp_path, quick=True))
    assert result["baseline_commit"].startswith("330691f")
    assert result["memories_per_user"] == 1000
    for side in ("baseline", "current"):
        assert set(result[side]) == {"write_p50_us", "write_p95_us", "recall_p50_ms", "recall_p95_ms"}
        assert all(v > 0 for v in result[side].values())
    assert set(result["ratio"]) == {"write_p50", "write_p95", "recall_p50", "recall_p95"}
    assert result["ratio"]["recall_p50"] == round(result["current"]["recall_p50_ms"]
                                                  / result["baseline"]["recall_p50_ms"], 3)
