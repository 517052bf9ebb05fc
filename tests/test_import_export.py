"""A user's export imported into another instance gives the same current memories (`usermem import`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from usermem import Memory, ValidationError
from usermem.interfaces.cli import _register, app
from usermem.interfaces.importer import import_export

_register()
T0 = 1_790_000_000.0
DAY = 86_400.0


def _current(m: Memory, tenant: str, user: str, now: float) -> list[tuple[str, str, object, str, float]]:
    return sorted((s.memory.kind.value, s.memory.key, json.dumps(s.memory.value, ensure_ascii=False),
                   s.memory.source.value, round(s.weight, 6)) for s in m.recall_scored(tenant, user, k=100, now=now))


def _source() -> Memory:
    a = Memory()
    a.write("acme", "C007", "profile", "plan", "年付专业版", source="system", now=T0)
    a.write("acme", "C007", "preference", "reply_length", "简洁", source="user_confirmed", now=T0 + DAY)
    a.write("acme", "C007", "preference", "reply_length", "详细", source="user_confirmed", now=T0 + 2 * DAY)
    a.write("acme", "C007", "preference", "theme", {"mode": "dark"}, source="extracted", now=T0 + 3 * DAY)
    a.write("acme", "C007", "fact", "city", "杭州", source="user_confirmed", now=T0, event_at=T0 - 10 * DAY)
    a.write("acme", "C007", "preference", "gone", "x", source="user_confirmed", now=T0)
    a.forget("acme", "C007", "gone", now=T0 + DAY)
    return a


def test_round_trip_gives_the_same_current_memories(tmp_path: Path) -> None:
    a = _source()
    data = a.export("acme", "C007", now=T0 + 4 * DAY)
    b = Memory()
    report = import_export(b, json.loads(json.dumps(data)))
    # 4 current values + reply_length's earlier version; forgotten: not in the export
    assert (report.written, report.history, report.rejected, report.skipped) == (5, 1, [], 0)
    for later in (T0 + 4 * DAY, T0 + 20 * DAY):  # same values, sources and decayed weights
        assert _current(b, "acme", "C007", later) == _current(a, "acme", "C007", later)
    assert len(_current(b, "acme", "C007", T0 + 4 * DAY)) == 4
    # again: nothing changes (idempotent)
    again = import_export(b, data)
    assert (again.written, again.unchanged) == (0, 4)
    # the CLI, into a file store, as another user
    path = tmp_path / "C007.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'other.db'}"
    done = CliRunner().invoke(app, ["import", str(path), "--store", url, "--user", "C008", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["written"] == 5
    c = Memory(url)
    assert _current(c, "acme", "C008", T0 + 5 * DAY) == _current(a, "acme", "C007", T0 + 5 * DAY)
    c.close()


def test_guards_of_the_target_apply_and_bad_files_are_refused() -> None:
    data = _source().export("acme", "C007", now=T0 + 4 * DAY)
    b = Memory()
    b.set_unknown_fields("acme", "reject")
    report = import_export(b, data)
    assert (report.written, report.rejected) == (4, [("theme", "unknown_field")])  # reported, never forced
    with pytest.raises(ValidationError):
        import_export(b, {"format": "something else"})
    with pytest.raises(ValidationError):
        import_export(b, {**data, "fields": {"k": {"current": {"kind": "preference"}}}})


def _versions(export: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Each field's chain without ids (the target makes new ones): what a user would see in history."""
    keep = ("kind", "value", "source", "confidence", "importance", "created_at", "expires_at", "superseded_at",
            "event_at", "canonical", "retracted")
    return {k: [tuple(json.dumps(v[f], ensure_ascii=False) for f in keep) for v in e["history"]]
            for k, e in export["fields"].items()}


