"""Shared fixtures. Time is always injected: tests never sleep."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

import backends
import props
from usermem import Memory

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# `Memory()` honours USERMEM_* settings (the environment wins over defaults): a developer's shell must not
# change what the suite tests. Variables that steer the test harness itself are kept.
_HARNESS = {"USERMEM_REQUIRE_BACKENDS", "USERMEM_HYPOTHESIS_PROFILE"}

# Hypothesis profiles (tests/props.py): "ci" for `make test`, "thorough" (USERMEM_HYPOTHESIS_PROFILE=thorough,
# `make test-thorough`) runs the full example counts, and 500 for the properties that do not set their own.
hypothesis_settings.register_profile("ci", print_blob=True)
hypothesis_settings.register_profile("thorough", max_examples=500, print_blob=True)
hypothesis_settings.load_profile(props.PROFILE)
# The CLI speaks Chinese under a zh locale; tests that check its English text assume a neutral one.
os.environ["LANG"] = "C.UTF-8"
os.environ.pop("LC_ALL", None)
os.environ.pop("LC_MESSAGES", None)
# Nor does the terminal's size: the CLI's Rich console (made once, at import) keeps a COLUMNS / LINES it finds
# then, and tests that need wide tables pass COLUMNS to each invocation. pytest-xdist workers start with
# COLUMNS=80 LINES=24 in their environment, which froze that console at 80 columns.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
for _name in [n for n in os.environ if n.startswith("USERMEM_") and n not in _HARNESS
              and not n.startswith("USERMEM_TEST_")]:
    del os.environ[_name]

T0 = 1_790_000_000.0
DAY = 86_400.0


# Backends the conformance suite (tests/conformance/) runs on. Issue 3 adds "postgres" and "tiered";
# each entry maps to a factory in BACKEND_FACTORIES.
BACKENDS = ["sqlite", "postgres", "tiered"]


def _sqlite_factory(tmp_path, **kw):
    return Memory(f"sqlite:///{tmp_path}/conformance.db", **kw)


BACKEND_FACTORIES = {"sqlite": _sqlite_factory, "postgres": backends.postgres_factory,
                     "tiered": backends.tiered_factory}
# Run after a test's Memory objects are closed: drop its schema / Redis key prefix.
BACKEND_CLEANUPS = {"postgres": backends.postgres_cleanup, "tiered": backends.tiered_cleanup}


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def make_memory(backend, tmp_path):
    """Factory: make_memory(**Memory kwargs) -> Memory on the current backend; closed after the test."""
    made = []

    def factory(**kw):
        m = BACKEND_FACTORIES[backend](tmp_path, **kw)
        made.append(m)
        return m

    yield factory
    for m in made:
        m.close()
    if made and backend in BACKEND_CLEANUPS:
        BACKEND_CLEANUPS[backend](tmp_path)


@pytest.fixture
def mem() -> Memory:
    m = Memory()
    yield m
    m.close()


@pytest.fixture
def hybrid_mem() -> Memory:
    """The default Memory, with the embedding indexer, for tests that rank with recall(query=...)."""
    m = Memory()
    yield m
    m.close()


@pytest.fixture
def lean_mem() -> Memory:
    """A Memory without the embedding indexer or lexical scoring: for tests that are not about relevance
    (faster set-up and close, no background embedding work)."""
    from usermem.config import load_settings

    m = Memory(settings=load_settings(env={}, embedder="none", hybrid_lexical_weight=0.0))
    yield m
    m.close()


@pytest.fixture
def file_mem(tmp_path) -> Memory:
    m = Memory(f"sqlite:///{tmp_path}/usermem.db")
    yield m
    m.close()


def pytest_report_header(config) -> str:
    if backends.backends_required():
        return "backends: required (USERMEM_REQUIRE_BACKENDS=1) — a missing PostgreSQL, Redis or NATS fails the run"
    return "backends: optional — a missing PostgreSQL, Redis or NATS skips its tests (set USERMEM_REQUIRE_BACKENDS=1 to fail)"


_CLUSTER = Path(__file__).resolve().parent / "cluster"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/cluster/ (`make test-cluster`) starts its own cluster: collected only when named on the command
    line (`pytest tests/cluster`), never by `make test`."""
    if collection_path != _CLUSTER:
        return None
    named = [Path(str(a).split("::")[0]).resolve() for a in config.args]
    return None if any(p == _CLUSTER or _CLUSTER in p.parents for p in named) else True


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Schemathesis names each operation's item `test_x[GET /path]`, but pytest 9.2 builds a node id from the
    function's name alone, so the items of tests/test_api_fuzz.py (one per operation) shared one id — and
    pytest-xdist, which schedules by id, ran one of them. Put the operation back into the id (a no-op where
    pytest keeps it)."""
    for item in items:
        node_id = getattr(item, "_id", None)
        label = getattr(item, "operation_label", None)
        if label and getattr(node_id, "params", "") is None and item.name.endswith(f"[{label}]"):
            item._id = node_id.with_params(label)  # type: ignore[attr-defined]
