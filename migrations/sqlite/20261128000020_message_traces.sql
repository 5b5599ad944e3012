-- Why a turn answered as it did: its trace (JSON, a few KB), on the turn's first bot
-- message, so that retention and /forget delete it with the transcript.
ALTER TABLE messages ADD COLUMN trace TEXT;
