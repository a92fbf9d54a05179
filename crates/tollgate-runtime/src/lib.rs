//! # tollgate-runtime
//!
//! Joins the tool loop ([`tollgate_core::AgentLoop`]) to a [`RunStore`], persisting each step as it
//! happens, and keeps DESIGN.md's exactly-once rule:
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

pub use privacy::PrivacyLevel;
use tollgate_core::Redactor;
mod events;
mod hooks;
pub mod privacy;
mod recovery;
pub mod view;

use hooks::PersistHooks;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};
use tollgate_core::{
    AgentLoop, ChainBreak, Clock, Decision, DecisionError, Decisions, Guard, HeldTurn, IdGen, Lease, LoopError, Millis,
    NewEvent, Outcome, RecordedDecision, RunError, RunPage, RunQuery, RunRecord, RunState, RunStatus, RunStore,
    StartingCall, StoreError, StoredEvent, Suspension, SuspensionError, Transition, TurnDigest, verify_chain,
};

/// What happens to a waiting run when its approval deadline passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    pub gate: tollgate_core::Gate,
    /// Why: `default`, `annotation readOnlyHint`, or the policy rule that decided.
    pub why: String,
}

impl ToolInfo {
    /// Lists a tool with its own gate for empty arguments.
    pub fn of(tool: &dyn tollgate_core::Tool, why: impl Into<String>) -> Self {
        let empty = serde_json::Value::Object(serde_json::Map::new());
        Self {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            parameters: tool.parameters().clone(),
            gate: tool.gate(&empty),
            why: why.into(),
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
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            node_id: format!("node-{}", uuid::Uuid::now_v7()),
            lease: Duration::from_secs(30),
            catalog: Vec::new(),
            privacy: PrivacyLevel::Full,
            redactor: Redactor::default(),
        }
    }
}

/// A change to a run, broadcast in process as it commits.
#[derive(Clone, Debug, PartialEq)]
pub struct RunNotice {
    /// The run.
    pub run_id: String,
    /// Its status after the change.
    pub status: RunStatus,
    /// Its last event's seq after the change.
    pub last_seq: u64,
    /// The run as committed by the change, when the change committed a whole record (an append of
    /// events alone carries none).
    pub run: Option<Arc<RunRecord>>,
}

/// Decisions as a caller sends them.
#[derive(Clone, Debug, PartialEq)]
pub enum DecisionSet {
    /// One decision per named call.
    Each(Vec<(String, Decision)>),
    /// Approve every held call not yet decided.
    ApproveAll,
    /// Deny every held call not yet decided, with a reason.
    DenyAll {
        /// The reason the model is given.
        reason: String,
    },
}

/// Why a runtime operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No agent has this name.
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    /// No run has this id.
    #[error("run {0} not found")]
    NotFound(String),
    /// The request is malformed (HTTP 422).
    #[error("{0}")]
    Invalid(String),
    /// A decision does not fit the held turn (HTTP 422).
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// The run is not in a state that allows this, or someone else acted first (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// The actor may not do this (HTTP 403).
    #[error("{0}")]
    Forbidden(String),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for RuntimeError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => RuntimeError::NotFound(id),
            StoreError::Conflict { detail, .. } => RuntimeError::Conflict(detail),
            StoreError::Transition(t) => RuntimeError::Conflict(t.to_string()),
            other => RuntimeError::Store(other),
        }
    }
}

/// UUIDv7 run ids.
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidV7Ids;

impl IdGen for UuidV7Ids {
    fn run_id(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }
}

/// The durable runtime. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn RunStore>,
    agents: Vec<Arc<AgentSpec>>,
    pub(crate) clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    pub(crate) node: String,
    pub(crate) lease_ms: i64,
    notices: broadcast::Sender<RunNotice>,
    in_flight: Mutex<HashSet<String>>,
    idle: Notify,
    catalog: Vec<ToolInfo>,
}

