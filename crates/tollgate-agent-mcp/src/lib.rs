//! # tollgate-agent-mcp
//!
//! MCP servers as tool sources. Each `[[mcp_servers]]` entry becomes an [`McpSource`]: a child process
//! speaking MCP over stdio through the official Rust SDK (rmcp), whose tools are listed once at start and
//! offered to the model as `SERVER__TOOL` ([`tool_name`]).
//!
//! ```rust
//! use std::time::Duration;
//! use tollgate_agent_mcp::{McpServerConfig, McpSource, StartFailure, tool_name};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // `[[mcp_servers]]` name = "files", command = "npx", args = [...]
//! let files = McpServerConfig::new("files", "npx")
//!     .args(["-y", "@modelcontextprotocol/server-filesystem", "/srv/app/workspace"])
//!     .call_timeout(Duration::from_secs(30));
//! assert_eq!(tool_name(&files.name, "read_file"), "files__read_file"); // the name the model sees
//!
//! // `McpSource::start(files)` spawns the server and lists its tools. One that cannot run fails clearly:
//! let missing = McpServerConfig::new("notes", "/nonexistent/mcp-server");
//! let error = McpSource::start(missing).await.unwrap_err();
//! println!("{error}"); // MCP server `notes` could not be started: cannot run `/nonexistent/mcp-server`: …
//! assert!(matches!(error.failure, StartFailure::Spawn { .. }));
//! # }
//! ```
//!
//! This is the only crate that imports rmcp, and no rmcp type crosses its public API: tools are
//! [`tollgate_agent_core::Tool`]s, results are [`tollgate_agent_core::ToolOutput`]s, errors are ours.
//!
//! Promises:
//! - A tool annotated `readOnlyHint: true` defaults to [`Gate::Allow`](tollgate_agent_core::Gate), every other to
//!   `Ask`, and so does one annotated `destructiveHint: true` too (the hint that asks wins);
//!   [`McpTool::gate_reason`] says which. Operator policy is applied over this by the caller.
//! - A server that cannot start makes [`McpSource::start`] return a [`StartError`]; the app logs it and
//!   goes on without that server.
//! - A server that dies, or a call that fails at the transport level or times out, gives that call an
//!   error result naming the server; nothing panics. A dead server is started again on its next use, with
//!   the same tool list. A call is never retried on its own: it may have had an effect.
//! - A call abandoned before the server answered — its [`McpServerConfig::call_timeout`] passed, or its
//!   future was dropped — is cancelled on the server with `notifications/cancelled` naming its request id;
//!   a timed-out call's result says it timed out after the configured time.
//! - Every call has a preview ([`McpTool`]'s `Tool::preview`): the server, the tool, the server's
//!   behaviour hints and the arguments as indented JSON, at most [`MAX_PREVIEW_BYTES`], made without
//!   asking the server anything.
//! - A result's image blocks reach the model as images where the provider reads them (PNG, JPEG, GIF and
//!   WebP, at most 3.75 MB each: [`tollgate_agent_core::image`]), and as a line of text saying type and
//!   size everywhere (`[image: image/png, 12 KB]`); an image that cannot be passed on is described with
//!   why.

mod config;
mod error;
mod naming;
mod server;
mod tool;

pub use config::{DEFAULT_ENV, McpServerConfig, resolve_command};
pub use error::{StartError, StartFailure};
pub use naming::{MAX_TOOL_NAME_LEN, tool_name};
pub use tool::{
    GATE_REASON_DEFAULT, GATE_REASON_DESTRUCTIVE, GATE_REASON_READ_ONLY, MAX_PREVIEW_BYTES, McpTool, PREVIEW_CUT_MARKER,
};

use server::Server;
use std::collections::HashSet;
use std::sync::Arc;
use tollgate_agent_core::Tool;

/// A started MCP server and the tools it listed at start.
///
/// Dropping the source and every tool taken from it stops the server's process.
pub struct McpSource {
    server: Arc<Server>,
    tools: Vec<Arc<McpTool>>,
}

impl McpSource {
    /// Spawns the server, completes the MCP handshake and lists its tools (every page), all within
    /// [`McpServerConfig::start_timeout`].
    ///
    /// Two MCP tools whose names map to the same `SERVER__TOOL` cannot both be offered: the first listed
    /// wins and the other is left out with a warning in the log.
    pub async fn start(config: McpServerConfig) -> Result<Self, StartError> {
        let server_name = config.name.clone();
        let (server, listed) =
            Server::start(config).await.map_err(|failure| StartError { server: server_name, failure })?;
        let mut seen = HashSet::new();
        let mut tools = Vec::with_capacity(listed.len());
        for listed in listed {
            let tool = McpTool::from_listing(&server, listed);
            if seen.insert(tool.name().to_owned()) {
                tools.push(Arc::new(tool));
            } else {
                tracing::warn!(
                    server = %server.name(),
                    tool = %tool.mcp_name(),
                    name = %tool.name(),
                    "MCP tool left out: another tool of this server already has the same Tollgate name"
                );
            }
        }
        Ok(Self { server, tools })
    }

    /// The server's configured name.
    pub fn name(&self) -> &str {
        self.server.name()
    }

    /// The server's tools, in the order it listed them, with their MCP-specific details.
    pub fn mcp_tools(&self) -> &[Arc<McpTool>] {
        &self.tools
    }

    /// The server's tools as Tollgate tools, ready for a registry.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.iter().map(|tool| tool.clone() as Arc<dyn Tool>).collect()
    }

    /// Closes the session and stops the process (gracefully first). Tools taken from this source answer
    /// every later call with an error result.
    pub async fn shutdown(&self) {
        self.server.shut_down().await;
    }
}

impl std::fmt::Debug for McpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSource").field("name", &self.name()).field("tools", &self.tools).finish()
    }
}
