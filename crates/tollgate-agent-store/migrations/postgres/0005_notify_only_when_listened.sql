-- Announce a change only while another node listens. PostgreSQL serialises the commits of all the
-- transactions that NOTIFY in a database (a database-wide lock taken at commit), which halved the commit
-- rate of a busy node with 32 runs in flight (workload A phase 1: 5,200-5,700 runs/s without the trigger,
-- 2,900-3,400 with it). A node's listener connection is named `tollgate-listener NODE` (NODE: the
-- store's tag, also its connections' `tollgate.node` setting), so the trigger looks for a listener of
-- another node in `pg_stat_get_activity` (its application names are visible to every role) and skips
-- the NOTIFY when there is none: one node alone on its database pays nothing. A listener that connects
-- while a change commits may miss that change; it reads every followed run again once it listens (its
-- resync), so nothing is lost beyond that moment.
CREATE OR REPLACE FUNCTION tollgate_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_stat_get_activity(NULL) AS a
        WHERE a.application_name LIKE 'tollgate-listener %'
          AND a.application_name <> 'tollgate-listener ' || coalesce(current_setting('tollgate.node', true), '')
    ) THEN
        RETURN NULL;
    END IF;
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
