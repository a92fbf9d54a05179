//! The PostgreSQL backend, for several Tollgate nodes sharing one database.
//!
//! Every write is one statement, atomic by itself, so that a write costs as few round trips as it can:
//! a create inserts the run and its first events in one statement; a transition or an append reads the
//! run, plans the write in Rust (the transition rules and the hash chain live there), then writes the
//! row and all of its events in one statement that applies only if the row is still as it was read —
//! same `version`, `last_seq` and `lease_expires_at`. Every change to a run's row changes one of those
//! (a transition bumps the version; an append, which does not, moves the chain head or the lease), so
//! "unchanged" means the write was planned on the row as it is when it commits: of two resumes with the
//! same version guard exactly one passes, and a takeover planned on a lease renewed since loses. A
//! write whose row changed meanwhile is planned again once, on the row locked (`SELECT … FOR UPDATE`
//! in a transaction), where it cannot lose again: contention costs a retry, never a wrong answer.
//! Each store also remembers the last row it read or wrote of each run (a bounded cache): a transition or
//! an append on a remembered run is planned on that row and goes straight to its conditional statement,
//! one round trip in all. If another node changed the row meanwhile the statement writes nothing, the
//! entry is dropped, and the write takes the path above (read, write, locked retry). The cache is a
//! guess, never a guard: an answer planned on it is returned only once its statement applied, and a
//! plan refused on it (a guard, a transition rule) is made again on the row read.
//! Under load, the reads, creates and transitions of different runs share one statement per kind, each
//! answered as if alone (`pg_groups.rs`); a lone operation keeps the statement described here.
//! Statements take their connections from the store's connection list (`pg_connections.rs`), which
//! keeps those that finished cleanly for the next statement rather than returning them through sqlx's
//! ping.
//! Purge locks its victims with `FOR UPDATE SKIP LOCKED`, so it never waits for, nor deletes from
//! under, a run that is being changed.
//!
//! Tables live in the connection's current schema; choose another with the URL parameter
//! `options[search_path]=NAME` (the schema must exist).

use crate::StoreOptions;
use crate::codec::{
    ChainHead, Columns, EventRow, PREFIX_COUNT_CAP, RunRow, Secrets, bind_run_changes, bind_run_row, chain_key,
    database_error, decode_event, decode_run, decode_runs_skipping_corrupt, plan_append, plan_create, plan_transition,
    prefix_upper_bound, read_run_row, resolve_prefix_answer, run_columns, run_error, split_readable, status_counts,
};
use crate::commit_log::{parse_pg_position, pg_position, position_ahead};
use crate::encryption::DataKeys;
use crate::migrations::{self, Migration};
use crate::pg_connections::{Connections, Held, PING_IF_IDLE_FOR};
use crate::pg_groups::{Answer, Grouped, Groups, Runner, each_alone_after};
use crate::pg_nodelay;
use crate::pg_notify::{self, Announcements};
use crate::pg_targets::Targets;
use crate::taps::Taps;
use futures_util::stream::BoxStream;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::query::QueryScalar;
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, Postgres, Row};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::event::{NewEvent, StoredEvent};
use tollgate_agent_core::run::{Lease, Millis, RunRecord, RunStatus, Transition};
use tollgate_agent_core::store::{
    ChangeFeed, Claimed, CommittedPage, Conflict, EventLog, Guard, IntegrityCheck, ReaderHold, RunPage, RunQuery,
    RunQueue, RunRows, Schedules, StoreChange, StoreError, StoreHealth,
};

impl Columns for PgRow {
    fn text(&self, index: usize) -> Result<String, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn optional_text(&self, index: usize) -> Result<Option<String>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn int(&self, index: usize) -> Result<i64, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn optional_int(&self, index: usize) -> Result<Option<i64>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }
}

/// The schema changes of this backend, oldest first.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "runs_and_events",
        sql: include_str!("../migrations/postgres/0001_runs_and_events.sql"),
    },
    Migration { version: 2, name: "health", sql: include_str!("../migrations/postgres/0002_health.sql") },
    Migration { version: 3, name: "run_metadata", sql: include_str!("../migrations/postgres/0003_run_metadata.sql") },
    Migration {
        version: 4,
        name: "run_notifications",
        sql: include_str!("../migrations/postgres/0004_run_notifications.sql"),
    },
    Migration {
        version: 5,
        name: "notify_only_when_listened",
        sql: include_str!("../migrations/postgres/0005_notify_only_when_listened.sql"),
    },
    Migration {
        version: 6,
        name: "listeners_table",
        sql: include_str!("../migrations/postgres/0006_listeners_table.sql"),
    },
    Migration {
        version: 7,
        name: "events_without_foreign_key",
        sql: include_str!("../migrations/postgres/0007_events_without_foreign_key.sql"),
    },
    Migration {
        version: 8,
        name: "fewer_run_indexes",
        sql: include_str!("../migrations/postgres/0008_fewer_run_indexes.sql"),
    },
    Migration { version: 9, name: "event_batches", sql: include_str!("../migrations/postgres/0009_event_batches.sql") },
    Migration {
        version: 10,
        name: "announce_in_the_write",
        sql: include_str!("../migrations/postgres/0010_announce_in_the_write.sql"),
    },
    Migration { version: 11, name: "commit_log", sql: include_str!("../migrations/postgres/0011_commit_log.sql") },
    Migration { version: 12, name: "queue_index", sql: include_str!("../migrations/postgres/0012_queue_index.sql") },
    Migration { version: 13, name: "approvals", sql: include_str!("../migrations/postgres/0013_approvals.sql") },
];

/// The probe of [`RunStore::probe_write`]: one committed row update.
const PROBE: &str = "INSERT INTO health (id, probed_at) VALUES (1, $1) \
     ON CONFLICT (id) DO UPDATE SET probed_at = EXCLUDED.probed_at";

/// Tables `check_integrity` reads: every row with `Full` (PostgreSQL then reads every page, checking
/// its checksum when the cluster has them), one row with `Quick`.
const TABLES: [&str; 5] = ["runs", "event_batches", "log_readers", "health", "tollgate_migrations"];

/// Connections per node.
const POOL_SIZE: u32 = 16;

/// Statements of one kind (reads of a run, creates, transitions) under way at once; operations beyond
/// wait and go together in the next (see [`crate::pg_groups`]). Two rather than four: larger groups,
/// fewer statements and commits per run, and more of workload A with 32 in flight (docs/nodes.md).
const GROUPS_AT_ONCE: usize = 2;

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");
/// [`SELECT_RUN`] for a group of runs (see `pg_groups`).
const SELECT_RUNS: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ANY($1)");
const SELECT_RUN_FOR_UPDATE: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1 FOR UPDATE");
/// The announcement of a write, the last part of its statement (migration 10; it was a trigger): a
/// `pg_notify` on [`CHANNEL`](crate::pg_notify::CHANNEL) for each row of `$rows` where `$changed` holds,
/// while a listener of another node is recorded in `listeners` — checked once per statement, on that
/// small table alone: whether the listener's backend is alive is the listeners' sweep's business
/// (`pg_notify`), since reading the server's backends costs each statement more the more connections
/// the server has. The statement then answers the number of rows `$rows` wrote (the announcement is
/// read, so it runs).
macro_rules! announced {
    ($rows:literal, $changed:literal) => {
        concat!(
            announcement!($rows, $changed),
            "SELECT COUNT(*) FROM ",
            $rows,
            " WHERE (SELECT COUNT(*) FROM announced) >= 0"
        )
    };
}
/// The `announced` part of [`announced!`] alone, for a statement that answers otherwise.
macro_rules! announcement {
    ($rows:literal, $changed:literal) => {
        concat!(
            "announced AS (SELECT pg_notify('tollgate_runs', json_build_object('schema', current_schema(), ",
            "'node', current_setting('tollgate.node', true), 'id', w.id, 'version', w.version, ",
            "'status', w.status, 'last_seq', w.last_seq)::text) FROM ",
            $rows,
            " AS w WHERE (",
            $changed,
            ") AND EXISTS (SELECT 1 FROM listeners AS l ",
            "WHERE l.node <> coalesce(current_setting('tollgate.node', true), ''))) "
        )
    };
}
/// The events of a group of writes (see `pg_groups`), one batch row per run among `$rows`, from the
/// flat arrays `$1`..`$7` after the group's run parameters: run id, seq, at, kind, round, data, hash.
macro_rules! grouped_events {
    ($rows:literal, $run:literal, $seq:literal, $at:literal, $kind:literal, $round:literal, $data:literal, $hash:literal) => {
        concat!(
            "chained AS (INSERT INTO event_batches (run_id, last_seq, seqs, ats, kinds, rounds, datas, hashes) ",
            "SELECT e.run_id, MAX(e.seq), ARRAY_AGG(e.seq ORDER BY e.seq), ARRAY_AGG(e.at ORDER BY e.seq), ",
            "ARRAY_AGG(e.kind ORDER BY e.seq), ARRAY_AGG(e.round ORDER BY e.seq), ARRAY_AGG(e.data ORDER BY e.seq), ",
            "ARRAY_AGG(e.hash ORDER BY e.seq) FROM UNNEST(",
            $run,
            "::TEXT[], ",
            $seq,
            "::BIGINT[], ",
            $at,
            "::TEXT[], ",
            $kind,
            "::TEXT[], ",
            $round,
            "::BIGINT[], ",
            $data,
            "::TEXT[], ",
            $hash,
            "::TEXT[]) AS e (run_id, seq, at, kind, round, data, hash) ",
            "WHERE e.run_id IN (SELECT id FROM ",
            $rows,
            ") GROUP BY e.run_id), "
        )
    };
}

