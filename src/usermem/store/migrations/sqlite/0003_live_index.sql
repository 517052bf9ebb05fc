-- Covering index for the recall hot path: scoring reads only these columns of a user's current
-- rows, so SQLite answers from the index without touching the table; the top k are fetched by id.
CREATE INDEX memories_live_scoring
    ON memories (tenant, user_id, kind, key, confidence, importance, created_at, last_used_at,
                 last_confirmed_at, expires_at, retracted, session_id, id)
    WHERE superseded_by IS NULL AND deleted_at IS NULL;
