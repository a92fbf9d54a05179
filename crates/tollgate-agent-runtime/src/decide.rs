//! What a decision request does, decided without the store: [`plan_decision`] takes the run as read, its
//! held turn and the request, and answers the transition to commit (a compare-and-set on that read's
//! version), its events, and — when the request completes the held turn's set — the resume it claims.
//!
//! The rules, each stated here once (the CLI and the server ask the runtime, they keep no copy):
//! - only a waiting run takes decisions, and only on the turn digest the person saw;
//! - an agent with `forbid_self_approval` refuses the actor who started the run ([`check_decider`]);
//! - a decision names a held call that takes one (asks, or is in doubt; `HeldCall::takes_decision`), and no
//!   call is decided twice; a call that already ran before a crash is refused as such, and `approve_all` /
//!   `deny_all` pass over it as they pass over every call that takes no decision;
//! - the request whose decisions complete the set claims the resume in the same transition (or, with no
//!   worker free, queues the run for one, which claims it), so a run resumes exactly once however many
//!   people decide at the same moment.
//!
//! Checking edited arguments against the live tool is the agent loop's (`AgentLoop::check_decision`,
//! asynchronous); the runtime does it on the planned decisions before it commits them, in the I/O half
//! below (`Runtime::decide` and its kin): read the run, plan, check, compare-and-set, and read again and
//! plan again when another request committed first.

use crate::error::{CasFailure, DecideError, DriveError};
use crate::grants::GrantError;
use crate::hooks::GrantReader;
use crate::telemetry::WaitEnd;
use crate::{DECIDE_ATTEMPTS, DecisionSet, Runtime, Settled, Work, events};
use std::collections::HashSet;
use std::sync::Arc;
use tollgate_agent_core::{Actor, CallId, GrantId, GrantMatch, GrantRecord, GrantScope, RunId};
use tollgate_agent_core::{
    ApprovalCommand, ApprovalError, Decision, DecisionError, Decisions, EventKind, Guard, HeldTurn, Lease, Millis,
    NewEvent, RunRecord, RunState, RunStatus, StartingCall, Suspension, Transition, Vote,
};

/// A decision request as a caller sends it.
#[derive(Clone, Copy, Debug)]
pub struct DecisionRequest<'a> {
    /// The digest of the held turn the person saw.
    pub turn_digest: &'a str,
    /// The decisions.
    pub set: &'a DecisionSet,
    /// Who decides.
    pub actor: &'a Actor,
    /// Grants to make with this request's approvals (`remember`), by call id.
    pub remember: &'a [(CallId, RememberSpec)],
    /// The id of the signed link the decisions are made through ([`Runtime::decide_by_link`]), marked
    /// on their `decision` events.
    pub link: Option<&'a str>,
}

/// `remember` on an approval: a grant made in the same transaction (V2.md, grants). Its pattern is the
/// call's `suggested_match` when none is given, its life `[grants] default_ttl`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RememberSpec {
    /// Every run of the agent, or only the decided run.
    pub scope: GrantScope,
    /// The argument pattern.
    pub pattern: Option<serde_json::Map<String, serde_json::Value>>,
    /// How long it lasts.
    pub ttl: Option<std::time::Duration>,
    /// Why, for the record.
    pub reason: Option<String>,
}

/// What the agent's rules say about who may decide (from its `AgentSpec`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeciderRules {
    /// The actor who started a run may not decide its calls.
    pub forbid_self_approval: bool,
}

/// What a decision request does, as planned by [`plan_decision`].
#[derive(Clone, Debug, PartialEq)]
pub struct DecisionPlan {
    /// The decisions this request records, in the request's order (each still to be checked against
    /// the live tool before the commit).
    pub decided: Vec<(CallId, Decision)>,
    /// The transition to commit on the run's version as read: `Transition::Decide`, with the resume's
    /// lease when the set is complete and a worker is free here (complete without one: the run is
    /// queued).
    pub transition: Transition,
    /// Its events: one `decision` per call, then `run_resumed` (and the first decided call's
    /// `tool_started`) when it resumes.
    pub events: Vec<NewEvent>,
    /// The resume this request claims, when its decisions complete the set and a lease was given.
    pub resume: Option<PlannedResume>,
}

/// The resume a completing decision request claims.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedResume {
    /// The call whose `tool_started` is committed with the claim (the first call the resume runs, when a
    /// person decided it and nothing runs before it).
    pub started: Option<StartingCall>,
}

/// Refuses a request whose shape is wrong whatever the run: an empty list, or a call named twice.
pub fn check_request(set: &DecisionSet) -> Result<(), DecideError> {
    if let DecisionSet::Each(list) = set {
        if list.is_empty() {
            return Err(DecideError::NoDecisions);
        }
        let mut seen = HashSet::new();
        if let Some((dup, _)) = list.iter().find(|(id, _)| !seen.insert(id.as_str())) {
            return Err(DecideError::DecidedTwice { call_id: dup.clone() });
        }
    }
    Ok(())
}