/// A create: the run and its first events (one batch row, see migration 9), announced, in one
/// statement. Answers 0 when the id is taken (no row is written then).
const CREATE_RUN: &str = concat!(
    "WITH created AS (INSERT INTO runs (",
    run_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, ",
    "$22, $23, $24, $25) ON CONFLICT (id) DO NOTHING RETURNING id, version, status, last_seq), ",
    "chained AS (INSERT INTO event_batches (run_id, last_seq, seqs, ats, kinds, rounds, datas, hashes) ",
    "SELECT created.id, ($26::BIGINT[])[cardinality($26::BIGINT[])], $26, $27::TEXT[], $28::TEXT[], ",
    "$29::BIGINT[], $30::TEXT[], $31::TEXT[] FROM created WHERE cardinality($26::BIGINT[]) > 0), ",
    announced!("created", "TRUE")
);
/// A transition: the new row and its events (one batch row, none without events), announced when the
/// version or the chain head moved, in one statement, if the row is as it was read (`$21` version, `$22`
/// last_seq, `$23` lease_expires_at). Answers 1, or 0 (nothing written) when it changed.
const UPDATE_RUN: &str = concat!(
    "WITH updated AS (UPDATE runs SET status = $1, version = $2, output = $3, ",
    "termination_reason = $4, iterations = $5, input_tokens = $6, output_tokens = $7, updated_at = $8, ",
    "finished_at = $9, error = $10, suspension = $11, turn_digest = $12, required_calls = $13, decisions = $14, ",
    "expires_at = $15, lease_owner = $16, lease_expires_at = $17, last_seq = $18, last_hash = $19 ",
    "WHERE id = $20 AND version = $21 AND last_seq = $22 AND lease_expires_at IS NOT DISTINCT FROM $23 ",
    "RETURNING id, version, status, last_seq), ",
    "chained AS (INSERT INTO event_batches (run_id, last_seq, seqs, ats, kinds, rounds, datas, hashes) ",
    "SELECT updated.id, ($24::BIGINT[])[cardinality($24::BIGINT[])], $24, $25::TEXT[], $26::TEXT[], ",
    "$27::BIGINT[], $28::TEXT[], $29::TEXT[] FROM updated WHERE cardinality($24::BIGINT[]) > 0), ",
    announced!("updated", "w.version <> $21 OR w.last_seq <> $22")
);
/// [`CREATE_RUN`] for a group of runs (see `pg_groups`): one array per column of [`run_columns!`],
/// then the events' flat arrays. Answers the ids it created (an id taken is not among them).
const CREATE_RUNS: &str = concat!(
    "WITH input AS (SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[], ",
    "$6::TEXT[], $7::TEXT[], $8::BIGINT[], $9::BIGINT[], $10::BIGINT[], $11::TEXT[], $12::BIGINT[], ",
    "$13::BIGINT[], $14::BIGINT[], $15::TEXT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::TEXT[], ",
    "$20::BIGINT[], $21::TEXT[], $22::BIGINT[], $23::BIGINT[], $24::TEXT[], $25::TEXT[]) AS i (",
    run_columns!(),
    ")), created AS (INSERT INTO runs (",
    run_columns!(),
    ") SELECT ",
    run_columns!(),
    " FROM input ON CONFLICT (id) DO NOTHING RETURNING id, version, status, last_seq), ",
    grouped_events!("created", "$26", "$27", "$28", "$29", "$30", "$31", "$32"),
    announcement!("created", "TRUE"),
    "SELECT id FROM created WHERE (SELECT COUNT(*) FROM announced) >= 0"
);
/// [`UPDATE_RUN`] for a group of runs (see `pg_groups`): the id, the columns a transition sets and the
/// row as read (`version`, `last_seq`, `lease_expires_at`), one array each, then the events' flat
/// arrays. Answers the ids it wrote (a row changed since it was read is not among them).
const UPDATE_RUNS: &str = concat!(
    "WITH input AS (SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[], ",
    "$6::BIGINT[], $7::BIGINT[], $8::BIGINT[], $9::BIGINT[], $10::BIGINT[], $11::TEXT[], $12::TEXT[], ",
    "$13::TEXT[], $14::TEXT[], $15::TEXT[], $16::BIGINT[], $17::TEXT[], $18::BIGINT[], $19::BIGINT[], ",
    "$20::TEXT[], $21::BIGINT[], $22::BIGINT[], $23::BIGINT[]) AS i (id, status, version, output, ",
    "termination_reason, iterations, input_tokens, output_tokens, updated_at, finished_at, error, suspension, ",
    "turn_digest, required_calls, decisions, expires_at, lease_owner, lease_expires_at, last_seq, last_hash, ",
    "read_version, read_last_seq, read_lease)), ",
    "updated AS (UPDATE runs AS r SET status = i.status, version = i.version, output = i.output, ",
    "termination_reason = i.termination_reason, iterations = i.iterations, input_tokens = i.input_tokens, ",
    "output_tokens = i.output_tokens, updated_at = i.updated_at, finished_at = i.finished_at, error = i.error, ",
    "suspension = i.suspension, turn_digest = i.turn_digest, required_calls = i.required_calls, ",
    "decisions = i.decisions, expires_at = i.expires_at, lease_owner = i.lease_owner, ",
    "lease_expires_at = i.lease_expires_at, last_seq = i.last_seq, last_hash = i.last_hash FROM input AS i ",
    "WHERE r.id = i.id AND r.version = i.read_version AND r.last_seq = i.read_last_seq ",
    "AND r.lease_expires_at IS NOT DISTINCT FROM i.read_lease ",
    "RETURNING r.id, r.version, r.status, r.last_seq, i.read_version, i.read_last_seq), ",
    grouped_events!("updated", "$24", "$25", "$26", "$27", "$28", "$29", "$30"),
    announcement!("updated", "w.version <> w.read_version OR w.last_seq <> w.read_last_seq"),
    "SELECT id FROM updated WHERE (SELECT COUNT(*) FROM announced) >= 0"
);
/// An append: the new chain head and lease and the events (one batch row), announced when there are
/// events (a lease renewal alone says nothing), in one statement, if the row is as it was read (`$5`
/// version, `$6` last_seq, `$7` lease_expires_at). Answers 1, or 0 when it changed.
const APPEND_EVENTS: &str = concat!(
    "WITH updated AS (UPDATE runs SET last_seq = $1, last_hash = $2, lease_expires_at = $3 ",
    "WHERE id = $4 AND version = $5 AND last_seq = $6 AND lease_expires_at IS NOT DISTINCT FROM $7 ",
    "RETURNING id, version, status, last_seq), ",
    "chained AS (INSERT INTO event_batches (run_id, last_seq, seqs, ats, kinds, rounds, datas, hashes) ",
    "SELECT updated.id, ($8::BIGINT[])[cardinality($8::BIGINT[])], $8, $9::TEXT[], $10::TEXT[], ",
    "$11::BIGINT[], $12::TEXT[], $13::TEXT[] FROM updated WHERE cardinality($8::BIGINT[]) > 0), ",
    announced!("updated", "w.last_seq <> $6")
);
/// The events after seq `$2`, at most `$3`: from the first `$3` batches whose last seq is above `$2`
/// (each holds at least one event, and only the first can hold seqs at or below `$2`).
const SELECT_EVENTS: &str = "SELECT e.seq, e.at, e.kind, e.round, e.data, e.hash \
     FROM (SELECT * FROM event_batches WHERE run_id = $1 AND last_seq > $2 ORDER BY last_seq LIMIT $3) AS b, \
     UNNEST(b.seqs, b.ats, b.kinds, b.rounds, b.datas, b.hashes) AS e (seq, at, kind, round, data, hash) \
     WHERE e.seq > $2 ORDER BY e.seq LIMIT $3";
const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE id = $1";
/// The commit log after position (`$1` transaction, `$2` run, `$3` last seq): the events of at most `$4`
/// batches, those of transactions older than every transaction still running (the horizon, column 9,
/// on every row, and on a row of its own with no event when there is none; column 10, the next
/// transaction id: above the horizon while transactions are under way), in the log's order.
const SELECT_COMMITTED: &str = "SELECT e.seq, e.at, e.kind, e.round, e.data, e.hash, b.run_id, b.tx, b.last_seq, h.x, h.y \
     FROM (SELECT pg_snapshot_xmin(s)::text::bigint AS x, pg_snapshot_xmax(s)::text::bigint AS y \
         FROM pg_current_snapshot() AS s) AS h \
     LEFT JOIN LATERAL (SELECT run_id, tx, last_seq, seqs, ats, kinds, rounds, datas, hashes FROM event_batches \
         WHERE tx >= $1 AND (tx, run_id, last_seq) > ($1, $2, $3) AND tx < h.x \
         ORDER BY tx, run_id, last_seq LIMIT $4) AS b ON true \
     LEFT JOIN LATERAL UNNEST(b.seqs, b.ats, b.kinds, b.rounds, b.datas, b.hashes) \
         AS e (seq, at, kind, round, data, hash) ON true \
     ORDER BY b.tx, b.run_id, b.last_seq, e.seq";
/// The end of the commit log: the horizon (see [`SELECT_COMMITTED`]).
const COMMITTED_END: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint";
/// Takes, renews or keeps a reader's hold (see [`RunStore::hold_reader`]); no row when another holds it.
const HOLD_READER: &str = "INSERT INTO log_readers AS r (name, holder, held_until, position, updated_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
     held_until = excluded.held_until, position = COALESCE(excluded.position, r.position), \
     updated_at = excluded.updated_at WHERE r.holder = excluded.holder OR r.held_until <= excluded.updated_at \
     RETURNING position";
