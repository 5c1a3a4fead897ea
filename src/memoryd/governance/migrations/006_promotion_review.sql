-- What a review needs beside the proposal (issue 15): the evidence quoted from the session,
-- the content the score is about, and how the promotion was decided. A promotion whose
-- source session was since deleted stays in the queue, marked (`source_missing_at`).
ALTER TABLE promotions ADD COLUMN source_title TEXT NOT NULL DEFAULT '';
ALTER TABLE promotions ADD COLUMN source_fingerprint TEXT NOT NULL DEFAULT '';
ALTER TABLE promotions ADD COLUMN evidence TEXT NOT NULL DEFAULT '[]';   -- JSON array of quotes
ALTER TABLE promotions ADD COLUMN decided_by TEXT;                      -- the actor (cli, api, mcp)
ALTER TABLE promotions ADD COLUMN decision_reason TEXT;
ALTER TABLE promotions ADD COLUMN promoted_slug TEXT;                   -- the long-term memory
ALTER TABLE promotions ADD COLUMN source_missing_at TEXT;               -- UTC ISO-8601

CREATE INDEX idx_promotions_source_status ON promotions (source_session_slug, status);
