//! The SQLite backend: one file, WAL, `synchronous = FULL`, with group commit.
//!
//! SQLite lets one connection write at a time, and with `synchronous = FULL` every commit waits for an
//! fsync of the WAL, so committing each write on its own would cap the store at one fsync per
//! transition. Instead a single writer task owns the one write connection. Writes (create, transition,
//! append, purge) reach it over a channel; it takes whatever is queued (up to [`MAX_BATCH`]) and runs
//! it as ONE transaction with one commit:
//!
//! 1. one round trip begins the transaction (`BEGIN IMMEDIATE`) and reads every run the batch touches
//!    (a batch that only creates runs skips it: a duplicate id then fails the insert below);
//! 2. the operations are checked and applied in queue order, in Rust, against those rows — each one
//!    sees the effect of those before it, so the compare-and-set of a [`Guard`] is exact, and an
//!    operation that conflicts or does not apply is answered with its error and writes nothing;
//! 3. one round trip writes the resulting rows and events inside a savepoint and commits. The
//!    statements are fixed texts (rows travel as JSON arrays), so they stay prepared.
//!
//! If that write fails (a constraint, say, because a row was edited behind Tollgate's back), the
//! savepoint is rolled back and the batch is written again one operation at a time, each inside its
//! own `SAVEPOINT`, re-reading its run first: the failing operation is rolled back alone and gets the
//! error, the others go through. (A batch holding a purge is written that way directly.)
//!
//! Every caller is answered only after the COMMIT has returned, so an `Ok` means durable; if the
//! transaction fails as a whole (the COMMIT, an I/O error), every operation of the batch gets the
//! retryable [`StoreError::Database`] and none of them happened.
//!
//! Reads (get, list, events, due, resolve_prefix) use a separate pool of connections, which WAL lets
//! read the last committed state while the writer writes.

use crate::codec::{
    ChainHead, EventRow, PREFIX_COUNT_CAP, RUN_ROW_LEN, RunRow, Secrets, database_error, decode_event, decode_run,
    decode_runs_skipping_corrupt, plan_append, plan_create, plan_transition, prefix_upper_bound, read_run_row,
    resolve_prefix_answer, run_columns,
};
use crate::migrations::{self, Migration};
use futures_util::StreamExt;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Arguments, AssertSqlSafe, ConnectOptions, Connection, Executor, Row};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tollgate_core::BoxFuture;
use tollgate_core::event::{NewEvent, StoredEvent};
use tollgate_core::run::{Millis, RunRecord, Transition};
use tollgate_core::store::{Guard, RunPage, RunQuery, RunStore, StoreError};

/// The most operations the writer puts into one transaction.
pub const MAX_BATCH: usize = 256;

/// How many write operations may wait for the writer before callers wait to enqueue.
const QUEUE_CAPACITY: usize = 4096;

/// How long a connection waits for another process's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema changes of this backend, oldest first.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "runs_and_events",
    sql: include_str!("../migrations/sqlite/0001_runs_and_events.sql"),
}];

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ?1");
/// The runs a batch touches, by a JSON array of ids (one statement whatever the count, so it stays
/// prepared).
const SELECT_RUNS: &str =
    concat!("SELECT ", run_columns!(), " FROM runs WHERE id IN (SELECT value FROM json_each(?1))");
const BEGIN_AND_SELECT_RUNS: &str =
    concat!("BEGIN IMMEDIATE; SELECT ", run_columns!(), " FROM runs WHERE id IN (SELECT value FROM json_each(?1))");

// The writer's statements. Each is one fixed text, so it stays prepared on the write connection:
// rows travel as JSON arrays (one element per run or event) unpacked by `json_each`, whatever their
// number. A text value travels as a JSON string and comes back exactly (`->>`).

