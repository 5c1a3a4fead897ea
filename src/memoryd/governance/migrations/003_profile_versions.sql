-- Every rewrite of profile/identity.md (seeds/001), so the weekly rewrite can be diffed and
-- rolled back.
CREATE TABLE profile_versions (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    version_num          INTEGER NOT NULL UNIQUE,
    written_at           TEXT    NOT NULL,               -- UTC ISO-8601
    trigger              TEXT    NOT NULL,               -- weekly_cron / manual / on_event / monthly_report
    content_md           TEXT    NOT NULL,
    diff_from_prev       TEXT,
    change_summary       TEXT,
    sources_count        INTEGER,
    sources_window_start TEXT,
    sources_window_end   TEXT
);

CREATE INDEX idx_profile_versions_written ON profile_versions (written_at);