/// Whether `actor` may decide the calls of `run` under its agent's rules.
pub fn check_decider(run: &RunRecord, actor: &Actor, rules: DeciderRules) -> Result<(), DecideError> {
    if rules.forbid_self_approval && *actor == run.created_by {
        return Err(DecideError::SelfApprovalForbidden { agent: run.agent.clone(), actor: actor.clone() });
    }
    Ok(())
}

/// The held turn of `run` when this request may decide on it: the run waits, the actor may decide, and
/// the digest is the held turn's. Needs no parse of the suspension, so it is checked first.
pub fn admit<'r>(
    run: &'r RunRecord,
    request: &DecisionRequest<'_>,
    rules: DeciderRules,
) -> Result<&'r HeldTurn, DecideError> {
    let RunState::Waiting(pending) = &run.state else {
        return Err(DecideError::NotWaiting { id: run.id.clone(), status: run.status() });
    };
    check_decider(run, request.actor, rules)?;
    if pending.turn_digest.as_str() != request.turn_digest {
        return Err(DecideError::StaleDigest { current: pending.turn_digest.clone() });
    }
    Ok(pending)
}

/// Why an approval refused a vote, as the decision request's error: a vote on an approval already
/// closed is v1's "already decided"; the rest are the approval's own refusal.
fn refused_vote(error: ApprovalError) -> DecideError {
    match error {
        ApprovalError::Closed { call_id, .. } => DecideError::AlreadyDecided { call_id },
        other => DecideError::Vote(other),
    }
}

/// The votes a decision request casts on the run as read — phase one of [`plan_decision`], pure: each
/// applied by its approval's rules to the held turn, refused here exactly as the store's compare-and-set
/// would refuse it.
#[derive(Clone, Debug, PartialEq)]
pub struct Votes {
    /// The decisions this request records, in the request's order.
    pub decided: Vec<(CallId, Decision)>,
    /// The same, as votes (with actor and time), for the transition.
    recorded: Vec<(CallId, Vote)>,
    /// The held turn with the votes taken.
    pub after: HeldTurn,
    /// One `decision` event per vote, then `run_resumed` when the votes settle the turn.
    events: Vec<NewEvent>,
    /// The held turn's round.
    round: u32,
    /// The grants this request's approvals make (`remember`), committed with the votes.
    remember: Vec<GrantRecord>,
}

impl Votes {
    /// True when the votes settle the last open approval: the run resumes.
    pub fn completes(&self) -> bool {
        self.after.complete_for_resume()
    }
}

/// Plans the votes `request` casts on `run`, whose held turn is `held` (parsed from the run's stored
/// suspension), at `now`: phase one of a decision, pure.
pub fn plan_votes(
    run: &RunRecord,
    held: &Suspension,
    request: &DecisionRequest<'_>,
    rules: DeciderRules,
    now: Millis,
) -> Result<Votes, DecideError> {
    check_request(request.set)?;
    let pending = admit(run, request, rules)?;
    let actor = request.actor;
    let open = || pending.approvals.iter().filter(|a| a.is_pending());
    let decided: Vec<(CallId, Decision)> = match request.set {
        DecisionSet::Each(list) => list.clone(),
        // One approval by this actor for each open approval it has not approved yet.
        DecisionSet::ApproveAll => open()
            .filter(|a| !a.approvals_given().contains(&actor))
            .map(|a| (a.call_id.clone(), Decision::Approve))
            .collect(),
        DecisionSet::DenyAll { reason } => {
            open().map(|a| (a.call_id.clone(), Decision::Deny { reason: reason.clone() })).collect()
        }
    };
    if decided.is_empty() {
        // Open approvals left mean this actor approved each already: a second approval is a conflict.
        return Err(match open().next() {
            Some(a) => {
                DecideError::Vote(ApprovalError::AlreadyApproved { call_id: a.call_id.clone(), actor: actor.clone() })
            }
            None => DecideError::NothingToDecide,
        });
    }
    // The votes applied, in the request's order, to the held turn as read: the same rules the store's
    // compare-and-set applies (`RunRecord::apply`), so a vote refused here is never committed.
    let mut after = pending.clone();
    let mut recorded: Vec<(CallId, Vote)> = Vec::with_capacity(decided.len());
    let mut events: Vec<NewEvent> = Vec::with_capacity(decided.len() + 2);
    for (call_id, decision) in &decided {
        let call = held.call(call_id).ok_or_else(|| DecisionError::UnknownCall(call_id.clone()))?;
        if let Some(refused) = call.refuse_decision() {
            return Err(refused.into());
        }
        let approval = after
            .approvals
            .iter_mut()
            .find(|a| &a.call_id == call_id)
            .ok_or_else(|| DecisionError::NotDecidable { call_id: call_id.clone(), gate: call.gate() })?;
        let vote = Vote { decision: decision.clone(), actor: actor.clone(), at: now };
        *approval = approval.apply(&ApprovalCommand::Vote(vote.clone())).map_err(refused_vote)?;
        let mut decision = events::decision(now, held.round, call_id, &vote, approval);
        if let (Some(link), serde_json::Value::Object(data)) = (request.link, &mut decision.data) {
            data.insert("link".into(), serde_json::Value::String(link.to_owned()));
        }
        events.push(decision);
        recorded.push((call_id.clone(), vote));
    }
    if after.complete_for_resume() {
        events.push(events::run_resumed(now, held.round, actor));
    }
    Ok(Votes { decided, recorded, after, events, round: held.round, remember: Vec::new() })
}

