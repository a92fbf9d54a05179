//! # tollgate-agent-runtime
//!
//! Joins the tool loop ([`tollgate_agent_core::AgentLoop`]) to a [`RunStore`], persisting each step as it
//! happens, so that a run waiting for a person survives restarts and resumes exactly once. This is an
//! implementation crate: to embed Tollgate, use the [`tollgate`](https://docs.rs/tollgate) facade crate,
//! which assembles this runtime for you.
//!
//! ```
//! # use std::sync::Arc;
//! # use tollgate_agent_core::scripted::{Script, ScriptedModel};
//! # use tollgate_agent_core::typed::JsonSchema;
//! # use tollgate_agent_core::*;
//! # use tollgate_agent_runtime::{AgentSpec, DecisionSet, OnExpiry, Runtime, RuntimeOptions, StartRun, UuidV7Ids};
//! # #[derive(serde::Deserialize, JsonSchema)]
//! # #[schemars(crate = "tollgate_agent_core::typed::schemars")]
//! # struct Message { to: String }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let model = Arc::new(ScriptedModel::new(Script::from_json(r#"{"turns": [{"tool_calls": [{"name": "send",
//! #     "arguments": {"to": "ada"}}]}, {"text": "Sent."}]}"#)?));
//! # let send = tool_fn("send", "Sends a message.", |m: Message, _ctx| async move {
//! #     Ok(ToolOutput::text(format!("sent to {}", m.to)))
//! # }).gate(|_, _| Gate::Ask);
//! let store = tollgate_agent_store::open("sqlite::memory:").await?;
//! let tools = Arc::new(ToolRegistry::new().with(send.into_tool())?); // `send` is gated `ask`
//! let agent = AgentSpec {
//!     name: "mailer".into(),
//!     model: "scripted".into(),
//!     agent_loop: Arc::new(ToolLoop::new(model, tools, LoopConfig::default())),
//!     tools: Vec::new(), // what listings show
//!     approval_ttl: None,
//!     on_expiry: OnExpiry::Deny,
//!     forbid_self_approval: false,
//!     escalation: None,
//! };
//! let options = RuntimeOptions::default();
//! let runtime = Runtime::new(store, vec![agent], Arc::new(SystemClock), Arc::new(UuidV7Ids), options);
//!
//! let run = runtime.start_and_wait(StartRun::new("Tell Ada hello", "alice")).await?;
//! assert_eq!(run.status(), RunStatus::WaitingForApproval); // stored: any process may decide it
//! let digest = run.held_turn().map(|held| held.turn_digest.to_string()).unwrap_or_default();
//! let run = runtime.decide_and_wait(&run, &digest, DecisionSet::ApproveAll, &Actor::from("bob")).await?;
//! assert_eq!(run.output(), Some("Sent."));
//! # Ok(()) }
//! ```
//!
//! It keeps docs/design.md's exactly-once rule:
//! - a run is created `running` under this process's lease; every later write is guarded by that lease
//!   (while running) or by the run's version (a person's action on what they saw);
//! - decisions are recorded one by one; the request whose decisions complete the held turn's set claims
//!   the resume in the same transaction, so exactly one resume happens per suspension;
//! - before an ask-gated call runs, its `tool_started` event is committed; after a crash such a call is
//!   never run again by itself: the run goes back to waiting with the call marked in doubt;
//! - a suspension that cannot be stored fails the run visibly; it is never reported as waiting.
//!
//! Other events (model requests and responses, allow-gated calls) ride with the next durable write, so
//! a run costs few commits; allow-gated calls are declared safe to repeat after a crash.
//!
//! ## Modules
//! - this file: the [`Runtime`] facade — its types, reads, and the operations callers use (start,
//!   decide, cancel), each answering its own error type;
//! - [`error`]: one error enum per operation ([`StartError`], [`ReadError`], [`ResolveError`],
//!   [`DecideError`], [`CancelError`]), typed and marked retryable;
//! - [`decide`]: the pure rules of a decision request ([`decide::plan_decision`]): which calls, the
//!   transition with or without the resume, the events — no store;
//! - `drive`: driving a segment (start, resume, finishing) in a task of its own, with `hooks`
//!   persisting the loop's steps as they happen;
//! - [`maintenance`]: the one scheduler of deadlines, lease takeovers (`recovery`), lease renewal and
//!   retention, on the runtime's clock, for `serve` and the CLI alike;
//! - [`follow`]: following a run's events as they commit ([`Follower`]), for live streams;
//! - [`live`]: the live text of this process's model calls as streaming providers send it
//!   ([`Runtime::deltas`]), never stored;
//! - [`privacy`]: the privacy level and the secrets redactor as a layer over the store; `events`,
//!   [`view`] and [`wire`]: the event data and the run as the API shows them.

