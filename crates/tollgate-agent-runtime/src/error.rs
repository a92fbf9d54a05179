//! One error type per runtime operation, in the manner of Temporal's sdk-core (`PollWfError`,
//! `CompleteWfError`): each says exactly what that operation can refuse or fail with, so a caller
//! (the server's problem+json, the CLI's exit codes) matches on variants and never on text.
//!
//! A variant marked retryable ([`is_retryable`](DecideError::is_retryable)) may succeed if the same
//! request is sent again unchanged; every other refusal needs a different request or a fixed setup.
//! Operations that can only fail in the store (`list`, `count_by_status`, `purge`, `sweep`) answer
//! [`StoreError`] itself.

use tollgate_agent_core::{
    Actor, ApprovalError, CallId, DecisionError, MetadataError, RunId, RunStatus, StoreError, TurnDigest,
};

/// Why [`Runtime::start`](crate::Runtime::start) or
/// [`start_and_wait`](crate::Runtime::start_and_wait) started no run (or lost sight of it).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No agent has this name (`(none)` when no agent is configured at all). Not retryable.
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    /// The input is empty or only whitespace. Not retryable.
    #[error("input must be a non-empty string")]
    EmptyInput,
    /// The metadata is too large or nested too deep (see [`tollgate_agent_core::Metadata`]). Not
    /// retryable.
    #[error(transparent)]
    InvalidMetadata(#[from] MetadataError),
    /// `start_and_wait`: the run was stored, then deleted (purged) before it settled. Not retryable.
    #[error("run {0} not found")]
    Vanished(RunId),
    /// The store failed; retryable when the store error is.
    #[error(transparent)]
    Store(StoreError),
}

impl StartError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            StartError::UnknownAgent(_)
            | StartError::EmptyInput
            | StartError::InvalidMetadata(_)
            | StartError::Vanished(_) => false,
            StartError::Store(e) => e.is_retryable(),
        }
    }
}

/// Why reading one run ([`get`](crate::Runtime::get), [`events`](crate::Runtime::events),
/// [`verify`](crate::Runtime::verify), [`wait_settled`](crate::Runtime::wait_settled)) failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No run has this id. Not retryable.
    #[error("run {0} not found")]
    NotFound(RunId),
    /// The store failed; retryable when the store error is.
    #[error(transparent)]
    Store(StoreError),
}

impl ReadError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            ReadError::NotFound(_) => false,
            ReadError::Store(e) => e.is_retryable(),
        }
    }
}

impl From<StoreError> for ReadError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => ReadError::NotFound(id.into()),
            other => ReadError::Store(other),
        }
    }
}

/// Why [`Runtime::resolve`](crate::Runtime::resolve) found no single run for a prefix.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No run's id starts with the prefix. Not retryable.
    #[error("no run matches `{0}`")]
    NotFound(String),
    /// Several runs' ids start with the prefix. Not retryable: give more characters.
    #[error(
        "the prefix `{prefix}` matches {}{matches} runs; give more characters",
        if *more { "more than " } else { "" }
    )]
    Ambiguous {
        /// The prefix as given.
        prefix: String,
        /// How many runs it matches (a lower bound when `more`).
        matches: u64,
        /// The store stopped counting at `matches`.
        more: bool,
    },
    /// The prefix is empty, too long, or has a character no run id has (ids are lowercase hyphenated
    /// UUIDs). Not retryable.
    #[error("`{0}` is not a run id or the start of one")]
    InvalidPrefix(String),
    /// The store failed; retryable when the store error is.
    #[error(transparent)]
    Store(StoreError),
}

impl ResolveError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            ResolveError::NotFound(_) | ResolveError::Ambiguous { .. } | ResolveError::InvalidPrefix(_) => false,
            ResolveError::Store(e) => e.is_retryable(),
        }
    }
}

