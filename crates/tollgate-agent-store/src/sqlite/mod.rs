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
//! 2. checks and applies itself in Rust (`plan_transition`, `plan_create`, `plan_append` of the codec) — an
//!    operation that conflicts or does not apply is answered with its error and writes nothing;
//! 3. writes the run's row and its events (and the grants a vote remembers) inside its own
//!    `SAVEPOINT`: if a write fails (a constraint, say, because a row was edited behind Tollgate's
//!    back), that savepoint is rolled back and only that operation gets the error.
//!
//! Every caller is answered only after the COMMIT has returned, so an `Ok` means durable; if the
//! transaction fails as a whole (the COMMIT, an I/O error that ends it, a panic), every operation of
//! the batch gets that error and none of them happened.
//!
//! SQLite's extended result codes name the error (`codec::sqlite_failure`): `SQLITE_FULL` is
//! [`StoreError::DiskFull`], `SQLITE_READONLY*` [`StoreError::ReadOnly`], an `SQLITE_IOERR*` met where the
//! database's file system refuses writes (`EROFS`, asked of its folder: see `Folder`) `ReadOnly` too,
//! `SQLITE_BUSY`/`LOCKED` past the
//! busy timeout [`StoreError::Unreachable`], and `SQLITE_CORRUPT`/`NOTADB` [`StoreError::Corrupt`] for
//! the run being read or written (so it fails alone), else [`StoreError::CorruptDatabase`]. A list
//! that meets a damaged page of `runs` is read again run by run from the index of ids, skipping the
//! damaged runs as it skips any corrupt row.
//!
//! The write connection's automatic checkpoint is off: a checkpointer thread with its own connection
//! copies the WAL back into the database file (`PASSIVE`: it never blocks the writer or the readers)
//! every 1,000 write operations and after a quiet spell; a commit that leaves the WAL longer than
//! `RESTART_FRAMES` copies what is left itself, so that the WAL starts over instead of growing.
//!
//! Reads (get, list, events, due, resolve_prefix, counts, grants) run on the calling thread, on a read
//! connection of a small pool; WAL lets them read the last committed state while a write goes on.
//! They are short index lookups (at most a page of rows), so they do not hold an async worker long.
//!
//! The module is split along those seams:
//! - this file: [`SqliteStore`] (the [`RunStore`](tollgate_agent_core::RunStore) facade), the URL and
//!   connection settings, open, migrations and close;
//! - `writer`: the write path — the request queue, the writer thread, group commit, the inline commit
//!   of a lone write, and the savepoint per operation;
//! - `readers`: the pool of read connections and every query of runs that runs on it;
//! - `grants`: [`Grants`](tollgate_agent_core::Grants) — its reads, on the read connections, and its
//!   writes, requests to the writer like any other (a vote's grants go in the vote's own operation);
//! - `checkpoint`: the checkpointer thread and the write connection's WAL hook.

mod checkpoint;
mod grants;
mod readers;
mod sealing;
mod writer;

pub use writer::MAX_BATCH;

use crate::StoreOptions;
use crate::codec::{Columns, DatabaseFailure, Failure, Secrets, database_error, run_columns};
use crate::encryption::DataKeys;
use crate::grant_rows::grant_columns;
use crate::migrations::{self, Migration};
use checkpoint::{set_up_wal, start_checkpointer};
use readers::{ReadSource, Readers};
use rusqlite::{Connection, OpenFlags, params};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::RunId;
use tollgate_agent_core::event::{NewEvent, StoredEvent};
use tollgate_agent_core::run::{Lease, Millis, RunRecord, RunStatus, Transition};
use tollgate_agent_core::store::{
    ChangeFeed, Claimed, CommittedPage, EventLog, Guard, IntegrityCheck, ReaderHold, RunPage, RunQuery, RunQueue,
    RunRows, Schedules, StoreError, StoreHealth,
};
use writer::{Outcome, QUEUE_CAPACITY, Request, WriteOp, Writer};

/// How long a connection waits for another process's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection (the writer uses about ten, the readers about twenty).
const STATEMENT_CACHE: usize = 64;

