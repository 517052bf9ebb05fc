"""`usermem bench` reports: one run per report, every declared target listed, failures visible (issue 11)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from usermem import bench
from usermem.bench import BenchContext, Target


@pytest.fixture
def fake_benchmarks(monkeypatch):
    """Three benchmarks of known outcome, registered for this test only (the real ones stay loaded)."""
    bench.load_all()
    registry, specs = dict(bench.REGISTRY), dict(bench.SPECS)
    monkeypatch.setattr(bench, "REGISTRY", registry)
    monkeypatch.setattr(bench, "SPECS", specs)

    @bench.benchmark("t.fast", targets=[Target("op.p95_ms", "<=", 5.0, "fast p95"),
                                        Target("rate", ">=", 100.0, "rate")])
    def fast(ctx: BenchContext) -> dict:
        return {"op": {"p95_ms": 2.5}, "rate": 50.0, "memories_per_user": 7}

    @bench.benchmark("t.broken", targets=[Target("op.p95_ms", "<=", 5.0, "broken p95")])
    def broken(ctx: BenchContext) -> dict:
        raise RuntimeError("disk on fire")

    @bench.benchmark("t.part", targets=[Target("pg.op.p95_ms", "<=", 1.0, "pg p95"),
                                        Target("lite.op.p95_ms", "<=", 1.0, "lite p95")],
                     load_generator="a separate process")
    def part(ctx: BenchContext) -> dict:
        return {"pg": {"error": "PostgreSQL unavailable"}, "lite": {"op": {"p95_ms": 0.5}}}

    return registry


def test_a_partial_run_writes_its_own_report_and_leaves_the_full_one_alone(fake_benchmarks, tmp_path):
    full = tmp_path / "bench.json"
    full.write_text('{"results": {"t.fast": {"rate": 1e9}}}', encoding="utf-8")
    report = bench.run(["t.fast"], tmp_path)
    assert full.read_text(encoding="utf-8") == '{"results": {"t.fast": {"rate": 1e9}}}'
    run_id = report["run"]["id"]
    written = json.loads((tmp_path / f"bench-partial-{run_id}.json").read_text(encoding="utf-8"))
    assert written["run"]["complete"] is False and written["run"]["benchmarks"] == ["t.fast"]
    assert list(written["results"]) == ["t.fast"] and written["results"]["t.fast"]["rate"] == 50.0
    assert written["machine"]["cpus"] >= 1 and "load_1m_at_end" in written["machine"]
    assert written["setup"]["t.fast"] == {"load_generator": bench.IN_PROCESS, "memories_per_user": 7}
    md = (tmp_path / f"bench-partial-{run_id}.md").read_text(encoding="utf-8")
    assert f"run {run_id}" in md and "only t.fast" in md and "Memories per user: 7." in md


def test_quick_runs_replace_the_quick_report_whole(fake_benchmarks, tmp_path):
    bench.run(["t.fast"], tmp_path, quick=True)
    second = bench.run(["t.part"], tmp_path, quick=True)
    on_disk = json.loads((tmp_path / "bench-quick.json").read_text(encoding="utf-8"))
    assert list(on_disk["results"]) == ["t.part"] and on_disk["run"]["id"] == second["run"]["id"]


def test_every_declared_target_is_listed_met_or_missed(fake_benchmarks, tmp_path):
    report = bench.run(["t.fast", "t.broken", "t.part"], tmp_path)
    rows = {(t["benchmark"], t["target"]): t for t in report["targets"]}
    assert len(rows) == 5
    assert rows[("t.fast", "fast p95")]["met"] is True and rows[("t.fast", "fast p95")]["measured"] == 2.5
    assert rows[("t.fast", "rate")]["met"] is False and rows[("t.fast", "rate")]["measured"] == 50.0
    assert rows[("t.broken", "broken p95")]["met"] is False
    assert "disk on fire" in rows[("t.broken", "broken p95")]["why"]
    assert rows[("t.part", "pg p95")]["met"] is False and "PostgreSQL unavailable" in rows[("t.part", "pg p95")]["why"]
    assert rows[("t.part", "lite p95")]["met"] is True
    md = (tmp_path / f"bench-partial-{report['run']['id']}.md").read_text(encoding="utf-8")
    assert "2 of 5 met." in md and md.count("MISSED") == 3
    assert report["errors"] == ["t.broken: RuntimeError: disk on fire", "t.part.pg: PostgreSQL unavailable"]


def test_the_real_benchmarks_declare_their_targets():
    bench.load_all()
    declared = {name for name, spec in bench.SPECS.items() if spec.targets}
    assert {"sqlite_writes", "sqlite_recall", "lifecycle_recall", "understand_plan", "privacy.forget_user",
            "privacy.forget_user_tiered", "relevance_recall_sqlite", "relevance_recall_pgvector", "http",
            "storage", "write_sustained", "semantic_scale", "recall_scale"} <= declared
    assert len(bench.SPECS["storage"].targets) == 6  # recall and erasure on sqlite, postgres and tiered


def test_bench_command_exits_non_zero_when_a_benchmark_fails(fake_benchmarks, tmp_path):
    from usermem.interfaces.cli import _register, app

    _register()
    # wide: Rich wraps the written paths at 80 columns, and where depends on tmp_path's length (xdist: popen-gwN/)
    ok = CliRunner().invoke(app, ["bench", "t.fast", "--out", str(tmp_path)], env={"COLUMNS": "250"})
    assert ok.exit_code == 0, ok.output
    assert "bench-partial-" in ok.output
    for name in ("t.broken", "t.part"):
        failed = CliRunner().invoke(app, ["bench", name, "--out", str(tmp_path)])
        assert failed.exit_code != 0, failed.output


def test_a_benchmark_module_that_cannot_be_imported_is_an_error(fake_benchmarks, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "MODULES", (*bench.MODULES, "usermem.bench.no_such_module"))
    monkeypatch.setattr(bench, "LOAD_ERRORS", {})
    report = bench.run(["t.fast"], tmp_path)
    assert report["errors"] and report["errors"][0].startswith("usermem.bench.no_such_module (not loaded)")


def test_multi_line_errors_stay_in_their_table_cell(fake_benchmarks, tmp_path):
    @bench.benchmark("t.crash", targets=[Target("x", "<=", 1.0, "x")])
    def crash(ctx: BenchContext) -> dict:
        raise RuntimeError("server closed the connection\n\tunexpectedly | really")

    report = bench.run(["t.crash"], tmp_path)
    md = (tmp_path / f"bench-partial-{report['run']['id']}.md").read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith("| t.crash |"))
    assert "unexpectedly \\| really" in row and row.count(" | ") == 4


def test_a_missed_target_names_its_companion_number() -> None:
    from usermem.bench import Target

    t = Target("wall.p95_ms", "<=", 1.0, "recall p95", beside="cpu.p95_ms")
    missed = t.check({"wall": {"p95_ms": 4.4}, "cpu": {"p95_ms": 0.45}})
    assert missed["met"] is False and missed["why"] == "cpu.p95_ms = 0.45"
    assert t.check({"wall": {"p95_ms": 0.8}, "cpu": {"p95_ms": 0.45}})["why"] is None  # met: nothing beside
    assert t.check({"wall": {"p95_ms": 4.4}})["why"] is None  # no companion number: a plain miss