/// Where a drive left its run (or why it could not store it), for the one waiting on it.
pub(crate) type Settled = tokio::sync::oneshot::Sender<Result<RunRecord, RuntimeError>>;

/// A run this process is driving, from [`InFlight::enter`] until dropped: its lease is renewed, and
/// [`Runtime::drain`] waits for it.
pub(crate) struct InFlight {
    inner: Arc<Inner>,
    id: String,
}

impl InFlight {
    pub(crate) fn enter(inner: &Arc<Inner>, id: &str) -> Self {
        inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned());
        Self { inner: Arc::clone(inner), id: id.to_owned() }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = self.inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        in_flight.remove(&self.id);
        if in_flight.is_empty() {
            self.inner.idle.notify_waiters();
        }
    }
}

/// What a drive does: start a stored run from its input, start a run not stored yet (created by its
/// first durable write, see [`Runtime::start_and_wait`]), or resume a held turn.
#[expect(clippy::large_enum_variant, reason = "one per drive, moved once into its task")]
pub(crate) enum Work {
    Start,
    Create,
    /// `started`: the call whose `tool_started` was committed with the claim.
    Resume {
        suspension: Suspension,
        decisions: Decisions,
        started: Option<StartingCall>,
    },
}

const DECIDE_ATTEMPTS: usize = 8;
const SYSTEM_ACTOR: &str = "system";
const EXPIRY_REASON: &str = "approval deadline passed";

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
        Self {
            inner: Arc::new(Inner {
                store: privacy::filtered(store, options.privacy, options.redactor),
                agents: agents.into_iter().map(Arc::new).collect(),
                clock,
                ids,
                node: options.node_id,
                lease_ms,
                notices,
                in_flight: Mutex::new(HashSet::new()),
                idle: Notify::new(),
                catalog: options.catalog,
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
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

    /// Every tool this process knows, with its own default gate.
    pub fn catalog(&self) -> &[ToolInfo] {
        &self.inner.catalog
    }

    /// Live notices of run changes committed by this process.
    pub fn subscribe(&self) -> broadcast::Receiver<RunNotice> {
        self.inner.notices.subscribe()
    }

    /// Starts a run and drives it in the background; returns it as created (`running`).
    pub async fn start(&self, agent: Option<&str>, input: &str, actor: &str) -> Result<RunRecord, RuntimeError> {
        let (run, spec) = self.new_run(agent, input, actor)?;
        let started = events::run_started(&run);
        let run = self.inner.store.create(run, vec![started]).await?;
        self.inner.notify(&run);
        self.inner.spawn_drive(run.clone(), spec, Work::Start, None);
        Ok(run)
    }

    /// Starts a run and answers once it waits for approval or has ended.
    ///
    /// Until then only the caller, who is waiting, knows of the run, so it is not committed on its own:
    /// its creation rides with its first durable write (the held turn, the end, or the progress committed
    /// before a second model call), one commit less. Should the process die before that, no run is left
    /// behind and the caller's request fails; nothing was promised to anyone.
    pub async fn start_and_wait(
        &self,
        agent: Option<&str>,
        input: &str,
        actor: &str,
    ) -> Result<RunRecord, RuntimeError> {
        let (run, spec) = self.new_run(agent, input, actor)?;
        let id = run.id.clone();
        // Driven in a task of its own (so that many runs started at once from one task still run side by
        // side and commit together), which answers here.
        let (done, driven) = tokio::sync::oneshot::channel();
        self.inner.spawn_drive(run, spec, Work::Create, Some(done));
        match driven.await {
            Ok(Ok(run)) => Ok(run),
            // Stored, then changed hands (cancelled, or taken over): wait on the stored run.
            Ok(Err(RuntimeError::Conflict(_))) | Err(_) => self.wait_settled(&id).await,
            Ok(Err(error)) => Err(error),
        }
    }

    /// A new run of an agent, as created (`running` under this process's lease), not stored yet.
    fn new_run(
        &self,
        agent: Option<&str>,
        input: &str,
        actor: &str,
    ) -> Result<(RunRecord, Arc<AgentSpec>), RuntimeError> {
        if input.trim().is_empty() {
            return Err(RuntimeError::Invalid("input must be a non-empty string".into()));
        }
        let spec = match agent {
            Some(name) => self.inner.agent(name).ok_or_else(|| RuntimeError::UnknownAgent(name.to_owned()))?,
            None => self.inner.agents.first().cloned().ok_or_else(|| RuntimeError::UnknownAgent("(none)".into()))?,
        };
        let now = self.inner.clock.now();
        let run = RunRecord::new(
            self.inner.ids.run_id(),
            spec.name.clone(),
            input.to_owned(),
            actor.to_owned(),
            now,
            Some(self.inner.lease(now)),
        );
        Ok((run, spec))
    }

    /// Waits until a run waits for approval or has ended. A notice that carries a settled record newer
    /// than the last state read answers without another read; any other settled notice, a lag, or a
    /// quiet half second reads the run again (another process may drive it).
    pub async fn wait_settled(&self, id: &str) -> Result<RunRecord, RuntimeError> {
        let mut notices = self.subscribe();
        let mut run = self.get(id).await?;
        loop {
            if settled(run.status()) {
                return Ok(run);
            }
            let version = run.version;
            let wait = async {
                loop {
                    match notices.recv().await {
                        Ok(notice) if notice.run_id == id && settled(notice.status) => {
                            return notice.run.filter(|r| r.version > version);
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => return None,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            };
            run = match tokio::time::timeout(Duration::from_millis(500), wait).await {
                Ok(Some(committed)) => Arc::unwrap_or_clone(committed),
                _ => self.get(id).await?,
            };
        }
    }

    /// Reads a run.
    pub async fn get(&self, id: &str) -> Result<RunRecord, RuntimeError> {
        Ok(self.inner.store.get(id).await?)
    }

    /// Resolves a unique id prefix to a full id.
    pub async fn resolve(&self, prefix: &str) -> Result<String, RuntimeError> {
        match self.inner.store.resolve_prefix(prefix).await {
            Ok(id) => Ok(id),
            Err(StoreError::NotFound(_)) => Err(RuntimeError::NotFound(prefix.to_owned())),
            Err(StoreError::Conflict { detail, .. }) => Err(RuntimeError::Invalid(detail)),
            Err(other) => Err(RuntimeError::Store(other)),
        }
    }

    /// Lists runs, newest first.
    pub async fn list(&self, query: RunQuery) -> Result<RunPage, RuntimeError> {
        Ok(self.inner.store.list(query).await?)
    }

    /// How many runs have each status, every status listed (zero where none).
    pub async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, RuntimeError> {
        let counted = self.inner.store.count_by_status().await?;
        Ok(RunStatus::ALL
            .iter()
            .map(|status| (*status, counted.iter().find(|(s, _)| s == status).map_or(0, |(_, n)| *n)))
            .collect())
    }

    /// A run's events after `after`.
    pub async fn events(&self, id: &str, after: u64, limit: u32) -> Result<Vec<StoredEvent>, RuntimeError> {
        self.inner.store.get(id).await?;
        Ok(self.inner.store.events(id, after, limit).await?)
    }

    /// Checks a run's hash chain: `Ok(Err(break))` names the first bad event.
    pub async fn verify(&self, id: &str) -> Result<Result<u64, ChainBreak>, RuntimeError> {
        let run = self.inner.store.get(id).await?;
        let mut all = Vec::new();
        loop {
            let page = self.inner.store.events(id, all.len() as u64, 1000).await?;
            let done = page.len() < 1000;
            all.extend(page);
            if done {
                break;
            }
        }
        Ok(verify_chain(&all, run.last_seq, &run.last_hash).map(|()| run.last_seq))
    }

    /// Records decisions for a waiting run. The request whose decisions complete the held turn's set
    /// resumes the run (in the background); the answer is the run after the decisions were recorded.
    pub async fn decide(
        &self,
        id: &str,
        turn_digest: &str,
        set: DecisionSet,
        actor: &str,
    ) -> Result<RunRecord, RuntimeError> {
        self.decide_from(None, id, turn_digest, set, actor, &mut None).await
    }

    /// Records decisions on a run the caller has just loaded, starting from that record (no second read
    /// while it is current; if it is not, or is refused, the run is read again and decided on as stored),
    /// and, when they resume the run, answers once it waits again or has ended. Otherwise answers as
    /// [`decide`](Self::decide) does.
    pub async fn decide_and_wait(
        &self,
        loaded: &RunRecord,
        turn_digest: &str,
        set: DecisionSet,
        actor: &str,
    ) -> Result<RunRecord, RuntimeError> {
        let (done, driven) = tokio::sync::oneshot::channel();
        let mut waiter = Some(done);
        let decided = self.decide_from(Some(loaded), &loaded.id, turn_digest, set, actor, &mut waiter).await?;
        if decided.status() != RunStatus::Running {
            return Ok(decided);
        }
        if waiter.is_none() {
            // This request resumed the run: the drive it started answers with where the run settled.
            match driven.await {
                Ok(Ok(settled_run)) => return Ok(settled_run),
                Ok(Err(RuntimeError::Conflict(_))) | Err(_) => {}
                Ok(Err(error)) => return Err(error),
            }
        }
        // Resumed by another request, or the drive lost the run to another process: wait on the store.
        self.wait_settled(&loaded.id).await
    }

    /// `waiter`, if any, is handed to the drive when these decisions resume the run.
    async fn decide_from(
        &self,
        loaded: Option<&RunRecord>,
        id: &str,
        turn_digest: &str,
        set: DecisionSet,
        actor: &str,
        waiter: &mut Option<Settled>,
    ) -> Result<RunRecord, RuntimeError> {
        if let DecisionSet::Each(list) = &set {
            if list.is_empty() {
                return Err(RuntimeError::Invalid("decisions must not be empty".into()));
            }
            let mut seen = HashSet::new();
            if let Some((dup, _)) = list.iter().find(|(id, _)| !seen.insert(id.as_str())) {
                return Err(RuntimeError::Invalid(format!("call `{dup}` is decided twice in one request")));
            }
        }
        if let Some(run) = loaded
            && let Ok(decided) = self.try_decide(run, turn_digest, &set, actor, waiter).await
        {
            return Ok(decided);
        }
        for _ in 0..DECIDE_ATTEMPTS {
            let run = self.inner.store.get(id).await?;
            match self.try_decide(&run, turn_digest, &set, actor, waiter).await {
                Err(RuntimeError::Store(StoreError::Conflict { .. })) => continue,
                Err(RuntimeError::Conflict(detail)) if detail == RACE => continue,
                other => return other,
            }
        }
        Err(RuntimeError::Conflict("the run kept changing while deciding; try again".into()))
    }

    async fn try_decide(
        &self,
        run: &RunRecord,
        turn_digest: &str,
        set: &DecisionSet,
        actor: &str,
        waiter: &mut Option<Settled>,
    ) -> Result<RunRecord, RuntimeError> {
        let RunState::Waiting(pending) = &run.state else {
            return Err(RuntimeError::Conflict(format!(
                "run {} is {}, not waiting for approval",
                run.id,
                run.status()
            )));
        };
        let spec = self.inner.agent(&run.agent).ok_or_else(|| RuntimeError::UnknownAgent(run.agent.clone()))?;
        if spec.forbid_self_approval && actor == run.created_by {
            return Err(RuntimeError::Forbidden(format!(
                "agent {} forbids self-approval: {actor} started this run and cannot decide its calls",
                spec.name
            )));
        }
        if pending.turn_digest.as_str() != turn_digest {
            return Err(RuntimeError::Conflict(format!(
                "stale turn_digest: the held turn is now {}",
                pending.turn_digest
            )));
        }
        let suspension = match pending.suspension.parse() {
            Ok(s) => s,
            Err(e) => {
                self.inner.fail_corrupt(run, &e.to_string()).await;
                return Err(RuntimeError::Conflict(format!("run {} failed: {e}", run.id)));
            }
        };
        let undecided =
            || pending.required.iter().filter(|c| !pending.decisions.contains_key(*c)).cloned().collect::<Vec<_>>();
        let wanted: Vec<(String, Decision)> = match set {
            DecisionSet::Each(list) => list.clone(),
            DecisionSet::ApproveAll => undecided().into_iter().map(|c| (c, Decision::Approve)).collect(),
            DecisionSet::DenyAll { reason } => {
                undecided().into_iter().map(|c| (c, Decision::Deny { reason: reason.clone() })).collect()
            }
        };
        if wanted.is_empty() {
            return Err(RuntimeError::Conflict("every held call is already decided".into()));
        }
        for (call_id, decision) in &wanted {
            spec.agent_loop.check_decision(&suspension, call_id, decision).await?;
            if pending.decisions.contains_key(call_id) {
                return Err(RuntimeError::Conflict(format!("call `{call_id}` is already decided")));
            }
        }
        let now = self.inner.clock.now();
        let recorded: Vec<(String, RecordedDecision)> = wanted
            .into_iter()
            .map(|(call_id, decision)| (call_id, RecordedDecision { decision, actor: actor.to_owned(), at: now }))
            .collect();
        let mut events: Vec<NewEvent> =
            recorded.iter().map(|(id, d)| events::decision(now, suspension.round, id, d)).collect();
        let completes = pending
            .required
            .iter()
            .all(|c| pending.decisions.contains_key(c) || recorded.iter().any(|(id, _)| id == c));
        let resume = completes.then(|| self.inner.lease(now));
        // The resume's first call, when a person decided it and nothing runs before it, has its
        // `tool_started` committed with the claim: one commit less between the decision and the call.
        let mut started_with_claim = None;
        if completes {
            events.push(events::run_resumed(now, suspension.round, actor));
            let all: Decisions = pending
                .decisions
                .iter()
                .map(|(id, d)| (id.clone(), d.decision.clone()))
                .chain(recorded.iter().map(|(id, d)| (id.clone(), d.decision.clone())))
                .collect();
            if let Some(call) = spec.agent_loop.first_decided_call(&suspension, &all) {
                events.push(events::tool_started(
                    now,
                    suspension.round,
                    &run.id,
                    &call.call_id,
                    &call.tool,
                    &call.arguments,
                    call.gate,
                ));
                started_with_claim = Some(call);
            }
        }
        let transition = Transition::Decide { decisions: recorded, resume };
        let next =
            match self.inner.store.transition(&run.id, Guard::Version(run.version), transition, events, now).await {
                Ok(next) => next,
                Err(StoreError::Conflict { .. }) => return Err(RuntimeError::Conflict(RACE.into())),
                Err(other) => return Err(other.into()),
            };
        self.inner.notify(&next);
        if completes {
            let decisions = decisions_for(&suspension, next.held_turn());
            self.inner.spawn_drive(
                next.clone(),
                spec_arc(&self.inner, &run.agent)?,
                Work::Resume { suspension, decisions, started: started_with_claim },
                waiter.take(),
            );
        }
        Ok(next)
    }

    /// Cancels a run that has not finished.
    pub async fn cancel(&self, id: &str, actor: &str, reason: Option<&str>) -> Result<RunRecord, RuntimeError> {
        for _ in 0..DECIDE_ATTEMPTS {
            let run = self.inner.store.get(id).await?;
            if run.status().is_terminal() {
                return Err(RuntimeError::Conflict(format!("run {} is already {}", run.id, run.status())));
            }
            let now = self.inner.clock.now();
            let event = events::run_cancelled(now, run.iterations, actor, reason);
            match self
                .inner
                .store
                .transition(id, Guard::Version(run.version), Transition::Cancel, vec![event], now)
                .await
            {
                Ok(next) => {
                    self.inner.notify(&next);
                    return Ok(next);
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(other) => return Err(other.into()),
            }
        }
        Err(RuntimeError::Conflict("the run kept changing while cancelling; try again".into()))
    }

    /// Deletes terminal runs finished before `terminal_before` and waiting runs untouched since
    /// `waiting_before`, in batches. Returns how many went.
    pub async fn purge(&self, terminal_before: Millis, waiting_before: Millis) -> Result<u64, RuntimeError> {
        let mut total = 0;
        loop {
            let n = self.inner.store.purge(terminal_before, waiting_before, 500).await?;
            total += n;
            if n < 500 {
                return Ok(total);
            }
        }
    }

    /// Applies due deadlines (`on_expiry`) and takes over runs whose lease expired. Returns how many runs
    /// it acted on. A server calls it every second; CLI commands call it when they open the store.
    pub async fn sweep(&self) -> Result<usize, RuntimeError> {
        let now = self.inner.clock.now();
        let due = self.inner.store.due(now, 100).await?;
        let mut acted = 0;
        for run in due {
            let result = match run.status() {
                RunStatus::WaitingForApproval => self.expire(&run).await,
                RunStatus::Running => recovery::take_over(self, &run).await,
                _ => Ok(()),
            };
            match result {
                Ok(()) => acted += 1,
                Err(RuntimeError::Conflict(_)) => {}
                Err(e) => tracing::warn!(run = %run.id, error = %e, "sweep could not act on a due run"),
            }
        }
        Ok(acted)
    }

    async fn expire(&self, run: &RunRecord) -> Result<(), RuntimeError> {
        let spec = self.inner.agent(&run.agent).ok_or_else(|| RuntimeError::UnknownAgent(run.agent.clone()))?;
        let Some(pending) = run.held_turn() else { return Ok(()) };
        match spec.on_expiry {
            OnExpiry::Deny => {
                self.decide(
                    &run.id,
                    pending.turn_digest.as_str(),
                    DecisionSet::DenyAll { reason: EXPIRY_REASON.into() },
                    SYSTEM_ACTOR,
                )
                .await?;
            }
            OnExpiry::Cancel => {
                let now = self.inner.clock.now();
                let deadline = pending.expires_at.unwrap_or(now);
                let event = events::run_expired(now, run.iterations, deadline);
                let next = self
                    .inner
                    .store
                    .transition(&run.id, Guard::Version(run.version), Transition::Expire, vec![event], now)
                    .await?;
                self.inner.notify(&next);
            }
        }
        Ok(())
    }

    /// Renews the leases of the runs this process drives. Call it every third of the lease.
    pub async fn renew_leases(&self) {
        let ids: Vec<String> =
            self.inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
        for id in ids {
            let until = self.inner.clock.now() + self.inner.lease_ms;
            if let Err(e) = self.inner.store.append(&id, &self.inner.node, Vec::new(), until).await {
                tracing::debug!(run = %id, error = %e, "lease not renewed");
            }
        }
    }

    /// Runs [`sweep`](Self::sweep) every second and [`renew_leases`](Self::renew_leases) every third of
    /// the lease, until the returned handle is dropped or aborted.
    pub fn spawn_background(&self) -> tokio::task::JoinHandle<()> {
        let runtime = self.clone();
        let renew_every = Duration::from_millis((self.inner.lease_ms / 3).max(100) as u64);
        tokio::spawn(async move {
            let mut sweep = tokio::time::interval(Duration::from_secs(1));
            let mut renew = tokio::time::interval(renew_every);
            loop {
                tokio::select! {
                    _ = sweep.tick() => {
                        if let Err(e) = runtime.sweep().await {
                            tracing::warn!(error = %e, "sweep failed");
                        }
                    }
                    _ = renew.tick() => runtime.renew_leases().await,
                }
            }
        })
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
}

const RACE: &str = "lost a race with another decision";

fn settled(status: RunStatus) -> bool {
    status == RunStatus::WaitingForApproval || status.is_terminal()
}

fn spec_arc(inner: &Inner, name: &str) -> Result<Arc<AgentSpec>, RuntimeError> {
    inner.agent(name).ok_or_else(|| RuntimeError::UnknownAgent(name.to_owned()))
}

/// The decisions a resume needs: those recorded for the calls that still take one.
pub(crate) fn decisions_for(suspension: &Suspension, pending: Option<&HeldTurn>) -> Decisions {
    let Some(pending) = pending else { return BTreeMap::new() };
    suspension
        .decidable_calls()
        .filter_map(|c| pending.decisions.get(&c.call_id).map(|d| (c.call_id.clone(), d.decision.clone())))
        .collect()
}

impl Inner {
    fn agent(&self, name: &str) -> Option<Arc<AgentSpec>> {
        self.agents.iter().find(|a| a.name == name).cloned()
    }

    pub(crate) fn lease(&self, now: Millis) -> Lease {
        Lease { owner: self.node.clone(), expires_at: now + self.lease_ms }
    }

    pub(crate) fn notify(&self, run: &RunRecord) {
        if self.notices.receiver_count() == 0 {
            return;
        }
        let _ = self.notices.send(RunNotice {
            run_id: run.id.clone(),
            status: run.status(),
            last_seq: run.last_seq,
            run: Some(Arc::new(run.clone())),
        });
    }

    pub(crate) fn notify_seq(&self, run_id: &str, last_seq: u64) {
        let _ =
            self.notices.send(RunNotice { run_id: run_id.to_owned(), status: RunStatus::Running, last_seq, run: None });
    }

    /// Drives a run in a task of its own until its next durable state; where it got to goes to
    /// `waiter`, if any.
    pub(crate) fn spawn_drive(
        self: &Arc<Self>,
        run: RunRecord,
        spec: Arc<AgentSpec>,
        work: Work,
        waiter: Option<Settled>,
    ) {
        let driving = InFlight::enter(self, &run.id);
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            let result = inner.drive(run, spec, work).await;
            if let Some(waiter) = waiter {
                let _ = waiter.send(result);
            }
            drop(driving);
        });
    }

    /// Runs the loop for one segment and commits where it ended; answers the run as committed.
    async fn drive(
        self: &Arc<Self>,
        run: RunRecord,
        spec: Arc<AgentSpec>,
        mut work: Work,
    ) -> Result<RunRecord, RuntimeError> {
        let started = match &mut work {
            Work::Start | Work::Create => None,
            Work::Resume { started, .. } => started.take(),
        };
        let unborn = matches!(work, Work::Create).then(|| run.clone());
        let hooks = PersistHooks::new(Arc::clone(self), run.id.clone(), started, unborn);
        let outcome = match work {
            Work::Start | Work::Create => spec.agent_loop.start(&run.id, &run.input, &hooks).await,
            Work::Resume { suspension, decisions, .. } => {
                spec.agent_loop.resume(&run.id, suspension, &decisions, &hooks).await
            }
        };
        let now = self.clock.now();
        let mut events = hooks.take_buffer();
        let transition = match outcome {
            Ok(Outcome::Completed(done)) => {
                // The round of the last model call: at the iteration cap that is the closing completion
                // (max_iterations + 1), which the iteration counter does not count.
                let round = hooks.round().max(done.counters.iterations);
                events.push(events::run_completed(now, round, done.output.as_deref(), done.reason.as_str()));
                Transition::Complete {
                    output: done.output,
                    reason: done.reason,
                    iterations: done.counters.iterations,
                    usage: done.counters.usage,
                }
            }
            Ok(Outcome::Suspended(suspension)) => {
                let expires_at = spec.approval_ttl.map(|ttl| now + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
                match suspend_transition(&suspension, BTreeMap::new(), expires_at) {
                    Ok(transition) => {
                        events.push(events::approval_requested(now, &suspension, expires_at));
                        transition
                    }
                    Err(error) => {
                        // Never reported as waiting on a turn that was not stored.
                        let error = RunError { kind: "unstorable_suspension".into(), message: error.to_string() };
                        events.push(events::run_failed(now, hooks.round(), &error));
                        Transition::Fail { error }
                    }
                }
            }
            Err(error) => {
                let error = match &error {
                    LoopError::Model { source, .. } => {
                        RunError { kind: source.kind().to_owned(), message: error.to_string() }
                    }
                    LoopError::Decision(e) => RunError { kind: e.kind().to_owned(), message: e.to_string() },
                    LoopError::Hook(e) => RunError { kind: "store".into(), message: e.to_string() },
                };
                events.push(events::run_failed(now, hooks.round(), &error));
                Transition::Fail { error }
            }
        };
        let unborn = hooks.take_unborn();
        let error = match self.commit_end(&run.id, unborn.as_ref(), transition, events, now).await {
            Ok(next) => {
                self.notify(&next);
                return Ok(next);
            }
            Err(StoreError::Conflict { detail, .. }) => {
                // Cancelled meanwhile, or another process took the run over: it owns the run now.
                tracing::info!(run = %run.id, %detail, "run changed hands while driving; stopping");
                return Err(RuntimeError::Conflict(detail));
            }
            Err(error) => error,
        };
        tracing::error!(run = %run.id, %error, "could not commit the end of a segment; failing the run");
        let failure =
            RunError { kind: "store".into(), message: format!("the run's progress could not be stored: {error}") };
        let event = events::run_failed(now, hooks.round(), &failure);
        match self.commit_end(&run.id, unborn.as_ref(), Transition::Fail { error: failure }, vec![event], now).await {
            Ok(next) => {
                self.notify(&next);
                Ok(next)
            }
            Err(e) => {
                tracing::error!(run = %run.id, error = %e, "could not fail the run either; its lease will expire and another process will recover it");
                Err(RuntimeError::Store(error))
            }
        }
    }

    /// Commits the end of a segment under this process's lease; a run not stored yet (as created) is
    /// created as it ends, its `run_started` first.
    async fn commit_end(
        &self,
        id: &str,
        unborn: Option<&RunRecord>,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<RunRecord, StoreError> {
        let Some(created) = unborn else {
            return self.store.transition(id, Guard::Lease(self.node.clone()), transition, events, now).await;
        };
        let ended = created.apply(&transition, now).map_err(StoreError::Transition)?;
        self.store.create(ended, std::iter::once(events::run_started(created)).chain(events).collect()).await
    }

    /// Fails a run whose stored state cannot be read, leaving every other run alone.
    pub(crate) async fn fail_corrupt(&self, run: &RunRecord, detail: &str) {
        let now = self.clock.now();
        let error = RunError { kind: "corrupt_suspension".into(), message: detail.to_owned() };
        let event = events::run_failed(now, run.iterations, &error);
        match self
            .store
            .transition(&run.id, Guard::Version(run.version), Transition::Fail { error }, vec![event], now)
            .await
        {
            Ok(next) => self.notify(&next),
            Err(e) => tracing::warn!(run = %run.id, error = %e, "could not fail a run with a corrupt suspension"),
        }
    }
}

/// The transition that stores a suspension as the run's held turn, or why it cannot be stored.
pub(crate) fn suspend_transition(
    suspension: &Suspension,
    decisions: BTreeMap<String, RecordedDecision>,
    expires_at: Option<Millis>,
) -> Result<Transition, SuspensionError> {
    let held = HeldTurn {
        suspension: suspension.to_stored()?,
        turn_digest: TurnDigest(suspension.turn_digest.0.clone()),
        required: suspension.decidable_calls().map(|c| c.call_id.clone()).collect(),
        decisions,
        expires_at,
    };
    Ok(Transition::Suspend { held, iterations: suspension.counters.iterations, usage: suspension.counters.usage })
}
