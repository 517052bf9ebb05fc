"""`usermem.Client` has the shape of `usermem.Memory`: every public method, with the same parameters.
A method added to Memory fails this test until it is exposed (or listed below with the reason)."""

from __future__ import annotations

import inspect

import usermem

# In-process only: hooks, callables and objects that cannot cross HTTP, or operator-wide actions.
NOT_REMOTE = {
    "store": "the storage backend object",
    "contracts": "the in-process ContractSet (remote: contracts_list/contract)",
    "contracts_for": "returns an in-process ContractSet (remote: contracts_list)",
    "subscribe": "in-process change listener",
    "on_session_closed": "in-process close hook",
    "register_resolver": "registers a Python callable",
    "understanding": "the in-process pipelines object",
    "flush": "waits for this process's indexer",
    "expire_idle_sessions": "operator job across the tenant (run it beside the server)",
    "touch_session": "remote: adding messages counts as activity",
    "extract": "stateless helper; remote: ingest",
    "on_remote_change": "in-process callback; remote processes subscribe to NATS (usermem.events.EventBus)",
    "events": "this process's event-bus state (docs/events.md)",
}


def _public(cls: type) -> dict[str, object]:
    return {n: v for n, v in inspect.getmembers(cls) if not n.startswith("_")}


def test_client_has_every_memory_method():
    missing = sorted(set(_public(usermem.Memory)) - set(_public(usermem.Client)) - set(NOT_REMOTE))
    assert missing == [], f"expose these through the API and Client (or justify in NOT_REMOTE): {missing}"


def test_same_parameters_in_the_same_order():
    for name, fn in _public(usermem.Memory).items():
        if name in NOT_REMOTE or not callable(fn) or name in ("close",):
            continue
        ours = inspect.signature(getattr(usermem.Client, name))
        theirs = inspect.signature(fn)
        assert list(ours.parameters) == list(theirs.parameters), name
        for p_name, p in theirs.parameters.items():
            q = ours.parameters[p_name]
            assert q.kind == p.kind, (name, p_name)
            if p.default is not inspect.Parameter.empty:
                assert q.default == p.default, (name, p_name, q.default, p.default)