impl Runtime {
    /// The grants `request`'s `remember` makes, each checked (an approval of this request, a call its
    /// tool and policy let a grant allow, a pattern of JSON pointers, a ttl within `[grants] max_ttl`),
    /// and the `decision` event of each remembered call marked with its grant. Nothing is recorded when
    /// one is refused.
    fn plan_remember(
        &self,
        run: &RunRecord,
        held: &Suspension,
        request: &DecisionRequest<'_>,
        decided: &[(CallId, Decision)],
        events: &mut [NewEvent],
        now: Millis,
    ) -> Result<Vec<GrantRecord>, DecideError> {
        let settings = self.inner.grants;
        let mut made = Vec::with_capacity(request.remember.len());
        for (call_id, spec) in request.remember {
            if !decided.iter().any(|(id, d)| id == call_id && matches!(d, Decision::Approve)) {
                return Err(DecideError::Remember {
                    call_id: call_id.clone(),
                    refused: GrantError::InvalidScope("`remember` goes with an `approve` of the same call"),
                });
            }
            let refused = |refused: GrantError| DecideError::Remember { call_id: call_id.clone(), refused };
            if !settings.enabled {
                return Err(refused(GrantError::Disabled));
            }
            let call = held.call(call_id).ok_or_else(|| DecisionError::UnknownCall(call_id.clone()))?;
            // Offered only where a grant may allow the call: it asks, one person decides it, its tool and
            // policy let a grant stand in.
            let Some(suggested) = &call.suggested_match else {
                return Err(refused(GrantError::NotGrantable { agent: run.agent.clone(), tool: call.tool.clone() }));
            };
            let matcher = GrantMatch::new(spec.pattern.clone().unwrap_or_else(|| suggested.clone()))
                .map_err(|e| refused(GrantError::InvalidMatch(e)))?;
            let ttl = spec.ttl.unwrap_or(settings.default_ttl);
            if ttl.is_zero() || ttl > settings.max_ttl {
                return Err(refused(GrantError::InvalidTtl { asked: ttl, max: settings.max_ttl }));
            }
            let grant = GrantRecord {
                id: GrantId::new(uuid::Uuid::now_v7().to_string()),
                agent: run.agent.clone(),
                tool: call.tool.clone(),
                matcher,
                scope: spec.scope,
                run_id: (spec.scope == GrantScope::Run).then(|| run.id.clone()),
                reason: spec.reason.clone(),
                created_by: request.actor.clone(),
                created_at: now,
                expires_at: now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
                revoked: None,
                uses: 0,
            };
            // The call's `decision` event names the grant its approval made.
            if let Some(event) = events
                .iter_mut()
                .find(|e| e.kind == EventKind::Decision && e.data["call_id"].as_str() == Some(call_id.as_str()))
                && let serde_json::Value::Object(data) = &mut event.data
            {
                data.insert("grant".into(), serde_json::Value::String(grant.id.to_string()));
            }
            made.push(grant);
        }
        Ok(made)
    }
}

/// Phase two of a decision, pure: the transition that commits `votes` on `run` as read at `now`, and its
/// events. `resume_lease`, for votes that settle the turn, claims the resume in the same transaction
/// (none: the run is queued for a worker); `started` is the call the claimed resume runs first when a
/// person decided it ([`ResumePlan::commit_first_start`](tollgate_agent_core::ResumePlan::commit_first_start)): its `tool_started` rides with the claim,
/// one commit less between the decision and the call.
pub fn finish_decision(
    run: &RunRecord,
    votes: Votes,
    now: Millis,
    resume_lease: Option<Lease>,
    started: Option<StartingCall>,
) -> DecisionPlan {
    let completes = votes.completes();
    let Votes { decided, recorded, mut events, round, remember, .. } = votes;
    let resume = (completes && resume_lease.is_some()).then(|| {
        if let Some(call) = &started {
            events.push(events::call_started(now, round, &run.id, call));
        }
        PlannedResume { started }
    });
    let transition = Transition::Vote { votes: recorded, resume: resume_lease.filter(|_| completes), remember };
    DecisionPlan { decided, transition, events, resume }
}

