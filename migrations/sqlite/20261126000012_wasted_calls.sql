-- A model call whose answer was not used: a speculative draft of the next interview
-- question dropped because the Reviewer asked for a follow-up (cancelled on the server or
-- finished unused). `kaiwa stats` counts them per agent.
ALTER TABLE llm_calls ADD COLUMN wasted INTEGER NOT NULL DEFAULT 0;
