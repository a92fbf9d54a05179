//! The SQLite backend: one file, WAL, `synchronous = FULL`, with group commit.
//!
//! SQLite lets one connection write at a time, and with `synchronous = FULL` every commit waits for a
//! sync of the WAL, so committing each write on its own would cap the store at one sync per
//! transition. There is one write connection, and one thread at a time commits through it:
//!
//! - when no other write is queued and the connection is free, the caller's own thread commits its
//!   write at once (one run at a time then costs no hand-off between threads);
//! - otherwise the write joins a queue, and the writer thread takes whatever is queued (up to
//!   [`MAX_BATCH`]) and runs it as ONE transaction (`BEGIN IMMEDIATE` … `COMMIT`) with one sync.
//!
//! Inside a transaction, each operation in order:
//!
//! 1. reads its run (each operation sees the writes of those before it in the batch, so the
//!    compare-and-set of a [`Guard`] is exact);
//! 2. checks and applies itself in Rust ([`plan_transition`], [`plan_create`], [`plan_append`]) — an
//!    operation that conflicts or does not apply is answered with its error and writes nothing;
//! 3. writes the run's row and its events inside its own `SAVEPOINT`: if a write fails (a
//!    constraint, say, because a row was edited behind Tollgate's back), that savepoint is rolled back
//!    and only that operation gets the error.
//!
//! Every caller is answered only after the COMMIT has returned, so an `Ok` means durable; if the
//! transaction fails as a whole (the COMMIT, an I/O error that ends it, a panic), every operation of
//! the batch gets the retryable [`StoreError::Database`] and none of them happened.
//!
//! The write connection's automatic checkpoint is off: a checkpointer thread with its own connection
//! copies the WAL back into the database file (`PASSIVE`: it never blocks the writer or the readers)
//! every 1,000 write operations and after a quiet spell; a commit that leaves the WAL longer than
//! `RESTART_FRAMES` copies what is left itself, so that the WAL starts over instead of growing.
//!
//! Reads (get, list, events, due, resolve_prefix, counts) run on the calling thread, on a read
//! connection of a small pool; WAL lets them read the last committed state while a write goes on.
//! They are short index lookups (at most a page of rows), so they do not hold an async worker long.

use crate::StoreOptions;
use crate::codec::{
    ChainHead, Columns, EventRow, PREFIX_COUNT_CAP, RunRow, Secrets, database_error, decode_event, decode_run,
    keep_readable, plan_append, plan_create, plan_transition, prefix_upper_bound, read_run_row, resolve_prefix_answer,
    run_columns, status_counts,
};
use crate::encryption::DataKeys;
use crate::migrations::{self, Migration};
use rusqlite::{Connection, OpenFlags, OptionalExtension, ToSql, params, params_from_iter};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tollgate_core::BoxFuture;
use tollgate_core::event::{NewEvent, StoredEvent};
use tollgate_core::run::{Millis, RunRecord, RunState, RunStatus, Transition};
use tollgate_core::store::{Guard, RunPage, RunQuery, RunStore, StoreError};

/// The most operations the writer puts into one transaction.
pub const MAX_BATCH: usize = 256;

/// How many write operations may wait for the writer before callers wait to enqueue.
const QUEUE_CAPACITY: usize = 4096;

/// How long a connection waits for another process's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Read connections kept open between reads.
const IDLE_READERS: usize = 8;

/// Write operations between two checkpoints of the WAL into the database file (each writes about ten
/// pages: some 40 MiB of WAL; checkpointing four times as often cost a third more CPU per run).
const CHECKPOINT_EVERY: u64 = 1000;

/// A WAL holding more frames than this (16 MiB) after a commit is finished by the write connection
/// itself, so that the next transaction starts it over from the top: commits then overwrite the
/// file's blocks instead of growing it (a sync that must also record a new file size costs twice the
/// CPU).
const RESTART_FRAMES: i32 = 4096;

/// What a WAL file is cut back to when it starts over.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The checkpointer also runs this long after the last one when writes came in meanwhile.
const CHECKPOINT_IDLE: Duration = Duration::from_secs(2);

/// Prepared statements kept per connection (the writer uses about ten, the readers about twenty).
const STATEMENT_CACHE: usize = 64;

/// The schema changes of this backend, oldest first.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "runs_and_events",
    sql: include_str!("../migrations/sqlite/0001_runs_and_events.sql"),
}];

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ?1");
const INSERT_RUN: &str = concat!(
    "INSERT INTO runs (",
    run_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ",
    "?23, ?24)"
);
const INSERT_EVENT: &str =
    "INSERT INTO events (run_id, seq, at, kind, round, data, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
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
/// A scan of the small `(status, id)` index, not of the table (for `/metrics`, which caches it).
const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM runs GROUP BY status";
const PREFIX_FIRST: &str = "SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 2";
const PREFIX_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE id >= ?1 AND id < ?2 LIMIT ?3)";

