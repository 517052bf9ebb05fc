"""Export (data portability) and live fields read from the system of record."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from usermem import Op, Reason

T0 = 1_790_000_000.0


def test_export_has_current_values_history_documents_and_is_audited(mem):
    mem.write("acme", "u", "fact", "plan", "basic", source="system", now=T0)
    mem.write("acme", "u", "fact", "plan", "pro", source="system", now=T0 + 10)
    mem.write("acme", "u", "fact", "phone", "13800138000", source="user_confirmed", now=T0)  # L2: exported too
    mem.write("acme", "u", "situation", "open_issue", "refund", now=T0, ttl_seconds=5)  # expires, still held
    mem.grant("acme", "u", "L2", "support", now=T0)
    mem.write("acme", "other", "fact", "plan", "enterprise", source="system", now=T0)
    data = mem.export("acme", "u", now=T0 + 20, actor="dpo")
    json.dumps(data, ensure_ascii=False)  # JSON-ready
    assert data["format"] == "usermem.export/1" and data["user_id"] == "u"
    assert [v["value"] for v in data["fields"]["plan"]["history"]] == ["basic", "pro"]
    assert data["fields"]["plan"]["current"]["value"] == "pro"
    assert data["fields"]["phone"]["current"]["value"] == "13800138000"
    assert data["fields"]["open_issue"]["current"] is None and len(data["fields"]["open_issue"]["history"]) == 1
    assert [d["value"]["purpose"] for d in data["documents"]["grants"]] == ["support"]
    assert "enterprise" not in json.dumps(data)
    e = mem.audit("acme", action="export")[-1]
    assert (e.actor, e.user_id, e.detail["versions"]) == ("dpo", "u", 4)
    assert "13800138000" not in json.dumps(e.detail)


def test_live_field_with_python_resolver(mem):
    calls = []

    def billing(tenant, user_id, key):
        calls.append((tenant, user_id, key))
        return {"acme": "pro"}.get(tenant)

    mem.write("acme", "u", "fact", "plan", "basic", source="system", now=T0)  # a copy from before
    mem.set_contract("acme", {**mem.contract("acme", "plan").to_dict(), "live": True})
    mem.register_resolver("plan", billing)
    got = {r.key: r for r in mem.recall("acme", "u", now=T0 + 1)}
    assert got["plan"].value == "pro" and got["plan"].source.value == "system"  # never the stored copy
    assert calls == [("acme", "u", "plan")]
    r = mem.write("acme", "u", "fact", "plan", "free", source="system", now=T0 + 2)
    assert (r.op, r.reason) == (Op.REJECT, Reason.LIVE_FIELD)
    # another tenant without the live contract keeps stored values
    mem.write("beta", "u", "fact", "plan", "team", source="system", now=T0)
    assert [x.value for x in mem.recall("beta", "u", now=T0 + 1)] == ["team"]


def test_failing_resolver_never_falls_back_to_a_stored_copy(mem):
    mem.write("acme", "u", "fact", "plan", "stale", source="system", now=T0)
    mem.set_contract("acme", {**mem.contract("acme", "plan").to_dict(), "live": True})

    def broken(tenant, user_id, key):
        raise RuntimeError("billing down")

    mem.register_resolver("plan", broken)
    assert mem.recall("acme", "u", now=T0 + 1) == []


def test_live_l2_field_needs_a_grant(mem):
    mem.set_contract("acme", {"key": "balance", "kind": "fact", "sensitivity": "L3", "live": True,
                              "resolver": "registered:ledger"})
    mem.register_resolver("ledger", lambda t, u, k: 1234.5)
    hidden = mem.recall("acme", "u", now=T0)
    assert hidden == []
    # known but not shown: reported as withheld with its reason and a consent question, never its value
    assert [(w.key, w.level, w.reason) for w in hidden.withheld] == [("balance", "L3", "needs_grant")]
    assert hidden.withheld[0].question and "1234" not in repr(hidden.withheld)
    mem.grant("acme", "u", ["balance"], "answer a balance question", now=T0)
    assert [r.value for r in mem.recall("acme", "u", now=T0 + 1, actor="bot")] == [1234.5]
    assert mem.audit("acme", action="read_sensitive")[-1].detail["fields"] == ["balance"]


def test_live_field_without_a_value_is_not_reported_withheld(mem):
    mem.set_contract("acme", {"key": "balance", "kind": "fact", "sensitivity": "L3", "live": True,
                              "resolver": "registered:ledger"})
    mem.register_resolver("ledger", lambda t, u, k: None)
    assert not mem.recall("acme", "u", now=T0).withheld


class _Billing(BaseHTTPRequestHandler):
    def do_GET(self):
        q = parse_qs(urlparse(self.path).query)
        if q.get("user_id") == ["missing"]:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({"value": f"plan-of-{q['user_id'][0]}"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def billing_url():
    server = HTTPServer(("127.0.0.1", 0), _Billing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/plan"
    server.shutdown()
    server.server_close()


def test_live_field_with_http_resolver(mem, billing_url):
    mem.set_contract("acme", {**mem.contract("acme", "plan").to_dict(), "live": True, "resolver": billing_url})
    assert [r.value for r in mem.recall("acme", "u7", now=T0, keys=["plan"])] == ["plan-of-u7"]
    assert mem.recall("acme", "missing", now=T0, keys=["plan"]) == []
    assert mem.recall("acme", "u7", now=T0, keys=["city"]) == []  # not asked for: not resolved


def test_export_covers_sessions_pushback_and_verifications(mem):
    s = mem.open_session("acme", "u", now=T0)
    mem.opt_in("acme", "u", ["likes"], "shop", now=T0)
    for i in range(3):
        mem.record_pushback("acme", "u", "reply_length", "太长了", value="short", now=T0 + i)
    data = mem.export("acme", "u", now=T0 + 10)
    docs = data["documents"]
    assert [d["key"] for d in docs["sessions"]] == [s if isinstance(s, str) else s.id]
    assert "consents" in docs and "pushback" in docs
    mem.forget_user("acme", "u", now=T0 + 11)
    assert mem.export("acme", "u", now=T0 + 12)["documents"] == {}
