//! Exit codes (CLI.md) and the one error type every command returns.
//!
//! The rule: 0 done; 1 failed (including an unknown or ambiguous id and an unknown `--call`); 2 usage or
//! configuration error, or arguments that are rejected (nothing was done); 3 the run waits for approval;
//! 4 conflict (the run was not in a state that allows it).

use tollgate_core::{DecisionError, RunStatus};
use tollgate_runtime::RuntimeError;

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

impl From<RuntimeError> for CliError {
    fn from(error: RuntimeError) -> Self {
        let exit = match &error {
            RuntimeError::UnknownAgent(_) | RuntimeError::Invalid(_) => Exit::Usage,
            RuntimeError::NotFound(_) => Exit::Failed,
            RuntimeError::Decision(DecisionError::UnknownCall(_)) => Exit::Failed,
            RuntimeError::Decision(_) => Exit::Usage,
            RuntimeError::Conflict(_) => Exit::Conflict,
            // Refused as not allowed, like a 403 through `--server`: nothing was done.
            RuntimeError::Forbidden(_) => Exit::Usage,
            RuntimeError::Store(_) => Exit::Failed,
        };
        let message = match error {
            RuntimeError::NotFound(id) => format!("run {id} not found"),
            other => other.to_string(),
        };
        CliError { exit, message }
    }
}