const READER_HOLDER: &str = "SELECT holder, held_until FROM log_readers WHERE name = $1";
const RELEASE_READER: &str = "UPDATE log_readers SET held_until = 0 WHERE name = $1 AND holder = $2";
/// Opens a claim's transaction (one round trip): with sorts off, the only plan PostgreSQL has for
/// [`SELECT_QUEUED_FOR_CLAIM`] and [`SELECT_OLDEST_QUEUED`] is the partial index `runs_queue` read in
/// order (migration 12), whatever its statistics say of the table — stale ones after a burst made it
/// scan every queued row of `runs_status_id` and sort them, 34.5 ms per claim. JIT is off with it: a
/// sort the write still needs is costed at PostgreSQL's "disabled" price, far above `jit_above_cost`,
/// and compiling the plan then took 600-800 ms a claim.
pub(crate) const BEGIN_QUEUE_READ: &str = "BEGIN; SET LOCAL enable_sort = off; SET LOCAL jit = off";
/// The claim's write: [`UPDATE_RUNS`] under a text of its own, so that the plans PostgreSQL caches for
/// it (per statement text and connection) are made in a claim's transaction only, and a plan made with
/// sorts off never serves the grouped transitions of [`UPDATE_RUNS`] (nor the other way round).
static CLAIM_RUNS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{UPDATE_RUNS} -- the claim's write, planned with sorts off"));
/// The oldest queued runs of the agents `$1` (by when each was queued, then id: `runs_queue`'s order)
/// that no other transaction has locked, at most `$2`, leaving out the ids `$3` (rows of this claim
/// that could not be read), locked for a claim: only the rows returned are locked.
pub(crate) const SELECT_QUEUED_FOR_CLAIM: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE status = 'queued' AND agent = ANY($1) AND id <> ALL($3) ",
    "ORDER BY updated_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
);
/// When the run queued longest was queued (see [`BEGIN_QUEUE_READ`]).
const SELECT_OLDEST_QUEUED: &str =
    "SELECT updated_at FROM runs WHERE status = 'queued' ORDER BY updated_at, id LIMIT 1";
const SELECT_DUE: &str = concat!(
    "SELECT * FROM (SELECT ",
    run_columns!(),
    ", expires_at AS due_at FROM runs WHERE status = 'waiting_for_approval' AND expires_at IS NOT NULL ",
    "AND expires_at <= $1 ORDER BY expires_at LIMIT $2) AS waiting ",
    "UNION ALL SELECT * FROM (SELECT ",
    run_columns!(),
    ", lease_expires_at AS due_at FROM runs WHERE status = 'running' AND lease_expires_at IS NOT NULL ",
    "AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2) AS running ",
    "ORDER BY due_at, id LIMIT $2"
);
/// The conditions are stated again on the DELETE itself so that a row changed between the selection
/// and the lock (no longer matching) is left alone. The runs' events go in the same statement (no
/// foreign key cascades since migration 7).
const PURGE: &str = "WITH terminal AS (\
         SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1 \
         ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
     waiting AS (\
         SELECT id FROM runs WHERE status = 'waiting_for_approval' AND updated_at < $2 \
         ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
     victims AS (SELECT id FROM terminal UNION ALL SELECT id FROM waiting LIMIT $3), \
     deleted AS (DELETE FROM runs WHERE id IN (SELECT id FROM victims) \
     AND ((finished_at IS NOT NULL AND finished_at < $1) OR (status = 'waiting_for_approval' AND updated_at < $2)) \
     RETURNING id), \
     their_events AS (DELETE FROM event_batches WHERE run_id IN (SELECT id FROM deleted)) \
     SELECT id FROM deleted";
const PREFIX_FIRST: &str = "SELECT id FROM runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT 2";
const PREFIX_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE id >= $1 AND id < $2 LIMIT $3) AS m";

/// A write's events as the column arrays its statement unnests (`$n::BIGINT[]`, `$n::TEXT[]`, ...).
#[derive(Default)]
struct EventColumns {
    seq: Vec<i64>,
    at: Vec<String>,
    kind: Vec<String>,
    round: Vec<i64>,
    data: Vec<String>,
    hash: Vec<String>,
}

impl EventColumns {
    /// Binds the arrays, in column order, as the statement's last six parameters.
    fn bind(self, query: CountQuery<'_>) -> CountQuery<'_> {
        query.bind(self.seq).bind(self.at).bind(self.kind).bind(self.round).bind(self.data).bind(self.hash)
    }
}

/// A write statement that answers how many runs it wrote.
type CountQuery<'q> = QueryScalar<'q, Postgres, i64, PgArguments>;

/// Runs a store remembers at most (see [`RowCache`]).
const CACHED_ROWS: usize = 10_000;

/// The last row this store read or wrote of each run, as it was then: what a transition or an append
/// plans on before it has read anything. Only a guess (another node may have changed the row since):
/// the conditional statement decides. Finished runs are not kept (nothing may change them); when full,
/// an arbitrary run is forgotten to make room.
#[derive(Default)]
struct RowCache(Mutex<HashMap<String, RunRow>>);

impl RowCache {
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunRow>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<RunRow> {
        self.rows().get(id).cloned()
    }

    fn put(&self, row: RunRow) {
        let mut rows = self.rows();
        if row.finished_at.is_some() {
            rows.remove(&row.id);
            return;
        }
        if rows.len() >= CACHED_ROWS
            && !rows.contains_key(&row.id)
            && let Some(victim) = rows.keys().next().cloned()
        {
            rows.remove(&victim);
        }
        rows.insert(row.id.clone(), row);
    }

    fn remove(&self, id: &str) {
        self.rows().remove(id);
    }
}

/// A transition planned on a row: what it answers, the row it writes, and its statement's arguments.
struct PlannedTransition {
    next: RunRecord,
    changes: RunRow,
    columns: EventColumns,
    /// The events as served, for the taps once written.
    stored: Vec<StoredEvent>,
    /// `version`, `last_seq`, `lease_expires_at` of the row planned on.
    read_as: (i64, i64, Option<i64>),
}

/// A kind of grouped operation (see [`PostgresStore::run_group`]).
trait GroupKind: Grouped + Sized {
    /// For the logs.
    const KIND: &'static str;
    type Output;
    /// What the grouped statement says of its runs.
    type Together;
    /// The grouped statement of `group`; `None` when its answer cannot be told apart run by run.
    fn together<'a>(
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
        group: &'a [Self],
    ) -> BoxFuture<'a, Result<Option<Self::Together>, StoreError>>;
    /// This operation's answer in what its group's statement said (taken out of it: each run is
    /// answered once).
    fn answer(self, store: &PostgresStore, together: &mut Self::Together) -> Answer<Self::Output>;
    /// This operation with its own statement.
    fn alone<'a>(
        self,
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
    ) -> BoxFuture<'a, Answer<Self::Output>>;
}

impl GroupKind for PlannedCreate {
    const KIND: &'static str = "create";
    type Output = Option<RunRecord>;
    type Together = HashSet<String>;

    fn together<'a>(
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
        group: &'a [Self],
    ) -> BoxFuture<'a, Result<Option<HashSet<String>>, StoreError>> {
        Box::pin(
            async move { store.write_grouped(connection, CREATE_RUNS, GroupColumns::creates(group)).await.map(Some) },
        )
    }

    fn answer(self, store: &PostgresStore, created: &mut HashSet<String>) -> Answer<Option<RunRecord>> {
        if !created.contains(&self.run.id) {
            return Ok(None);
        }
        store.cache.put(self.row);
        store.taps.fire(&self.run.id, &self.stored);
        Ok(Some(self.run))
    }

    fn alone<'a>(
        self,
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
    ) -> BoxFuture<'a, Answer<Option<RunRecord>>> {
        Box::pin(async move {
            let created: i64 = self
                .columns
                .bind(bind_run_row!(sqlx::query_scalar(CREATE_RUN), &self.row))
                .fetch_one(&mut *connection)
                .await
                .map_err(store.db_error("cannot insert a run"))?;
            Ok((created == 1).then(|| {
                store.cache.put(self.row);
                store.taps.fire(&self.run.id, &self.stored);
                self.run
            }))
        })
    }
}

impl GroupKind for PlannedTransition {
    const KIND: &'static str = "transition";
    type Output = Option<RunRecord>;
    type Together = HashSet<String>;

    fn together<'a>(
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
        group: &'a [Self],
    ) -> BoxFuture<'a, Result<Option<HashSet<String>>, StoreError>> {
        Box::pin(async move {
            store.write_grouped(connection, UPDATE_RUNS, GroupColumns::transitions(group)).await.map(Some)
        })
    }

    fn answer(self, store: &PostgresStore, written: &mut HashSet<String>) -> Answer<Option<RunRecord>> {
        if !written.contains(&self.next.id) {
            return Ok(None);
        }
        store.cache.put(self.changes);
        store.taps.fire(&self.next.id, &self.stored);
        Ok(Some(self.next))
    }

    fn alone<'a>(
        self,
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
    ) -> BoxFuture<'a, Answer<Option<RunRecord>>> {
        Box::pin(async move {
            let written = store.write_transition(connection, self).await?;
            Ok(written.map(|(next, stored)| {
                store.taps.fire(&next.id, &stored);
                next
            }))
        })
    }
}

impl GroupKind for ReadRun {
    const KIND: &'static str = "read";
    type Output = Option<RunRow>;
    type Together = HashMap<String, Result<RunRow, StoreError>>;

    fn together<'a>(
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
        group: &'a [Self],
    ) -> BoxFuture<'a, Result<Option<Self::Together>, StoreError>> {
        Box::pin(async move {
            let ids: Vec<&str> = group.iter().map(|read| read.0.as_str()).collect();
            let rows = sqlx::query(SELECT_RUNS)
                .bind(ids)
                .fetch_all(&mut *connection)
                .await
                .map_err(|e| database_error(&store.secrets, "cannot read runs", &e))?;
            let mut by_id = HashMap::new();
            for row in &rows {
                // A row whose id cannot be read belongs to no one in particular: each alone.
                let Ok(id) = row.text(0) else { return Ok(None) };
                by_id.insert(id, read_run_row(row));
            }
            Ok(Some(by_id))
        })
    }

    fn answer(self, _: &PostgresStore, by_id: &mut Self::Together) -> Answer<Option<RunRow>> {
        by_id.remove(&self.0).transpose()
    }

    fn alone<'a>(
        self,
        store: &'a PostgresStore,
        connection: &'a mut PgConnection,
    ) -> BoxFuture<'a, Answer<Option<RunRow>>> {
        Box::pin(async move {
            let found = sqlx::query(SELECT_RUN)
                .bind(&self.0)
                .fetch_optional(&mut *connection)
                .await
                .map_err(store.run_failed("cannot read a run", &self.0))?;
            found.as_ref().map(read_run_row).transpose()
        })
    }
}

/// A read of run `.0` (see [`PostgresStore::get_run`]).
struct ReadRun(String);

impl Grouped for ReadRun {
    fn run_id(&self) -> &str {
        &self.0
    }
}

