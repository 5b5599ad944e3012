-- `/lang` stores the user's language in their profile: profile entries gain the kind
-- 'language' (SQLite cannot change a CHECK constraint: the table is rebuilt).
CREATE TABLE profile_entries_new (
    id         INTEGER PRIMARY KEY,
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('goal', 'interest', 'book_wish', 'other', 'language')),
    text       TEXT    NOT NULL,
    created_ms INTEGER NOT NULL
);
INSERT INTO profile_entries_new (id, platform, user_id, kind, text, created_ms)
    SELECT id, platform, user_id, kind, text, created_ms FROM profile_entries;
DROP TABLE profile_entries;
ALTER TABLE profile_entries_new RENAME TO profile_entries;
CREATE INDEX profile_by_user ON profile_entries (platform, user_id);
