-- Grants (docs/design.md, "Grants"): standing approvals a person gives for one tool of one agent, for
-- the calls whose arguments match a pattern, until they expire or are revoked. Times are milliseconds
-- since the Unix epoch (UTC). A grant is its own record: it outlives the run it was made on (no foreign
-- key), and a revoked or expired one stays, for the record, with the number of calls it allowed.
CREATE TABLE IF NOT EXISTS grants (
    id         TEXT    NOT NULL PRIMARY KEY, -- UUIDv7: ordering by id is ordering by creation
    agent      TEXT    NOT NULL,
    tool       TEXT    NOT NULL,
    "match"    TEXT    NOT NULL,             -- JSON object: JSON pointer -> glob (a string) or value
    scope      TEXT    NOT NULL,             -- 'agent' or 'run'
    run_id     TEXT,                         -- the run, for scope 'run'
    reason     TEXT,
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,             -- exclusive: the grant allows calls before this time
    revoked_at INTEGER,                      -- set, with revoked_by, when a person revokes it
    revoked_by TEXT,
    uses       INTEGER NOT NULL DEFAULT 0    -- calls it allowed
);

-- The gate's lookup: an agent's grants not revoked, not yet expired (a range of expires_at). Revoked
-- grants have no entry, so the grants a gate check reads stay few however many were ever made.
CREATE INDEX IF NOT EXISTS grants_active ON grants (agent, expires_at) WHERE revoked_at IS NULL;
-- list: one agent's grants, newest first, continuing below a cursor id (without an agent: the primary key).
CREATE INDEX IF NOT EXISTS grants_agent_id ON grants (agent, id);