/// A create planned: what it answers, its row and its events.
struct PlannedCreate {
    run: RunRecord,
    row: RunRow,
    columns: EventColumns,
    /// The events as served, for the taps once written.
    stored: Vec<StoredEvent>,
}

impl Grouped for PlannedCreate {
    fn run_id(&self) -> &str {
        &self.run.id
    }
}

impl Grouped for PlannedTransition {
    fn run_id(&self) -> &str {
        &self.next.id
    }
}

/// A group's parameters: one array per column of its runs, then the flat arrays of all their events
/// (see [`grouped_events!`]).
#[derive(Default)]
struct GroupColumns {
    texts: Vec<Vec<Option<String>>>,
    ints: Vec<Vec<Option<i64>>>,
    /// Which array is each parameter, in order: `Ok(i)` texts\[i\], `Err(i)` ints\[i\].
    order: Vec<Result<usize, usize>>,
    events: EventColumns,
    event_runs: Vec<String>,
}

/// One value of a row, for [`GroupColumns`].
enum Value<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
}

impl GroupColumns {
    /// The arrays of `rows`, each row given as its values in parameter order, put in the order of
    /// their ids: two grouped statements that share runs then lock their rows in the same order, and
    /// never wait for each other in a circle (a deadlock PostgreSQL would break only after a second).
    fn of<'a>(rows: impl Iterator<Item = (Vec<Value<'a>>, &'a str, &'a EventColumns)>) -> GroupColumns {
        let mut columns = GroupColumns::default();
        let mut rows: Vec<_> = rows.collect();
        rows.sort_by(|a, b| a.1.cmp(b.1));
        for (values, run_id, events) in rows {
            if columns.order.is_empty() {
                for value in &values {
                    columns.order.push(match value {
                        Value::Text(_) => {
                            columns.texts.push(Vec::new());
                            Ok(columns.texts.len() - 1)
                        }
                        Value::Int(_) => {
                            columns.ints.push(Vec::new());
                            Err(columns.ints.len() - 1)
                        }
                    });
                }
            }
            for (value, at) in values.into_iter().zip(&columns.order) {
                match (value, at) {
                    (Value::Text(text), Ok(i)) => columns.texts[*i].push(text.map(str::to_owned)),
                    (Value::Int(int), Err(i)) => columns.ints[*i].push(int),
                    // Every row gives the same kinds in the same order.
                    _ => unreachable!("a group's rows differ in shape"),
                }
            }
            columns.event_runs.extend(std::iter::repeat_n(run_id.to_owned(), events.seq.len()));
            columns.events.seq.extend_from_slice(&events.seq);
            columns.events.at.extend_from_slice(&events.at);
            columns.events.kind.extend_from_slice(&events.kind);
            columns.events.round.extend_from_slice(&events.round);
            columns.events.data.extend_from_slice(&events.data);
            columns.events.hash.extend_from_slice(&events.hash);
        }
        columns
    }

    /// The arrays of a group of creates: every column of [`run_columns!`].
    fn creates(group: &[PlannedCreate]) -> GroupColumns {
        use Value::{Int, Text};
        GroupColumns::of(group.iter().map(|planned| {
            let r = &planned.row;
            let values = vec![
                Text(Some(&r.id)),
                Text(Some(&r.agent)),
                Text(Some(&r.status)),
                Int(Some(r.version)),
                Text(Some(&r.input)),
                Text(r.output.as_deref()),
                Text(r.termination_reason.as_deref()),
                Int(Some(r.iterations)),
                Int(Some(r.input_tokens)),
                Int(Some(r.output_tokens)),
                Text(Some(&r.created_by)),
                Int(Some(r.created_at)),
                Int(Some(r.updated_at)),
                Int(r.finished_at),
                Text(r.error.as_deref()),
                Text(r.suspension.as_deref()),
                Text(r.turn_digest.as_deref()),
                Text(r.required_calls.as_deref()),
                Text(r.decisions.as_deref()),
                Int(r.expires_at),
                Text(r.lease_owner.as_deref()),
                Int(r.lease_expires_at),
                Int(Some(r.last_seq)),
                Text(Some(&r.last_hash)),
                Text(r.metadata.as_deref()),
            ];
            (values, r.id.as_str(), &planned.columns)
        }))
    }

    /// The arrays of a group of transitions: the id, the columns a transition sets, the row as read.
    fn transitions(group: &[PlannedTransition]) -> GroupColumns {
        use Value::{Int, Text};
        GroupColumns::of(group.iter().map(|planned| {
            let r = &planned.changes;
            let values = vec![
                Text(Some(&planned.next.id)),
                Text(Some(&r.status)),
                Int(Some(r.version)),
                Text(r.output.as_deref()),
                Text(r.termination_reason.as_deref()),
                Int(Some(r.iterations)),
                Int(Some(r.input_tokens)),
                Int(Some(r.output_tokens)),
                Int(Some(r.updated_at)),
                Int(r.finished_at),
                Text(r.error.as_deref()),
                Text(r.suspension.as_deref()),
                Text(r.turn_digest.as_deref()),
                Text(r.required_calls.as_deref()),
                Text(r.decisions.as_deref()),
                Int(r.expires_at),
                Text(r.lease_owner.as_deref()),
                Int(r.lease_expires_at),
                Int(Some(r.last_seq)),
                Text(Some(&r.last_hash)),
                Int(Some(planned.read_as.0)),
                Int(Some(planned.read_as.1)),
                Int(planned.read_as.2),
            ];
            (values, planned.next.id.as_str(), &planned.columns)
        }))
    }

    /// Binds the arrays in parameter order, then the events' (run id first).
    fn bind(self, query: IdsQuery<'_>) -> IdsQuery<'_> {
        let GroupColumns { mut texts, mut ints, order, events, event_runs } = self;
        let mut query = query;
        for at in order {
            query = match at {
                Ok(i) => query.bind(std::mem::take(&mut texts[i])),
                Err(i) => query.bind(std::mem::take(&mut ints[i])),
            };
        }
        query
            .bind(event_runs)
            .bind(events.seq)
            .bind(events.at)
            .bind(events.kind)
            .bind(events.round)
            .bind(events.data)
            .bind(events.hash)
    }
}

/// A grouped write statement, answering the ids of the runs it wrote.
type IdsQuery<'q> = QueryScalar<'q, Postgres, String, PgArguments>;

/// An append planned on a row: the row it leaves (answering its `last_seq`) and its events.
struct PlannedAppend {
    after: RunRow,
    columns: EventColumns,
    /// The events as served, for the taps once committed.
    stored: Vec<StoredEvent>,
    read_as: (i64, i64, Option<i64>),
}

/// The PostgreSQL [`RunStore`]: a connection pool, one statement per write guarded by a compare-and-set
/// on the row as read, row locks when that loses a race.
#[derive(Clone)]
pub struct PostgresStore {
    /// The pool, and the connections kept between statements (see [`crate::pg_connections`]).
    connections: Arc<Connections>,
    secrets: Secrets,
    /// Seals and opens the encrypted columns; `None`: plaintext.
    keys: Option<Arc<DataKeys>>,
    /// The changes other nodes commit (see [`crate::pg_notify`]).
    feed: Arc<Announcements>,
    /// The rows writes plan on before reading (see [`RowCache`]).
    cache: Arc<RowCache>,
    /// Handed each commit's events (see [`RunStore::tap_commits`]).
    taps: Arc<Taps>,
    /// Creates and transitions waiting for a statement of their kind (see [`crate::pg_groups`]).
    reads: Arc<Groups<ReadRun, Option<RunRow>>>,
    creates: Arc<Groups<PlannedCreate, Option<RunRecord>>>,
    transitions: Arc<Groups<PlannedTransition, Option<RunRecord>>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// The pool of one host: `TCP_NODELAY` on each new connection, and with several hosts a check that the
/// server is still what the store needs (after a failover a host may answer as a standby: such a
/// connection is refused, and the pool tries again while the store looks for the new primary).
///
/// `wait` bounds how long a statement waits for a connection, connecting included: sqlx retries a
/// refused connection until then, so a database that restarts within it serves the statement.
fn pool_of(options: PgConnectOptions, targets: Arc<Targets>, wait: Duration) -> sqlx::PgPool {
    // A Unix socket has no Nagle delay (see `pg_nodelay`).
    let tcp_port = options.get_socket().is_none().then(|| options.get_port());
    PgPoolOptions::new()
        .after_connect(move |connection, _| {
            let targets = Arc::clone(&targets);
            Box::pin(async move {
                if let Some(port) = tcp_port {
                    pg_nodelay::set_nodelay_to(port).await;
                }
                if targets.several() && !targets.accepts(connection).await? {
                    return Err(sqlx::Error::Protocol("this PostgreSQL host is no longer what the store needs".into()));
                }
                Ok(())
            })
        })
        .max_connections(POOL_SIZE)
        .acquire_timeout(wait)
        // sqlx's default pings every connection it hands out: a round trip before each write.
        // Ping only one that has been idle for a while (a server restarted or a firewall that
        // dropped it meanwhile); one that answered moments ago runs the same risk as after a ping.
        .test_before_acquire(false)
        .before_acquire(|connection, meta| {
            Box::pin(async move { Ok(meta.idle_for < PING_IF_IDLE_FOR || connection.ping().await.is_ok()) })
        })
        .connect_lazy_with(options)
}

/// The URL of the one host of `url` a store would use now: with several hosts (libpq's
/// `HOST1:PORT,HOST2:PORT`), the first in order that is what `target_session_attrs` asks (by default,
/// writable), as a URL naming that host alone (and without `target_session_attrs`); with one host, that
/// host's URL, once it answered (and, with `target_session_attrs`, will do). For tools that need a
/// single server, such as `tollgate bench --store` making its scratch schemas; a store itself takes the
/// whole list and follows a failover.
///
/// # Errors
/// A URL that cannot be read ([`StoreError::Database`]); no host that will do ([`StoreError::Unreachable`],
/// with several hosts naming each and why; never the password).
pub async fn host_url(url: &str) -> Result<String, StoreError> {
    let secrets = Secrets::from_url(url);
    let targets = Targets::parse(url).map_err(|e| database_error(&secrets, "cannot read the PostgreSQL URL", &e))?;
    let (index, connection) =
        targets.select().await.map_err(|e| database_error(&secrets, "cannot connect to PostgreSQL", &e))?;
    crate::pg_targets::close_quietly(connection).await;
    Ok(targets.url(index).to_owned())
}

impl PostgresStore {
    /// Connects to `postgres://USER[:PASSWORD]@HOST:PORT/DB[?…]` and applies the embedded migrations
    /// (under an advisory lock, so nodes starting together migrate once). The URL may name several
    /// hosts, libpq's way (`HOST1:PORT,HOST2:PORT`, with `target_session_attrs`): the store uses the
    /// first it can write to and follows a failover (see `pg_targets`).
    ///
    /// # Errors
    /// [`StoreError::NewerSchema`] when the database was written by a newer Tollgate;
    /// when it cannot be reached or migrated, the error its SQLSTATE names ([`StoreError::Unreachable`],
    /// [`StoreError::ReadOnly`], ...; never containing the password).
    pub async fn open(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::open_with(url, StoreOptions::default()).await
    }