pub use live::{LiveDelta, LiveText, RunDeltas};
pub use privacy::PrivacyLevel;
pub use telemetry::Telemetry;
use tollgate_agent_core::Redactor;
use tollgate_agent_core::{Actor, CallId, RunId};
mod cancel;
mod changes;
pub mod decide;
mod drive;
pub mod error;
mod events;
pub mod follow;
pub mod grants;
mod hooks;
pub mod live;
pub mod maintenance;
mod outage;
pub mod privacy;
mod reads;
mod recovery;
mod start;
mod stores;
pub mod telemetry;
pub mod view;
mod waits;
pub mod wire;
pub mod workers;

pub use changes::{ChangeSet, Changed};
pub use decide::{DeciderRules, DecisionPlan, DecisionRequest, plan_decision};
pub use error::{CancelError, DecideError, ReadError, ResolveError, StartError};
pub use follow::Follower;
pub use grants::{GrantError, GrantSettings, MadeGrant, NewGrant};
pub use maintenance::{Maintenance, Retention, Schedule};
pub use workers::{WorkerStats, default_workers};

use changes::ChangeSets;
pub(crate) use drive::{Settled, Work, suspend_transition};
use error::SweepError;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};
use tollgate_agent_core::{
    AgentLoop, ChangeFeed, Clock, Decision, EventLog, IdGen, Lease, Millis, RunRecord, RunStatus, RunStore,
    StoreChange, StoreHealth,
};
use workers::Pool;

/// What happens to a waiting run when its approval deadline passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnExpiry {
    /// Deny every undecided call (actor `system`, reason `approval deadline passed`) and resume.
    #[default]
    Deny,
    /// End the run as `expired`.
    Cancel,
}

/// One agent the runtime can run.
pub struct AgentSpec {
    /// Its name.
    pub name: String,
    /// The model name (for listing).
    pub model: String,
    /// The loop that runs it.
    pub agent_loop: Arc<dyn AgentLoop>,
    /// The tools it is offered, with their effective gates (for listing).
    pub tools: Vec<ToolInfo>,
    /// How long a run may wait for a decision.
    pub approval_ttl: Option<Duration>,
    /// What happens when that deadline passes.
    pub on_expiry: OnExpiry,
    /// The actor who started a run may not decide its calls.
    pub forbid_self_approval: bool,
    /// When a held turn nobody settles is escalated, and to whom (`escalate_after`, `escalate_to`);
    /// `None`: never.
    pub escalation: Option<EscalationRule>,
}

/// An agent's escalation (V2.md section 4; docs/design.md, "Escalation"): a held turn still waiting
/// `after` its last change is escalated once, with an `approval_escalated` event naming `notify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EscalationRule {
    /// How long a held turn waits before it is escalated (`escalate_after`).
    pub after: Duration,
    /// `after` as the configuration wrote it (`1h`, `24h`): the `approval_escalated` event's `after`.
    pub after_text: String,
    /// The notifiers told (their configured names: the agent's `escalate_to`, then each notifier
    /// covering the agent whose `on` lists `escalation`).
    pub notify: Vec<String>,
}

impl EscalationRule {
    /// Escalation after `after`, telling `notify`; `after` written in the largest unit that holds it
    /// exactly (`90m`, `1h`).
    pub fn new(after: Duration, notify: Vec<String>) -> EscalationRule {
        EscalationRule { after, after_text: tollgate_agent_protocol::format_duration(after), notify }
    }
}

/// A tool as listed by `tollgate tools` and `GET /v1/tools`: what it is, its gate, and why.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ToolInfo {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: serde_json::Value,
    /// The gate for a call with no particular arguments (a policy rule with argument matchers or a tool
    /// whose gate depends on its arguments may decide differently per call).
    pub gate: tollgate_agent_core::Gate,
    /// Why: `default`, `annotation readOnlyHint`, or the policy rule that decided.
    pub why: String,
    /// Whether a grant may be made for it (no policy rule naming it says `grantable = false`).
    pub grantable: bool,
}

