-- Issue 17 (federation). Three small tables beside the memories; no business rules, the engine decides.
-- outbox: change events written in the same transaction as the change they announce, removed once the
--   event bus acknowledged them (events/relay.py). `payload` is the event's JSON (events/payload.py).
-- applied_events: the remote events this store applied (exactly once, by event id: the insert is part of
--   the apply's own transaction). No user id and no value.
-- version_clock: the hybrid-logical-clock stamp of each version written while federation is on (local or
--   applied from another domain): the order conflicts are decided by (policy/hlc.py). No user id, no value.
CREATE TABLE outbox (
    tenant     text NOT NULL,
    seq        bigserial NOT NULL,
    event_id   text NOT NULL,
    user_id    text NOT NULL,
    subject    text NOT NULL,
    payload    text NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant, seq),   -- tenant leads every key (tests/test_postgres_store.py); seq is global
    UNIQUE (tenant, event_id)
);
CREATE INDEX outbox_user ON outbox (tenant, user_id);
CREATE INDEX outbox_order ON outbox (seq);
CREATE TABLE applied_events (
    tenant     text NOT NULL,
    event_id   text NOT NULL,
    applied_at double precision NOT NULL,
    PRIMARY KEY (tenant, event_id)
);
CREATE TABLE version_clock (
    tenant    text NOT NULL,
    memory_id text NOT NULL,
    hlc       text NOT NULL,
    client_id text NOT NULL,
    origin    text NOT NULL,
    event_id  text NOT NULL,
    PRIMARY KEY (tenant, memory_id)
);
CREATE POLICY tenant_isolation ON outbox
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
CREATE POLICY tenant_isolation ON applied_events
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
CREATE POLICY tenant_isolation ON version_clock
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
