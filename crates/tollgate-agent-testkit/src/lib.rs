//! # tollgate-agent-testkit
//!
//! Test doubles for Tollgate's ports, in one place so no test file grows its own: a configurable
//! [`TestTool`] that records every invocation, [`RecordingHooks`] that keep the loop's events, and
//! [`SseFrames`], which reads an SSE stream's frames as a client receives them.
//!
//! ```rust
//! use serde_json::json;
//! use std::sync::Arc;
//! use tollgate_agent_core::scripted::{Script, ScriptedModel};
//! use tollgate_agent_core::{
//!     AgentLoop, CallId, Decision, Decisions, Gate, LoopConfig, Outcome, RunScope, ToolLoop, ToolRegistry,
//! };
//! use tollgate_agent_testkit::{RecordingHooks, TestTool};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let write = TestTool::new("write").gate(Gate::Ask); // asks first; records every call
//! let turn = json!({"tool_calls": [{"name": "write", "arguments": {"text": "hi"}}]});
//! let script = json!({"turns": [turn, {"text": "Done."}]});
//! let model = Arc::new(ScriptedModel::new(Script::from_value(script)?));
//! let agent = ToolLoop::new(model, Arc::new(ToolRegistry::new().with(write.shared())?), LoopConfig::default());
//! let (scope, hooks) = (RunScope::new("run-1"), RecordingHooks::default());
//!
//! let Outcome::Suspended(held) = agent.start(&scope, "write hi", &hooks).await? else { panic!("not held") };
//! assert_eq!(write.call_count(), 0); // held at the gate: nothing ran
//! let approve: Decisions = held.decidable_calls().map(|c| (c.call_id.clone(), Decision::Approve)).collect();
//! agent.resume(&scope, held, &approve, &hooks).await?;
//! assert_eq!(write.calls(), [(CallId::from("call_1"), json!({"text": "hi"}))]);
//! assert!(hooks.lines().contains(&"tool_started 1 call_1 write ask".to_owned()));
//! # Ok(()) }
//! ```

mod slow_model;
mod sse;
pub use slow_model::{SlowChatModel, http_message_len};
pub use sse::{SseFrame, SseFrames};

use serde_json::{Value, json};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_core::{
    BoxFuture, CallId, Gate, GrantRecord, HookError, LoopEvent, LoopHooks, PolicyPath, Requirement, RunId, Tool,
    ToolContext, ToolError, ToolOutput,
};

/// What a [`TestTool`] does when called.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Returns `ran NAME with ARGS`.
    Echo,
    /// Returns this text.
    Output(String),
    /// Returns this text as an error result for the model.
    ModelError(String),
    /// Fails internally with this message (which must not reach the model).
    Fail(String),
    /// Panics with this message.
    Panic(String),
    /// Never finishes (a process "crashes" while the call runs).
    Hang,
    /// Takes this long, then returns `ran NAME` (a call still under way when a test acts).
    Sleep(std::time::Duration),
    /// Returns the run's metadata as it reached the tool (`ToolContext::metadata`), as compact JSON.
    ShowMetadata,
}

type GateFn = Arc<dyn Fn(&Value) -> Gate + Send + Sync>;
type GrantableFn = Arc<dyn Fn(&Value) -> bool + Send + Sync>;
type PolicyPathsFn = Arc<dyn Fn(&Value) -> Vec<PolicyPath> + Send + Sync>;

/// A tool for tests: fixed or computed gate, optional preview, chosen behaviour, and a shared log of calls.
#[derive(Clone)]
pub struct TestTool {
    name: String,
    description: String,
    schema: Value,
    gate: GateFn,
    grantable: GrantableFn,
    policy_paths: PolicyPathsFn,
    preview: Option<String>,
    requirement: Requirement,
    behaviour: Behaviour,
    calls: Arc<Mutex<Vec<(CallId, Value)>>>,
    contexts: Arc<Mutex<Vec<ToolContext>>>,
}

