//! The PostgreSQL backend, for several Tollgate nodes sharing one database.
//!
//! Every write is its own transaction on a pooled connection. A transition or an append first locks
//! the run's row (`SELECT … FOR UPDATE`), so concurrent writers to one run queue up behind each other
//! and each sees the committed result of the one before: of two resumes with the same version guard,
//! exactly one passes the check. The `UPDATE` then also compares the version it read, as a second
//! line of defence. Purge locks its victims with `FOR UPDATE SKIP LOCKED`, so it never waits for, nor
//! deletes from under, a run that is being changed.
//!
//! Tables live in the connection's current schema; choose another with the URL parameter
//! `options[search_path]=NAME` (the schema must exist).

use crate::StoreOptions;
use crate::codec::{
    ChainHead, Columns, EventRow, PREFIX_COUNT_CAP, RunRow, Secrets, bind_run_changes, bind_run_row, database_error,
    decode_event, decode_run, decode_runs_skipping_corrupt, plan_append, plan_create, plan_transition,
    prefix_upper_bound, read_run_row, resolve_prefix_answer, run_columns, run_error, split_readable, status_counts,
};
use crate::encryption::DataKeys;
use crate::migrations::{self, Migration};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Executor, PgConnection, Row};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::event::{NewEvent, StoredEvent};
use tollgate_agent_core::run::{Millis, RunRecord, RunStatus, Transition};
use tollgate_agent_core::store::{Conflict, Guard, IntegrityCheck, RunPage, RunQuery, RunStore, StoreError};

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
];

/// The probe of [`RunStore::probe_write`]: one committed row update.
const PROBE: &str = "INSERT INTO health (id, probed_at) VALUES (1, $1) \
     ON CONFLICT (id) DO UPDATE SET probed_at = EXCLUDED.probed_at";

/// Tables `check_integrity` reads: every row with `Full` (PostgreSQL then reads every page, checking
/// its checksum when the cluster has them), one row with `Quick`.
const TABLES: [&str; 4] = ["runs", "events", "health", "tollgate_migrations"];

/// Connections per node.
const POOL_SIZE: u32 = 16;

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");
const SELECT_RUN_FOR_UPDATE: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1 FOR UPDATE");
const INSERT_RUN: &str = concat!(
    "INSERT INTO runs (",
    run_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, ",
    "$22, $23, $24, $25) ON CONFLICT (id) DO NOTHING"
);
const UPDATE_RUN: &str = "UPDATE runs SET status = $1, version = $2, output = $3, termination_reason = $4, \
     iterations = $5, input_tokens = $6, output_tokens = $7, updated_at = $8, finished_at = $9, error = $10, \
     suspension = $11, turn_digest = $12, required_calls = $13, decisions = $14, expires_at = $15, \
     lease_owner = $16, lease_expires_at = $17, last_seq = $18, last_hash = $19 WHERE id = $20 AND version = $21";
/// All of a write's events in one statement.
const INSERT_EVENTS: &str = "INSERT INTO events (run_id, seq, at, kind, round, data, hash) \
     SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[], $6::TEXT[], $7::TEXT[])";
const SELECT_CHAIN_HEAD_FOR_UPDATE: &str =
    "SELECT status, lease_owner, last_seq, last_hash FROM runs WHERE id = $1 FOR UPDATE";
const UPDATE_CHAIN_HEAD: &str = "UPDATE runs SET last_seq = $1, last_hash = $2, lease_expires_at = $3 WHERE id = $4";
const SELECT_EVENTS: &str =
    "SELECT seq, at, kind, round, data, hash FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE id = $1";
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
/// and the lock (no longer matching) is left alone.
const PURGE: &str = "WITH terminal AS (\
         SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1 \
         ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
     waiting AS (\
         SELECT id FROM runs WHERE status = 'waiting_for_approval' AND updated_at < $2 \
         ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
     victims AS (SELECT id FROM terminal UNION ALL SELECT id FROM waiting LIMIT $3) \
     DELETE FROM runs WHERE id IN (SELECT id FROM victims) \
     AND ((finished_at IS NOT NULL AND finished_at < $1) OR (status = 'waiting_for_approval' AND updated_at < $2))";
const PREFIX_FIRST: &str = "SELECT id FROM runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT 2";
const PREFIX_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE id >= $1 AND id < $2 LIMIT $3) AS m";

