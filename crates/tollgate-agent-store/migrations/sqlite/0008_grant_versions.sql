-- The version of each agent's grants (docs/design.md, "Grants"): a number that grows in the same
-- transaction as every grant of the agent made or revoked, so that a process keeps the agent's grants
-- decoded between gate checks and reads them again only when the number moved. Kept by the two triggers
-- below, whatever writes the grant (made on its own, with a decision, revoked); counting a use changes
-- nothing a gate reads and leaves it. An agent with no row has never had a grant (version 0).
CREATE TABLE IF NOT EXISTS grant_versions (
    agent   TEXT    NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS grant_made AFTER INSERT ON grants
BEGIN
    INSERT INTO grant_versions (agent, version) VALUES (NEW.agent, 1)
        ON CONFLICT (agent) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER IF NOT EXISTS grant_revoked AFTER UPDATE OF revoked_at ON grants
BEGIN
    INSERT INTO grant_versions (agent, version) VALUES (NEW.agent, 1)
        ON CONFLICT (agent) DO UPDATE SET version = version + 1;
END;

-- Grants made before this migration: their agents start at version 1.
INSERT OR IGNORE INTO grant_versions (agent, version) SELECT DISTINCT agent, 1 FROM grants;