impl TestTool {
    /// An allow-gated tool taking any object, echoing its arguments.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            description: format!("test tool {name}"),
            name,
            schema: json!({"type": "object"}),
            gate: Arc::new(|_| Gate::Allow),
            grantable: Arc::new(|_| true),
            policy_paths: Arc::new(|_| Vec::new()),
            preview: None,
            requirement: Requirement::SINGLE,
            behaviour: Behaviour::Echo,
            calls: Arc::default(),
            contexts: Arc::default(),
        }
    }

    /// Sets a fixed gate.
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = Arc::new(move |_| gate);
        self
    }

    /// Sets a gate computed from the arguments.
    pub fn gate_fn(mut self, gate: impl Fn(&Value) -> Gate + Send + Sync + 'static) -> Self {
        self.gate = Arc::new(gate);
        self
    }

    /// Sets whether a grant may allow a call the gate asks about ([`Tool::grantable`]; true by default),
    /// as a policy rule with `grantable = false` says no.
    pub fn grantable_fn(mut self, grantable: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.grantable = Arc::new(grantable);
        self
    }

    /// Sets the path arguments of a call as policy and grants judge them ([`Tool::policy_paths`]; none by
    /// default).
    pub fn policy_paths_fn(mut self, paths: impl Fn(&Value) -> Vec<PolicyPath> + Send + Sync + 'static) -> Self {
        self.policy_paths = Arc::new(paths);
        self
    }

    /// Sets how many distinct people must approve a call the gate asks about (a quorum for 2 or more).
    pub fn approvals(mut self, approvals: u32) -> Self {
        self.requirement = NonZeroU32::new(approvals).map_or(Requirement::SINGLE, Requirement::new);
        self
    }

    /// Sets the argument schema.
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = schema;
        self
    }

    /// Sets the preview.
    pub fn preview(mut self, preview: impl Into<String>) -> Self {
        self.preview = Some(preview.into());
        self
    }

    /// Sets the behaviour.
    pub fn behaviour(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }

    /// Every invocation so far: (call id, arguments).
    pub fn calls(&self) -> Vec<(CallId, Value)> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The context of every invocation so far (run, call and the run's metadata), in order.
    pub fn contexts(&self) -> Vec<ToolContext> {
        self.contexts.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many times the tool ran.
    pub fn call_count(&self) -> usize {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The tool as a registry entry (sharing this handle's call log).
    pub fn shared(&self) -> Arc<dyn Tool> {
        Arc::new(self.clone())
    }
}

impl Tool for TestTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn gate(&self, args: &Value, _ctx: &ToolContext) -> Gate {
        (self.gate)(args)
    }

    fn requirement(&self, _args: &Value) -> Requirement {
        self.requirement
    }

    fn grantable(&self, args: &Value) -> bool {
        (self.grantable)(args)
    }

    fn policy_paths(&self, args: &Value) -> Vec<PolicyPath> {
        (self.policy_paths)(args)
    }

    fn preview<'a>(&'a self, _args: &'a Value) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(self.preview.clone()))
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            self.calls.lock().unwrap_or_else(PoisonError::into_inner).push((ctx.call_id.clone(), args.clone()));
            self.contexts.lock().unwrap_or_else(PoisonError::into_inner).push(ctx.clone());
            match &self.behaviour {
                Behaviour::Echo => Ok(ToolOutput::text(format!("ran {} with {}", self.name, args))),
                Behaviour::Output(text) => Ok(ToolOutput::text(text.clone())),
                Behaviour::ModelError(text) => Ok(ToolOutput::error(text.clone())),
                Behaviour::Fail(message) => Err(ToolError::new(message.clone())),
                Behaviour::Panic(message) => panic!("{message}"),
                Behaviour::Hang => std::future::pending().await,
                Behaviour::Sleep(pause) => {
                    tokio::time::sleep(*pause).await;
                    Ok(ToolOutput::text(format!("ran {}", self.name)))
                }
                Behaviour::ShowMetadata => {
                    Ok(ToolOutput::text(Value::Object(ctx.metadata.as_map().clone()).to_string()))
                }
            }
        })
    }
}

/// Hooks that record each loop event as one line of text, e.g. `tool_started 2 call_1 fs_write ask` (with
/// ` grant=ID` for a call a grant allowed), and hand the loop the grants in force set on them (none by
/// default).
#[derive(Clone, Default)]
pub struct RecordingHooks {
    lines: Arc<Mutex<Vec<String>>>,
    grants: Arc<Mutex<Vec<GrantRecord>>>,
}

impl RecordingHooks {
    /// The events so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Sets the grants in force from now on ([`LoopHooks::grants_in_force`]), as a store would answer.
    pub fn set_grants(&self, grants: Vec<GrantRecord>) {
        *self.grants.lock().unwrap_or_else(PoisonError::into_inner) = grants;
    }
}

