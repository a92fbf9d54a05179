-- A write announces itself in its own statement instead of through a trigger on runs. The three
-- statements that write a run (create, transition, append) end with the same `pg_notify`, for the
-- same rows (a new row; a new version or chain head), with the same payload, under the same condition
-- (a listener of another node is recorded in `listeners`), which PostgreSQL now checks once per
-- statement inside a plan prepared once per connection. The trigger ran a PL/pgSQL function for every
-- row written, even with nobody listening: on one 2-core machine, without it a transition took 84 / 78
-- µs of execution instead of 131 / 131, a create 70 / 64 instead of 111 / 99, and workload A with 32 in
-- flight ran 6,879 / 7,140 runs/s instead of 5,617 / 6,254 (phase 1) and 3,221 / 3,327 instead of 2,657
-- / 2,952 (phase 2), back to back. A write made outside Tollgate (by hand) announces nothing.
DROP TRIGGER IF EXISTS runs_notify_insert ON runs;
DROP TRIGGER IF EXISTS runs_notify_update ON runs;
DROP FUNCTION IF EXISTS tollgate_notify_run();
