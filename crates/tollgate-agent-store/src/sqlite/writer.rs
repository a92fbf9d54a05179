//! The write path: one write connection, and one thread at a time committing through it.
//!
//! A write is committed on the caller's own thread when it is alone (nothing else submitted and
//! unanswered, the queue empty, the connection free); otherwise it joins the queue, and the writer
//! thread commits whatever is queued (up to [`MAX_BATCH`]) as one transaction with one sync. Inside a
//! transaction each operation reads its run as the batch left it, is checked and applied in Rust, and
//! writes in its own `SAVEPOINT`, so a failed write undoes only itself. Every caller is answered after
//! the COMMIT has returned and the commit taps were handed what each operation wrote (once the write
//! connection is free again); a transaction that fails as a whole answers every operation with its
//! error, named by SQLite's code (a full disk is [`StoreError::DiskFull`] for each of them).

use super::checkpoint::CHECKPOINT_EVERY;
use super::{Folder, SELECT_GRANT, SELECT_RUN, SqliteStore, lock, run_exists};
use crate::codec::{
    ChainHead, EventRow, RunRow, Secrets, chain_key, database_error, plan_append, plan_create, plan_transition,
    read_run_row, run_columns, run_error,
};
use crate::encryption::DataKeys;
use crate::grant_rows::{GrantRow, decode_grant, grant_columns, read_grant_row, refused_revocation, uses_in};
use crate::taps::Taps;
use rusqlite::{Connection, OptionalExtension, ToSql, params};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot};
use tollgate_agent_core::event::{NewEvent, StoredEvent};
use tollgate_agent_core::grant::GrantRecord;
use tollgate_agent_core::run::{Millis, RunRecord, RunState, Transition};
use tollgate_agent_core::store::{Guard, StoreError};
use tollgate_agent_core::{GrantId, RunId};

/// The most operations the writer puts into one transaction.
pub const MAX_BATCH: usize = 256;

/// How many write operations may wait for the writer before callers wait to enqueue.
pub(super) const QUEUE_CAPACITY: usize = 4096;

const INSERT_RUN: &str = concat!(
    "INSERT INTO runs (",
    run_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ",
    "?23, ?24, ?25, ?26, ?27)"
);

const INSERT_EVENT: &str =
    "INSERT INTO events (run_id, seq, at, kind, round, data, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// terminal_before, waiting_before, batch.
pub(super) const PURGE: &str = "DELETE FROM runs WHERE id IN (\
     SELECT id FROM (SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?1 \
     ORDER BY finished_at LIMIT ?3) \
     UNION ALL SELECT id FROM (SELECT id FROM runs WHERE status = 'waiting_for_approval' AND updated_at < ?2 \
     ORDER BY updated_at LIMIT ?3) \
     LIMIT ?3)";

/// The probe of [`tollgate_agent_core::StoreHealth::probe_write`], then [`PROBE_CLEAR`]: a new row of `health`
/// with a page's worth of bytes, so that the probe needs a free page as a run's write does (see the
/// migration `0002_health.sql`).
pub(super) const PROBE: &str = "INSERT INTO health (probed_at, padding) \
     VALUES (?1, zeroblob((SELECT page_size FROM pragma_page_size())))";

/// Leaves only the row the probe just wrote.
const PROBE_CLEAR: &str = "DELETE FROM health WHERE id < last_insert_rowid()";
/// Takes, renews or keeps a reader's hold (see `ChangeFeed::hold_reader`); changes no row when another
/// holds it.
const HOLD_READER: &str = "INSERT INTO log_readers AS r (name, holder, held_until, position, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
     held_until = excluded.held_until, position = COALESCE(excluded.position, r.position), \
     updated_at = excluded.updated_at WHERE r.holder = excluded.holder OR r.held_until <= excluded.updated_at";
const RELEASE_READER: &str = "UPDATE log_readers SET held_until = 0 WHERE name = ?1 AND holder = ?2";