/// Inserts new runs (1st argument: arrays in `run_columns!` order), updates changed runs (2nd: the
/// same arrays plus the version and last_seq read at the start of the batch, a compare-and-set),
/// checks that every update found its row (3rd: their number; `json('…')` raises an error
/// otherwise), inserts events (4th: arrays `[run_id, seq, at, kind, round, data, hash]`).
///
/// The placeholders are plain `?`: in a multi-statement query sqlx binds numbered ones correctly only
/// when no statement skips a number.
macro_rules! write_statements {
    () => {
        concat!(
            "SAVEPOINT op;\n",
            "INSERT INTO runs (",
            run_columns!(),
            ") SELECT value->>0, value->>1, value->>2, value->>3, ",
            "value->>4, value->>5, value->>6, value->>7, value->>8, value->>9, value->>10, value->>11, value->>12, ",
            "value->>13, value->>14, value->>15, value->>16, value->>17, value->>18, value->>19, value->>20, ",
            "value->>21, value->>22, value->>23 FROM jsonb_each(?);\n",
            "UPDATE runs SET status = n.value->>2, version = n.value->>3, output = n.value->>5, ",
            "termination_reason = n.value->>6, iterations = n.value->>7, input_tokens = n.value->>8, ",
            "output_tokens = n.value->>9, updated_at = n.value->>12, finished_at = n.value->>13, ",
            "error = n.value->>14, suspension = n.value->>15, turn_digest = n.value->>16, ",
            "required_calls = n.value->>17, decisions = n.value->>18, expires_at = n.value->>19, ",
            "lease_owner = n.value->>20, lease_expires_at = n.value->>21, last_seq = n.value->>22, ",
            "last_hash = n.value->>23 FROM jsonb_each(?) AS n ",
            "WHERE runs.id = n.value->>0 AND runs.version = n.value->>24 AND runs.last_seq = n.value->>25;\n",
            "SELECT CASE WHEN changes() = ? THEN NULL ELSE json('a run changed during its write') END;\n",
            "INSERT INTO events (run_id, seq, at, kind, round, data, hash) SELECT value->>0, value->>1, ",
            "value->>2, value->>3, value->>4, value->>5, value->>6 FROM jsonb_each(?);\n",
            "RELEASE op"
        )
    };
}
/// A whole batch's writes and its commit: one round trip.
const WRITE_AND_COMMIT: &str = concat!(write_statements!(), ";\nCOMMIT");
/// The same for a batch that only creates runs and so reads nothing first (a duplicate id fails the
/// insert, and the batch is then written one by one, where the duplicate is found).
const BEGIN_WRITE_AND_COMMIT: &str = concat!("BEGIN IMMEDIATE;\n", write_statements!(), ";\nCOMMIT");
/// One operation's writes (when operations are written one by one).
const WRITE_ONE: &str = write_statements!();
const UNDO_ONE: &str = "ROLLBACK TO op; RELEASE op";
/// terminal_before, waiting_before, batch.
const PURGE: &str = "DELETE FROM runs WHERE id IN (\
     SELECT id FROM (SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?1 \
     ORDER BY finished_at LIMIT ?3) \
     UNION ALL SELECT id FROM (SELECT id FROM runs WHERE status = 'waiting_for_approval' AND updated_at < ?2 \
     ORDER BY updated_at LIMIT ?3) \
     LIMIT ?3)";

const SELECT_EVENTS: &str =
    "SELECT seq, at, kind, round, data, hash FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";
const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE id = ?1";
const SELECT_DUE: &str = concat!(
    "SELECT * FROM (SELECT ",
    run_columns!(),
    ", expires_at AS due_at FROM runs WHERE status = 'waiting_for_approval' AND expires_at IS NOT NULL ",
    "AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2) AS waiting ",
    "UNION ALL SELECT * FROM (SELECT ",
    run_columns!(),
    ", lease_expires_at AS due_at FROM runs WHERE status = 'running' AND lease_expires_at IS NOT NULL ",
    "AND lease_expires_at <= ?1 ORDER BY lease_expires_at LIMIT ?2) AS running ",
    "ORDER BY due_at, id LIMIT ?2"
);
const PREFIX_FIRST: &str = "SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 2";
const PREFIX_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE id >= ?1 AND id < ?2 LIMIT ?3)";

