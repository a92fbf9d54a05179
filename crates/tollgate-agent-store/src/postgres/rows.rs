//! The runs' rows ([`RunRows`]): create, get, resolve a prefix, list, and the compare-and-set
//! transitions and appends, each one statement guarded by the row as read (see the parent module);
//! the operations of different runs grouped into one statement per kind under load (see
//! [`crate::pg_groups`]), and the rows this store remembers to plan on before reading ([`RowCache`]).

use super::PostgresStore;
use crate::codec::{
    ChainHead, Columns, EventRow, PREFIX_COUNT_CAP, RunRow, bind_run_changes, bind_run_row, chain_key, database_error,
    decode_run, plan_append, plan_create, plan_transition, prefix_upper_bound, read_run_row, resolve_prefix_answer,
    run_columns, split_readable,
};
use crate::grant_rows::{GrantRow, record_uses, uses_in};
use crate::pg_groups::{Answer, Grouped, Runner, each_alone_after};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, Row};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::RunId;
use tollgate_agent_core::event::{NewEvent, StoredEvent};
use tollgate_agent_core::run::{Millis, RunRecord, RunStatus, Transition};
use tollgate_agent_core::store::{Conflict, Guard, RunPage, RunQuery, RunRows, StoreError};

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
    "$22, $23, $24, $25, $26, $27) ON CONFLICT (id) DO NOTHING RETURNING id, version, status, last_seq), ",
    "chained AS (INSERT INTO event_batches (run_id, last_seq, seqs, ats, kinds, rounds, datas, hashes) ",
    "SELECT created.id, ($28::BIGINT[])[cardinality($28::BIGINT[])], $28, $29::TEXT[], $30::TEXT[], ",
    "$31::BIGINT[], $32::TEXT[], $33::TEXT[] FROM created WHERE cardinality($28::BIGINT[]) > 0), ",
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
    "$20::BIGINT[], $21::TEXT[], $22::BIGINT[], $23::BIGINT[], $24::TEXT[], $25::TEXT[], $26::TEXT[], ",
    "$27::TEXT[]) AS i (",
    run_columns!(),
    ")), created AS (INSERT INTO runs (",
    run_columns!(),
    ") SELECT ",
    run_columns!(),
    " FROM input ON CONFLICT (id) DO NOTHING RETURNING id, version, status, last_seq), ",
    grouped_events!("created", "$28", "$29", "$30", "$31", "$32", "$33", "$34"),
    announcement!("created", "TRUE"),
    "SELECT id FROM created WHERE (SELECT COUNT(*) FROM announced) >= 0"
);
/// [`UPDATE_RUN`] for a group of runs (see `pg_groups`): the id, the columns a transition sets and the
/// row as read (`version`, `last_seq`, `lease_expires_at`), one array each, then the events' flat
/// arrays. Answers the ids it wrote (a row changed since it was read is not among them).
pub(super) const UPDATE_RUNS: &str = concat!(
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
pub(super) struct RowCache(Mutex<HashMap<String, RunRow>>);

impl RowCache {
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunRow>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<RunRow> {
        self.rows().get(id).cloned()
    }

    pub(super) fn put(&self, row: RunRow) {
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

    pub(super) fn remove(&self, id: &str) {
        self.rows().remove(id);
    }
}

/// A transition planned on a row: what it answers, the row it writes, and its statement's arguments.
pub(super) struct PlannedTransition {
    pub(super) next: RunRecord,
    pub(super) changes: RunRow,
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
        if !created.contains(self.run.id.as_str()) {
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
        if !written.contains(self.next.id.as_str()) {
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
pub(super) struct ReadRun(String);

impl Grouped for ReadRun {
    fn run_id(&self) -> &str {
        &self.0
    }
}

/// A create planned: what it answers, its row and its events.
pub(super) struct PlannedCreate {
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
pub(super) struct GroupColumns {
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
                Text(r.trace.as_deref()),
                Text(r.trace_parent.as_deref()),
            ];
            (values, r.id.as_str(), &planned.columns)
        }))
    }

    /// The arrays of a group of transitions: the id, the columns a transition sets, the row as read.
    pub(super) fn transitions(group: &[PlannedTransition]) -> GroupColumns {
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

impl PostgresStore {
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
        if !uses_in(&stored).is_empty() {
            return self.create_with_uses(PlannedCreate { run, row, columns, stored }).await;
        }
        self.creates
            .run(PlannedCreate { run, row, columns, stored }, self.runner())
            .await?
            .ok_or_else(|| StoreError::Duplicate(id.into_string()))
    }

    /// A run created with a granted call's start among its first events (a run whose first segment's
    /// held turn a grant cleared): the run inserted and the use counted in one transaction, the taps
    /// fired once it committed.
    async fn create_with_uses(&self, planned: PlannedCreate) -> Result<RunRecord, StoreError> {
        let PlannedCreate { run, row, columns, stored } = planned;
        let mut connection = self.connection().await?;
        let mut tx = connection.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let created: i64 = columns
            .bind(bind_run_row!(sqlx::query_scalar(CREATE_RUN), &row))
            .fetch_one(&mut *tx)
            .await
            .map_err(self.db_error("cannot insert a run"))?;
        if created != 1 {
            return Err(StoreError::Duplicate(run.id.into_string()));
        }
        self.count_uses(&mut tx, &uses_in(&stored)).await?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        connection.finished();
        self.cache.put(row);
        self.taps.fire(&run.id, &stored);
        Ok(run)
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
    pub(super) async fn write_grouped(
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

    /// A transition (see [`RunRows::transition`]) planned on the row remembered, if any: one statement
    /// (alone or grouped) if no one changed the row since. A plan refused there proves nothing (the row
    /// may have moved), nor does a row changed since: then it is made again on the row read.
    async fn transition_run(
        &self,
        id: &RunId,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<RunRecord, StoreError> {
        let remember = match &transition {
            Transition::Vote { remember, .. } => remember.as_slice(),
            _ => &[],
        };
        if !remember.is_empty() || record_uses(&events) {
            let grants = remember.iter().map(|grant| GrantRow::new(grant.clone()).map(|(row, _)| row));
            let grants = grants.collect::<Result<Vec<_>, _>>()?;
            return self.transition_with_grants(id, guard, transition, events, now, grants).await;
        }
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

    /// A transition (see [`RunRows::transition`]) on `connection`, planned on the row read.
    async fn transition_on(
        &self,
        connection: &mut PgConnection,
        id: &RunId,
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
            return Err(StoreError::Conflict { id: id.to_string(), conflict: Conflict::ConcurrentUpdate });
        };
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        self.taps.fire(id, &stored);
        Ok(next)
    }

    /// A transition that writes grants: a vote that makes some (its `remember`), or events that record
    /// a use of one (a granted call's start, with the claim of a resume): the row locked, the transition
    /// planned on it and written, the grants inserted and the uses counted, in one transaction, so that
    /// the grants exist, and a use is counted, exactly when the transition is (a guard that refuses, a
    /// grant that cannot be written: nothing is committed).
    async fn transition_with_grants(
        &self,
        id: &RunId,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
        grants: Vec<GrantRow>,
    ) -> Result<RunRecord, StoreError> {
        self.write_locked(id, &grants, async |tx, row| {
            let planned = self.plan_transition_on(row, &guard, &transition, events, now)?;
            self.write_transition(tx, planned).await
        })
        .await
    }

    /// The locked path of a write that writes grants too (see [`Self::transition_with_grants`] and
    /// [`Self::append_with_uses`]): in one transaction, run `id`'s row read under its lock, `write` on
    /// it (`None`: it did not apply, a conflict), `grants` inserted and the uses of grants the written
    /// events record counted; the taps fired once it committed. The row remembered is forgotten on any
    /// failure (it may be the one written and then rolled back).
    async fn write_locked<T>(
        &self,
        id: &RunId,
        grants: &[GrantRow],
        write: impl AsyncFnOnce(&mut PgConnection, RunRow) -> Result<Option<(T, Vec<StoredEvent>)>, StoreError>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection().await?;
        let written = async {
            let mut tx = connection.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
            let row = self.read_for_write(&mut tx, SELECT_RUN_FOR_UPDATE, id).await?;
            let Some(written) = write(&mut tx, row).await? else {
                return Err(StoreError::Conflict { id: id.to_string(), conflict: Conflict::ConcurrentUpdate });
            };
            self.insert_grants(&mut tx, grants).await?;
            self.count_uses(&mut tx, &uses_in(&written.1)).await?;
            tx.commit().await.map_err(self.db_error("cannot commit"))?;
            Ok(written)
        }
        .await;
        match written {
            Ok((answer, stored)) => {
                connection.finished();
                self.taps.fire(id, &stored);
                Ok(answer)
            }
            Err(error) => {
                self.cache.remove(id);
                Err(error)
            }
        }
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
    pub(super) fn plan_transition_on(
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
            .bind(next.id.as_str())
            .bind(read_as.0)
            .bind(read_as.1)
            .bind(read_as.2);
        let updated: i64 =
            columns.bind(query).fetch_one(&mut *connection).await.map_err(self.db_error("cannot update a run"))?;
        if updated != 1 {
            return Ok(None);
        }
        // `changes` holds every column; those the statement leaves alone (id, agent, input, created_*,
        // metadata, trace) never change, and decode as stored.
        self.cache.put(changes);
        Ok(Some((next, stored)))
    }

    /// An append (see [`RunRows::append`]) on `connection`; answers the new `last_seq`.
    async fn append_on(
        &self,
        connection: &mut PgConnection,
        id: &RunId,
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
            return Err(StoreError::Conflict { id: id.to_string(), conflict: Conflict::ConcurrentUpdate });
        };
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        self.taps.fire(id, &stored);
        Ok(last_seq)
    }

    /// An append whose events record a use of a grant (a granted call's start): the row locked, the
    /// events chained and written and the uses counted in one transaction, so that a use is counted
    /// exactly when the start is on the record.
    async fn append_with_uses(
        &self,
        id: &RunId,
        owner: &str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> Result<u64, StoreError> {
        self.write_locked(id, &[], async |tx, row| {
            let planned = self.plan_append_on(row, owner, events, lease_until)?;
            self.write_append(tx, planned).await
        })
        .await
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
}

impl RunRows for PostgresStore {
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>> {
        Box::pin(self.create_run(run, events))
    }

    fn get<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        Box::pin(self.get_run(id))
    }

    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<RunId, StoreError>> {
        Box::pin(async move { self.resolve(prefix).await.map(RunId::from) })
    }

    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>> {
        Box::pin(self.list_runs(query))
    }

    fn transition<'a>(
        &'a self,
        id: &'a RunId,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        Box::pin(self.transition_run(id, guard, transition, events, now))
    }

    fn append<'a>(
        &'a self,
        id: &'a RunId,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            if record_uses(&events) {
                return self.append_with_uses(id, owner, events, lease_until).await;
            }
            let mut connection = self.connection().await?;
            let last_seq = self.append_on(&mut connection, id, owner, events, lease_until).await?;
            connection.finished();
            Ok(last_seq)
        })
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
