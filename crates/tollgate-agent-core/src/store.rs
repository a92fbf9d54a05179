//! The `RunStore` port (runs, their transitions and their event logs) and the `Clock` / `IdGen` ports.
//!
//! What every backend promises (and the contract suite in `tollgate-agent-store` checks on each):
//! - a transition is one transaction: the compare-and-set on the run's [`Guard`], the new record from
//!   [`RunRecord::apply`] on the run as read inside that transaction, and its events — all of it or
//!   none. So a takeover (a claim of a running run) commits only if the lease as stored then has
//!   expired: one planned on a lease that was renewed meanwhile is a [`Conflict::LeaseHeld`];
//! - events are numbered from 1 without gaps and chained by [`crate::event::chain`];
//! - a run that is not found, a stale guard, or a transition that does not apply is an error, never a
//!   silent success;
//! - a store shared by several nodes may announce the changes the others commit ([`ChangeFeed::changes`]):
//!   which run and where it stands, never its data;
//! - a store may hand the events of its own commits to a [`CommitTap`] ([`ChangeFeed::tap_commits`]),
//!   after the commit and before the write returns, so that its process need not read them back;
//! - every commit, by any process, is in the store's commit log ([`ChangeFeed::committed`]) in an order
//!   whose positions never skip a commit, and a named reader of that log is held by one holder at a
//!   time ([`ChangeFeed::hold_reader`]) with its position stored, so that a durable consumer (webhook
//!   deliveries) continues after a crash where it was, on any node.

use crate::BoxFuture;
use crate::event::{NewEvent, StoredEvent};
use crate::grant::{GrantPage, GrantQuery, GrantRecord, GrantStatus};
use crate::run::{Lease, Millis, RunRecord, RunStatus, Transition, TransitionError, rfc3339};
use futures_util::stream::BoxStream;
use std::sync::Arc;
use tollgate_agent_protocol::{Actor, GrantId, RunId};

/// What a transition or append checks before it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The run's version must be exactly this (a person's action on what they saw).
    Version(u64),
    /// The run must be `running` with this lease owner (the process driving it).
    Lease(String),
}

/// A store operation that could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No run has this id.
    #[error("run {0} not found")]
    NotFound(String),
    /// The run changed since it was read (someone else acted first), it lost its lease, or (from
    /// `resolve_prefix`) a prefix names several runs. Not retryable as it is: read the run again.
    #[error("run {id} changed concurrently: {conflict}")]
    Conflict {
        /// The run (for [`Conflict::AmbiguousPrefix`], the prefix).
        id: String,
        /// What did not match.
        conflict: Conflict,
    },
    /// The transition does not apply to the run's status.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// A run with this id already exists.
    #[error("run {0} already exists")]
    Duplicate(String),
    /// The stored row for this run cannot be read.
    #[error("stored data for run {id} is corrupt: {detail}")]
    Corrupt {
        /// The run.
        id: String,
        /// What is wrong.
        detail: String,
    },
    /// The run's stored data is encrypted (tollgate-agent-store's data keys) and this store cannot decrypt
    /// it: no data keys are configured, the key it names is not among them, or the key does not open
    /// it (a wrong key under that id, or an altered value). Not retryable: configure the right key.
    #[error("stored data for run {id} cannot be decrypted: {detail}")]
    Undecryptable {
        /// The run.
        id: String,
        /// Which value, and which key id it names (never key material).
        detail: String,
    },
    /// The database was written by a newer Tollgate.
    #[error(
        "the database schema is version {found}, newer than this Tollgate understands ({supported}); upgrade Tollgate"
    )]
    NewerSchema {
        /// The database's version.
        found: i64,
        /// This build's newest version.
        supported: i64,
    },
    /// The disk the database lives on is full (SQLite's `SQLITE_FULL`, also reached at the file's
    /// `max_page_count`; PostgreSQL's `53100 disk_full`): nothing can be written until space is freed,
    /// while reads go on. Not retryable as it is: an operator frees space.
    #[error("the run store is full: {0}")]
    DiskFull(String),
    /// The database only lets this process read (SQLite's `SQLITE_READONLY*`: a read-only file, folder,
    /// mount or `?mode=ro`; PostgreSQL's `25006 read_only_sql_transaction`: a standby). Not retryable
    /// as it is: an operator makes it writable (or points Tollgate at the primary).
    #[error("the run store is read-only: {0}")]
    ReadOnly(String),
    /// The database itself is damaged where no one run is known to be the cause (SQLite's
    /// `SQLITE_CORRUPT` outside a run's row, `SQLITE_NOTADB`; a failed integrity check). A damaged
    /// run's row is [`StoreError::Corrupt`] for that run instead. Not retryable: `tollgate doctor`
    /// says what is damaged; restore from a backup.
    #[error("the database is corrupt: {0}")]
    CorruptDatabase(String),
    /// The database cannot be reached right now: the connection failed or was lost, no connection
    /// came free in time, or another process held the write lock past the busy timeout. Retryable.
    #[error("the run store cannot be reached: {0}")]
    Unreachable(String),
    /// Another database failure (a statement the database refused, a value that could not be
    /// encoded, an invalid store URL). Retryable: most are transient.
    #[error("database error: {0}")]
    Database(String),
    /// No grant has this id. Not retryable.
    #[error("grant {0} not found")]
    GrantNotFound(GrantId),
    /// The grant is already revoked or expired: revoking it again changes nothing. Not retryable.
    #[error("grant {id} is already {status}")]
    GrantClosed {
        /// The grant.
        id: GrantId,
        /// `revoked` or `expired`.
        status: GrantStatus,
    },
}