impl ToolInfo {
    /// Lists a tool with its own gate for empty arguments, outside any run ([`ToolContext::listing`]).
    ///
    /// [`ToolContext::listing`]: tollgate_agent_core::ToolContext::listing
    pub fn of(tool: &dyn tollgate_agent_core::Tool, why: impl Into<String>) -> Self {
        let empty = serde_json::Value::Object(serde_json::Map::new());
        Self {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            parameters: tool.parameters().clone(),
            gate: tool.gate(&empty, &tollgate_agent_core::ToolContext::listing()),
            why: why.into(),
            grantable: !tool.refuses_grants(),
        }
    }
}

/// How this process takes part.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// This process's lease owner id (unique per process).
    pub node_id: String,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// Every tool this process knows, with its own default gate (no policy), for listing.
    pub catalog: Vec<ToolInfo>,
    /// What the event log keeps of prompts, arguments and results (`[privacy] level`).
    pub privacy: PrivacyLevel,
    /// Removes configured secrets from events, run errors and outputs before they are stored.
    pub redactor: Redactor,
    /// How many runs this process drives at once (`[runtime] workers`; see [`workers`]).
    pub workers: usize,
    /// How many takeovers in a row, without the run reaching a new step, a run is given before the next
    /// one fails it instead (`[runtime] max_takeovers`, default 3; the `run_taken_over` event of docs/events.md): a segment that
    /// stops every process driving it must not keep a fleet restarting. At least 1.
    pub max_takeovers: u32,
    /// `[grants]`: whether grants apply, and how long they last.
    pub grants: GrantSettings,
    /// `[telemetry]`: where the runs' OpenTelemetry spans go, if anywhere ([`telemetry`]).
    pub telemetry: Option<Telemetry>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            node_id: format!("node-{}", uuid::Uuid::now_v7()),
            lease: Duration::from_secs(30),
            catalog: Vec::new(),
            privacy: PrivacyLevel::Full,
            redactor: Redactor::default(),
            workers: default_workers(std::thread::available_parallelism().map_or(1, usize::from)),
            max_takeovers: DEFAULT_MAX_TAKEOVERS,
            grants: GrantSettings::default(),
            telemetry: None,
        }
    }
}

/// The default of [`RuntimeOptions::max_takeovers`].
pub const DEFAULT_MAX_TAKEOVERS: u32 = 3;

/// A change to a run, broadcast in process as it commits: this process's own changes, and (from a
/// store several nodes share, see [`ChangeFeed::changes`]) those another node committed.
#[derive(Clone, Debug, PartialEq)]
pub struct RunNotice {
    /// The run (empty for [`Origin::Resync`]).
    pub run_id: RunId,
    /// Its status after the change.
    pub status: RunStatus,
    /// Its last event's seq after the change.
    pub last_seq: u64,
    /// The run as committed by the change, when this process committed a whole record (an append of
    /// events alone, and another node's change, carry none).
    pub run: Option<Arc<RunRecord>>,
    /// Who committed it.
    pub origin: Origin,
}

/// Where a [`RunNotice`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// This process committed the change.
    Local,
    /// Another node committed it; the store announced it (which run and where it stands, no data).
    Remote,
    /// Not one change: the store may have missed other nodes' changes (its listening connection was
    /// lost, or is back), so whoever follows a run reads it again, and waits anew as
    /// [`Runtime::recheck_after`] now says. `run_id` is empty, `status` is `running`, `last_seq` is 0.
    Resync,
}

impl RunNotice {
    /// Whether a follower of run `id` that has seen up to `seq` should read it again.
    pub fn wakes(&self, id: &RunId, seq: u64) -> bool {
        self.origin == Origin::Resync || (&self.run_id == id && self.last_seq > seq)
    }
}

/// A run to start ([`Runtime::start`], [`Runtime::start_and_wait`]): which agent, on what input, by whom,
/// and the metadata its tools get.
///
/// ```
/// # use tollgate_agent_runtime::StartRun;
/// let mut metadata = serde_json::Map::new();
/// metadata.insert("customer".into(), "acme".into());
/// let request = StartRun::new("Refund order 42", "support-desk").agent("refunds").metadata(metadata);
/// # assert_eq!(request.agent, Some("refunds"));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StartRun<'a> {
    /// The agent; the default (first) agent when `None`.
    pub agent: Option<&'a str>,
    /// What the agent is asked to do: not empty, not only white space.
    pub input: &'a str,
    /// Who starts it, on the record (`run_started`, the run's `created_by`).
    pub actor: Actor,
    /// Handed to every tool call of the run ([`ToolContext::metadata`](tollgate_agent_core::ToolContext))
    /// and stored with it, so a resume in any process has it too; shown on the run, never in its events.
    /// Within [`Metadata`](tollgate_agent_core::Metadata)'s limits (16 KiB as JSON, 16 levels deep), else
    /// [`StartError::InvalidMetadata`]. Empty by default.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The caller's trace to join (a parsed W3C `traceparent`; docs/telemetry.md): with telemetry on,
    /// the run's spans go into that trace under the caller's span, sampled as the caller decided.
    /// `None` (the default), or telemetry off: the run starts a trace of its own (when telemetry is on).
    pub trace_parent: Option<tollgate_agent_core::TraceContext>,
}