def _decisions(export: dict[str, Any]) -> dict[str, list[str]]:
    """Grants, consents and consent requests without ids: the decisions themselves."""
    shape = {"grants": ("level", "fields", "purpose", "created_at", "expires_at", "grantee"),
             "consents": ("field", "domain", "at"),
             "consent_requests": ("fields", "purpose", "status", "created_at", "decided_at", "decided_by",
                                  "expires_at", "ttl_seconds", "session_id")}
    docs = export["documents"]
    return {ns: sorted(json.dumps([d["value"][f] for f in keep], ensure_ascii=False) for d in docs.get(ns, []))
            for ns, keep in shape.items()}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_history_grants_and_consents_round_trip(make_memory: Any) -> None:
    a = Memory()
    a.write("acme", "C007", "preference", "reply_length", "简洁", source="extracted", now=T0)
    a.write("acme", "C007", "preference", "reply_length", "详细", source="user_confirmed", now=T0 + DAY,
            change_set_id="cs-1")
    a.write("acme", "C007", "fact", "city", "杭州", source="user_confirmed", now=T0 + DAY, change_set_id="cs-1")
    a.write("acme", "C007", "preference", "reply_length", "适中", source="user_confirmed", now=T0 + 2 * DAY)
    a.revert("acme", "C007", "reply_length", now=T0 + 3 * DAY)  # back to 详细: a fourth version
    a.write("acme", "C007", "fact", "allergy", "花生", source="user_confirmed", now=T0)  # L3
    a.write("acme", "C007", "context", "mood", "tired", source="user_confirmed", now=T0, ttl_seconds=3600)  # expires
    a.grant("acme", "C007", "L2", "support ticket", ttl=7 * DAY, now=T0 + DAY)
    a.grant("acme", "C007", ["allergy"], "delivery", ttl=2 * DAY, grantee="key:abc", now=T0 + DAY)
    a.opt_in("acme", "C007", ["reply_length"], "shop", now=T0 + DAY)
    req = a.request_consent("acme", "C007", ["allergy"], "推荐午餐", ttl=7 * DAY, now=T0 + 2 * DAY)
    a.approve_consent("acme", "C007", req.id, actor="user", now=T0 + 2 * DAY + 60)
    no = a.request_consent("acme", "C007", ["allergy"], "营销", session_id="s-1", now=T0 + 2 * DAY)
    a.decline_consent("acme", "C007", no.id, actor="user", now=T0 + 2 * DAY + 30)
    a.request_consent("acme", "C007", ["allergy"], "体检提醒", now=T0 + 3 * DAY)  # still pending
    at = T0 + 3 * DAY + 1
    source = json.loads(json.dumps(a.export("acme", "C007", now=at)))
    current = _current(a, "acme", "C007", at)
    a.close()

    b = make_memory()
    report = import_export(b, source)
    assert report.rejected == [] and report.history == 3  # reply_length's three earlier versions
    assert (report.grants, report.consents, report.consent_requests) == (2, 1, 3)  # + 1 grant by the approval
    target = b.export("acme", "C007", now=at)
    assert _versions(target) == _versions(source)
    assert _decisions(target) == _decisions(source)
    assert _current(b, "acme", "C007", at) == current
    assert [r.value for r in b.history("acme", "C007", "reply_length", now=at)] == ["简洁", "详细", "适中", "详细"]
    # the replayed change set groups the same writes under a new id: reverting it undoes them together
    cs = {v["change_set_id"] for v in target["fields"]["city"]["history"]}
    assert len(cs) == 1 and cs != {"cs-1"}
    # the approval's grant lets the purpose read the L3 field again; the declined request is remembered
    assert b.consent_requests("acme", "C007", status="pending", now=at)[0].purpose == "体检提醒"
    again = import_export(b, source)  # a second import changes nothing
    assert (again.written, again.history, again.grants, again.consents, again.consent_requests) == (0, 0, 0, 1, 0)
    assert _versions(b.export("acme", "C007", now=at)) == _versions(source)
    assert _decisions(b.export("acme", "C007", now=at)) == _decisions(source)
    # whatever order the export lists the requests in (PostgreSQL gives no order): asks and answers are
    # replayed in time order, so two requests asked at the same time end as they did
    for order in (list, lambda docs: list(reversed(docs))):
        shuffled = json.loads(json.dumps(source))
        shuffled["documents"]["consent_requests"] = order(shuffled["documents"]["consent_requests"])
        c = Memory()
        import_export(c, shuffled)
        assert _decisions(c.export("acme", "C007", now=at)) == _decisions(source)
        c.close()


