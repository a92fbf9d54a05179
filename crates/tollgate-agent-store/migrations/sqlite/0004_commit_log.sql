-- The commit log (`RunStore::committed`): events get an id that only grows, in the order they were
-- committed (SQLite has one writer at a time, across processes too). AUTOINCREMENT keeps an id from
-- being used again after the newest events are deleted (purged), which a plain rowid would allow, and
-- VACUUM keeps an INTEGER PRIMARY KEY as it is. The events so far keep their order.
CREATE TABLE events_logged (
    id     INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    run_id TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL,
    at     TEXT    NOT NULL,
    kind   TEXT    NOT NULL,
    round  INTEGER NOT NULL,
    data   TEXT    NOT NULL,         -- JSON
    hash   TEXT    NOT NULL,
    UNIQUE (run_id, seq)
);
INSERT INTO events_logged (run_id, seq, at, kind, round, data, hash)
SELECT run_id, seq, at, kind, round, data, hash FROM events ORDER BY rowid;
DROP TABLE events;
ALTER TABLE events_logged RENAME TO events;

-- Named readers of the commit log (`RunStore::hold_reader`), each held by one process at a time until
-- `held_until` (milliseconds since the Unix epoch), with its position.
CREATE TABLE log_readers (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    held_until INTEGER NOT NULL,
    position   TEXT,
    updated_at INTEGER NOT NULL
);
