"""The fast request path of the memories routes (interfaces/api/fastroute.py) answers exactly as FastAPI's:
the same status and body for any query string, valid or not, on two apps over identical stores — one with
the fast path, one with FastAPI's handler only. And plain requests really take the fast path."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from props import examples
from usermem.bench.core import T0, synthetic_records
from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.interfaces.api import fastroute
from usermem.interfaces.api.keys import KeyRing

VALUES = ["5", "05", "0", "1", "-1", "1000", "1001", "1e3", "", " 5", "5 ", "2.5", "true", "false", "True", "yes",
          "no", "on", "1.0", "nan", "inf", "-inf", "1790000000", "1790000000.5", "-62135596800", "-62135596801",
          "253402300799", "253402300800", "+5", "0x10", "fact", "preference", "bogus", "a" * 129, "a" * 501,
          "language", "用户", "x\ny", "1_000", "9" * 20]
NAMES = ["k", "kinds", "query", "keys", "mark_used", "now", "event_from", "event_until", "domain", "actor", "purpose",
         "unknown"]


RECORDS = synthetic_records("local", "u", 40, T0, random.Random(7))


def _app(tmp_path: Path, name: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, str, Memory]:
    from usermem.interfaces.api import create_app

    m = Memory(settings=load_settings(env={}, store_url=f"sqlite:///{tmp_path}/{name}.db", embedder="none",
                                      hybrid_lexical_weight=0.0, rate_limit_per_minute=0),
               clock=lambda: T0 + 3 * 86_400.0)  # both apps answer at the same time
    m.store.bulk_insert(RECORDS)
    plain, _ = KeyRing(m.store).create("local", admin=True)
    with monkeypatch.context() as mp:
        if not fast:
            mp.setattr(fastroute, "plan_route", lambda route: None)
        app = create_app(m)
    return TestClient(app), plain, m


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Any:
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("fastroute")
    fast = _app(d, "fast", True, mp)
    slow = _app(d, "slow", False, mp)
    yield fast, slow
    for _, _, m in (fast, slow):
        m.close()


def _same(apps: Any, url: str, key_of: str = "own") -> None:
    (fast, fkey, _), (slow, skey, _) = apps
    a = fast.get(url, headers={"Authorization": f"Bearer {fkey if key_of == 'own' else key_of}"})
    b = slow.get(url, headers={"Authorization": f"Bearer {skey if key_of == 'own' else key_of}"})
    assert (a.status_code, a.json()) == (b.status_code, b.json()), url


def test_plain_recall_takes_the_fast_path(apps: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import fastapi.routing

    solved = []
    real = fastapi.routing.solve_dependencies

    async def counting(*args: Any, **kw: Any) -> Any:
        solved.append(1)
        return await real(*args, **kw)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counting)
    (fast, key, _), _ = apps
    r = fast.get(f"/v1/users/u/memories?k=5&now={T0 + 86_400}&kinds=fact&kinds=preference",
                 headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200 and len(r.json()["items"]) == 5
    assert solved == []
    r = fast.get("/v1/users/u/memories?k=1e3", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 422 and solved == [1]  # not plain: FastAPI's handler answered


@pytest.mark.parametrize("url", [
    "/v1/users/u/memories", "/v1/users/u/memories?k=3&now=1790086400", "/v1/users/nobody/memories?k=2",
    "/v1/users/u/memories?k=0", "/v1/users/u/memories?k=1001", "/v1/users/u/memories?k=5&k=6",
    "/v1/users/u/memories?mark_used=yes&now=1790086400", "/v1/users/u/memories?now=1e20",
    f"/v1/users/{quote('a' * 129)}/memories", "/v1/users/u/memories?query=" + "q" * 4001,
    "/v1/users/u/memories?keys=language&keys=&now=1790086400",
])
def test_examples_answer_alike(apps: Any, url: str) -> None:
    _same(apps, url)


def test_bad_key_answers_alike(apps: Any) -> None:
    _same(apps, "/v1/users/u/memories?k=5", key_of="umk_nope")
    _same(apps, "/v1/users/u/memories?k=nope", key_of="umk_nope")


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES) | st.text(max_size=6)), max_size=6),
       user=st.sampled_from(["u", "nobody", "u%0A", "%20"]))
def test_any_query_answers_alike(apps: Any, pairs: list[tuple[str, str]], user: str) -> None:
    # mark_used changes the stores: both apps see the same requests in the same order, so they stay equal
    query = "&".join(f"{n}={quote(v)}" for n, v in pairs)
    _same(apps, f"/v1/users/{user}/memories?{query}")


_VALID = {
    "k": st.integers(1, 1000).map(str),
    "kinds": st.sampled_from(["fact", "preference", "situation", "episode", "context", "bogus"]),
    "keys": st.sampled_from(["field_1", "field_2", "language", "x"]),
    "mark_used": st.sampled_from(["true", "false", "1", "0"]),
    "now": st.floats(T0, T0 + 400 * 86_400.0).map(repr) | st.integers(int(T0), int(T0) + 10**7).map(str),
    "event_from": st.floats(T0 - 86_400.0, T0 + 86_400.0).map(repr),
    "event_until": st.floats(T0, T0 + 10 * 86_400.0).map(repr),
    "domain": st.sampled_from(["general", "health", "shop"]),
    "actor": st.text(min_size=1, max_size=20),
    "purpose": st.text(min_size=1, max_size=20),
}


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.sampled_from(sorted(_VALID)).flatmap(lambda n: st.tuples(st.just(n), _VALID[n])),
                      max_size=5))
def test_valid_queries_answer_alike(apps: Any, pairs: list[tuple[str, str]]) -> None:
    query = "&".join(f"{n}={quote(v)}" for n, v in pairs if n != "mark_used")  # reads only: the stores stay equal
    _same(apps, f"/v1/users/u/memories?{query}")
