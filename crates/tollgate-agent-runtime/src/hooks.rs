//! Persists the loop's progress: events are buffered and committed at the next durable point, and an
//! ask-gated call's `tool_started` is committed before the call runs (the execution ledger), on its
//! own or, for a resume's first call, with the claim of the resume.

use crate::Inner;
use crate::events;
use crate::live::RoundText;
use crate::telemetry::SegmentTrace;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_core::RunId;
use tollgate_agent_core::{
    Actor, BoxFuture, Gate, GrantRecord, GrantStatus, Grants, HookError, LoopEvent, LoopHooks, Millis, ModelDelta,
    NewEvent, RunRecord, RunState, StoreError,
};

/// Whose grants apply at a run's gate: the run's agent's, without those its `forbid_self_approval` bars
/// (a grant made by the actor who started the run, on that run: such a call asks instead).
#[derive(Clone, Debug)]
pub(crate) struct GrantReader {
    agent: String,
    started_by: Actor,
    forbid_self_approval: bool,
    /// `[grants] enabled`: off, no grant is in force.
    enabled: bool,
}

impl GrantReader {
    /// For run `run` of an agent whose rules say `forbid_self_approval`, with grants `enabled` or not.
    pub(crate) fn new(run: &RunRecord, forbid_self_approval: bool, enabled: bool) -> GrantReader {
        GrantReader { agent: run.agent.clone(), started_by: run.created_by.clone(), forbid_self_approval, enabled }
    }

    /// The grants in force for run `run` at `now`, oldest first: the agent's active grants as `cache`
    /// keeps them, without those expired since, of another run, or barred by `forbid_self_approval`.
    pub(crate) async fn read(
        &self,
        cache: &GrantCache,
        grants: &dyn Grants,
        run: &RunId,
        now: Millis,
    ) -> Result<Arc<[GrantRecord]>, StoreError> {
        if !self.enabled {
            return Ok(Arc::from(Vec::new()));
        }
        let active = cache.active(grants, &self.agent, now).await?;
        let usable = |grant: &GrantRecord| {
            grant.status(now) == GrantStatus::Active
                && grant.covers(&self.agent, run)
                && !(self.forbid_self_approval && grant.created_by == self.started_by)
        };
        if active.iter().all(usable) {
            return Ok(active);
        }
        Ok(active.iter().filter(|grant| usable(grant)).cloned().collect::<Vec<_>>().into())
    }
}

/// Each agent's active grants as this process last read them, with the version of the agent's grants
/// they were read under ([`Grants::grants_version`]): a gate check reads the version (one indexed row)
/// and reads and decodes the grants again only when it moved, so a long list of grants costs a gate
/// next to nothing until one is made or revoked, on any node. A revocation committed before a gate
/// check moved the version that check reads, so it is honoured.
#[derive(Default)]
pub(crate) struct GrantCache {
    agents: Mutex<HashMap<String, Kept>>,
}

/// An agent's active grants as read, with the version they were read under.
type Kept = (u64, Arc<[GrantRecord]>);

