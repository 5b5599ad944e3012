-- Reading companion: records per user and book, insights, moods, profile entries,
-- mentor feedback and recommendations.
CREATE TABLE reading_records (
    id               INTEGER PRIMARY KEY,
    platform         TEXT    NOT NULL,
    user_id          TEXT    NOT NULL,
    title            TEXT    NOT NULL,
    author           TEXT,
    status           TEXT    NOT NULL DEFAULT 'not_started' CHECK (status IN ('not_started', 'reading', 'completed')),
    interaction_mode TEXT    NOT NULL DEFAULT 'freeform' CHECK (interaction_mode IN ('freeform', 'guided')),
    started_ms       INTEGER,
    finished_ms      INTEGER,
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL,
    UNIQUE (platform, user_id, title)
);

CREATE TABLE insights (
    id         INTEGER PRIMARY KEY,
    record_id  INTEGER NOT NULL REFERENCES reading_records (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL CHECK (kind IN ('learning', 'impression', 'question', 'connection')),
    text       TEXT    NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX insights_by_record ON insights (record_id, created_ms);

CREATE TABLE moods (
    id         INTEGER PRIMARY KEY,
    record_id  INTEGER NOT NULL REFERENCES reading_records (id) ON DELETE CASCADE,
    phase      TEXT    NOT NULL CHECK (phase IN ('before', 'after')),
    label      TEXT    NOT NULL,
    score      INTEGER NOT NULL CHECK (score BETWEEN 1 AND 5),
    created_ms INTEGER NOT NULL
);

CREATE TABLE profile_entries (
    id         INTEGER PRIMARY KEY,
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('goal', 'interest', 'book_wish', 'other')),
    text       TEXT    NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX profile_by_user ON profile_entries (platform, user_id);

CREATE TABLE mentor_feedback (
    id            INTEGER PRIMARY KEY,
    platform      TEXT    NOT NULL,
    user_id       TEXT    NOT NULL,
    feedback_type TEXT    NOT NULL CHECK (feedback_type IN ('weekly', 'monthly')),
    content       TEXT    NOT NULL,
    created_ms    INTEGER NOT NULL
);

CREATE TABLE recommendations (
    id         INTEGER PRIMARY KEY,
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    title      TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    created_ms INTEGER NOT NULL
);
