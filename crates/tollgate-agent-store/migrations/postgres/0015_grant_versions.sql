-- The version of each agent's grants (docs/design.md, "Grants"): a number that grows in the same
-- transaction as every grant of the agent made or revoked, so that a node keeps the agent's grants
-- decoded between gate checks and reads them again only when the number moved. Kept by the two triggers
-- below, whatever writes the grant (made on its own, with a decision, revoked); counting a use changes
-- nothing a gate reads and leaves it. An agent with no row has never had a grant (version 0).
CREATE TABLE IF NOT EXISTS grant_versions (
    agent   TEXT   NOT NULL PRIMARY KEY,
    version BIGINT NOT NULL
);

CREATE OR REPLACE FUNCTION tollgate_grant_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO grant_versions (agent, version) VALUES (NEW.agent, 1)
        ON CONFLICT (agent) DO UPDATE SET version = grant_versions.version + 1;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS grant_made ON grants;
CREATE TRIGGER grant_made AFTER INSERT ON grants FOR EACH ROW EXECUTE FUNCTION tollgate_grant_version();
DROP TRIGGER IF EXISTS grant_revoked ON grants;
CREATE TRIGGER grant_revoked AFTER UPDATE OF revoked_at ON grants
    FOR EACH ROW EXECUTE FUNCTION tollgate_grant_version();

-- Grants made before this migration: their agents start at version 1.
INSERT INTO grant_versions (agent, version) SELECT DISTINCT agent, 1 FROM grants ON CONFLICT DO NOTHING;