impl<'a> StartRun<'a> {
    /// A run of the default agent on `input`, started by `actor`, without metadata.
    pub fn new(input: &'a str, actor: impl Into<Actor>) -> Self {
        Self { agent: None, input, actor: actor.into(), metadata: serde_json::Map::new(), trace_parent: None }
    }

    /// Runs this agent instead of the default one.
    pub fn agent(mut self, name: &'a str) -> Self {
        self.agent = Some(name);
        self
    }

    /// With this metadata (replacing any given before).
    pub fn metadata(mut self, metadata: serde_json::Map<String, serde_json::Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// Joins the caller's trace `parent` (see [`StartRun::trace_parent`]).
    pub fn trace_parent(mut self, parent: tollgate_agent_core::TraceContext) -> Self {
        self.trace_parent = Some(parent);
        self
    }
}

/// Decisions as a caller sends them.
#[derive(Clone, Debug, PartialEq)]
pub enum DecisionSet {
    /// One decision per named call.
    Each(Vec<(CallId, Decision)>),
    /// Approve every held call not yet decided.
    ApproveAll,
    /// Deny every held call not yet decided, with a reason.
    DenyAll {
        /// The reason the model is given.
        reason: String,
    },
}

/// UUIDv7 run ids.
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidV7Ids;

impl IdGen for UuidV7Ids {
    fn run_id(&self) -> RunId {
        RunId::new(uuid::Uuid::now_v7().to_string())
    }
}

/// The durable runtime. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The store, one handle per concern ([`stores`]).
    pub(crate) store: stores::Stores,
    pub(crate) agents: Vec<Arc<AgentSpec>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdGen>,
    pub(crate) node: String,
    pub(crate) lease_ms: i64,
    pub(crate) max_takeovers: u32,
    /// `[grants]`.
    pub(crate) grants: GrantSettings,
    /// Each agent's active grants as last read ([`hooks::GrantCache`]).
    pub(crate) grant_cache: hooks::GrantCache,
    /// Where the escalation sweep's next window starts, per `escalate_after` (`maintenance.rs`).
    pub(crate) escalation_windows: Mutex<HashMap<Duration, (Millis, RunId)>>,
    pub(crate) notices: broadcast::Sender<RunNotice>,
    pub(crate) in_flight: Mutex<HashSet<RunId>>,
    pub(crate) idle: Notify,
    /// Waits of this process's drives for a store that could not take their progress ([`outage`]).
    pub(crate) outage_waits: std::sync::atomic::AtomicU64,
    catalog: Vec<ToolInfo>,
    pub(crate) pool: Pool,
    /// The change sets open on this runtime ([`Runtime::changes`]).
    changes: ChangeSets,
    /// This process's commits to followed runs ([`follow`]), when the store taps its commits.
    pub(crate) recent: Option<Arc<follow::Recent>>,
    /// The store holds the tap feeding `recent` only while this does.
    _tap: Option<tollgate_agent_core::CommitTap>,
    /// The live text of this process's model calls ([`live`]).
    pub(crate) deltas: live::Deltas,
    /// Where this process's spans go (`[telemetry]`), if anywhere ([`telemetry`]).
    pub(crate) tracing: Option<telemetry::Tracing>,
}

