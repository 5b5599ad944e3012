-- Replies committed but not delivered when the bot stopped are sent at the next start
-- ([`Store::unreached_sessions`]): a turn whose inbox entry never got written (it committed
-- with its turn) leaves nothing else that points at them. Keyed by the message id alone,
-- the entries a batch adds (its assistant messages) and those its delivery marks take out
-- again lie on the index's last page or two, instead of a page per session.
CREATE INDEX messages_undelivered ON messages (id) WHERE delivered = 0;
