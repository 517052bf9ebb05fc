-- Issue 17 (federation). Three small tables beside the memories; no business rules, the engine decides.
-- outbox: change events written in the same transaction as the change they announce, removed once the
--   event bus acknowledged them (events/relay.py). `payload` is the event's JSON (events/payload.py).
-- applied_events: the remote events this store applied (exactly once, by event id: the insert is part of
--   the apply's own transaction). No user id and no value.
-- version_clock: the hybrid-logical-clock stamp of each version written while federation is on (local or
--   applied from another domain): the order conflicts are decided by (policy/hlc.py). No user id, no value.
CREATE TABLE outbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id   TEXT NOT NULL UNIQUE,
    tenant     TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX outbox_user ON outbox (tenant, user_id);
CREATE TABLE applied_events (
    tenant     TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    applied_at REAL NOT NULL,
    PRIMARY KEY (tenant, event_id)
);
CREATE TABLE version_clock (
    tenant    TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    hlc       TEXT NOT NULL,
    client_id TEXT NOT NULL,
    origin    TEXT NOT NULL,
    event_id  TEXT NOT NULL,
    PRIMARY KEY (tenant, memory_id)
);
