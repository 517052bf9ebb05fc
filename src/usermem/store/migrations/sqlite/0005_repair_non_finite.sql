-- Issue 12 item 1: repair rows written before non-finite and out-of-range numbers were refused
-- (`now`, `ttl_seconds`, `event_at`, `importance`, `confidence` accepted Infinity/NaN/1e308; from then on
-- every read of that user failed). Valid times lie in years 1-9999 (policy/validate.py). Fixes:
--   created_at, deleted_at, superseded_at → the repair time; expires_at +inf → NULL (never expires),
--   other bad expires_at → created_at (already expired); event_at, last_used_at, last_confirmed_at → NULL;
--   documents likewise (importance/confidence never held one: CHECK BETWEEN 0 AND 1); idle-index entries whose
--   deadline is not a number are dropped; audit times → the repair time. Every repaired memory gets an
--   audit entry (action `repair`). Idempotent: a clean database is left unchanged.
INSERT INTO audit (tenant, at, action, user_id, key, memory_id, detail)
    SELECT tenant, CAST(strftime('%s','now') AS REAL), 'repair', user_id, key, id, '{"repaired": "non_finite_numbers"}'
    FROM memories WHERE (created_at > 253402300799.0 OR created_at < -62135596800.0) OR (expires_at > 253402300799.0 OR expires_at < -62135596800.0) OR (deleted_at > 253402300799.0 OR deleted_at < -62135596800.0) OR (superseded_at > 253402300799.0 OR superseded_at < -62135596800.0) OR (event_at > 253402300799.0 OR event_at < -62135596800.0) OR (last_used_at > 253402300799.0 OR last_used_at < -62135596800.0) OR (last_confirmed_at > 253402300799.0 OR last_confirmed_at < -62135596800.0);
UPDATE memories SET created_at = CAST(strftime('%s','now') AS REAL) WHERE (created_at > 253402300799.0 OR created_at < -62135596800.0);
UPDATE memories SET expires_at = NULL WHERE expires_at > 253402300799.0;
UPDATE memories SET expires_at = created_at WHERE (expires_at > 253402300799.0 OR expires_at < -62135596800.0);
UPDATE memories SET deleted_at = CAST(strftime('%s','now') AS REAL) WHERE (deleted_at > 253402300799.0 OR deleted_at < -62135596800.0);
UPDATE memories SET superseded_at = CAST(strftime('%s','now') AS REAL) WHERE (superseded_at > 253402300799.0 OR superseded_at < -62135596800.0);
UPDATE memories SET event_at = NULL WHERE (event_at > 253402300799.0 OR event_at < -62135596800.0);
UPDATE memories SET last_used_at = NULL WHERE (last_used_at > 253402300799.0 OR last_used_at < -62135596800.0);
UPDATE memories SET last_confirmed_at = NULL WHERE (last_confirmed_at > 253402300799.0 OR last_confirmed_at < -62135596800.0);
UPDATE documents SET updated_at = CAST(strftime('%s','now') AS REAL) WHERE (updated_at > 253402300799.0 OR updated_at < -62135596800.0);
UPDATE documents SET expires_at = NULL WHERE expires_at > 253402300799.0;
UPDATE documents SET expires_at = updated_at WHERE (expires_at > 253402300799.0 OR expires_at < -62135596800.0);
DELETE FROM documents WHERE tenant = '*' AND namespace = 'session_idle'
    AND (key LIKE '%inf|%' OR key LIKE '%nan|%' OR key LIKE '-%');
DROP TRIGGER audit_append_only_update;
UPDATE audit SET at = CAST(strftime('%s','now') AS REAL) WHERE (at > 253402300799.0 OR at < -62135596800.0);
CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
