-- Runs and their hash-chained event logs. Times are milliseconds since the Unix epoch (UTC), except
-- `events.at`, which is the RFC 3339 text exactly as it was hashed.
CREATE TABLE runs (
    id                 TEXT    NOT NULL PRIMARY KEY, -- UUIDv7: ordering by id is ordering by creation
    agent              TEXT    NOT NULL,
    status             TEXT    NOT NULL,
    version            INTEGER NOT NULL,
    input              TEXT    NOT NULL,
    output             TEXT,
    termination_reason TEXT,
    iterations         INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    created_by         TEXT    NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    finished_at        INTEGER,          -- set exactly when the run is terminal
    error              TEXT,             -- JSON {"kind", "message"}
    suspension         TEXT,             -- the held turn's suspension JSON; NULL when nothing is pending
    turn_digest        TEXT,
    required_calls     TEXT,             -- JSON array of call ids
    decisions          TEXT,             -- JSON object: call id -> recorded decision
    expires_at         INTEGER,          -- the pending turn's approval deadline
    lease_owner        TEXT,
    lease_expires_at   INTEGER,
    last_seq           INTEGER NOT NULL,
    last_hash          TEXT    NOT NULL
);

-- list: newest first, optionally by status and/or agent, continuing below a cursor id.
CREATE INDEX runs_status_id ON runs (status, id);
CREATE INDEX runs_agent_id ON runs (agent, id);
CREATE INDEX runs_agent_status_id ON runs (agent, status, id);
-- due: waiting runs past their deadline, running runs past their lease. Partial indexes, led by the
-- status they are restricted to so that SQLite's planner (without statistics) prefers them to
-- runs_status_id.
CREATE INDEX runs_waiting_deadline ON runs (status, expires_at)
    WHERE status = 'waiting_for_approval' AND expires_at IS NOT NULL;
CREATE INDEX runs_running_lease ON runs (status, lease_expires_at)
    WHERE status = 'running' AND lease_expires_at IS NOT NULL;
-- purge: terminal runs by finished_at, waiting runs by updated_at.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_waiting_updated ON runs (status, updated_at) WHERE status = 'waiting_for_approval';

CREATE TABLE events (
    run_id TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL,
    at     TEXT    NOT NULL,
    kind   TEXT    NOT NULL,
    round  INTEGER NOT NULL,
    data   TEXT    NOT NULL,         -- JSON
    hash   TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
);