    /// [`PostgresStore::open`] with `options` (data keys for encryption at rest).
    ///
    /// # Errors
    /// As [`PostgresStore::open`].
    pub async fn open_with(url: &str, store_options: StoreOptions) -> Result<PostgresStore, StoreError> {
        let secrets = Secrets::from_url(url);
        let node = pg_notify::node_tag();
        let targets =
            Targets::parse(url).map_err(|e| database_error(&secrets, "invalid PostgreSQL URL", &e))?.map(|options| {
                options
                    .application_name("tollgate")
                    // The tag each write copies into its notification, so this store skips its own.
                    .options([(pg_notify::NODE_SETTING, node.as_str())])
            });
        let targets = Arc::new(targets);
        // One direct connection first: an unreachable server or a bad password is reported at once
        // (a pool would retry until its acquire timeout), and it applies the migrations. With several
        // hosts, it is to the first that will do, which the store then uses.
        let (index, mut connection) =
            targets.select().await.map_err(|e| database_error(&secrets, "cannot connect to PostgreSQL", &e))?;
        targets.choose(index);
        let migrated = migrate(&mut connection, &secrets).await;
        if let Err(error) = connection.close().await {
            tracing::debug!(%error, "cannot close the migration connection cleanly");
        }
        migrated?;
        let feed = Arc::new(Announcements::new(node, Arc::clone(&targets)));
        let make_pool = {
            let targets = Arc::clone(&targets);
            let wait = store_options.connect_timeout;
            Box::new(move |options: PgConnectOptions| pool_of(options, Arc::clone(&targets), wait))
        };
        let connections =
            Arc::new(Connections::new(targets, make_pool, POOL_SIZE as usize, store_options.connect_timeout));
        Ok(PostgresStore {
            connections,
            secrets,
            keys: store_options.data_keys,
            feed,
            cache: Arc::default(),
            taps: Arc::default(),
            reads: Arc::new(Groups::new(GROUPS_AT_ONCE)),
            creates: Arc::new(Groups::new(GROUPS_AT_ONCE)),
            transitions: Arc::new(Groups::new(GROUPS_AT_ONCE)),
        })
    }

    /// The tag this store's writes carry in their change notifications (the session setting
    /// `tollgate.node`), unique to this store among the nodes of a database.
    pub fn node(&self) -> &str {
        self.feed.node()
    }

    /// Closes every connection of the pool.
    pub async fn close(self) {
        self.connections.close().await;
    }

    /// A connection for the next statement (see [`crate::pg_connections`]).
    pub(crate) async fn connection(&self) -> Result<Held<'_>, StoreError> {
        self.connections.acquire().await.map_err(self.db_error("cannot reach PostgreSQL"))
    }

    /// The port the server sees this store's next statement come from (`inet_client_port()`).
    #[cfg(test)]
    pub(crate) async fn client_port(&self) -> Result<i32, StoreError> {
        let mut connection = self.connection().await?;
        let port = sqlx::query_scalar("SELECT inet_client_port()")
            .fetch_one(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the client port"))?;
        connection.finished();
        Ok(port)
    }

    fn keys(&self) -> Option<&DataKeys> {
        self.keys.as_deref()
    }

    /// The data keys, for the seal migration (`crate::pg_sealing`).
    pub(crate) fn data_keys(&self) -> Option<&DataKeys> {
        self.keys()
    }

    /// Forgets the row this store remembers for run `id` (its next write reads it again).
    pub(crate) fn forget_row(&self, id: &str) {
        self.cache.remove(id);
    }

    pub(crate) fn db_error<'a>(&'a self, context: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| database_error(&self.secrets, context, &e)
    }

