-- The enrichment queue: captured session memories waiting for the background worker's
-- extraction (spaCy rules, then the LLM) and LLM summary (DESIGN §2, §5). One row per memory.
-- `fingerprint` names the captured content the row is about: a re-capture that changed it
-- queues the memory again, an unchanged one never enriches it twice. Memory text never
-- enters this table (DESIGN §7): `last_error` holds error messages only.
CREATE TABLE enrichment (
    slug            TEXT    PRIMARY KEY,
    fingerprint     TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'done', 'failed')),
    rules_done      INTEGER NOT NULL DEFAULT 0           -- the spaCy stage ran on this content
                    CHECK (rules_done IN (0, 1)),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),  -- failed LLM attempts
    last_error      TEXT,
    next_attempt_at TEXT    NOT NULL,                   -- UTC ISO-8601; backoff after a failure
    enqueued_at     TEXT    NOT NULL,                   -- UTC ISO-8601
    updated_at      TEXT    NOT NULL                    -- UTC ISO-8601
);

CREATE INDEX idx_enrichment_due ON enrichment (state, next_attempt_at);