/// The SQLite [`RunStore`].
///
/// Durability: the database is in WAL mode with `synchronous = FULL`, so a write is acknowledged only
/// after the WAL has been fsynced — a committed transition survives a crash of the process and of the
/// machine. (`NORMAL` would be faster but may lose the last commits on power loss.) Several writes
/// share one commit and one fsync (group commit, see the module docs). Foreign keys are on, and a
/// connection waits up to 5 s for another process (say a CLI command on the same file) to release the
/// write lock.
///
/// A write whose caller stops waiting (its future dropped) still goes through with its batch.
pub struct SqliteStore {
    writer: mpsc::Sender<WriteOp>,
    writer_task: JoinHandle<()>,
    reader: SqlitePool,
    secrets: Secrets,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it if missing) the database `url` names — `sqlite://relative.db`,
    /// `sqlite:///absolute/path.db` or `sqlite::memory:` — applies the embedded migrations, and starts
    /// the writer task (so it must be called inside a Tokio runtime).
    ///
    /// # Errors
    /// [`StoreError::NewerSchema`] when the file was written by a newer Tollgate;
    /// [`StoreError::Database`] when it cannot be opened or migrated.
    pub async fn open(url: &str) -> Result<SqliteStore, StoreError> {
        let secrets = Secrets::from_url(url);
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| database_error(&secrets, "invalid SQLite URL", &e))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);

        let mut write_connection =
            options.connect().await.map_err(|e| database_error(&secrets, "cannot open the SQLite database", &e))?;
        migrate(&mut write_connection, &secrets).await?;

        let readers = std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(2, 8);
        let reader = SqlitePoolOptions::new()
            .max_connections(u32::try_from(readers).unwrap_or(4))
            // A ping before every read is a round trip to the connection's worker thread; a local file
            // connection does not go stale the way a network one does (a failing read reports its error).
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .map_err(|e| database_error(&secrets, "cannot open SQLite read connections", &e))?;

        let (writer, queue) = mpsc::channel(QUEUE_CAPACITY);
        let task = Writer { options, connection: Some(write_connection), secrets: secrets.clone() };
        let writer_task = tokio::spawn(task.run(queue));
        Ok(SqliteStore { writer, writer_task, reader, secrets })
    }

    /// Finishes the writes already queued, then closes every connection.
    pub async fn close(self) {
        let SqliteStore { writer, writer_task, reader, .. } = self;
        drop(writer);
        if let Err(error) = writer_task.await {
            tracing::warn!(%error, "the SQLite writer task ended abnormally");
        }
        reader.close().await;
    }

    fn db_error(&self, context: &str, error: &sqlx::Error) -> StoreError {
        database_error(&self.secrets, context, error)
    }

    async fn submit<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> WriteOp,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer.send(make(reply)).await.map_err(|_| writer_gone())?;
        answer.await.map_err(|_| writer_gone())?
    }

    async fn get_run(&self, id: &str) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(SELECT_RUN)
            .bind(id)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.db_error("cannot read a run", &e))?;
        match row {
            Some(row) => decode_run(&row),
            None => Err(StoreError::NotFound(id.to_owned())),
        }
    }

    async fn list_runs(&self, query: RunQuery) -> Result<RunPage, StoreError> {
        if query.limit == 0 {
            return Ok(RunPage { runs: Vec::new(), next_cursor: None });
        }
        let mut statement = sqlx::query(AssertSqlSafe(list_sql(&query)));
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
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.db_error("cannot list runs", &e))?;
        let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
        let next_cursor = if rows.len() > limit {
            rows.get(limit - 1).and_then(|row| row.try_get::<String, _>(0).ok())
        } else {
            None
        };
        let page = &rows[..rows.len().min(limit)];
        Ok(RunPage { runs: decode_runs_skipping_corrupt(page, "list"), next_cursor })
    }

    async fn resolve(&self, prefix: &str) -> Result<String, StoreError> {
        let upper = prefix_upper_bound(prefix);
        let first: Vec<String> = sqlx::query_scalar(PREFIX_FIRST)
            .bind(prefix)
            .bind(&upper)
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.db_error("cannot look up a run id prefix", &e))?;
        let count = if first.len() > 1 {
            sqlx::query_scalar(PREFIX_COUNT)
                .bind(prefix)
                .bind(&upper)
                .bind(PREFIX_COUNT_CAP + 1)
                .fetch_one(&self.reader)
                .await
                .map_err(|e| self.db_error("cannot count a run id prefix", &e))?
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
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.db_error("cannot read events", &e))?;
        if rows.is_empty() {
            let exists = sqlx::query(RUN_EXISTS)
                .bind(id)
                .fetch_optional(&self.reader)
                .await
                .map_err(|e| self.db_error("cannot read a run", &e))?;
            if exists.is_none() {
                return Err(StoreError::NotFound(id.to_owned()));
            }
        }
        rows.iter().map(|row| decode_event(id, row)).collect()
    }

    async fn due_runs(&self, now: Millis, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(SELECT_DUE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.db_error("cannot read due runs", &e))?;
        Ok(decode_runs_skipping_corrupt(&rows, "due"))
    }
}

/// The statement for a [`RunQuery`]: its filters in order (status, agent, cursor), then the limit —
/// one more than asked, which tells whether another page exists. At most 8 distinct texts come out
/// of this, so each stays prepared in the connection's statement cache.
fn list_sql(query: &RunQuery) -> String {
    let mut sql = String::from(concat!("SELECT ", run_columns!(), " FROM runs WHERE 1 = 1"));
    if query.status.is_some() {
        sql.push_str(" AND status = ?");
    }
    if query.agent.is_some() {
        sql.push_str(" AND agent = ?");
    }
    if query.cursor.is_some() {
        sql.push_str(" AND id < ?");
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    sql
}

fn writer_gone() -> StoreError {
    StoreError::Database("the SQLite store is closed (its writer task has stopped)".to_owned())
}

impl RunStore for SqliteStore {
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>> {
        Box::pin(self.submit(|reply| WriteOp::Create { run, events, reply }))
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
        let id = id.to_owned();
        Box::pin(self.submit(move |reply| WriteOp::Transition { id, guard, transition, events, now, reply }))
    }

    fn append<'a>(
        &'a self,
        id: &'a str,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let (id, owner) = (id.to_owned(), owner.to_owned());
        Box::pin(self.submit(move |reply| WriteOp::Append { id, owner, events, lease_until, reply }))
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

    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.submit(move |reply| WriteOp::Purge { terminal_before, waiting_before, batch, reply }))
    }
}