impl Columns for rusqlite::Row<'_> {
    fn text(&self, index: usize) -> Result<String, String> {
        self.get(index).map_err(|e| e.to_string())
    }

    fn optional_text(&self, index: usize) -> Result<Option<String>, String> {
        self.get(index).map_err(|e| e.to_string())
    }

    fn int(&self, index: usize) -> Result<i64, String> {
        self.get(index).map_err(|e| e.to_string())
    }

    fn optional_int(&self, index: usize) -> Result<Option<i64>, String> {
        self.get(index).map_err(|e| e.to_string())
    }
}

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
    /// Fires when the writer thread has finished the queue and closed its connection.
    writer_done: oneshot::Receiver<()>,
    /// The write path, shared with the writer thread (a caller commits its own write through it when
    /// nothing else is queued).
    committer: Arc<Writer>,
    /// Writes submitted and not yet answered.
    under_way: AtomicUsize,
    /// Wakes the checkpointer thread (file databases only); dropping it stops the thread.
    checkpoints: Option<std::sync::mpsc::SyncSender<()>>,
    readers: Readers,
    secrets: Secrets,
    /// Opens the encrypted columns on reads (the writer holds the same keys); `None`: plaintext.
    keys: Option<Arc<DataKeys>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// Where a URL's database lives.
#[derive(Clone, Debug, PartialEq)]
enum Location {
    /// A file, as an SQLite URI (`file:PATH?QUERY`, `%XX` escapes kept for SQLite to decode).
    File(String),
    /// A private in-memory database: one connection, shared by the writer and the readers.
    Memory,
}

impl Location {
    /// `sqlite://FILE[?QUERY]`, `sqlite:FILE`, `sqlite:///ABSOLUTE/FILE` or `sqlite::memory:`. The
    /// query is handed to SQLite as URI parameters (`mode=ro`, say).
    fn parse(url: &str) -> Result<Location, StoreError> {
        let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).ok_or_else(|| {
            StoreError::Database("invalid SQLite URL: expected sqlite://FILE or sqlite::memory:".to_owned())
        })?;
        let (file, query) = rest.split_once('?').map_or((rest, None), |(file, query)| (file, Some(query)));
        match file {
            ":memory:" => Ok(Location::Memory),
            "" => Err(StoreError::Database("invalid SQLite URL: it names no file".to_owned())),
            _ => Ok(Location::File(match query {
                Some(query) => format!("file:{file}?{query}"),
                None => format!("file:{file}"),
            })),
        }
    }

    /// A new connection with Tollgate's settings.
    fn connect(&self) -> rusqlite::Result<Connection> {
        let connection = match self {
            Location::File(uri) => Connection::open_with_flags(
                uri,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?,
            Location::Memory => Connection::open_in_memory()?,
        };
        connection.busy_timeout(BUSY_TIMEOUT)?;
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        connection.pragma_update(None, "foreign_keys", true)?;
        if let Location::File(_) = self {
            let mode: String = connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(mode, "the SQLite database is not in WAL mode");
            }
            connection.pragma_update(None, "synchronous", "FULL")?;
        }
        Ok(connection)
    }
}

