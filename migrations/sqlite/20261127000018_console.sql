-- The browser console (`[console] listen`). A sign-in link an admin asked for with
-- /console: only a SHA-256 of its token is kept, it lasts ten minutes and works once
-- (`used_ms`). A signed-in browser's session: again only the hash of the cookie, the
-- CSRF token its forms carry, and the admin list it was opened under (`admins`: a
-- fingerprint; another list ends it).
CREATE TABLE console_links (
    token_hash TEXT    NOT NULL PRIMARY KEY,
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL,
    used_ms    INTEGER
);

CREATE TABLE console_sessions (
    token_hash TEXT    NOT NULL PRIMARY KEY,
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    csrf       TEXT    NOT NULL,
    admins     TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL
);

CREATE INDEX tickets_by_time ON helpdesk_tickets (created_ms);

-- A ticket whose user asked for a person is handled once someone takes the conversation
-- over (the console's list of open handoffs leaves it out from then on).
ALTER TABLE helpdesk_tickets ADD COLUMN handled_ms INTEGER;
