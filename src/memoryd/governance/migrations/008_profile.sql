-- The identity profile (issue 16): who wrote each version (`compiled`, an LLM, a rollback)
-- and the memories and entities it rests on (JSON lists), so a change summary can name what
-- came and went and the monthly report can count the entities added and dropped.
ALTER TABLE profile_versions ADD COLUMN written_by TEXT NOT NULL DEFAULT 'compiled';
ALTER TABLE profile_versions ADD COLUMN sources TEXT NOT NULL DEFAULT '[]';
ALTER TABLE profile_versions ADD COLUMN entities TEXT NOT NULL DEFAULT '[]';
