"""The operator console and the "my memory" page in a real browser (issue 14).

Playwright drives Debian's headless Chromium (/usr/bin/chromium, installed by `make test` through
scripts/ensure_browser.sh; never a browser download) against one in-process server on SQLite. The tests
of this module share one server and one browser and run in file order (a sign-in, then what a signed-in
operator does). Screenshots go to a temporary folder; `USERMEM_SCREENSHOTS=reports/screenshots` refreshes the
committed ones (a test run never rewrites files of the checkout by itself).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import unavailable
from console_server import Served, serve

CHROMIUM = Path("/usr/bin/chromium")
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.14.1.min.js"
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'

try:
    from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
except ImportError:  # skips locally; with USERMEM_REQUIRE_BACKENDS=1 (CI) the module fails to collect
    unavailable("playwright (the dev extra) is not installed")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("console") / "console.db", users=("alice", "alicia", "bob")) as s:
        m = s.memory
        m.write("acme", "alice", "preference", "reply_length", "详细", source="extracted")
        m.write("acme", "alice", "preference", "reply_length", "简洁", source="user_confirmed")
        m.write("acme", "alice", "fact", "city", "杭州", source="user_confirmed")
        m.write("acme", "alice", "fact", "occupation", XSS, source="user_confirmed")
        m.write("acme", "alice", "preference", "cuisine", "{{7*7}}", source="extracted")
        head = m.history("acme", "alice", "cuisine")[-1]
        m.confirm("acme", "alice", head.id, source="agent_confirmed")
        m.write("acme", "alicia", "fact", "city", "Shanghai", source="user_confirmed")
        m.write("acme", "bob", "fact", "city", "Beijing", source="user_confirmed")
        m.write("acme", "bob", "preference", "reply_length", "short", source="user_confirmed")
        sid = m.open_session("acme", "alice", "web")
        m.close_session(sid, [{"role": "user", "content": "我想订一家杭州的餐厅"}], tenant="acme")
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        unavailable("Debian's chromium is not installed (make test runs scripts/ensure_browser.sh)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def console(browser: Browser, served: Served) -> Iterator[Page]:
    """One operator's browser tab for the whole module (English UI)."""
    context = browser.new_context(base_url=served.url, locale="en-US", viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs  # type: ignore[attr-defined]
    yield page
    context.close()


def shot(page: Page, name: str) -> None:
    folder = os.environ.get("USERMEM_SCREENSHOTS")
    shots = Path(folder) if folder else Path(tempfile.gettempdir()) / f"usermem-screenshots-{os.getpid()}"
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


def sign_in(page: Page, url: str, key: str) -> None:
    page.goto(url)
    page.get_by_label("Admin API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Users", level=1)).to_be_visible()


# -- the operator's path -------------------------------------------------------------------------------


def test_landing_page_links_to_console_docs_and_health(console: Page, served: Served) -> None:
    console.goto("/")
    for name, href in (("Operator console", "/console"), ("API documentation", "/docs"), ("Health", "/health")):
        expect(console.get_by_role("link", name=name)).to_have_attribute("href", href)
    assert console.request.get(f"{served.url}/health").json()["status"] == "ok"


