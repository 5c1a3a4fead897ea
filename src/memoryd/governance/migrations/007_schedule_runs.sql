-- When each scheduled maintenance job last ran (decay-sweep, …), so the daemon runs what is
-- due and catches up runs missed while it was down or the machine slept; `memoryd schedule`
-- shows them. One row per run; `outcome` is `ok: …` or the error message.
CREATE TABLE schedule_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job         TEXT    NOT NULL,
    started_at  TEXT    NOT NULL,                    -- UTC ISO-8601
    finished_at TEXT    NOT NULL,                    -- UTC ISO-8601
    outcome     TEXT    NOT NULL
);

CREATE INDEX idx_schedule_runs_job_started ON schedule_runs (job, started_at);