/// Why a store operation conflicted: what the store found instead of what the caller expected. Callers
/// match on the variant, never on the text; the text is what users see (in problem+json and the CLI).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// A [`Guard::Version`] that no longer matches: someone acted on the run since it was read.
    #[error("expected version {expected}, the run is at version {found}")]
    StaleVersion {
        /// The version the caller saw.
        expected: u64,
        /// The version stored now.
        found: u64,
    },
    /// A [`Guard::Lease`] (or an append) on a run that is no longer running: it was cancelled, it
    /// expired, it finished or it is waiting at the gate.
    #[error("the run is {status}, not running")]
    NotRunning {
        /// The run's status now.
        status: RunStatus,
    },
    /// A [`Guard::Lease`] (or an append) by a process that no longer holds the lease: another process
    /// took the running run over after the lease expired.
    #[error("another process holds the lease")]
    LeaseLost {
        /// Who holds the lease now (`None` only for a row that has none).
        holder: Option<String>,
    },
    /// A takeover (a claim of a running run) planned on a lease that has been renewed since the taker
    /// read the run: the lease still holds, so the takeover lost the race. The same text as
    /// [`crate::run::TransitionError::LeaseHeld`].
    #[error("cannot take over a run whose lease, held by {owner}, is valid until {}", rfc3339(*expires_at))]
    LeaseHeld {
        /// Who holds the lease.
        owner: String,
        /// Until when.
        expires_at: Millis,
    },
    /// The run's row changed between the read and the write of one transaction (PostgreSQL's second
    /// line of defence behind its row lock; no other write should ever get there).
    #[error("the run changed while it was being updated")]
    ConcurrentUpdate,
    /// `resolve_prefix`: the prefix starts the ids of several runs.
    #[error(
        "the prefix `{prefix}` matches {}{matches} runs; give more characters",
        if *more { "more than " } else { "" }
    )]
    AmbiguousPrefix {
        /// The prefix as given.
        prefix: String,
        /// How many runs it matches; when `more` is set, the store stopped counting here and there are
        /// more than this.
        matches: u64,
        /// The count is a lower bound (see `matches`).
        more: bool,
    },
}

impl StoreError {
    /// True when the same operation may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Unreachable(_) | StoreError::Database(_) => true,
            StoreError::NotFound(_)
            | StoreError::Conflict { .. }
            | StoreError::Transition(_)
            | StoreError::Duplicate(_)
            | StoreError::Corrupt { .. }
            | StoreError::Undecryptable { .. }
            | StoreError::NewerSchema { .. }
            | StoreError::DiskFull(_)
            | StoreError::ReadOnly(_)
            | StoreError::CorruptDatabase(_)
            | StoreError::GrantNotFound(_)
            | StoreError::GrantClosed { .. } => false,
        }
    }
}

impl StoreError {
    /// True for a failure of the store itself that an operator fixes — full, read-only, unreachable —
    /// and that says nothing about the run being written: the write may be made again once the store
    /// takes writes, and a run is never failed for it.
    pub fn is_outage(&self) -> bool {
        matches!(self, StoreError::DiskFull(_) | StoreError::ReadOnly(_) | StoreError::Unreachable(_))
    }
}

