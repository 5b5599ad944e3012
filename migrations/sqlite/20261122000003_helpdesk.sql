-- Help-desk tickets: one per question answered in a session, with the plan, the
-- sub-answers, the final answer, its sources and the user's feedback.
CREATE TABLE helpdesk_tickets (
    id          INTEGER PRIMARY KEY,
    session_id  INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ticket_no   INTEGER NOT NULL,
    question    TEXT    NOT NULL,
    plan        TEXT    NOT NULL,
    sub_answers TEXT    NOT NULL,
    answer      TEXT    NOT NULL,
    sources     TEXT    NOT NULL,
    feedback    TEXT    CHECK (feedback IN ('solved', 'not_solved', 'human')),
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    UNIQUE (session_id, ticket_no)
);