/// The schema changes of this backend, oldest first.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "runs_and_events",
        sql: include_str!("../../migrations/sqlite/0001_runs_and_events.sql"),
    },
    Migration { version: 2, name: "health", sql: include_str!("../../migrations/sqlite/0002_health.sql") },
    Migration { version: 3, name: "run_metadata", sql: include_str!("../../migrations/sqlite/0003_run_metadata.sql") },
    Migration { version: 4, name: "commit_log", sql: include_str!("../../migrations/sqlite/0004_commit_log.sql") },
    Migration { version: 5, name: "queue_index", sql: include_str!("../../migrations/sqlite/0005_queue_index.sql") },
    Migration { version: 6, name: "approvals", sql: include_str!("../../migrations/sqlite/0006_approvals.sql") },
    Migration { version: 7, name: "grants", sql: include_str!("../../migrations/sqlite/0007_grants.sql") },
    Migration {
        version: 8,
        name: "grant_versions",
        sql: include_str!("../../migrations/sqlite/0008_grant_versions.sql"),
    },
    Migration {
        version: 9,
        name: "waiting_changed_index",
        sql: include_str!("../../migrations/sqlite/0009_waiting_changed_index.sql"),
    },
    Migration { version: 10, name: "run_trace", sql: include_str!("../../migrations/sqlite/0010_run_trace.sql") },
    Migration {
        version: 11,
        name: "run_trace_parent",
        sql: include_str!("../../migrations/sqlite/0011_run_trace_parent.sql"),
    },
];

// Shared by the readers and the writer (which reads a run as its batch left it).
const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ?1");
const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE id = ?1";
const SELECT_GRANT: &str = concat!("SELECT ", grant_columns!(), " FROM grants WHERE id = ?1");

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

/// The SQLite [`RunStore`](tollgate_agent_core::RunStore).
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
    /// Asked whether the file system refuses writes when a read meets an I/O error.
    folder: Folder,
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
    /// [`StoreError::NewerSchema`] when the file was written by a newer Tollgate; when it cannot be
    /// opened or migrated, the error SQLite's code names ([`StoreError::CorruptDatabase`] for a file
    /// that is not a database, [`StoreError::ReadOnly`], ...).
    pub async fn open(url: &str) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(url, StoreOptions::default()).await
    }

    /// [`SqliteStore::open`] with `options` (data keys for encryption at rest, `secure_delete`).
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn open_with(url: &str, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let secrets = Secrets::from_url(url);
        let location = Location::parse(url)?;
        let write_connection =
            location.connect().map_err(|e| database_error(&secrets, "cannot open the SQLite database", &e))?;
        if options.secure_delete {
            // Only the write connection frees pages: zeroing there is enough (readers never write, and
            // the checkpointer copies pages already zeroed).
            write_connection
                .pragma_update(None, "secure_delete", true)
                .map_err(|e| database_error(&secrets, "cannot turn on SQLite's secure_delete", &e))?;
        }
        migrate(&write_connection, &secrets)?;
        let folder = Folder::of(&write_connection);
        if let Location::File(_) = location {
            set_up_wal(&write_connection, &secrets)?;
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
            folder: folder.clone(),
            checkpoints: checkpoints.clone(),
            operations: std::sync::atomic::AtomicU64::new(0),
            keys: options.data_keys.clone(),
            taps: crate::taps::Taps::default(),
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
            folder,
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
}

/// The folder of a database file (none for a database in memory), asked after an I/O error whether
/// its file system refuses writes. A file system remounted read-only under a running server (ext4's
/// `errors=remount-ro` after a disk error, an operator's `mount -o remount,ro`) fails SQLite's writes
/// with `EROFS`, which SQLite reports as a plain `SQLITE_IOERR_WRITE` (or `_FSYNC`, `_TRUNCATE`, ...):
/// its codes do not say why, and neither does the file system's mount options (an emergency read-only
/// ext4 still says `rw`), so the folder is asked: an unnamed file created there (`O_TMPFILE`, nothing
/// is left behind) fails with `EROFS` too. Elsewhere than Linux the question is not asked and an I/O
/// error stays [`StoreError::Database`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Folder(Option<PathBuf>);

impl Folder {
    /// The folder of `connection`'s database file.
    fn of(connection: &Connection) -> Folder {
        let file = connection.path().filter(|path| !path.is_empty()).map(std::path::Path::new);
        Folder(file.and_then(std::path::Path::parent).map(std::path::Path::to_path_buf))
    }

    /// `error`, met on this folder's database, as the failure it is.
    pub(crate) fn met<'a>(&self, error: &'a rusqlite::Error) -> MetOnFile<'a> {
        MetOnFile { error, read_only: error.failure() == Failure::Io && self.refuses_writes() }
    }

    /// Whether the folder's file system refuses writes (`EROFS`).
    fn refuses_writes(&self) -> bool {
        let Some(folder) = &self.0 else { return false };
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
            matches!(rustix::fs::open(folder, flags, Mode::RUSR | Mode::WUSR), Err(rustix::io::Errno::ROFS))
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            let _ = folder;
            false
        }
    }
}

/// A SQLite error met on the database of a [`Folder`]: an I/O error there is [`Failure::ReadOnly`]
/// when the folder's file system refuses writes, any other error what its code says.
pub(crate) struct MetOnFile<'a> {
    error: &'a rusqlite::Error,
    /// An I/O error on a file system that refuses writes.
    read_only: bool,
}