/// How deep [`StoreHealth::check_integrity`] looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegrityCheck {
    /// Fast enough for every start of `serve` (SQLite's `PRAGMA quick_check`: the structure of every
    /// page, not whether indexes match their tables).
    Quick,
    /// Everything the database can check about itself (SQLite's `PRAGMA integrity_check`), for
    /// `tollgate doctor`.
    Full,
}

/// Which runs to list. The default lists the newest [`RunQuery::DEFAULT_LIMIT`] runs of any status and
/// agent, so `RunQuery { status: Some(..), ..Default::default() }` reads a first page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    pub agent: Option<String>,
    /// At most this many (the caller bounds it; 0 lists nothing).
    pub limit: u32,
    /// Continue after this cursor (from a previous page).
    pub cursor: Option<String>,
}

impl RunQuery {
    /// The page size when none is chosen: the HTTP API's default `limit` (docs/api.md).
    pub const DEFAULT_LIMIT: u32 = 50;
}

impl Default for RunQuery {
    fn default() -> Self {
        Self { status: None, agent: None, limit: Self::DEFAULT_LIMIT, cursor: None }
    }
}

/// One page of runs, newest first.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// The cursor for the next page, when there may be more.
    pub next_cursor: Option<String>,
    /// The ids of runs on this page whose stored data cannot be read ([`StoreError::Corrupt`],
    /// [`StoreError::Undecryptable`]): left out of `runs` so that one damaged run does not hide the
    /// others; reading one by id gives its error. `tollgate doctor` reports them.
    pub skipped: Vec<String>,
}

/// The hosts a store may reach its database on, and where it stands among them ([`ChangeFeed::hosts`]): a
/// PostgreSQL store's URL may name every member of a highly available cluster, and the store follows
/// the one that will do (the writable primary) across a failover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreHosts {
    /// Each host as `host:port` (a socket folder as the folder and port), in the URL's order. Never a
    /// password.
    pub hosts: Vec<String>,
    /// The index in `hosts` of the one in use.
    pub current: usize,
    /// How many times the store moved to another host since it opened.
    pub moves: u64,
    /// How many looks for the host to use found that none would do (each is also logged).
    pub none_would_do: u64,
}

/// A change to a run committed by another node sharing the store's database, as [`ChangeFeed::changes`]
/// announces it: which run and where it now stands, never its data (no input, no arguments, no events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreChange {
    /// Run `id` committed a change (created, transitioned or appended to).
    Run {
        /// The run.
        id: RunId,
        /// Its version after the change.
        version: u64,
        /// Its status after the change.
        status: RunStatus,
        /// Its last event's seq after the change.
        last_seq: u64,
    },
    /// Changes may have been missed (the store's listening connection was lost and is back, or this
    /// reader fell behind): whoever follows a run reads it again. From the first `Resync` on, until a
    /// [`StoreChange::Lost`], every other process's commit is announced.
    Resync,
    /// The store stopped hearing other processes' commits (its listening connection was lost): until
    /// the next [`StoreChange::Resync`] nothing is announced, and whoever follows a run reads it again
    /// now and then polls.
    Lost,
}

/// A queued run a worker has claimed ([`RunQueue::claim_queued`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    /// The run as claimed: running under the worker's lease.
    pub run: RunRecord,
    /// When it was queued (its last change before the claim): the claim latency is the claim's time
    /// minus this.
    pub queued_at: Millis,
}

/// Receives the events of each commit made through a store ([`ChangeFeed::tap_commits`]): the run's id and
/// the events the commit appended, in seq order, exactly as [`EventLog::events`] serves them. It is
/// called on the committing thread after the commit and before the write that made it returns (a
/// commit without events calls nothing), so it must be quick and must never block or wait.
pub type CommitTap = Arc<dyn Fn(&RunId, &[StoredEvent]) + Send + Sync>;

/// One page of a store's commit log ([`ChangeFeed::committed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommittedPage {
    /// Events committed after the position read from, each with its run's id: commits in the order of
    /// the log, a commit's events one after another in seq order (a page may end inside a commit).
    pub events: Vec<(RunId, StoredEvent)>,
    /// Where the next read continues: after these events or, when the page is not full, after every
    /// commit the log holds so far. Text only the store that gave it reads.
    pub next: String,
    /// Events that could not be read (damaged, or sealed with a key this process lacks), passed over:
    /// the run's id and why.
    pub skipped: Vec<(RunId, StoreError)>,
    /// The page is full: more can be read at once.
    pub more: bool,
    /// Commits may still enter the log before `next` without being announced to this reader: transactions
    /// were under way when it read (PostgreSQL; a commit waits in the log for every older transaction of
    /// the database cluster, Tollgate's or not, and one that is not Tollgate's announces nothing when it
    /// ends). A reader that waits for announcements ([`ChangeFeed::changes`]) reads again after a while.
    pub pending: bool,
}

