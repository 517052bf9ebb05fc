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
-- Erasures: every DELETE of relevance_vectors rows (erase, drop_orphans, a hand-made statement, a process of
-- an earlier release) marks the users it touched with `erased`, a generation no snapshot read before the
-- delete committed can have reached (the generation at the delete + 1, taken under the generation row's
-- lock). A rebuild from a snapshot of a generation at or above it skips the count of the rows it keeps.
ALTER TABLE relevance_generation ADD COLUMN IF NOT EXISTS erased bigint NOT NULL DEFAULT 0;
CREATE OR REPLACE FUNCTION relevance_vectors_erased() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE relevance_generation g SET erased = greatest(g.erased, g.gen + 1)
        FROM (SELECT DISTINCT tenant, user_id FROM gone) d WHERE g.tenant = d.tenant AND g.user_id = d.user_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER relevance_vectors_erasure AFTER DELETE ON relevance_vectors REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION relevance_vectors_erased();