impl LoopHooks for RecordingHooks {
    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        let line = match event {
            LoopEvent::ModelRequest { round, messages, tools } => {
                format!("model_request {round} messages={messages} tools={}", tools.len())
            }
            LoopEvent::ModelResponse { round, response } => {
                format!("model_response {round} calls={}", response.tool_calls.len())
            }
            LoopEvent::ToolStarted { round, call_id, tool, gate, grant, .. } => match grant {
                Some(grant) => format!("tool_started {round} {call_id} {tool} {gate} grant={grant}"),
                None => format!("tool_started {round} {call_id} {tool} {gate}"),
            },
            LoopEvent::ToolFinished { round, result } => {
                format!("tool_finished {round} {} {} error={}", result.call_id, result.tool, result.is_error)
            }
        };
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).push(line);
        Box::pin(std::future::ready(Ok(())))
    }

    fn grants_in_force(&self) -> BoxFuture<'_, Result<Arc<[GrantRecord]>, HookError>> {
        let grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Box::pin(std::future::ready(Ok(Arc::from(grants))))
    }
}

/// A clock that stands still until moved.
#[derive(Clone, Default)]
pub struct ManualClock {
    now: Arc<std::sync::atomic::AtomicI64>,
}

impl ManualClock {
    /// A clock at `now` (milliseconds since the epoch).
    pub fn at(now: tollgate_agent_core::Millis) -> Self {
        Self { now: Arc::new(std::sync::atomic::AtomicI64::new(now)) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl tollgate_agent_core::Clock for ManualClock {
    fn now(&self) -> tollgate_agent_core::Millis {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A store wrapper that refuses chosen transitions with a database error, to test what happens when a
/// write cannot be made, and logs every write it lets through.
pub struct FailingStore {
    inner: Arc<dyn tollgate_agent_core::RunStore>,
    fail: &'static str,
    /// What reads and [`tollgate_agent_core::StoreHealth::probe_write`] answer (`None`: the inner store's).
    broken: Option<tollgate_agent_core::StoreError>,
    writes: Mutex<Vec<String>>,
    /// How long each read of events waits first (`None`: not at all).
    event_read_delay: Option<std::time::Duration>,
    /// Reads of events so far.
    event_reads: std::sync::atomic::AtomicUsize,
    /// Reads of a run (`get`) so far.
    run_reads: std::sync::atomic::AtomicUsize,
    /// Whether commit taps are passed to the inner store (else this store taps nothing, and a
    /// follower reads what it commits).
    taps: bool,
    /// A switchable outage of writes ([`FailingStore::with_outage`]).
    outage: Option<Arc<Outage>>,
}

/// A store outage a test switches on and off: while on, every write ([`tollgate_agent_core::RunStore`]'s
/// `create`, `transition`, `append`, `create_grant`, `revoke_grant`, `purge`) of a [`FailingStore`]
/// sharing it fails with the
/// outage's error — refused before it reaches the store, or (with `answers_lost`) made and then
/// answered with the error, as when a connection drops after the commit.
#[derive(Default)]
pub struct Outage {
    state: Mutex<Option<(tollgate_agent_core::StoreError, bool)>>,
    failed: std::sync::atomic::AtomicUsize,
}

impl Outage {
    /// Every write fails with `error` from now on; with `answers_lost`, after it was made.
    pub fn begin(&self, error: tollgate_agent_core::StoreError, answers_lost: bool) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = Some((error, answers_lost));
    }

    /// Writes pass again.
    pub fn end(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// How many writes failed so far.
    pub fn failed(&self) -> usize {
        self.failed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn current(&self) -> Option<(tollgate_agent_core::StoreError, bool)> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if state.is_some() {
            self.failed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        state
    }
}

impl FailingStore {
    /// Writes pass through except while `outage` is on.
    pub fn with_outage(inner: Arc<dyn tollgate_agent_core::RunStore>, outage: Arc<Outage>) -> Self {
        Self { outage: Some(outage), ..Self::new(inner, "") }
    }

    /// `write` through the outage, if one is on.
    fn through_outage<'a, T: Send + 'a>(
        &'a self,
        write: BoxFuture<'a, Result<T, tollgate_agent_core::StoreError>>,
    ) -> BoxFuture<'a, Result<T, tollgate_agent_core::StoreError>> {
        match self.outage.as_ref().and_then(|o| o.current()) {
            None => write,
            Some((error, false)) => Box::pin(std::future::ready(Err(error))),
            Some((error, true)) => Box::pin(async move {
                let _ = write.await;
                Err(error)
            }),
        }
    }

    /// Passes everything through, but each read of events waits `delay` first: a reader of events
    /// (the server's event feed) that falls behind the writers.
    pub fn slow_event_reads(inner: Arc<dyn tollgate_agent_core::RunStore>, delay: std::time::Duration) -> Self {
        Self { event_read_delay: Some(delay), ..Self::new(inner, "") }
    }

    /// Fails nothing: only logs the writes.
    pub fn logging(inner: Arc<dyn tollgate_agent_core::RunStore>) -> Self {
        Self::new(inner, "")
    }

    /// The writes let through so far, in order: `create <status>`, `transition <name>`, `append`,
    /// `claim <limit>` (then `claimed <n>` once it has claimed n runs).
    pub fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn log(&self, write: String) {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner).push(write);
    }

    /// Fails every transition named `fail` (e.g. `"suspend"`), and the creation of a run in the state such
    /// a transition leads to (a run started and held in one write); passes everything else through.
    pub fn new(inner: Arc<dyn tollgate_agent_core::RunStore>, fail: &'static str) -> Self {
        Self {
            inner,
            fail,
            broken: None,
            writes: Mutex::new(Vec::new()),
            event_read_delay: None,
            event_reads: Default::default(),
            run_reads: Default::default(),
            taps: false,
            outage: None,
        }
    }

    /// A store whose reads (`get`, `list`, `events`, grants, the counts by status) and write probe
    /// (`/readyz`) all fail with `error` (a full disk, a read-only or corrupt database, ...); writes pass
    /// through.
    pub fn broken(inner: Arc<dyn tollgate_agent_core::RunStore>, error: tollgate_agent_core::StoreError) -> Self {
        Self { broken: Some(error), ..Self::new(inner, "") }
    }

    /// Passes commit taps ([`tollgate_agent_core::ChangeFeed::tap_commits`]) to the inner store.
    pub fn tapping(self) -> Self {
        Self { taps: true, ..self }
    }

    /// How many reads of events were made through this store so far.
    pub fn event_reads(&self) -> usize {
        self.event_reads.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many reads of a run (`get`) were made through this store so far.
    pub fn run_reads(&self) -> usize {
        self.run_reads.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn broken_with<T: Send + 'static>(&self) -> Option<BoxFuture<'static, Result<T, tollgate_agent_core::StoreError>>> {
        let error = self.broken.clone()?;
        Some(Box::pin(std::future::ready(Err(error))))
    }
}

impl tollgate_agent_core::RunRows for FailingStore {
    fn create(
        &self,
        run: tollgate_agent_core::RunRecord,
        events: Vec<tollgate_agent_core::NewEvent>,
    ) -> BoxFuture<'_, Result<tollgate_agent_core::RunRecord, tollgate_agent_core::StoreError>> {
        use tollgate_agent_core::RunStatus;
        let made_by = match run.status() {
            RunStatus::WaitingForApproval => "suspend",
            RunStatus::Completed => "complete",
            RunStatus::Failed => "fail",
            _ => "create",
        };
        if made_by == self.fail {
            return Box::pin(std::future::ready(Err(tollgate_agent_core::StoreError::Database("disk full".into()))));
        }
        self.log(format!("create {}", run.status()));
        self.through_outage(self.inner.create(run, events))
    }

    fn get<'a>(
        &'a self,
        id: &'a RunId,
    ) -> BoxFuture<'a, Result<tollgate_agent_core::RunRecord, tollgate_agent_core::StoreError>> {
        self.run_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.broken_with().unwrap_or_else(|| self.inner.get(id))
    }

    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<RunId, tollgate_agent_core::StoreError>> {
        self.inner.resolve_prefix(prefix)
    }

    fn list(
        &self,
        query: tollgate_agent_core::RunQuery,
    ) -> BoxFuture<'_, Result<tollgate_agent_core::RunPage, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.list(query))
    }

    fn transition<'a>(
        &'a self,
        id: &'a RunId,
        guard: tollgate_agent_core::Guard,
        transition: tollgate_agent_core::Transition,
        events: Vec<tollgate_agent_core::NewEvent>,
        now: tollgate_agent_core::Millis,
    ) -> BoxFuture<'a, Result<tollgate_agent_core::RunRecord, tollgate_agent_core::StoreError>> {
        if transition.name() == self.fail {
            return Box::pin(std::future::ready(Err(tollgate_agent_core::StoreError::Database("disk full".into()))));
        }
        self.log(format!("transition {}", transition.name()));
        self.through_outage(self.inner.transition(id, guard, transition, events, now))
    }

