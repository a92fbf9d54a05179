-- Every committed change to a run (its creation, a transition, an append of events; not a lease renewal
-- alone, which moves neither the version nor the chain) announces itself to the other nodes on channel `tollgate_runs`
-- (delivered at commit, and only if the transaction commits). The payload says which run and where it
-- stands, never its data: {"schema", "node", "id", "version", "status", "last_seq"}. `schema` tells apart
-- Tollgates sharing one database in different schemas; `node` is the committing store's tag (the
-- session setting `tollgate.node`, set on every connection of a store), so a node skips its own.
CREATE FUNCTION tollgate_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tollgate_runs', json_build_object(
        'schema', TG_TABLE_SCHEMA,
        'node', current_setting('tollgate.node', true),
        'id', NEW.id,
        'version', NEW.version,
        'status', NEW.status,
        'last_seq', NEW.last_seq
    )::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_notify_insert AFTER INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_run();
CREATE TRIGGER runs_notify_update AFTER UPDATE ON runs
    FOR EACH ROW WHEN (OLD.version <> NEW.version OR OLD.last_seq <> NEW.last_seq)
    EXECUTE FUNCTION tollgate_notify_run();
