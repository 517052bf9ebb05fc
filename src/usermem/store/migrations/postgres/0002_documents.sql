-- Small JSON documents the engine keeps beside memories: sessions, contracts, grants, API keys,
-- pending verifications, onboarding state. One generic table so every backend implements it once.
CREATE TABLE documents (
    tenant     text NOT NULL,
    namespace  text NOT NULL,
    key        text NOT NULL,
    user_id    text,
    value      jsonb,
    value_raw  bytea,
    updated_at double precision NOT NULL,
    expires_at double precision,
    PRIMARY KEY (tenant, namespace, key),
    CHECK ((value IS NULL) <> (value_raw IS NULL))
);
CREATE INDEX documents_user ON documents (tenant, user_id) WHERE user_id IS NOT NULL;
CREATE INDEX documents_ns_user ON documents (tenant, namespace, user_id);