/// Why decisions ([`decide`](crate::Runtime::decide), [`decide_and_wait`](crate::Runtime::decide_and_wait),
/// [`check_decider`](crate::Runtime::check_decider), [`check_decision`](crate::Runtime::check_decision))
/// were not recorded. Nothing was recorded in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// No run has this id. Not retryable.
    #[error("run {0} not found")]
    NotFound(RunId),
    /// The run's agent is not configured in this process. Not retryable here.
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    /// The run is not waiting for approval (it runs, or it has ended). Not retryable.
    #[error("run {id} is {status}, not waiting for approval")]
    NotWaiting {
        /// The run.
        id: RunId,
        /// Its status now.
        status: RunStatus,
    },
    /// The decisions name a turn digest that is not the held turn's (the turn changed since the caller
    /// read it, e.g. a call was marked in doubt). Not retryable as it is: read the run again.
    #[error("stale turn_digest: the held turn is now {current}")]
    StaleDigest {
        /// The held turn's digest now.
        current: TurnDigest,
    },
    /// This call already has a recorded decision. Not retryable.
    #[error("call `{call_id}` is already decided")]
    AlreadyDecided {
        /// The call.
        call_id: CallId,
    },
    /// A vote the call's approval refuses: on a quorum call (`approvals = N`), the same actor's second
    /// approval ([`ApprovalError::AlreadyApproved`], a conflict) or an `edit` / `respond`
    /// ([`ApprovalError::QuorumAction`], a vote that never fits); [`ApprovalError::is_conflict`] tells
    /// them apart. (A vote on an approval already decided is [`DecideError::AlreadyDecided`], as in v1.)
    /// Not retryable.
    #[error(transparent)]
    Vote(ApprovalError),
    /// The agent forbids self-approval and the actor started the run. Not retryable.
    #[error("agent {agent} forbids self-approval: {actor} started this run and cannot decide its calls")]
    SelfApprovalForbidden {
        /// The run's agent.
        agent: String,
        /// The actor who started the run and tried to decide it.
        actor: Actor,
    },
    /// `approve_all` / `deny_all` on a turn whose every held call is already decided. Not retryable.
    #[error("every held call is already decided")]
    NothingToDecide,
    /// A request naming calls named none. Not retryable.
    #[error("decisions must not be empty")]
    NoDecisions,
    /// A request named one call twice. Not retryable.
    #[error("call `{call_id}` is decided twice in one request")]
    DecidedTwice {
        /// The call.
        call_id: CallId,
    },
    /// A decision does not fit the held turn: an unknown call, a call that takes no decision, edited
    /// arguments the tool rejects. Not retryable.
    #[error(transparent)]
    Invalid(#[from] DecisionError),
    /// The held turn cannot be read (corrupt or from an unknown version); the run was failed. Not
    /// retryable.
    #[error("run {id} failed: {detail}")]
    CorruptSuspension {
        /// The run.
        id: RunId,
        /// Why the held turn cannot be read.
        detail: String,
    },
    /// Other decisions on the run kept committing first, every time it was read again. Retryable.
    #[error("the run kept changing while deciding; try again")]
    LostRace {
        /// The run.
        id: RunId,
    },
    /// A `remember` on an approval cannot make its grant (grants disabled, a call no grant may allow, a
    /// bad pattern or ttl, or not an approval of this request). Nothing was recorded. Not retryable.
    #[error("call {call_id}: {refused}")]
    Remember {
        /// The call.
        call_id: CallId,
        /// Why the grant is refused.
        refused: crate::grants::GrantError,
    },
    /// The store failed; retryable when the store error is.
    #[error(transparent)]
    Store(StoreError),
}

impl DecideError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            DecideError::LostRace { .. } => true,
            DecideError::Store(e) => e.is_retryable(),
            DecideError::NotFound(_)
            | DecideError::UnknownAgent(_)
            | DecideError::NotWaiting { .. }
            | DecideError::StaleDigest { .. }
            | DecideError::AlreadyDecided { .. }
            | DecideError::Vote(_)
            | DecideError::SelfApprovalForbidden { .. }
            | DecideError::NothingToDecide
            | DecideError::NoDecisions
            | DecideError::DecidedTwice { .. }
            | DecideError::Invalid(_)
            | DecideError::Remember { .. }
            | DecideError::CorruptSuspension { .. } => false,
        }
    }
}

impl From<ReadError> for DecideError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NotFound(id) => DecideError::NotFound(id),
            ReadError::Store(e) => DecideError::Store(e),
        }
    }
}

/// Why [`Runtime::cancel`](crate::Runtime::cancel) cancelled nothing.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// No run has this id. Not retryable.
    #[error("run {0} not found")]
    NotFound(RunId),
    /// The run has already ended. Not retryable.
    #[error("run {id} is already {status}")]
    AlreadyTerminal {
        /// The run.
        id: RunId,
        /// How it ended.
        status: RunStatus,
    },
    /// The run kept changing (the process driving it committed step after step) every time it was read
    /// again. Retryable.
    #[error("the run kept changing while cancelling; try again")]
    LostRace {
        /// The run.
        id: RunId,
    },
    /// The store failed; retryable when the store error is.
    #[error(transparent)]
    Store(StoreError),
}

