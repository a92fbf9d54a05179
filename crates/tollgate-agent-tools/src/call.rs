//! What the file tools do around a call: keep file system work off the async workers with a time bound.
//! (Every built-in tool is a [`tollgate_agent_core::TypedTool`]: its arguments arrive parsed.)
//!
//! A file system call can block for as long as the kernel likes (a hung network mount, a slow disk), so
//! the file tools run every `validate`, `preview` and `call` on tokio's blocking pool and stop waiting
//! after [`FS_TIMEOUT`]: the model gets an error result, and the stuck thread finishes on its own.

use std::time::Duration;
use tollgate_agent_core::{ToolError, ToolOutput};

/// How long a file tool waits for the file system before giving up on one step.
pub(crate) const FS_TIMEOUT: Duration = Duration::from_secs(10);

/// The default `path` of the tools that take a folder: the workspace root.
pub(crate) fn dot() -> String {
    ".".to_owned()
}

/// Why blocking work gave no answer.
#[derive(Debug)]
enum Unanswered {
    /// It did not finish within [`FS_TIMEOUT`].
    TimedOut,
    /// It panicked (or was cancelled).
    Stopped(String),
}

impl Unanswered {
    fn message(&self) -> String {
        match self {
            Self::TimedOut => format!("the file system did not answer within {}s", FS_TIMEOUT.as_secs()),
            Self::Stopped(why) => format!("the file tool stopped: {why}"),
        }
    }
}

/// Runs `work` on the blocking pool, waiting at most [`FS_TIMEOUT`] for it.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Unanswered> {
    match tokio::time::timeout(FS_TIMEOUT, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(join)) => Err(Unanswered::Stopped(join.to_string())),
        Err(_) => Err(Unanswered::TimedOut),
    }
}

/// A tool's `call` whose work touches the file system: a timeout is an error result the model reads, a
/// panic is a [`ToolError`].
pub(crate) async fn blocking_call(
    work: impl FnOnce() -> Result<ToolOutput, ToolError> + Send + 'static,
) -> Result<ToolOutput, ToolError> {
    match blocking(work).await {
        Ok(result) => result,
        Err(Unanswered::TimedOut) => Ok(ToolOutput::error(Unanswered::TimedOut.message())),
        Err(stopped) => Err(ToolError::new(stopped.message())),
    }
}

/// A tool's `validate` whose checks touch the file system: no answer is a refusal.
pub(crate) async fn blocking_validate(
    work: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    blocking(work).await.map_err(|e| e.message())?
}

/// A tool's `preview` that reads the file system: no answer is no preview.
pub(crate) async fn blocking_preview<T: Send + 'static>(
    work: impl FnOnce() -> Option<T> + Send + 'static,
) -> Option<T> {
    blocking(work).await.ok().flatten()
}
