"""The shared SQL vocabulary (store/sql.py): both dialects bind exactly the parameters they mark, and the
live filter's cached SQL is the same text as a freshly built one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from usermem.model import Kind
from usermem.store.base import AuditQuery, LiveQuery
from usermem.store.sql import POSTGRES, SQLITE, SqlDialect, _live_sql

DIALECTS = [SQLITE, POSTGRES]


def _marks(d: SqlDialect, text: str) -> int:
    return text.count(d.mark)


@pytest.mark.parametrize("d", DIALECTS, ids=lambda d: d.name)
@given(kinds=st.none() | st.lists(st.sampled_from(list(Kind)), max_size=5),
       keys=st.none() | st.lists(st.text(min_size=1, max_size=5), max_size=6),
       session=st.none() | st.just("s1"), retracted=st.booleans())
def test_live_filter_binds_what_it_marks(d, kinds, keys, session, retracted):
    q = LiveQuery("t", "u", 1.0, kinds=kinds, keys=keys, session_id=session, include_retracted=retracted)
    for scores in (False, True):
        text, args = d.live(q, scores=scores)
        assert _marks(d, text) == len(args)
        assert ("retracted" in text.split("WHERE", 1)[1]) != retracted
        uncached = _live_sql.__wrapped__(d, scores, retracted, None if kinds is None else len(kinds),
                                         None if keys is None else len(keys), session is not None)
        assert text == uncached


@pytest.mark.parametrize("d", DIALECTS, ids=lambda d: d.name)
def test_builders_bind_what_they_mark(d):
    where, args = d.soft_delete_where("t", "u", ["a", "b"], 1.0, 2.0)
    assert _marks(d, where) == len(args)
    where, args = d.soft_delete_where("t", "u", None, None, None)
    assert _marks(d, where) == len(args) == 2
    text, args = d.audit_log(AuditQuery("t", user_id="u", action="write", since=0.0, until=1.0, after_seq=3))
    assert _marks(d, text) == len(args) == 7
    text, args = d.list_docs("t", "ns", "u", 5.0, 10)
    assert _marks(d, text) == len(args) == 5
    assert _marks(d, d.touch("last_used_at", None if d.list_param else 3)) == (5 if d.list_param else 6)
    with pytest.raises(ValueError):
        d.touch("deleted_at", 1)


def test_fixed_statements_differ_only_where_the_dialects_do():
    n_columns = {"sqlite": 24, "postgres": 25}  # PostgreSQL adds value_raw
    for d in DIALECTS:
        assert _marks(d, d.stmt["insert"]) == len(d.columns) == n_columns[d.name]
        assert _marks(d, d.stmt["put_doc"]) == len(d.value_columns) + 6
        assert _marks(d, d.stmt["insert_audit"]) == 10
    assert SQLITE.stmt["head"].replace("?", "%s") == POSTGRES.stmt["head"].replace(", value_raw", "")
    assert POSTGRES.stmt["supersede"].endswith("RETURNING id") and "RETURNING" not in SQLITE.stmt["supersede"]
    assert 'COLLATE "C"' in POSTGRES.stmt["users"] and "COLLATE" not in SQLITE.stmt["users"]
