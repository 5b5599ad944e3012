-- Decisions on applications, made from the admin chat: the first one stands (what, who,
-- when); kept or deleted with the submission.
ALTER TABLE submissions ADD COLUMN decision TEXT;
ALTER TABLE submissions ADD COLUMN decided_by TEXT;
ALTER TABLE submissions ADD COLUMN decided_ms BIGINT;
