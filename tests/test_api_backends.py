"""The HTTP API on every store backend (SQLite, PostgreSQL, tiered SQL+Redis): the same scenarios through
`usermem.Client` give the same results as the embedded engine on SQLite. On networked stores engine calls
run in the thread pool (on SQLite inline), so both request paths are exercised."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import usermem
from apihelp import fast_memory
from test_client_conformance import SCENARIOS, _norm
from usermem.config import load_settings
from usermem.interfaces.api import create_app


@pytest.mark.parametrize("name", ["c007", "batch_and_ranges", "lifecycle"])
def test_scenarios_through_the_api_on_every_backend(make_memory, backend, name):
    remote_memory = make_memory(settings=load_settings(env={}, embedder="none"))
    app = create_app(remote_memory)
    assert app.state.inline_engine is (backend == "sqlite")
    key, _ = app.state.keys.create("acme", admin=True)
    client = usermem.Client("http://testserver", key, http=TestClient(app))
    reference = fast_memory()
    try:
        expected = SCENARIOS[name](reference)
        got = SCENARIOS[name](client)
        assert _norm(got) == _norm(expected)
        other, _ = app.state.keys.create("globex")
        outsider = usermem.Client("http://testserver", other, http=TestClient(app))
        assert outsider.recall("globex", "C007") == [] and outsider.history("globex", "u4", "tone") == []
    finally:
        client.close()
        reference.close()