impl CancelError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            CancelError::LostRace { .. } => true,
            CancelError::Store(e) => e.is_retryable(),
            CancelError::NotFound(_) | CancelError::AlreadyTerminal { .. } => false,
        }
    }
}

impl From<ReadError> for CancelError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NotFound(id) => CancelError::NotFound(id),
            ReadError::Store(e) => CancelError::Store(e),
        }
    }
}

/// Why a drive (a segment of a run) did not commit where it ended; the one waiting on it learns it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DriveError {
    /// The run changed hands while it was driven (cancelled, or taken over by another process): whoever
    /// holds it now commits it, so the waiter reads the stored run.
    #[error("run {id} changed hands while it was driven: {conflict}")]
    ChangedHands {
        /// The run.
        id: RunId,
        /// What the store found.
        conflict: tollgate_agent_core::Conflict,
    },
    /// This process is shutting down and gave the run back (queued for any node's worker), so the
    /// waiter reads the stored run.
    #[error("run {id} was given back at shutdown")]
    Released {
        /// The run.
        id: RunId,
    },
    /// Neither the end of the segment nor the run's failure could be stored.
    #[error(transparent)]
    Store(StoreError),
}

impl DriveError {
    /// A short name for traces (`error.type`).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            DriveError::ChangedHands { .. } => "changed_hands",
            DriveError::Released { .. } => "released",
            DriveError::Store(_) => "store",
        }
    }
}

/// Why the maintenance sweep could not act on one due run (logged; the next sweep tries again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SweepError {
    /// The run's agent is not configured in this process.
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    /// Denying the calls of an expired turn was refused.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SweepError {
    /// True when someone else acted on the run first (a person decided or cancelled it, another
    /// process took it over or renewed its lease): nothing is wrong, the run is simply no longer due.
    pub(crate) fn is_overtaken(&self) -> bool {
        match self {
            SweepError::Store(e) => store_overtaken(e),
            SweepError::Decide(e) => match e {
                DecideError::NotFound(_)
                | DecideError::NotWaiting { .. }
                | DecideError::StaleDigest { .. }
                | DecideError::NothingToDecide
                | DecideError::AlreadyDecided { .. }
                | DecideError::LostRace { .. } => true,
                DecideError::Store(e) => store_overtaken(e),
                DecideError::UnknownAgent(_)
                | DecideError::Vote(_)
                | DecideError::Remember { .. }
                | DecideError::SelfApprovalForbidden { .. }
                | DecideError::NoDecisions
                | DecideError::DecidedTwice { .. }
                | DecideError::Invalid(_)
                | DecideError::CorruptSuspension { .. } => false,
            },
            SweepError::UnknownAgent(_) => false,
        }
    }
}

/// A store's answer that means another writer got to the run first (or purged it).
fn store_overtaken(error: &StoreError) -> bool {
    !matches!(cas_failure(error), CasKind::Store)
}

/// What a compare-and-set's failure means to a command that read the run first (a decision, a cancel).
pub(crate) enum CasFailure {
    /// Someone acted on the run since it was read (another decision, a step of its driver): read it
    /// again and act on what is stored.
    Overtaken,
    /// The run is gone (purged).
    NotFound(RunId),
    /// The store failed; the command fails with it.
    Store(StoreError),
}

/// [`CasFailure`] without its data.
enum CasKind {
    Overtaken,
    NotFound,
    Store,
}

/// The one list of store errors by what they mean to a compare-and-set: a new kind does not compile
/// until it is placed here.
fn cas_failure(error: &StoreError) -> CasKind {
    match error {
        StoreError::Conflict { .. } | StoreError::Transition(_) => CasKind::Overtaken,
        StoreError::NotFound(_) => CasKind::NotFound,
        StoreError::Duplicate(_)
        | StoreError::Corrupt { .. }
        | StoreError::Undecryptable { .. }
        | StoreError::NewerSchema { .. }
        | StoreError::DiskFull(_)
        | StoreError::ReadOnly(_)
        | StoreError::CorruptDatabase(_)
        | StoreError::Unreachable(_)
        | StoreError::Database(_)
        | StoreError::GrantNotFound(_)
        | StoreError::GrantClosed { .. } => CasKind::Store,
    }
}

impl From<StoreError> for CasFailure {
    fn from(error: StoreError) -> CasFailure {
        match (cas_failure(&error), error) {
            (CasKind::NotFound, StoreError::NotFound(id)) => CasFailure::NotFound(id.into()),
            (CasKind::Overtaken | CasKind::NotFound, _) => CasFailure::Overtaken,
            (CasKind::Store, error) => CasFailure::Store(error),
        }
    }
}
