-- Messages an adapter received and has not finished handling: written before the turn,
-- removed after it. Left-over rows (the process died mid-turn) are handled again at the
-- next start; the processed_updates table keeps that from running a turn twice.
CREATE TABLE inbox (
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    incoming   TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, chat, message_id)
);