def _chatgpt_export() -> list[dict[str, object]]:
    def node(nid: str, parent: str | None, role: str, text: str, t: float) -> dict[str, object]:
        return {"id": nid, "parent": parent, "children": [],
                "message": {"author": {"role": role}, "content": {"content_type": "text", "parts": [text]},
                            "create_time": t}}

    return [
        {"conversation_id": "c1", "title": "reports", "current_node": "n3", "mapping": {
            "root": {"id": "root", "parent": None, "children": ["n1"], "message": None},
            "n1": node("n1", "root", "user", "以后报告都用 Markdown", T0),
            "n1b": node("n1b", "n1", "assistant", "(an abandoned branch) 好的", T0 + 1),
            "n2": node("n2", "n1", "assistant", "好的，以后用 Markdown。", T0 + 2),
            "n3": node("n3", "n2", "user", "我的身份证号是11010519491231002X", T0 + 3)}},
        {"conversation_id": "c2", "title": "food", "current_node": "m1", "mapping": {
            "m1": node("m1", None, "user", "我对花生过敏", T0 + DAY)}},
    ]


def _claude_export() -> list[dict[str, object]]:
    return [{"uuid": "k1", "name": "x", "chat_messages": [
        {"sender": "human", "text": "", "content": [{"type": "text", "text": "以后报告都用 Markdown"}],
         "created_at": "2026-09-21T10:00:00Z"},
        {"sender": "assistant", "text": "好的", "created_at": "2026-09-21T10:00:05Z"}]},
        {"uuid": "k2", "name": "y", "chat_messages": [
            {"sender": "human", "text": "我对花生过敏", "created_at": "2026-09-22T10:00:00Z"}]}]


def test_chatgpt_and_claude_conversations_are_ingested_through_the_guards(tmp_path: Path) -> None:
    from usermem.interfaces.importer import import_conversations, read_conversations

    kind, convs = read_conversations(_chatgpt_export())
    assert kind == "chatgpt" and [len(c.messages) for c in convs] == [3, 1]  # the abandoned branch is left out
    m = Memory()
    report = import_conversations(m, "acme", "alice", _chatgpt_export())
    assert (report.conversations, report.ingested) == (2, 2)
    held = {s.memory.key: s.memory.value for s in m.recall_scored("acme", "alice", k=50, now=T0 + 2 * DAY)}
    assert str(held.get("report_format")).lower() == "markdown"  # the user's words kept
    assert "allergy" in m.export("acme", "alice")["fields"]  # L3: held, withheld from recall without a grant
    assert "11010519491231002X" not in json.dumps(m.export("acme", "alice"), ensure_ascii=False)  # PII refused
    kind, convs = read_conversations(_claude_export())
    assert kind == "claude" and convs[0].messages[0] == ("user", "以后报告都用 Markdown")
    with pytest.raises(ValidationError):
        read_conversations([{"neither": 1}])


def test_a_stopped_conversation_import_resumes_where_it_stopped(tmp_path: Path) -> None:
    from usermem.interfaces.importer import import_conversations

    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(_claude_export(), ensure_ascii=False), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'u.db'}"
    m = Memory(url)

    def stop_after_first(done: int, total: int) -> None:
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_conversations(m, "acme", "bob", _claude_export(), progress=stop_after_first)
    m.close()
    done = CliRunner().invoke(app, ["import", str(path), "--store", url, "--tenant", "acme", "--user", "bob",
                                    "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert (out["source"], out["resumed_past"], out["ingested"]) == ("claude", 1, 1)
    refused = CliRunner().invoke(app, ["import", str(path), "--store", url])
    assert refused.exit_code == 2  # conversations need --tenant and --user
