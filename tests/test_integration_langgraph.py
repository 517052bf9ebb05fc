"""`UsermemStore` against the behaviour LangGraph's own store tests expect of a `BaseStore` (namespace
validation, list_namespaces with prefix/suffix/wildcards/depth/paging, batched async calls, filters, paging,
TTL with refresh on read), plus what usermem adds: guards, hybrid search, erasure, one memory per native key."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp

from apihelp import T0, fast_memory
from usermem.errors import ValidationError
from usermem.integrations.langgraph import UsermemStore


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock):
    m = fast_memory()
    yield UsermemStore(m, tenant="acme", clock=clock)
    m.close()


def _fill(store: UsermemStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, ns in enumerate(namespaces):
        store.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})


def test_put_get_update_delete(store: UsermemStore, clock: Clock):
    store.put(("alice", "memories"), "k-1", {"text": "likes green tea", "n": 1})
    item = store.get(("alice", "memories"), "k-1")
    assert item is not None and item.value == {"text": "likes green tea", "n": 1}
    assert item.namespace == ("alice", "memories") and item.key == "k-1"
    created = item.created_at
    clock.t += 60
    store.put(("alice", "memories"), "k-1", {"text": "likes oolong", "n": 2})
    item = store.get(("alice", "memories"), "k-1")
    assert item is not None and item.value["n"] == 2
    assert item.created_at == created and item.updated_at > created
    assert store.get(("alice", "other"), "k-1") is None and store.get(("bob", "memories"), "k-1") is None
    store.delete(("alice", "memories"), "k-1")
    assert store.get(("alice", "memories"), "k-1") is None
    assert store.search(("alice",)) == []


def test_invalid_namespaces_are_refused(store: UsermemStore):
    doc = {"foo": "bar"}
    for ns in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(ns, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aput(ns, "foo", doc))
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert store.search(("foo", "langgraph", "foo"))[0].value == doc
    # past the public API, as LangGraph's tests do: batch takes ("langgraph", ...) as any other root
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", doc)])


def test_list_namespaces_prefix_suffix_wildcards_depth_paging(store: UsermemStore):
    _fill(store, [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
                  ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")])
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d", "e"),
                                                        ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"),
                                                                     ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert store.list_namespaces(max_depth=1) == [("a",), ("admin",), ("b",), ("users",)]
    assert len(store.list_namespaces()) == 9


def test_list_namespaces_pagination(store: UsermemStore):
    _fill(store, [("namespace", f"sub_{i:02d}") for i in range(20)])
    assert store.list_namespaces(prefix=("namespace",), limit=5, offset=5) == [
        ("namespace", f"sub_{i:02d}") for i in range(5, 10)]
    assert store.list_namespaces(prefix=("namespace",), limit=5, offset=15) == [
        ("namespace", f"sub_{i:02d}") for i in range(15, 20)]


def test_batch_returns_results_in_order_and_async_calls_agree(store: UsermemStore):
    out = store.batch([PutOp(("u1", "docs"), "a", {"v": 1}), GetOp(("u1", "docs"), "a"),
                       SearchOp(("u1",), filter={"v": 1}), ListNamespacesOp(), GetOp(("u1", "docs"), "zz")])
    assert out[0] is None and out[1].value == {"v": 1}  # type: ignore[union-attr]
    assert [i.key for i in out[2]] == ["a"] and out[3] == [("u1", "docs")] and out[4] is None  # type: ignore[union-attr]

    async def go():
        await asyncio.gather(store.aput(("u1", "docs"), "same", {"value": "same"}),
                             store.aput(("u1", "docs"), "different", {"value": "different"}))
        return await asyncio.gather(store.aget(("u1", "docs"), "same"), store.aget(("u1", "docs"), "same"),
                                    store.aget(("u1", "docs"), "different"),
                                    store.asearch(("u1", "docs"), filter={"value": "different"}),
                                    store.alist_namespaces(prefix=("u1",)))

    same, same2, diff, found, spaces = asyncio.run(go())
    assert same == same2 and same != diff and diff.value == {"value": "different"}
    assert [i.key for i in found] == ["different"] and spaces == [("u1", "docs")]


def test_search_filters_operators_and_paging(store: UsermemStore, clock: Clock):
    for i in range(6):
        clock.t += 1
        store.put(("shop", "items"), f"i{i}", {"price": i * 10, "color": "red" if i % 2 else "blue",
                                               "meta": {"tier": "gold" if i > 3 else "basic"}})
    keys = lambda items: [i.key for i in items]  # noqa: E731
    assert keys(store.search(("shop",))) == ["i5", "i4", "i3", "i2", "i1", "i0"]  # newest first
    assert keys(store.search(("shop",), filter={"color": "red"})) == ["i5", "i3", "i1"]
    assert keys(store.search(("shop",), filter={"price": {"$gte": 20, "$lt": 50}})) == ["i4", "i3", "i2"]
    assert keys(store.search(("shop",), filter={"color": {"$ne": "red"}, "price": {"$gt": 0}})) == ["i4", "i2"]
    assert keys(store.search(("shop",), filter={"meta": {"tier": "gold"}})) == ["i5", "i4"]
    assert keys(store.search(("shop",), limit=2, offset=1)) == ["i4", "i3"]
    assert store.search(("shop", "other")) == [] and store.search(("nobody",)) == []
    with pytest.raises(ValidationError):
        store.search(("shop",), filter={"price": {"$regex": "x"}})


def test_query_search_is_hybrid_recall(store: UsermemStore):
    docs = {"doc1": "short text", "doc2": "longer text document about tea ceremonies",
            "doc3": "the user prefers green tea in the morning", "doc4": "bicycle repair notes"}
    for k, text in docs.items():
        store.put(("alice", "notes"), k, {"text": text})
    store.put(("bob", "notes"), "x", {"text": "green tea for bob"})
    hits = store.search(("alice",), query="green tea")
    assert hits and hits[0].key == "doc3" and hits[0].score is not None
    assert "x" not in [h.key for h in hits] and "doc4" not in [h.key for h in hits][:2]
    assert [h.key for h in store.search(("alice",), query="green tea", filter={"text": "bicycle repair notes"})] \
        in ([], ["doc4"])
    everyone = store.search((), query="green tea", limit=10)  # an empty prefix: every user's items
    assert {("alice", "doc3"), ("bob", "x")} <= {(h.namespace[0], h.key) for h in everyone}


def test_ttl_expires_and_reads_refresh(clock: Clock):
    m = fast_memory()
    store = UsermemStore(m, tenant="acme", clock=clock, ttl={"default_ttl": 10, "refresh_on_read": True})
    store.put(("u", "s"), "keep", {"v": 1})
    store.put(("u", "s"), "short", {"v": 2}, ttl=1)
    store.put(("u", "s"), "noread", {"v": 3}, ttl=9)
    clock.t += 4 * 60
    assert store.get(("u", "s"), "keep") is not None  # refreshed: expires 14 min after T0
    assert store.get(("u", "s"), "short") is None  # 1 minute TTL passed
    clock.t += 4 * 60  # T0 + 8 min
    assert store.get(("u", "s"), "noread", refresh_ttl=False) is not None
    clock.t += 2 * 60  # T0 + 10 min: noread (9 min, not refreshed) expired; keep (refreshed at +4) lives
    assert [i.key for i in store.search(("u",))] == ["keep"]
    assert store.list_namespaces() == [("u", "s")]
    clock.t += 11 * 60  # keep was refreshed by the search at +10: expires at +20
    assert store.sweep_ttl() == 2 and store.list_namespaces() == []
    assert m.recall("acme", "u", now=clock.t) == []  # expired items are forgotten in usermem too
    no_refresh = UsermemStore(m, tenant="acme", clock=clock, ttl={"refresh_on_read": False})
    no_refresh.put(("u", "s"), "k", {"v": 1}, ttl=2)
    clock.t += 60
    assert no_refresh.get(("u", "s"), "k") is not None
    clock.t += 61
    assert no_refresh.get(("u", "s"), "k") is None
    m.close()


def test_guards_native_layout_and_erasure(store: UsermemStore):
    m = store.memory
    with pytest.raises(ValidationError, match=r"sensitive_value|pii|personal"):
        store.put(("alice", "memories"), "card", {"text": "my card is 4111 1111 1111 1111"})
    assert store.get(("alice", "memories"), "card") is None and store.list_namespaces() == []
    # (user, kind) + a plain key is usermem's own memory: the same one Memory.recall and MCP see
    store.put(("alice", "preference"), "reply_length", {"style": "short"})
    assert [(r.kind.value, r.key, r.value) for r in m.recall("acme", "alice", now=store._clock())] == [
        ("preference", "reply_length", {"style": "short"})]
    store.put(("alice", "fact"), "city", {"name": "Lyon"})
    assert [r.value for r in m.history("acme", "alice", "city")] == [{"name": "Lyon"}]
    m.forget_user("acme", "alice", now=store._clock())
    assert store.list_namespaces() == [] and store.get(("alice", "fact"), "city") is None


def test_example_agent_remembers_across_turns(store: UsermemStore):
    import importlib.util
    from pathlib import Path

    from openai import OpenAI

    from fake_openai import FakeOpenAI, Reply

    path = Path(__file__).resolve().parent.parent / "examples" / "langgraph_agent.py"
    spec = importlib.util.spec_from_file_location("langgraph_agent", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with FakeOpenAI() as server:
        server.script(Reply(content="Noted!"), Reply(content="Green tea, as you like."),
                      Reply(content="I can't keep that."))
        agent = example.build_agent(store, OpenAI(base_url=server.base_url, api_key="test"), "fake-model")
        assert agent.invoke({"user_id": "alice", "message": "I love green tea"})["reply"] == "Noted!"
        out = agent.invoke({"user_id": "alice", "message": "what tea should I drink?"})
        assert out["reply"] == "Green tea, as you like." and out["memories"][0] == "I love green tea"
        system = server.chat_requests()[1]["messages"][0]["content"]
        assert "I love green tea" in system
        agent.invoke({"user_id": "alice", "message": "my card is 4111 1111 1111 1111"})
        assert server.chat_requests()[0]["messages"][0]["content"].endswith("(nothing yet)")
    texts = [i.value["text"] for i in store.search(("alice", "notes"), limit=10)]
    assert sorted(texts) == ["I love green tea", "what tea should I drink?"]  # the card number was refused


def test_query_search_follows_updates_filters_paging_and_index_false(store: UsermemStore):
    """Ported from LangGraph's vector-search checks: an update re-ranks, filters and paging apply to ranked
    results, a query that matches nothing still ranks the filtered items, `index=False` keeps an item out."""
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    first = store.search(("test",), query="Zany Xerxes")
    assert first[0].key == "doc1"
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = store.search(("test",), query="Zany Xerxes")
    assert next(r.score for r in after if r.key == "doc1") < first[0].score  # type: ignore[operator]
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert "doc4" not in [r.key for r in store.search(("test",), query="new text about dogs", limit=3)]
    assert "doc4" in [r.key for r in store.search(("test",), limit=10)]

    for key, value in [("a1", {"text": "red apple", "color": "red", "score": 4.5}),
                       ("a2", {"text": "red car", "color": "red", "score": 3.0}),
                       ("a3", {"text": "green apple", "color": "green", "score": 4.0}),
                       ("a4", {"text": "blue car", "color": "blue", "score": 3.5})]:
        store.put(("shop",), key, value)
    assert [r.key for r in store.search(("shop",), query="apple", filter={"color": "red"})] == ["a1", "a2"]
    assert [r.key for r in store.search(("shop",), query="car", filter={"color": "red"})] == ["a2", "a1"]
    assert len(store.search(("shop",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})) == 3
    assert [r.key for r in store.search(("shop",), query="apple",
                                        filter={"score": {"$gte": 4.0}, "color": "green"})] == ["a3"]
    page1 = store.search(("shop",), query="apple", limit=2)
    page2 = store.search(("shop",), query="apple", limit=2, offset=2)
    assert len(page1) == len(page2) == 2 and not {r.key for r in page1} & {r.key for r in page2}
    for q in ["", None, "test " * 100, "test!@#$%^&*()"]:
        assert len(store.search(("shop",), query=q)) == 4


def test_concurrent_async_calls_keep_their_order(store: UsermemStore):
    docs = [(f"doc{i}", {"text": f"item {i}", "index": i}) for i in range(12)]

    async def go():
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs],
                             *[store.adelete(("test",), k) for k, _ in docs],
                             *[store.aput(("test",), k, v) for k, v in docs])
        return await asyncio.gather(store.asearch(("test",), filter={"index": {"$gt": 5}}, limit=20),
                                    store.asearch(("test",), query="item 3", limit=20))

    above, ranked = asyncio.run(go())
    assert sorted(r.value["index"] for r in above) == list(range(6, 12))
    assert len(ranked) == 12


def test_source_priority_applies_to_native_keys(store: UsermemStore):
    store.memory.write("acme", "alice", "fact", "plan", "enterprise", source="system", now=T0)
    with pytest.raises(ValidationError, match="lower_priority_source"):
        store.put(("alice", "fact"), "plan", {"name": "free"})
    assert [r.value for r in store.memory.recall("acme", "alice", keys=["plan"], now=T0)] == ["enterprise"]
