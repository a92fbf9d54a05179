//! A waiting run's held turn as a value, and the decisions made from it.

use crate::Decision;
use serde_json::Value;
use tollgate_agent_protocol::{Actor, Call, CallId, RunId};

/// The turn a waiting run holds at the gate: what a person decides on. From [`Tollgate::pending`].
///
/// Its `digest` names exactly this turn: decisions made from it are refused (as stale) if the run moved
/// on in the meantime, so nobody approves something other than what they saw.
///
/// [`Tollgate::pending`]: crate::Tollgate::pending
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Held {
    /// The run.
    pub run_id: RunId,
    /// The turn's digest (`sha256:` + hex).
    pub digest: String,
    /// The approval deadline (RFC 3339 UTC), if the agent has one.
    pub expires_at: Option<String>,
    /// The actor who started the run.
    pub started_by: Actor,
    /// Every call of the held turn, allow-gated ones too; [`awaiting`](Self::awaiting) gives those
    /// that take a decision.
    pub calls: Vec<Call>,
}

impl Held {
    /// The calls that still need a decision, in the model's order.
    pub fn awaiting(&self) -> impl Iterator<Item = &Call> {
        self.calls.iter().filter(|c| c.takes_decision)
    }

    /// The call with this id.
    pub fn call(&self, call_id: &CallId) -> Option<&Call> {
        self.calls.iter().find(|c| &c.call_id == call_id)
    }

    fn with(&self, set: Set) -> Decisions {
        let awaiting = self.awaiting().map(|c| c.call_id.clone()).collect();
        Decisions { run_id: self.run_id.clone(), digest: self.digest.clone(), set, awaiting }
    }

    /// An empty set of decisions on this turn, to fill per call.
    pub fn decisions(&self) -> Decisions {
        self.with(Set::Each(Vec::new()))
    }

    /// A decision for every call that awaits one, from a function of the call.
    pub fn decide_each(&self, mut decide: impl FnMut(&Call) -> Decision) -> Decisions {
        let each = self.awaiting().map(|call| (call.call_id.clone(), decide(call))).collect();
        self.with(Set::Each(each))
    }

    /// Approves every call that awaits a decision.
    pub fn approve_all(&self) -> Decisions {
        self.with(Set::ApproveAll)
    }

    /// Denies every call that awaits a decision, telling the model why.
    pub fn deny_all(&self, reason: impl Into<String>) -> Decisions {
        self.with(Set::DenyAll(reason.into()))
    }
}

/// Decisions on one held turn, sent with [`Tollgate::decide`](crate::Tollgate::decide).
///
/// Calls left undecided keep waiting: the run resumes once every call that takes a decision has one,
/// whether they come in one request or several, from one person or several.
#[derive(Clone, Debug, PartialEq)]
#[must_use = "decisions do nothing until sent with `Tollgate::decide`"]
pub struct Decisions {
    pub(crate) run_id: RunId,
    pub(crate) digest: String,
    pub(crate) set: Set,
    /// The calls that awaited a decision when these were made from a [`Held`] (for turning an
    /// approve-all or deny-all into per-call decisions).
    awaiting: Vec<CallId>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Set {
    Each(Vec<(CallId, Decision)>),
    ApproveAll,
    DenyAll(String),
}

impl Decisions {
    /// Decisions on a turn known by its run id and digest (e.g. sent by an approver's browser).
    pub fn for_turn(run_id: impl Into<RunId>, digest: impl Into<String>) -> Self {
        Self { run_id: run_id.into(), digest: digest.into(), set: Set::Each(Vec::new()), awaiting: Vec::new() }
    }

    /// The run they are for.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// Adds one decision, replacing an earlier one for the same call in this set (after
    /// [`Held::approve_all`] or [`Held::deny_all`], the other calls keep that decision).
    pub fn decide(mut self, call_id: impl Into<CallId>, decision: Decision) -> Self {
        let call_id = call_id.into();
        match &mut self.set {
            Set::Each(each) => {
                each.retain(|(id, _)| *id != call_id);
                each.push((call_id, decision));
            }
            // A per-call decision after approve-all / deny-all: the others keep the all-decision.
            Set::ApproveAll | Set::DenyAll(_) => {
                let all = match &self.set {
                    Set::DenyAll(reason) => Decision::Deny { reason: reason.clone() },
                    _ => Decision::Approve,
                };
                let mut each: Vec<(CallId, Decision)> =
                    self.awaiting.iter().filter(|id| **id != call_id).map(|id| (id.clone(), all.clone())).collect();
                each.push((call_id, decision));
                self.set = Set::Each(each);
            }
        }
        self
    }

    /// Runs the call as the model asked.
    pub fn approve(self, call_id: impl Into<CallId>) -> Self {
        self.decide(call_id, Decision::Approve)
    }

    /// Runs the call with these arguments instead (checked against the tool's schema).
    pub fn edit(self, call_id: impl Into<CallId>, arguments: Value) -> Self {
        self.decide(call_id, Decision::Edit { arguments })
    }

    /// Does not run the call; the model is told `reason`.
    pub fn deny(self, call_id: impl Into<CallId>, reason: impl Into<String>) -> Self {
        self.decide(call_id, Decision::Deny { reason: reason.into() })
    }

    /// Does not run the call; `result` is its result for the model.
    pub fn respond(self, call_id: impl Into<CallId>, result: impl Into<String>) -> Self {
        self.decide(call_id, Decision::Respond { result: result.into() })
    }

    pub(crate) fn into_set(self) -> tollgate_agent_runtime::DecisionSet {
        match self.set {
            Set::Each(each) => tollgate_agent_runtime::DecisionSet::Each(each),
            Set::ApproveAll => tollgate_agent_runtime::DecisionSet::ApproveAll,
            Set::DenyAll(reason) => tollgate_agent_runtime::DecisionSet::DenyAll { reason },
        }
    }
}