def test_a_wrong_key_is_refused_then_sign_in_and_find_a_user(console: Page, served: Served) -> None:
    console.goto("/console")
    console.get_by_label("Admin API key").fill(served.user_keys["alice"])  # a valid key, but not an admin one
    console.get_by_role("button", name="Sign in").click()
    expect(console.get_by_role("alert")).to_contain_text("not a valid admin key")
    sign_in(console, "/console", served.admin_key)
    users = console.locator("#user-list li")
    expect(users).to_have_count(3)
    console.get_by_label("Search users by id prefix").fill("ali")
    expect(users).to_have_count(2)  # alice, alicia — htmx replaced the list without a page load
    expect(console.locator("#user-list")).not_to_contain_text("bob")
    console.get_by_label("Search users by id prefix").fill("alic")
    console.get_by_role("link", name="alice", exact=True).click()
    expect(console.get_by_role("heading", level=1)).to_contain_text("alice")
    keys = set(console.locator("article.memory").evaluate_all("cs => cs.map(c => c.dataset.key)"))
    assert {"city", "occupation", "reply_length", "cuisine"} <= keys
    assert any(k.startswith("session.") for k in keys)  # the closed session's episode
    expect(console.get_by_role("heading", name="Facts", level=3)).to_be_visible()
    expect(console.get_by_role("heading", name="Preferences", level=3)).to_be_visible()
    city = console.locator('article.memory[data-key="city"]')
    expect(city).to_contain_text("杭州")
    expect(city.locator(".badge").first).to_have_text("user confirmed")
    expect(city.locator("meter")).to_have_attribute("value", re.compile(r"^(0\.9\d\d|1\.000)$"))
    expect(console.locator("#h-sessions + table")).to_contain_text("closed")
    expect(console.locator("ul.episodes li")).to_have_count(1)
    shot(console, "console-user")


def test_stored_script_and_template_payloads_are_inert_text(console: Page, served: Served) -> None:
    console.goto("/console/users/alice")
    occupation = console.locator('article.memory[data-key="occupation"] .value')
    expect(occupation).to_have_text(XSS)  # shown as text ...
    assert console.locator('article.memory img[src="x"]').count() == 0  # ... never parsed as markup
    expect(console.locator('article.memory[data-key="cuisine"] .value')).to_have_text("{{7*7}}")
    assert console.evaluate("window.__xss") is None
    console.goto("/console/users/alice/keys/occupation")
    assert console.evaluate("window.__xss") is None
    assert console.dialogs == []  # type: ignore[attr-defined]


def test_revert_a_version_from_the_timeline_and_the_decay_chart(console: Page, served: Served) -> None:
    console.goto("/console/users/alice")
    console.get_by_role("link", name="Versions and decay — reply_length").click()
    expect(console.get_by_role("heading", name="reply_length", level=1)).to_be_visible()
    versions = console.locator("ol.timeline > li")
    expect(versions).to_have_count(2)
    expect(versions.first).to_contain_text("简洁")
    chart = console.locator("svg.decay")
    expect(chart).to_have_attribute("role", "img")
    assert sorted(chart.locator("line.threshold").evaluate_all("ls => ls.map(l => l.dataset.threshold)")) == \
        ["0.3", "0.55"]
    expect(chart.locator("path.weight")).to_have_count(1)
    expect(chart.locator("g.event.created")).to_have_count(1)
    console.get_by_role("button", name=re.compile(r"^Revert to this version\s*:\s*详细$")).click()
    expect(console.get_by_role("status")).to_contain_text("Reverted")
    expect(versions).to_have_count(3)
    expect(versions.first).to_contain_text("详细")
    assert [r.value for r in served.memory.recall("acme", "alice", keys=["reply_length"])] == ["详细"]
    shot(console, "console-timeline")
    # A confirmed memory's chart marks the confirmation.
    console.goto("/console/users/alice/keys/cuisine")
    expect(console.locator("svg.decay g.event.confirmed")).to_have_count(1)