impl Runtime {
    /// A runtime over a store and a set of agents (the first is the default agent).
    pub fn new(
        store: Arc<dyn RunStore>,
        agents: Vec<AgentSpec>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
        options: RuntimeOptions,
    ) -> Self {
        let (notices, _) = broadcast::channel(4096);
        let lease_ms = i64::try_from(options.lease.as_millis()).unwrap_or(i64::MAX).max(1000);
        let deltas = live::Deltas::new(options.privacy, options.redactor.clone());
        let tracing = options.telemetry.map(|t| telemetry::Tracing::new(t, options.privacy, options.redactor.clone()));
        let store = stores::Stores::new(store, options.privacy, options.redactor);
        forward_remote_changes(store.feed.as_ref(), &notices);
        let (recent, tap) = follow::Recent::tapping(store.feed.as_ref()).unzip();
        Self {
            inner: Arc::new(Inner {
                store,
                agents: agents.into_iter().map(Arc::new).collect(),
                clock,
                ids,
                node: options.node_id,
                lease_ms,
                max_takeovers: options.max_takeovers.max(1),
                grants: options.grants,
                grant_cache: hooks::GrantCache::default(),
                escalation_windows: Mutex::new(HashMap::new()),
                notices,
                in_flight: Mutex::new(HashSet::new()),
                idle: Notify::new(),
                outage_waits: std::sync::atomic::AtomicU64::new(0),
                catalog: options.catalog,
                pool: Pool::new(options.workers),
                changes: ChangeSets::default(),
                recent,
                _tap: tap,
                deltas,
                tracing,
            }),
        }
    }

    /// The store's event logs, to read (`GET /v1/runs/{id}/events`, SSE, `doctor`): events are written only
    /// through the runtime's commands.
    pub fn event_log(&self) -> &Arc<dyn EventLog> {
        &self.inner.store.log
    }

    /// The store's health: its write probe (`/readyz`), its integrity check and its counts.
    pub fn health(&self) -> &Arc<dyn StoreHealth> {
        &self.inner.store.health
    }

    /// What other processes commit to the store, its commit log and readers, and this process's tap (SSE,
    /// webhooks, `/metrics`).
    pub fn change_feed(&self) -> &Arc<dyn ChangeFeed> {
        &self.inner.store.feed
    }

    /// The agents, the default first.
    pub fn agents(&self) -> impl Iterator<Item = &AgentSpec> {
        self.inner.agents.iter().map(|a| a.as_ref())
    }

    /// The agent with this name.
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        self.inner.agents.iter().find(|a| a.name == name).map(|a| a.as_ref())
    }

    /// The runtime's clock (injected, so a server computes retention cutoffs on the same time as the runs).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// This process's id among the nodes sharing the store (its runs' lease owner).
    pub fn node_id(&self) -> &str {
        &self.inner.node
    }

    /// How long a lease this process takes lasts unless renewed (`[runtime] lease`).
    pub fn lease_length(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.inner.lease_ms).unwrap_or(1000))
    }

    /// Every tool this process knows, with its own default gate.
    pub fn catalog(&self) -> &[ToolInfo] {
        &self.inner.catalog
    }

    /// Live notices of run changes: those committed by this process and, when the store announces
    /// them ([`ChangeFeed::changes`]: PostgreSQL), those committed by other nodes ([`Origin::Remote`]).
    pub fn subscribe(&self) -> broadcast::Receiver<RunNotice> {
        self.inner.notices.subscribe()
    }

    /// The live text of the model calls this process makes, as streaming providers send it (all runs;
    /// a receiver filters by [`LiveDelta::run_id`]). Live only and best effort: see [`live`].
    pub fn deltas(&self) -> broadcast::Receiver<Arc<LiveDelta>> {
        self.inner.deltas.subscribe()
    }

    /// Run `id`'s live text, from now on ([`RunDeltas`] over [`deltas`](Self::deltas)).
    pub fn run_deltas(&self, id: &RunId) -> RunDeltas {
        RunDeltas::new(self.deltas(), id)
    }

    /// How long a follower of a run (a live-event stream, a waiter, the claim loop) may wait for
    /// [notices](Self::subscribe) before it reads the store again: `None` while the store announces every
    /// other process's commits (PostgreSQL with its listener listening), so notices alone wake it and
    /// nothing polls; `fallback` otherwise — a store that announces nothing (SQLite, where another
    /// process such as the `tollgate` CLI may commit to the same file), or a PostgreSQL listener that is
    /// not listening yet or has lost its connection (a [`Origin::Resync`] notice is sent when this
    /// changes either way, so followers read again and wait anew).
    pub fn recheck_after(&self, fallback: Duration) -> Option<Duration> {
        self.inner.announced_poll(fallback)
    }

    /// Waits until `woken` completes or, when [`recheck_after`](Self::recheck_after) says so, until
    /// `fallback` passes.
    pub async fn wait_or_recheck(&self, fallback: Duration, woken: impl Future<Output = ()>) {
        match self.recheck_after(fallback) {
            Some(limit) => {
                let _ = tokio::time::timeout(limit, woken).await;
            }
            None => woken.await,
        }
    }

    /// From now on, every run this process changes, for a consumer that must not miss one (see
    /// [`ChangeSet`]): unlike [`subscribe`](Self::subscribe), nothing is lost to a reader that falls
    /// behind. Other nodes' changes are not in it.
    pub fn changes(&self) -> ChangeSet {
        self.inner.changes.open()
    }

    /// Waits until every run this process drives has reached its next durable state.
    pub async fn drain(&self) {
        loop {
            let idle = self.inner.idle.notified();
            if self.inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
                return;
            }
            idle.await;
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }
}

