-- A model call's and a processed update's `session_id` only point at the session they came
-- from (when it is deleted they were set to NULL). Their foreign keys cost every turn a
-- check per row (a lookup and a lock of the session's row, about three a turn; measured
-- in docs/performance.md). `/forget` now sets them to NULL itself, before it deletes the
-- sessions, and `kaiwa db copy` reads a pointer to a session that is not there as NULL.
-- The messages keep theirs (deleted with their session).
ALTER TABLE llm_calls DROP CONSTRAINT IF EXISTS llm_calls_session_id_fkey;
ALTER TABLE processed_updates DROP CONSTRAINT IF EXISTS processed_updates_session_id_fkey;
