//! One MCP server's process and client session, restarted lazily after it dies.
//!
//! Invariants: at most one live session per server; a session that failed at the transport level is
//! dropped (which kills its process) and the next call starts a fresh one with the same tool list; a tool
//! call is never retried on its own, since it may have had an effect before the server died.

use crate::config::{DEFAULT_ENV, McpServerConfig};
use crate::error::{StartFailure, stderr_note};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, Implementation, InitializeRequestParams, JsonObject,
    ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{Peer, ServiceError, ServiceExt};
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::{Mutex, watch};

/// How many stderr lines are kept for error messages.
const STDERR_LINES: usize = 10;
/// Longest stderr line kept, in characters.
const STDERR_LINE_CHARS: usize = 300;
/// How long to wait for a dead server's stderr to reach its end, so its last words make the message.
const STDERR_SETTLE: Duration = Duration::from_secs(1);
/// How long a graceful shutdown may take before the process is left to be killed on drop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The client session type: rmcp's, kept inside this module.
type Session = RunningService<RoleClient, InitializeRequestParams>;

/// The last lines a server wrote to stderr, filled by a background reader that also logs them.
#[derive(Clone)]
pub(crate) struct StderrTail {
    lines: Arc<StdMutex<VecDeque<String>>>,
    ended: watch::Receiver<bool>,
}

impl StderrTail {
    fn follow(server: &str, stderr: Option<ChildStderr>) -> Self {
        let lines = Arc::new(StdMutex::new(VecDeque::new()));
        let (ended_tx, ended) = watch::channel(false);
        let Some(stderr) = stderr else {
            let _ = ended_tx.send(true);
            return Self { lines, ended };
        };
        let sink = lines.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                tracing::debug!(server = %server, "mcp server stderr: {line}");
                let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
                let mut kept = sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if kept.len() == STDERR_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
            let _ = ended_tx.send(true);
        });
        Self { lines, ended }
    }

    /// Waits (bounded) until the process closed stderr, so lines written just before exiting are in.
    async fn settle(&self) {
        let mut ended = self.ended.clone();
        let _ = tokio::time::timeout(STDERR_SETTLE, ended.wait_for(|ended| *ended)).await;
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().cloned().collect()
    }
}

/// A live session with its process.
struct Connection {
    session: Session,
    stderr: StderrTail,
    /// Counts sessions of this server, so a failed call only drops the session it used.
    generation: u64,
}

struct State {
    connection: Option<Connection>,
    generations: u64,
    shut_down: bool,
}

/// What a call needs from a live session, taken so the lock is not held during the call.
struct Ready {
    peer: Peer<RoleClient>,
    stderr: StderrTail,
    generation: u64,
}

/// The outcome of one `tools/call`, in terms the tool turns into a result for the model.
pub(crate) enum CallOutcome {
    /// The server answered.
    Answered(CallToolResult),
    /// The model gets this error text.
    Failed(String),
}

/// One configured MCP server.
pub(crate) struct Server {
    config: McpServerConfig,
    state: Mutex<State>,
}

