//! Exit codes (docs/cli.md) and the one error type every command returns.
//!
//! The rule: 0 done; 1 failed (including an unknown or ambiguous id and an unknown `--call`); 2 usage or
//! configuration error, or arguments that are rejected (nothing was done); 3 the run waits for approval;
//! 4 conflict (the run was not in a state that allows it).

use tollgate_agent_core::{DecisionError, RunStatus, StoreError};
use tollgate_agent_runtime::{CancelError, DecideError, GrantError, ReadError, ResolveError, StartError};

/// How the process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: done.
    Done,
    /// 1: failed.
    Failed,
    /// 2: usage or configuration error, or rejected arguments; nothing was done.
    Usage,
    /// 3: the run is waiting for approval.
    Waiting,
    /// 4: conflict.
    Conflict,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Waiting => 3,
            Exit::Conflict => 4,
        }
    }

    /// The exit for a run that reached `status` after `run` or a deciding command.
    pub fn for_status(status: RunStatus) -> Exit {
        match status {
            RunStatus::Completed => Exit::Done,
            RunStatus::WaitingForApproval => Exit::Waiting,
            RunStatus::Failed | RunStatus::Cancelled | RunStatus::Expired => Exit::Failed,
            // Not settled: only reachable if waiting was cut short; the run goes on elsewhere.
            RunStatus::Queued | RunStatus::Running => Exit::Failed,
        }
    }
}

/// A command that did not do what was asked, with the message for stderr.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// How the process ends.
    pub exit: Exit,
    /// What to tell the person.
    pub message: String,
}

impl CliError {
    /// An error with this exit.
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self { exit, message: message.into() }
    }

    /// A usage or configuration error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// A failure (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(Exit::Failed, message)
    }
}

// Each runtime error maps variant by variant (no catch-all), so a new refusal gets its exit code chosen
// here, per docs/cli.md: not found 1, refused arguments 2, conflict 4, the store failing 1.

impl From<StartError> for CliError {
    fn from(error: StartError) -> Self {
        let exit = match &error {
            StartError::UnknownAgent(_) | StartError::EmptyInput | StartError::InvalidMetadata(_) => Exit::Usage,
            StartError::Vanished(_) | StartError::Store(_) => Exit::Failed,
        };
        CliError::new(exit, error.to_string())
    }
}

impl From<ReadError> for CliError {
    fn from(error: ReadError) -> Self {
        match &error {
            ReadError::NotFound(_) | ReadError::Store(_) => CliError::failed(error.to_string()),
        }
    }
}

impl From<ResolveError> for CliError {
    fn from(error: ResolveError) -> Self {
        match &error {
            // An unknown or ambiguous id prefix is exit 1, the message naming it.
            ResolveError::NotFound(_)
            | ResolveError::Ambiguous { .. }
            | ResolveError::InvalidPrefix(_)
            | ResolveError::Store(_) => CliError::failed(error.to_string()),
        }
    }
}

impl From<DecideError> for CliError {
    fn from(error: DecideError) -> Self {
        let exit = match &error {
            DecideError::NotFound(_) | DecideError::Store(_) => Exit::Failed,
            // An unknown `--call` is exit 1 naming it; other decisions that do not fit are refused
            // arguments.
            DecideError::Invalid(DecisionError::UnknownCall(_)) => Exit::Failed,
            DecideError::Invalid(
                DecisionError::NotDecidable { .. }
                | DecisionError::AlreadyRan { .. }
                | DecisionError::Missing(_)
                | DecisionError::InvalidEdit { .. },
            )
            | DecideError::UnknownAgent(_)
            | DecideError::NoDecisions
            | DecideError::DecidedTwice { .. } => Exit::Usage,
            // A second approval by the same actor is a conflict; an edit on a quorum call never fits.
            DecideError::Vote(refused) if refused.is_conflict() => Exit::Conflict,
            DecideError::Vote(_) => Exit::Usage,
            // Refused as not allowed, like a 403 through `--server`: nothing was done.
            DecideError::SelfApprovalForbidden { .. } => Exit::Usage,
            // `--remember` that cannot make its grant: nothing was recorded.
            DecideError::Remember { refused: tollgate_agent_runtime::GrantError::Store(_), .. } => Exit::Failed,
            DecideError::Remember { .. } => Exit::Usage,
            DecideError::NotWaiting { .. }
            | DecideError::StaleDigest { .. }
            | DecideError::AlreadyDecided { .. }
            | DecideError::NothingToDecide
            | DecideError::CorruptSuspension { .. }
            | DecideError::LostRace { .. } => Exit::Conflict,
        };
        CliError::new(exit, error.to_string())
    }
}

