-- Two secondary indexes of runs go. A transition changes the run's status, which is indexed, so no
-- update of a run is a HOT update: each writes an entry into every index whose predicate the new row
-- meets, and that is most of what a transition costs PostgreSQL (per UPDATE, with all seven secondary
-- indexes dropped: 66 µs instead of 126 µs of execution, on one 2-core machine).
--
-- runs_agent_id (agent, id) took an entry on every write of every run. Listing one agent's runs (no
-- status given) now reads runs_agent_status_id once per status and merges the seven id-ordered scans
-- (a UNION ALL of LIMITed branches under one ORDER BY id: a Merge Append), which reads no more rows
-- than the old index did.
--
-- runs_running_lease (status, lease_expires_at) took an entry on every claim and every renewal of a
-- lease. The takeover sweep finds expired leases among the running runs through runs_status_id: the
-- running runs are at most the nodes' workers, not the whole table.
DROP INDEX IF EXISTS runs_agent_id;
DROP INDEX IF EXISTS runs_running_lease;
