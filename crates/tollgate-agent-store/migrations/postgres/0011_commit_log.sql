-- The commit log (`RunStore::committed`): every batch of events records the transaction that wrote it
-- (its 64-bit id, `pg_current_xact_id()`, as a number). A reader takes the batches of transactions
-- older than the oldest one still running (`pg_snapshot_xmin` of its statement's snapshot): those can
-- no longer change, so its position can move past them without skipping a commit that becomes visible
-- later. Batches written before this migration have none and are not in the log (they are history).
ALTER TABLE event_batches ADD COLUMN IF NOT EXISTS tx BIGINT;
ALTER TABLE event_batches ALTER COLUMN tx SET DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX IF NOT EXISTS event_batches_tx ON event_batches (tx);

-- Named readers of the commit log (`RunStore::hold_reader`), each held by one node at a time until
-- `held_until` (milliseconds since the Unix epoch), with its position: webhook deliveries continue
-- where they were after a crash, on any node.
CREATE TABLE IF NOT EXISTS log_readers (
    name       TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    holder     TEXT   NOT NULL,
    held_until BIGINT NOT NULL,
    position   TEXT,
    updated_at BIGINT NOT NULL
);