    fn append<'a>(
        &'a self,
        id: &'a RunId,
        owner: &'a str,
        events: Vec<tollgate_agent_core::NewEvent>,
        lease_until: tollgate_agent_core::Millis,
    ) -> BoxFuture<'a, Result<u64, tollgate_agent_core::StoreError>> {
        self.log("append".into());
        self.through_outage(self.inner.append(id, owner, events, lease_until))
    }
}

impl tollgate_agent_core::EventLog for FailingStore {
    fn events<'a>(
        &'a self,
        id: &'a RunId,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<tollgate_agent_core::StoredEvent>, tollgate_agent_core::StoreError>> {
        if let Some(broken) = self.broken_with() {
            return broken;
        }
        let delay = self.event_read_delay;
        self.event_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            self.inner.events(id, after, limit).await
        })
    }
}

impl tollgate_agent_core::RunQueue for FailingStore {
    fn claim_queued<'a>(
        &'a self,
        agents: &'a [String],
        limit: u32,
        lease: tollgate_agent_core::Lease,
        now: tollgate_agent_core::Millis,
    ) -> BoxFuture<'a, Result<Vec<tollgate_agent_core::Claimed>, tollgate_agent_core::StoreError>> {
        if self.fail == "claim" {
            return Box::pin(std::future::ready(Err(tollgate_agent_core::StoreError::Database("disk full".into()))));
        }
        self.log(format!("claim {limit}"));
        Box::pin(async move {
            let claimed = self.inner.claim_queued(agents, limit, lease, now).await?;
            self.log(format!("claimed {}", claimed.len()));
            Ok(claimed)
        })
    }

    fn oldest_queued(
        &self,
    ) -> BoxFuture<'_, Result<Option<tollgate_agent_core::Millis>, tollgate_agent_core::StoreError>> {
        self.inner.oldest_queued()
    }
}