/// Who holds a named reader of the commit log ([`ChangeFeed::hold_reader`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReaderHold {
    /// The caller holds it, until the time it asked for. `position` is the reader's stored position
    /// (the caller's own when it gave one), `None` while none has been stored.
    Held {
        /// The stored position.
        position: Option<String>,
    },
    /// Another holder has it.
    Elsewhere {
        /// Who.
        holder: String,
        /// Until when (the caller may take it over after that, if it is not renewed).
        until: Millis,
    },
}

/// Run rows and their transitions: a run is created, read and listed, and changes only by a compare-and-set that commits
/// its events with it. A held turn's approvals are part of the row (a vote is a [`Transition::Vote`]), so a vote and
/// the resume it claims are one commit.
pub trait RunRows: Send + Sync {
    /// Inserts a new run with its first events.
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>>;

    /// Reads a run.
    fn get<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord, StoreError>>;

    /// Finds the one run whose id starts with `prefix`: `NotFound` when none, [`Conflict::AmbiguousPrefix`]
    /// when several.
    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<RunId, StoreError>>;

    /// Lists runs, newest first (by id, which is a UUIDv7 and so ordered by creation time).
    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>>;

    /// Checks the guard, applies the transition with [`RunRecord::apply`] and appends the events, in one
    /// transaction. Returns the new record.
    fn transition<'a>(
        &'a self,
        id: &'a RunId,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>>;

    /// Appends events to a running run whose lease `owner` holds, and extends the lease to `lease_until`.
    /// With no events it only renews the lease. Returns the last seq.
    fn append<'a>(
        &'a self,
        id: &'a RunId,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
}

/// The event log, read: a run's events in order, and the keys its chain is verified by.
pub trait EventLog: Send + Sync {
    /// Events of a run with seq > `after`, at most `limit`, in order.
    fn events<'a>(
        &'a self,
        id: &'a RunId,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>>;

    /// The keys this store chains events with and verifies keyed hashes by
    /// ([`crate::event::verify_chain_with`]): `None` (the default) for a store whose events are
    /// chained unkeyed. A store that wraps another answers for the one it wraps.
    fn chain_keys(&self) -> Option<&crate::event::ChainKeys> {
        None
    }
}

/// The queue of runs waiting for a worker: claimed in order, oldest first.
pub trait RunQueue: Send + Sync {
    /// Claims up to `limit` queued runs of `agents` for this node's free workers, in one statement:
    /// applies [`Transition::Claim`] with `lease` to each and answers them as claimed, oldest queued
    /// first — by when each was queued (its `updated_at`: a new run when it was created, a run queued to
    /// resume or given back when that happened), then by id — so new runs and resumes are served in the
    /// order they began to wait and neither waits behind the other without bound. Empty when no such
    /// run is queued; fewer than `limit` when fewer are. A node claims only runs of agents it has, so a
    /// node deployed without an agent leaves its runs to the nodes that have it. Several nodes claim
    /// at once without waiting on each other and without claiming the same run twice (PostgreSQL:
    /// `FOR UPDATE SKIP LOCKED`, locking only the rows it claims; SQLite: its one writer). A queued run
    /// that cannot be read is passed over (and stays queued). The plan does not depend on the
    /// database's statistics: both stores read the partial index `runs_queue` in order.
    fn claim_queued<'a>(
        &'a self,
        agents: &'a [String],
        limit: u32,
        lease: Lease,
        now: Millis,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, StoreError>>;

    /// When the run that has waited longest in the queue (of any agent) was queued — the
    /// [`Claimed::queued_at`] it will be claimed with — or `None` when no run is queued. For the
    /// queue's age on `/metrics` (`tollgate_queue_oldest_seconds`).
    fn oldest_queued(&self) -> BoxFuture<'_, Result<Option<Millis>, StoreError>>;
}

/// What is due at a time: deadlines and expired leases, and retention.
pub trait Schedules: Send + Sync {
    /// Waiting runs whose deadline is at or before `now`, and running runs whose lease expired, oldest
    /// first, at most `limit`.
    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>>;

