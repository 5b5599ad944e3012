-- Every turn's commit writes each B-tree page it touches to the WAL; measured under load
-- (kaiwa bench) a commit wrote 8.6 pages, and every ~10,000 of them the WAL must be
-- restarted, which pauses the writer. Two B-trees nobody needs on the hot path go:

-- the ledger is summed over all rows (`kaiwa stats`), never looked up by agent: the index
-- cost two pages per commit (one per agent a turn called)
DROP INDEX IF EXISTS llm_calls_by_agent;

-- a processed update is only ever looked up by its key: one B-tree (WITHOUT ROWID) instead
-- of a table and the index of its primary key
CREATE TABLE processed_updates_by_key (
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    session_id INTEGER REFERENCES sessions (id) ON DELETE SET NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, chat, message_id)
) WITHOUT ROWID;
INSERT INTO processed_updates_by_key (platform, chat, message_id, session_id, created_ms)
    SELECT platform, chat, message_id, session_id, created_ms FROM processed_updates;
DROP TABLE processed_updates;
ALTER TABLE processed_updates_by_key RENAME TO processed_updates;