impl tollgate_agent_core::Schedules for FailingStore {
    fn due(
        &self,
        now: tollgate_agent_core::Millis,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<tollgate_agent_core::RunRecord>, tollgate_agent_core::StoreError>> {
        self.inner.due(now, limit)
    }

    fn waiting_changed<'a>(
        &'a self,
        from: (tollgate_agent_core::Millis, &'a str),
        until: tollgate_agent_core::Millis,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<tollgate_agent_core::RunRecord>, tollgate_agent_core::StoreError>> {
        self.inner.waiting_changed(from, until, limit)
    }

    fn purge(
        &self,
        terminal_before: tollgate_agent_core::Millis,
        waiting_before: tollgate_agent_core::Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, tollgate_agent_core::StoreError>> {
        self.through_outage(self.inner.purge(terminal_before, waiting_before, batch))
    }
}

impl tollgate_agent_core::StoreHealth for FailingStore {
    fn count_by_status(
        &self,
    ) -> BoxFuture<'_, Result<Vec<(tollgate_agent_core::RunStatus, u64)>, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.count_by_status())
    }

    fn probe_write(&self) -> BoxFuture<'_, Result<(), tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.probe_write())
    }

    fn check_integrity(
        &self,
        depth: tollgate_agent_core::IntegrityCheck,
    ) -> BoxFuture<'_, Result<Vec<String>, tollgate_agent_core::StoreError>> {
        self.inner.check_integrity(depth)
    }
}

impl tollgate_agent_core::ChangeFeed for FailingStore {
    fn tap_commits(&self, tap: &tollgate_agent_core::CommitTap) -> bool {
        self.taps && self.inner.tap_commits(tap)
    }

    fn committed<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<tollgate_agent_core::CommittedPage, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.committed(after, limit))
    }

    fn hold_reader<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        position: Option<&'a str>,
        until: tollgate_agent_core::Millis,
        now: tollgate_agent_core::Millis,
    ) -> BoxFuture<'a, Result<tollgate_agent_core::ReaderHold, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.hold_reader(name, holder, position, until, now))
    }

    fn release_reader<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), tollgate_agent_core::StoreError>> {
        self.inner.release_reader(name, holder)
    }
}

