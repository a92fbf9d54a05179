-- The queue: a partial index of the queued runs alone, in the order they are claimed — by when each was
-- queued (`updated_at`: a new run's creation, a resume's or a give-back's queueing), then by id — so new
-- runs and resumes are served in the order they began to wait (by id alone, a run queued to resume went
-- before every run created after it: runs started without `wait` waited behind resumes). The claim
-- names it (`INDEXED BY runs_queue`), so the plan is this index read in order whatever the planner
-- knows of the table. Only queued rows have an entry.
CREATE INDEX IF NOT EXISTS runs_queue ON runs (updated_at, id) WHERE status = 'queued';