/// Applies the migrations this build knows, in one `BEGIN IMMEDIATE` transaction (so two processes
/// opening the same new file do not both migrate it).
async fn migrate(connection: &mut SqliteConnection, secrets: &Secrets) -> Result<(), StoreError> {
    let error = |e: sqlx::Error| database_error(secrets, "cannot migrate the SQLite database", &e);
    connection.execute("BEGIN IMMEDIATE").await.map_err(error)?;
    let outcome = async {
        connection.execute(migrations::CREATE_TABLE).await.map_err(error)?;
        let found: Option<i64> =
            sqlx::query_scalar(migrations::SELECT_VERSION).fetch_one(&mut *connection).await.map_err(error)?;
        for migration in migrations::to_apply(MIGRATIONS, found.unwrap_or(0))? {
            connection.execute(sqlx::raw_sql(migration.sql)).await.map_err(error)?;
            sqlx::query("INSERT INTO tollgate_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)")
                .bind(migration.version)
                .bind(migration.name)
                .bind(migrations::now_millis())
                .execute(&mut *connection)
                .await
                .map_err(error)?;
        }
        Ok(())
    }
    .await;
    match outcome {
        Ok(()) => connection.execute("COMMIT").await.map(drop).map_err(error),
        Err(failure) => {
            if let Err(e) = connection.execute("ROLLBACK").await {
                tracing::warn!(error = %e, "cannot roll back a failed SQLite migration");
            }
            Err(failure)
        }
    }
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// A write waiting for the writer task.
#[expect(clippy::large_enum_variant, reason = "moved once through the queue; boxing would allocate per write")]
enum WriteOp {
    Create {
        run: RunRecord,
        events: Vec<NewEvent>,
        reply: Reply<RunRecord>,
    },
    Transition {
        id: String,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
        reply: Reply<RunRecord>,
    },
    Append {
        id: String,
        owner: String,
        events: Vec<NewEvent>,
        lease_until: Millis,
        reply: Reply<u64>,
    },
    Purge {
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
        reply: Reply<u64>,
    },
}

/// A write operation without its reply channel, so that it can be planned again.
#[expect(clippy::large_enum_variant, reason = "lives only for one batch; boxing would allocate per write")]
enum Request {
    Create { run: RunRecord, events: Vec<NewEvent> },
    Transition { id: String, guard: Guard, transition: Transition, events: Vec<NewEvent>, now: Millis },
    Append { id: String, owner: String, events: Vec<NewEvent>, lease_until: Millis },
    Purge { terminal_before: Millis, waiting_before: Millis, batch: u32 },
}

impl Request {
    /// The run it reads (purge reads none).
    fn run_id(&self) -> Option<&str> {
        match self {
            Request::Create { run, .. } => Some(&run.id),
            Request::Transition { id, .. } | Request::Append { id, .. } => Some(id),
            Request::Purge { .. } => None,
        }
    }
}

/// Where an operation's answer goes.
enum Replier {
    Record(Reply<RunRecord>),
    Count(Reply<u64>),
}

/// An operation's answer, held until its batch has committed.
#[expect(clippy::large_enum_variant, reason = "lives only for one batch; boxing would allocate per write")]
enum Outcome {
    Record(Result<RunRecord, StoreError>),
    Count(Result<u64, StoreError>),
}

impl WriteOp {
    fn split(self) -> (Request, Replier) {
        match self {
            WriteOp::Create { run, events, reply } => (Request::Create { run, events }, Replier::Record(reply)),
            WriteOp::Transition { id, guard, transition, events, now, reply } => {
                (Request::Transition { id, guard, transition, events, now }, Replier::Record(reply))
            }
            WriteOp::Append { id, owner, events, lease_until, reply } => {
                (Request::Append { id, owner, events, lease_until }, Replier::Count(reply))
            }
            WriteOp::Purge { terminal_before, waiting_before, batch, reply } => {
                (Request::Purge { terminal_before, waiting_before, batch }, Replier::Count(reply))
            }
        }
    }
}

impl Replier {
    /// Answers; a caller that stopped waiting has nobody to tell.
    fn send(self, outcome: Outcome) {
        match (self, outcome) {
            (Replier::Record(reply), Outcome::Record(result)) => drop(reply.send(result)),
            (Replier::Count(reply), Outcome::Count(result)) => drop(reply.send(result)),
            (Replier::Record(reply), Outcome::Count(_)) => drop(reply.send(Err(mismatched_outcome()))),
            (Replier::Count(reply), Outcome::Record(_)) => drop(reply.send(Err(mismatched_outcome()))),
        }
    }

    fn fail(self, error: StoreError) {
        match self {
            Replier::Record(reply) => drop(reply.send(Err(error))),
            Replier::Count(reply) => drop(reply.send(Err(error))),
        }
    }
}

fn mismatched_outcome() -> StoreError {
    StoreError::Database("internal error: a write was answered with the wrong kind of result".to_owned())
}

impl Outcome {
    fn error(request: &Request, error: StoreError) -> Outcome {
        match request {
            Request::Create { .. } | Request::Transition { .. } => Outcome::Record(Err(error)),
            Request::Append { .. } | Request::Purge { .. } => Outcome::Count(Err(error)),
        }
    }
}

/// A failure that leaves the batch's transaction unusable: the whole batch is undone.
struct BatchFailure(StoreError);

/// A run as a batch sees it: its state after the operations planned so far, where it came from, and
/// whether those operations changed it.
struct Entry {
    state: Result<RunRecord, StoreError>,
    /// `Some((version, last_seq))` as stored when the batch began; `None` for a run the batch creates.
    stored: Option<(i64, i64)>,
    changed: bool,
}

/// The writes of a batch (or of one operation), as the JSON arguments of [`WRITE_AND_COMMIT`].
#[derive(Default)]
struct WriteSet {
    inserts: Vec<RunRow>,
    updates: Vec<(RunRow, i64, i64)>,
    events: Vec<(String, EventRow)>,
}

impl WriteSet {
    /// The final state of every run the plan changed, then their events.
    fn collect(
        runs: &HashMap<String, Entry>,
        order: &[String],
        events: Vec<(String, EventRow)>,
    ) -> Result<WriteSet, StoreError> {
        let mut set = WriteSet { events, ..WriteSet::default() };
        for id in order {
            let Some(Entry { state: Ok(run), stored, changed: true }) = runs.get(id) else { continue };
            let row = RunRow::encode(run)?;
            match stored {
                None => set.inserts.push(row),
                Some((version, last_seq)) => set.updates.push((row, *version, *last_seq)),
            }
        }
        Ok(set)
    }

    fn arguments(&self) -> Result<SqliteArguments, StoreError> {
        let json = |e: serde_json::Error| StoreError::Database(format!("cannot encode a write: {e}"));
        let updates: Vec<UpdateRow<'_>> = self.updates.iter().map(|(row, v, s)| UpdateRow(row, *v, *s)).collect();
        let events: Vec<_> =
            self.events.iter().map(|(run_id, e)| (run_id, e.seq, &e.at, e.kind, e.round, &e.data, &e.hash)).collect();
        let mut arguments = SqliteArguments::default();
        let mut add = |value: String| arguments.add(value).map_err(|e| StoreError::Database(e.to_string()));
        add(serde_json::to_string(&self.inserts).map_err(json)?)?;
        add(serde_json::to_string(&updates).map_err(json)?)?;
        arguments
            .add(i64::try_from(self.updates.len()).unwrap_or(i64::MAX))
            .map_err(|e| StoreError::Database(e.to_string()))?;
        arguments
            .add(serde_json::to_string(&events).map_err(json)?)
            .map_err(|e| StoreError::Database(e.to_string()))?;
        Ok(arguments)
    }
}

/// An updated run's row followed by the version and last_seq its compare-and-set expects.
struct UpdateRow<'a>(&'a RunRow, i64, i64);

