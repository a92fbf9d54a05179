//! Why an MCP server could not be started. Failures after a successful start are not errors of this crate:
//! they become error results the model reads (see [`McpTool`](crate::McpTool)).

use std::time::Duration;

/// An MCP server that could not be started; the app logs it and goes on without that server's tools.
#[derive(Debug, thiserror::Error)]
#[error("MCP server `{server}` could not be started: {failure}")]
pub struct StartError {
    /// The server's configured name.
    pub server: String,
    /// What went wrong.
    pub failure: StartFailure,
}

/// What went wrong while starting an MCP server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartFailure {
    /// The program could not be run at all (not found, not executable). Retrying will not help until the
    /// configuration or the machine changes.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The program as configured.
        command: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The program ran but the MCP handshake failed: it exited, or answered something that is not MCP.
    #[error("the MCP handshake failed: {message}{}", stderr_note(.stderr))]
    Handshake {
        /// The client's description of the failure.
        message: String,
        /// The last lines the server wrote to stderr, oldest first.
        stderr: Vec<String>,
    },
    /// The server did not finish the handshake and the tool listing in time.
    #[error("it did not finish starting within {after:?}{}", stderr_note(.stderr))]
    Timeout {
        /// The configured start timeout.
        after: Duration,
        /// The last lines the server wrote to stderr, oldest first.
        stderr: Vec<String>,
    },
    /// The handshake worked but `tools/list` failed.
    #[error("listing its tools failed: {message}")]
    ListTools {
        /// The client's description of the failure.
        message: String,
    },
}

/// `"; its stderr ends with: a | b"`, or nothing when the server wrote nothing.
pub(crate) fn stderr_note(lines: &[String]) -> String {
    if lines.is_empty() { String::new() } else { format!("; its stderr ends with: {}", lines.join(" | ")) }
}