impl SqliteStore {
    /// Opens (creating it if missing) the database `url` names — `sqlite://relative.db`,
    /// `sqlite:///absolute/path.db` or `sqlite::memory:` — applies the embedded migrations, and starts
    /// the writer thread.
    ///
    /// # Errors
    /// [`StoreError::NewerSchema`] when the file was written by a newer Tollgate;
    /// [`StoreError::Database`] when it cannot be opened or migrated.
    pub async fn open(url: &str) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(url, StoreOptions::default()).await
    }

    /// [`SqliteStore::open`] with `options` (data keys for encryption at rest).
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn open_with(url: &str, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let secrets = Secrets::from_url(url);
        let location = Location::parse(url)?;
        let write_connection =
            location.connect().map_err(|e| database_error(&secrets, "cannot open the SQLite database", &e))?;
        migrate(&write_connection, &secrets)?;
        if let Location::File(_) = location {
            // SQLite's automatic checkpoint is off: the checkpointer thread copies the WAL (see
            // `start_checkpointer`), and a commit that leaves it long finishes it (`finish_a_long_wal`).
            let configure = |pragma: &str, value: i64| {
                write_connection
                    .pragma_update(None, pragma, value)
                    .map_err(|e| database_error(&secrets, "cannot configure the SQLite database", &e))
            };
            configure("wal_autocheckpoint", 0)?;
            configure("journal_size_limit", WAL_SIZE_LIMIT)?;
            write_connection.wal_hook(Some(finish_a_long_wal));
        }
        let write_connection = Arc::new(Mutex::new(write_connection));
        let readers = Readers {
            source: match &location {
                Location::File(_) => ReadSource::Own(location.clone()),
                Location::Memory => ReadSource::Writer(write_connection.clone()),
            },
            idle: Mutex::new(Vec::new()),
        };

        let checkpoints = match &location {
            Location::File(_) => Some(start_checkpointer(location.clone(), secrets.clone())?),
            Location::Memory => None,
        };
        let (writer, queue) = mpsc::channel(QUEUE_CAPACITY);
        let (done, writer_done) = oneshot::channel();
        let committer = Arc::new(Writer {
            connection: write_connection,
            secrets: secrets.clone(),
            checkpoints: checkpoints.clone(),
            operations: std::sync::atomic::AtomicU64::new(0),
            keys: options.data_keys.clone(),
        });
        let thread = committer.clone();
        std::thread::Builder::new()
            .name("tollgate-sqlite-writer".to_owned())
            .spawn(move || {
                thread.run(queue);
                // Nobody waiting for it (the store was dropped without `close`) is fine.
                let _ = done.send(());
            })
            .map_err(|e| StoreError::Database(format!("cannot start the SQLite writer thread: {e}")))?;
        Ok(SqliteStore {
            writer,
            writer_done,
            committer,
            under_way: AtomicUsize::new(0),
            checkpoints,
            readers,
            secrets,
            keys: options.data_keys,
        })
    }

    /// Finishes the writes already queued, then closes every connection.
    pub async fn close(self) {
        let SqliteStore { writer, writer_done, committer, checkpoints, readers, .. } = self;
        drop(writer);
        if writer_done.await.is_err() {
            tracing::warn!("the SQLite writer thread ended abnormally");
        }
        drop(checkpoints);
        drop(committer);
        drop(readers);
    }

    /// Commits a write. When no other write is under way (none submitted and unanswered, none queued)
    /// and the write connection is free, the caller's thread commits it at once (no hand-off to the
    /// writer thread and back: one run at a time costs no thread switches); otherwise it joins the
    /// writer thread's next batch, so that many runs in flight share commits. Either way at most one
    /// thread is inside SQLite's write transaction, and the answer comes after the COMMIT.
    async fn submit(&self, request: Request) -> Outcome {
        let _under_way = UnderWay::enter(&self.under_way);
        let alone = self.under_way.load(Ordering::Acquire) == 1;
        if alone
            && self.writer.capacity() == self.writer.max_capacity()
            && let Some(connection) = self.committer.try_connection()
        {
            return self.committer.commit_alone(&connection, request);
        }
        let record = request.answers_record();
        let (reply, answer) = oneshot::channel();
        if self.writer.send(WriteOp { request, reply }).await.is_err() {
            return Outcome::error(record, writer_gone());
        }
        answer.await.unwrap_or_else(|_| Outcome::error(record, writer_gone()))
    }

    async fn write_record(&self, request: Request) -> Result<RunRecord, StoreError> {
        match self.submit(request).await {
            Outcome::Record(result) => result,
            Outcome::Count(_) => Err(mismatched_outcome()),
        }
    }

    async fn write_count(&self, request: Request) -> Result<u64, StoreError> {
        match self.submit(request).await {
            Outcome::Count(result) => result,
            Outcome::Record(_) => Err(mismatched_outcome()),
        }
    }

    /// Runs `read` on a read connection; a database error is reported with `context`.
    fn read<T>(&self, context: &str, read: impl FnOnce(&Connection) -> Result<T, ReadError>) -> Result<T, StoreError> {
        self.readers.read(read).map_err(|error| match error {
            ReadError::Database(e) => database_error(&self.secrets, context, &e),
            ReadError::Store(e) => e,
        })
    }

    fn get_run(&self, id: &str) -> Result<RunRecord, StoreError> {
        let keys = self.keys.as_deref();
        let run = self.read("cannot read a run", |connection| {
            let mut statement = connection.prepare_cached(SELECT_RUN)?;
            Ok(statement.query_row([id], |row| Ok(decode_run(row, keys))).optional()?)
        })?;
        run.unwrap_or_else(|| Err(StoreError::NotFound(id.to_owned())))
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        if query.limit == 0 {
            return Ok(RunPage { runs: Vec::new(), next_cursor: None });
        }
        let mut arguments: Vec<&dyn ToSql> = Vec::with_capacity(4);
        let status = query.status.map(|status| status.as_str());
        if let Some(status) = &status {
            arguments.push(status);
        }
        if let Some(agent) = &query.agent {
            arguments.push(agent);
        }
        if let Some(cursor) = &query.cursor {
            arguments.push(cursor);
        }
        let fetch = i64::from(query.limit) + 1;
        arguments.push(&fetch);
        let keys = self.keys.as_deref();
        let rows = self.read("cannot list runs", |connection| {
            let mut statement = connection.prepare_cached(&list_sql(query))?;
            let rows =
                statement.query_map(params_from_iter(arguments), |row| Ok((row.get(0), decode_run(row, keys))))?;
            Ok(rows.collect::<Result<Vec<(rusqlite::Result<String>, _)>, _>>()?)
        })?;
        let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
        let next_cursor =
            if rows.len() > limit { rows.get(limit - 1).and_then(|(id, _)| id.as_ref().ok().cloned()) } else { None };
        let runs = rows.into_iter().take(limit).filter_map(|(_, run)| keep_readable(run, "list")).collect();
        Ok(RunPage { runs, next_cursor })
    }

    fn resolve(&self, prefix: &str) -> Result<String, StoreError> {
        let upper = prefix_upper_bound(prefix);
        let (first, count) = self.read("cannot look up a run id prefix", |connection| {
            let mut statement = connection.prepare_cached(PREFIX_FIRST)?;
            let first =
                statement.query_map([prefix, upper.as_str()], |row| row.get(0))?.collect::<Result<Vec<String>, _>>()?;
            let count = if first.len() > 1 {
                let mut statement = connection.prepare_cached(PREFIX_COUNT)?;
                statement.query_row(params![prefix, upper, PREFIX_COUNT_CAP + 1], |row| row.get(0))?
            } else {
                0
            };
            Ok((first, count))
        })?;
        resolve_prefix_answer(prefix, first, count)
    }

    fn read_events(&self, id: &str, after: u64, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
        let keys = self.keys.as_deref();
        self.read("cannot read events", |connection| {
            let mut statement = connection.prepare_cached(SELECT_EVENTS)?;
            let after = i64::try_from(after).unwrap_or(i64::MAX);
            let events = statement
                .query_map(params![id, after, i64::from(limit)], |row| Ok(decode_event(id, row, keys)))?
                .collect::<Result<Vec<_>, _>>()?;
            if events.is_empty() && !run_exists(connection, id)? {
                return Err(ReadError::Store(StoreError::NotFound(id.to_owned())));
            }
            Ok(events.into_iter().collect::<Result<Vec<_>, _>>()?)
        })
    }

    fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let counts = self.read("cannot count runs", |connection| {
            let mut statement = connection.prepare_cached(COUNT_BY_STATUS)?;
            let rows = statement.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(status_counts(counts))
    }

    fn due_runs(&self, now: Millis, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let keys = self.keys.as_deref();
        let runs = self.read("cannot read due runs", |connection| {
            let mut statement = connection.prepare_cached(SELECT_DUE)?;
            let runs = statement.query_map(params![now, i64::from(limit)], |row| Ok(decode_run(row, keys)))?;
            Ok(runs.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(runs.into_iter().filter_map(|run| keep_readable(run, "due")).collect())
    }
}

/// Counts a write as under way until it is answered (or its caller stops waiting).
struct UnderWay<'a>(&'a AtomicUsize);

impl<'a> UnderWay<'a> {
    fn enter(count: &'a AtomicUsize) -> UnderWay<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        UnderWay(count)
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn run_exists(connection: &Connection, id: &str) -> rusqlite::Result<bool> {
    connection.prepare_cached(RUN_EXISTS)?.exists([id])
}

/// A read's failure: the database's, or a store answer (not found) decided inside the read.
enum ReadError {
    Database(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for ReadError {
    fn from(error: rusqlite::Error) -> ReadError {
        ReadError::Database(error)
    }
}

impl From<StoreError> for ReadError {
    fn from(error: StoreError) -> ReadError {
        ReadError::Store(error)
    }
}

/// The read connections.
struct Readers {
    source: ReadSource,
    /// Connections not in use (file databases only).
    idle: Mutex<Vec<Connection>>,
}

enum ReadSource {
    /// Each read takes a connection of its own to the file (WAL: readers never wait for the writer).
    Own(Location),
    /// An in-memory database has one connection: the writer's.
    Writer(Arc<Mutex<Connection>>),
}

impl Readers {
    fn read<T>(&self, read: impl FnOnce(&Connection) -> Result<T, ReadError>) -> Result<T, ReadError> {
        match &self.source {
            ReadSource::Writer(connection) => read(&lock(connection)),
            ReadSource::Own(location) => {
                let idle = lock(&self.idle).pop();
                let connection = match idle {
                    Some(connection) => connection,
                    None => {
                        let connection = location.connect()?;
                        connection.pragma_update(None, "query_only", true)?;
                        connection
                    }
                };
                let result = read(&connection);
                let mut idle = lock(&self.idle);
                if idle.len() < IDLE_READERS {
                    idle.push(connection);
                }
                result
            }
        }
    }
}

/// A mutex's guard; a panic while it was held leaves nothing half-done that matters here (the writer
/// rolls back an open transaction before its next batch), so poisoning is ignored.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
    StoreError::Database("the SQLite store is closed (its writer thread has stopped)".to_owned())
}

impl RunStore for SqliteStore {
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>> {
        Box::pin(self.write_record(Request::Create { run, events }))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        Box::pin(async move { self.get_run(id) })
    }

    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(async move { self.resolve(prefix) })
    }

    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>> {
        Box::pin(async move { self.list_runs(&query) })
    }

    fn transition<'a>(
        &'a self,
        id: &'a str,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        let request = Request::Transition { id: id.to_owned(), guard, transition, events, now };
        Box::pin(self.write_record(request))
    }

    fn append<'a>(
        &'a self,
        id: &'a str,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let request = Request::Append { id: id.to_owned(), owner: owner.to_owned(), events, lease_until };
        Box::pin(self.write_count(request))
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(async move { self.read_events(id, after, limit) })
    }

    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move { self.due_runs(now, limit) })
    }

    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>> {
        Box::pin(async move { self.count_runs() })
    }

    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        let request = Request::Purge { terminal_before, waiting_before, batch };
        Box::pin(self.write_count(request))
    }
}