    /// Waiting runs whose last change (`updated_at`: the held turn's request, or a later vote on it) is
    /// after `from` and at or before `until`, in order of that time then id, continuing after the run
    /// `from` names (the time and id of the last run of the previous page; an empty id starts at the
    /// time), at most `limit`: what the escalation sweep reads, a window at a time (docs/design.md,
    /// "Escalation"). Rows that cannot be read are passed over (and logged), as [`Schedules::due`] does.
    fn waiting_changed<'a>(
        &'a self,
        from: (Millis, &'a str),
        until: Millis,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>>;

    /// Deletes up to `batch` runs (with their events): terminal runs finished before `terminal_before`,
    /// and waiting runs last updated before `waiting_before`. Returns how many went.
    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>>;
}

/// Whether the store can write and is sound, and how many runs it holds by status.
pub trait StoreHealth: Send + Sync {
    /// Proves that the store can write now: commits a tiny write (one row of its `health` table,
    /// through the same path as every other write) and answers once it is durable. For `/readyz`.
    ///
    /// # Errors
    /// What a run's write would get: [`StoreError::DiskFull`], [`StoreError::ReadOnly`],
    /// [`StoreError::CorruptDatabase`], [`StoreError::Unreachable`], ...
    fn probe_write(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Checks the database's own structure (not the runs' hash chains: `verify` does that) and returns
    /// what it found wrong, one line each (SQLite's pages and indexes; PostgreSQL's catalog sees
    /// to its own, so there it checks that every table is there and readable). Empty: sound.
    ///
    /// # Errors
    /// The store's, when it cannot be checked (unreachable, say). Damage that stops the check itself
    /// is not an error: it is a line of the answer.
    fn check_integrity(&self, depth: IntegrityCheck) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;

    /// How many runs have each status (statuses without runs are left out).
    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>>;
}

/// What other processes commit: the commit log with its named readers, the change announcements of a shared
/// database, and a tap of this process's own commits.
pub trait ChangeFeed: Send + Sync {
    /// The commit log: the events every process commits to this store's database, in commits, from
    /// after position `after` (a [`CommittedPage::next`] of this store), about `limit` at a time (the
    /// PostgreSQL store counts a run's events of one commit as one, SQLite each event). `after = None`
    /// starts at the end: every commit made after the call is read; on SQLite nothing committed before
    /// it, on PostgreSQL possibly a commit made just before it, while a transaction older than that
    /// commit was still running (its position is not known to be past it), so a reader delivers at
    /// least once. The log never skips a commit: one that becomes visible after a later one
    /// (PostgreSQL, where concurrent transactions commit in any order) is read before any position
    /// moves past it, so a commit may wait to be read until every transaction older than it has ended.
    ///
    /// # Errors
    /// The store's; [`StoreError::Corrupt`] for a position this store did not give, or one ahead of
    /// every commit its database holds (the database was restored or moved since). Events that
    /// cannot be read are not an error: they are [`CommittedPage::skipped`].
    fn committed<'a>(&'a self, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Result<CommittedPage, StoreError>>;

    /// Takes, renews or keeps the reader of the commit log named `name` for `holder` until `until`: if
    /// no one holds it, `holder` does, or its hold ended at or before `now`. A `position` given is stored
    /// with the hold (only by its holder). Answers the hold as it is after the call.
    fn hold_reader<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        position: Option<&'a str>,
        until: Millis,
        now: Millis,
    ) -> BoxFuture<'a, Result<ReaderHold, StoreError>>;

    /// Ends `holder`'s hold of the reader `name` at once (its position stays), so that another holder
    /// may take it without waiting; nothing when `holder` does not hold it.
    fn release_reader<'a>(&'a self, name: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The changes other nodes commit to this store's database, as they commit, for a store that
    /// several nodes share (PostgreSQL); `None` (the default) for a store only this process writes
    /// (SQLite). Changes committed through this store itself are left out: its caller already knows
    /// them. Each call is a subscription of its own; dropping the stream ends it.
    fn changes(&self) -> Option<BoxStream<'static, StoreChange>> {
        None
    }

    /// The hosts of a store reached over the network and where it stands among them, for `/metrics`;
    /// `None` (the default) for a store in a local file (SQLite).
    fn hosts(&self) -> Option<StoreHosts> {
        None
    }

    /// Whether every commit another process makes to this store's database is announced through
    /// [`ChangeFeed::changes`] now: true from the listener's [`StoreChange::Resync`] until its
    /// [`StoreChange::Lost`], so followers may wait on announcements alone; false (the default) for a
    /// store that announces nothing.
    fn announces_changes(&self) -> bool {
        false
    }

    /// Hands `tap` the events of every later commit made through this store (never another process's:
    /// [`ChangeFeed::changes`] announces those), so that a follower of this process's own commits has
    /// them without reading them back. The store holds the tap only as long as its caller holds the
    /// `Arc`. Answers whether it will: false (the default) for a store that cannot, whose followers
    /// read the events instead. A commit whose answer is lost (the connection broke after it) is not
    /// tapped; a follower that finds a gap in what it was handed reads the events it lacks.
    fn tap_commits(&self, tap: &CommitTap) -> bool {
        let _ = tap;
        false
    }
}

