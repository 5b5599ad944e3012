-- `messages_undelivered` cost every commit a page (each assistant message entered it, and
-- its delivery mark took it out again in the next batch), while the one query for
-- undelivered messages asks for one session's, which `messages_by_session` finds as well.
DROP INDEX IF EXISTS messages_undelivered;
