-- usermem: requires extension vector
-- Relevance vectors (relevance/vectors.py), applied only where the pgvector extension is installed or
-- can be installed (the migrator creates it, in schema public, when the role may). Without it this
-- migration stays pending, is retried at every start, and recall is lexical only. Later migrations
-- never depend on this one. @extschema:vector@ is replaced by the extension's (quoted) schema.
--
-- One row per current (tenant, user, key): the memory's vector, the embedding model, its kind, its
-- event time and its index terms (tokenised memory text, so the rows fall under the same row-level
-- security as the memories and erasure deletes them with the memory). `relevance_generation` counts
-- changes per user so each process can cache a user's index and notice when it is stale.
-- IF NOT EXISTS: databases from before this migration may already hold the tables (the vector index
-- created them itself); their rows are kept.
CREATE TABLE IF NOT EXISTS relevance_vectors (
    tenant    text NOT NULL,
    user_id   text NOT NULL,
    key       text NOT NULL,
    memory_id text NOT NULL,
    kind      text NOT NULL,
    at        double precision NOT NULL,
    model     text NOT NULL,
    dim       integer NOT NULL,
    vec       @extschema:vector@.vector NOT NULL,
    tokens    text NOT NULL,
    PRIMARY KEY (tenant, user_id, key)
);
CREATE INDEX IF NOT EXISTS relevance_vectors_memory ON relevance_vectors (memory_id);
CREATE TABLE IF NOT EXISTS relevance_generation (
    tenant  text NOT NULL,
    user_id text NOT NULL,
    gen     bigint NOT NULL,
    PRIMARY KEY (tenant, user_id)
);
-- Row-level security like the other tables (0003): effective with ?rls=on.
CREATE POLICY tenant_isolation ON relevance_vectors
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
CREATE POLICY tenant_isolation ON relevance_generation
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