    /// [`PostgresStore::db_error`] for a read of run `id`: corrupted data met there is that run's.
    fn run_failed<'a>(&'a self, context: &'a str, id: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| run_error(&self.secrets, context, id, &e)
    }

    async fn probe(&self) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        sqlx::query(PROBE)
            .bind(migrations::now_millis())
            .execute(&mut *connection)
            .await
            .map_err(self.db_error("cannot write the probe"))?;
        connection.finished();
        Ok(())
    }

    /// Reads each table (see [`TABLES`]); a table whose read fails with corrupted data is a line of the
    /// answer, any other failure the error.
    async fn check_tables(&self, depth: IntegrityCheck) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        for table in TABLES {
            let sql = match depth {
                IntegrityCheck::Quick => format!("SELECT COUNT(*) FROM (SELECT 1 FROM {table} LIMIT 1) AS t"),
                IntegrityCheck::Full => format!("SELECT COUNT(*) FROM {table}"),
            };
            let mut connection = self.connection().await?;
            let read: Result<i64, sqlx::Error> =
                sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut *connection).await;
            match read.map_err(self.db_error("cannot check the database")) {
                Ok(_) => connection.finished(),
                Err(StoreError::CorruptDatabase(detail)) => problems.push(format!("table {table}: {detail}")),
                Err(error) => return Err(error),
            }
        }
        Ok(problems)
    }

    /// A write's events as the arrays its statement unnests, data sealed when there are keys.
    fn event_columns(&self, run_id: &str, events: &[StoredEvent]) -> Result<EventColumns, StoreError> {
        let mut columns = EventColumns::default();
        for event in events {
            let row = EventRow::encode(run_id, event, self.keys())?;
            columns.seq.push(row.seq);
            columns.at.push(row.at);
            columns.kind.push(row.kind.to_owned());
            columns.round.push(row.round);
            columns.data.push(row.data);
            columns.hash.push(row.hash);
        }
        Ok(columns)
    }

    async fn create_run(&self, run: RunRecord, events: Vec<NewEvent>) -> Result<RunRecord, StoreError> {
        let (run, stored) = plan_create(run, events, chain_key(self.keys()));
        let row = RunRow::encode(&run, self.keys(), None)?;
        let columns = self.event_columns(&run.id, &stored)?;
        let id = run.id.clone();
        self.creates
            .run(PlannedCreate { run, row, columns, stored }, self.runner())
            .await?
            .ok_or(StoreError::Duplicate(id))
    }

    /// What makes the statements of `W`'s groups (see [`crate::pg_groups`]).
    fn runner<W: GroupKind>(&self) -> Runner<W, W::Output>
    where
        W::Output: Send + 'static,
        W::Together: Send,
    {
        let store = self.clone();
        Arc::new(move |group, since| {
            let store = store.clone();
            Box::pin(async move { store.run_group(group, since).await })
        })
    }

    /// The statement of a group, on one connection: for several operations the grouped one
    /// ([`GroupKind::together`]), else — or when it failed for a reason of the data, or could not tell
    /// its runs apart — each alone ([`GroupKind::alone`]). See [`crate::pg_groups`].
    async fn run_group<W: GroupKind>(&self, group: Vec<W>, since: Instant) -> Vec<Answer<W::Output>> {
        let connection = self.connections.acquire_since(since).await.map_err(self.db_error("cannot reach PostgreSQL"));
        let mut connection = match connection {
            Ok(connection) => connection,
            Err(error) => return group.iter().map(|_| Err(error.clone())).collect(),
        };
        if group.len() > 1 {
            match W::together(self, &mut connection, &group).await {
                Ok(Some(mut result)) => {
                    connection.finished();
                    return group.into_iter().map(|operation| operation.answer(self, &mut result)).collect();
                }
                Ok(None) => tracing::debug!(kind = W::KIND, "a grouped statement answered for no run in particular"),
                Err(error) if each_alone_after(&error) => {
                    tracing::debug!(kind = W::KIND, %error, "a grouped statement failed; its operations are made alone");
                }
                Err(error) => return group.iter().map(|_| Err(error.clone())).collect(),
            }
        }
        let mut answers = Vec::with_capacity(group.len());
        let mut clean = true;
        for operation in group {
            let answer = operation.alone(self, &mut connection).await;
            clean &= answer.is_ok();
            answers.push(answer);
        }
        if clean {
            connection.finished();
        }
        answers
    }

    /// Runs a grouped statement; answers the ids it wrote.
    async fn write_grouped(
        &self,
        connection: &mut PgConnection,
        statement: &'static str,
        columns: GroupColumns,
    ) -> Result<HashSet<String>, StoreError> {
        let ids: Vec<String> = columns
            .bind(sqlx::query_scalar(statement))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot write a group of runs"))?;
        Ok(ids.into_iter().collect())
    }

    /// A transition (see [`RunStore::transition`]) planned on the row remembered, if any: one statement
    /// (alone or grouped) if no one changed the row since. A plan refused there proves nothing (the row
    /// may have moved), nor does a row changed since: then it is made again on the row read.
    async fn transition_run(
        &self,
        id: &str,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<RunRecord, StoreError> {
        if let Some(row) = self.cache.get(id) {
            if let Ok(planned) = self.plan_transition_on(row, &guard, &transition, events.clone(), now)
                && let Some(next) = self.transitions.run(planned, self.runner()).await?
            {
                return Ok(next);
            }
            self.cache.remove(id);
        }
        let mut connection = self.connection().await?;
        let next = self.transition_on(&mut connection, id, guard, transition, events, now).await?;
        connection.finished();
        Ok(next)
    }

    /// A transition (see [`RunStore::transition`]) on `connection`, planned on the row read.
    async fn transition_on(
        &self,
        connection: &mut PgConnection,
        id: &str,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<RunRecord, StoreError> {
        let row = self.read_for_write(connection, SELECT_RUN, id).await?;
        let planned = self.plan_transition_on(row, &guard, &transition, events.clone(), now)?;
        if let Some((next, stored)) = self.write_transition(connection, planned).await? {
            self.taps.fire(id, &stored);
            return Ok(next);
        }
        // The row changed since it was read: plan again on it locked, where no one can change it first.
        let mut tx = connection.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let row = self.read_for_write(&mut tx, SELECT_RUN_FOR_UPDATE, id).await?;
        let planned = self.plan_transition_on(row, &guard, &transition, events, now)?;
        let Some((next, stored)) = self.write_transition(&mut tx, planned).await? else {
            return Err(StoreError::Conflict { id: id.to_owned(), conflict: Conflict::ConcurrentUpdate });
        };
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        self.taps.fire(id, &stored);
        Ok(next)
    }

    /// Run `id`'s row, read with `select` (locking it or not); remembered as read.
    async fn read_for_write(
        &self,
        connection: &mut PgConnection,
        select: &'static str,
        id: &str,
    ) -> Result<RunRow, StoreError> {
        let found = sqlx::query(select)
            .bind(id)
            .fetch_optional(&mut *connection)
            .await
            .map_err(self.db_error("cannot read a run"))?;
        let Some(row) = found else {
            self.cache.remove(id);
            return Err(StoreError::NotFound(id.to_owned()));
        };
        let row = read_run_row(&row)?;
        self.cache.put(row.clone());
        Ok(row)
    }

    /// Plans a transition on `row`.
    fn plan_transition_on(
        &self,
        row: RunRow,
        guard: &Guard,
        transition: &Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<PlannedTransition, StoreError> {
        let read_as = (row.version, row.last_seq, row.lease_expires_at);
        // With keys, the stored row lets unchanged sealed values be kept rather than sealed again.
        let (current, before) = match self.keys() {
            None => (row.decode(None)?, None),
            keys => (row.clone().decode(keys)?, Some(row)),
        };
        let (next, stored) = plan_transition(&current, guard, transition, events, now, chain_key(self.keys()))?;
        let changes = RunRow::encode(&next, self.keys(), before.as_ref().map(|row| (&current, row)))?;
        let columns = self.event_columns(&current.id, &stored)?;
        Ok(PlannedTransition { next, changes, columns, stored, read_as })
    }

    /// Writes a planned transition if the row is still as planned on (and remembers the row written);
    /// `None` when it is not. With the new record, its events for the taps, which the caller fires
    /// once the write is committed.
    async fn write_transition(
        &self,
        connection: &mut PgConnection,
        planned: PlannedTransition,
    ) -> Result<Option<(RunRecord, Vec<StoredEvent>)>, StoreError> {
        let PlannedTransition { next, changes, columns, stored, read_as } = planned;
        let query = bind_run_changes!(sqlx::query_scalar(UPDATE_RUN), &changes)
            .bind(&next.id)
            .bind(read_as.0)
            .bind(read_as.1)
            .bind(read_as.2);
        let updated: i64 =
            columns.bind(query).fetch_one(&mut *connection).await.map_err(self.db_error("cannot update a run"))?;
        if updated != 1 {
            return Ok(None);
        }
        // `changes` holds every column; those the statement leaves alone (id, agent, input, created_*,
        // metadata) never change, and decode as stored.
        self.cache.put(changes);
        Ok(Some((next, stored)))
    }

    /// An append (see [`RunStore::append`]) on `connection`; answers the new `last_seq`.
    async fn append_on(
        &self,
        connection: &mut PgConnection,
        id: &str,
        owner: &str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> Result<u64, StoreError> {
        // As in a transition: on the row remembered first, then on the row read, then locked.
        if let Some(row) = self.cache.get(id) {
            if let Ok(planned) = self.plan_append_on(row, owner, events.clone(), lease_until)
                && let Some((last_seq, stored)) = self.write_append(connection, planned).await?
            {
                self.taps.fire(id, &stored);
                return Ok(last_seq);
            }
            self.cache.remove(id);
        }
        let row = self.read_for_write(connection, SELECT_RUN, id).await?;
        let planned = self.plan_append_on(row, owner, events.clone(), lease_until)?;
        if let Some((last_seq, stored)) = self.write_append(connection, planned).await? {
            self.taps.fire(id, &stored);
            return Ok(last_seq);
        }
        // The row changed since it was read: chain again on it locked, where no one can change it first.
        let mut tx = connection.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let row = self.read_for_write(&mut tx, SELECT_RUN_FOR_UPDATE, id).await?;
        let planned = self.plan_append_on(row, owner, events, lease_until)?;
        let Some((last_seq, stored)) = self.write_append(&mut tx, planned).await? else {
            return Err(StoreError::Conflict { id: id.to_owned(), conflict: Conflict::ConcurrentUpdate });
        };
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        self.taps.fire(id, &stored);
        Ok(last_seq)
    }

    /// Chains `events` after `row`'s chain head (checking the lease).
    fn plan_append_on(
        &self,
        row: RunRow,
        owner: &str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> Result<PlannedAppend, StoreError> {
        let read_as = (row.version, row.last_seq, row.lease_expires_at);
        let head = ChainHead {
            status: row.status.clone(),
            lease_owner: row.lease_owner.clone(),
            last_seq: row.last_seq,
            last_hash: row.last_hash.clone(),
        };
        let (stored, last_seq, last_hash) = plan_append(&row.id, owner, head, events, chain_key(self.keys()))?;
        let columns = self.event_columns(&row.id, &stored)?;
        let after = RunRow {
            last_seq: i64::try_from(last_seq).unwrap_or(i64::MAX),
            last_hash,
            lease_expires_at: Some(lease_until),
            ..row
        };
        Ok(PlannedAppend { after, columns, stored, read_as })
    }

    /// Writes a planned append if the row is still as planned on (and remembers the row written);
    /// `None` when it is not. With the new `last_seq`, its events for the taps, which the caller
    /// fires once the write is committed.
    async fn write_append(
        &self,
        connection: &mut PgConnection,
        planned: PlannedAppend,
    ) -> Result<Option<(u64, Vec<StoredEvent>)>, StoreError> {
        let PlannedAppend { after, columns, stored, read_as } = planned;
        let query = sqlx::query_scalar(APPEND_EVENTS)
            .bind(after.last_seq)
            .bind(&after.last_hash)
            .bind(after.lease_expires_at)
            .bind(&after.id)
            .bind(read_as.0)
            .bind(read_as.1)
            .bind(read_as.2);
        let updated: i64 =
            columns.bind(query).fetch_one(&mut *connection).await.map_err(self.db_error("cannot update a run"))?;
        if updated != 1 {
            return Ok(None);
        }
        let last_seq = u64::try_from(after.last_seq).unwrap_or(0);
        self.cache.put(after);
        Ok(Some((last_seq, stored)))
    }

    async fn get_run(&self, id: &str) -> Result<RunRecord, StoreError> {
        let found = self.reads.run(ReadRun(id.to_owned()), self.runner()).await;
        let decoded = found.and_then(|row| {
            let row = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
            Ok((row.clone().decode(self.keys())?, row))
        });
        match decoded {
            Ok((run, row)) => {
                self.cache.put(row);
                Ok(run)
            }
            Err(error) => {
                self.cache.remove(id);
                Err(error)
            }
        }
    }

    async fn list_runs(&self, query: RunQuery) -> Result<RunPage, StoreError> {
        if query.limit == 0 {
            return Ok(RunPage { runs: Vec::new(), next_cursor: None, skipped: Vec::new() });
        }
        // One extra row tells whether another page exists. At most 8 distinct statements come out of
        // this, so each stays prepared in the connection's statement cache.
        let mut n = 0;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        let status = query.status.is_some().then(&mut param);
        let agent = query.agent.is_some().then(&mut param);
        let cursor = query.cursor.is_some().then(&mut param);
        let limit = param();
        let sql = list_statement(status.as_deref(), agent.as_deref(), cursor.as_deref(), &limit);
        let mut statement = sqlx::query(AssertSqlSafe(sql));
        if let Some(status) = query.status {
            statement = statement.bind(status.as_str());
        }
        if let Some(agent) = &query.agent {
            statement = statement.bind(agent);
        }
        if let Some(cursor) = &query.cursor {
            statement = statement.bind(cursor);
        }
        let mut connection = self.connection().await?;
        let rows = statement
            .bind(i64::from(query.limit) + 1)
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot list runs"))?;
        connection.finished();
        let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
        let next_cursor = if rows.len() > limit {
            rows.get(limit - 1).and_then(|row| row.try_get::<String, _>(0).ok())
        } else {
            None
        };
        let page = &rows[..rows.len().min(limit)];
        let (runs, skipped) = split_readable(page.iter().map(|row| decode_run(row, self.keys())), "list");
        Ok(RunPage { runs, next_cursor, skipped })
    }

    async fn resolve(&self, prefix: &str) -> Result<String, StoreError> {
        let upper = prefix_upper_bound(prefix);
        let mut connection = self.connection().await?;
        let first: Vec<String> = sqlx::query_scalar(PREFIX_FIRST)
            .bind(prefix)
            .bind(&upper)
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot look up a run id prefix"))?;
        let count = if first.len() > 1 {
            sqlx::query_scalar(PREFIX_COUNT)
                .bind(prefix)
                .bind(&upper)
                .bind(PREFIX_COUNT_CAP + 1)
                .fetch_one(&mut *connection)
                .await
                .map_err(self.db_error("cannot count a run id prefix"))?
        } else {
            0
        };
        connection.finished();
        resolve_prefix_answer(prefix, first, count)
    }

    async fn read_events(&self, id: &str, after: u64, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_EVENTS)
            .bind(id)
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.run_failed("cannot read events", id))?;
        if rows.is_empty() {
            let exists = sqlx::query(RUN_EXISTS)
                .bind(id)
                .fetch_optional(&mut *connection)
                .await
                .map_err(self.db_error("cannot read a run"))?;
            if exists.is_none() {
                connection.finished();
                return Err(StoreError::NotFound(id.to_owned()));
            }
        }
        connection.finished();
        rows.iter().map(|row| decode_event(id, row, self.keys())).collect()
    }

    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let mut connection = self.connection().await?;
        let rows: Vec<(String, i64)> = sqlx::query_as("SELECT status, COUNT(*) FROM runs GROUP BY status")
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot count runs"))?;
        connection.finished();
        Ok(status_counts(rows))
    }

    /// Claims up to `limit` of the oldest queued runs no other node is claiming, on `connection`, in
    /// one transaction of four round trips whatever `limit` is: the queued rows are selected and locked
    /// in `runs_queue`'s order with `FOR UPDATE SKIP LOCKED` (rows another node's claim holds are passed
    /// over, never waited for; only the rows selected are locked), each claim is planned on its row,
    /// and one statement ([`CLAIM_RUNS`]) writes them all. A row that cannot be read or claimed is
    /// passed over with a warning (it stays queued), and another is selected in its place.
    async fn claim_on(
        &self,
        connection: &mut PgConnection,
        agents: &[String],
        limit: u32,
        lease: Lease,
        now: Millis,
    ) -> Result<Vec<Claimed>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut tx =
            connection.begin_with(BEGIN_QUEUE_READ).await.map_err(self.db_error("cannot begin a transaction"))?;
        let claim = Transition::Claim { lease };
        let mut planned: Vec<PlannedTransition> = Vec::new();
        let mut queued_at: Vec<Millis> = Vec::new();
        let mut passed_over: Vec<String> = Vec::new();
        loop {
            let wanted = limit - u32::try_from(planned.len()).unwrap_or(limit);
            let rows = sqlx::query(SELECT_QUEUED_FOR_CLAIM)
                .bind(agents)
                .bind(i64::from(wanted))
                .bind(&passed_over)
                .fetch_all(&mut *tx)
                .await
                .map_err(self.db_error("cannot read queued runs"))?;
            let selected = rows.len();
            let mut unnamed = false;
            for row in &rows {
                let run = read_run_row(row).and_then(|row| {
                    let at = row.updated_at;
                    let guard = Guard::Version(u64::try_from(row.version).unwrap_or_default());
                    Ok((at, self.plan_transition_on(row, &guard, &claim, Vec::new(), now)?))
                });
                match run {
                    Ok((at, plan)) => {
                        queued_at.push(at);
                        planned.push(plan);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "a queued run cannot be claimed; passed over");
                        match row.text(0) {
                            Ok(id) => passed_over.push(id),
                            Err(_) => unnamed = true,
                        }
                    }
                }
            }
            // Done when the queue has no more (fewer rows than asked), the claim is full, or a row that
            // cannot even be named would be selected again.
            let full = planned.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
            if full || unnamed || selected < usize::try_from(wanted).unwrap_or(usize::MAX) {
                break;
            }
        }
        if planned.is_empty() {
            tx.commit().await.map_err(self.db_error("cannot commit"))?;
            return Ok(Vec::new());
        }
        let written = self.write_grouped(&mut tx, CLAIM_RUNS.as_str(), GroupColumns::transitions(&planned)).await?;
        if let Some(changed) = planned.iter().find(|plan| !written.contains(&plan.next.id)) {
            // Locked since they were read: no one else can have changed them.
            return Err(StoreError::Database(format!("queued run {} changed under its claim", changed.next.id)));
        }
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        // A claim appends no events: nothing for the taps.
        Ok(planned
            .into_iter()
            .zip(queued_at)
            .map(|(plan, queued_at)| {
                self.cache.put(plan.changes);
                Claimed { run: plan.next, queued_at }
            })
            .collect())
    }

    /// When the run queued longest was queued (see [`RunStore::oldest_queued`]).
    async fn oldest_queued_at(&self) -> Result<Option<Millis>, StoreError> {
        let mut connection = self.connection().await?;
        let mut tx =
            connection.begin_with(BEGIN_QUEUE_READ).await.map_err(self.db_error("cannot begin a transaction"))?;
        let oldest = sqlx::query_scalar(SELECT_OLDEST_QUEUED)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db_error("cannot read the queue"))?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        connection.finished();
        Ok(oldest)
    }

    /// The plan PostgreSQL makes now for a claim of up to `limit` runs of `agents` (`EXPLAIN` of the
    /// claim's own statement in its own transaction, rolled back), one line of text per line: for an
    /// operator who wonders why the queue drains slowly, and for the test that holds the plan to the
    /// queue's index whatever the table's statistics.
    ///
    /// # Errors
    /// The server cannot be reached or refuses the statement.
    pub async fn claim_plan(&self, agents: &[String], limit: u32) -> Result<Vec<String>, StoreError> {
        let failed = self.db_error("cannot explain the claim");
        let mut connection = self.connection().await?;
        let mut tx = connection.begin_with(BEGIN_QUEUE_READ).await.map_err(&failed)?;
        let explain = format!("EXPLAIN {SELECT_QUEUED_FOR_CLAIM}");
        let plan: Vec<String> = sqlx::query_scalar(AssertSqlSafe(explain))
            .bind(agents)
            .bind(i64::from(limit))
            .bind(Vec::<String>::new())
            .fetch_all(&mut *tx)
            .await
            .map_err(&failed)?;
        tx.rollback().await.map_err(&failed)?;
        connection.finished();
        Ok(plan)
    }

    async fn due_runs(&self, now: Millis, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_DUE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read due runs"))?;
        connection.finished();
        Ok(decode_runs_skipping_corrupt(&rows, "due", self.keys()))
    }

    async fn read_committed(&self, after: Option<&str>, limit: u32) -> Result<CommittedPage, StoreError> {
        let mut connection = self.connection().await?;
        let Some(after) = after else {
            let end: i64 = sqlx::query_scalar(COMMITTED_END)
                .fetch_one(&mut *connection)
                .await
                .map_err(self.db_error("cannot read the commit log"))?;
            connection.finished();
            return Ok(CommittedPage { next: pg_position(end, "", 0), ..CommittedPage::default() });
        };
        let (tx, run_id, last_seq) = parse_pg_position(after)?;
        let rows = sqlx::query(SELECT_COMMITTED)
            .bind(tx)
            .bind(run_id)
            .bind(last_seq)
            .bind(i64::from(limit.max(1)))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the commit log"))?;
        connection.finished();
        let mut page = CommittedPage::default();
        let (mut horizon, mut last, mut batches) = (0, None, 0_u32);
        for row in &rows {
            horizon = row.try_get::<i64, _>(9).map_err(self.db_error("cannot read the commit log"))?;
            let next_xid: i64 = row.try_get(10).map_err(self.db_error("cannot read the commit log"))?;
            if tx > next_xid {
                return Err(position_ahead(after));
            }
            page.pending = next_xid > horizon;
            let batch: (Option<String>, Option<i64>, Option<i64>) = (
                row.try_get(6).map_err(self.db_error("cannot read the commit log"))?,
                row.try_get(7).map_err(self.db_error("cannot read the commit log"))?,
                row.try_get(8).map_err(self.db_error("cannot read the commit log"))?,
            );
            let (Some(run_id), Some(tx), Some(last_seq)) = batch else { continue };
            if last.as_ref() != Some(&(tx, run_id.clone(), last_seq)) {
                batches += 1;
                last = Some((tx, run_id.clone(), last_seq));
            }
            match decode_event(&run_id, row, self.keys()) {
                Ok(event) => page.events.push((run_id, event)),
                Err(error) => page.skipped.push((run_id, error)),
            }
        }
        page.more = batches >= limit.max(1);
        page.next = match last {
            Some((tx, run_id, last_seq)) if page.more => pg_position(tx, &run_id, last_seq),
            // Everything older than the horizon has been read: the next read starts there.
            _ if horizon > tx => pg_position(horizon, "", 0),
            _ => after.to_owned(),
        };
        Ok(page)
    }

    async fn hold(
        &self,
        name: &str,
        holder: &str,
        position: Option<&str>,
        until: Millis,
        now: Millis,
    ) -> Result<ReaderHold, StoreError> {
        let mut connection = self.connection().await?;
        let held: Option<Option<String>> = sqlx::query_scalar(HOLD_READER)
            .bind(name)
            .bind(holder)
            .bind(until)
            .bind(position)
            .bind(now)
            .fetch_optional(&mut *connection)
            .await
            .map_err(self.db_error("cannot hold a reader of the commit log"))?;
        let answer = match held {
            Some(position) => ReaderHold::Held { position },
            None => {
                let other: Option<(String, i64)> = sqlx::query_as(READER_HOLDER)
                    .bind(name)
                    .fetch_optional(&mut *connection)
                    .await
                    .map_err(self.db_error("cannot read a reader of the commit log"))?;
                let (holder, until) = other.unwrap_or_default();
                ReaderHold::Elsewhere { holder, until }
            }
        };
        connection.finished();
        Ok(answer)
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        sqlx::query(RELEASE_READER)
            .bind(name)
            .bind(holder)
            .execute(&mut *connection)
            .await
            .map_err(self.db_error("cannot release a reader of the commit log"))?;
        connection.finished();
        Ok(())
    }

    async fn purge_runs(&self, terminal_before: Millis, waiting_before: Millis, batch: u32) -> Result<u64, StoreError> {
        let mut connection = self.connection().await?;
        let deleted: Vec<String> = sqlx::query_scalar(PURGE)
            .bind(terminal_before)
            .bind(waiting_before)
            .bind(i64::from(batch))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot purge runs"))?;
        connection.finished();
        for id in &deleted {
            self.cache.remove(id);
        }
        Ok(u64::try_from(deleted.len()).unwrap_or(u64::MAX))
    }
}