impl std::fmt::Display for MetOnFile<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.read_only { write!(f, "{} (the file system is read-only)", self.error) } else { self.error.fmt(f) }
    }
}

impl DatabaseFailure for MetOnFile<'_> {
    fn failure(&self) -> Failure {
        if self.read_only { Failure::ReadOnly } else { self.error.failure() }
    }
}

fn run_exists(connection: &Connection, id: &str) -> rusqlite::Result<bool> {
    connection.prepare_cached(RUN_EXISTS)?.exists([id])
}

/// A mutex's guard; a panic while it was held leaves nothing half-done that matters here (the writer
/// rolls back an open transaction before its next batch), so poisoning is ignored.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RunRows for SqliteStore {
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>> {
        Box::pin(self.write_record(Request::Create { run, events }))
    }

    fn get<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        Box::pin(async move { self.get_run(id) })
    }

    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<RunId, StoreError>> {
        Box::pin(async move { self.resolve(prefix).map(RunId::from) })
    }

    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>> {
        Box::pin(async move { self.list_runs(&query) })
    }

    fn transition<'a>(
        &'a self,
        id: &'a RunId,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        let request = Request::Transition { id: id.to_string(), guard, transition, events, now };
        Box::pin(self.write_record(request))
    }

    fn append<'a>(
        &'a self,
        id: &'a RunId,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let request = Request::Append { id: id.to_string(), owner: owner.to_owned(), events, lease_until };
        Box::pin(self.write_count(request))
    }
}

impl EventLog for SqliteStore {
    fn events<'a>(
        &'a self,
        id: &'a RunId,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(async move { self.read_events(id, after, limit) })
    }

    fn chain_keys(&self) -> Option<&tollgate_agent_core::event::ChainKeys> {
        self.keys.as_deref().map(DataKeys::chain_keys)
    }
}

impl RunQueue for SqliteStore {
    fn claim_queued<'a>(
        &'a self,
        agents: &'a [String],
        limit: u32,
        lease: Lease,
        now: Millis,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, StoreError>> {
        // The oldest queued runs that can be read, each claimed on the version read, together (one
        // transaction when the writer is free): a run that changed since (cancelled, claimed by
        // another process on the same file) is passed over.
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let runs = self.queued_runs(agents, limit)?;
            let queued_at: Vec<Millis> = runs.iter().map(|run| run.updated_at).collect();
            let claims = runs
                .into_iter()
                .map(|run| Request::Transition {
                    id: run.id.into_string(),
                    guard: Guard::Version(run.version),
                    transition: Transition::Claim { lease: lease.clone() },
                    events: Vec::new(),
                    now,
                })
                .collect();
            let mut claimed = Vec::new();
            let mut failed = None;
            for (outcome, queued_at) in self.submit_together(claims).await.into_iter().zip(queued_at) {
                match outcome {
                    Outcome::Record(Ok(run)) => claimed.push(Claimed { run, queued_at }),
                    Outcome::Record(Err(
                        StoreError::Conflict { .. } | StoreError::Transition(_) | StoreError::NotFound(_),
                    )) => {}
                    Outcome::Record(Err(error)) | Outcome::Count(Err(error)) => failed = Some(error),
                    Outcome::Count(Ok(_)) | Outcome::Grant(_) => failed = Some(writer::mismatched_outcome()),
                }
            }
            match failed {
                // Those claimed are claimed: they are answered, and the failure is only told.
                Some(error) if !claimed.is_empty() => {
                    tracing::warn!(%error, "a queued run could not be claimed; the others were");
                    Ok(claimed)
                }
                Some(error) => Err(error),
                None => Ok(claimed),
            }
        })
    }

    fn oldest_queued(&self) -> BoxFuture<'_, Result<Option<Millis>, StoreError>> {
        Box::pin(async move { self.oldest_queued_at() })
    }
}

impl Schedules for SqliteStore {
    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move { self.due_runs(now, limit) })
    }

    fn waiting_changed<'a>(
        &'a self,
        from: (Millis, &'a str),
        until: Millis,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move { self.waiting_changed_runs(from, until, limit) })
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

impl StoreHealth for SqliteStore {
    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>> {
        Box::pin(async move { self.count_runs() })
    }

    fn probe_write(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        let request = Request::Probe { at: migrations::now_millis() };
        Box::pin(async move { self.write_count(request).await.map(drop) })
    }

    fn check_integrity(&self, depth: IntegrityCheck) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move { self.check_file(depth) })
    }
}

impl ChangeFeed for SqliteStore {
    fn tap_commits(&self, tap: &tollgate_agent_core::CommitTap) -> bool {
        self.committer.taps.add(tap);
        true
    }

    fn committed<'a>(&'a self, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Result<CommittedPage, StoreError>> {
        Box::pin(async move { self.read_committed(after, limit) })
    }

