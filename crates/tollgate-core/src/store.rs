//! The `RunStore` port (runs, their transitions and their event logs) and the `Clock` / `IdGen` ports.
//!
//! What every backend promises (and the contract suite in `tollgate-store` checks on each):
//! - a transition is one transaction: the compare-and-set on the run's [`Guard`], the new record from
//!   [`RunRecord::apply`] on the run as read inside that transaction, and its events — all of it or
//!   none. So a takeover (a claim of a running run) commits only if the lease as stored then has
//!   expired: one planned on a lease that was renewed meanwhile is a [`StoreError::Conflict`];
//! - events are numbered from 1 without gaps and chained by [`crate::event::chain`];
//! - a run that is not found, a stale guard, or a transition that does not apply is an error, never a
//!   silent success.

use crate::BoxFuture;
use crate::event::{NewEvent, StoredEvent};
use crate::run::{Millis, RunRecord, RunStatus, Transition, TransitionError};

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
    /// The run changed since it was read (someone else acted first), or it lost its lease.
    #[error("run {id} changed concurrently: {detail}")]
    Conflict {
        /// The run.
        id: String,
        /// What did not match.
        detail: String,
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
    /// The run's stored data is encrypted (tollgate-store's data keys) and this store cannot decrypt
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
    /// The database failed or could not be reached. Retryable.
    #[error("database error: {0}")]
    Database(String),
}

impl StoreError {
    /// True when the same operation may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Database(_))
    }
}

/// Which runs to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    pub agent: Option<String>,
    /// At most this many (the caller bounds it).
    pub limit: u32,
    /// Continue after this cursor (from a previous page).
    pub cursor: Option<String>,
}

/// One page of runs, newest first.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// The cursor for the next page, when there may be more.
    pub next_cursor: Option<String>,
}

/// Runs, their transitions and their event logs.
pub trait RunStore: Send + Sync {
    /// Inserts a new run with its first events.
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>>;

    /// Reads a run.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<RunRecord, StoreError>>;

    /// Finds the one run whose id starts with `prefix`: `NotFound` when none, `Conflict` when several.
    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<String, StoreError>>;

    /// Lists runs, newest first (by id, which is a UUIDv7 and so ordered by creation time).
    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>>;

    /// Checks the guard, applies the transition with [`RunRecord::apply`] and appends the events, in one
    /// transaction. Returns the new record.
    fn transition<'a>(
        &'a self,
        id: &'a str,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>>;

    /// Appends events to a running run whose lease `owner` holds, and extends the lease to `lease_until`.
    /// With no events it only renews the lease. Returns the last seq.
    fn append<'a>(
        &'a self,
        id: &'a str,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// How many runs have each status (statuses without runs are left out).
    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>>;

    /// Events of a run with seq > `after`, at most `limit`, in order.
    fn events<'a>(&'a self, id: &'a str, after: u64, limit: u32)
    -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>>;

    /// Waiting runs whose deadline is at or before `now`, and running runs whose lease expired, oldest
    /// first, at most `limit`.
    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>>;

    /// Deletes up to `batch` runs (with their events): terminal runs finished before `terminal_before`,
    /// and waiting runs last updated before `waiting_before`. Returns how many went.
    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>>;
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
    fn run_id(&self) -> String;
}