def test_disable_a_field_and_edit_its_contract_with_history(console: Page, served: Served) -> None:
    console.get_by_role("navigation").get_by_role("link", name="Field contracts").click()
    row = console.locator('tr[data-key="city"]')
    expect(row).to_contain_text("Enabled")
    row.get_by_role("button", name="Disable city").click()
    expect(console.get_by_role("status")).to_contain_text("Field disabled")
    expect(console.locator('tr[data-key="city"]')).to_contain_text("Disabled")
    assert served.memory.recall("acme", "alice", keys=["city"]) == []
    assert not served.memory.contract("acme", "city").enabled
    # Edit another field's contract: sensitivity, sharing, TTL — a new version, audited, with history.
    console.goto("/console/contracts/occupation")
    console.get_by_label("Sensitivity").select_option("L2")
    console.get_by_label("Sharing").select_option("private")
    console.get_by_label("Time to live").fill("7200")
    console.get_by_role("button", name="Save as a new version").click()
    expect(console.get_by_role("status")).to_contain_text("Saved")
    c = served.memory.contract("acme", "occupation")
    assert (c.enabled, c.sensitivity.value, c.sharing.value, c.ttl_seconds) == (True, "L2", "private", 7200.0)
    history = console.locator("#h-ch + table tbody tr")
    expect(history.first).to_contain_text("L2")
    expect(history.first).to_contain_text("key:")
    shot(console, "console-contract")
    # ... and occupation is now withheld from the operator's view (L2 needs a grant).
    console.goto("/console/users/alice")
    expect(console.locator('article.memory[data-key="occupation"]')).to_have_count(0)
    console.goto("/console/contracts")
    console.locator('tr[data-key="city"]').get_by_role("button", name=re.compile("^Enable")).click()
    expect(console.get_by_role("status")).to_contain_text("Field enabled")
    assert served.memory.contract("acme", "city").enabled
    actions = [e.action for e in served.memory.audit("acme", action="contract_change")]
    assert len(actions) >= 3  # every change audited


def test_audit_log_filters(console: Page, served: Served) -> None:
    console.goto("/console/audit")
    console.get_by_label("User").fill("alice")
    console.get_by_label("Action", exact=True).fill("revert")
    console.get_by_role("button", name="Filter").click()
    rows = console.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("revert")
    expect(rows.first).to_contain_text("key:")


def test_post_without_csrf_token_is_refused(console: Page, served: Served) -> None:
    before = served.memory.contract("acme", "reply_length").enabled
    r = console.request.post(f"{served.url}/console/contracts/reply_length/disable", form={"x": "1"})
    assert r.status == 403
    r = console.request.post(f"{served.url}/console/contracts/reply_length/disable", form={"csrf": "forged"})
    assert r.status == 403
    assert served.memory.contract("acme", "reply_length").enabled == before


def test_erase_a_user_with_a_confirmation_dialog_and_receipt(console: Page, served: Served) -> None:
    held = len(served.memory.export("acme", "alicia")["fields"])
    assert held == 1
    console.goto("/console/users/alicia")
    console.get_by_role("button", name="Erase this user…").click()
    dialog = console.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Type the user id to confirm").fill("alicia")
    dialog.get_by_role("button", name="Erase", exact=True).click()
    expect(console.get_by_role("heading", name="Erasure receipt")).to_be_visible()
    expect(console.locator('[data-field="rows"]')).to_have_text("1")
    expect(console.locator('[data-field="remaining"]')).to_have_text("0")
    seq = int(console.locator('[data-field="seq"]').inner_text())
    entry = [e for e in served.memory.audit("acme", user_id="alicia", action="forget_user")]
    assert [e.seq for e in entry] == [seq]
    assert served.memory.recall("acme", "alicia") == []
    shot(console, "console-receipt")


def test_sign_out_ends_the_session(browser: Browser, served: Served) -> None:
    context = browser.new_context(base_url=served.url, locale="en-US")
    page = context.new_page()
    sign_in(page, "/console", served.admin_key)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Admin API key")).to_be_visible()
    page.goto("/console/users")
    expect(page.get_by_label("Admin API key")).to_be_visible()
    context.close()


# -- languages -----------------------------------------------------------------------------------------


def test_chinese_ui_follows_the_browser_and_is_switchable(browser: Browser, served: Served) -> None:
    context = browser.new_context(base_url=served.url, locale="zh-CN")
    page = context.new_page()
    page.goto("/console")
    expect(page.get_by_role("heading", level=1)).to_have_text("运营控制台")
    page.get_by_label("管理员 API 密钥").fill(served.admin_key)
    page.get_by_role("button", name="登录").click()
    expect(page.get_by_role("heading", name="用户", level=1)).to_be_visible()
    page.goto("/console/users/bob")
    expect(page.get_by_role("heading", name="事实", level=3)).to_be_visible()
    expect(page.get_by_role("heading", name="偏好", level=3)).to_be_visible()
    shot(page, "console-user-zh")
    page.get_by_role("link", name="English").click()
    expect(page.get_by_role("heading", name="Facts", level=3)).to_be_visible()
    assert page.locator("html").get_attribute("lang") == "en"
    page.goto("/console/contracts")  # the choice sticks (cookie)
    expect(page.get_by_role("heading", name="Field contracts", level=1)).to_be_visible()
    context.close()


