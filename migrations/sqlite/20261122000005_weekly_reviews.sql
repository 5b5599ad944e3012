-- Opt-in weekly mentor reviews that the bot sends by itself: one row per user, the place
-- to send to, and the user's time zone (reviews go out on Sunday evening, local time).
CREATE TABLE weekly_reviews (
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    thread     TEXT    NOT NULL DEFAULT '',
    timezone   TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
);