impl serde::Serialize for UpdateRow<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(RUN_ROW_LEN + 2))?;
        self.0.serialize_elements(&mut seq)?;
        seq.serialize_element(&self.1)?;
        seq.serialize_element(&self.2)?;
        seq.end()
    }
}

/// Plans one request against the runs as the operations before it in the batch left them: checks
/// it, updates `runs`, appends its events to `events`, and returns its answer. An error means it
/// changes nothing. (A purge is not planned: it runs on its own.)
fn plan(
    request: &Request,
    runs: &mut HashMap<String, Entry>,
    order: &mut Vec<String>,
    events: &mut Vec<(String, EventRow)>,
) -> Result<Outcome, StoreError> {
    let mut touch = |id: &str, runs: &mut HashMap<String, Entry>, next: RunRecord| {
        if let Some(entry) = runs.get_mut(id) {
            entry.state = Ok(next);
            if !entry.changed {
                entry.changed = true;
                order.push(id.to_owned());
            }
        } else {
            runs.insert(id.to_owned(), Entry { state: Ok(next), stored: None, changed: true });
            order.push(id.to_owned());
        }
    };
    let encode = |run_id: &str, stored: &[StoredEvent]| -> Result<Vec<(String, EventRow)>, StoreError> {
        stored.iter().map(|e| Ok((run_id.to_owned(), EventRow::encode(run_id, e)?))).collect()
    };
    match request {
        Request::Create { run, events: new } => {
            if runs.get(&run.id).is_some_and(|entry| entry.stored.is_some() || entry.changed) {
                return Err(StoreError::Duplicate(run.id.clone()));
            }
            let (run, stored) = plan_create(run.clone(), new.clone());
            events.extend(encode(&run.id, &stored)?);
            touch(&run.id, runs, run.clone());
            Ok(Outcome::Record(Ok(run)))
        }
        Request::Transition { id, guard, transition, events: new, now } => {
            let current = current_run(runs, id)?;
            let (next, stored) = plan_transition(current, guard, transition, new.clone(), *now)?;
            events.extend(encode(id, &stored)?);
            touch(id, runs, next.clone());
            Ok(Outcome::Record(Ok(next)))
        }
        Request::Append { id, owner, events: new, lease_until } => {
            let current = current_run(runs, id)?;
            let head = ChainHead {
                status: current.status.as_str().to_owned(),
                lease_owner: current.lease.as_ref().map(|l| l.owner.clone()),
                last_seq: i64::try_from(current.last_seq).unwrap_or(i64::MAX),
                last_hash: current.last_hash.clone(),
            };
            let (stored, last_seq, last_hash) = plan_append(id, owner, head, new.clone())?;
            let mut next = current.clone();
            next.last_seq = last_seq;
            next.last_hash = last_hash;
            if let Some(lease) = next.lease.as_mut() {
                lease.expires_at = *lease_until;
            }
            events.extend(encode(id, &stored)?);
            touch(id, runs, next);
            Ok(Outcome::Count(Ok(last_seq)))
        }
        Request::Purge { .. } => Err(StoreError::Database("internal error: a purge cannot be planned".to_owned())),
    }
}

