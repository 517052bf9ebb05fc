"""`usermem.Client` has the shape of `usermem.Memory`: every public method, with the same parameters.
A method added to Memory fails this test until it is exposed or the catalogue says why it is not
(`usermem.interfaces.catalog`: IN_PROCESS members, operations without an HTTP binding)."""

from __future__ import annotations

import inspect

import usermem
from usermem.interfaces.catalog import IN_PROCESS, OPERATIONS

NOT_REMOTE = dict(IN_PROCESS) | {n: op.no_http or "" for n, op in OPERATIONS.items() if op.http is None}


def _public(cls: type) -> dict[str, object]:
    return {n: v for n, v in inspect.getmembers(cls) if not n.startswith("_")}


def test_client_has_every_memory_method():
    missing = sorted(set(_public(usermem.Memory)) - set(_public(usermem.Client)) - set(NOT_REMOTE))
    assert missing == [], f"expose these through the API and Client (or justify in the catalogue): {missing}"
    assert all(reason.strip() for reason in NOT_REMOTE.values())


def test_same_parameters_in_the_same_order():
    for name, fn in _public(usermem.Memory).items():
        if name in NOT_REMOTE or not callable(fn):
            continue
        ours = inspect.signature(getattr(usermem.Client, name))
        theirs = inspect.signature(fn)
        assert list(ours.parameters) == list(theirs.parameters), name
        for p_name, p in theirs.parameters.items():
            q = ours.parameters[p_name]
            assert q.kind == p.kind, (name, p_name)
            if p.default is not inspect.Parameter.empty:
                assert q.default == p.default, (name, p_name, q.default, p.default)