const INSERT_GRANT: &str = concat!(
    "INSERT INTO grants (",
    grant_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
);
/// Counts one use of grant `?1` (a `tool_started` naming it is written in the same transaction).
const COUNT_USE_SQLITE: &str = "UPDATE grants SET uses = uses + 1 WHERE id = ?1";
/// The compare-and-set of a revocation: grant `?1`, if active at `?2`, revoked then by `?3`.
const REVOKE_GRANT: &str = concat!(
    "UPDATE grants SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1 AND revoked_at IS NULL AND expires_at > ?2 ",
    "RETURNING ",
    grant_columns!()
);

impl SqliteStore {
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
            return self.committer.commit_alone(connection, request);
        }
        let answers = request.answers();
        let (reply, answer) = oneshot::channel();
        if self.writer.send(WriteOp { request, reply }).await.is_err() {
            return Outcome::error(answers, writer_gone());
        }
        answer.await.unwrap_or_else(|_| Outcome::error(answers, writer_gone()))
    }

    /// Commits several writes together, answering each in order: in one transaction on the caller's
    /// thread when nothing else is under way and the write connection is free (as [`Self::submit`]
    /// does for one), otherwise through the writer thread's queue, whose next batch takes as many of
    /// them as are queued by then.
    pub(super) async fn submit_together(&self, requests: Vec<Request>) -> Vec<Outcome> {
        let count = requests.len();
        let _under_way: Vec<UnderWay<'_>> = (0..count).map(|_| UnderWay::enter(&self.under_way)).collect();
        let alone = self.under_way.load(Ordering::Acquire) == count;
        if alone
            && self.writer.capacity() == self.writer.max_capacity()
            && let Some(connection) = self.committer.try_connection()
        {
            return self.committer.commit_together(connection, requests);
        }
        let mut waiting = Vec::with_capacity(count);
        for request in requests {
            let answers = request.answers();
            let (reply, answer) = oneshot::channel();
            let sent = self.writer.send(WriteOp { request, reply }).await.is_ok();
            waiting.push((sent.then_some(answer), answers));
        }
        let mut outcomes = Vec::with_capacity(count);
        for (answer, answers) in waiting {
            let outcome = match answer {
                Some(answer) => answer.await.ok(),
                None => None,
            };
            outcomes.push(outcome.unwrap_or_else(|| Outcome::error(answers, writer_gone())));
        }
        outcomes
    }

    pub(super) async fn write_record(&self, request: Request) -> Result<RunRecord, StoreError> {
        match self.submit(request).await {
            Outcome::Record(result) => result,
            Outcome::Count(_) | Outcome::Grant(_) => Err(mismatched_outcome()),
        }
    }

    pub(super) async fn write_count(&self, request: Request) -> Result<u64, StoreError> {
        match self.submit(request).await {
            Outcome::Count(result) => result,
            Outcome::Record(_) | Outcome::Grant(_) => Err(mismatched_outcome()),
        }
    }

    pub(super) async fn write_grant(&self, request: Request) -> Result<GrantRecord, StoreError> {
        match self.submit(request).await {
            Outcome::Grant(result) => result,
            Outcome::Record(_) | Outcome::Count(_) => Err(mismatched_outcome()),
        }
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

fn writer_gone() -> StoreError {
    StoreError::Database("the SQLite store is closed (its writer thread has stopped)".to_owned())
}

/// A write waiting for the writer thread, and where its answer goes.
pub(super) struct WriteOp {
    request: Request,
    reply: oneshot::Sender<Outcome>,
}

/// A write operation.
pub(super) enum Request {
    Create {
        run: RunRecord,
        events: Vec<NewEvent>,
    },
    Transition {
        id: String,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    },
    Append {
        id: String,
        owner: String,
        events: Vec<NewEvent>,
        lease_until: Millis,
    },
    Purge {
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    },
    /// The write probe (answered with a count of 1).
    Probe {
        at: Millis,
    },
    /// Takes, renews or keeps a reader's hold (answered with 1 when the holder holds it, else 0).
    Hold {
        name: String,
        holder: String,
        position: Option<String>,
        until: Millis,
        now: Millis,
    },
    /// Ends a reader's hold (answered with the rows changed).
    Release {
        name: String,
        holder: String,
    },
    /// Stores a new grant (answered with 1).
    CreateGrant {
        row: GrantRow,
    },
    /// Revokes a grant active at `now`, a compare-and-set (answered with the grant revoked, or why not).
    RevokeGrant {
        id: GrantId,
        actor: String,
        now: Millis,
    },
}

/// What kind of answer a request gets.
#[derive(Clone, Copy)]
pub(super) enum Answers {
    Record,
    Count,
    Grant,
}

/// An operation's answer, held until its batch has committed.
pub(super) enum Outcome {
    Record(Result<RunRecord, StoreError>),
    Count(Result<u64, StoreError>),
    Grant(Result<GrantRecord, StoreError>),
}

pub(super) fn mismatched_outcome() -> StoreError {
    StoreError::Database("internal error: a write was answered with the wrong kind of result".to_owned())
}

impl Request {
    /// What kind of answer it gets: a run record, a count or a grant.
    fn answers(&self) -> Answers {
        match self {
            Request::Create { .. } | Request::Transition { .. } => Answers::Record,
            Request::RevokeGrant { .. } => Answers::Grant,
            Request::Append { .. }
            | Request::Purge { .. }
            | Request::Probe { .. }
            | Request::Hold { .. }
            | Request::Release { .. }
            | Request::CreateGrant { .. } => Answers::Count,
        }
    }
}

impl Outcome {
    fn error(answers: Answers, error: StoreError) -> Outcome {
        match answers {
            Answers::Record => Outcome::Record(Err(error)),
            Answers::Count => Outcome::Count(Err(error)),
            Answers::Grant => Outcome::Grant(Err(error)),
        }
    }
}

/// A failure that leaves the batch's transaction unusable: the whole batch is undone.
struct BatchFailure(StoreError);

/// What one checked operation writes.
struct Planned {
    outcome: Outcome,
    run_id: RunId,
    row: RowWrite,
    events: Vec<EventRow>,
    /// The events as served, for the taps once the batch has committed.
    stored: Vec<StoredEvent>,
    /// The grants it makes (a vote's `remember`), written with the run.
    grants: Vec<GrantRow>,
}

/// A written operation's run and events, handed to the taps once its batch has committed.
type Written = Option<(RunId, Vec<StoredEvent>)>;

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
pub(super) struct Writer {
    pub(super) connection: Arc<Mutex<Connection>>,
    pub(super) secrets: Secrets,
    /// Asked whether the file system refuses writes when a write meets an I/O error.
    pub(super) folder: Folder,
    /// Wakes the checkpointer every [`CHECKPOINT_EVERY`] operations (file databases only).
    pub(super) checkpoints: Option<std::sync::mpsc::SyncSender<()>>,
    pub(super) operations: std::sync::atomic::AtomicU64,
    /// Seals the encrypted columns (and opens them when a run is read to be changed).
    pub(super) keys: Option<Arc<DataKeys>>,
    /// Handed each committed operation's events, after the COMMIT and before its caller is answered.
    pub(super) taps: Taps,
}

impl Writer {
    /// Commits batches until every sender is gone and the queue is empty.
    pub(super) fn run(&self, mut queue: mpsc::Receiver<WriteOp>) {
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
            let kinds: Vec<Answers> = requests.iter().map(Request::answers).collect();
            let committed = self.commit(&lock(&self.connection), requests);
            let committed = committed.map(|written| self.hand_over(written));
            // A caller that stopped waiting has nobody to tell.
            match committed {
                Ok(outcomes) => {
                    repliers.into_iter().zip(outcomes).for_each(|(reply, outcome)| drop(reply.send(outcome)));
                }
                Err(error) => {
                    for (reply, answers) in repliers.into_iter().zip(kinds) {
                        drop(reply.send(Outcome::error(answers, error.clone())));
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

    /// Commits one request on its own, on the caller's thread, through `connection` (given back before
    /// the taps are handed what it wrote).
    fn commit_alone(&self, connection: MutexGuard<'_, Connection>, request: Request) -> Outcome {
        let answers = request.answers();
        self.commit_together(connection, vec![request])
            .pop()
            .unwrap_or_else(|| Outcome::error(answers, mismatched_outcome()))
    }

    /// Commits `requests` in one transaction on the caller's thread, through `connection` (given back
    /// before the taps are handed what they wrote); answers each in order.
    fn commit_together(&self, connection: MutexGuard<'_, Connection>, requests: Vec<Request>) -> Vec<Outcome> {
        let kinds: Vec<Answers> = requests.iter().map(Request::answers).collect();
        let committed = self.commit(&connection, requests);
        drop(connection);
        match committed {
            Ok(written) => self.hand_over(written),
            Err(error) => kinds.into_iter().map(|answers| Outcome::error(answers, error.clone())).collect(),
        }
    }

    /// Hands the taps what a committed batch wrote; answers the operations' outcomes.
    fn hand_over(&self, written: Vec<(Outcome, Written)>) -> Vec<Outcome> {
        written
            .into_iter()
            .map(|(outcome, written)| {
                if let Some((run_id, events)) = written {
                    self.taps.fire(&run_id, &events);
                }
                outcome
            })
            .collect()
    }

    /// One batch, one transaction: every operation's outcome with what it wrote, or the error that
    /// undid them all. A panic inside is caught and undoes the batch too.
    fn commit(&self, connection: &Connection, requests: Vec<Request>) -> Result<Vec<(Outcome, Written)>, StoreError> {
        let count = requests.len();
        let committed = std::panic::catch_unwind(AssertUnwindSafe(|| self.commit_batch(connection, requests)))
            .unwrap_or_else(|_| {
                Err(BatchFailure(StoreError::Database(
                    "internal error: the SQLite writer failed; the batch was rolled back".to_owned(),
                )))
            });
        match committed {
            Ok(written) => {
                self.committed(count as u64);
                Ok(written)
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
        move |e| BatchFailure(database_error(&self.secrets, context, &self.folder.met(&e)))
    }

    fn error(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |e| database_error(&self.secrets, context, &self.folder.met(&e))
    }

    /// [`Writer::error`] for a write of run `id`: damaged bytes met there are that run's.
    fn run_failed<'a>(&'a self, context: &'static str, id: &'a str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
        move |e| run_error(&self.secrets, context, id, &self.folder.met(&e))
    }

    /// One transaction for the whole batch: each operation is applied in order, in its own savepoint.
    fn commit_batch(
        &self,
        connection: &Connection,
        requests: Vec<Request>,
    ) -> Result<Vec<(Outcome, Written)>, BatchFailure> {
        execute(connection, "BEGIN IMMEDIATE").map_err(self.fail("cannot begin a write transaction"))?;
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(self.apply(connection, request)?);
        }
        execute(connection, "COMMIT").map_err(self.fail("cannot commit"))?;
        Ok(outcomes)
    }

    /// Checks and writes one operation. Its own failure (a refused transition, a failed write) is its
    /// outcome; a failure that ends the transaction is the batch's. With the outcome, what it wrote
    /// for the taps.
    fn apply(&self, connection: &Connection, request: Request) -> Result<(Outcome, Written), BatchFailure> {
        if let Request::Purge { terminal_before, waiting_before, batch } = request {
            return self
                .in_savepoint(connection, |connection| {
                    let mut statement = connection.prepare_cached(PURGE).map_err(self.error("cannot purge runs"))?;
                    let deleted = statement
                        .execute(params![terminal_before, waiting_before, i64::from(batch)])
                        .map_err(self.error("cannot purge runs"))?;
                    Ok(Outcome::Count(Ok(u64::try_from(deleted).unwrap_or(u64::MAX))))
                })
                .map(|outcome| (outcome.unwrap_or_else(|error| Outcome::Count(Err(error))), None));
        }
        if let Request::Hold { name, holder, position, until, now } = request {
            return self
                .in_savepoint(connection, |connection| {
                    let mut statement = connection
                        .prepare_cached(HOLD_READER)
                        .map_err(self.error("cannot hold a reader of the commit log"))?;
                    let held = statement
                        .execute(params![name, holder, until, position, now])
                        .map_err(self.error("cannot hold a reader of the commit log"))?;
                    Ok(Outcome::Count(Ok(u64::try_from(held).unwrap_or_default())))
                })
                .map(|outcome| (outcome.unwrap_or_else(|error| Outcome::Count(Err(error))), None));
        }
        if let Request::Release { name, holder } = request {
            return self
                .in_savepoint(connection, |connection| {
                    let released = connection
                        .execute(RELEASE_READER, params![name, holder])
                        .map_err(self.error("cannot release a reader of the commit log"))?;
                    Ok(Outcome::Count(Ok(u64::try_from(released).unwrap_or_default())))
                })
                .map(|outcome| (outcome.unwrap_or_else(|error| Outcome::Count(Err(error))), None));
        }
        if let Request::Probe { at } = request {
            return self
                .in_savepoint(connection, |connection| {
                    let mut statement =
                        connection.prepare_cached(PROBE).map_err(self.error("cannot write the probe"))?;
                    statement.execute([at]).map_err(self.error("cannot write the probe"))?;
                    execute(connection, PROBE_CLEAR).map_err(self.error("cannot write the probe"))?;
                    Ok(Outcome::Count(Ok(1)))
                })
                .map(|outcome| (outcome.unwrap_or_else(|error| Outcome::Count(Err(error))), None));
        }
        if let Some(grant_write) = self.apply_grant_write(connection, &request) {
            return grant_write.map(|outcome| (outcome, None));
        }
        let answers = request.answers();
        let planned = match self.plan(connection, request) {
            Ok(planned) => planned,
            Err(error) => return Ok((Outcome::error(answers, error), None)),
        };
        let Planned { outcome, run_id, row, events, stored, grants } = planned;
        let written = self.in_savepoint(connection, |connection| {
            write_run(connection, &row).map_err(self.run_failed("cannot write a run", &run_id))?;
            if let RowWrite::Update { .. } = row
                && connection.changes() != 1
            {
                return Err(StoreError::Database(format!("run {run_id} changed during its write")));
            }
            let mut insert = connection.prepare_cached(INSERT_EVENT).map_err(self.error("cannot write events"))?;
            for event in &events {
                insert
                    .execute(params![
                        run_id.as_str(),
                        event.seq,
                        event.at,
                        event.kind,
                        event.round,
                        event.data,
                        event.hash
                    ])
                    .map_err(self.run_failed("cannot write events", &run_id))?;
            }
            // The grants a decision makes, with the decision: if the run's write fails, so do they.
            for grant in &grants {
                insert_grant(connection, grant).map_err(self.error("cannot write a grant"))?;
            }
            // A use of a grant is counted with the start of the call it allowed.
            for grant in uses_in(&stored) {
                let mut count =
                    connection.prepare_cached(COUNT_USE_SQLITE).map_err(self.error("cannot count a use"))?;
                count.execute([grant]).map_err(self.run_failed("cannot count a use of a grant", &run_id))?;
            }
            Ok(())
        })?;
        Ok(match written {
            Ok(()) => (outcome, Some((run_id, stored))),
            Err(error) => (Outcome::error(answers, error), None),
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
                // Undoing succeeds only if SQLite did not already end the transaction (it does after
                // `SQLITE_FULL` or an I/O error): otherwise the batch fails as a whole, as it must, with
                // the error that ended it (a full disk stays `DiskFull`, not "no such savepoint").
                match execute(connection, "ROLLBACK TO op").and_then(|()| execute(connection, "RELEASE op")) {
                    Ok(()) => Ok(Err(error)),
                    Err(undo) => {
                        tracing::debug!(error = %undo, "the failed write ended its transaction");
                        Err(BatchFailure(error))
                    }
                }
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
                if run_exists(connection, &run.id).map_err(self.run_failed("cannot read a run", &run.id))? {
                    return Err(StoreError::Duplicate(run.id.to_string()));
                }
                let (run, stored) = plan_create(run, events, chain_key(keys));
                Ok(Planned {
                    events: encode_events(&run.id, &stored)?,
                    row: RowWrite::Insert(RunRow::encode(&run, keys, None)?),
                    run_id: run.id.clone(),
                    outcome: Outcome::Record(Ok(run)),
                    stored,
                    grants: Vec::new(),
                })
            }
            Request::Transition { id, guard, transition, events, now } => {
                let (current, old) = self.current(connection, &id)?;
                let (next, stored) = plan_transition(&current, &guard, &transition, events, now, chain_key(keys))?;
                let grants = match transition {
                    Transition::Vote { remember, .. } => remember
                        .into_iter()
                        .map(|grant| GrantRow::new(grant).map(|(row, _)| row))
                        .collect::<Result<_, _>>()?,
                    _ => Vec::new(),
                };
                Ok(Planned {
                    events: encode_events(&id, &stored)?,
                    row: RowWrite::Update { new: RunRow::encode(&next, keys, Some((&current, &old)))?, old },
                    run_id: id.into(),
                    outcome: Outcome::Record(Ok(next)),
                    stored,
                    grants,
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
                let (stored, last_seq, last_hash) = plan_append(&id, &owner, head, events, chain_key(keys))?;
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
                    run_id: id.into(),
                    outcome: Outcome::Count(Ok(last_seq)),
                    stored,
                    grants: Vec::new(),
                })
            }
            Request::Purge { .. }
            | Request::Probe { .. }
            | Request::Hold { .. }
            | Request::Release { .. }
            | Request::CreateGrant { .. }
            | Request::RevokeGrant { .. } => {
                Err(StoreError::Database("internal error: only a run's write is planned".to_owned()))
            }
        }
    }

    /// Writes a grant's request (create, revoke) in its own savepoint; `None` for any
    /// other request.
    fn apply_grant_write(&self, connection: &Connection, request: &Request) -> Option<Result<Outcome, BatchFailure>> {
        let written = match request {
            Request::CreateGrant { row } => self
                .in_savepoint(connection, |connection| {
                    insert_grant(connection, row).map_err(self.error("cannot write a grant"))?;
                    Ok(1)
                })
                .map(Outcome::Count),
            Request::RevokeGrant { id, actor, now } => self
                .in_savepoint(connection, |connection| self.revoke_grant(connection, id, actor, *now))
                .map(Outcome::Grant),
            _ => return None,
        };
        Some(written)
    }

    /// Revokes grant `id` if it is active at `now` (the grant as revoked); else why not, from the grant
    /// as this transaction sees it.
    fn revoke_grant(
        &self,
        connection: &Connection,
        id: &GrantId,
        actor: &str,
        now: Millis,
    ) -> Result<GrantRecord, StoreError> {
        let context = "cannot revoke a grant";
        let revoked = connection
            .prepare_cached(REVOKE_GRANT)
            .and_then(|mut statement| {
                statement.query_row(params![id.as_str(), now, actor], |row| Ok(read_grant_row(row))).optional()
            })
            .map_err(self.error(context))?;
        if let Some(row) = revoked {
            return row?.decode();
        }
        let found = connection
            .prepare_cached(SELECT_GRANT)
            .and_then(|mut statement| statement.query_row([id.as_str()], |row| Ok(decode_grant(row))).optional())
            .map_err(self.error(context))?
            .transpose()?;
        Err(refused_revocation(id, found, now))
    }

    /// The run as stored now (in this transaction), decoded and as its row.
    fn current(&self, connection: &Connection, id: &str) -> Result<(RunRecord, RunRow), StoreError> {
        let mut statement = connection.prepare_cached(SELECT_RUN).map_err(self.error("cannot read a run"))?;
        let row = statement
            .query_row([id], |row| Ok(read_run_row(row)))
            .optional()
            .map_err(self.run_failed("cannot read a run", id))?;
        let row = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))??;
        Ok((row.clone().decode(self.keys.as_deref())?, row))
    }
}

/// Inserts a new grant's row.
fn insert_grant(connection: &Connection, grant: &GrantRow) -> rusqlite::Result<()> {
    connection
        .prepare_cached(INSERT_GRANT)?
        .execute(params![
            grant.id,
            grant.agent,
            grant.tool,
            grant.pattern,
            grant.scope,
            grant.run_id,
            grant.reason,
            grant.created_by,
            grant.created_at,
            grant.expires_at,
            grant.revoked_at,
            grant.revoked_by,
            grant.uses
        ])
        .map(drop)
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
    let mut values: Vec<&dyn ToSql> = Vec::with_capacity(25);
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
fn run_values(r: &RunRow) -> [&dyn ToSql; 27] {
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
        &r.metadata,
        &r.trace,
        &r.trace_parent,
    ]
}