impl Server {
    /// Starts the process, completes the handshake and lists every tool (following `nextCursor`).
    pub(crate) async fn start(config: McpServerConfig) -> Result<(Arc<Self>, Vec<rmcp::model::Tool>), StartFailure> {
        let (connection, tools) = open(&config, 1, Listing::Tools).await?;
        let state = State { connection: Some(connection), generations: 1, shut_down: false };
        Ok((Arc::new(Self { config, state: Mutex::new(state) }), tools))
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Sends `tools/call` to a live session, starting one first if the last one died.
    pub(crate) async fn call(&self, tool: &str, arguments: Option<JsonObject>) -> CallOutcome {
        let name = &self.config.name;
        let ready = match self.ready().await {
            Ok(ready) => ready,
            Err(message) => return CallOutcome::Failed(format!("MCP server `{name}` is not available: {message}")),
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let timeout = self.config.call_timeout;
        // rmcp's `Peer::call_tool` arms a guard for the request it sends: when its future is dropped before
        // the answer came, it sends `notifications/cancelled` naming the request's id (best effort, without
        // waiting). That covers both ways a call is abandoned: the timeout below drops it, and so does
        // whoever drops this future (a cancelled run, a shutdown). The session stays up either way.
        match tokio::time::timeout(timeout, ready.peer.call_tool(params)).await {
            Err(_) => {
                tracing::warn!(server = %name, tool, ?timeout, "MCP call timed out; cancelled");
                CallOutcome::Failed(format!(
                    "MCP server `{name}` timed out after {timeout:?} on `{tool}` (its call_timeout); the call was \
                     cancelled, and it may or may not have taken effect"
                ))
            }
            Ok(Ok(result)) => CallOutcome::Answered(result),
            Ok(Err(ServiceError::McpError(error))) => {
                CallOutcome::Failed(format!("MCP server `{name}` refused `{tool}`: {}", error.message))
            }
            Ok(Err(error)) if ready.peer.is_transport_closed() || is_transport_failure(&error) => {
                tracing::warn!(server = %name, tool, %error, "MCP server connection lost during a call");
                self.forget(ready.generation).await;
                ready.stderr.settle().await;
                CallOutcome::Failed(format!(
                    "MCP server `{name}` is not available: it stopped during the call ({error}){}; it will be \
                     restarted on next use",
                    stderr_note(&ready.stderr.lines())
                ))
            }
            Ok(Err(error)) => CallOutcome::Failed(format!("MCP server `{name}` failed on `{tool}`: {error}")),
        }
    }

    /// Closes the session and stops the process; later calls are refused.
    pub(crate) async fn shut_down(&self) {
        let connection = {
            let mut state = self.state.lock().await;
            state.shut_down = true;
            state.connection.take()
        };
        if let Some(mut connection) = connection {
            let _ = connection.session.close_with_timeout(SHUTDOWN_GRACE).await;
        }
    }

    /// A live session, restarting the server if needed. The error is a sentence for the model.
    async fn ready(&self) -> Result<Ready, String> {
        let mut state = self.state.lock().await;
        if state.shut_down {
            return Err("it was shut down".to_owned());
        }
        if let Some(connection) = &state.connection
            && !connection.session.peer().is_transport_closed()
        {
            return Ok(connection.ready());
        }
        if state.connection.take().is_some() {
            tracing::warn!(server = %self.config.name, "MCP server stopped; restarting it");
        }
        let generation = state.generations + 1;
        state.generations = generation;
        // The tool list stays the one taken at start: the registry and any suspension pinned it.
        let connection = match open(&self.config, generation, Listing::Skip).await {
            Ok((connection, _)) => connection,
            Err(failure) => {
                return Err(format!(
                    "it stopped and could not be restarted: {failure}; it will be tried again on next use"
                ));
            }
        };
        tracing::info!(server = %self.config.name, generation, "MCP server restarted");
        let ready = connection.ready();
        state.connection = Some(connection);
        Ok(ready)
    }

    /// Drops the session of `generation` (killing its process) unless a newer one already replaced it.
    async fn forget(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state.connection.as_ref().is_some_and(|c| c.generation == generation) {
            state.connection = None;
        }
    }
}

impl Connection {
    fn ready(&self) -> Ready {
        Ready { peer: self.session.peer().clone(), stderr: self.stderr.clone(), generation: self.generation }
    }
}

fn is_transport_failure(error: &ServiceError) -> bool {
    matches!(error, ServiceError::TransportClosed | ServiceError::TransportSend(_))
}

/// Whether [`open`] lists the server's tools.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listing {
    Tools,
    Skip,
}

/// Spawns the process, completes the MCP handshake (classic `initialize`, which every stdio server
/// speaks) and, if asked, lists every tool (following `nextCursor`), all within the start timeout.
async fn open(
    config: &McpServerConfig,
    generation: u64,
    listing: Listing,
) -> Result<(Connection, Vec<rmcp::model::Tool>), StartFailure> {
    let mut command = tokio::process::Command::new(&config.command);
    command.args(&config.args).kill_on_drop(true);
    if !config.inherit_env {
        command.env_clear();
        for key in DEFAULT_ENV {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
    }
    command.envs(&config.env);
    if let Some(dir) = &config.working_dir {
        command.current_dir(dir);
    }
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| StartFailure::Spawn { command: config.command.display().to_string(), source })?;
    let stderr = StderrTail::follow(&config.name, stderr);
    let client = InitializeRequestParams::new(
        ClientCapabilities::default(),
        Implementation::new("tollgate", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    let handshake_and_listing = async {
        let session = match client.serve(transport).await {
            Ok(session) => session,
            Err(error) => {
                // The failed handshake dropped the transport, which kills the process and ends its stderr.
                stderr.settle().await;
                return Err(StartFailure::Handshake { message: error.to_string(), stderr: stderr.lines() });
            }
        };
        let tools = match listing {
            Listing::Skip => Vec::new(),
            Listing::Tools => session
                .peer()
                .list_all_tools()
                .await
                .map_err(|error| StartFailure::ListTools { message: error.to_string() })?,
        };
        Ok((session, tools))
    };
    match tokio::time::timeout(config.start_timeout, handshake_and_listing).await {
        Ok(Ok((session, tools))) => Ok((Connection { session, stderr, generation }, tools)),
        Ok(Err(failure)) => Err(failure),
        // Dropping the unfinished future dropped the transport, which kills the process.
        Err(_) => Err(StartFailure::Timeout { after: config.start_timeout, stderr: stderr.lines() }),
    }
}
