-- Issue 19: a version per relevance_vectors row, so a process rebuilding a user's snapshot after a write
-- reuses the vectors and index terms of rows that did not change and reads only the others
-- (relevance/vectors.py, SQLiteVectorIndex._build). The vector index sets `ver` to the user's next
-- generation (relevance_generation.gen + 1, bumped in the same transaction) with every insert or update.
-- Rows of a file from before this migration read 0 (ADD COLUMN with a default rewrites no row).
-- A writer that does not set `ver` (a process still running an earlier version, a hand-made statement)
-- leaves the row unversioned (NULL) through the triggers below: such a row is read again at every rebuild,
-- never reused.
-- The index serves the rebuild's reads: the rows above a version, the count and keys of those at or below.
ALTER TABLE relevance_vectors ADD COLUMN ver INTEGER DEFAULT 0;
CREATE INDEX relevance_vectors_version ON relevance_vectors (tenant, user_id, ver, key);
CREATE TRIGGER relevance_vectors_unversioned_insert AFTER INSERT ON relevance_vectors
WHEN NEW.ver IS NOT NULL AND NEW.ver <= 0
BEGIN
    UPDATE relevance_vectors SET ver = NULL WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER relevance_vectors_unversioned_update
AFTER UPDATE OF memory_id, kind, at, model, dim, vec, tokens ON relevance_vectors
WHEN NEW.ver IS NOT NULL AND NEW.ver IS OLD.ver
BEGIN
    UPDATE relevance_vectors SET ver = NULL WHERE rowid = NEW.rowid;
END;
