-- Kaiwa's base schema: users, sessions, transcripts, processed platform updates and the
-- llm_calls ledger. Times are Unix milliseconds (UTC).

CREATE TABLE users (
    platform      TEXT    NOT NULL,
    user_id       TEXT    NOT NULL,
    display_name  TEXT    NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
);

CREATE TABLE sessions (
    id              INTEGER PRIMARY KEY,
    platform        TEXT    NOT NULL,
    chat            TEXT    NOT NULL,
    thread          TEXT    NOT NULL DEFAULT '',
    user_id         TEXT    NOT NULL,
    flow            TEXT    NOT NULL,
    current_agent   TEXT,
    language        TEXT,
    country         TEXT,
    timezone        TEXT,
    state           TEXT    NOT NULL DEFAULT '{}',
    pending_options TEXT,
    status          TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'finished')),
    version         INTEGER NOT NULL DEFAULT 0,
    created_ms      INTEGER NOT NULL,
    updated_ms      INTEGER NOT NULL,
    FOREIGN KEY (platform, user_id) REFERENCES users (platform, user_id) ON DELETE CASCADE
);
-- one active session per place (platform + chat + thread + user)
CREATE UNIQUE INDEX sessions_one_active ON sessions (platform, chat, thread, user_id) WHERE status = 'active';
CREATE INDEX sessions_by_user ON sessions (platform, user_id);

CREATE TABLE messages (
    id         INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    role       TEXT    NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    text       TEXT    NOT NULL,
    delivered  INTEGER NOT NULL DEFAULT 1,
    created_ms INTEGER NOT NULL
);
CREATE INDEX messages_by_session ON messages (session_id, id);
CREATE INDEX messages_undelivered ON messages (session_id, id) WHERE delivered = 0;

CREATE TABLE processed_updates (
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    session_id INTEGER REFERENCES sessions (id) ON DELETE SET NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, chat, message_id)
);

CREATE TABLE llm_calls (
    id                INTEGER PRIMARY KEY,
    session_id        INTEGER REFERENCES sessions (id) ON DELETE SET NULL,
    agent             TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms        INTEGER NOT NULL,
    error             TEXT,
    created_ms        INTEGER NOT NULL
);
CREATE INDEX llm_calls_by_session ON llm_calls (session_id);
CREATE INDEX llm_calls_by_agent ON llm_calls (agent, created_ms);