/// Starts the checkpointer: a thread with its own connection that copies the WAL back into the
/// database file (`PRAGMA wal_checkpoint(PASSIVE)`: it never waits for, nor blocks, the writer or the
/// readers) when woken and after a quiet spell. The write connection's own automatic checkpoint is
/// off (see [`finish_a_long_wal`] for the one it does run). The thread ends when the returned sender is
/// dropped.
fn start_checkpointer(location: Location, secrets: Secrets) -> Result<std::sync::mpsc::SyncSender<()>, StoreError> {
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    let connection =
        location.connect().map_err(|e| database_error(&secrets, "cannot open the SQLite checkpoint connection", &e))?;
    std::thread::Builder::new()
        .name("tollgate-sqlite-checkpoint".to_owned())
        .spawn(move || {
            // Woken every CHECKPOINT_EVERY write operations, or after a quiet spell (a checkpoint of an empty WAL
            // costs next to nothing).
            while let Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) = woken.recv_timeout(CHECKPOINT_IDLE) {
                if let Err(e) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %database_error(&secrets, "checkpoint", &e), "a WAL checkpoint failed");
                }
            }
        })
        .map_err(|e| StoreError::Database(format!("cannot start the SQLite checkpoint thread: {e}")))?;
    Ok(wake)
}

/// Called by SQLite on the write connection after each commit, with the frames now in the WAL. While
/// commits keep coming, the checkpointer (beside them) never copies the very last frames, and SQLite
/// starts a WAL over only once all of them are copied: past [`RESTART_FRAMES`], the write connection
/// copies what is left itself (`PASSIVE`, so never waiting on anyone), and its next transaction starts
/// the WAL over. Its own errors are not the commit's (which has happened): they are only logged, and
/// the next commit tries again.
fn finish_a_long_wal(wal: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    if frames > RESTART_FRAMES
        && let Err(e) = wal.checkpoint_v2(rusqlite::hooks::CheckpointMode::PASSIVE)
    {
        tracing::debug!(error = %e, "the write connection could not finish the WAL yet");
    }
    Ok(())
}

/// Applies the migrations this build knows, in one `BEGIN IMMEDIATE` transaction (so two processes
/// opening the same new file do not both migrate it).
fn migrate(connection: &Connection, secrets: &Secrets) -> Result<(), StoreError> {
    let error = |e: rusqlite::Error| database_error(secrets, "cannot migrate the SQLite database", &e);
    connection.execute_batch("BEGIN IMMEDIATE").map_err(error)?;
    let outcome = (|| {
        connection.execute_batch(migrations::CREATE_TABLE).map_err(error)?;
        let found: Option<i64> =
            connection.query_row(migrations::SELECT_VERSION, [], |row| row.get(0)).map_err(error)?;
        for migration in migrations::to_apply(MIGRATIONS, found.unwrap_or(0))? {
            connection.execute_batch(migration.sql).map_err(error)?;
            connection
                .execute(
                    "INSERT INTO tollgate_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
                    params![migration.version, migration.name, migrations::now_millis()],
                )
                .map_err(error)?;
        }
        Ok(())
    })();
    match outcome {
        Ok(()) => connection.execute_batch("COMMIT").map_err(error),
        Err(failure) => {
            if let Err(e) = connection.execute_batch("ROLLBACK") {
                tracing::warn!(error = %e, "cannot roll back a failed SQLite migration");
            }
            Err(failure)
        }
    }
}

/// A write waiting for the writer thread, and where its answer goes.
struct WriteOp {
    request: Request,
    reply: oneshot::Sender<Outcome>,
}

/// A write operation.
enum Request {
    Create { run: RunRecord, events: Vec<NewEvent> },
    Transition { id: String, guard: Guard, transition: Transition, events: Vec<NewEvent>, now: Millis },
    Append { id: String, owner: String, events: Vec<NewEvent>, lease_until: Millis },
    Purge { terminal_before: Millis, waiting_before: Millis, batch: u32 },
}

/// An operation's answer, held until its batch has committed.
#[expect(clippy::large_enum_variant, reason = "lives only for one batch; boxing would allocate per write")]
enum Outcome {
    Record(Result<RunRecord, StoreError>),
    Count(Result<u64, StoreError>),
}

fn mismatched_outcome() -> StoreError {
    StoreError::Database("internal error: a write was answered with the wrong kind of result".to_owned())
}

impl Request {
    /// Whether its answer is a run record (otherwise a count).
    fn answers_record(&self) -> bool {
        matches!(self, Request::Create { .. } | Request::Transition { .. })
    }
}

impl Outcome {
    fn error(record: bool, error: StoreError) -> Outcome {
        if record { Outcome::Record(Err(error)) } else { Outcome::Count(Err(error)) }
    }
}

/// A failure that leaves the batch's transaction unusable: the whole batch is undone.
struct BatchFailure(StoreError);

/// What one checked operation writes.
struct Planned {
    outcome: Outcome,
    run_id: String,
    row: RowWrite,
    events: Vec<EventRow>,
}

#[expect(clippy::large_enum_variant, reason = "lives only while one operation is written")]
enum RowWrite {
    Insert(RunRow),
    /// The new row, and the stored one it replaces (whose version and last_seq must still be there).
    Update {
        new: RunRow,
        old: RunRow,
    },
}

/// The write path: the one write connection, committed through by the writer thread (batches) or by
/// a caller when nothing else is queued.
struct Writer {
    connection: Arc<Mutex<Connection>>,
    secrets: Secrets,
    /// Wakes the checkpointer every [`CHECKPOINT_EVERY`] operations (file databases only).
    checkpoints: Option<std::sync::mpsc::SyncSender<()>>,
    operations: std::sync::atomic::AtomicU64,
    /// Seals the encrypted columns (and opens them when a run is read to be changed).
    keys: Option<Arc<DataKeys>>,
}

impl Writer {
    /// Commits batches until every sender is gone and the queue is empty.
    fn run(&self, mut queue: mpsc::Receiver<WriteOp>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = queue.blocking_recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            let (requests, repliers): (Vec<Request>, Vec<oneshot::Sender<Outcome>>) =
                batch.drain(..).map(|op| (op.request, op.reply)).unzip();
            let records: Vec<bool> = requests.iter().map(Request::answers_record).collect();
            let committed = self.commit(&lock(&self.connection), requests);
            // A caller that stopped waiting has nobody to tell.
            match committed {
                Ok(outcomes) => {
                    repliers.into_iter().zip(outcomes).for_each(|(reply, outcome)| drop(reply.send(outcome)));
                }
                Err(error) => {
                    for (reply, record) in repliers.into_iter().zip(records) {
                        drop(reply.send(Outcome::error(record, error.clone())));
                    }
                }
            }
        }
    }

    /// The write connection, if it is free right now.
    fn try_connection(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.connection.try_lock() {
            Ok(connection) => Some(connection),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Commits one request on its own, on the caller's thread.
    fn commit_alone(&self, connection: &Connection, request: Request) -> Outcome {
        let record = request.answers_record();
        match self.commit(connection, vec![request]).map(|mut outcomes| outcomes.pop()) {
            Ok(Some(outcome)) => outcome,
            Ok(None) => Outcome::error(record, mismatched_outcome()),
            Err(error) => Outcome::error(record, error),
        }
    }

    /// One batch, one transaction: every operation's outcome, or the error that undid them all. A
    /// panic inside is caught and undoes the batch too.
    fn commit(&self, connection: &Connection, requests: Vec<Request>) -> Result<Vec<Outcome>, StoreError> {
        let count = requests.len();
        let committed = std::panic::catch_unwind(AssertUnwindSafe(|| self.commit_batch(connection, requests)))
            .unwrap_or_else(|_| {
                Err(BatchFailure(StoreError::Database(
                    "internal error: the SQLite writer failed; the batch was rolled back".to_owned(),
                )))
            });
        match committed {
            Ok(outcomes) => {
                self.committed(count as u64);
                Ok(outcomes)
            }
            Err(BatchFailure(error)) => {
                tracing::warn!(%error, ops = count, "a SQLite write batch was rolled back");
                if !connection.is_autocommit()
                    && let Err(e) = connection.execute_batch("ROLLBACK")
                {
                    tracing::warn!(error = %e, "cannot roll back a failed SQLite write batch");
                }
                Err(error)
            }
        }
    }

    /// Counts a commit of `operations` writes; each time the count passes a multiple of
    /// [`CHECKPOINT_EVERY`] the checkpointer is woken (if it is already awake, the wake-up is dropped).
    fn committed(&self, operations: u64) {
        let before = self.operations.fetch_add(operations, Ordering::Relaxed);
        if before / CHECKPOINT_EVERY != (before + operations) / CHECKPOINT_EVERY
            && let Some(checkpoints) = &self.checkpoints
        {
            let _ = checkpoints.try_send(());
        }
    }

    fn fail(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> BatchFailure + '_ {
        move |e| BatchFailure(database_error(&self.secrets, context, &e))
    }

    fn error(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |e| database_error(&self.secrets, context, &e)
    }

    /// One transaction for the whole batch: each operation is applied in order, in its own savepoint.
    fn commit_batch(&self, connection: &Connection, requests: Vec<Request>) -> Result<Vec<Outcome>, BatchFailure> {
        execute(connection, "BEGIN IMMEDIATE").map_err(self.fail("cannot begin a write transaction"))?;
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(self.apply(connection, request)?);
        }
        execute(connection, "COMMIT").map_err(self.fail("cannot commit"))?;
        Ok(outcomes)
    }

    /// Checks and writes one operation. Its own failure (a refused transition, a failed write) is its
    /// outcome; a failure that ends the transaction is the batch's.
    fn apply(&self, connection: &Connection, request: Request) -> Result<Outcome, BatchFailure> {
        if let Request::Purge { terminal_before, waiting_before, batch } = request {
            return self
                .in_savepoint(connection, |connection| {
                    let mut statement = connection.prepare_cached(PURGE).map_err(self.error("cannot purge runs"))?;
                    let deleted = statement
                        .execute(params![terminal_before, waiting_before, i64::from(batch)])
                        .map_err(self.error("cannot purge runs"))?;
                    Ok(Outcome::Count(Ok(u64::try_from(deleted).unwrap_or(u64::MAX))))
                })
                .map(|outcome| outcome.unwrap_or_else(|error| Outcome::Count(Err(error))));
        }
        let record = request.answers_record();
        let planned = match self.plan(connection, request) {
            Ok(planned) => planned,
            Err(error) => return Ok(Outcome::error(record, error)),
        };
        let Planned { outcome, run_id, row, events } = planned;
        let written = self.in_savepoint(connection, |connection| {
            write_run(connection, &row).map_err(self.error("cannot write a run"))?;
            if let RowWrite::Update { .. } = row
                && connection.changes() != 1
            {
                return Err(StoreError::Database(format!("run {run_id} changed during its write")));
            }
            let mut insert = connection.prepare_cached(INSERT_EVENT).map_err(self.error("cannot write events"))?;
            for event in &events {
                insert
                    .execute(params![run_id, event.seq, event.at, event.kind, event.round, event.data, event.hash])
                    .map_err(self.error("cannot write events"))?;
            }
            Ok(())
        })?;
        Ok(match written {
            Ok(()) => outcome,
            Err(error) => Outcome::error(record, error),
        })
    }

    /// Runs `write` inside `SAVEPOINT op`: released when it succeeds, rolled back when it fails (the
    /// failure is then the operation's). If the savepoint itself cannot be handled, the transaction is
    /// in an unknown state and the batch fails.
    fn in_savepoint<T>(
        &self,
        connection: &Connection,
        write: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<Result<T, StoreError>, BatchFailure> {
        execute(connection, "SAVEPOINT op").map_err(self.fail("cannot open a savepoint"))?;
        match write(connection) {
            Ok(value) => {
                execute(connection, "RELEASE op").map_err(self.fail("cannot release a savepoint"))?;
                Ok(Ok(value))
            }
            Err(error) => {
                // Undoing succeeds only if SQLite did not already end the transaction (it may after an
                // I/O error): otherwise the batch fails as a whole, as it must.
                execute(connection, "ROLLBACK TO op")
                    .and_then(|()| execute(connection, "RELEASE op"))
                    .map_err(self.fail("the write transaction failed"))?;
                Ok(Err(error))
            }
        }
    }

    /// Reads the operation's run as the batch left it and checks the operation against it.
    fn plan(&self, connection: &Connection, request: Request) -> Result<Planned, StoreError> {
        let keys = self.keys.as_deref();
        let encode_events = |run_id: &str, stored: &[StoredEvent]| -> Result<Vec<EventRow>, StoreError> {
            stored.iter().map(|e| EventRow::encode(run_id, e, keys)).collect()
        };
        match request {
            Request::Create { run, events } => {
                if run_exists(connection, &run.id).map_err(self.error("cannot read a run"))? {
                    return Err(StoreError::Duplicate(run.id.clone()));
                }
                let (run, stored) = plan_create(run, events);
                Ok(Planned {
                    events: encode_events(&run.id, &stored)?,
                    row: RowWrite::Insert(RunRow::encode(&run, keys, None)?),
                    run_id: run.id.clone(),
                    outcome: Outcome::Record(Ok(run)),
                })
            }
            Request::Transition { id, guard, transition, events, now } => {
                let (current, old) = self.current(connection, &id)?;
                let (next, stored) = plan_transition(&current, &guard, &transition, events, now)?;
                Ok(Planned {
                    events: encode_events(&id, &stored)?,
                    row: RowWrite::Update { new: RunRow::encode(&next, keys, Some((&current, &old)))?, old },
                    run_id: id,
                    outcome: Outcome::Record(Ok(next)),
                })
            }
            Request::Append { id, owner, events, lease_until } => {
                let (current, old) = self.current(connection, &id)?;
                let head = ChainHead {
                    status: current.status().as_str().to_owned(),
                    lease_owner: current.lease().map(|l| l.owner.clone()),
                    last_seq: old.last_seq,
                    last_hash: current.last_hash.clone(),
                };
                let (stored, last_seq, last_hash) = plan_append(&id, &owner, head, events)?;
                let mut next = current;
                next.last_seq = last_seq;
                next.last_hash = last_hash;
                if let RunState::Running { lease, .. } = &mut next.state {
                    lease.expires_at = lease_until;
                }
                Ok(Planned {
                    events: encode_events(&id, &stored)?,
                    // Only the chain head and the lease change: the sealed values are kept as stored.
                    row: RowWrite::Update { new: RunRow::encode(&next, keys, Some((&next, &old)))?, old },
                    run_id: id,
                    outcome: Outcome::Count(Ok(last_seq)),
                })
            }
            Request::Purge { .. } => Err(StoreError::Database("internal error: a purge cannot be planned".to_owned())),
        }
    }

    /// The run as stored now (in this transaction), decoded and as its row.
    fn current(&self, connection: &Connection, id: &str) -> Result<(RunRecord, RunRow), StoreError> {
        let mut statement = connection.prepare_cached(SELECT_RUN).map_err(self.error("cannot read a run"))?;
        let row = statement
            .query_row([id], |row| Ok(read_run_row(row)))
            .optional()
            .map_err(self.error("cannot read a run"))?;
        let row = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))??;
        Ok((row.clone().decode(self.keys.as_deref())?, row))
    }
}

/// Runs a statement without parameters, prepared once per connection.
fn execute(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([]).map(drop)
}

/// Inserts or compare-and-set updates a run's row.
fn write_run(connection: &Connection, write: &RowWrite) -> rusqlite::Result<()> {
    match write {
        RowWrite::Insert(row) => connection.prepare_cached(INSERT_RUN)?.execute(run_values(row).as_slice()),
        RowWrite::Update { new, old } => {
            let (sql, values) = update_statement(new, old)?;
            connection.prepare_cached(&sql)?.execute(values.as_slice())
        }
    }
    .map(drop)
}

/// `UPDATE runs SET` only the columns whose values changed (always the version), compare-and-set on
/// the stored version and last_seq. An index whose columns are set is rewritten even when their values
/// are the same, so setting only what changed keeps a commit's pages few. The few column sets that
/// occur each stay prepared.
fn update_statement<'r>(new: &'r RunRow, old: &'r RunRow) -> rusqlite::Result<(String, Vec<&'r dyn ToSql>)> {
    let mut sql = String::from("UPDATE runs SET ");
    let mut values: Vec<&dyn ToSql> = Vec::with_capacity(24);
    let columns = run_columns!().split(',').map(str::trim);
    for ((column, value), before) in columns.zip(run_values(new)).zip(run_values(old)) {
        if column == "version" || value.to_sql()? != before.to_sql()? {
            if !values.is_empty() {
                sql.push_str(", ");
            }
            values.push(value);
            sql.push_str(&format!("{column} = ?{}", values.len()));
        }
    }
    let n = values.len();
    sql.push_str(&format!(" WHERE id = ?{} AND version = ?{} AND last_seq = ?{}", n + 1, n + 2, n + 3));
    values.extend([&new.id as &dyn ToSql, &old.version, &old.last_seq]);
    Ok((sql, values))
}

/// A row's values in [`run_columns!`] order.
fn run_values(r: &RunRow) -> [&dyn ToSql; 24] {
    [
        &r.id,
        &r.agent,
        &r.status,
        &r.version,
        &r.input,
        &r.output,
        &r.termination_reason,
        &r.iterations,
        &r.input_tokens,
        &r.output_tokens,
        &r.created_by,
        &r.created_at,
        &r.updated_at,
        &r.finished_at,
        &r.error,
        &r.suspension,
        &r.turn_digest,
        &r.required_calls,
        &r.decisions,
        &r.expires_at,
        &r.lease_owner,
        &r.lease_expires_at,
        &r.last_seq,
        &r.last_hash,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_file_or_memory() {
        assert_eq!(Location::parse("sqlite://a.db"), Ok(Location::File("file:a.db".to_owned())));
        assert_eq!(Location::parse("sqlite:///abs/a.db"), Ok(Location::File("file:/abs/a.db".to_owned())));
        assert_eq!(Location::parse("sqlite://a.db?mode=ro"), Ok(Location::File("file:a.db?mode=ro".to_owned())));
        assert_eq!(Location::parse("sqlite::memory:"), Ok(Location::Memory));
        assert_eq!(Location::parse("sqlite://:memory:"), Ok(Location::Memory));
        assert!(Location::parse("sqlite://").is_err());
        assert!(Location::parse("postgres://x").is_err());
    }

    /// Every connection is durable and patient; a reader shows what they are.
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
        let pragmas = store.read("pragmas", |connection| {
            let text = |name: &str| connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get::<_, String>(0));
            let number = |name: &str| connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get::<_, i64>(0));
            Ok((text("journal_mode")?, number("synchronous")?, number("foreign_keys")?, number("busy_timeout")?))
        })?;
        assert_eq!(pragmas, ("wal".to_owned(), 2, 1, 5000), "synchronous 2 is FULL");
        store.close().await;
        Ok(())
    }

    /// Every query stays an index search at any size (BENCH.md D: a million waiting runs): no full
    /// scan of `runs` or `events`, and no sort of more than a page.
    #[tokio::test]
    async fn queries_use_indexes() -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open("sqlite::memory:").await?;
        let mut statements: Vec<String> =
            [SELECT_RUN, SELECT_EVENTS, SELECT_DUE, PURGE, PREFIX_FIRST, PREFIX_COUNT, RUN_EXISTS]
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
        statements.push("DELETE FROM events WHERE run_id = ?1".to_owned());
        // An update as `update_statement` writes it.
        statements.push(
            "UPDATE runs SET status = ?1, version = ?2 WHERE id = ?3 AND version = ?4 AND last_seq = ?5".to_owned(),
        );
        // Counting reads every entry of an index by nature; it must at least not read the table.
        let counting = store.read("explain", |connection| {
            Ok(connection
                .query_row(&format!("EXPLAIN QUERY PLAN {COUNT_BY_STATUS}"), [], |row| row.get::<_, String>(3))?)
        })?;
        assert_eq!(counting, "SCAN runs USING COVERING INDEX runs_status_id");
        for sql in statements {
            let plan: Vec<(i64, i64, String)> = store.read("explain", |connection| {
                let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let unbound = std::iter::repeat_n(rusqlite::types::Null, statement.parameter_count());
                let rows = statement
                    .query_map(params_from_iter(unbound), |row| Ok((row.get(0)?, row.get(1)?, row.get(3)?)))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })?;
            let steps: Vec<&str> = plan.iter().map(|(_, _, step)| step.as_str()).collect();
            let full_scan = steps.iter().any(|step| {
                (step.starts_with("SCAN runs") && !step.contains("USING INDEX sqlite_autoindex_runs_1"))
                    || step.starts_with("SCAN events")
            });
            assert!(!full_scan, "{sql}\n{steps:#?}");
            // A sort next to a search of `runs` sorts every row found, not just a page of them.
            let sorts_rows = plan.iter().any(|(_, parent, step)| {
                step.starts_with("USE TEMP B-TREE")
                    && plan
                        .iter()
                        .any(|(_, p, s)| p == parent && (s.starts_with("SEARCH runs") || s.starts_with("SCAN runs")))
            });
            assert!(!sorts_rows, "the rows must come in index order: {sql}\n{steps:#?}");
        }
        store.close().await;
        Ok(())
    }
}