impl From<CancelError> for CliError {
    fn from(error: CancelError) -> Self {
        let exit = match &error {
            CancelError::NotFound(_) | CancelError::Store(_) => Exit::Failed,
            CancelError::AlreadyTerminal { .. } | CancelError::LostRace { .. } => Exit::Conflict,
        };
        CliError::new(exit, error.to_string())
    }
}

impl From<GrantError> for CliError {
    fn from(error: GrantError) -> Self {
        let exit = match &error {
            // An unknown agent, tool or run is named, exit 1 (V2.md: "an unknown grant id or agent exits 1
            // naming it"), as a 404 through `--server` is.
            GrantError::UnknownAgent(_) | GrantError::UnknownTool { .. } | GrantError::UnknownRun(_) => Exit::Failed,
            // Refused arguments, or refused as not allowed (a 422 or a 403 through `--server`): nothing was done.
            GrantError::Disabled
            | GrantError::NotGrantable { .. }
            | GrantError::InvalidMatch(_)
            | GrantError::InvalidScope(_)
            | GrantError::InvalidTtl { .. } => Exit::Usage,
            GrantError::Store(store) => return grant_store_error(store),
        };
        CliError::new(exit, error.to_string())
    }
}

/// A store error of a grant operation: an unknown grant is named as the API names it (exit 1), one
/// already revoked or expired is a conflict (4); the rest as [`StoreError`]s go.
pub(crate) fn grant_store_error(error: &StoreError) -> CliError {
    match error {
        StoreError::GrantNotFound(id) => CliError::failed(format!("no grant has id `{id}`")),
        other => CliError::from(other.clone()),
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> Self {
        // Every store failure is exit 1, its message naming what failed (a full disk, a read-only or
        // corrupt database, an unreachable one); listed one by one so a new kind gets its code chosen.
        let exit = match &error {
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
            | StoreError::Unreachable(_)
            | StoreError::Database(_)
            | StoreError::GrantNotFound(_) => Exit::Failed,
            // Revoking a grant already revoked or expired: the state changed under the request.
            StoreError::GrantClosed { .. } => Exit::Conflict,
        };
        CliError::new(exit, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tollgate_agent_core::{Gate, RunStatus, TurnDigest};
    use tollgate_agent_protocol::MatchError;

    /// Every refusal of the runtime and the exit code docs/cli.md gives it.
    #[test]
    fn every_runtime_error_has_its_exit_code() {
        let store = || StoreError::Database("down".into());
        let cases: Vec<(CliError, Exit)> = vec![
            (StartError::UnknownAgent("x".into()).into(), Exit::Usage),
            (StartError::EmptyInput.into(), Exit::Usage),
            (
                StartError::InvalidMetadata(tollgate_agent_core::MetadataError::TooDeep { limit: 16 }).into(),
                Exit::Usage,
            ),
            (StartError::Vanished("r".into()).into(), Exit::Failed),
            (StartError::Store(store()).into(), Exit::Failed),
            (ReadError::NotFound("r".into()).into(), Exit::Failed),
            (ReadError::Store(store()).into(), Exit::Failed),
            (ResolveError::NotFound("ab".into()).into(), Exit::Failed),
            (ResolveError::Ambiguous { prefix: "a".into(), matches: 2, more: false }.into(), Exit::Failed),
            (ResolveError::InvalidPrefix("Z".into()).into(), Exit::Failed),
            (ResolveError::Store(store()).into(), Exit::Failed),
            (DecideError::NotFound("r".into()).into(), Exit::Failed),
            (DecideError::UnknownAgent("x".into()).into(), Exit::Usage),
            (DecideError::NotWaiting { id: "r".into(), status: RunStatus::Completed }.into(), Exit::Conflict),
            (DecideError::StaleDigest { current: TurnDigest("sha256:1".into()) }.into(), Exit::Conflict),
            (DecideError::AlreadyDecided { call_id: "c".into() }.into(), Exit::Conflict),
            (DecideError::SelfApprovalForbidden { agent: "a".into(), actor: "local".into() }.into(), Exit::Usage),
            (DecideError::NothingToDecide.into(), Exit::Conflict),
            (DecideError::NoDecisions.into(), Exit::Usage),
            (DecideError::DecidedTwice { call_id: "c".into() }.into(), Exit::Usage),
            (DecideError::Invalid(DecisionError::UnknownCall("c".into())).into(), Exit::Failed),
            (
                DecideError::Invalid(DecisionError::NotDecidable { call_id: "c".into(), gate: Gate::Allow }).into(),
                Exit::Usage,
            ),
            (DecideError::Invalid(DecisionError::Missing(vec!["c".into()])).into(), Exit::Usage),
            (
                DecideError::Invalid(DecisionError::InvalidEdit { call_id: "c".into(), message: "no".into() }).into(),
                Exit::Usage,
            ),
            (DecideError::CorruptSuspension { id: "r".into(), detail: "bad".into() }.into(), Exit::Conflict),
            (DecideError::LostRace { id: "r".into() }.into(), Exit::Conflict),
            (DecideError::Store(store()).into(), Exit::Failed),
            (CancelError::NotFound("r".into()).into(), Exit::Failed),
            (CancelError::AlreadyTerminal { id: "r".into(), status: RunStatus::Expired }.into(), Exit::Conflict),
            (CancelError::LostRace { id: "r".into() }.into(), Exit::Conflict),
            (CancelError::Store(store()).into(), Exit::Failed),
            (store().into(), Exit::Failed),
            (StoreError::DiskFull("SQLITE_FULL".into()).into(), Exit::Failed),
            (StoreError::ReadOnly("SQLITE_READONLY".into()).into(), Exit::Failed),
            (StoreError::Corrupt { id: "r".into(), detail: "page".into() }.into(), Exit::Failed),
            (StoreError::CorruptDatabase("page 7".into()).into(), Exit::Failed),
            (StoreError::Unreachable("refused".into()).into(), Exit::Failed),
            (GrantError::Disabled.into(), Exit::Usage),
            (GrantError::UnknownAgent("x".into()).into(), Exit::Failed),
            (GrantError::UnknownTool { agent: "a".into(), tool: "t".into() }.into(), Exit::Failed),
            (GrantError::UnknownRun("r".into()).into(), Exit::Failed),
            (GrantError::NotGrantable { agent: "a".into(), tool: "t".into() }.into(), Exit::Usage),
            (GrantError::InvalidMatch(MatchError { pointer: "path".into() }).into(), Exit::Usage),
            (GrantError::InvalidScope("x").into(), Exit::Usage),
            (GrantError::InvalidTtl { asked: Duration::ZERO, max: Duration::from_secs(1) }.into(), Exit::Usage),
            (GrantError::Store(store()).into(), Exit::Failed),
            (GrantError::Store(StoreError::GrantNotFound("g".into())).into(), Exit::Failed),
            (StoreError::GrantNotFound("g".into()).into(), Exit::Failed),
            (
                StoreError::GrantClosed { id: "g".into(), status: tollgate_agent_core::GrantStatus::Revoked }.into(),
                Exit::Conflict,
            ),
            (DecideError::Remember { call_id: "c".into(), refused: GrantError::InvalidScope("x") }.into(), Exit::Usage),
            (DecideError::Remember { call_id: "c".into(), refused: GrantError::Store(store()) }.into(), Exit::Failed),
        ];
        for (error, exit) in cases {
            assert_eq!(error.exit, exit, "{}", error.message);
        }
    }
}

/// Decisions that were not recorded.
#[derive(Debug)]
pub enum DecisionRefused {
    /// The run is not waiting, its held turn changed (stale digest), a call is already decided, or
    /// another request acted first (exit 4).
    Conflict(String),
    /// A decision does not fit the held turn: an unknown call (exit 1), a call that takes no decision,
    /// or edited arguments the tool rejects (exit 2).
    Invalid(CliError),
    /// The actor may not decide this run.
    Forbidden(CliError),
    /// Anything else (the run is gone, the store or the server failed).
    Failed(CliError),
}

impl From<DecisionRefused> for CliError {
    fn from(error: DecisionRefused) -> Self {
        match error {
            DecisionRefused::Conflict(detail) => CliError::new(Exit::Conflict, detail),
            DecisionRefused::Invalid(e) | DecisionRefused::Forbidden(e) | DecisionRefused::Failed(e) => e,
        }
    }
}