    fn hold_reader<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        position: Option<&'a str>,
        until: Millis,
        now: Millis,
    ) -> BoxFuture<'a, Result<ReaderHold, StoreError>> {
        let request = Request::Hold {
            name: name.to_owned(),
            holder: holder.to_owned(),
            position: position.map(str::to_owned),
            until,
            now,
        };
        Box::pin(async move {
            let held = self.write_count(request).await? == 1;
            // Nobody else writes the row while this holder holds it; when another does, its hold as read.
            let (stored_holder, stored_until, stored_position) = self.reader(name)?.unwrap_or_default();
            Ok(if held {
                ReaderHold::Held { position: stored_position }
            } else {
                ReaderHold::Elsewhere { holder: stored_holder, until: stored_until }
            })
        })
    }

    fn release_reader<'a>(&'a self, name: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let request = Request::Release { name: name.to_owned(), holder: holder.to_owned() };
        Box::pin(async move { self.write_count(request).await.map(drop) })
    }
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

#[cfg(test)]
mod tests {
    use super::readers::{
        COUNT_BY_STATUS, PREFIX_COUNT, PREFIX_FIRST, SELECT_DUE, SELECT_EVENTS, SELECT_WAITING_CHANGED, list_sql,
    };
    use super::writer::PURGE;
    use super::*;
    use rusqlite::params_from_iter;

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
        let dir = std::env::temp_dir().join(format!("tollgate-agent-store-unit-{}", std::process::id()));
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

    fn running(n: u64, input_bytes: usize) -> RunRecord {
        let id = RunId::from(format!("01980000-0000-7000-8000-{n:012x}"));
        RunRecord::new(id, "demo".into(), "x".repeat(input_bytes), "local".into(), 1, None)
    }

    /// A full disk, made the way SQLite reports one: the write connection's `max_page_count` is where
    /// the file stands, so the next page it needs is `SQLITE_FULL`, the code a full disk gives (a
    /// filesystem of our own to fill would need root). Every write is then `DiskFull`, not retryable,
    /// the probe too; reads go on; and once there is room again, writes work again.
    #[tokio::test]
    async fn a_full_disk_is_disk_full_for_writes_while_reads_go_on() -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open("sqlite::memory:").await?;
        let kept = store.create(running(1, 10), Vec::new()).await?;
        store.probe_write().await?;
        let pages: i64 = lock(&store.committer.connection).query_row("PRAGMA page_count", [], |row| row.get(0))?;
        lock(&store.committer.connection).query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))?;
        let mut n = 2;
        let full = loop {
            match store.create(running(n, 3000), Vec::new()).await {
                Ok(_) if n < 100 => n += 1,
                other => break other,
            }
        };
        assert!(matches!(&full, Err(StoreError::DiskFull(detail)) if detail.contains("full")), "{full:?}");
        assert!(full.as_ref().err().is_some_and(|e| !e.is_retryable()));
        assert!(matches!(store.probe_write().await, Err(StoreError::DiskFull(_))));
        assert_eq!(store.get(&kept.id).await?, kept);
        assert_eq!(store.list(RunQuery { limit: 500, ..Default::default() }).await?.runs.len(), n as usize - 1);
        lock(&store.committer.connection).query_row("PRAGMA max_page_count = 1073741823", [], |_| Ok(()))?;
        store.probe_write().await?;
        store.create(running(n, 3000), Vec::new()).await?;
        store.close().await;
        Ok(())
    }

    /// `PRAGMA query_only` on the write connection: SQLite answers `SQLITE_READONLY`, a `ReadOnly` for
    /// each write and the probe.
    #[tokio::test]
    async fn a_database_refusing_writes_is_read_only() -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open("sqlite::memory:").await?;
        let kept = store.create(running(1, 10), Vec::new()).await?;
        lock(&store.committer.connection).pragma_update(None, "query_only", true)?;
        let refused = store.create(running(2, 10), Vec::new()).await;
        assert!(matches!(refused, Err(StoreError::ReadOnly(_))), "{refused:?}");
        assert!(matches!(store.probe_write().await, Err(StoreError::ReadOnly(_))));
        assert_eq!(store.get(&kept.id).await?, kept);
        store.close().await;
        Ok(())
    }

    /// Every query stays an index search at any size (docs/benchmarks.md D: a million waiting runs): no full
    /// scan of `runs` or `events`, and no sort of more than a page.
    #[tokio::test]
    async fn queries_use_indexes() -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open("sqlite::memory:").await?;
        let mut statements: Vec<String> = [
            SELECT_RUN,
            SELECT_EVENTS,
            SELECT_DUE,
            SELECT_WAITING_CHANGED,
            PURGE,
            PREFIX_FIRST,
            PREFIX_COUNT,
            RUN_EXISTS,
        ]
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
