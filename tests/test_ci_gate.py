"""The CI gate: with USERMEM_REQUIRE_BACKENDS=1 a missing backend fails the run; without it, it skips."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("required", [False, True])
def test_missing_nats_skips_locally_and_fails_in_ci(tmp_path, required):
    probe = tmp_path / "test_probe.py"
    probe.write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport backends\n\n\n"
                     "def test_needs_nats():\n    backends.require_nats()\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "USERMEM_REQUIRE_BACKENDS"}
    env["USERMEM_TEST_NATS_URL"] = f"nats://127.0.0.1:{_closed_port()}"
    if required:
        env["USERMEM_REQUIRE_BACKENDS"] = "1"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--rootdir",
                        str(tmp_path), str(probe)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    if required:
        assert r.returncode == 1 and "1 failed" in r.stdout and "USERMEM_REQUIRE_BACKENDS=1" in r.stdout, r.stdout
    else:
        assert r.returncode == 0 and "1 skipped" in r.stdout and "NATS JetStream is not reachable" in r.stdout, r.stdout


def test_run_tests_treats_no_tests_collected_as_failure():
    text = (TESTS.parent / "scripts" / "run_tests.sh").read_text(encoding="utf-8")
    assert '"$rc" -eq 5' in text and "exit 1" in text
    ci = (TESTS.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "USERMEM_REQUIRE_BACKENDS=1" in ci and "make lint" in ci and "make test" in ci


def test_cluster_tests_run_in_their_own_target_after_make_test():
    ci = (TESTS.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.index("make test\n") < ci.index("make test-cluster\n")
    make = (TESTS.parent / "Makefile").read_text(encoding="utf-8")
    # one process: the cluster pieces listen on fixed ports
    assert "test-cluster: $(STAMP) services\n\t@USERMEM_TEST_WORKERS=0 bash scripts/run_tests.sh tests/cluster\n" in make
    # `make test` (pytest on tests/) never collects tests/cluster/; naming it collects it.
    run = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent / "src")}
    whole = subprocess.run([*run, str(TESTS), "--ignore-glob", str(TESTS / "test_*")], capture_output=True,
                           text=True, cwd=TESTS.parent, env=env, timeout=300)
    named = subprocess.run([*run, str(TESTS / "cluster")], capture_output=True, text=True, cwd=TESTS.parent,
                           env=env, timeout=300)
    assert whole.returncode == 0 and "conformance" in whole.stdout and "cluster" not in whole.stdout, whole.stdout
    assert named.returncode == 0 and "tests/cluster/test_cluster_faults.py::" in named.stdout, named.stdout


@pytest.mark.parametrize("required", [False, True])
def test_a_missing_cluster_binary_skips_locally_and_fails_in_ci(tmp_path, required):
    probe = tmp_path / "test_probe.py"
    probe.write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport backends\n"
                     "from usermem.bench.cluster import MissingBinary, find_binary\n\n\n"
                     "def test_needs_a_server():\n    try:\n        find_binary('usermem-no-such-server')\n"
                     "    except MissingBinary as exc:\n        backends.unavailable(str(exc))\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "USERMEM_REQUIRE_BACKENDS"}
    env["PYTHONPATH"] = str(TESTS.parent / "src")
    if required:
        env["USERMEM_REQUIRE_BACKENDS"] = "1"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--rootdir",
                        str(tmp_path), str(probe)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    if required:
        assert r.returncode == 1 and "1 failed" in r.stdout and "usermem-no-such-server is not installed" in r.stdout
    else:
        assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout
