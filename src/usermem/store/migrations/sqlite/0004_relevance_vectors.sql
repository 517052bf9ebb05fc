-- Relevance vectors (relevance/vectors.py): one row per current (tenant, user, key) with the memory's
-- float32 vector, the embedding model, its kind, its event time and its index terms (tokenised memory
-- text, so erasure deletes these rows with the memory). `relevance_generation` counts changes per user
-- so each process can cache a user's matrix and notice when it is stale.
-- IF NOT EXISTS: databases from before this migration may already hold the tables (they were created
-- by the vector index itself); their rows are kept.
CREATE TABLE IF NOT EXISTS relevance_vectors (
    tenant    TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    key       TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    kind      TEXT NOT NULL,
    at        REAL NOT NULL,
    model     TEXT NOT NULL,
    dim       INTEGER NOT NULL,
    vec       BLOB NOT NULL,
    tokens    TEXT NOT NULL,
    PRIMARY KEY (tenant, user_id, key)
);
CREATE INDEX IF NOT EXISTS relevance_vectors_memory ON relevance_vectors (memory_id);
CREATE TABLE IF NOT EXISTS relevance_generation (
    tenant  TEXT NOT NULL,
    user_id TEXT NOT NULL,
    gen     INTEGER NOT NULL,
    PRIMARY KEY (tenant, user_id)
);
