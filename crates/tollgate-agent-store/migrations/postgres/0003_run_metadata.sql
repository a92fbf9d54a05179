-- A run's metadata: the JSON object its starter gave, handed to every tool call of the run. NULL for no
-- metadata, and for every run created before this migration (read as an empty object). Set once, at
-- creation; never in the event log.
ALTER TABLE runs ADD COLUMN metadata TEXT;
