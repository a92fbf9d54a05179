-- The write probe behind `/readyz` (`RunStore::probe_write`): each probe inserts a row holding a page's
-- worth of bytes and deletes the one before, in one committed transaction. The insert comes first, so
-- the probe needs a free page, as a run's write does: when the database cannot grow (a full disk, the
-- file's `max_page_count`) it fails as they do. One row is left between probes.
CREATE TABLE health (
    id        INTEGER NOT NULL PRIMARY KEY,
    probed_at INTEGER NOT NULL,
    padding   BLOB    NOT NULL
);