impl GrantCache {
    /// `agent`'s grants active at `now` (of every scope).
    async fn active(&self, grants: &dyn Grants, agent: &str, now: Millis) -> Result<Arc<[GrantRecord]>, StoreError> {
        // The version first, the grants after: grants read under a version that has moved since are
        // read again at the next check, never taken for a newer version's.
        let version = grants.grants_version(agent).await?;
        if version == 0 {
            return Ok(Arc::from(Vec::new()));
        }
        if let Some((kept, active)) = self.lock().get(agent)
            && *kept == version
        {
            return Ok(Arc::clone(active));
        }
        let active: Arc<[GrantRecord]> = grants.active_grants(agent, now).await?.into();
        let mut agents = self.lock();
        let newer = agents.get(agent).is_none_or(|(kept, _)| *kept <= version);
        if newer {
            agents.insert(agent.to_owned(), (version, Arc::clone(&active)));
        }
        Ok(active)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.agents.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(crate) struct PersistHooks {
    inner: Arc<Inner>,
    run_id: RunId,
    /// Whose grants apply at this run's gate.
    grants: GrantReader,
    state: Mutex<State>,
    /// The live text of the current model call ([`crate::live`]).
    round_text: Mutex<RoundText>,
    /// A model call is under way (between its request and its response).
    in_model_call: AtomicBool,
    /// The grants the segment's last gate check read, for planning the turn they cleared.
    last_grants: Mutex<Option<Arc<[GrantRecord]>>>,
    /// The segment's span, when the run is traced: its model and tool calls are spans in it.
    trace: Option<Arc<SegmentTrace>>,
}

#[derive(Default)]
struct State {
    buffer: Vec<NewEvent>,
    model_calls: u32,
    round: u32,
    /// A run not in the store yet (as created), until its first durable write.
    unborn: Option<RunRecord>,
    /// The segment stopped at a step boundary because this process is shutting down.
    released: bool,
    /// A write of the segment was given up on a store outage (at shutdown): the run is left to its
    /// lease, never failed for it.
    outage: bool,
}

impl PersistHooks {
    pub(crate) fn new(
        inner: Arc<Inner>,
        run: &RunRecord,
        grants: GrantReader,
        unborn: Option<RunRecord>,
        trace: Option<Arc<SegmentTrace>>,
    ) -> Self {
        Self {
            inner,
            run_id: run.id.clone(),
            grants,
            state: Mutex::new(State { unborn, ..State::default() }),
            round_text: Mutex::new(RoundText::default()),
            in_model_call: AtomicBool::new(false),
            last_grants: Mutex::new(None),
            trace,
        }
    }

    /// The run as created, when no durable write has stored it yet.
    pub(crate) fn take_unborn(&self) -> Option<RunRecord> {
        self.lock().unborn.take()
    }

    /// Events not yet committed; they go with the segment's closing transition.
    pub(crate) fn take_buffer(&self) -> Vec<NewEvent> {
        std::mem::take(&mut self.lock().buffer)
    }

    /// Whether the segment stopped because this process is shutting down (the run is to be given back).
    pub(crate) fn released(&self) -> bool {
        self.lock().released
    }

    /// Whether a write of the segment was given up on a store outage.
    pub(crate) fn outage(&self) -> bool {
        self.lock().outage
    }

    /// Whether a model call is under way (between its request and its response): the one step a
    /// segment may be cut in (see `Inner::unless_ended_elsewhere`).
    pub(crate) fn in_model_call(&self) -> bool {
        self.in_model_call.load(Ordering::Acquire)
    }

    /// The grants in force as the segment's last gate check read them: the grants that cleared a turn
    /// held for nobody, which its resume is planned on without reading them again.
    pub(crate) fn last_grants(&self) -> Option<Arc<[GrantRecord]>> {
        self.last_grants.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The last model call seen.
    pub(crate) fn round(&self) -> u32 {
        self.lock().round
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits `events` (creating the run first when it is not stored yet), waiting out a store
    /// outage ([`crate::outage`]) for a stored run; a write that the store refuses otherwise, or that is
    /// given up at shutdown, is the hook's error. Given up on an outage, a stored run is marked so: it is
    /// not failed.
    async fn flush(&self, events: Vec<NewEvent>, unborn: Option<RunRecord>) -> Result<(), HookError> {
        let written = match unborn {
            Some(run) => self.create(run.clone(), events).await.map_err(|e| (e, Some(run))),
            None => self.append(events).await.map_err(|e| (e, None)),
        };
        written.map_err(|(error, unborn)| {
            let mut state = self.lock();
            // Still not stored: the end of the segment stores it.
            match unborn {
                Some(run) => state.unborn = Some(run),
                None => state.outage |= error.is_outage(),
            }
            HookError(error.to_string())
        })
    }

    /// Creates the run as created, with `events` after its `run_started`. Once only, outage or not: the
    /// run was never acknowledged to anyone (its starter waits for this write), so a store that cannot
    /// take it answers the starter at once, who may start it again.
    async fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> Result<(), StoreError> {
        let mut created = run.clone();
        if let RunState::Running { lease, .. } = &mut created.state {
            *lease = self.inner.lease(self.inner.clock.now());
        }
        let all = std::iter::once(events::run_started(&run)).chain(events).collect();
        let created = self.inner.store.rows.create(created, all).await?;
        self.inner.notify_created(&created);
        Ok(())
    }

    /// Appends `events` under this process's lease, renewing it.
    async fn append(&self, events: Vec<NewEvent>) -> Result<(), StoreError> {
        let last_seq = self
            .inner
            .until_stored(&self.run_id, "append", |attempt| {
                let events = events.clone();
                async move {
                    if attempt.retry
                        && let Some(run) = self.inner.stored_already(&self.run_id, &events).await
                    {
                        return Ok(run.last_seq);
                    }
                    let until = self.inner.clock.now() + self.inner.lease_ms;
                    self.inner.store.rows.append(&self.run_id, &self.inner.node, events, until).await
                }
            })
            .await?;
        self.inner.notify_seq(&self.run_id, last_seq);
        Ok(())
    }
}

impl LoopHooks for PersistHooks {
    fn grants_in_force(&self) -> BoxFuture<'_, Result<Arc<[GrantRecord]>, HookError>> {
        Box::pin(async move {
            let now = self.inner.clock.now();
            match self.grants.read(&self.inner.grant_cache, &*self.inner.store.grants, &self.run_id, now).await {
                Ok(grants) => {
                    *self.last_grants.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&grants));
                    Ok(grants)
                }
                // Grants that cannot be read (the store unreachable, a damaged grant row) allow nothing:
                // the calls ask a person, which is always safe, and the run is not failed for it.
                Err(error) => {
                    tracing::warn!(run = %self.run_id, %error, "cannot read the grants in force; the calls ask");
                    Ok(Arc::from(Vec::new()))
                }
            }
        })
    }

    fn on_delta(&self, round: u32, delta: ModelDelta<'_>) {
        let mut round_text = self.round_text.lock().unwrap_or_else(PoisonError::into_inner);
        self.inner.deltas.send(&self.run_id, round, delta, &mut round_text);
    }

    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        if let LoopEvent::ModelResponse { round, .. } = &event {
            // The call answered: what the live text held back (a possible secret's start) goes out now,
            // redacted, so a viewer's text of the round is whole.
            let mut round_text = self.round_text.lock().unwrap_or_else(PoisonError::into_inner);
            self.inner.deltas.finish(&self.run_id, *round, &mut round_text);
        }
        if let Some(trace) = &self.trace {
            match &event {
                LoopEvent::ModelRequest { round, .. } => trace.model_request(*round),
                LoopEvent::ModelResponse { response, .. } => trace.model_response(response),
                LoopEvent::ToolStarted { call_id, tool, arguments, gate, grant, .. } => {
                    trace.tool_started(call_id, tool, arguments, *gate, *grant);
                }
                LoopEvent::ToolFinished { result, .. } => trace.tool_finished(result),
            }
        }
        let now = self.inner.clock.now();
        let mut flush = None;
        let mut unborn = None;
        {
            let mut state = self.lock();
            // Shutting down: stop at this step boundary, before the next model call or tool call (a
            // call whose start was committed with the claim of the resume is under way already, and
            // runs: the loop does not announce its start again).
            let boundary = match &event {
                LoopEvent::ModelRequest { .. } | LoopEvent::ToolStarted { .. } => true,
                LoopEvent::ModelResponse { .. } | LoopEvent::ToolFinished { .. } => false,
            };
            if boundary && (state.released || !self.inner.pool.accepting()) {
                state.released = true;
                return Box::pin(async {
                    Err(HookError("this node is shutting down; the run is given back to the queue".to_owned()))
                });
            }
            match event {
                LoopEvent::ModelRequest { round, messages, tools } => {
                    // The first model call of a segment rides with the segment's next durable write;
                    // later ones commit what the previous rounds did first, so a watcher sees progress.
                    if state.model_calls > 0 && !state.buffer.is_empty() {
                        flush = Some(std::mem::take(&mut state.buffer));
                    }
                    state.model_calls += 1;
                    state.round = round;
                    state.buffer.push(events::model_request(now, round, messages, tools));
                }
                LoopEvent::ModelResponse { round, response } => {
                    self.in_model_call.store(false, Ordering::Release);
                    state.buffer.push(events::model_response(now, round, response));
                }
                LoopEvent::ToolStarted { round, call_id, tool, arguments, gate, grant } => {
                    let starting = events::Starting { call_id, tool, arguments, gate, grant };
                    state.buffer.push(events::tool_started(now, round, &self.run_id, starting));
                    if gate != Gate::Allow {
                        flush = Some(std::mem::take(&mut state.buffer));
                    }
                }
                LoopEvent::ToolFinished { round, result } => {
                    state.buffer.push(events::tool_finished(now, round, result));
                }
            }
            if flush.is_some() {
                unborn = state.unborn.take();
            }
        }
        let starts_call = matches!(event, LoopEvent::ModelRequest { .. });
        Box::pin(async move {
            if let Some(events) = flush {
                self.flush(events, unborn).await?;
            }
            // The call starts once what came before it is stored: a cancel cuts the call, never a write.
            if starts_call {
                self.in_model_call.store(true, Ordering::Release);
            }
            Ok(())
        })
    }
}
