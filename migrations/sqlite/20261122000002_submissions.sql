-- Finished interviews: the values, facts, flags and audit of one applicant's form.
CREATE TABLE submissions (
    id           INTEGER PRIMARY KEY,
    session_id   INTEGER REFERENCES sessions (id) ON DELETE SET NULL,
    platform     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    applicant    TEXT    NOT NULL,
    form_id      TEXT    NOT NULL,
    variant      TEXT    NOT NULL,
    -- 'submitted' only when every required field is done; otherwise 'incomplete'
    status       TEXT    NOT NULL CHECK (status IN ('submitted', 'incomplete')),
    language     TEXT,
    country      TEXT,
    timezone     TEXT,
    field_values TEXT    NOT NULL,
    facts        TEXT    NOT NULL,
    flags        TEXT    NOT NULL,
    audit        TEXT,
    created_ms   INTEGER NOT NULL
);
CREATE INDEX submissions_by_form ON submissions (form_id, created_ms);
CREATE INDEX submissions_by_user ON submissions (platform, user_id);
