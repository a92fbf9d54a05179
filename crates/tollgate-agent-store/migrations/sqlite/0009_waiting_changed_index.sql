-- The escalation sweep's window (docs/design.md, "Escalation"): waiting runs in order of their last
-- change, then id, so that a page of the window is read in index order and continues after the last run
-- read, however many runs wait.
CREATE INDEX IF NOT EXISTS runs_waiting_changed ON runs (updated_at, id) WHERE status = 'waiting_for_approval';
