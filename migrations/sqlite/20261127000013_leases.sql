-- Leases: which instance holds a piece of work that only one may do at a time (the
-- Telegram poller, the scheduled jobs, a chat's turns). A lease is held until
-- `expires_ms`; its holder renews it while it works, and another instance may take it
-- once it has expired (the holder died).
CREATE TABLE leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