/// How often a decision or a cancellation reads the run again after another write committed first.
const DECIDE_ATTEMPTS: usize = 8;
/// The length of a run id (a hyphenated UUID).
const RUN_ID_LEN: usize = 36;

/// How long [`Runtime::wait_settled`] waits for a notice before it reads the run again, while the store
/// does not announce other processes' commits.
const WAIT_RECHECK: Duration = Duration::from_millis(500);

fn settled(status: RunStatus) -> bool {
    status == RunStatus::WaitingForApproval || status.is_terminal()
}

/// Turns the changes other nodes commit, as the store announces them, into [`Origin::Remote`] notices
/// (and its resyncs into [`Origin::Resync`]), in a task that ends with the runtime's notices or the
/// store's announcements. Nothing for a store that announces nothing, or outside a tokio runtime.
fn forward_remote_changes(store: &dyn ChangeFeed, notices: &broadcast::Sender<RunNotice>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let Some(mut changes) = store.changes() else { return };
    let notices = notices.downgrade();
    runtime.spawn(async move {
        while let Some(change) = futures_util::StreamExt::next(&mut changes).await {
            let Some(notices) = notices.upgrade() else { return };
            let notice = match change {
                StoreChange::Run { id, status, last_seq, .. } => {
                    RunNotice { run_id: id, status, last_seq, run: None, origin: Origin::Remote }
                }
                StoreChange::Resync | StoreChange::Lost => RunNotice {
                    run_id: RunId::default(),
                    status: RunStatus::Running,
                    last_seq: 0,
                    run: None,
                    origin: Origin::Resync,
                },
            };
            let _ = notices.send(notice);
        }
    });
}

/// The agent of a run being taken over.
pub(crate) fn spec_arc(inner: &Inner, name: &str) -> Result<Arc<AgentSpec>, SweepError> {
    inner.agent(name).ok_or_else(|| SweepError::UnknownAgent(name.to_owned()))
}

impl Inner {
    pub(crate) fn agent(&self, name: &str) -> Option<Arc<AgentSpec>> {
        self.agents.iter().find(|a| a.name == name).cloned()
    }

    /// `poll` while the store does not announce other processes' commits, else `None` (see
    /// [`Runtime::recheck_after`]).
    pub(crate) fn announced_poll(&self, poll: Duration) -> Option<Duration> {
        if self.store.feed.announces_changes() { None } else { Some(poll) }
    }

    pub(crate) fn lease(&self, now: Millis) -> Lease {
        Lease { owner: self.node.clone(), expires_at: now + self.lease_ms }
    }

    pub(crate) fn notify(&self, run: &RunRecord) {
        self.notify_change(run, false);
    }

    /// [`Inner::notify`] for the commit that created `run` (every event of it is new to a follower).
    pub(crate) fn notify_created(&self, run: &RunRecord) {
        self.notify_change(run, true);
    }

    /// The commit of `run`'s change, `created` when that commit created it.
    pub(crate) fn notify_change(&self, run: &RunRecord, created: bool) {
        self.changes.record(&run.id, Changed { last_seq: run.last_seq, status: run.status(), created });
        if self.notices.receiver_count() == 0 {
            return;
        }
        let _ = self.notices.send(RunNotice {
            run_id: run.id.clone(),
            status: run.status(),
            last_seq: run.last_seq,
            run: Some(Arc::new(run.clone())),
            origin: Origin::Local,
        });
    }

    pub(crate) fn notify_seq(&self, run_id: &RunId, last_seq: u64) {
        self.changes.record(run_id, Changed { last_seq, status: RunStatus::Running, created: false });
        let _ = self.notices.send(RunNotice {
            run_id: run_id.to_owned(),
            status: RunStatus::Running,
            last_seq,
            run: None,
            origin: Origin::Local,
        });
    }
}