/// The run as the batch sees it so far.
fn current_run<'r>(runs: &'r HashMap<String, Entry>, id: &str) -> Result<&'r RunRecord, StoreError> {
    match runs.get(id).map(|entry| &entry.state) {
        Some(Ok(run)) => Ok(run),
        Some(Err(error)) => Err(error.clone()),
        None => Err(StoreError::NotFound(id.to_owned())),
    }
}

/// The single writer: owns the write connection and commits queued writes in batches.
struct Writer {
    options: SqliteConnectOptions,
    connection: Option<SqliteConnection>,
    secrets: Secrets,
}

impl Writer {
    async fn run(mut self, mut queue: mpsc::Receiver<WriteOp>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let (requests, repliers): (Vec<Request>, Vec<Replier>) = batch.drain(..).map(WriteOp::split).unzip();
            match self.commit_batch(&requests).await {
                Ok(outcomes) => {
                    repliers.into_iter().zip(outcomes).for_each(|(replier, outcome)| replier.send(outcome));
                    // Let the callers just answered run first: many submit their next write at once,
                    // and it then joins the next batch instead of waiting for the one after.
                    tokio::task::yield_now().await;
                }
                Err(BatchFailure(error)) => {
                    tracing::warn!(%error, ops = requests.len(), "a SQLite write batch was rolled back");
                    // A connection whose transaction state is unknown is replaced by a fresh one.
                    if let Some(mut connection) = self.connection.take() {
                        let _ = connection.execute("ROLLBACK").await;
                    }
                    repliers.into_iter().for_each(|replier| replier.fail(error.clone()));
                }
            }
        }
        if let Some(connection) = self.connection.take()
            && let Err(error) = connection.close().await
        {
            tracing::warn!(%error, "cannot close the SQLite write connection cleanly");
        }
    }

    fn error(&self, context: &str, error: &sqlx::Error) -> StoreError {
        database_error(&self.secrets, context, error)
    }

    async fn connection(&mut self) -> Result<&mut SqliteConnection, BatchFailure> {
        if self.connection.is_none() {
            let connection = self
                .options
                .connect()
                .await
                .map_err(|e| BatchFailure(self.error("cannot reopen the SQLite database", &e)))?;
            self.connection = Some(connection);
        }
        self.connection.as_mut().ok_or_else(|| BatchFailure(writer_gone()))
    }

    /// The fast path: one round trip reads every run the batch touches and begins the transaction (a
    /// batch of creates only skips it), the operations are planned in order against those rows — each
    /// seeing the ones before it, so a conflict or a refused transition writes nothing — and a second
    /// round trip writes the result and commits. If that write fails, it is undone and the batch is written again one operation at
    /// a time ([`Writer::one_by_one`]), so that only the operation at fault fails. A batch holding a
    /// purge takes that slower path directly.
    async fn commit_batch(&mut self, requests: &[Request]) -> Result<Vec<Outcome>, BatchFailure> {
        if requests.iter().any(|r| matches!(r, Request::Purge { .. })) {
            self.execute("BEGIN IMMEDIATE").await?;
            return self.one_by_one(requests).await;
        }
        let only_creates = requests.iter().all(|r| matches!(r, Request::Create { .. }));
        let (mut runs, write) = if only_creates {
            (HashMap::new(), BEGIN_WRITE_AND_COMMIT)
        } else {
            (
                self.read_runs(requests.iter().filter_map(Request::run_id), BEGIN_AND_SELECT_RUNS).await?,
                WRITE_AND_COMMIT,
            )
        };
        let mut order = Vec::new();
        let mut events = Vec::new();
        let outcomes: Vec<Outcome> = requests
            .iter()
            .map(|request| {
                plan(request, &mut runs, &mut order, &mut events).unwrap_or_else(|error| Outcome::error(request, error))
            })
            .collect();
        let arguments =
            WriteSet::collect(&runs, &order, events).and_then(|set| set.arguments()).map_err(BatchFailure)?;
        let connection = self.connection().await?;
        match sqlx::query_with(write, arguments).execute(&mut *connection).await {
            Ok(_) => Ok(outcomes),
            Err(error) => {
                // Undoing the savepoint succeeds only if the failure came before the COMMIT.
                self.undo_savepoint(&error).await?;
                tracing::debug!(%error, "a SQLite write batch failed; writing its operations one by one");
                self.one_by_one(requests).await
            }
        }
    }

    /// Writes each operation on its own, inside its own savepoint, then commits: an operation whose
    /// writes fail is rolled back alone and answered with the error.
    async fn one_by_one(&mut self, requests: &[Request]) -> Result<Vec<Outcome>, BatchFailure> {
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            let outcome = match request {
                Request::Purge { terminal_before, waiting_before, batch } => {
                    self.purge(*terminal_before, *waiting_before, *batch).await?
                }
                _ => self.write_one(request).await?,
            };
            outcomes.push(outcome);
        }
        self.execute("COMMIT").await?;
        Ok(outcomes)
    }

    async fn write_one(&mut self, request: &Request) -> Result<Outcome, BatchFailure> {
        let mut runs = self.read_runs(request.run_id().into_iter(), SELECT_RUNS).await?;
        let mut order = Vec::new();
        let mut events = Vec::new();
        let outcome = match plan(request, &mut runs, &mut order, &mut events) {
            Ok(outcome) => outcome,
            Err(error) => return Ok(Outcome::error(request, error)),
        };
        let arguments = match WriteSet::collect(&runs, &order, events).and_then(|set| set.arguments()) {
            Ok(arguments) => arguments,
            Err(error) => return Ok(Outcome::error(request, error)),
        };
        let connection = self.connection().await?;
        match sqlx::query_with(WRITE_ONE, arguments).execute(&mut *connection).await {
            Ok(_) => Ok(outcome),
            Err(error) => {
                self.undo_savepoint(&error).await?;
                Ok(Outcome::error(request, self.error("cannot write", &error)))
            }
        }
    }

    async fn purge(
        &mut self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> Result<Outcome, BatchFailure> {
        let secrets = self.secrets.clone();
        let connection = self.connection().await?;
        let deleted = sqlx::query(PURGE)
            .bind(terminal_before)
            .bind(waiting_before)
            .bind(i64::from(batch))
            .execute(&mut *connection)
            .await
            .map_err(|e| BatchFailure(database_error(&secrets, "cannot purge runs", &e)))?;
        Ok(Outcome::Count(Ok(deleted.rows_affected())))
    }

    /// Reads every run with one of `ids` (with `sql`: [`SELECT_RUNS`], or [`BEGIN_AND_SELECT_RUNS`]
    /// to begin the batch's transaction first). A row that cannot be decoded is kept as its error,
    /// for the operations on that run.
    async fn read_runs<'i>(
        &mut self,
        ids: impl Iterator<Item = &'i str>,
        sql: &'static str,
    ) -> Result<HashMap<String, Entry>, BatchFailure> {
        let mut ids: Vec<&str> = ids.collect();
        ids.sort_unstable();
        ids.dedup();
        let ids = serde_json::to_string(&ids).map_err(|e| BatchFailure(StoreError::Database(e.to_string())))?;
        let secrets = self.secrets.clone();
        let connection = self.connection().await?;
        let rows = sqlx::query(sql)
            .bind(ids)
            .fetch_all(&mut *connection)
            .await
            .map_err(|e| BatchFailure(database_error(&secrets, "cannot read runs", &e)))?;
        let mut runs = HashMap::with_capacity(rows.len());
        for row in &rows {
            match read_run_row(row) {
                Ok(encoded) => {
                    let stored = Some((encoded.version, encoded.last_seq));
                    runs.insert(encoded.id.clone(), Entry { state: encoded.decode(), stored, changed: false });
                }
                Err(error) => tracing::warn!(%error, "skipping a run whose id cannot be read"),
            }
        }
        Ok(runs)
    }

    async fn execute(&mut self, sql: &'static str) -> Result<(), BatchFailure> {
        let secrets = self.secrets.clone();
        let connection = self.connection().await?;
        connection.execute(sql).await.map(drop).map_err(|e| BatchFailure(database_error(&secrets, sql, &e)))
    }

    /// Undoes the writes of the operation (or batch) whose statement failed. If SQLite already rolled
    /// the whole transaction back (it may after an I/O error), or the failure was the COMMIT, the
    /// savepoint is gone and this fails: the batch then fails as a whole, as it must.
    async fn undo_savepoint(&mut self, cause: &sqlx::Error) -> Result<(), BatchFailure> {
        let failure = BatchFailure(self.error("the write transaction failed", cause));
        let connection = self.connection().await?;
        let mut undo = connection.execute_many(UNDO_ONE);
        while let Some(result) = undo.next().await {
            if result.is_err() {
                return Err(failure);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::run::RunStatus;

    /// The writer and the readers share one set of connection options; a reader shows what they are.
    #[tokio::test]
    async fn connections_are_durable_and_patient() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tollgate-store-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let checked = check_connection_settings(&dir).await;
        std::fs::remove_dir_all(&dir)?;
        checked
    }

    async fn check_connection_settings(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open(&format!("sqlite://{}", dir.join("t.db").display())).await?;
        let mut connection = store.reader.acquire().await?;
        let number = |name: &'static str| sqlx::query_scalar::<_, i64>(AssertSqlSafe(format!("PRAGMA {name}")));
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut *connection).await?;
        assert_eq!(mode, "wal");
        assert_eq!(number("synchronous").fetch_one(&mut *connection).await?, 2, "2 is FULL");
        assert_eq!(number("foreign_keys").fetch_one(&mut *connection).await?, 1);
        assert_eq!(number("busy_timeout").fetch_one(&mut *connection).await?, 5000);
        drop(connection);
        store.close().await;
        Ok(())
    }

    /// Every query stays an index search at any size (BENCH.md D: a million waiting runs): no full
    /// scan of `runs` or `events`, and no sort of more than a page.
    #[tokio::test]
    async fn queries_use_indexes() -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open("sqlite::memory:").await?;
        let mut statements: Vec<String> =
            [SELECT_RUN, SELECT_RUNS, SELECT_EVENTS, SELECT_DUE, PURGE, PREFIX_FIRST, PREFIX_COUNT]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
        for status in [None, Some(RunStatus::WaitingForApproval)] {
            for agent in [None, Some("demo".to_owned())] {
                for cursor in [None, Some("x".to_owned())] {
                    statements.push(list_sql(&RunQuery { status, agent: agent.clone(), limit: 50, cursor }));
                }
            }
        }
        // The writer's statements, one at a time (EXPLAIN takes one statement).
        statements.extend(
            WRITE_ONE.split(";\n").filter(|s| s.starts_with("INSERT") || s.starts_with("UPDATE")).map(str::to_owned),
        );
        statements.push("DELETE FROM events WHERE run_id = ?1".to_owned());
        for sql in statements {
            let plan: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}"))).fetch_all(&store.reader).await?;
            let steps: Vec<&str> = plan.iter().map(|(_, _, _, step)| step.as_str()).collect();
            let full_scan = steps.iter().any(|step| {
                (step.starts_with("SCAN runs") && !step.contains("USING INDEX sqlite_autoindex_runs_1"))
                    || step.starts_with("SCAN events")
            });
            assert!(!full_scan, "{sql}\n{steps:#?}");
            // A sort next to a search of `runs` sorts every row found, not just a page of them.
            let sorts_rows = plan.iter().any(|(_, parent, _, step)| {
                step.starts_with("USE TEMP B-TREE")
                    && plan
                        .iter()
                        .any(|(_, p, _, s)| p == parent && (s.starts_with("SEARCH runs") || s.starts_with("SCAN runs")))
            });
            assert!(!sorts_rows, "the rows must come in index order: {sql}\n{steps:#?}");
        }
        store.close().await;
        Ok(())
    }
}