# -- the user's page -----------------------------------------------------------------------------------


def me_sign_in(page: Page, key: str) -> None:
    page.goto("/me")
    page.get_by_label("Your access token").fill(key)
    page.get_by_role("button", name="Sign in").click()
    # The sign-in page has the same heading: wait for what only a signed-in page has.
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    expect(page.get_by_role("heading", name="My memory", level=1)).to_be_visible()


def test_me_page_correct_confirm_deny_export_and_clear(browser: Browser, served: Served) -> None:
    context = browser.new_context(base_url=served.url, locale="en-US", accept_downloads=True)
    page = context.new_page()
    me_sign_in(page, served.user_keys["bob"])
    cards = page.locator("article.memory")
    expect(cards).to_have_count(2)
    expect(page.locator("main")).not_to_contain_text("杭州")  # alice's data is not here
    reply = page.locator('article.memory[data-key="reply_length"]')
    reply.get_by_role("textbox").fill("两三句话就好")
    reply.get_by_role("button", name=re.compile("^Correct it")).click()
    expect(page.get_by_role("status")).to_contain_text("Corrected")
    expect(page.locator('article.memory[data-key="reply_length"] .value')).to_have_text("两三句话就好")
    rec = served.memory.recall("acme", "bob", keys=["reply_length"])[0]
    assert (rec.value, rec.source.value) == ("两三句话就好", "user_confirmed")
    page.locator('article.memory[data-key="city"]').get_by_role("button", name=re.compile("^Confirm")).click()
    expect(page.get_by_role("status")).to_contain_text("Confirmed")
    page.locator('article.memory[data-key="reply_length"]').get_by_role("button", name=re.compile("^Deny")).click()
    expect(page.get_by_role("status")).to_contain_text("Denied")
    assert served.memory.recall("acme", "bob", keys=["reply_length"]) == []
    with page.expect_download() as dl:
        page.get_by_role("link", name="Download my data (JSON)").click()
    document = json.loads(Path(dl.value.path()).read_text(encoding="utf-8"))
    assert document["user_id"] == "bob" and "city" in document["fields"]
    shot(page, "me")
    page.get_by_role("button", name="Clear my memory…").click()
    page.get_by_role("dialog").get_by_label("Type CLEAR to confirm").fill("CLEAR")
    page.get_by_role("dialog").get_by_role("button", name="Clear my memory").click()
    expect(page.get_by_role("heading", name="Erasure receipt")).to_be_visible()
    expect(page.locator('[data-field="remaining"]')).to_have_text("0")
    assert served.memory.recall("acme", "bob") == []
    shot(page, "me-receipt")
    context.close()


def test_a_user_token_cannot_see_or_change_another_user(browser: Browser, served: Served) -> None:
    context = browser.new_context(base_url=served.url, locale="en-US")
    page = context.new_page()
    served.memory.write("acme", "bob", "fact", "city", "Tianjin", source="user_confirmed")
    me_sign_in(page, served.user_keys["bob"])
    alice_city = served.memory.history("acme", "alice", "city")[-1]
    csrf = page.locator('input[name="csrf"]').first.get_attribute("value")
    assert csrf
    for path in (f"/me/memories/{alice_city.id}/deny", f"/me/memories/{alice_city.id}/confirm"):
        r = page.request.post(f"{served.url}{path}", form={"csrf": csrf})
        assert r.status == 404, (path, r.text()[-800:])  # not bob's memory: absent
    assert served.memory.history("acme", "alice", "city")[-1] == alice_city
    # No URL names a user on /me: the console's user pages need an admin session, which a user token is not.
    page.goto("/console/users/alice")
    expect(page.get_by_label("Admin API key")).to_be_visible()
    r = page.request.post(f"{served.url}/console/users/alice/erase", form={"csrf": csrf, "confirm_user": "alice"})
    assert r.status == 401
    assert served.memory.recall("acme", "alice", k=10)
    context.close()