/// The whole store: every concern above, as each backend provides it. A component takes the concerns it
/// needs (`Arc<dyn RunStore>` upcasts to any of them); this is what a backend is opened as.
pub trait RunStore: RunRows + EventLog + RunQueue + Schedules + StoreHealth + ChangeFeed + Grants {}

impl<T: RunRows + EventLog + RunQueue + Schedules + StoreHealth + ChangeFeed + Grants + ?Sized> RunStore for T {}

/// Grants (V2.md section 1; [`GrantRecord`]): made by a person, directly or with a decision (then in the
/// decision's transaction: [`Transition::Vote`]'s `remember`), listed, revoked, and read by every node
/// when a run reaches the gate. A grant's `uses` is counted by the store itself, in the transaction that
/// commits a `tool_started` event whose data names the grant (`"grant": ID`): a call a grant allowed is
/// counted exactly when its start is on the record.
pub trait Grants: Send + Sync {
    /// Stores a new grant (its `uses` 0, not revoked). [`StoreError::Database`] if its id exists.
    fn create_grant(&self, grant: GrantRecord) -> BoxFuture<'_, Result<GrantRecord, StoreError>>;

    /// The grant with this id; [`StoreError::GrantNotFound`] when none has it.
    fn grant<'a>(&'a self, id: &'a GrantId) -> BoxFuture<'a, Result<GrantRecord, StoreError>>;

    /// A page of grants, newest first (by id, a UUIDv7).
    fn list_grants(&self, query: GrantQuery) -> BoxFuture<'_, Result<GrantPage, StoreError>>;

    /// Revokes an active grant at `now` by `actor`, as a compare-and-set: once, whoever races.
    /// [`StoreError::GrantNotFound`]; [`StoreError::GrantClosed`] when it is already revoked or expired at
    /// `now`.
    fn revoke_grant<'a>(
        &'a self,
        id: &'a GrantId,
        actor: &'a Actor,
        now: Millis,
    ) -> BoxFuture<'a, Result<GrantRecord, StoreError>>;

    /// The version of `agent`'s grants: a number that grows in the same transaction as every grant of
    /// the agent made (on its own or with a decision) or revoked, on every node; 0 when the agent never
    /// had one. A reader keeps [`Grants::active_grants`] decoded under the version it read *before*
    /// reading them, and reads them again once the version moves (a use counted does not move it; an
    /// expiry does not either: a reader checks [`GrantRecord::status`] at the time of each gate check).
    fn grants_version<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// The grants of `agent` active at `now` (of every scope: which runs they cover is
    /// [`GrantRecord::covers`]'s to say), oldest first.
    fn active_grants<'a>(&'a self, agent: &'a str, now: Millis) -> BoxFuture<'a, Result<Vec<GrantRecord>, StoreError>>;
}

/// How many events [`events_after`] asks the store for at a time.
pub const EVENT_PAGE: u32 = 1000;

/// Every event of run `id` with seq > `after`, in order, read from `store` [`EVENT_PAGE`] at a time
/// until a page comes back short. `after = 0` reads the whole log (to verify it, replay it or show it).
///
/// # Errors
/// The store's: [`StoreError::NotFound`] for a run that does not exist, and any error of a page read.
pub async fn events_after<S: EventLog + ?Sized>(
    store: &S,
    id: &RunId,
    after: u64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let from = events.last().map_or(after, |e| e.seq);
        let page = store.events(id, from, EVENT_PAGE).await?;
        let done = page.len() < EVENT_PAGE as usize;
        events.extend(page);
        if done {
            return Ok(events);
        }
    }
}

/// The time, injected so tests are deterministic.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> Millis;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        chrono::Utc::now().timestamp_millis()
    }
}

/// Run ids, injected so tests are deterministic.
pub trait IdGen: Send + Sync {
    /// A new run id: a lowercase hyphenated UUIDv7 in production.
    fn run_id(&self) -> RunId;
}
