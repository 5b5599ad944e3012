-- A writer's batch is one statement (core/src/store/postgres/batch.rs). When one of its
-- turns is refused (a session another instance moved on, an update already processed),
-- the statement's last clause calls this function: the error undoes the whole statement,
-- and the writer writes the same turns one by one to find the refused one.
CREATE FUNCTION kaiwa_batch_refused() RETURNS BIGINT[]
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'a turn of the batch was refused' USING ERRCODE = 'KWB01';
END
$$;