/// Plans what `request` does to `run` (both phases, no I/O between): [`plan_votes`], then
/// [`finish_decision`] with `first_decided` naming, from every decision of the settled turn, the call a
/// claimed resume runs first.
pub fn plan_decision(
    run: &RunRecord,
    held: &Suspension,
    request: &DecisionRequest<'_>,
    rules: DeciderRules,
    now: Millis,
    resume_lease: Option<Lease>,
    first_decided: impl FnOnce(&Decisions) -> Option<StartingCall>,
) -> Result<DecisionPlan, DecideError> {
    let votes = plan_votes(run, held, request, rules, now)?;
    let started =
        (votes.completes() && resume_lease.is_some()).then(|| first_decided(&votes.after.decisions())).flatten();
    Ok(finish_decision(run, votes, now, resume_lease, started))
}

/// The I/O half of a decision request: the checks that need the live agent, the compare-and-set of the votes
/// [`plan_decision`] planned (read again and planned again when another request committed first), and
/// the resume it claims.
impl Runtime {
    /// Whether `actor` may decide the calls of a run of `agent` started by `created_by` (the agent's
    /// `forbid_self_approval`). [`decide`](Self::decide) checks the same; a caller asks first to avoid
    /// asking a person for decisions that would be refused.
    pub fn check_decider(&self, agent: &str, created_by: &Actor, actor: &Actor) -> Result<(), DecideError> {
        let spec = self.inner.agent(agent).ok_or_else(|| DecideError::UnknownAgent(agent.to_owned()))?;
        if spec.forbid_self_approval && actor == created_by {
            return Err(DecideError::SelfApprovalForbidden { agent: agent.to_owned(), actor: actor.clone() });
        }
        Ok(())
    }

    /// Checks one decision against run `id`'s held turn, as [`decide`](Self::decide) would (the call takes
    /// a decision, edited arguments pass the live tool's checks), without recording anything.
    pub async fn check_decision(&self, id: &RunId, call_id: &CallId, decision: &Decision) -> Result<(), DecideError> {
        let run = self.get(id).await?;
        let RunState::Waiting(pending) = &run.state else {
            return Err(DecideError::NotWaiting { id: run.id.clone(), status: run.status() });
        };
        let spec = self.inner.agent(&run.agent).ok_or_else(|| DecideError::UnknownAgent(run.agent.clone()))?;
        let suspension = pending
            .suspension
            .parse()
            .map_err(|e| DecideError::CorruptSuspension { id: run.id.clone(), detail: e.to_string() })?;
        Ok(spec.agent_loop.check_decision(&run.scope(), &suspension, call_id, decision).await?)
    }

    /// Records decisions for a waiting run. The request whose decisions complete the held turn's set
    /// resumes the run (in the background); the answer is the run after the decisions were recorded.
    pub async fn decide(
        &self,
        id: &RunId,
        turn_digest: &str,
        set: DecisionSet,
        actor: &Actor,
    ) -> Result<RunRecord, DecideError> {
        self.decide_remembering(id, turn_digest, set, actor, &[]).await
    }

    /// [`decide`](Self::decide), making a grant with each approval named in `remember`, in the same
    /// transaction as the decisions ([`RememberSpec`]).
    pub async fn decide_remembering(
        &self,
        id: &RunId,
        turn_digest: &str,
        set: DecisionSet,
        actor: &Actor,
        remember: &[(CallId, RememberSpec)],
    ) -> Result<RunRecord, DecideError> {
        let request = DecisionRequest { turn_digest, set: &set, actor, remember, link: None };
        self.decide_from(None, id, &request, &mut None).await
    }

    /// One decision, `decision` on call `call_id` by `actor`, made through the signed link whose id is
    /// `link` (V2.md section 4; docs/notifications.md): decided as [`decide`](Self::decide) decides, its
    /// `decision` event marked `"link": LINK`, so that [`link_used`](Self::link_used) tells a second
    /// use of the link from a run that moved on.
    pub async fn decide_by_link(
        &self,
        id: &RunId,
        turn_digest: &str,
        call_id: &CallId,
        decision: Decision,
        actor: &Actor,
        link: &str,
    ) -> Result<RunRecord, DecideError> {
        let set = DecisionSet::Each(vec![(call_id.clone(), decision)]);
        let request = DecisionRequest { turn_digest, set: &set, actor, remember: &[], link: Some(link) };
        self.decide_from(None, id, &request, &mut None).await
    }

    /// Whether run `id`'s log records a decision made through the signed link whose id is `link`.
    pub async fn link_used(&self, id: &RunId, link: &str) -> Result<bool, crate::ReadError> {
        let events = self.all_events(id, 0).await?;
        Ok(events.iter().any(|event| {
            event.kind == EventKind::Decision && event.data.get("link").and_then(|l| l.as_str()) == Some(link)
        }))
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
        actor: &Actor,
    ) -> Result<RunRecord, DecideError> {
        self.decide_and_wait_remembering(loaded, turn_digest, set, actor, &[]).await
    }

