-- usermem embedded schema, version 1.
CREATE TABLE memories (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    id                TEXT NOT NULL UNIQUE,
    tenant            TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    kind              TEXT NOT NULL,
    key               TEXT NOT NULL,
    value             TEXT NOT NULL,
    source            TEXT NOT NULL,
    confidence        REAL NOT NULL,
    importance        REAL NOT NULL,
    created_at        REAL NOT NULL,
    expires_at        REAL,
    last_used_at      REAL,
    last_confirmed_at REAL,
    prev_version_id   TEXT,
    superseded_by     TEXT,
    superseded_at     REAL,
    deleted_at        REAL,
    session_id        TEXT,
    client_id         TEXT,
    event_at          REAL,
    change_set_id     TEXT,
    actor             TEXT,
    retracted         INTEGER NOT NULL DEFAULT 0,
    CHECK (confidence BETWEEN 0 AND 1),
    CHECK (importance BETWEEN 0 AND 1),
    CHECK (superseded_by IS NULL OR superseded_by <> id)
);

-- The invariant "at most one current version per key" is the database's, not only the code's:
-- a bug or a race that tries to fork a chain fails loudly here.
CREATE UNIQUE INDEX memories_one_current
    ON memories (tenant, user_id, key)
    WHERE superseded_by IS NULL AND deleted_at IS NULL;

CREATE INDEX memories_history ON memories (tenant, user_id, key, seq);
CREATE INDEX memories_deleted ON memories (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memories_change_set ON memories (tenant, change_set_id) WHERE change_set_id IS NOT NULL;

CREATE TABLE audit (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant    TEXT NOT NULL,
    at        REAL NOT NULL,
    action    TEXT NOT NULL,
    user_id   TEXT,
    key       TEXT,
    memory_id TEXT,
    op        TEXT,
    reason    TEXT,
    actor     TEXT,
    detail    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_tenant_at ON audit (tenant, at);
CREATE INDEX audit_tenant_user ON audit (tenant, user_id, seq);

-- Append-only: the log of what happened cannot be edited through SQL.
CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
CREATE TRIGGER audit_append_only_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