/// Applies the migrations this build knows, in one transaction, under an advisory lock (per schema)
/// so that nodes starting together migrate once.
async fn migrate(connection: &mut PgConnection, secrets: &Secrets) -> Result<(), StoreError> {
    let error = |e: sqlx::Error| database_error(secrets, "cannot migrate the PostgreSQL database", &e);
    let mut tx = connection.begin().await.map_err(error)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('tollgate_migrations:' || current_schema()))")
        .execute(&mut *tx)
        .await
        .map_err(error)?;
    tx.execute(migrations::CREATE_TABLE).await.map_err(error)?;
    let found: Option<i64> = sqlx::query_scalar(migrations::SELECT_VERSION).fetch_one(&mut *tx).await.map_err(error)?;
    for migration in migrations::to_apply(MIGRATIONS, found.unwrap_or(0))? {
        tx.execute(sqlx::raw_sql(migration.sql)).await.map_err(error)?;
        sqlx::query("INSERT INTO tollgate_migrations (version, name, applied_at) VALUES ($1, $2, $3)")
            .bind(migration.version)
            .bind(migration.name)
            .bind(migrations::now_millis())
            .execute(&mut *tx)
            .await
            .map_err(error)?;
    }
    tx.commit().await.map_err(error)
}

impl RunRows for PostgresStore {
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>> {
        Box::pin(self.create_run(run, events))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        Box::pin(self.get_run(id))
    }

    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(self.resolve(prefix))
    }

    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>> {
        Box::pin(self.list_runs(query))
    }

    fn transition<'a>(
        &'a self,
        id: &'a str,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        Box::pin(self.transition_run(id, guard, transition, events, now))
    }

    fn append<'a>(
        &'a self,
        id: &'a str,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let mut connection = self.connection().await?;
            let last_seq = self.append_on(&mut connection, id, owner, events, lease_until).await?;
            connection.finished();
            Ok(last_seq)
        })
    }
}

