-- The supersede judge queue (issue 16): memories whose LLM part of supersede judging is
-- still owed (the rules judged them when they were written). The daemon's worker asks the
-- LLM off its writer thread; the queue is here, not in the daemon's memory, so a restart
-- loses no job, and a failed LLM call waits with backoff like an enrichment. One row per
-- memory; `queued` counts how often it was queued, so a job settles only the queueing it
-- was prepared from. Memory text never enters this table: `last_error` holds messages only.
CREATE TABLE judge_queue (
    slug            TEXT    PRIMARY KEY,
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'done', 'failed')),
    queued          INTEGER NOT NULL DEFAULT 1 CHECK (queued >= 1),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),  -- failed LLM attempts
    last_error      TEXT,
    next_attempt_at TEXT    NOT NULL,                   -- UTC ISO-8601; backoff after a failure
    enqueued_at     TEXT    NOT NULL,                   -- UTC ISO-8601
    updated_at      TEXT    NOT NULL                    -- UTC ISO-8601
);

CREATE INDEX idx_judge_queue_due ON judge_queue (state, next_attempt_at);
