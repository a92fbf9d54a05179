//! What the commands act through: this process's own runtime over the configured store ([`Local`]), or
//! a Tollgate server's HTTP API (`--server URL`, [`Remote`]).
//!
//! Every command is written once, against [`Backend`]; both sides answer with the same [`RunView`]s (the
//! run object of docs/api.md), the same events and the same errors, so the output and exit codes of a command
//! do not depend on where the runs live.

use crate::exit::{CliError, DecisionRefused};
use crate::local::{Local, LocalWatch};
use crate::remote::{EventFeed, Remote};
use crate::view::{GrantView, RunView};
use serde_json::Value;
use std::time::Duration;
use tollgate_agent_core::{Actor, CallId, ChainBreak, Decision, GrantId, RunId, RunStatus, StoredEvent, TraceContext};
use tollgate_agent_runtime::decide::RememberSpec;
use tollgate_agent_runtime::{DecisionSet, GrantSettings, NewGrant};

/// The environment variable naming the trace a started run joins (a W3C `traceparent`, the name
/// OpenTelemetry gives environment carriers).
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// The caller's trace from [`TRACEPARENT_ENV`]'s value: `None` when it is unset or empty, and, with a
/// warning, when it is not a W3C `traceparent` (the run then starts a trace of its own).
pub fn caller_trace(value: Option<&std::ffi::OsStr>) -> Option<TraceContext> {
    let text = value?.to_string_lossy();
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match TraceContext::parse_received(text) {
        Ok(parent) => Some(parent),
        Err(error) => {
            say!("tollgate: warning: {TRACEPARENT_ENV} is ignored: {error}");
            None
        }
    }
}

/// Where the runs are.
pub enum Backend {
    /// This process drives runs over the configured store.
    Local(Box<Local>),
    /// A Tollgate server does, through its HTTP API.
    Remote(Remote),
}

/// Which grants to list ([`Backend::grants`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct GrantFilter<'a> {
    /// Only this agent's grants.
    pub agent: Option<&'a str>,
    /// Only this tool's grants.
    pub tool: Option<&'a str>,
    /// Only active grants (not revoked, not expired); else every grant.
    pub active: bool,
}

/// One page of grants, newest first, and where the next one starts.
#[derive(Clone, Debug, Default)]
pub struct GrantsPage {
    /// The grants.
    pub grants: Vec<GrantView>,
    /// The cursor of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// Changes of one run, as a signal to read it again.
pub enum Watch {
    /// Notices from this process's runtime.
    Local(LocalWatch),
    /// The run's live events from the server.
    Remote(Box<EventFeed>),
}

impl Watch {
    /// Waits until the run may have changed (true): a change was committed, or a while passed (the run
    /// may be driven where no signal comes from); or until live text of its model came (false), which
    /// [`take_text`](Self::take_text) gives.
    pub async fn changed(&mut self) -> bool {
        match self {
            Watch::Local(watch) => watch.changed().await,
            Watch::Remote(feed) => feed.changed().await,
        }
    }

