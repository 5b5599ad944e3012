-- Outside searches (web search, books API) answered in the last day, per provider and
-- query: the same question asked again costs no call.
CREATE TABLE search_cache (
    provider   TEXT    NOT NULL,
    query      TEXT    NOT NULL,
    results    TEXT    NOT NULL,
    fetched_ms BIGINT  NOT NULL,
    PRIMARY KEY (provider, query)
);
