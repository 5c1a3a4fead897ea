-- The monthly change reports (seeds/001), one per YYYY-MM, also written to
-- profile/change-reports/YYYY-MM.md.
CREATE TABLE profile_change_reports (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    period           TEXT    NOT NULL UNIQUE             -- YYYY-MM
                     CHECK (period GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]'),
    generated_at     TEXT    NOT NULL,                   -- UTC ISO-8601
    content_md       TEXT    NOT NULL,
    versions_count   INTEGER,
    supersedes_count INTEGER,
    entities_added   INTEGER,
    entities_dropped INTEGER
);
