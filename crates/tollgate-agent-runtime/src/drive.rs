//! Driving a segment: from a start (a stored run, or one created by its first durable write) or a
//! resume, through the loop with its persisting hooks ([`crate::hooks`]), to the commit of where the
//! segment ended — completed, failed, or suspended at the gate.
//!
//! What it promises: every drive runs in a task of its own under this process's lease, registered in
//! flight (so its lease is renewed and [`Runtime::drain`](crate::Runtime::drain) waits for it); a
//! suspension that cannot be stored fails the run visibly, never reported as waiting; when the end of a
//! segment cannot be stored, the run is failed (`store`), and when even that cannot be stored its lease
//! expires and another process recovers it.

use crate::error::{DriveError, StartError};
use crate::hooks::{GrantReader, PersistHooks};
use crate::telemetry::{SegmentKind, SegmentTrace};
use crate::workers::Slot;
use crate::{AgentSpec, Inner, StartRun, events};
use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::task::Poll;
use tollgate_agent_core::{
    Approval, ApprovalId, BoxFuture, Conflict, Decisions, Guard, HeldCall, HeldTurn, LoopError, Metadata, Millis,
    NewEvent, Outcome, ResumePlan, RunError, RunErrorKind, RunRecord, RunStatus, StoreError, Suspension,
    SuspensionError, Transition, TurnDigest,
};
use tollgate_agent_core::{LoopHooks, RunId};

/// How often a model call under way looks whether its run ended elsewhere, while the store does not
/// announce other processes' commits (SQLite: the CLI may cancel a run a server drives).
const ENDED_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a drive left its run (or why it could not store it), for the one waiting on it.
pub(crate) type Settled = tokio::sync::oneshot::Sender<Result<RunRecord, DriveError>>;

/// A run this process is driving, from [`InFlight::enter`] until dropped: its lease is renewed,
/// [`Runtime::drain`](crate::Runtime::drain) waits for it, and it holds one worker of the pool.
pub(crate) struct InFlight {
    inner: Arc<Inner>,
    id: RunId,
    /// Given back first when dropped, so that a drain that returns finds the worker free.
    slot: Option<Slot>,
}

impl InFlight {
    pub(crate) fn enter(inner: &Arc<Inner>, id: &RunId, slot: Slot) -> Self {
        inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned());
        Self { inner: Arc::clone(inner), id: id.to_owned(), slot: Some(slot) }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        drop(self.slot.take());
        let mut in_flight = self.inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        in_flight.remove(&self.id);
        if in_flight.is_empty() {
            self.inner.idle.notify_waiters();
        }
    }
}

/// What a drive does: start a stored run from its input, start a run not stored yet (created by its
/// first durable write, see [`Runtime::start_and_wait`](crate::Runtime::start_and_wait)), or resume a
/// held turn.
#[expect(clippy::large_enum_variant, reason = "one per drive, moved once into its task")]
pub(crate) enum Work {
    Start,
    Create,
    /// `plan`: the resume as the deciding request planned it when it claimed the resume (its first
    /// call's `tool_started` committed with the claim), executed as it is; `None` for a run claimed from
    /// the queue or recovered after a crash, whose resume is planned here, once, from the decisions its
    /// approvals settled on.
    Resume {
        suspension: Suspension,
        plan: Option<ResumePlan>,
    },
}

/// The decisions a resume needs: those its approvals settled on, for the calls that still take one.
pub(crate) fn decisions_for(suspension: &Suspension, pending: Option<&HeldTurn>) -> Decisions {
    let Some(pending) = pending else { return BTreeMap::new() };
    let mut decided = pending.decisions();
    decided.retain(|id, _| suspension.call(id).is_some_and(HeldCall::takes_decision));
    decided
}

