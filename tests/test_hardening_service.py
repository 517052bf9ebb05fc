"""Issue 12 items 12 and 13: a 500 says `Connection: close`; `usermem serve` prints the admin key once."""

from __future__ import annotations

from fastapi.testclient import TestClient

from apihelp import Server, make_api


def test_an_unhandled_error_answers_500_with_connection_close():
    api = make_api()
    try:
        def boom() -> None:
            raise RuntimeError("unexpected")

        api.app.add_api_route("/boom-test", boom, methods=["GET"])
        client = TestClient(api.app, raise_server_exceptions=False)
        r = client.get("/boom-test", headers=api.h(api.key_a))
        assert r.status_code == 500 and r.json()["code"] == "internal_error"
        assert r.headers.get("connection", "").lower() == "close"
        # A handled error keeps the connection.
        r = client.get("/v1/sessions/nope", headers=api.h(api.key_a))
        assert r.status_code == 404 and r.headers.get("connection", "").lower() != "close"
    finally:
        api.memory.close()


def test_serve_prints_the_full_admin_key_only_when_it_is_created(tmp_path):
    db = tmp_path / "svc.db"
    outputs = []
    for _ in range(2):
        server = Server(db, env={"USERMEM_EMBEDDER": "none"})  # about the key: the embedding model is not needed
        server.stop()
        assert server.proc.stdout is not None
        outputs.append((server.key, server.proc.stdout.read()))
    (key1, first), (key2, second) = outputs
    assert key1 == key2  # reused from the key file
    assert key1 in first
    assert key1 not in second and key1[:6] in second and "full key in" in second