impl EventLog for PostgresStore {
    fn events<'a>(
        &'a self,
        id: &'a str,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(self.read_events(id, after, limit))
    }

    fn chain_keys(&self) -> Option<&tollgate_agent_core::event::ChainKeys> {
        self.keys().map(DataKeys::chain_keys)
    }
}

impl RunQueue for PostgresStore {
    fn claim_queued<'a>(
        &'a self,
        agents: &'a [String],
        limit: u32,
        lease: Lease,
        now: Millis,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, StoreError>> {
        Box::pin(async move {
            let mut connection = self.connection().await?;
            let claimed = self.claim_on(&mut connection, agents, limit, lease, now).await?;
            connection.finished();
            Ok(claimed)
        })
    }

    fn oldest_queued(&self) -> BoxFuture<'_, Result<Option<Millis>, StoreError>> {
        Box::pin(self.oldest_queued_at())
    }
}

impl Schedules for PostgresStore {
    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.due_runs(now, limit))
    }

    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.purge_runs(terminal_before, waiting_before, batch))
    }
}

impl StoreHealth for PostgresStore {
    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>> {
        Box::pin(self.count_runs())
    }

    fn probe_write(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.probe())
    }

    fn check_integrity(&self, depth: IntegrityCheck) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(self.check_tables(depth))
    }
}

impl ChangeFeed for PostgresStore {
    fn committed<'a>(&'a self, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Result<CommittedPage, StoreError>> {
        Box::pin(self.read_committed(after, limit))
    }

    fn hold_reader<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        position: Option<&'a str>,
        until: Millis,
        now: Millis,
    ) -> BoxFuture<'a, Result<ReaderHold, StoreError>> {
        Box::pin(self.hold(name, holder, position, until, now))
    }

    fn release_reader<'a>(&'a self, name: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.release(name, holder))
    }

    fn changes(&self) -> Option<BoxStream<'static, StoreChange>> {
        self.feed.subscribe()
    }

    fn announces_changes(&self) -> bool {
        self.feed.listening()
    }

    fn hosts(&self) -> Option<tollgate_agent_core::StoreHosts> {
        Some(self.connections.hosts())
    }

    fn tap_commits(&self, tap: &tollgate_agent_core::CommitTap) -> bool {
        self.taps.add(tap);
        true
    }
}

/// The statement of a page of runs, with the parameter named for each filter given (`$1`, ...): newest
/// first, `limit` rows. One agent's runs of every status are read as one id-ordered scan of
/// `runs_agent_status_id` per status, merged (migration 8 dropped the index on agent alone).
fn list_statement(status: Option<&str>, agent: Option<&str>, cursor: Option<&str>, limit: &str) -> String {
    let before = cursor.map(|c| format!(" AND id < {c}")).unwrap_or_default();
    let select = concat!("SELECT ", run_columns!(), " FROM runs WHERE");
    match (status, agent) {
        (None, Some(agent)) => {
            let branches: Vec<String> = RunStatus::ALL
                .iter()
                .map(|s| {
                    format!(
                        "({select} agent = {agent} AND status = '{}'{before} ORDER BY id DESC LIMIT {limit})",
                        s.as_str()
                    )
                })
                .collect();
            format!("SELECT * FROM ({}) AS page ORDER BY id DESC LIMIT {limit}", branches.join(" UNION ALL "))
        }
        (status, agent) => {
            let status = status.map(|s| format!(" AND status = {s}")).unwrap_or_default();
            let agent = agent.map(|a| format!(" AND agent = {a}")).unwrap_or_default();
            format!("{select} TRUE{status}{agent}{before} ORDER BY id DESC LIMIT {limit}")
        }
    }
}

/// A schema of its own on a PostgreSQL server, for tests and benchmarks that share one database: runs
/// kept in it are seen (and, by a worker pool, claimed) only by stores opened on [`ScratchSchema::url`].
#[derive(Debug)]
pub struct ScratchSchema {
    base: String,
    name: String,
}

/// A scratch schema's prefix is lowercase ASCII letters, digits and `_`.
fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return Err(StoreError::Database(format!("a schema prefix is lowercase letters, digits and _: {prefix:?}")));
    }
    Ok(())
}

/// When scratch schema `name` (`PREFIX_PID_NANOS_N`) was made, in nanoseconds since the Unix epoch;
/// `None` for a name of another shape.
fn scratch_schema_time(name: &str, prefix: &str) -> Option<u128> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('_')?;
    let parts: Vec<&str> = rest.split('_').collect();
    let [pid, nanos, n] = parts.as_slice() else { return None };
    if [pid, nanos, n].iter().any(|part| part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    nanos.parse().ok()
}

impl ScratchSchema {
    /// Creates a fresh schema `PREFIX_PID_NANOS_N` on the server of `base` (a `postgres://` URL).
    ///
    /// # Errors
    /// A `prefix` that is not lowercase ASCII letters, digits and `_` is [`StoreError::Database`], as is
    /// a server that cannot be reached or refuses `CREATE SCHEMA`.
    pub async fn create(base: &str, prefix: &str) -> Result<ScratchSchema, StoreError> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        check_prefix(prefix)?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}_{}_{nanos}_{n}", std::process::id());
        let schema = ScratchSchema { base: base.to_owned(), name };
        schema.admin(&format!("CREATE SCHEMA {}", schema.name)).await?;
        Ok(schema)
    }

    /// Drops the schemas of `prefix` that [`ScratchSchema::create`] made more than `older_than` ago
    /// (by the time in their names): those of processes that ended without dropping theirs, such as
    /// test binaries. Answers how many it dropped. Other schemas, and names of another shape, are left
    /// alone.
    ///
    /// # Errors
    /// As [`ScratchSchema::create`] for the prefix and the server.
    pub async fn sweep(base: &str, prefix: &str, older_than: Duration) -> Result<u64, StoreError> {
        check_prefix(prefix)?;
        let secrets = Secrets::from_url(base);
        let failed = |e: sqlx::Error| database_error(&secrets, "cannot sweep scratch schemas", &e);
        let mut admin = PgConnection::connect(base).await.map_err(failed)?;
        // `_` is a LIKE wildcard: escaped, so only this prefix's names match.
        let pattern = format!("{}\\_%", prefix.replace('_', "\\_"));
        let names: Vec<String> = sqlx::query_scalar("SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE $1")
            .bind(pattern)
            .fetch_all(&mut admin)
            .await
            .map_err(failed)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut dropped = 0;
        for name in names {
            let Some(made) = scratch_schema_time(&name, prefix) else { continue };
            if now.saturating_sub(made) < older_than.as_nanos() {
                continue;
            }
            // The name is the prefix (checked) and digits: safe to write into the statement.
            admin.execute(AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE"))).await.map_err(failed)?;
            dropped += 1;
        }
        admin.close().await.map_err(failed)?;
        Ok(dropped)
    }

    /// [`ScratchSchema::sweep`] the first time this process asks for `prefix`; answers 0 after that.
    /// For test harnesses that open scratch schemas test after test.
    ///
    /// # Errors
    /// As [`ScratchSchema::sweep`].
    pub async fn sweep_once(base: &str, prefix: &str, older_than: Duration) -> Result<u64, StoreError> {
        static SWEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());
        {
            let mut swept = SWEPT.lock().unwrap_or_else(PoisonError::into_inner);
            if swept.iter().any(|p| p == prefix) {
                return Ok(0);
            }
            swept.push(prefix.to_owned());
        }
        ScratchSchema::sweep(base, prefix, older_than).await
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of a store in this schema (`options[search_path]`).
    pub fn url(&self) -> String {
        let separator = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{separator}options[search_path]={}", self.base, self.name)
    }

    /// Drops the schema and everything in it.
    ///
    /// # Errors
    /// The server cannot be reached or refuses.
    pub async fn drop_all(self) -> Result<(), StoreError> {
        self.admin(&format!("DROP SCHEMA {} CASCADE", self.name)).await
    }

    async fn admin(&self, statement: &str) -> Result<(), StoreError> {
        let secrets = Secrets::from_url(&self.base);
        let failed = |e: sqlx::Error| database_error(&secrets, "cannot manage a scratch schema", &e);
        let mut admin = PgConnection::connect(&self.base).await.map_err(failed)?;
        admin.execute(AssertSqlSafe(statement.to_owned())).await.map_err(failed)?;
        admin.close().await.map_err(failed)
    }
}
