-- Embeddings of knowledge-base passages, per embeddings model and passage text (SHA-256 of
-- the text embedded): a restart, another instance or an unchanged file costs no call.
-- `vector` holds little-endian f32s.
CREATE TABLE passage_vectors (
    model      TEXT   NOT NULL,
    text_hash  TEXT   NOT NULL,
    vector     BYTEA  NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (model, text_hash)
);
