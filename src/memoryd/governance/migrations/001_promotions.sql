-- The promotions queue (seeds/001): session memories proposed for long-term storage, waiting
-- for a decision. No foreign key to a memories table: memories live in the vault and the graph,
-- so source_session_slug is a plain slug.
CREATE TABLE promotions (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    source_session_slug TEXT    NOT NULL,
    proposed_type       TEXT    NOT NULL,
    proposed_title      TEXT    NOT NULL,
    proposed_body       TEXT    NOT NULL,
    proposed_triggers   TEXT    NOT NULL,                -- JSON array
    dura_score          TEXT    NOT NULL,                -- JSON object {D, U, R, A}
    reasoning           TEXT,
    proposed_supersedes TEXT    NOT NULL DEFAULT '[]',   -- JSON array of slugs
    scope_hash          TEXT    NOT NULL,
    status              TEXT    NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'approved', 'rejected', 'merged')),
    created_at          TEXT    NOT NULL,                -- UTC ISO-8601
    decided_at          TEXT
);

CREATE INDEX idx_promotions_status_created ON promotions (status, created_at);
CREATE INDEX idx_promotions_scope_status ON promotions (scope_hash, status);
CREATE INDEX idx_promotions_source ON promotions (source_session_slug);