    /// The model's live text received since the last call, by round (V2 streaming: never stored).
    pub fn take_text(&mut self) -> Vec<(u32, tollgate_agent_runtime::LiveText)> {
        match self {
            Watch::Local(watch) => watch.take_text(),
            Watch::Remote(feed) => feed.take_text(),
        }
    }
}

impl Backend {
    /// Starts a run with metadata for its tools, inside the trace `TRACEPARENT` names when it is set
    /// (see [`caller_trace`]); returns it as created (the caller follows it).
    pub async fn start(
        &self,
        agent: Option<&str>,
        input: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<RunView, CliError> {
        let parent = caller_trace(std::env::var_os(TRACEPARENT_ENV).as_deref());
        match self {
            Backend::Local(local) => local.start(agent, input, metadata, parent).await,
            Backend::Remote(remote) => remote.start(agent, input, metadata, parent).await,
        }
    }

    /// Reads one run by its full id.
    pub async fn get(&self, id: &RunId) -> Result<RunView, CliError> {
        match self {
            Backend::Local(local) => local.get(id).await,
            Backend::Remote(remote) => remote.get(id).await,
        }
    }

    /// The full id of the one run whose id starts with `prefix`; exit 1 naming it when none or several.
    pub async fn resolve(&self, prefix: &str) -> Result<RunId, CliError> {
        match self {
            Backend::Local(local) => local.resolve(prefix).await,
            Backend::Remote(remote) => remote.resolve(prefix).await,
        }
    }

    /// Waits until run `id` waits for approval or has ended.
    pub async fn wait_settled(&self, id: &RunId) -> Result<RunView, CliError> {
        match self {
            Backend::Local(local) => local.wait_settled(id).await,
            Backend::Remote(remote) => remote.wait_settled(id).await,
        }
    }

    /// Lists runs, newest first.
    pub async fn list(
        &self,
        status: Option<RunStatus>,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunView>, CliError> {
        match self {
            Backend::Local(local) => local.list(status, agent, limit).await,
            Backend::Remote(remote) => remote.list(status, agent, limit).await,
        }
    }

    /// A run's events after seq `after` (0 for all).
    pub async fn events(&self, id: &RunId, after: u64) -> Result<Vec<StoredEvent>, CliError> {
        match self {
            Backend::Local(local) => local.events(id, after).await,
            Backend::Remote(remote) => remote.events(id, after).await,
        }
    }

    /// Records decisions for the held turn of `run` as it was read, naming that turn's digest, so that a
    /// turn that changed meanwhile is refused (a conflict) rather than decided blind; with a grant made
    /// in the same transaction for each approval named in `remember` (approvals of a
    /// [`DecisionSet::Each`]: the API's `approve_all` carries none). Returns the run right after the
    /// decisions (resuming in the background when they completed the set).
    pub async fn decide(
        &self,
        run: &RunView,
        set: &DecisionSet,
        remember: &[(CallId, RememberSpec)],
    ) -> Result<RunView, DecisionRefused> {
        match self {
            Backend::Local(local) => local.decide(run, set, remember).await,
            Backend::Remote(remote) => remote.decide(run, set, remember).await,
        }
    }

    /// Makes a grant (with `apply_to_waiting`, its `applied_to`: the waiting runs it approved).
    pub async fn create_grant(&self, new: NewGrant) -> Result<GrantView, CliError> {
        match self {
            Backend::Local(local) => local.create_grant(new).await,
            Backend::Remote(remote) => remote.create_grant(new).await,
        }
    }

    /// One page of grants, newest first, after `cursor`.
    pub async fn grants(&self, filter: GrantFilter<'_>, cursor: Option<&str>) -> Result<GrantsPage, CliError> {
        match self {
            Backend::Local(local) => local.grants(filter, cursor).await,
            Backend::Remote(remote) => remote.grants(filter, cursor).await,
        }
    }

    /// One grant by its full id; exit 1 naming it when none has it.
    pub async fn grant(&self, id: &GrantId) -> Result<GrantView, CliError> {
        match self {
            Backend::Local(local) => local.grant(id).await,
            Backend::Remote(remote) => remote.grant(id).await,
        }
    }

    /// Revokes an active grant; exit 1 naming it when none has the id, 4 when it is already revoked or
    /// expired.
    pub async fn revoke_grant(&self, id: &GrantId) -> Result<GrantView, CliError> {
        match self {
            Backend::Local(local) => local.revoke_grant(id).await,
            Backend::Remote(remote) => remote.revoke_grant(id).await,
        }
    }

    /// The `[grants]` settings, where this command line knows them: locally the configuration's; through
    /// a server they are the server's, which the API does not say.
    pub fn grant_settings(&self) -> Option<GrantSettings> {
        match self {
            Backend::Local(local) => Some(local.runtime.grant_settings()),
            Backend::Remote(_) => None,
        }
    }

    /// Cancels a run that has not finished.
    pub async fn cancel(&self, id: &RunId, reason: Option<&str>) -> Result<RunView, CliError> {
        match self {
            Backend::Local(local) => local.cancel(id, reason).await,
            Backend::Remote(remote) => remote.cancel(id, reason).await,
        }
    }

    /// Applies retention now; returns how many runs went.
    pub async fn purge(&self, older_than: Option<Duration>) -> Result<u64, CliError> {
        match self {
            Backend::Local(local) => local.purge(older_than).await,
            Backend::Remote(remote) => remote.purge(older_than).await,
        }
    }

    /// An agent's tools with their effective gates, or every known tool with its own default gate; each as
    /// `GET /v1/tools` lists it.
    pub async fn tools(&self, agent: Option<&str>) -> Result<Vec<Value>, CliError> {
        match self {
            Backend::Local(local) => local.tools(agent).await,
            Backend::Remote(remote) => remote.tools(agent).await,
        }
    }

    /// Checks run `id`'s hash chain: the number of events when intact, else where it breaks.
    pub async fn verify(&self, id: &RunId) -> Result<Result<u64, ChainBreak>, CliError> {
        match self {
            Backend::Local(local) => local.verify(id).await,
            Backend::Remote(remote) => remote.verify(id).await,
        }
    }

    /// A watch on run `id`'s changes. Open it before reading the run, so no change in between is missed.
    pub fn watch(&self, id: &RunId) -> Watch {
        match self {
            Backend::Local(local) => Watch::Local(local.watch(id)),
            Backend::Remote(remote) => Watch::Remote(Box::new(remote.feed(id))),
        }
    }

    /// Whether this command line may decide `run`, checked before asking a person anything. Through the
    /// API the server decides (and says why when it refuses).
    pub fn may_decide(&self, run: &RunView) -> Result<(), String> {
        match self {
            Backend::Local(local) => local.may_decide(run),
            Backend::Remote(_) => Ok(()),
        }
    }

    /// The actor decisions sent from here are recorded as, when this command line knows it: locally
    /// [`ACTOR`](crate::local::ACTOR); through a server the name of the token, which only the server knows.
    pub fn actor(&self) -> Option<&Actor> {
        match self {
            Backend::Local(local) => Some(local.actor()),
            Backend::Remote(_) => None,
        }
    }

    /// Checks one decision against `run`'s held turn before anything is sent, where that can be done
    /// here: locally with the agent's own loop; through the API the server checks it when it is sent.
    pub async fn check_decision(&self, run: &RunView, call_id: &CallId, decision: &Decision) -> Result<(), String> {
        match self {
            Backend::Local(local) => local.check_decision(&run.id, call_id, decision).await,
            Backend::Remote(_) => Ok(()),
        }
    }

    /// Waits until whatever this process started (locally: a resume, a run taken over by a sweep)
    /// reaches its next durable state.
    pub async fn drain(&self) {
        if let Backend::Local(local) = self {
            local.runtime.drain().await;
        }
    }

    /// Stops what this process started (locally: MCP servers).
    pub async fn shutdown(&self) {
        if let Backend::Local(local) = self {
            local.shutdown().await;
        }
    }
}