    /// [`decide_and_wait`](Self::decide_and_wait), making a grant with each approval named in `remember`.
    pub async fn decide_and_wait_remembering(
        &self,
        loaded: &RunRecord,
        turn_digest: &str,
        set: DecisionSet,
        actor: &Actor,
        remember: &[(CallId, RememberSpec)],
    ) -> Result<RunRecord, DecideError> {
        let (done, driven) = tokio::sync::oneshot::channel();
        let mut waiter = Some(done);
        let request = DecisionRequest { turn_digest, set: &set, actor, remember, link: None };
        let decided = self.decide_from(Some(loaded), &loaded.id, &request, &mut waiter).await?;
        if !matches!(decided.status(), RunStatus::Running | RunStatus::Queued) {
            return Ok(decided);
        }
        if waiter.is_none() {
            // This request resumed the run: the drive it started answers with where the run settled.
            match driven.await {
                Ok(Ok(settled_run)) => return Ok(settled_run),
                Ok(Err(DriveError::Store(error))) => return Err(DecideError::Store(error)),
                Ok(Err(DriveError::ChangedHands { .. } | DriveError::Released { .. })) | Err(_) => {}
            }
        }
        // Resumed by another request, queued for a worker, or the drive lost the run to another process
        // or gave it back: wait on the store.
        Ok(self.wait_settled(&loaded.id).await?)
    }

    /// Decides on `loaded` first when given, then on the run as stored, reading it again each time
    /// another decision commits first. `waiter`, if any, is handed to the drive when these decisions
    /// resume the run.
    async fn decide_from(
        &self,
        loaded: Option<&RunRecord>,
        id: &RunId,
        request: &DecisionRequest<'_>,
        waiter: &mut Option<Settled>,
    ) -> Result<RunRecord, DecideError> {
        check_request(request.set)?;
        if let Some(run) = loaded
            && let Ok(decided) = self.try_decide(run, request, waiter).await
        {
            return Ok(decided);
        }
        for _ in 0..DECIDE_ATTEMPTS {
            let run = self.get(id).await?;
            match self.try_decide(&run, request, waiter).await {
                Err(DecideError::LostRace { .. }) => continue,
                other => return other,
            }
        }
        Err(DecideError::LostRace { id: id.clone() })
    }