/// Grants: reads fail as the store is broken, writes (made and revoked) while an outage is on; none is
/// logged.
impl tollgate_agent_core::Grants for FailingStore {
    fn create_grant(
        &self,
        grant: tollgate_agent_core::GrantRecord,
    ) -> BoxFuture<'_, Result<tollgate_agent_core::GrantRecord, tollgate_agent_core::StoreError>> {
        self.through_outage(self.inner.create_grant(grant))
    }

    fn grant<'a>(
        &'a self,
        id: &'a tollgate_agent_core::GrantId,
    ) -> BoxFuture<'a, Result<tollgate_agent_core::GrantRecord, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.grant(id))
    }

    fn list_grants(
        &self,
        query: tollgate_agent_core::GrantQuery,
    ) -> BoxFuture<'_, Result<tollgate_agent_core::GrantPage, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.list_grants(query))
    }

    fn revoke_grant<'a>(
        &'a self,
        id: &'a tollgate_agent_core::GrantId,
        actor: &'a tollgate_agent_core::Actor,
        now: tollgate_agent_core::Millis,
    ) -> BoxFuture<'a, Result<tollgate_agent_core::GrantRecord, tollgate_agent_core::StoreError>> {
        self.through_outage(self.inner.revoke_grant(id, actor, now))
    }

    fn grants_version<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<u64, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.grants_version(agent))
    }

    fn active_grants<'a>(
        &'a self,
        agent: &'a str,
        now: tollgate_agent_core::Millis,
    ) -> BoxFuture<'a, Result<Vec<tollgate_agent_core::GrantRecord>, tollgate_agent_core::StoreError>> {
        self.broken_with().unwrap_or_else(|| self.inner.active_grants(agent, now))
    }
}

/// A fresh, unique scratch folder under the system's temp dir (removed by the OS, not by the test).
pub fn scratch_dir(label: &str) -> std::path::PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("tollgate-{label}-{}-{nanos}-{n}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The Python of the venv holding the test tools (PyPI, pinned in `.ci/python/requirements.txt`):
/// `TOLLGATE_TEST_PYTHON`, else `.ci/python/venv/bin/python` of this workspace, if it imports every one of
/// `modules`. `None` (with a note) when it does not outside CI; a panic under CI (env `CI`), which runs
/// these tests.
pub fn test_python(modules: &[&str]) -> Option<std::path::PathBuf> {
    let python = std::env::var_os("TOLLGATE_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/python/venv/bin/python"));
    let ready = std::process::Command::new(&python)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output()
        .is_ok_and(|out| out.status.success());
    if ready {
        return Some(python);
    }
    let note = format!(
        "no Python with {} at {} (./scripts/test installs them: \
         python3 -m venv .ci/python/venv && .ci/python/venv/bin/pip install -r .ci/python/requirements.txt)",
        modules.join(", "),
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{note}; CI runs these tests");
    eprintln!("skipped: {note}");
    None
}

/// The PostgreSQL URL for tests (`TOLLGATE_TEST_POSTGRES_URL`). When it is unset: `None` locally, but a
/// panic under CI (env `CI` set), so a missing database never passes silently there.
pub fn postgres_url() -> Option<String> {
    match std::env::var("TOLLGATE_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TOLLGATE_TEST_POSTGRES_URL must be set in CI (e.g. postgres://postgres@127.0.0.1:5432/test)")
        }
        _ => {
            eprintln!("note: TOLLGATE_TEST_POSTGRES_URL is unset; skipping the PostgreSQL half of this test");
            None
        }
    }
}

/// Stored events with these seqs (kind `model_request`, no data, no hash), for tests of code that keeps
/// or hands on events in seq order.
pub fn stored_events(seqs: std::ops::RangeInclusive<u64>) -> Vec<tollgate_agent_core::StoredEvent> {
    seqs.map(|seq| tollgate_agent_core::StoredEvent {
        seq,
        at: "2026-01-01T00:00:00.000Z".to_owned(),
        kind: tollgate_agent_core::EventKind::ModelRequest,
        round: 1,
        data: Value::Null,
        hash: String::new(),
    })
    .collect()
}

/// The seqs of a page of events, if there is one.
pub fn seqs_of(page: Option<Vec<tollgate_agent_core::StoredEvent>>) -> Option<Vec<u64>> {
    page.map(|events| events.iter().map(|e| e.seq).collect())
}
