"""http_engine_threads: on a networked store the engine calls of one server process run in the thread pool,
at most that many at once (docs/scaling.md, the PostgreSQL p95 experiment); 0, the default, sets no limit."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from usermem.config import load_settings
from usermem.engine.memory import Memory
from usermem.errors import ConfigError
from usermem.interfaces.api import create_app


def _peak_concurrent_recalls(threads: int, requests: int = 6) -> tuple[int, list[int]]:
    memory = Memory(settings=load_settings(env={}, embedder="none", http_engine_threads=threads))
    app = create_app(memory, inline_engine=False)  # the networked stores' path, on SQLite
    key, _ = app.state.keys.create("acme", admin=True)
    memory.write("acme", "u1", "fact", "city", "Oslo", source="system")
    lock = threading.Lock()
    running, peak = [0], [0]
    recall = memory.recall_scored

    def slow_recall(*args: object, **kwargs: object) -> object:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.05)  # long enough for every request to be in flight at once
            return recall(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                running[0] -= 1

    memory.recall_scored = slow_recall  # type: ignore[method-assign]

    async def go() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver",
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            got = await asyncio.gather(*(client.get("/v1/users/u1/memories", params={"k": 5})
                                         for _ in range(requests)))
        return [r.status_code for r in got]

    try:
        codes = asyncio.run(go())
    finally:
        memory.close()
    return peak[0], codes


@pytest.mark.parametrize("threads", [1, 2])
def test_engine_calls_at_once_never_exceed_the_setting(threads):
    peak, codes = _peak_concurrent_recalls(threads)
    assert codes == [200] * 6
    assert peak == threads


def test_zero_the_default_leaves_the_thread_pool_unlimited():
    assert load_settings(env={}).http_engine_threads == 0
    peak, codes = _peak_concurrent_recalls(0)
    assert codes == [200] * 6
    assert peak > 2  # anyio's pool (40 threads) runs them together; how many overlap depends on timing


def test_a_negative_limit_is_refused():
    with pytest.raises(ConfigError):
        load_settings(env={}, http_engine_threads=-1)
