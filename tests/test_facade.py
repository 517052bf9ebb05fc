"""The `Memory` facade: settings from the environment, forget_range bounds, and the composition root's wiring."""

from __future__ import annotations

import pytest

from usermem import Memory
from usermem.config import load_settings
from usermem.errors import InvalidArgument, ValidationError
from usermem.model import Op

T0 = 1_790_000_000.0
DAY = 86_400.0


# -- forget_range needs a bound ------------------------------------------------------------------------------

def test_forget_range_without_a_bound_is_refused_and_erases_nothing(lean_mem):
    m = lean_mem
    m.write("acme", "u1", "fact", "city", "杭州", source="user_confirmed", now=T0)
    m.write("acme", "u1", "preference", "reply_length", "concise", source="user_confirmed", now=T0 + DAY)
    with pytest.raises(ValidationError) as info:
        m.forget_range("acme", "u1", now=T0 + 2 * DAY)
    assert info.value.field == "since"
    assert sorted(r.key for r in m.recall("acme", "u1", k=10, now=T0 + 2 * DAY)) == ["city", "reply_length"]
    # One bound is enough: everything written from T0 + DAY on.
    assert m.forget_range("acme", "u1", since=T0 + DAY, now=T0 + 2 * DAY) == 1
    assert [r.key for r in m.recall("acme", "u1", k=10, now=T0 + 2 * DAY)] == ["city"]


@pytest.mark.parametrize("bad", ["yesterday", float("nan"), float("inf"), True])
def test_forget_range_bounds_must_be_seconds(lean_mem, bad):
    lean_mem.write("acme", "u1", "fact", "city", "杭州", source="user_confirmed", now=T0)
    with pytest.raises((InvalidArgument, ValidationError), match="since"):
        lean_mem.forget_range("acme", "u1", since=bad, now=T0 + 1)
    assert [r.key for r in lean_mem.recall("acme", "u1", now=T0 + 1)] == ["city"]


# -- the environment -----------------------------------------------------------------------------------------

@pytest.fixture
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("USERMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("USERMEM_EMBEDDER", "none")  # keep these facades light
    return monkeypatch


def test_memory_honours_usermem_environment_variables(clean_env, tmp_path):
    clean_env.setenv("USERMEM_UNKNOWN_FIELDS", "reject")
    clean_env.setenv("USERMEM_STORE_URL", f"sqlite:///{tmp_path}/env.db")
    with Memory() as m:
        assert m.settings.unknown_fields == "reject" and m.settings.embedder == "none"
        assert m.write("acme", "u1", "preference", "some_unknown_key", "x", now=T0).op is Op.REJECT
        assert m.write("acme", "u1", "fact", "city", "杭州", source="user_confirmed", now=T0).op is Op.ADD
    assert (tmp_path / "env.db").exists()  # the store URL came from the environment
    with Memory() as again:  # same file: the memory is still there
        assert [r.value for r in again.recall("acme", "u1", now=T0)] == ["杭州"]


def test_explicit_arguments_win_over_the_environment(clean_env, tmp_path):
    clean_env.setenv("USERMEM_STORE_URL", f"sqlite:///{tmp_path}/env.db")
    clean_env.setenv("USERMEM_UNKNOWN_FIELDS", "reject")
    with Memory(f"sqlite:///{tmp_path}/explicit.db") as m:  # the URL argument wins; other settings from env
        assert m.settings.store_url.endswith("explicit.db") and m.settings.unknown_fields == "reject"
    with Memory(settings=load_settings(env={}, embedder="none")) as m:  # explicit settings: env not consulted
        assert m.settings.unknown_fields == "accept" and m.settings.store_url == "sqlite://"
    assert not (tmp_path / "env.db").exists()


def test_memory_without_a_url_stays_private_and_in_memory(clean_env):
    with Memory() as a, Memory() as b:
        assert a.settings.store_url == "sqlite://"
        a.write("acme", "u1", "fact", "city", "杭州", source="user_confirmed", now=T0)
        assert b.recall("acme", "u1", now=T0) == []  # each Memory() has its own in-memory database


def test_a_bad_environment_value_fails_with_the_setting_named(clean_env):
    from usermem.errors import ConfigError

    clean_env.setenv("USERMEM_MAX_BATCH", "many")
    with pytest.raises(ConfigError) as info:
        Memory()
    assert info.value.setting == "max_batch"


# -- wiring through the composition root ------------------------------------------------------------------------

def test_use_relevance_wires_and_unwires_the_plug_in(lean_mem):
    m = lean_mem
    assert m.relevance is None
    m.write("acme", "u1", "episode", "ep.refund", "用户申请退款，订单 A-17", source="user_confirmed", now=T0)
    m.write("acme", "u1", "episode", "ep.trip", "planned a trip to Kyoto", source="user_confirmed", now=T0)
    rel = m.use_relevance("hybrid")  # lexical only: the fixture's embedder is none
    assert rel is not None and m.relevance is rel and rel.embedder is None
    top = m.recall_scored("acme", "u1", k=1, query="Kyoto trip", now=T0 + 1)
    assert top[0].memory.key == "ep.trip" and top[0].relevance is not None
    assert m.use_relevance(None) is None and m.relevance is None
    assert m.recall_scored("acme", "u1", k=1, query="Kyoto trip", now=T0 + 1)[0].relevance is None


def test_the_session_close_hook_reaches_understanding(lean_mem):
    """compose() registers Understanding.on_session_closed: the transcript is extracted at close."""
    m = lean_mem
    sid = m.open_session("acme", "u1", now=T0)
    m.close_session(sid, [{"role": "user", "content": "我住在杭州，回复简短一点"}], now=T0 + 60)
    got = {r.key: r for r in m.recall("acme", "u1", k=10, now=T0 + 61)}
    assert got["city"].value == "杭州" and got["city"].source.value == "extracted"
