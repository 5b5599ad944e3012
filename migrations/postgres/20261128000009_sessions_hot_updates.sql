-- Every turn rewrites its session's row. With room left in each page (fillfactor) and no
-- index on a column a turn changes, PostgreSQL writes the new row version in the same page
-- and no index entry at all (a heap-only tuple). `updated_ms` changes every turn, so its
-- index goes: retention and the admins' list of sessions read the table instead, which
-- they do rarely.
DROP INDEX IF EXISTS sessions_by_update;
ALTER TABLE sessions SET (fillfactor = 70);