    /// One attempt on the run as read: plan the votes ([`plan_votes`]), check this request's edits with
    /// the live tools and, when the votes settle the turn, plan the resume once (`AgentLoop::plan_resume`),
    /// commit on the read's version ([`finish_decision`]), and hand the drive the plan the claim was made on.
    async fn try_decide(
        &self,
        run: &RunRecord,
        request: &DecisionRequest<'_>,
        waiter: &mut Option<Settled>,
    ) -> Result<RunRecord, DecideError> {
        let spec = self.inner.agent(&run.agent).ok_or_else(|| DecideError::UnknownAgent(run.agent.clone()))?;
        let rules = DeciderRules { forbid_self_approval: spec.forbid_self_approval };
        // Refusals that need no parse of the held turn come first: a corrupt turn is failed only on a
        // request that would otherwise be decided.
        let pending = admit(run, request, rules)?;
        let suspension = match pending.suspension.parse() {
            Ok(s) => s,
            Err(e) => {
                self.inner.fail_corrupt(run, &e.to_string()).await;
                return Err(DecideError::CorruptSuspension { id: run.id.clone(), detail: e.to_string() });
            }
        };
        let now = self.inner.clock.now();
        let mut votes = plan_votes(run, &suspension, request, rules, now)?;
        if !request.remember.is_empty() {
            votes.remember = self.plan_remember(run, &suspension, request, &votes.decided, &mut votes.events, now)?;
        }
        // Each edit of this request is checked against the live tool once, before anything is recorded:
        // with the resume's plan when the votes settle the turn (the plan checks every edit of the turn,
        // and this request's are refused rather than planned as errors), else on its own.
        let mut resume_plan = None;
        if votes.completes() {
            // A call a grant allowed runs only if the grant is still in force now (read only when the turn
            // has such a call).
            let grants = if suspension.has_granted_calls() {
                let reader = GrantReader::new(run, spec.forbid_self_approval, self.inner.grants.enabled);
                let (cache, store) = (&self.inner.grant_cache, &*self.inner.store.grants);
                reader.read(cache, store, &run.id, now).await.map_err(DecideError::Store)?
            } else {
                Arc::from(Vec::new())
            };
            let plan =
                spec.agent_loop.plan_resume(&run.scope(), &suspension, &votes.after.decisions(), &grants).await?;
            if let Some((call_id, message)) =
                votes.decided.iter().find_map(|(call_id, _)| plan.refused_edit(call_id).map(|m| (call_id, m)))
            {
                let refused = DecisionError::InvalidEdit { call_id: call_id.clone(), message: message.to_owned() };
                tracing::warn!(run = %run.id, call = %call_id, actor = %request.actor, reason = %refused, "decision refused");
                return Err(refused.into());
            }
            resume_plan = Some(plan);
        } else {
            for (call_id, decision) in votes.decided.iter().filter(|(_, d)| matches!(d, Decision::Edit { .. })) {
                if let Err(refused) = spec.agent_loop.check_decision(&run.scope(), &suspension, call_id, decision).await
                {
                    // Nothing is recorded on the run (the call still waits for a decision); the process's
                    // log keeps who tried what and why it was refused.
                    let (actor, action) = (request.actor, decision.action());
                    tracing::warn!(run = %run.id, call = %call_id, %actor, %action, reason = %refused, "decision refused");
                    return Err(refused.into());
                }
            }
        }
        // A free worker resumes the run in the same transaction as the votes that settle its turn;
        // without one (all busy, or shutting down) those votes queue it for any node's worker.
        let settles = votes.completes();
        let slot = resume_plan.is_some().then(|| self.inner.pool.try_slot()).flatten();
        let lease = slot.as_ref().map(|_| self.inner.lease(now));
        let started = match (&mut resume_plan, &lease) {
            (Some(plan), Some(_)) => plan.commit_first_start(),
            _ => None,
        };
        let plan = finish_decision(run, votes, now, lease, started);
        let guard = Guard::Version(run.version);
        let next = match self.inner.store.rows.transition(&run.id, guard, plan.transition, plan.events, now).await {
            Ok(next) => next,
            Err(failed) => {
                return Err(match CasFailure::from(failed) {
                    // Someone acted on the run since it was read: read it again and decide on what is stored.
                    CasFailure::Overtaken => DecideError::LostRace { id: run.id.clone() },
                    CasFailure::NotFound(id) => DecideError::NotFound(id),
                    CasFailure::Store(error) => DecideError::Store(error),
                });
            }
        };
        self.inner.notify(&next);
        if settles && let (Some(tracing), Some(turn)) = (&self.inner.tracing, next.held_turn()) {
            // The expiry sweep decides as `system`: the wait ended by its deadline.
            let end = if request.actor.as_str() == crate::maintenance::SYSTEM_ACTOR {
                WaitEnd::Expired
            } else {
                WaitEnd::Settled { actor: request.actor.as_str(), by_link: request.link.is_some() }
            };
            tracing.wait_ended(&next, turn, end, now);
        }
        if let (Some(_), Some(resume_plan), Some(slot)) = (plan.resume, resume_plan, slot)
            && next.status() == RunStatus::Running
        {
            // The drive executes the plan made here, as it is: nothing is planned or checked again.
            self.inner.spawn_drive(
                next.clone(),
                spec,
                Work::Resume { suspension, plan: Some(resume_plan) },
                waiter.take(),
                slot,
            );
        } else if next.status() == RunStatus::Queued {
            // A process that queues work claims it too (no-op once its claim loop runs).
            self.start_workers();
            self.inner.pool.queued();
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tollgate_agent_core::{
        Approval, Counters, EventKind, Gate, HeldCallState, Requirement, RunStatus, StoredSuspension, ToolResult,
        TurnDigest,
    };

    const NOW: Millis = 1_796_000_000_000;
    const DIGEST: &str = "sha256:held";

    fn call(id: &str, state: HeldCallState) -> tollgate_agent_core::HeldCall {
        tollgate_agent_core::HeldCall {
            call_id: id.into(),
            tool: "write".into(),
            arguments: json!({"text": id}),
            preview: None,
            observed: None,
            state,
            requirement: Requirement::SINGLE,
            suggested_match: None,
        }
    }

    /// A turn of three calls: two that ask (`a`, `b`) and one the gate allowed (`c`).
    fn held() -> Suspension {
        Suspension {
            schema_version: tollgate_agent_core::SCHEMA_VERSION,
            round: 2,
            transcript: Vec::new(),
            calls: vec![
                call("a", HeldCallState::Asks),
                call("b", HeldCallState::Asks),
                call("c", HeldCallState::Allowed),
            ],
            counters: Counters::default(),
            trace: Vec::new(),
            tools: Vec::new(),
            turn_digest: TurnDigest(DIGEST.into()),
        }
    }

    /// Alice's run, waiting on [`held`], with `decided` already recorded (by bob).
    fn waiting(decided: &[&str]) -> RunRecord {
        let mut run = RunRecord::new("run-1".into(), "writer".into(), "x".into(), "alice".into(), NOW - 10, None);
        run.state = RunState::Waiting(HeldTurn {
            suspension: StoredSuspension::from_stored("{}".into()),
            turn_digest: TurnDigest(DIGEST.into()),
            approvals: ["a", "b"]
                .into_iter()
                .map(|id| {
                    let pending = Approval::pending(format!("ap-{id}").into(), "run-1", id, Requirement::SINGLE, None);
                    if !decided.contains(&id) {
                        return pending;
                    }
                    let vote = Vote { decision: Decision::Approve, actor: "bob".into(), at: NOW - 5 };
                    pending.apply(&ApprovalCommand::Vote(vote)).unwrap_or_else(|e| panic!("{e}"))
                })
                .collect(),
            expires_at: None,
        });
        run
    }

    fn lease() -> Lease {
        Lease { owner: "node-a".into(), expires_at: NOW + 30_000 }
    }

    fn plan(run: &RunRecord, set: DecisionSet, actor: &str, rules: DeciderRules) -> Result<DecisionPlan, DecideError> {
        let request =
            DecisionRequest { turn_digest: DIGEST, set: &set, actor: &Actor::from(actor), remember: &[], link: None };
        plan_decision(run, &held(), &request, rules, NOW, Some(lease()), |_| None)
    }

    fn each(list: &[(&str, Decision)]) -> DecisionSet {
        DecisionSet::Each(list.iter().map(|(id, d)| (CallId::from(*id), d.clone())).collect())
    }

    fn kinds(plan: &DecisionPlan) -> Vec<EventKind> {
        plan.events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_stale_digest_is_refused_naming_the_held_turn() {
        let set = DecisionSet::ApproveAll;
        let request =
            DecisionRequest { turn_digest: "sha256:old", set: &set, actor: &"bob".into(), remember: &[], link: None };
        let refused =
            plan_decision(&waiting(&[]), &held(), &request, DeciderRules::default(), NOW, Some(lease()), |_| None);
        assert!(matches!(refused, Err(DecideError::StaleDigest { current }) if current.as_str() == DIGEST));
    }

    #[test]
    fn self_approval_is_refused_only_when_the_agent_forbids_it() {
        let forbid = DeciderRules { forbid_self_approval: true };
        let own = plan(&waiting(&[]), DecisionSet::ApproveAll, "alice", forbid);
        assert!(
            matches!(&own, Err(DecideError::SelfApprovalForbidden { agent, actor }) if agent == "writer" && actor == "alice"),
            "{own:?}"
        );
        assert!(plan(&waiting(&[]), DecisionSet::ApproveAll, "bob", forbid).is_ok());
        assert!(plan(&waiting(&[]), DecisionSet::ApproveAll, "alice", DeciderRules::default()).is_ok());
    }

    #[test]
    fn a_call_already_decided_is_refused_by_name() {
        let again = plan(&waiting(&["a"]), each(&[("a", Decision::Approve)]), "carol", DeciderRules::default());
        assert!(matches!(again, Err(DecideError::AlreadyDecided { call_id }) if call_id == "a"));
    }

    #[test]
    fn the_request_completing_the_set_claims_the_resume() {
        let started = StartingCall {
            call_id: "b".into(),
            tool: "write".into(),
            arguments: json!({"text": "b"}),
            gate: Gate::Ask,
            grant: None,
        };
        let set = each(&[("b", Decision::Deny { reason: "no".into() })]);
        let request =
            DecisionRequest { turn_digest: DIGEST, set: &set, actor: &"carol".into(), remember: &[], link: None };
        let planned =
            plan_decision(&waiting(&["a"]), &held(), &request, DeciderRules::default(), NOW, Some(lease()), |all| {
                assert_eq!(all.len(), 2, "the resume sees every decision, the recorded one included");
                Some(started.clone())
            });
        let planned = planned.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(planned.resume, Some(PlannedResume { started: Some(started) }));
        assert_eq!(kinds(&planned), vec![EventKind::Decision, EventKind::RunResumed, EventKind::ToolStarted]);
        let Transition::Vote { votes: decisions, resume, .. } = &planned.transition else {
            panic!("{:?}", planned.transition)
        };
        assert_eq!(resume.as_ref(), Some(&lease()));
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].1.actor, "carol");
        assert_eq!(decisions[0].1.at, NOW);
        // The transition applies to the run as read.
        let next = waiting(&["a"]).apply(&planned.transition, NOW).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.status(), RunStatus::Running);
    }

