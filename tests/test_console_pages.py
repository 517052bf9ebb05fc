"""The console and /me pages without a browser (issue 14): sessions, CSRF, isolation, escaping, i18n, the chart."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from usermem import Memory
from usermem.interfaces.api import create_app
from usermem.interfaces.catalog import OPERATIONS
from usermem.interfaces.console import i18n
from usermem.interfaces.console.charts import decay_series, decay_svg
from usermem.policy.decay import weight_of

CONSOLE = Path(__file__).resolve().parent.parent / "src" / "usermem" / "interfaces" / "console"
T0 = 1_790_000_000.0
DAY = 86_400.0


@pytest.fixture
def setup():
    memory = Memory("sqlite://")
    app = create_app(memory)
    keys = app.state.keys
    admin, _ = keys.create("acme", admin=True)
    other_admin, _ = keys.create("globex", admin=True)
    plain, _ = keys.create("acme")  # not admin, not bound to a user
    agent, _ = keys.create("acme", user_id="alice")  # an agent's key bound to alice: not alice's own token
    alice, _ = keys.create_user_token("acme", "alice")
    bob, _ = keys.create_user_token("acme", "bob")
    memory.write("acme", "alice", "fact", "city", "<script>alert('x')</script>", source="user_confirmed")
    memory.write("acme", "alice", "preference", "cuisine", "{{7*7}}", source="user_confirmed")
    memory.write("acme", "bob", "fact", "city", "Beijing", source="user_confirmed")
    yield memory, app, {"admin": admin, "other": other_admin, "plain": plain, "agent": agent, "alice": alice,
                          "bob": bob}
    memory.close()


def _csrf(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field on the page"
    return m.group(1)


def signed_in(app, key: str, where: str = "/console") -> tuple[TestClient, str]:
    c = TestClient(app)
    token = _csrf(c.get(where).text)
    r = c.post(f"{where}/login", data={"key": key, "csrf": token}, follow_redirects=False)
    assert r.status_code == 303, r.text
    page = c.get("/console/users" if where == "/console" else "/me")
    return c, _csrf(page.text)


def test_every_string_has_both_languages_and_the_language_follows_the_browser():
    for key, entry in i18n.STRINGS.items():
        assert set(entry) == {"en", "zh"} and all(entry.values()), key
    assert set(i18n.STRINGS) >= i18n.DONE_MESSAGES
    assert i18n.pick_language("zh-CN,zh;q=0.9,en;q=0.8", None) == "zh"
    assert i18n.pick_language("en-US,en;q=0.9,zh;q=0.8", None) == "en"
    assert i18n.pick_language("fr-FR,zh;q=0.5", None) == "zh"
    assert i18n.pick_language("zh;q=0.2,en;q=0.9", None) == "en"
    assert i18n.pick_language("zh-CN", "en") == "en"  # the person's choice wins
    assert i18n.pick_language(None, "xx") == "en"


def test_pages_call_only_catalogue_operations():
    """Every `op(request, "<name>", ...)` in the views names an operation of the catalogue."""
    called: set[str] = set()
    for path in CONSOLE.glob("views_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "op"
                    and len(node.args) >= 2):
                name = node.args[1]
                branches = [name.body, name.orelse] if isinstance(name, ast.IfExp) else [name]
                for b in branches:  # a literal name, or a choice between two literal names
                    assert isinstance(b, ast.Constant) and isinstance(b.value, str), ast.unparse(name)
                    called.add(b.value)
    assert called, "the views call no operation"
    assert called - set(OPERATIONS) == set()
    assert {"recall_scored", "history", "revert", "disable_field", "enable_field", "set_contract",
            "contract_history", "grants", "grant", "revoke", "audit", "export", "forget_user", "write",
            "confirm", "deny", "pending_verifications", "sessions", "episodes"} <= called


def test_sign_in_needs_an_admin_key_and_a_login_csrf_token(setup):
    _, app, keys = setup
    c = TestClient(app)
    token = _csrf(c.get("/console").text)
    assert c.post("/console/login", data={"key": keys["admin"]}).status_code == 403  # no token
    assert c.post("/console/login", data={"key": keys["admin"], "csrf": "x" * 32}).status_code == 403
    for bad in (keys["plain"], keys["alice"], "umk_000000000000_" + "a" * 30, "<script>"):
        r = c.post("/console/login", data={"key": bad, "csrf": token})
        assert r.status_code == 401 and "<script>" not in r.text
    r = c.post("/console/login", data={"key": keys["admin"], "csrf": token}, follow_redirects=False)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and "Path=/console" in cookie
    assert keys["admin"] not in cookie  # the key is never the cookie
    page = c.get("/console/users")
    assert page.status_code == 200 and "alice" in page.text
    # /me opens only for a user token: not an admin key, not an agent's key bound to the user.
    me = TestClient(app)
    me_token = _csrf(me.get("/me").text)
    for bad in (keys["admin"], keys["plain"], keys["agent"]):
        assert me.post("/me/login", data={"key": bad, "csrf": me_token}).status_code == 401
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_every_console_post_without_the_csrf_token_is_refused(setup):
    memory, app, keys = setup
    c, token = signed_in(app, keys["admin"])
    head = memory.history("acme", "alice", "cuisine")[-1]
    posts = ["/console/logout", "/console/users/alice/keys/cuisine/revert",
             f"/console/users/alice/memories/{head.id}/confirm", f"/console/users/alice/memories/{head.id}/deny",
             "/console/users/alice/verifications/v1/accept", "/console/users/alice/grants",
             "/console/grants/g1/revoke", "/console/users/alice/erase", "/console/contracts/city/disable",
             "/console/contracts/city/enable", "/console/contracts/city/edit"]
    for path in posts:
        assert c.post(path, data={"confirm_user": "alice"}).status_code == 403, path
        assert c.post(path, data={"csrf": token[:-1] + ("B" if token.endswith("A") else "A")}, follow_redirects=False).status_code == 403, path
    assert memory.contract("acme", "city").enabled
    assert len(memory.recall("acme", "alice", k=10)) == 2
    # The header form (htmx sends X-CSRF-Token) is accepted.
    r = c.post("/console/contracts/city/disable", headers={"X-CSRF-Token": token}, follow_redirects=False)
    assert r.status_code == 303 and not memory.contract("acme", "city").enabled


def test_stored_values_are_escaped_everywhere(setup):
    _memory, app, keys = setup
    c, _ = signed_in(app, keys["admin"])
    for path in ("/console/users/alice", "/console/users/alice/keys/city", "/console/users/alice/keys/cuisine",
                 "/console/audit?user_id=alice"):
        html = c.get(path).text
        assert "<script>alert" not in html, path
        if "cuisine" in path:
            assert "{{7*7}}" in html and ">49<" not in html, path
    user = c.get("/console/users/alice").text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in user and "{{7*7}}" in user
    me, _ = signed_in(app, keys["alice"], "/me")
    html = me.get("/me").text
    assert "&lt;script&gt;" in html and "<script>alert" not in html and "{{7*7}}" in html
    # A hostile ?lang= or search text is escaped too.
    page = c.get('/console/users?q="><script>x</script>&lang="><b>').text
    assert "<script>x" not in page and "<b>" not in page


def test_a_user_token_sees_and_changes_only_its_own_user(setup):
    memory, app, keys = setup
    c, token = signed_in(app, keys["bob"], "/me")
    html = c.get("/me").text
    assert "Beijing" in html and "alert" not in html and "7*7" not in html
    alice_city = memory.history("acme", "alice", "city")[-1]
    for verb in ("confirm", "deny"):
        r = c.post(f"/me/memories/{alice_city.id}/{verb}", data={"csrf": token})
        assert r.status_code == 404
    assert memory.history("acme", "alice", "city")[-1] == alice_city
    # Correcting writes bob's field, whatever the form says; clearing erases bob only.
    r = c.post("/me/fields/city/correct", data={"csrf": token, "value": "Tianjin", "user_id": "alice"},
               follow_redirects=False)
    assert r.status_code == 303
    assert memory.recall("acme", "bob", keys=["city"])[0].value == "Tianjin"
    assert memory.recall("acme", "alice", keys=["city"])[0].value.startswith("<script>")
    assert c.post("/me/clear", data={"csrf": token, "confirm_word": "no"}).status_code == 400
    assert memory.recall("acme", "bob")
    r = c.post("/me/clear", data={"csrf": token, "confirm_word": "CLEAR"})
    assert r.status_code == 200 and 'data-field="remaining">0<' in r.text
    assert memory.recall("acme", "bob") == [] and len(memory.recall("acme", "alice", k=10)) == 2
    # A user token opens no console page, and an admin session does not open /me.
    assert c.get("/console/users/alice", follow_redirects=False).status_code == 303
    admin, _ = signed_in(app, keys["admin"])
    assert 'name="key"' in admin.get("/me").text


def test_tenants_are_apart_and_revoking_the_key_ends_the_session(setup):
    _memory, app, keys = setup
    c, _ = signed_in(app, keys["other"])
    assert "alice" not in c.get("/console/users").text
    assert "&lt;script&gt;" not in c.get("/console/users/alice").text  # globex has no alice
    a, _ = signed_in(app, keys["admin"])
    assert a.get("/console/users", follow_redirects=False).status_code == 200
    key_id = keys["admin"].split("_")[1]
    app.state.keys.revoke(key_id)
    assert a.get("/console/users", follow_redirects=False).status_code == 303


def test_erase_needs_the_typed_user_id_and_answers_a_receipt(setup):
    memory, app, keys = setup
    c, token = signed_in(app, keys["admin"])
    r = c.post("/console/users/alice/erase", data={"csrf": token, "confirm_user": "bob"})
    assert r.status_code == 400 and len(memory.recall("acme", "alice", k=10)) == 2
    r = c.post("/console/users/alice/erase", data={"csrf": token, "confirm_user": "alice"})
    assert r.status_code == 200
    fields = dict(re.findall(r'data-field="(\w+)">([^<]*)<', r.text))
    entry = memory.audit("acme", user_id="alice", action="forget_user")[-1]
    assert fields == {"rows": "2", "seq": str(entry.seq), "remaining": "0"}
    assert dict(entry.detail)["rows"] == 2


def test_bad_input_is_a_4xx_page_never_a_500(setup):
    _, app, keys = setup
    c, token = signed_in(app, keys["admin"])
    assert c.get("/console/users/" + "x" * 300).status_code in (400, 422)
    assert c.get("/console/audit?since=yesterday").status_code in (400, 422)
    assert c.get("/console/contracts/no_such_field").status_code == 404
    r = c.post("/console/users/alice/grants", data={"csrf": token, "fields_or_level": "L2", "purpose": "x",
                                                    "ttl": "nan"})
    assert r.status_code in (400, 422)
    r = c.post("/console/contracts/city/edit", data={"csrf": token, "sensitivity": "L9"})
    assert r.status_code in (400, 422)
    r = c.post("/console/users/alice/keys/city/revert", data={"csrf": token, "to_version": "nope"})
    assert r.status_code == 404


def test_decay_chart_is_the_engines_weight_with_events_and_thresholds():
    hl = 30 * DAY * math.log(2)
    s = decay_series(base=0.9, half_life_seconds=hl, created_at=T0, confirmations=[T0 + 20 * DAY],
                     last_used_at=T0 + 35 * DAY, now=T0 + 40 * DAY)
    for t, w in s.points:
        lc = T0 + 20 * DAY if t >= T0 + 20 * DAY else None
        lu = T0 + 35 * DAY if t >= T0 + 35 * DAY else None
        assert w == pytest.approx(weight_of(0.9, hl, T0, lc, lu, t))
    at_confirm = dict(s.points)[T0 + 20 * DAY]
    assert at_confirm == pytest.approx(0.9)  # a confirmation restores the base weight
    assert dict(s.points)[T0 + 35 * DAY] == pytest.approx(0.9 * 0.95)  # a use lifts it to 0.95 · base
    svg = str(decay_svg(s, chart_id="c1", labels={
        "title": "W <b>", "confirm_line": "c", "drop_line": "d", "created": "w", "confirmed": "ok", "used": "u",
        "now": "now", "summary": "{start} {now} {events}", "not_judged": "nj"}))
    assert 'data-threshold="0.55"' in svg and 'data-threshold="0.3"' in svg
    assert svg.count('class="event confirmed"') == 1 and svg.count('class="event used"') == 1
    assert "W &lt;b&gt;" in svg and "<b>" not in svg
    assert "nan" not in svg.lower()


def test_procedure_review_queue_page(setup):
    """Issue 18's review queue in the console: approval needs a passed evaluation; rollback; escaped text."""
    memory, app, keys = setup
    p = memory.propose_procedure("acme", "<b>先给发票表</b>", user_id="alice", evidence=["session s1"])
    c, csrf = signed_in(app, keys["admin"])
    page = c.get("/console/procedures", params={"user_id": "alice"})
    assert page.status_code == 200 and "&lt;b&gt;先给发票表&lt;/b&gt;" in page.text and "<b>先给" not in page.text
    url = f"/console/procedures/{p['id']}/approve"
    assert c.post(url, data={"evaluation": "e2e-dev", "passed": "yes"}, follow_redirects=False).status_code == 403
    r = c.post(url, data={"csrf": csrf, "evaluation": "e2e-dev"}, follow_redirects=False)  # not passed
    assert r.status_code in (400, 422) and memory.procedures("acme", user_id="alice")[0]["status"] == "proposed"
    r = c.post(url, data={"csrf": csrf, "evaluation": "e2e-dev", "result": "40/40", "passed": "yes"},
               follow_redirects=False)
    assert r.status_code == 303
    assert memory.procedures("acme", user_id="alice", status="approved")[0]["evaluation"]["name"] == "e2e-dev"
    r = c.post(f"/console/procedures/{p['id']}/rollback", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and memory.procedures("acme", user_id="alice")[0]["status"] == "rolled_back"
    other, _ = signed_in(app, keys["other"])
    assert "先给发票表" not in other.get("/console/procedures", params={"user_id": "alice", "status": "rolled_back"}).text