/// The PostgreSQL [`RunStore`]: a connection pool, one transaction per write, row locks for the
/// compare-and-set.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    secrets: Secrets,
    /// Seals and opens the encrypted columns; `None`: plaintext.
    keys: Option<Arc<DataKeys>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `postgres://USER[:PASSWORD]@HOST:PORT/DB[?…]` and applies the embedded migrations
    /// (under an advisory lock, so nodes starting together migrate once).
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
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| database_error(&secrets, "invalid PostgreSQL URL", &e))?
            .application_name("tollgate");
        // One direct connection first: an unreachable server or a bad password is reported at once
        // (a pool would retry until its acquire timeout), and it applies the migrations.
        let mut connection =
            options.connect().await.map_err(|e| database_error(&secrets, "cannot connect to PostgreSQL", &e))?;
        let migrated = migrate(&mut connection, &secrets).await;
        if let Err(error) = connection.close().await {
            tracing::debug!(%error, "cannot close the migration connection cleanly");
        }
        migrated?;
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        Ok(PostgresStore { pool, secrets, keys: store_options.data_keys })
    }

    /// Closes every connection of the pool.
    pub async fn close(self) {
        self.pool.close().await;
    }

    fn keys(&self) -> Option<&DataKeys> {
        self.keys.as_deref()
    }

    fn db_error<'a>(&'a self, context: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| database_error(&self.secrets, context, &e)
    }

    /// [`PostgresStore::db_error`] for a read of run `id`: corrupted data met there is that run's.
    fn run_failed<'a>(&'a self, context: &'a str, id: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| run_error(&self.secrets, context, id, &e)
    }

    async fn probe(&self) -> Result<(), StoreError> {
        sqlx::query(PROBE)
            .bind(migrations::now_millis())
            .execute(&self.pool)
            .await
            .map_err(self.db_error("cannot write the probe"))?;
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
            let read: Result<i64, sqlx::Error> = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&self.pool).await;
            match read.map_err(self.db_error("cannot check the database")) {
                Ok(_) => {}
                Err(StoreError::CorruptDatabase(detail)) => problems.push(format!("table {table}: {detail}")),
                Err(error) => return Err(error),
            }
        }
        Ok(problems)
    }

    async fn insert_events(
        &self,
        tx: &mut PgConnection,
        run_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let rows = events.iter().map(|e| EventRow::encode(run_id, e, self.keys())).collect::<Result<Vec<_>, _>>()?;
        sqlx::query(INSERT_EVENTS)
            .bind(run_id)
            .bind(rows.iter().map(|r| r.seq).collect::<Vec<_>>())
            .bind(rows.iter().map(|r| r.at.clone()).collect::<Vec<_>>())
            .bind(rows.iter().map(|r| r.kind.to_owned()).collect::<Vec<_>>())
            .bind(rows.iter().map(|r| r.round).collect::<Vec<_>>())
            .bind(rows.iter().map(|r| r.data.clone()).collect::<Vec<_>>())
            .bind(rows.iter().map(|r| r.hash.clone()).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await
            .map_err(self.db_error("cannot insert events"))?;
        Ok(())
    }

    async fn create_run(&self, run: RunRecord, events: Vec<NewEvent>) -> Result<RunRecord, StoreError> {
        let (run, stored) = plan_create(run, events);
        let row = RunRow::encode(&run, self.keys(), None)?;
        let mut tx = self.pool.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let inserted = bind_run_row!(sqlx::query(INSERT_RUN), &row)
            .execute(&mut *tx)
            .await
            .map_err(self.db_error("cannot insert a run"))?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::Duplicate(run.id));
        }
        self.insert_events(&mut tx, &run.id, &stored).await?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        Ok(run)
    }

    async fn transition_run(
        &self,
        id: &str,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<RunRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let row = sqlx::query(SELECT_RUN_FOR_UPDATE)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db_error("cannot read a run"))?
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        let row = read_run_row(&row)?;
        // With keys, the stored row lets unchanged sealed values be kept rather than sealed again.
        let (current, before) = match self.keys() {
            None => (row.decode(None)?, None),
            keys => (row.clone().decode(keys)?, Some(row)),
        };
        let (next, stored) = plan_transition(&current, &guard, &transition, events, now)?;
        let changes = RunRow::encode(&next, self.keys(), before.as_ref().map(|row| (&current, row)))?;
        let updated = bind_run_changes!(sqlx::query(UPDATE_RUN), &changes)
            .bind(id)
            .bind(i64::try_from(current.version).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await
            .map_err(self.db_error("cannot update a run"))?;
        if updated.rows_affected() != 1 {
            return Err(StoreError::Conflict { id: id.to_owned(), conflict: Conflict::ConcurrentUpdate });
        }
        self.insert_events(&mut tx, id, &stored).await?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        Ok(next)
    }

    async fn append_events(
        &self,
        id: &str,
        owner: &str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let row = sqlx::query(SELECT_CHAIN_HEAD_FOR_UPDATE)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db_error("cannot read a run"))?
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt { id: id.to_owned(), detail: e.to_string() };
        let head = ChainHead {
            status: row.try_get(0).map_err(corrupt)?,
            lease_owner: row.try_get(1).map_err(corrupt)?,
            last_seq: row.try_get(2).map_err(corrupt)?,
            last_hash: row.try_get(3).map_err(corrupt)?,
        };
        let (stored, last_seq, last_hash) = plan_append(id, owner, head, events)?;
        self.insert_events(&mut tx, id, &stored).await?;
        sqlx::query(UPDATE_CHAIN_HEAD)
            .bind(i64::try_from(last_seq).unwrap_or(i64::MAX))
            .bind(&last_hash)
            .bind(lease_until)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(self.db_error("cannot update a run"))?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        Ok(last_seq)
    }

    async fn get_run(&self, id: &str) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(SELECT_RUN)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.run_failed("cannot read a run", id))?;
        match row {
            Some(row) => decode_run(&row, self.keys()),
            None => Err(StoreError::NotFound(id.to_owned())),
        }
    }

    async fn list_runs(&self, query: RunQuery) -> Result<RunPage, StoreError> {
        if query.limit == 0 {
            return Ok(RunPage { runs: Vec::new(), next_cursor: None, skipped: Vec::new() });
        }
        // One extra row tells whether another page exists. At most 8 distinct statements come out of
        // this, so each stays prepared in the connection's statement cache.
        let mut sql = String::from(concat!("SELECT ", run_columns!(), " FROM runs WHERE TRUE"));
        let mut n = 0;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        if query.status.is_some() {
            sql.push_str(&format!(" AND status = {}", param()));
        }
        if query.agent.is_some() {
            sql.push_str(&format!(" AND agent = {}", param()));
        }
        if query.cursor.is_some() {
            sql.push_str(&format!(" AND id < {}", param()));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", param()));
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
        let rows = statement
            .bind(i64::from(query.limit) + 1)
            .fetch_all(&self.pool)
            .await
            .map_err(self.db_error("cannot list runs"))?;
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
        let first: Vec<String> = sqlx::query_scalar(PREFIX_FIRST)
            .bind(prefix)
            .bind(&upper)
            .fetch_all(&self.pool)
            .await
            .map_err(self.db_error("cannot look up a run id prefix"))?;
        let count = if first.len() > 1 {
            sqlx::query_scalar(PREFIX_COUNT)
                .bind(prefix)
                .bind(&upper)
                .bind(PREFIX_COUNT_CAP + 1)
                .fetch_one(&self.pool)
                .await
                .map_err(self.db_error("cannot count a run id prefix"))?
        } else {
            0
        };
        resolve_prefix_answer(prefix, first, count)
    }

    async fn read_events(&self, id: &str, after: u64, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(SELECT_EVENTS)
            .bind(id)
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.run_failed("cannot read events", id))?;
        if rows.is_empty() {
            let exists = sqlx::query(RUN_EXISTS)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(self.db_error("cannot read a run"))?;
            if exists.is_none() {
                return Err(StoreError::NotFound(id.to_owned()));
            }
        }
        rows.iter().map(|row| decode_event(id, row, self.keys())).collect()
    }

    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as("SELECT status, COUNT(*) FROM runs GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .map_err(self.db_error("cannot count runs"))?;
        Ok(status_counts(rows))
    }

    async fn due_runs(&self, now: Millis, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(SELECT_DUE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.db_error("cannot read due runs"))?;
        Ok(decode_runs_skipping_corrupt(&rows, "due", self.keys()))
    }

    async fn purge_runs(&self, terminal_before: Millis, waiting_before: Millis, batch: u32) -> Result<u64, StoreError> {
        let deleted = sqlx::query(PURGE)
            .bind(terminal_before)
            .bind(waiting_before)
            .bind(i64::from(batch))
            .execute(&self.pool)
            .await
            .map_err(self.db_error("cannot purge runs"))?;
        Ok(deleted.rows_affected())
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

impl RunStore for PostgresStore {
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
        Box::pin(self.append_events(id, owner, events, lease_until))
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(self.read_events(id, after, limit))
    }

    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.due_runs(now, limit))
    }

    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>> {
        Box::pin(self.count_runs())
    }

    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.purge_runs(terminal_before, waiting_before, batch))
    }

    fn probe_write(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.probe())
    }

    fn check_integrity(&self, depth: IntegrityCheck) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(self.check_tables(depth))
    }
}
