-- Under load one commit carries many turns, each adding a processed update. Keyed by chat
-- first, each of them landed on a page of its own (a WAL frame per turn in every commit, the
-- most of any table). Keyed by the update's id first, ids that grow with time as the
-- platforms give them (Telegram's update_id, Discord's snowflakes) all land on the last
-- page or two, whichever chat they come from. The inbox is keyed the same way.
CREATE TABLE processed_updates_by_id (
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    session_id INTEGER REFERENCES sessions (id) ON DELETE SET NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, message_id, chat)
) WITHOUT ROWID;
INSERT INTO processed_updates_by_id (platform, chat, message_id, session_id, created_ms)
    SELECT platform, chat, message_id, session_id, created_ms FROM processed_updates;
DROP TABLE processed_updates;
ALTER TABLE processed_updates_by_id RENAME TO processed_updates;

CREATE TABLE inbox_by_id (
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    incoming   TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, message_id, chat)
);
-- rowids kept: pending entries are replayed in (created_ms, rowid) order
INSERT INTO inbox_by_id (rowid, platform, chat, message_id, incoming, created_ms)
    SELECT rowid, platform, chat, message_id, incoming, created_ms FROM inbox;
DROP TABLE inbox;
ALTER TABLE inbox_by_id RENAME TO inbox;