    #[test]
    fn a_partial_set_records_and_does_not_resume() {
        let planned = plan(&waiting(&[]), each(&[("a", Decision::Approve)]), "bob", DeciderRules::default());
        let planned = planned.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(planned.resume, None);
        assert_eq!(kinds(&planned), vec![EventKind::Decision]);
        assert!(matches!(&planned.transition, Transition::Vote { resume: None, .. }));
        let next = waiting(&[]).apply(&planned.transition, NOW).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.status(), RunStatus::WaitingForApproval);
    }

    #[test]
    fn approve_all_and_deny_all_decide_only_the_undecided_calls() {
        let approved = plan(&waiting(&["a"]), DecisionSet::ApproveAll, "bob", DeciderRules::default());
        let approved = approved.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(approved.decided, vec![(CallId::from("b"), Decision::Approve)]);
        assert!(approved.resume.is_some());

        let denied =
            plan(&waiting(&[]), DecisionSet::DenyAll { reason: "late".into() }, "bob", DeciderRules::default());
        let denied = denied.unwrap_or_else(|e| panic!("{e}"));
        let reason = Decision::Deny { reason: "late".into() };
        assert_eq!(denied.decided, vec![(CallId::from("a"), reason.clone()), (CallId::from("b"), reason)]);
        assert_eq!(kinds(&denied), vec![EventKind::Decision, EventKind::Decision, EventKind::RunResumed]);

        let nothing = plan(&waiting(&["a", "b"]), DecisionSet::ApproveAll, "bob", DeciderRules::default());
        assert!(matches!(nothing, Err(DecideError::NothingToDecide)));
    }

    #[test]
    fn unknown_and_undecidable_calls_are_invalid_decisions() {
        let unknown = plan(&waiting(&[]), each(&[("z", Decision::Approve)]), "bob", DeciderRules::default());
        assert!(matches!(unknown, Err(DecideError::Invalid(DecisionError::UnknownCall(id))) if id == "z"));
        let allowed = plan(&waiting(&[]), each(&[("c", Decision::Approve)]), "bob", DeciderRules::default());
        assert!(
            matches!(allowed, Err(DecideError::Invalid(DecisionError::NotDecidable { call_id, gate: Gate::Allow })) if call_id == "c")
        );
        let mut finished = held();
        finished.calls[0].state = HeldCallState::Finished(ToolResult {
            call_id: "a".into(),
            tool: "write".into(),
            content: "ok".into(),
            is_error: false,
            denied: false,
            images: Vec::new(),
        });
        let set = each(&[("a", Decision::Approve)]);
        let request =
            DecisionRequest { turn_digest: DIGEST, set: &set, actor: &"bob".into(), remember: &[], link: None };
        let settled =
            plan_decision(&waiting(&[]), &finished, &request, DeciderRules::default(), NOW, Some(lease()), |_| None);
        assert!(
            matches!(&settled, Err(DecideError::Invalid(DecisionError::AlreadyRan { call_id })) if call_id == "a"),
            "{settled:?}"
        );
        assert!(settled.is_err_and(|e| e.to_string().contains("already ran")));
    }

    /// After a crash settled `a` (it ran) and left `b` in doubt, the held turn requires only `b`: deciding
    /// it alone completes the set exactly as `approve_all` does.
    #[test]
    fn a_finished_call_is_skipped_alike_by_approve_all_and_by_deciding_the_rest() {
        let mut recovered = held();
        recovered.calls[0].state = HeldCallState::Finished(ToolResult {
            call_id: "a".into(),
            tool: "write".into(),
            content: "ok".into(),
            is_error: false,
            denied: false,
            images: Vec::new(),
        });
        recovered.calls[1].state = HeldCallState::InDoubt;
        let mut run = waiting(&[]);
        if let RunState::Waiting(pending) = &mut run.state {
            pending.approvals.retain(|a| recovered.call(&a.call_id).is_some_and(|c| c.takes_decision()));
        }
        let plan_on = |set: DecisionSet| {
            let request =
                DecisionRequest { turn_digest: DIGEST, set: &set, actor: &"bob".into(), remember: &[], link: None };
            plan_decision(&run, &recovered, &request, DeciderRules::default(), NOW, Some(lease()), |_| None)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let all = plan_on(DecisionSet::ApproveAll);
        let one = plan_on(each(&[("b", Decision::Approve)]));
        assert_eq!(
            all.decided,
            vec![(CallId::from("b"), Decision::Approve)],
            "approve_all passes over the finished call"
        );
        assert_eq!(one, all, "deciding the remaining call resumes exactly as approve_all does");
        assert!(one.resume.is_some());
        let denied = plan_on(DecisionSet::DenyAll { reason: "no".into() });
        assert_eq!(denied.decided, vec![(CallId::from("b"), Decision::Deny { reason: "no".into() })]);
    }

    #[test]
    fn malformed_requests_and_runs_not_waiting_are_refused() {
        let empty = plan(&waiting(&[]), DecisionSet::Each(Vec::new()), "bob", DeciderRules::default());
        assert!(matches!(empty, Err(DecideError::NoDecisions)));
        let twice = plan(
            &waiting(&[]),
            each(&[("a", Decision::Approve), ("a", Decision::Approve)]),
            "bob",
            DeciderRules::default(),
        );
        assert!(matches!(twice, Err(DecideError::DecidedTwice { call_id }) if call_id == "a"));
        let mut ended = waiting(&[]);
        ended.state = RunState::Queued { resuming: None };
        let refused = plan(&ended, DecisionSet::ApproveAll, "bob", DeciderRules::default());
        assert!(matches!(refused, Err(DecideError::NotWaiting { status: RunStatus::Queued, .. })));
    }
}
