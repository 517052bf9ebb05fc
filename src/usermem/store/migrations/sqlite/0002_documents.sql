-- Small JSON documents the engine keeps beside memories: sessions, contracts, grants, API keys,
-- pending verifications, onboarding state. One generic table so every backend implements it once.
CREATE TABLE documents (
    tenant     TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    user_id    TEXT,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    PRIMARY KEY (tenant, namespace, key)
);
CREATE INDEX documents_user ON documents (tenant, user_id) WHERE user_id IS NOT NULL;
CREATE INDEX documents_ns_user ON documents (tenant, namespace, user_id);
