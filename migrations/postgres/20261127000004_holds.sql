-- A person from the team holding a conversation (taken over from the admin chat): while a
-- row is here the agent does not answer at the user's place, and what is said there is
-- relayed. `last_ms`: the person's last message (an idle hold is handed back).
CREATE TABLE holds (
    session_id   BIGINT NOT NULL PRIMARY KEY,
    platform     TEXT    NOT NULL,
    chat         TEXT    NOT NULL,
    thread       TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    held_by      TEXT    NOT NULL,
    taken_ms     BIGINT  NOT NULL,
    last_ms      BIGINT  NOT NULL
);
CREATE UNIQUE INDEX holds_by_place ON holds (platform, chat, thread, user_id);

-- Messages in an admin place that stand for a session (a notice, a relayed message): a
-- person's reply to one reaches that session's user. Ids only, no text.
CREATE TABLE relays (
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    session_id BIGINT  NOT NULL,
    created_ms BIGINT  NOT NULL,
    PRIMARY KEY (platform, chat, message_id)
);
CREATE INDEX relays_by_session ON relays (session_id, created_ms);
