-- usermem PostgreSQL schema, version 1. Same semantics as the SQLite schema; the tenant leads every
-- primary key and unique index so the tables can be distributed by tenant (docs/scaling.md).
CREATE TABLE memories (
    tenant            text NOT NULL,
    id                text NOT NULL,
    seq               bigserial NOT NULL,
    user_id           text NOT NULL,
    kind              text NOT NULL,
    key               text NOT NULL,
    -- The value as JSONB; value_raw (UTF-8 JSON) only for the rare value JSONB cannot hold exactly
    -- (NUL characters in strings, floats JSONB would print back as integers). Exactly one is set.
    value             jsonb,
    value_raw         bytea,
    source            text NOT NULL,
    confidence        double precision NOT NULL,
    importance        double precision NOT NULL,
    created_at        double precision NOT NULL,
    expires_at        double precision,
    last_used_at      double precision,
    last_confirmed_at double precision,
    prev_version_id   text,
    superseded_by     text,
    superseded_at     double precision,
    deleted_at        double precision,
    session_id        text,
    client_id         text,
    event_at          double precision,
    change_set_id     text,
    actor             text,
    retracted         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, id),
    CHECK ((value IS NULL) <> (value_raw IS NULL)),
    CHECK (confidence BETWEEN 0 AND 1),
    CHECK (importance BETWEEN 0 AND 1),
    CHECK (superseded_by IS NULL OR superseded_by <> id)
);

-- "At most one current version per key" is the database's invariant too: a bug or a race that
-- tries to fork a version chain fails here.
CREATE UNIQUE INDEX memories_one_current
    ON memories (tenant, user_id, key)
    WHERE superseded_by IS NULL AND deleted_at IS NULL;

CREATE INDEX memories_history ON memories (tenant, user_id, key, seq);
CREATE INDEX memories_deleted ON memories (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memories_change_set ON memories (tenant, change_set_id, seq) WHERE change_set_id IS NOT NULL;
-- The recall hot path scores a user's current rows on these columns (index-only scans when the
-- visibility map allows); full records are fetched by primary key for the top k only.
CREATE INDEX memories_live_scoring
    ON memories (tenant, user_id)
    INCLUDE (id, kind, key, confidence, importance, created_at, last_used_at, last_confirmed_at,
             expires_at, retracted, session_id)
    WHERE superseded_by IS NULL AND deleted_at IS NULL;

CREATE TABLE audit (
    tenant    text NOT NULL,
    seq       bigserial NOT NULL,
    at        double precision NOT NULL,
    action    text NOT NULL,
    user_id   text,
    key       text,
    memory_id text,
    op        text,
    reason    text,
    actor     text,
    detail    jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, seq)
);
CREATE INDEX audit_tenant_at ON audit (tenant, at);
CREATE INDEX audit_tenant_user ON audit (tenant, user_id, seq);

-- Append-only: the log of what happened cannot be edited, deleted or truncated through SQL.
CREATE FUNCTION usermem_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit log is append-only' USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION usermem_audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION usermem_audit_append_only();
