-- The span a run's root span is a child of, when the run joined its caller's trace (docs/telemetry.md):
-- the caller's span id, 16 lowercase hex digits, written once at creation. NULL when the run's root span
-- is its trace's root, without telemetry, and for every run created before this migration.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS trace_parent TEXT;
