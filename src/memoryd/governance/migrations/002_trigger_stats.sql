-- How often each trigger keyword led to a recall, per scope and day (seeds/001); the profile
-- and the digest read trends from it. Scope-less hits are counted under '_global'.
CREATE TABLE trigger_stats (
    trigger    TEXT    NOT NULL,
    scope_hash TEXT    NOT NULL DEFAULT '_global',
    day        TEXT    NOT NULL                          -- YYYY-MM-DD
               CHECK (day GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'),
    hits       INTEGER NOT NULL DEFAULT 1 CHECK (hits >= 0),
    PRIMARY KEY (trigger, scope_hash, day)
);

CREATE INDEX idx_trigger_stats_day ON trigger_stats (day);
CREATE INDEX idx_trigger_stats_scope_day ON trigger_stats (scope_hash, day);