def test_approve_a_consent_then_the_field_is_in_recall(browser: Browser, served: Served) -> None:
    m = served.memory
    m.write("acme", "alice", "fact", "allergy", "花生", source="user_confirmed")
    before = m.recall("acme", "alice", 50)
    assert "allergy" not in {r.key for r in before}
    [withheld] = [w for w in before.withheld if w.key == "allergy"]
    assert (withheld.level, withheld.reason) == ("L3", "needs_grant") and "花生" not in str(withheld.to_dict())
    req = m.request_consent("acme", "alice", ["allergy"], "推荐午餐", ttl=600)
    context = browser.new_context(base_url=served.url, locale="zh-CN")
    page = context.new_page()
    page.goto("/me")
    page.get_by_label("您的访问令牌").fill(served.user_keys["alice"])
    page.get_by_role("button", name="登录").click()
    expect(page.get_by_role("button", name="退出")).to_be_visible()
    item = page.locator(f'li[data-request="{req.id}"]')
    expect(item.locator(".question")).to_have_text(req.question("zh"))
    assert "allergy" not in item.inner_text()  # the label, never the raw key
    shot(page, "me-consent-zh")
    item.get_by_role("button", name=re.compile("^同意")).click()
    expect(page.get_by_role("status")).to_contain_text("已同意")
    expect(page.locator(f'li[data-request="{req.id}"]')).to_have_count(0)
    after = m.recall("acme", "alice", 50)
    assert [r.value for r in after if r.key == "allergy"] == ["花生"]
    [approved] = m.consent_requests("acme", "alice", status="approved")
    assert approved.grant_id and m.audit("acme", user_id="alice", action="grant")
    context.close()


def test_an_agent_key_bound_to_a_user_is_not_a_user_token(browser: Browser, served: Served) -> None:
    context = browser.new_context(base_url=served.url, locale="en-US")
    page = context.new_page()
    page.goto("/me")
    page.get_by_label("Your access token").fill(served.agent_key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    context.close()


# -- accessibility -------------------------------------------------------------------------------------


def _axe(page: Page) -> list[dict[str, Any]]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [v for v in result["violations"] if v.get("impact") in ("serious", "critical")]


def test_accessibility_axe_and_keyboard(browser: Browser, served: Served) -> None:
    assert AXE.exists(), "axe-core is vendored in tests/vendor"
    context: BrowserContext = browser.new_context(base_url=served.url, locale="en-US")
    page = context.new_page()
    # Keyboard only: skip link first, then the sign-in form.
    page.goto("/console")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Tab")  # the language links come before the form
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "key"
    page.keyboard.type(served.admin_key)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Users", level=1)).to_be_visible()
    found: dict[str, list[str]] = {}
    for path in ("/", "/console/users", "/console/users/alice", "/console/users/alice/keys/reply_length",
                 "/console/contracts", "/console/contracts/city", "/console/grants", "/console/audit"):
        page.goto(path)
        found[path] = [f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}" for v in _axe(page)]
    me = context.new_page()
    me_sign_in(me, served.user_keys["alice"])
    found["/me"] = [f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}" for v in _axe(me)]
    me.get_by_role("button", name="Clear my memory…").focus()
    me.keyboard.press("Enter")
    expect(me.get_by_role("dialog")).to_be_visible()
    assert me.evaluate("document.activeElement.id") == "confirm-word"
    me.keyboard.press("Escape")
    expect(me.get_by_role("dialog")).to_be_hidden()
    context.close()
    assert {p: v for p, v in found.items() if v} == {}
    # Every form control of those pages has a label (axe's `label` rule is critical; checked above).