/// The transition that stores a suspension as the run `run_id`'s held turn at `now`, with its
/// `approval_requested` event, or why it cannot be stored: one approval per call that takes a decision,
/// under the call's requirement — `kept`'s approval of that call when there is one (recovery keeps what
/// people decided on calls that never started), else a new pending one.
pub(crate) fn suspend_transition(
    run_id: &RunId,
    suspension: &Suspension,
    mut kept: Vec<Approval>,
    expires_at: Option<Millis>,
    now: Millis,
) -> Result<(Transition, NewEvent), SuspensionError> {
    let approvals = suspension
        .decidable_calls()
        .map(|call| match kept.iter().position(|a| a.call_id == call.call_id) {
            Some(at) => kept.swap_remove(at),
            None => {
                let id = ApprovalId::new(uuid::Uuid::now_v7().to_string());
                Approval::pending(id, run_id, call.call_id.clone(), call.requirement, expires_at)
            }
        })
        .collect();
    let held = HeldTurn {
        suspension: suspension.to_stored()?,
        turn_digest: TurnDigest(suspension.turn_digest.0.clone()),
        approvals,
        expires_at,
    };
    let requested = events::approval_requested(now, suspension, &held);
    let (iterations, usage) = (suspension.counters.iterations, suspension.counters.usage);
    Ok((Transition::Suspend { held, iterations, usage }, requested))
}

impl Inner {
    /// A new run of an agent (the default agent when `agent` is `None`), as created — `running` under
    /// this process's lease when `leased`, else `queued` — not stored yet.
    pub(crate) fn new_run(
        &self,
        request: StartRun<'_>,
        leased: bool,
    ) -> Result<(RunRecord, Arc<AgentSpec>), StartError> {
        let StartRun { agent, input, actor, metadata, trace_parent } = request;
        if input.trim().is_empty() {
            return Err(StartError::EmptyInput);
        }
        let metadata = Metadata::from_map(metadata)?;
        let spec = match agent {
            Some(name) => self.agent(name).ok_or_else(|| StartError::UnknownAgent(name.to_owned()))?,
            None => self.agents.first().cloned().ok_or_else(|| StartError::UnknownAgent("(none)".into()))?,
        };
        let now = self.clock.now();
        let run = RunRecord::new(
            self.ids.run_id(),
            spec.name.clone(),
            input.to_owned(),
            actor,
            now,
            leased.then(|| self.lease(now)),
        )
        .with_metadata(metadata)
        .with_trace(self.tracing.as_ref().map(|tracing| tracing.new_trace(trace_parent)));
        Ok((run, spec))
    }

