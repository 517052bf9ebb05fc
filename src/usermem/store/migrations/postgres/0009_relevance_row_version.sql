-- usermem: requires extension vector
-- Issue 19: a version per relevance_vectors row (like SQLite's migration 0009), so a process rebuilding a
-- user's snapshot after a write reads only the rows written since its stale snapshot (relevance/vectors.py,
-- PgVectorIndex._delta) instead of every row's metadata and index terms. Optional like 0004, whose table it
-- alters: applied where 0004 was (or in the same start, right after it).
--
-- The vector index bumps relevance_generation first (taking the user's generation row lock until commit)
-- and sets `ver` to the bumped generation with every insert or update, so versions are handed out in commit
-- order per user: a row committed after a snapshot was read has a version above all of that snapshot's.
-- Rows from before this migration read 0 (ADD COLUMN with a constant default rewrites no row on PostgreSQL
-- 11+); the default is dropped right after, so a row inserted by a writer that does not set `ver` (a process
-- still running an earlier release, a hand-made statement) is NULL: unversioned, read again at every
-- rebuild, never reused. The trigger unversions a row updated without a new version the same way.
ALTER TABLE relevance_vectors ADD COLUMN IF NOT EXISTS ver bigint DEFAULT 0;
ALTER TABLE relevance_vectors ALTER COLUMN ver DROP DEFAULT;
-- The rebuild's reads: the rows above a version (and the unversioned ones), the count of those at or below.
CREATE INDEX IF NOT EXISTS relevance_vectors_version ON relevance_vectors (tenant, user_id, ver);
CREATE OR REPLACE FUNCTION relevance_vectors_unversion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ver IS NOT DISTINCT FROM OLD.ver THEN
        NEW.ver := NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER relevance_vectors_unversioned BEFORE UPDATE OF memory_id, kind, at, model, dim, vec, tokens
    ON relevance_vectors FOR EACH ROW EXECUTE FUNCTION relevance_vectors_unversion();