    /// Drives a run in a task of its own until its next durable state; where it got to goes to
    /// `waiter`, if any.
    pub(crate) fn spawn_drive(
        self: &Arc<Self>,
        run: RunRecord,
        spec: Arc<AgentSpec>,
        work: Work,
        waiter: Option<Settled>,
        slot: Slot,
    ) {
        let driving = InFlight::enter(self, &run.id, slot);
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            let result = inner.drive(run, spec, work).await;
            if let Some(waiter) = waiter {
                let _ = waiter.send(result);
            }
            drop(driving);
        });
    }

    /// Runs `segment`, unless the run ends elsewhere (cancelled, expired: a notice, or while the store
    /// announces nothing a read each [`ENDED_RECHECK`]) while a model call is under way: then the segment
    /// is dropped, which aborts the call's request (a streamed answer stops at once), and the answer is
    /// the status the run ended with. A tool under way is never cut: its segment goes on to its next
    /// write, which finds the run changed hands, as any segment does.
    ///
    /// Nothing is listened to unless a model call is still under way when the segment waits: the flag
    /// is read after each poll of the segment, so a model that answers at once (the scripted one) costs
    /// one load and no wake-up.
    async fn unless_ended_elsewhere<F>(
        &self,
        id: &RunId,
        hooks: &PersistHooks,
        segment: F,
    ) -> Result<Result<Outcome, LoopError>, RunStatus>
    where
        F: std::future::Future<Output = Result<Outcome, LoopError>>,
    {
        let mut segment = std::pin::pin!(segment);
        let mut watching: Option<BoxFuture<'_, RunStatus>> = None;
        std::future::poll_fn(|cx| {
            if let Poll::Ready(outcome) = segment.as_mut().poll(cx) {
                return Poll::Ready(Ok(outcome));
            }
            if !hooks.in_model_call() {
                // No call under way (or it answered): nothing to watch.
                watching = None;
                return Poll::Pending;
            }
            let watch = watching.get_or_insert_with(|| Box::pin(self.ended_during_call(id)));
            match watch.as_mut().poll(cx) {
                Poll::Ready(status) => Poll::Ready(Err(status)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// Answers once run `id` has ended (from a notice, or a read after a resync, a lag, or each
    /// [`ENDED_RECHECK`] while the store announces nothing); never otherwise.
    async fn ended_during_call(&self, id: &RunId) -> RunStatus {
        let mut notices = self.notices.subscribe();
        let poll = self.announced_poll(ENDED_RECHECK);
        loop {
            let recheck = async {
                match poll {
                    Some(every) => tokio::time::sleep(every).await,
                    None => std::future::pending().await,
                }
            };
            let status = tokio::select! {
                notice = notices.recv() => match notice {
                    Ok(notice) if &notice.run_id == id => Some(notice.status),
                    Ok(notice) if notice.origin != crate::Origin::Resync => None,
                    // A resync or a lag: whether this run ended is unknown; look.
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.status(id).await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
                },
                () = recheck => self.status(id).await,
            };
            if let Some(status) = status.filter(|s| s.is_terminal()) {
                return status;
            }
        }
    }

    /// The status run `id` is stored with (a read that fails says nothing: the segment goes on).
    async fn status(&self, id: &RunId) -> Option<RunStatus> {
        self.store.rows.get(id).await.ok().map(|run| run.status())
    }

    /// Runs the loop for one segment and commits where it ended, in the segment's span when the run is
    /// traced ([`crate::telemetry`]); answers the run as committed.
    async fn drive(
        self: &Arc<Self>,
        run: RunRecord,
        spec: Arc<AgentSpec>,
        work: Work,
    ) -> Result<RunRecord, DriveError> {
        let trace = self.tracing.as_ref().and_then(|tracing| {
            // The first segment is the run's root span: a start before any model call.
            let first = matches!(work, Work::Create | Work::Start) && run.iterations == 0;
            let kind = if first { SegmentKind::First } else { SegmentKind::Later };
            let agent_loop = &spec.agent_loop;
            tracing.segment(&run, &spec.model, (agent_loop.system(), agent_loop.server()), kind)
        });
        let Some(trace) = trace.map(Arc::new) else {
            return self.drive_segment(run, spec, work, None).await;
        };
        let ended = self.drive_segment(run, spec, work, Some(Arc::clone(&trace))).await;
        match &ended {
            Ok(run) => trace.end(Ok(run)),
            Err(error) => trace.end(Err((error.kind(), error.to_string()))),
        }
        ended
    }

    /// [`drive`](Self::drive) without its span: `trace` gets the segment's calls.
    async fn drive_segment(
        self: &Arc<Self>,
        run: RunRecord,
        spec: Arc<AgentSpec>,
        work: Work,
        trace: Option<Arc<SegmentTrace>>,
    ) -> Result<RunRecord, DriveError> {
        let unborn = matches!(work, Work::Create).then(|| run.clone());
        let reader = GrantReader::new(&run, spec.forbid_self_approval, self.grants.enabled);
        let hooks = PersistHooks::new(Arc::clone(self), &run, reader, unborn, trace);
        // The run's id and metadata as stored: a resume in another process has them as the start did.
        let scope = run.scope();
        let segment = async {
            match work {
                Work::Start | Work::Create => spec.agent_loop.start(&scope, &run.input, &hooks).await,
                Work::Resume { suspension, plan: Some(plan) } => {
                    spec.agent_loop.resume_planned(&scope, suspension, plan, &hooks).await
                }
                Work::Resume { suspension, plan: None } => {
                    // Planned once, here: an edit its tool now refuses is that call's error result.
                    let decisions = decisions_for(&suspension, run.held_turn());
                    let grants = if suspension.has_granted_calls() {
                        hooks.grants_in_force().await?
                    } else {
                        Arc::from(Vec::new())
                    };
                    let plan = spec.agent_loop.plan_resume(&scope, &suspension, &decisions, &grants).await?;
                    spec.agent_loop.resume_planned(&scope, suspension, plan, &hooks).await
                }
            }
        };
        let outcome = match self.unless_ended_elsewhere(&run.id, &hooks, segment).await {
            Ok(outcome) => outcome,
            Err(status) => {
                tracing::info!(run = %run.id, %status, "the run ended elsewhere during a model call; the call was aborted");
                return Err(DriveError::ChangedHands { id: run.id.clone(), conflict: Conflict::NotRunning { status } });
            }
        };
        let now = self.clock.now();
        let mut events = hooks.take_buffer();
        // A held turn that needs nobody (every call that asked was allowed by a grant), resumed at once.
        let mut granted = None;
        let transition = match outcome {
            Ok(Outcome::Completed(done)) => {
                // The round of the last model call: at the iteration cap that is the closing completion
                // (max_iterations + 1), which the iteration counter does not count.
                let round = hooks.round().max(done.counters.iterations);
                events.push(events::run_completed(now, round, done.output.as_deref(), done.reason));
                Transition::Complete {
                    output: done.output,
                    reason: done.reason,
                    iterations: done.counters.iterations,
                    usage: done.counters.usage,
                }
            }
            Ok(Outcome::Suspended(suspension)) => {
                let expires_at =
                    spec.approval_ttl.map(|ttl| now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)));
                match suspend_transition(&run.id, &suspension, Vec::new(), expires_at, now) {
                    Ok((transition, _)) if suspension.decidable_calls().next().is_none() => {
                        // Stored as the held turn of the running run (no approval is requested), so a
                        // crash while a granted call runs is recovered from it.
                        granted = Some(suspension);
                        transition
                    }
                    Ok((transition, requested)) => {
                        events.push(requested);
                        transition
                    }
                    Err(error) => {
                        // Never reported as waiting on a turn that was not stored.
                        let error = RunError::new(RunErrorKind::UnstorableSuspension, error.to_string());
                        events.push(events::run_failed(now, hooks.round(), &error));
                        Transition::Fail { error }
                    }
                }
            }
            // This process is shutting down: the run is given back, with what the segment did so far,
            // for any node's worker to continue.
            // A write given up on a store outage (at shutdown) is not the run's fault: it is given back
            // too, or, while the store still refuses, left to its lease.
            Err(LoopError::Hook(_)) if hooks.released() || hooks.outage() => {
                let unborn = hooks.take_unborn();
                return match self.commit_end(&run.id, unborn.as_ref(), Transition::Release, events, now).await {
                    Ok(next) => {
                        tracing::info!(run = %run.id, "gave the run back at shutdown");
                        self.notify_change(&next, unborn.is_some());
                        Err(DriveError::Released { id: run.id.clone() })
                    }
                    Err(error) => {
                        tracing::warn!(run = %run.id, %error, "could not give the run back; its lease will expire and another process will take it over");
                        Err(DriveError::Store(error))
                    }
                };
            }
            Err(error) => {
                let error = match &error {
                    LoopError::Model { source, .. } => RunError::new(source.kind(), error.to_string()),
                    LoopError::Decision(e) => RunError::new(e.kind(), e.to_string()),
                    LoopError::Hook(e) => RunError::new(RunErrorKind::Store, e.to_string()),
                };
                events.push(events::run_failed(now, hooks.round(), &error));
                Transition::Fail { error }
            }
        };
        // The first call a grant allowed starts with the held turn's commit (one commit less), as a
        // person-approved call's start rides with the claim of its resume; planned here, run as planned.
        let mut granted_plan = None;
        if let Some(suspension) = &granted {
            // The grants the gate check just read cleared the turn: the plan is made on them.
            let in_force = match hooks.last_grants() {
                Some(grants) => grants,
                None => hooks.grants_in_force().await.unwrap_or_else(|_| Arc::from(Vec::new())),
            };
            if let Ok(mut plan) = spec.agent_loop.plan_resume(&scope, suspension, &BTreeMap::new(), &in_force).await {
                if let Some(call) = plan.commit_first_start() {
                    events.push(events::call_started(now, suspension.round, &run.id, &call));
                }
                granted_plan = Some(plan);
            }
        }
        let unborn = hooks.take_unborn();
        let error = match self.commit_end(&run.id, unborn.as_ref(), transition, events, now).await {
            Ok(next) => {
                self.notify_change(&next, unborn.is_some());
                if let Some(suspension) = granted {
                    let work = Work::Resume { suspension, plan: granted_plan };
                    return Box::pin(self.drive(next, spec, work)).await;
                }
                return Ok(next);
            }
            Err(StoreError::Conflict { id, conflict }) => {
                // Cancelled meanwhile, or another process took the run over: it owns the run now.
                tracing::info!(run = %id, %conflict, "run changed hands while driving; stopping");
                return Err(DriveError::ChangedHands { id: id.into(), conflict });
            }
            Err(error) if error.is_outage() => {
                // Given up at shutdown while the store still refuses: not the run's fault.
                tracing::warn!(run = %run.id, %error, "could not store the end of a segment before shutting down; its lease will expire and another process will continue the run");
                return Err(DriveError::Store(error));
            }
            Err(error) => error,
        };
        tracing::error!(run = %run.id, %error, "could not commit the end of a segment; failing the run");
        let failure = RunError::new(RunErrorKind::Store, format!("the run's progress could not be stored: {error}"));
        let event = events::run_failed(now, hooks.round(), &failure);
        match self.commit_end(&run.id, unborn.as_ref(), Transition::Fail { error: failure }, vec![event], now).await {
            Ok(next) => {
                self.notify_change(&next, unborn.is_some());
                Ok(next)
            }
            Err(e) => {
                tracing::error!(run = %run.id, error = %e, "could not fail the run either; its lease will expire and another process will recover it");
                Err(DriveError::Store(error))
            }
        }
    }

    /// Commits the end of a segment under this process's lease, waiting out a store outage
    /// ([`crate::outage`]): a retry that finds its write took effect (the answer was lost) answers the
    /// run as stored. A run not stored yet (as created) is created as it ends, its `run_started` first,
    /// in one attempt: it was never acknowledged to anyone (its starter waits for this write).
    async fn commit_end(
        &self,
        id: &RunId,
        unborn: Option<&RunRecord>,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> Result<RunRecord, StoreError> {
        if let Some(created) = unborn {
            let ended = created.apply(&transition, now).map_err(StoreError::Transition)?;
            let events = std::iter::once(events::run_started(created)).chain(events).collect();
            return self.store.rows.create(ended, events).await;
        }
        self.until_stored(id, "end of segment", |attempt| {
            let (transition, events) = (transition.clone(), events.clone());
            async move {
                let guard = Guard::Lease(self.node.clone());
                match self.store.rows.transition(id, guard, transition, events.clone(), now).await {
                    Err(error @ StoreError::Conflict { .. }) if attempt.retry => {
                        self.stored_already(id, &events).await.ok_or(error)
                    }
                    other => other,
                }
            }
        })
        .await
    }

    /// Fails a run whose stored state cannot be read, leaving every other run alone.
    pub(crate) async fn fail_corrupt(&self, run: &RunRecord, detail: &str) {
        let error = RunError::new(RunErrorKind::CorruptSuspension, detail);
        self.fail_claimed(run, error).await;
    }

    /// Fails a run this process has just taken over, whose last `takeovers` takeovers in a row each
    /// ended with the driving process stopped before any new step: driving it again would stop this one.
    pub(crate) async fn fail_crash_loop(&self, run: &RunRecord, takeovers: u32) {
        let message = format!(
            "the run was taken over {takeovers} times in a row after the process driving it stopped, without \
             reaching a new step; it is not driven again (see [runtime] max_takeovers). The last segment \
             may stop any process that drives it: check the server's logs and the run's last events"
        );
        self.fail_claimed(run, RunError::new(RunErrorKind::CrashLoop, message)).await;
    }

    /// Fails a run this process holds (claimed at `run.version`) with `error`.
    async fn fail_claimed(&self, run: &RunRecord, error: RunError) {
        let now = self.clock.now();
        let event = events::run_failed(now, run.iterations, &error);
        let error_kind = error.kind.clone();
        match self
            .store
            .rows
            .transition(&run.id, Guard::Version(run.version), Transition::Fail { error }, vec![event], now)
            .await
        {
            Ok(next) => self.notify(&next),
            Err(e) => tracing::warn!(run = %run.id, error = %e, kind = %error_kind, "could not fail a run"),
        }
    }
}
